"""hvd.torch's DistributedOptimizer, broadcast_parameters and broadcast_optimizer_state
against results computed by hand. Under mpirun (tests/test_python.sh, np 2). The model
is w (1x2, no bias) with loss = w . x, so the gradient of one backward pass is x itself:
rank r's inputs are chosen so that every expected weight is exact. Exits 1 after
printing every mismatch."""
import os
import sys

import torch

import hvd.torch as hvd
from background_nice import background_nice_steps

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
failures = []


def check(what, got, want):
    got = torch.as_tensor(got, dtype=torch.float64)
    want = torch.as_tensor(want, dtype=torch.float64)
    if got.shape != want.shape or not torch.equal(got, want):
        failures.append("%s: got %s, want %s" % (what, got.tolist(), want.tolist()))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1, bias=False)
        self.unused = torch.nn.Parameter(torch.zeros(3))   # backward never reaches it

    def forward(self, x):
        return self.fc(x).sum()


def fresh(**kw):
    m = Model()
    with torch.no_grad():
        m.fc.weight.copy_(torch.tensor([[10.0, 20.0]]))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0),
                                   named_parameters=m.named_parameters(), **kw)
    return m, opt


def x(r, k):
    """Rank r's input of pass k (small integers: every mean is exact)."""
    return torch.tensor([[float(r + k + 1), float(2 * r - k)]])


def mean_of(k_list):
    return sum(x(r, k) for r in range(N) for k in k_list) / N


# One pass per step: w -= mean over ranks of x.
m, opt = fresh()
opt.zero_grad()
m(x(R, 0)).backward()
opt.step()
check("one step", m.fc.weight, torch.tensor([[10.0, 20.0]]) - mean_of([0]))
check("unused parameter's gradient", m.unused.grad, torch.zeros(3))

# zero_grad(set_to_none=True) (torch 2's default): step() reduces zeros for the parameter
# backward never reached, as Horovod does, instead of failing on its grad of None.
opt.zero_grad(set_to_none=True)
m(x(R, 0)).backward()
opt.step()
check("set_to_none: step", m.fc.weight, torch.tensor([[10.0, 20.0]]) - 2 * mean_of([0]))
check("set_to_none: unused parameter's gradient", m.unused.grad, torch.zeros(3))

# backward_passes_per_step=2: the gradients of both passes add up locally and are
# reduced once, after the second pass.
m, opt = fresh(backward_passes_per_step=2)
opt.zero_grad()
m(x(R, 0)).backward()
started = opt._handles.get(m.fc.weight, (None, None))[0] is not None
check("no allreduce after the first of 2 passes", [started], [False])
m(x(R, 1)).backward()
started = opt._handles.get(m.fc.weight, (None, None))[0] is not None
check("allreduce started by the second pass's hook", [started], [True])
opt.step()
check("backward_passes_per_step=2", m.fc.weight,
      torch.tensor([[10.0, 20.0]]) - mean_of([0, 1]))

# op=Sum, and gradient_predivide_factor (grad / f summed, then * f / size).
m, opt = fresh(op=hvd.Sum)
m(x(R, 0)).backward()
opt.step()
check("op=Sum", m.fc.weight, torch.tensor([[10.0, 20.0]]) - mean_of([0]) * N)
m, opt = fresh(gradient_predivide_factor=2.0)
m(x(R, 0)).backward()
opt.step()
check("gradient_predivide_factor=2", m.fc.weight, torch.tensor([[10.0, 20.0]]) - mean_of([0]))

# fp16 compression: rank r's gradient (2r + 1) + 2^-12 travels as float16, which rounds
# it to 2r + 1, so the mean is exactly N; uncompressed it would be N + 2^-12. The
# gradient comes back as float32.
eps = 2.0 ** -12
for comp, want in ((hvd.Compression.fp16, float(N)), (hvd.Compression.none, N + eps)):
    m, opt = fresh(compression=comp)
    m(torch.tensor([[2.0 * R + 1 + eps, 0.0]])).backward()
    opt.synchronize()
    check("compression %s: reduced gradient" % comp.__name__, m.fc.weight.grad[0, 0], want)
    check("compression %s: gradient dtype float32" % comp.__name__,
          [m.fc.weight.grad.dtype == torch.float32], [True])
    with opt.skip_synchronize():
        opt.step()

# synchronize() then skip_synchronize(): the reduced gradient can be changed before step.
m, opt = fresh()
m(x(R, 0)).backward()
opt.synchronize()
m.fc.weight.grad.mul_(0.5)
with opt.skip_synchronize():
    opt.step()
check("synchronize + skip_synchronize", m.fc.weight,
      torch.tensor([[10.0, 20.0]]) - mean_of([0]) * 0.5)

# broadcast_parameters and broadcast_optimizer_state from rank 1.
root = 1
torch.manual_seed(100 + R)
m = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
if R == root:
    m(torch.ones(1, 3)).sum().backward()
    opt.step()          # a momentum buffer exists on the root only
    opt.param_groups[0]["lr"] = 0.25
hvd.broadcast_parameters(m.state_dict(), root_rank=root)
hvd.broadcast_optimizer_state(opt, root_rank=root)
sums = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
check("broadcast_parameters", hvd.allreduce(sums, op=hvd.Max), sums)
check("broadcast_parameters", hvd.allreduce(sums, op=hvd.Min), sums)
check("broadcast_optimizer_state: lr", [opt.param_groups[0]["lr"]], [0.25])
buf = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in m.parameters()])
check("broadcast_optimizer_state: momentum", hvd.allreduce(buf, op=hvd.Max), buf)

# allreduce is differentiable, as Horovod's: d/dx of sum(allreduce(x)) is the same
# allreduce of ones (Sum: N everywhere; Average: 1).
for op, want in ((hvd.Sum, float(N)), (hvd.Average, 1.0)):
    xg = torch.full((3,), float(R + 1), requires_grad=True)
    y = hvd.allreduce(xg, op=op, name="grad.%d" % op)
    y.sum().backward()
    check("allreduce op %d: gradient" % op, xg.grad, torch.full((3,), want))
    check("allreduce op %d: requires_grad" % op, [y.requires_grad], [True])

# hvd.torch.init() runs hvd's background thread at the trainer's priority when
# HVD_BACKGROUND_NICE is not set (check_collectives.py sets it).
check("background thread's nice steps below the trainer", [background_nice_steps()], [0])
check("HVD_BACKGROUND_NICE not left for child processes", ["HVD_BACKGROUND_NICE" in os.environ],
      [False])

if failures:
    print("rank %d: %d FAILED\n%s" % (R, len(failures), "\n".join(failures)))
    sys.exit(1)
print("rank %d of %d: optimizer checks match" % (R, N))
