"""Every collective of hvd (numpy arrays) and hvd.torch (CPU tensors), on every dtype,
against the result numpy (or torch, for bfloat16) computes from all ranks' inputs, which
every rank can rebuild. Run under mpirun (tests/test_python.sh: np 2 and 4). Inputs are
small integers so that every expected value is exact in every dtype (float16 and
bfloat16 included); integer Average and scaling truncate, as hvd does. Exits 1 after
printing every mismatch."""
import os
import sys
import time

import numpy as np
import torch

import check_process_sets
import hvd
from background_nice import background_nice_steps
import hvd.torch as ht

# A process set given to init, as Horovod's scripts do: every rank but 0. A nice value
# set by the user stays (hvd.torch.init sets 0 only when none is set).
ps_all_but_0 = hvd.ProcessSet(range(1, int(os.environ["OMPI_COMM_WORLD_SIZE"])))
os.environ["HVD_BACKGROUND_NICE"] = "3"
ht.init(process_sets=[ps_all_but_0])
R, N = hvd.rank(), hvd.size()
failures = []


def check(what, got, want):
    got_np = got.float().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    want_np = want.float().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    if got_np.shape != want_np.shape or not np.array_equal(got_np, want_np):
        failures.append("%s:\n  got  %s\n  want %s" % (what, got_np.tolist(), want_np.tolist()))


NP_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                torch.uint8, torch.int32, torch.int64]


def value(r, shape, dtype):
    """Rank r's input: values 1..3, different on every rank, exact in every dtype."""
    n = int(np.prod(shape))
    return ((np.arange(n) * (r + 2) + r) % 3 + 1).reshape(shape).astype(dtype)


def scaled(x, f):
    """hvd's scaling: in float64 for integers, truncated back (floats stay exact here)."""
    if np.issubdtype(x.dtype, np.integer):
        return (x.astype(np.float64) * f).astype(x.dtype)
    return (x * f).astype(x.dtype)


def reduce_ref(xs, op):
    xs = np.stack(xs)
    if op == hvd.Sum:
        return xs.sum(0, dtype=xs.dtype)
    if op == hvd.Average:
        s = xs.sum(0, dtype=xs.dtype)
        return s // N if np.issubdtype(s.dtype, np.integer) else (s / N).astype(s.dtype)
    if op == hvd.Min:
        return xs.min(0)
    if op == hvd.Max:
        return xs.max(0)
    return xs.prod(0, dtype=xs.dtype)


OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def run(api, to_arr, dt, tag):
    """The same checks through api (hvd or hvd.torch); to_arr turns a numpy array into
    api's array type of dtype dt."""
    shape = (5, 3)
    mine = lambda r=R, s=shape: value(r, s, np.float64)
    xs = [mine(r) for r in range(N)]
    native = lambda a: np.asarray(a).astype(np.float64)
    ref_dtype = dt
    xs_ref = [x.astype(ref_dtype) for x in xs]

    for op in OPS:
        want = reduce_ref(xs_ref, op)
        check("%s allreduce op %d" % (tag, op), api.allreduce(to_arr(mine()), op=op), want)
        t = to_arr(mine())
        out = api.allreduce_(t, op=op)
        check("%s allreduce_ op %d" % (tag, op), t, want)
        h = api.allreduce_async(to_arr(mine()), op=op, name="%s.async.%d" % (tag, op))
        while not api.poll(h):
            time.sleep(0.001)
        check("%s allreduce_async+poll op %d" % (tag, op), api.synchronize(h), want)
        t = to_arr(mine())
        api.synchronize(api.allreduce_async_(t, op=op))
        check("%s allreduce_async_ op %d" % (tag, op), t, want)
        del out
    # prescale/postscale, Horovod's meaning: post * reduce(pre * x)
    for op in (hvd.Sum, hvd.Average):
        want = scaled(reduce_ref([scaled(x, 2.0) for x in xs_ref], op), 0.5)
        check("%s allreduce pre 2 post 0.5 op %d" % (tag, op),
              api.allreduce(to_arr(mine()), op=op, prescale_factor=2.0, postscale_factor=0.5),
              want)
    check("%s allreduce average=False" % tag, api.allreduce(to_arr(mine()), average=False),
          reduce_ref(xs_ref, hvd.Sum))
    # grouped
    ys = [value(r, (4,), np.float64) for r in range(N)]
    got = api.grouped_allreduce([to_arr(mine()), to_arr(ys[R])], op=hvd.Sum, name=tag + ".g")
    check("%s grouped_allreduce[0]" % tag, got[0], reduce_ref(xs_ref, hvd.Sum))
    check("%s grouped_allreduce[1]" % tag, got[1],
          reduce_ref([y.astype(ref_dtype) for y in ys], hvd.Sum))
    ts = [to_arr(mine()), to_arr(ys[R])]
    api.grouped_allreduce_(ts, op=hvd.Max)
    check("%s grouped_allreduce_[0]" % tag, ts[0], reduce_ref(xs_ref, hvd.Max))
    # allgather: rank r contributes r + 1 rows
    parts = [value(r, (r + 1, 2), np.float64).astype(ref_dtype) for r in range(N)]
    check("%s allgather" % tag, api.allgather(to_arr(parts[R])), np.concatenate(parts))
    # broadcast from the last rank, new and in place
    root = N - 1
    check("%s broadcast" % tag, api.broadcast(to_arr(mine()), root), xs_ref[root])
    t = to_arr(mine())
    api.broadcast_(t, root)
    check("%s broadcast_" % tag, t, xs_ref[root])
    # alltoall: rank r sends (r + j) % 3 rows to rank j
    rows = lambda r: [(r + j) % 3 for j in range(N)]
    srcs = [value(r, (sum(rows(r)), 2), np.float64).astype(ref_dtype) for r in range(N)]
    out, recv = api.alltoall(to_arr(srcs[R]), splits=rows(R))
    want = []
    for r in range(N):
        start = sum(rows(r)[:R])
        want.append(srcs[r][start:start + rows(r)[R]])
    check("%s alltoall" % tag, out, np.concatenate(want))
    check("%s alltoall received splits" % tag, recv, np.array([rows(r)[R] for r in range(N)]))
    even = [value(r, (2 * N, 1), np.float64).astype(ref_dtype) for r in range(N)]
    check("%s alltoall even" % tag, api.alltoall(to_arr(even[R])),
          np.concatenate([e[2 * R:2 * R + 2] for e in even]))
    # reducescatter: rows dividing evenly and not (the first rows % N ranks one more)
    for nrows in (2 * N, 2 * N + 1):
        zs = [value(r, (nrows, 3), np.float64).astype(ref_dtype) for r in range(N)]
        q, e = divmod(nrows, N)
        start = R * q + min(R, e)
        mine_rows = slice(start, start + q + (1 if R < e else 0))
        for op in (hvd.Sum, hvd.Average):
            check("%s reducescatter %d rows op %d" % (tag, nrows, op),
                  api.reducescatter(to_arr(zs[R]), op=op), reduce_ref(zs, op)[mine_rows])
    # grouped: each tensor as its own reducescatter would give (2N and 2N + 1 rows)
    groups = [[value(r, (nrows, 2), np.float64).astype(ref_dtype) for r in range(N)]
              for nrows in (2 * N, 2 * N + 1)]
    h = api.grouped_reducescatter_async([to_arr(g[R]) for g in groups], op=hvd.Sum,
                                        name=tag + ".grs")
    while not api.poll(h):
        time.sleep(0.001)
    for k, (g, got) in enumerate(zip(groups, api.synchronize(h))):
        q, e = divmod(g[0].shape[0], N)
        start = R * q + min(R, e)
        check("%s grouped_reducescatter[%d]" % (tag, k), got,
              reduce_ref(g, hvd.Sum)[start:start + q + (1 if R < e else 0)])


for dt in NP_DTYPES:
    run(hvd, lambda a, dt=dt: np.ascontiguousarray(a.astype(dt)), dt, "numpy %s" % np.dtype(dt))
for dt in TORCH_DTYPES:
    # bfloat16 has no numpy dtype: its expected values are float32's (exact here).
    ref = np.float32 if dt == torch.bfloat16 else torch.empty(0, dtype=dt).numpy().dtype
    run(ht, lambda a, dt=dt: torch.from_numpy(np.ascontiguousarray(a)).to(dt), ref,
        "torch %s" % dt)

# broadcast_object, barrier
obj = hvd.broadcast_object({"from": R, "list": [1, 2.5, "x"]} if R == 0 else None, 0)
check("broadcast_object", np.array([obj["from"], len(obj["list"])]), np.array([0, 3]))
hvd.barrier()
# join: rank 0 reduces once more while the others have joined (they contribute zeros)
if R == 0:
    got = ht.allreduce(torch.ones(3), op=hvd.Sum, name="after_join")
    check("allreduce while the others joined", got, np.ones(3))
last = hvd.join()
check("join's last rank is the same everywhere", hvd.allgather(np.array([last])),
      np.full(N, last))

check_process_sets.run(ps_all_but_0, check, failures)
check("HVD_BACKGROUND_NICE=3 kept by hvd.torch.init", [background_nice_steps()], [3])

# What hvd refuses (Horovod has it, hvd's runtime not): Adasum, tensors off the CPU (a
# meta tensor stands in for a GPU one here), with a message saying so. The *_built
# queries answer for this build: MPI yes, no Gloo, DDL, oneCCL or ROCm.
for what, call in (("allreduce op=Adasum", lambda: ht.allreduce(torch.ones(1), op=hvd.Adasum)),
                   ("DistributedOptimizer op=Adasum", lambda: ht.DistributedOptimizer(
                       torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0),
                       op=hvd.Adasum))):
    try:
        call()
        failures.append("%s did not raise" % what)
    except NotImplementedError as e:
        if "no Adasum" not in str(e):
            failures.append("%s: unclear message %s" % (what, e))
try:
    ht.allreduce(torch.ones(2, device="meta"))
    failures.append("allreduce of a tensor off the CPU did not raise")
except ValueError as e:
    if "GPU tensors are not supported from Python" not in str(e):
        failures.append("a tensor off the CPU: unclear message %s" % e)
check("mpi_built, mpi_enabled, gloo_built, gloo_enabled, ddl_built, ccl_built, rocm_built",
      [ht.mpi_built(), ht.mpi_enabled(), ht.gloo_built(), ht.gloo_enabled(), ht.ddl_built(),
       ht.ccl_built(), ht.rocm_built()], [True, True, False, False, False, False, False])
check("mpi_threads_supported, cuda_built, nccl_built answer",
      [type(f()) for f in (ht.mpi_threads_supported, ht.cuda_built, ht.nccl_built)], [bool] * 3)

# Errors: a count mismatch raises hvd's message on every rank, and the runtime goes on.
for api, mk in ((hvd, lambda n: np.ones(n, np.float32)), (ht, lambda n: torch.ones(n))):
    try:
        api.allreduce(mk(3 + R), name="mismatch")
        failures.append("%s: allreduce of mismatched shapes did not raise" % api.__name__)
    except hvd.HorovodInternalError as e:
        if "HVD_ERR_MISMATCH" not in str(e) or "mismatch" not in str(e).lower():
            failures.append("%s: the mismatch error lacks hvd's message: %s" % (api.__name__, e))
    check("%s allreduce after the error" % api.__name__, api.allreduce(mk(2), op=hvd.Sum),
          np.full(2, N))
try:
    ht.allreduce_(torch.ones(4, 4).t())
    failures.append("in-place allreduce of a non-contiguous tensor did not raise")
except ValueError as e:
    if "contiguous" not in str(e):
        failures.append("non-contiguous: unclear message %s" % e)

# An in-place call with a prescale that fails (a name over 255 bytes) leaves the tensor
# as it was: the prescale works in a copy.
for lib_, mk in ((hvd, lambda: np.ones(4, np.float32)), (ht, lambda: torch.ones(4))):
    kept, kept_g = mk(), [mk()]
    for call, arg in ((lib_.allreduce_, kept), (lib_.grouped_allreduce_, kept_g)):
        try:
            call(arg, prescale_factor=2.0, name="x" * 300)
            failures.append("%s with a 300-byte name did not raise" % call.__name__)
        except hvd.HorovodInternalError:
            pass
    check("%s: failed allreduce_ leaves the tensor" % lib_.__name__, kept, np.ones(4))
    check("%s: failed grouped_allreduce_ leaves the tensor" % lib_.__name__, kept_g[0],
          np.ones(4))

# A handle dropped before synchronize: the tensor hvd writes into stays alive (the
# runtime's writes would otherwise land in freed memory), as Horovod's handle map keeps it.
import gc  # noqa: E402
import weakref  # noqa: E402
dropped = torch.ones(1 << 12)
alive = weakref.ref(dropped)
ht.allreduce_async_(dropped, name="dropped.handle")
del dropped
gc.collect()
check("a dropped handle's tensor is kept", [alive() is not None], [True])
ht.barrier()

# Topology against Open MPI's own view (mpirun on one host), then shutdown: a call after
# it raises hvd's error instead of crashing.
check("is_initialized, rank, size, local_rank, local_size, cross_rank, cross_size",
      [hvd.is_initialized(), ht.rank(), ht.size(), ht.local_rank(), ht.local_size(),
       ht.cross_rank(), ht.cross_size()],
      [True, int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]),
       int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]),
       int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]), 0, 1])
hvd.shutdown()
try:
    ht.allreduce(torch.ones(1))
    failures.append("allreduce after shutdown did not raise")
except hvd.HorovodInternalError as e:
    if "HVD_ERR_" not in str(e):
        failures.append("allreduce after shutdown: %s" % e)
check("is_initialized after shutdown", [hvd.is_initialized()], [False])

if failures:
    print("rank %d: %d FAILED\n%s" % (R, len(failures), "\n".join(failures[:30])))
    sys.exit(1)
print("rank %d of %d: all collectives match" % (R, N))
