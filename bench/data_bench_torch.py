#!/usr/bin/python3
"""bench/data_bench_torch.py: the peer of bench/data_bench (which runs it): torchvision's
DataLoader over the same images with the same transforms (RandomResizedCrop(S), horizontal
flip, ToTensor, Normalize with ImageNet's constants; PIL decodes), the same number of
worker processes and batch size. Prints one line: "images/sec: X cpu_images/sec: Y" (the
medians of REPEATS passes of IMAGES images after one warm-up batch; Y counts CPU
seconds, the workers' per image plus the main process's, so it holds on a shared
machine where wall time does not).

  data_bench_torch.py FILELIST SIZE WORKERS BATCH IMAGES REPEATS
"""
import statistics
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class Files(Dataset):
    def __init__(self, paths, tf):
        self.paths, self.tf = paths, tf

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        t0 = time.process_time()   # this worker's CPU time: what the image cost
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        x = self.tf(img)
        return x, time.process_time() - t0


def main():
    listfile, size, workers, batch, images, repeats = sys.argv[1], *map(int, sys.argv[2:7])
    paths = [l.split()[0] for l in open(listfile) if l.strip()]
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    # Enough passes over the files for the warm-up batch and every timed pass.
    need = batch + images * repeats
    ds = Files((paths * (need // len(paths) + 1))[:need], tf)
    loader = DataLoader(ds, batch_size=batch, num_workers=workers, shuffle=False,
                        persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else 2)
    it = iter(loader)
    next(it)   # the workers are up
    rates, cpu_rates = [], []
    for _ in range(repeats):
        n, cpu, t0, c0 = 0, 0.0, time.perf_counter(), time.process_time()
        while n < images:
            x, costs = next(it)
            n += x.shape[0]
            cpu += float(costs.sum())
        rates.append(n / (time.perf_counter() - t0))
        # CPU seconds: the workers' per image, plus the main process's (collation)
        cpu_rates.append(n / (cpu + time.process_time() - c0))
    print("images/sec: %.1f cpu_images/sec: %.1f" % (statistics.median(rates), statistics.median(cpu_rates)))


if __name__ == "__main__":
    main()
