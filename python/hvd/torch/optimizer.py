"""horovod.torch's DistributedOptimizer on hvd: a hook on each parameter's gradient
accumulator starts that gradient's allreduce as soon as backward has produced it (hvd's
background thread fuses what is in flight), and step() waits for them all before the
wrapped optimizer's step."""
import warnings
from contextlib import contextmanager

import torch

from .. import Average, _core, global_process_set, size, synchronize as _synchronize
from ..process_sets import resolve
from .compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%s.%s" % (i, j), v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, "
                             "parameter), usually produced by model.named_parameters().")
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found "
                             "duplicates: %s" % ", ".join(dups))
        all_ids = {id(v) for group in self.param_groups for v in group["params"]}
        named_ids = {id(v) for _, v in named_parameters}
        if len(all_ids - named_ids):
            raise ValueError("named_parameters was specified, but one or more model "
                             "parameters were not named. Python object ids: %s"
                             % ", ".join(str(i) for i in sorted(all_ids - named_ids)))
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step
                                 for _, v in sorted(named_parameters)}
        self.op = _core.resolve_op(op)
        self.gradient_predivide_factor = gradient_predivide_factor
        self.process_set = process_set
        if gradient_predivide_factor != 1.0 and self.op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # A rank outside the set keeps its local gradients (as Horovod: no hooks, and
        # synchronize() has nothing to wait for).
        if size() > 1 and self._included():
            self._register_hooks()

    def _included(self):
        return self.process_set is None or self.process_set.included() is not False

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new_zeros(p.size())
                    self._requires_update.add(p)
                    # The AccumulateGrad node of p: its hooks run once p.grad is final.
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        from . import allreduce_async_
        if p.grad is None:
            # Backward did not reach p here (zero_grad(set_to_none=True), a branch this
            # rank skipped) but other ranks may reduce it: take part with zeros.
            p.grad = p.data.new_zeros(p.size())
        name = self._parameter_names.get(p)
        tensor_compressed, ctx = self._compression.compress(p.grad)
        if self.op == Average:
            # Average = Sum / size: split as grad / predivide, then * predivide / size.
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        handle = allreduce_async_(tensor_compressed, name=name, op=self.op,
                                  prescale_factor=prescale, postscale_factor=postscale,
                                  process_set=self.process_set)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward did not reach);
        p.grad then holds the reduced gradient."""
        if size() == 1 or not self._included():
            self._synchronized = True
            return
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            output = _synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            if ctx is not None:
                p.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """step() inside it does not synchronize (call synchronize() yourself first, e.g.
        to clip the reduced gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without a loss.backward() call "
                              "following optimizer.synchronize(); this is the same as "
                              "synchronizing twice")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() "
                                 "but before optimizer.step() or optimizer.synchronize(). "
                                 "This is prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps optimizer (an instance) so that step() applies gradients averaged (op) over
    the ranks of process_set (default: all). Same arguments as
    horovod.torch.DistributedOptimizer; num_groups, groups and sparse_as_dense are
    accepted at their defaults only (hvd fuses by itself)."""
    resolve(process_set, "DistributedOptimizer")   # a set not added fails here, not in step()
    if num_groups or groups is not None or sparse_as_dense:
        raise NotImplementedError("hvd.torch.DistributedOptimizer: num_groups, groups and "
                                  "sparse_as_dense are not supported (hvd's background "
                                  "thread fuses the gradients in flight by itself)")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression,
               backward_passes_per_step, op, gradient_predivide_factor, process_set)
