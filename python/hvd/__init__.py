"""hvd: the hvd runtime (libhvd) from Python, on numpy arrays.

    import numpy as np, hvd
    hvd.init()
    total = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)    # size() everywhere

The functions, names and arguments are horovod.torch's (hvd.torch has them on PyTorch
tensors, with DistributedOptimizer): init, shutdown, is_initialized, size, rank,
local_rank, local_size, cross_rank, cross_size; allreduce, allreduce_, allreduce_async,
allreduce_async_, grouped_allreduce(_async)(_), allgather, broadcast(_)(_async),
alltoall(_async), reducescatter(_async), join, barrier, synchronize, poll,
broadcast_object. Arrays must be on the host, C-contiguous where hvd writes into them, of
dtype float32, float64, float16, int8, uint8, int32 or int64 (numpy has no bfloat16; use
hvd.torch for it). A failure raises HorovodInternalError with hvd's message.
docs/python.md has the details.
"""
import atexit
import ctypes

import numpy as np

from . import _core, _lib
from ._core import (Adasum, Average, Handle, Max, Min, Product, Sum, barrier,
                    broadcast_object, global_process_set, join, poll, synchronize)
from ._lib import HorovodInternalError

__version__ = "0.1"
lib = _lib.lib
_atexit_registered = False


def init(comm=None, process_sets=None):
    """Starts the runtime (MPI under mpirun/hvdrun, size 1 alone). A second call is a
    no-op. comm and process_sets are Horovod's; only their defaults are supported."""
    global _atexit_registered
    if comm is not None or process_sets is not None:
        raise NotImplementedError("hvd.init: comm and process_sets are not supported yet "
                                  "(hvd runs on MPI_COMM_WORLD, with no process sets)")
    _lib.check(lib.hvd_init(), "init")
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True


def _shutdown_at_exit():
    if lib.hvd_initialized():
        lib.hvd_shutdown()


def library():
    """The path of the libhvd this package loaded."""
    return _lib.library_path


def shutdown():
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


_A = _NumpyArrays()


def _in(x, what):
    """An input hvd only reads: any array-like, as a C-contiguous array."""
    if not isinstance(x, np.ndarray):
        raise TypeError("hvd.%s: expected a numpy array, got %s" % (what, type(x).__name__))
    return np.ascontiguousarray(x)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.allreduce_async(_A, _in(tensor, "allreduce"), False,
                                 _core.resolve_op(op, average), prescale_factor,
                                 postscale_factor, name)


def allreduce(tensor, average=None, name=None, compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new array: the reduction of tensor over all ranks (op default Average)."""
    if compression is not None:
        raise NotImplementedError("hvd.allreduce: compression is hvd.torch's")
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.allreduce_async(_A, tensor, True, _core.resolve_op(op, average),
                                 prescale_factor, postscale_factor, name)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In place: tensor holds the result (and is returned)."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.grouped_allreduce_async(_A, [_in(t, "grouped_allreduce") for t in tensors],
                                         False, _core.resolve_op(op, average),
                                         prescale_factor, postscale_factor, name)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    if compression is not None:
        raise NotImplementedError("hvd.grouped_allreduce: compression is hvd.torch's")
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.grouped_allreduce_async(_A, tensors, True, _core.resolve_op(op, average),
                                         prescale_factor, postscale_factor, name)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along the first dimension, in rank order (first
    dimensions may differ; the others must match)."""
    _core.check_process_set(process_set)
    return _core.allgather(_A, _in(tensor, "allgather"), name)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.broadcast_async(_A, _in(tensor, "broadcast"), False, root_rank, name)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new array holding root_rank's tensor."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.broadcast_async(_A, tensor, True, root_rank, name)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _AlltoallHandle(_core.alltoall_async(_A, _in(tensor, "alltoall"), splits, name),
                           splits is not None)


class _AlltoallHandle(Handle):
    """Horovod's alltoall returns the received splits only when splits were given."""

    def __init__(self, inner, with_splits):
        self.__dict__.update(inner.__dict__)
        self._with_splits = with_splits

    def wait(self):
        out, recv = Handle.wait(self)
        return (out, np.asarray(recv, dtype=np.int32)) if self._with_splits else out


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[j] of tensor go to rank j (equal shares without splits); the result is
    what every rank sent here, in rank order (and the rows from each, with splits)."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _core.check_process_set(process_set)
    return _core.reducescatter_async(_A, _in(tensor, "reducescatter"), _core.resolve_op(op),
                                     prescale_factor, postscale_factor, name)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """The reduction over ranks, split along the first dimension: this rank's rows."""
    return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                           postscale_factor))
