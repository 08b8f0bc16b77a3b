"""hvd: the hvd runtime (libhvd) from Python, on numpy arrays.

    import numpy as np, hvd
    hvd.init()
    total = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)    # size() everywhere

The functions, names and arguments are horovod.torch's (hvd.torch has them on PyTorch
tensors, with DistributedOptimizer): init, shutdown, is_initialized, size, rank,
local_rank, local_size, cross_rank, cross_size; allreduce, allreduce_, allreduce_async,
allreduce_async_, grouped_allreduce(_async)(_), allgather, broadcast(_)(_async),
alltoall(_async), reducescatter(_async), join, barrier, synchronize, poll,
broadcast_object, allgather_object; ProcessSet, add_process_set, remove_process_set and
process_set= on every collective. Arrays must be on the host, C-contiguous where hvd
writes into them, of dtype float32, float64, float16, int8, uint8, int32 or int64 (numpy
has no bfloat16; use hvd.torch for it). A failure raises HorovodInternalError with hvd's
message. docs/python.md has the details.
"""
import atexit
import ctypes

import numpy as np

from . import _api, _lib
from . import process_sets as _psets
from ._api import allgather_object, barrier, broadcast_object, join
from ._build import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built,
                     mpi_enabled, mpi_threads_supported, nccl_built, rocm_built)
from ._core import Adasum, Average, Handle, Max, Min, Product, Sum, poll, synchronize
from ._lib import HorovodInternalError
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

__version__ = "0.1"
lib = _lib.lib
_atexit_registered = False


def init(comm=None, process_sets=None):
    """Starts the runtime (MPI under mpirun/hvdrun, size 1 alone). A second call is a
    no-op. process_sets: a list of ProcessSet to add now (as add_process_set does, in
    order), or "dynamic" (hvd can always add sets later). comm: only None (hvd runs on
    every rank of MPI_COMM_WORLD)."""
    global _atexit_registered
    if comm is not None and not (isinstance(comm, (list, tuple)) and len(comm) == 0):
        raise NotImplementedError("hvd.init: comm is not supported (hvd runs on every rank "
                                  "of MPI_COMM_WORLD); use process sets for a subset")
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError('hvd.init: process_sets must be a list of hvd.ProcessSet or '
                             '"dynamic", not %r' % process_sets)
        process_sets = None
    sets = list(process_sets or [])
    if any(not isinstance(ps, ProcessSet) for ps in sets):
        raise ValueError("hvd.init: process_sets must be a list of hvd.ProcessSet, got %r"
                         % (sets,))
    _lib.check(lib.hvd_init(), "init")
    _psets._on_init()
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True
    for ps in sets:
        if ps.process_set_id is None:
            add_process_set(ps)


def _shutdown_at_exit():
    if lib.hvd_initialized():
        lib.hvd_shutdown()


def library():
    """The path of the libhvd this package loaded."""
    return _lib.library_path


def shutdown():
    _psets._on_shutdown()
    _lib.check(lib.hvd_shutdown(), "shutdown")


def is_initialized():
    return bool(lib.hvd_initialized())


def _topology(fn, what):
    def get():
        v = fn()
        if v < 0:
            raise ValueError("hvd.%s(): Horovod has not been initialized; run hvd.init() "
                             "first" % what)
        return v
    get.__name__ = what
    get.__doc__ = "This process's %s (hvd_%s)." % (what.replace("_", " "), what)
    return get


size = _topology(lib.hvd_size, "size")
rank = _topology(lib.hvd_rank, "rank")
local_rank = _topology(lib.hvd_local_rank, "local_rank")
local_size = _topology(lib.hvd_local_size, "local_size")
cross_rank = _topology(lib.hvd_cross_rank, "cross_rank")
cross_size = _topology(lib.hvd_cross_size, "cross_size")


class _NumpyArrays:
    """The adapter of hvd._core for numpy arrays."""

    CODES = {np.dtype(np.float32): _lib.FLOAT32, np.dtype(np.float64): _lib.FLOAT64,
             np.dtype(np.float16): _lib.FLOAT16, np.dtype(np.int8): _lib.INT8,
             np.dtype(np.uint8): _lib.UINT8, np.dtype(np.int32): _lib.INT32,
             np.dtype(np.int64): _lib.INT64}
    DTYPES = {c: d for d, c in CODES.items()}

    def describe(self, x, what, inplace):
        if not isinstance(x, np.ndarray):
            raise TypeError("hvd.%s: expected a numpy array, got %s (hvd.torch takes "
                            "tensors)" % (what, type(x).__name__))
        code = self.CODES.get(x.dtype)
        if code is None:
            raise TypeError("hvd.%s: dtype %s is not supported (float32, float64, float16, "
                            "int8, uint8, int32, int64)" % (what, x.dtype))
        if not x.flags.c_contiguous:
            raise ValueError("hvd.%s: the array must be C-contiguous (np.ascontiguousarray "
                             "makes a copy that is)" % what)
        if inplace and not x.flags.writeable:
            raise ValueError("hvd.%s: the array is read-only" % what)
        return x.ctypes.data, x.size, code

    def clone(self, x):
        return np.array(x, order="C", copy=True)

    def empty_like(self, x):
        return np.empty_like(x, order="C")

    def scale_(self, x, factor):
        np.multiply(x, factor, out=x, casting="unsafe")

    def shape(self, x):
        return x.shape

    def from_c(self, ptr, count, code, shape, like):
        out = np.empty(shape, dtype=self.DTYPES[code])
        if count:
            ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
        return out

    def zeros(self, shape, like):
        return np.zeros(shape, dtype=like.dtype)

    def cat(self, parts):
        return np.ascontiguousarray(np.concatenate(parts))

    def rows(self, x, start, stop):
        return x[start:stop]

    def as_input(self, x, what):
        """An input hvd only reads: as a C-contiguous array."""
        if not isinstance(x, np.ndarray):
            raise TypeError("hvd.%s: expected a numpy array, got %s (hvd.torch takes "
                            "tensors)" % (what, type(x).__name__))
        return np.ascontiguousarray(x)

    def splits_list(self, splits):
        return [int(s) for s in np.asarray(splits).reshape(-1)]

    def int_array(self, values):
        return np.asarray(values, dtype=np.int32)

    def compress(self, x, compression):
        if compression is not None:
            raise NotImplementedError("hvd: compression is hvd.torch's (numpy arrays travel "
                                      "as they are)")
        return x, None

    def decompress(self, x, ctx):
        return x


_A = _NumpyArrays()
_api_numpy = _api.Api(_A)
_api.bind(_api_numpy, globals())
