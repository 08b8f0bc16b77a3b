"""hvd.torch: horovod.torch's API on the hvd runtime, for PyTorch CPU tensors.

    import hvd.torch as hvd          # was: import horovod.torch as hvd

Everything of hvd (init, rank, size, ..., join, barrier, broadcast_object) plus the
collectives on tensors (zero-copy: hvd reads and writes the tensor's own memory through
data_ptr), Compression, DistributedOptimizer, broadcast_parameters and
broadcast_optimizer_state. dtypes: float32, float64, float16, bfloat16, int8, uint8,
int32, int64. GPU tensors are not supported yet (a ValueError says so). docs/python.md
lists what differs from Horovod.
"""
import ctypes

import torch

from .. import (Adasum, Average, Max, Min, Product, Sum, HorovodInternalError, barrier,
                broadcast_object, cross_rank, cross_size, global_process_set, init,
                is_initialized, join, local_rank, local_size, poll, rank, shutdown, size,
                synchronize)
from .. import _core, _lib
from .compression import Compression
from .functions import broadcast_optimizer_state, broadcast_parameters
from .optimizer import DistributedOptimizer


class _TorchTensors:
    """The adapter of hvd._core for CPU tensors."""

    CODES = {torch.float32: _lib.FLOAT32, torch.float64: _lib.FLOAT64,
             torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16,
             torch.int8: _lib.INT8, torch.uint8: _lib.UINT8, torch.int32: _lib.INT32,
             torch.int64: _lib.INT64}
    DTYPES = {c: d for d, c in CODES.items()}

    def describe(self, t, what, inplace):
        if not isinstance(t, torch.Tensor):
            raise TypeError("hvd.torch.%s: expected a torch.Tensor, got %s"
                            % (what, type(t).__name__))
        if not t.is_cpu:
            raise ValueError("hvd.torch.%s: the tensor is on %s; GPU tensors are not "
                             "supported yet (CPU tensors only: .cpu() first)" % (what, t.device))
        code = self.CODES.get(t.dtype)
        if code is None:
            raise TypeError("hvd.torch.%s: dtype %s is not supported (float32, float64, "
                            "float16, bfloat16, int8, uint8, int32, int64)" % (what, t.dtype))
        if t.is_sparse:
            raise ValueError("hvd.torch.%s: sparse tensors are not supported" % what)
        if not t.is_contiguous():
            raise ValueError("hvd.torch.%s: the tensor must be contiguous (hvd works in its "
                             "memory; .contiguous() makes a copy that is)" % what)
        return t.data_ptr(), t.numel(), code

    def clone(self, t):
        return t.detach().clone(memory_format=torch.contiguous_format)

    def empty_like(self, t):
        return torch.empty_like(t, memory_format=torch.contiguous_format,
                                requires_grad=False)

    def scale_(self, t, factor):
        with torch.no_grad():
            if t.is_floating_point():
                t.mul_(factor)
            else:
                # Integers: scaled in float64 and truncated, as hvd's average divides.
                t.copy_(t.to(torch.float64).mul_(factor))

    def shape(self, t):
        return tuple(t.shape)

    def from_c(self, ptr, count, code, shape, like):
        out = torch.empty(shape, dtype=self.DTYPES[code])
        if count:
            ctypes.memmove(out.data_ptr(), ptr, out.numel() * out.element_size())
        return out

    def zeros(self, shape, like):
        return torch.zeros(shape, dtype=like.dtype)

    def cat(self, parts):
        return torch.cat(parts).contiguous()

    def rows(self, t, start, stop):
        return t[start:stop]


_A = _TorchTensors()


def _in(t, what):
    """An input hvd only reads: detached from autograd, made contiguous if it is not."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("hvd.torch.%s: expected a torch.Tensor, got %s" % (what, type(t).__name__))
    return t.detach().contiguous()


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.allreduce_async(_A, _in(tensor, "allreduce"), False,
                                 _core.resolve_op(op, average), prescale_factor,
                                 postscale_factor, name)


class _Allreduce(torch.autograd.Function):
    """Horovod's differentiable allreduce: the gradient is reduced the same way."""

    @staticmethod
    def forward(ctx, tensor, op, prescale_factor, postscale_factor, name):
        ctx.args = (op, prescale_factor, postscale_factor)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post = ctx.args
        grad = synchronize(allreduce_async(grad_output, None, None, op, pre, post))
        return grad, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor: tensor reduced over all ranks (op default Average). Differentiable
    (as Horovod's): the gradient is allreduced with the same op and factors."""
    _core.check_process_set(process_set)
    op = _core.resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    if torch.is_grad_enabled() and compressed.requires_grad:
        out = _Allreduce.apply(compressed, op, prescale_factor, postscale_factor, name)
    else:
        out = synchronize(allreduce_async(compressed, None, name, op, prescale_factor,
                                          postscale_factor))
    return compression.decompress(out, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.allreduce_async(_A, tensor, True, _core.resolve_op(op, average),
                                 prescale_factor, postscale_factor, name)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In place: tensor holds the result."""
    synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                 postscale_factor, process_set))
    return tensor


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.grouped_allreduce_async(_A, [_in(t, "grouped_allreduce") for t in tensors],
                                         False, _core.resolve_op(op, average),
                                         prescale_factor, postscale_factor, name)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async([p[0] for p in pairs], average, name, op,
                                               prescale_factor, postscale_factor, process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.grouped_allreduce_async(_A, list(tensors), True,
                                         _core.resolve_op(op, average), prescale_factor,
                                         postscale_factor, name)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                         postscale_factor, process_set))
    return list(tensors)


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0, in rank order."""
    _core.check_process_set(process_set)
    return _core.allgather(_A, _in(tensor, "allgather"), name)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.broadcast_async(_A, _in(tensor, "broadcast"), False, root_rank, name)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor holding root_rank's tensor."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    return _core.broadcast_async(_A, tensor, True, root_rank, name)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    synchronize(broadcast_async_(tensor, root_rank, name, process_set))
    return tensor


class _AlltoallHandle(_core.Handle):
    """Horovod's alltoall returns the received splits only when splits were given."""

    def __init__(self, inner, with_splits):
        self.__dict__.update(inner.__dict__)
        self._with_splits = with_splits

    def wait(self):
        out, recv = _core.Handle.wait(self)
        return (out, torch.tensor(recv, dtype=torch.int32)) if self._with_splits else out


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _core.check_process_set(process_set)
    if isinstance(splits, torch.Tensor):
        splits = splits.tolist()
    return _AlltoallHandle(_core.alltoall_async(_A, _in(tensor, "alltoall"), splits, name),
                           splits is not None)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[j] go to rank j (equal shares without splits); returns what every rank
    sent here in rank order (and, with splits, the rows received from each rank)."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _core.check_process_set(process_set)
    return _core.reducescatter_async(_A, _in(tensor, "reducescatter"), _core.resolve_op(op),
                                     prescale_factor, postscale_factor, name)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """The reduction over ranks split along dimension 0: this rank's rows."""
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                          postscale_factor))
    return compression.decompress(out, ctx)
