"""One PyTorch training script, three ways to run it data-parallel (scripts/
compare_python.sh runs them side by side): --backend hvd (import hvd.torch as hvd),
horovod (import horovod.torch as hvd: the same lines) or ddp (PyTorch DDP over gloo).
Under mpirun; rank 0 prints
    train MODEL: total images/sec: X (rank 0: C CPU s/step, B of it hvd's background thread)
    allreduce 8 bytes: median latency Y us
Training: MODEL from python/hvd_models.py on synthetic data, SGD with momentum, --threads
per rank, --warmup steps untimed, then --steps timed (between barriers). Latency: the
median over --iters of one blocking allreduce of one float64 (8 bytes)."""
import argparse
import importlib
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from hvd_models import DEFAULTS, get_model  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("--backend", choices=["hvd", "horovod", "ddp"], required=True)
p.add_argument("--model", default="resnet20")
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--iters", type=int, default=2000, help="latency iterations (0: none)")
p.add_argument("--init-file", help="ddp: a path no process has created yet (rendezvous)")
args = p.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(0)
c, hw, classes = DEFAULTS[args.model]
model = get_model(args.model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(args.batch_size, c, hw, hw)
y = torch.randint(0, classes, (args.batch_size,))

if args.backend == "ddp":
    import torch.distributed as dist
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if not args.init_file:
        sys.exit("bench_python.py: --backend ddp needs --init-file PATH (a file rendezvous)")
    dist.init_process_group("gloo", init_method="file://" + args.init_file, rank=rank,
                            world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(model)
    barrier = dist.barrier
    one = torch.zeros(1, dtype=torch.float64)
    allreduce8 = lambda: dist.all_reduce(one)
else:
    hvd = importlib.import_module("hvd.torch" if args.backend == "hvd" else "horovod.torch")
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    one = torch.zeros(1, dtype=torch.float64)

    def barrier():
        hvd.allreduce(torch.zeros(1), name="barrier")

    allreduce8 = lambda: hvd.allreduce_(one, op=hvd.Sum)


def background_cpu():
    """CPU seconds of hvd's background thread (named hvd_background) so far; 0 without
    one (DDP, Horovod)."""
    tasks = "/proc/self/task"
    for tid in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, tid, "comm")) as f:
                if f.read().strip() != "hvd_background":
                    continue
            with open(os.path.join(tasks, tid, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return 0.0


def step():
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


for _ in range(args.warmup):
    step()
barrier()
t, cpu, bg = time.perf_counter(), time.process_time(), background_cpu()
for _ in range(args.steps):
    step()
barrier()
elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
bg = background_cpu() - bg
if rank == 0:
    # CPU seconds of this process (all its threads) per step: the work, whatever the load.
    print("train %s: total images/sec: %.1f (rank 0: %.3f CPU s/step, %.4f of it hvd's "
          "background thread)" % (args.model, size * args.batch_size * args.steps / elapsed,
                                  cpu / args.steps, bg / args.steps), flush=True)
if args.iters:
    for _ in range(100):
        allreduce8()
    times = []
    for _ in range(args.iters):
        t = time.perf_counter()
        allreduce8()
        times.append(time.perf_counter() - t)
    times.sort()
    if rank == 0:
        print("allreduce 8 bytes: median latency %.1f us" % (times[len(times) // 2] * 1e6),
              flush=True)
