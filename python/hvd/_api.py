"""hvd._api: horovod.torch's collective functions, written once over an adapter of
hvd._core (numpy arrays for hvd, tensors for hvd.torch).

A front end makes one Api (or a subclass overriding what differs) and exports its bound
methods as module functions with bind(api, globals()): the names in COLLECTIVES. Besides _core's adapter
methods the adapter has as_input(x, what) (an input hvd only reads, contiguous),
splits_list(splits) (a list of ints from a list, array or tensor), int_array(values)
(the received splits of alltoall) and compress(x, compression) -> (x', ctx) /
decompress(x', ctx) (Horovod's compression; numpy has none).
"""
from . import _core
from ._core import Average, synchronize
from .process_sets import global_process_set, resolve


# The collectives every front end exports, each the bound method of its Api of that name.
COLLECTIVES = (
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
)


def bind(api, namespace):
    """Puts api's COLLECTIVES into namespace (a front end's module globals())."""
    for name in COLLECTIVES:
        namespace[name] = getattr(api, name)


class _AlltoallHandle(_core.Handle):
    """Horovod's alltoall returns the received splits only when splits were given."""

    def __init__(self, inner, with_splits, int_array):
        self.__dict__.update(inner.__dict__)
        self._with_splits = with_splits
        self._int_array = int_array

    def wait(self):
        out, recv = _core.Handle.wait(self)
        return (out, self._int_array(recv)) if self._with_splits else out


class _GroupHandle(_core.Handle):
    """Several operations as one handle: synchronize() returns their outputs in a list."""

    def __init__(self, what, handles):
        self.what = what
        self._handles = handles

    def poll(self):
        return all([h.poll() for h in self._handles])

    def wait(self):
        # Every operation is waited for (their buffers are released) before the first
        # failure is raised.
        out, first = [], None
        for h in self._handles:
            try:
                out.append(h.wait())
            except Exception as e:  # noqa: BLE001 -- re-raised below
                out.append(None)
                first = first or e
        if first is not None:
            raise first
        return out


class Api:
    def __init__(self, adapter):
        self._A = adapter

    # ---- allreduce ----
    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
        """Starts the reduction of tensor over the set's ranks into a new tensor; returns
        a handle for synchronize() / poll()."""
        ps = resolve(process_set, "allreduce")
        return _core.allreduce_async(self._A, self._A.as_input(tensor, "allreduce"), False,
                                     _core.resolve_op(op, average), prescale_factor,
                                     postscale_factor, name, ps)

    def allreduce(self, tensor, average=None, name=None, compression=None, op=None,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
        """A new tensor: tensor reduced over the set's ranks (op default Average)."""
        compressed, ctx = self._A.compress(tensor, compression)
        out = synchronize(self.allreduce_async(compressed, average, name, op, prescale_factor,
                                               postscale_factor, process_set))
        return self._A.decompress(out, ctx)

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=global_process_set):
        """In place: starts reducing into tensor itself."""
        ps = resolve(process_set, "allreduce_")
        return _core.allreduce_async(self._A, tensor, True, _core.resolve_op(op, average),
                                     prescale_factor, postscale_factor, name, ps)

    def allreduce_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                   postscale_factor=1.0, process_set=global_process_set):
        """In place: tensor holds the result (and is returned)."""
        return synchronize(self.allreduce_async_(tensor, average, name, op, prescale_factor,
                                                 postscale_factor, process_set))

    # ---- grouped allreduce: one unit, negotiated and executed together ----
    def grouped_allreduce_async(self, tensors, average=None, name=None, op=None,
                                prescale_factor=1.0, postscale_factor=1.0,
                                process_set=global_process_set):
        ps = resolve(process_set, "grouped_allreduce")
        xs = [self._A.as_input(t, "grouped_allreduce") for t in tensors]
        return _core.grouped_allreduce_async(self._A, xs, False, _core.resolve_op(op, average),
                                             prescale_factor, postscale_factor, name, ps)

    def grouped_allreduce(self, tensors, average=None, name=None, compression=None, op=None,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
        pairs = [self._A.compress(t, compression) for t in tensors]
        outs = synchronize(self.grouped_allreduce_async([p[0] for p in pairs], average, name,
                                                        op, prescale_factor,
                                                        postscale_factor, process_set))
        return [self._A.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]

    def grouped_allreduce_async_(self, tensors, average=None, name=None, op=None,
                                 prescale_factor=1.0, postscale_factor=1.0,
                                 process_set=global_process_set):
        ps = resolve(process_set, "grouped_allreduce_")
        return _core.grouped_allreduce_async(self._A, list(tensors), True,
                                             _core.resolve_op(op, average), prescale_factor,
                                             postscale_factor, name, ps)

    def grouped_allreduce_(self, tensors, average=None, name=None, op=None,
                           prescale_factor=1.0, postscale_factor=1.0,
                           process_set=global_process_set):
        return synchronize(self.grouped_allreduce_async_(tensors, average, name, op,
                                                         prescale_factor, postscale_factor,
                                                         process_set))

    # ---- allgather, broadcast, alltoall, reducescatter ----
    def allgather(self, tensor, name=None, process_set=global_process_set):
        """Every rank's tensor of the set concatenated along the first dimension, in the
        set's rank order (first dimensions may differ; the others must match)."""
        ps = resolve(process_set, "allgather")
        return _core.allgather(self._A, self._A.as_input(tensor, "allgather"), name, ps)

    def broadcast_async(self, tensor, root_rank, name=None, process_set=global_process_set):
        ps = resolve(process_set, "broadcast")
        return _core.broadcast_async(self._A, self._A.as_input(tensor, "broadcast"), False,
                                     root_rank, name, ps)

    def broadcast(self, tensor, root_rank, name=None, process_set=global_process_set):
        """A new tensor holding root_rank's tensor (root_rank: a global rank)."""
        return synchronize(self.broadcast_async(tensor, root_rank, name, process_set))

    def broadcast_async_(self, tensor, root_rank, name=None, process_set=global_process_set):
        ps = resolve(process_set, "broadcast_")
        return _core.broadcast_async(self._A, tensor, True, root_rank, name, ps)

    def broadcast_(self, tensor, root_rank, name=None, process_set=global_process_set):
        """In place: tensor holds root_rank's (and is returned)."""
        return synchronize(self.broadcast_async_(tensor, root_rank, name, process_set))

    def alltoall_async(self, tensor, splits=None, name=None, process_set=global_process_set):
        ps = resolve(process_set, "alltoall")
        rows = None if splits is None else self._A.splits_list(splits)
        inner = _core.alltoall_async(self._A, self._A.as_input(tensor, "alltoall"), rows,
                                     name, ps)
        return _AlltoallHandle(inner, splits is not None, self._A.int_array)

    def alltoall(self, tensor, splits=None, name=None, process_set=global_process_set):
        """Rows splits[j] go to the set's j-th rank (equal shares without splits); returns
        what every rank sent here in the set's order (and, with splits, the rows
        received from each)."""
        return synchronize(self.alltoall_async(tensor, splits, name, process_set))

    def reducescatter_async(self, tensor, name=None, op=Average,
                            process_set=global_process_set, prescale_factor=1.0,
                            postscale_factor=1.0):
        ps = resolve(process_set, "reducescatter")
        return _core.reducescatter_async(self._A, self._A.as_input(tensor, "reducescatter"),
                                         _core.resolve_op(op), prescale_factor,
                                         postscale_factor, name, ps)

    def grouped_reducescatter_async(self, tensors, name=None, op=Average,
                                    process_set=global_process_set, prescale_factor=1.0,
                                    postscale_factor=1.0):
        """One reducescatter per tensor (named name.0, name.1, ...), each negotiated on
        its own (Horovod negotiates the group as one unit; the results are the same)."""
        handles = [self.reducescatter_async(t, None if name is None else "%s.%d" % (name, i),
                                            op, process_set, prescale_factor,
                                            postscale_factor)
                   for i, t in enumerate(tensors)]
        return _GroupHandle("grouped_reducescatter(%s)" % (name or "unnamed"), handles)

    def grouped_reducescatter(self, tensors, name=None, compression=None, op=Average,
                              process_set=global_process_set, prescale_factor=1.0,
                              postscale_factor=1.0):
        """Each tensor's reducescatter: this rank's rows of each, in a list."""
        pairs = [self._A.compress(t, compression) for t in tensors]
        outs = synchronize(self.grouped_reducescatter_async(
            [p[0] for p in pairs], name, op, process_set, prescale_factor, postscale_factor))
        return [self._A.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]

    def reducescatter(self, tensor, name=None, compression=None, op=Average,
                      process_set=global_process_set, prescale_factor=1.0,
                      postscale_factor=1.0):
        """The reduction over the set's ranks split along the first dimension: this
        rank's rows."""
        compressed, ctx = self._A.compress(tensor, compression)
        out = synchronize(self.reducescatter_async(compressed, name, op, process_set,
                                                   prescale_factor, postscale_factor))
        return self._A.decompress(out, ctx)


# ---- functions without arrays, the same in both front ends ----

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    _core.barrier(resolve(process_set, "barrier"))


def join(device=-1):
    """This rank has no more data: until every rank has joined, the others' allreduces go
    on with zeros from it. Returns the last rank to join. device: Horovod's; hvd's
    join needs none (CPU)."""
    return _core.join()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's obj (pickled) on every rank of the set."""
    return _core.broadcast_object(obj, root_rank, name,
                                  resolve(process_set, "broadcast_object"))


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list of every rank's obj (pickled), in the set's rank order."""
    return _core.allgather_object(obj, name, resolve(process_set, "allgather_object"))
