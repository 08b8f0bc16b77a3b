#!/usr/bin/python3
"""bench/torch_layer_bench.py: the shapes of bench/nn_layer_bench.c in PyTorch (CPU),
median ms of forward and backward (grad of x and of the weights) per layer.
Usage: /usr/bin/python3 bench/torch_layer_bench.py [--threads N] [--batch N] [--reps N]"""
import argparse, time
import torch, torch.nn.functional as F

LAYERS = [
    ("r20 conv1 3->16 3x3 32x32", "c", 3, 32, 32, 16, 3, 1, 1),
    ("r20 conv 16->16 3x3 32x32", "c", 16, 32, 32, 16, 3, 1, 1),
    ("r20 conv 16->32 3x3 s2 32x32", "c", 16, 32, 32, 32, 3, 2, 1),
    ("r20 conv 16->32 1x1 s2 32x32", "c", 16, 32, 32, 32, 1, 2, 0),
    ("r20 conv 32->32 3x3 16x16", "c", 32, 16, 16, 32, 3, 1, 1),
    ("r20 conv 32->64 3x3 s2 16x16", "c", 32, 16, 16, 64, 3, 2, 1),
    ("r20 conv 64->64 3x3 8x8", "c", 64, 8, 8, 64, 3, 1, 1),
    ("r20 bn 16x32x32", "b", 16, 32, 32, 0, 0, 0, 0),
    ("r20 bn 32x16x16", "b", 32, 16, 16, 0, 0, 0, 0),
    ("r20 bn 64x8x8", "b", 64, 8, 8, 0, 0, 0, 0),
    ("r20 relu 16x32x32", "r", 16, 32, 32, 0, 0, 0, 0),
    ("lenet conv1 1->32 5x5 28x28", "c", 1, 28, 28, 32, 5, 1, 2),
    ("lenet conv2 32->64 5x5 14x14", "c", 32, 14, 14, 64, 5, 1, 2),
    ("lenet maxpool 32x28x28", "m", 32, 28, 28, 0, 2, 2, 0),
    ("lenet fc1 3136->512", "l", 3136, 1, 1, 512, 0, 0, 0),
    ("lenet fc2 512->10", "l", 512, 1, 1, 10, 0, 0, 0),
]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"# torch {torch.__version__} threads {a.threads} batch {a.batch} reps {a.reps} (median ms)")
    print(f"{'layer':32s} {'forward':>9s} {'backward':>9s}")
    sf = sb = 0.0
    for name, kind, cin, h, w, cout, k, s, p in LAYERS:
        if kind == "l":
            x = torch.randn(a.batch, cin, requires_grad=True)
        else:
            x = torch.randn(a.batch, cin, h, w, requires_grad=True)
        if kind == "c":
            mod = torch.nn.Conv2d(cin, cout, k, s, p, bias=False)
        elif kind == "b":
            mod = torch.nn.BatchNorm2d(cin)
        elif kind == "m":
            mod = torch.nn.MaxPool2d(k, s, p)
        elif kind == "r":
            mod = torch.nn.ReLU()
        else:
            mod = torch.nn.Linear(cin, cout)
        tf, tb = [], []
        for r in range(a.reps + 2):
            t0 = time.perf_counter()
            y = mod(x)
            t1 = time.perf_counter()
            y.backward(torch.ones_like(y))
            t2 = time.perf_counter()
            if r >= 2:
                tf.append((t1 - t0) * 1e3); tb.append((t2 - t1) * 1e3)
        tf.sort(); tb.sort()
        print(f"{name:32s} {tf[len(tf)//2]:9.3f} {tb[len(tb)//2]:9.3f}")
        sf += tf[len(tf)//2]; sb += tb[len(tb)//2]
    print(f"{'sum':32s} {sf:9.3f} {sb:9.3f}")

if __name__ == "__main__":
    main()
