"""The training of mnist_horovod.py with PyTorch DDP (gloo) instead: the same lenet, seed,
shards (DistributedSampler), batch size, learning rate and steps. Started by mpirun: the
rank and size come from Open MPI's environment, the rendezvous is a file (--init-file),
so no port is fixed."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision import datasets, transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hvd_models import get_model  # noqa: E402

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST with DDP")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--init-file", required=True, help="a path no process has created yet")
parser.add_argument("--save", required=True)


def main():
    args = parser.parse_args()
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + args.init_file, rank=rank,
                            world_size=size)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_dataset = datasets.FashionMNIST(args.data_dir, train=True, download=False,
                                          transform=transforms.Compose([
                                              transforms.ToTensor(),
                                              transforms.Normalize((0.2860,), (0.3530,))]))
    sampler = torch.utils.data.distributed.DistributedSampler(train_dataset,
                                                              num_replicas=size, rank=rank)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                         sampler=sampler)
    model = DDP(get_model("lenet"))
    optimizer = optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    sampler.set_epoch(0)
    model.train()
    step = 0
    while step < args.steps:
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(F.log_softmax(model(data), dim=1), target)
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
    if rank == 0:
        torch.save(model.module.state_dict(), args.save)
        print("rank 0: %d steps, last loss %.4f" % (args.steps, loss.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
