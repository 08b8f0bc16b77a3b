"""A PyTorch training script in Horovod's documented form (horovod/examples/pytorch,
docs/pytorch.rst), with the one change a user makes: `import hvd.torch as hvd` instead of
`import horovod.torch as hvd`. It trains lenet (python/hvd_models.py) on Fashion-MNIST
for --steps steps and rank 0 saves the weights (tests/test_python_mnist.sh compares them
with PyTorch DDP's, python/../tests/python/mnist_ddp.py, on the same shards)."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from torchvision import datasets, transforms

import hvd.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hvd_models import get_model  # noqa: E402

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST Example")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--save", required=True, help="rank 0 saves the final state_dict here")


def train(model, optimizer, train_loader, steps):
    model.train()
    step = 0
    while step < steps:
        for data, target in train_loader:
            optimizer.zero_grad()
            output = F.log_softmax(model(data), dim=1)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            step += 1
            if step == steps:
                break
    return loss.item()


def main():
    args = parser.parse_args()

    # Horovod: initialize library.
    hvd.init()
    torch.manual_seed(args.seed)

    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(1)

    train_dataset = datasets.FashionMNIST(args.data_dir, train=True, download=False,
                                          transform=transforms.Compose([
                                              transforms.ToTensor(),
                                              transforms.Normalize((0.2860,), (0.3530,))]))
    # Horovod: use DistributedSampler to partition the training data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)

    model = get_model("lenet")

    # Horovod: scale learning rate by the number of GPUs.
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                          momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer,
                                         named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    train_sampler.set_epoch(0)
    loss = train(model, optimizer, train_loader, args.steps)
    if hvd.rank() == 0:
        torch.save(model.state_dict(), args.save)
        print("rank 0: %d steps, last loss %.4f" % (args.steps, loss))


if __name__ == "__main__":
    main()
