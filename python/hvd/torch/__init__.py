"""hvd.torch: horovod.torch's API on the hvd runtime, for PyTorch CPU tensors.

    import hvd.torch as hvd          # was: import horovod.torch as hvd

Everything of hvd (init, rank, size, ..., join, barrier, broadcast_object,
allgather_object, process sets, the *_built queries) plus the collectives on tensors
(zero-copy: hvd reads and writes the tensor's own memory through data_ptr), Compression,
DistributedOptimizer, broadcast_parameters and broadcast_optimizer_state. dtypes: float32,
float64, float16, bfloat16, int8, uint8, int32, int64. GPU tensors are not supported yet
(a ValueError says so). docs/python.md lists what differs from Horovod.
"""
import ctypes
import os

import torch

from .. import (Adasum, Average, Max, Min, Product, Sum, HorovodInternalError, ProcessSet,
                add_process_set, allgather_object, barrier, broadcast_object, ccl_built,
                cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
                gloo_built, gloo_enabled, is_initialized, join, local_rank,
                local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll,
                rank, remove_process_set, rocm_built, shutdown, size, synchronize)
from .. import _api, _lib
from .. import init as _hvd_init
from .compression import Compression
from .functions import broadcast_optimizer_state, broadcast_parameters
from .optimizer import DistributedOptimizer


def init(comm=None, process_sets=None):
    """hvd.init, with the background thread at the caller's priority unless
    HVD_BACKGROUND_NICE is set. The C runtime lowers it on a machine without a GPU (nice
    19: measured better for hvd's own C training loop, whose one compute thread per rank
    leaves the thread a core only when it waits). A PyTorch process usually runs more
    compute threads than its share of cores (intra-op threads, one per core by
    default, beside its other ranks'), at nice 0 like every other thread of the machine:
    a nice-19 thread then gets next to no CPU until the trainer blocks in synchronize(),
    so the gradients' allreduces no longer overlap backward, and each wait for a peer
    waits for that thread's turn. PyTorch DDP's gloo threads run at nice 0 too."""
    ours = "HVD_BACKGROUND_NICE" not in os.environ
    if ours:
        os.environ["HVD_BACKGROUND_NICE"] = "0"
    try:
        _hvd_init(comm, process_sets)
    finally:
        # The runtime read it at init: child processes (a C trainer started from this
        # script) keep the runtime's own default.
        if ours:
            del os.environ["HVD_BACKGROUND_NICE"]


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
                             "supported from Python yet (hvd's C runtime reduces device "
                             "memory, but hvd.torch's path to it has not run on a GPU): "
                             "pass CPU tensors (.cpu())" % (what, t.device))
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

    def as_input(self, t, what):
        """An input hvd only reads: detached from autograd, made contiguous if it is not."""
        if not isinstance(t, torch.Tensor):
            raise TypeError("hvd.torch.%s: expected a torch.Tensor, got %s"
                            % (what, type(t).__name__))
        return t.detach().contiguous()

    def splits_list(self, splits):
        if isinstance(splits, torch.Tensor):
            splits = splits.reshape(-1).tolist()
        return [int(s) for s in splits]

    def int_array(self, values):
        return torch.tensor(values, dtype=torch.int32)

    def compress(self, t, compression):
        compression = compression or Compression.none
        out, ctx = compression.compress(t)
        return out, (compression, ctx)

    def decompress(self, t, ctx):
        compression, inner = ctx
        return compression.decompress(t, inner)


_A = _TorchTensors()


class _Allreduce(torch.autograd.Function):
    """Horovod's differentiable allreduce: the gradient is reduced the same way."""

    @staticmethod
    def forward(ctx, tensor, op, prescale_factor, postscale_factor, name, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(_api_torch.allreduce_async(tensor, None, name, op, prescale_factor,
                                                      postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, process_set = ctx.args
        grad = synchronize(_api_torch.allreduce_async(grad_output, None, None, op, pre, post,
                                                      process_set))
        return grad, None, None, None, None, None


class _TorchApi(_api.Api):
    def allreduce(self, tensor, average=None, name=None, compression=Compression.none,
                  op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
        """A new tensor: tensor reduced over the set's ranks (op default Average).
        Differentiable (as Horovod's): the gradient is allreduced with the same op and
        factors."""
        compressed, ctx = compression.compress(tensor)
        if torch.is_grad_enabled() and compressed.requires_grad:
            op = _api._core.resolve_op(op, average)
            out = _Allreduce.apply(compressed, op, prescale_factor, postscale_factor, name,
                                   process_set)
        else:
            out = synchronize(self.allreduce_async(compressed, average, name, op,
                                                   prescale_factor, postscale_factor,
                                                   process_set))
        return compression.decompress(out, ctx)


_api_torch = _TorchApi(_A)
_api.bind(_api_torch, globals())
