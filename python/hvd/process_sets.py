"""hvd.process_sets: Horovod's process sets on hvd's (hvd_process_set_add/remove/rank/size).

A ProcessSet is a sorted list of global ranks; hvd.add_process_set (or
hvd.init(process_sets=[...])) registers it on every rank (collective over the world, as
hvd_process_set_add is) and gives it its id. A collective with process_set=ps involves
only ps's ranks; root_rank stays a global rank, as in Horovod, and results come in the
set's rank order. hvd needs no HOROVOD_DYNAMIC_PROCESS_SETS: sets can always be added
and removed after init.
"""
import ctypes
import numbers

from . import _lib
from ._lib import check, lib

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]


class ProcessSet:
    """A set of ranks that run collectives together: ProcessSet([0, 2]). Pass it to
    hvd.init(process_sets=[...]) or hvd.add_process_set(), then as process_set= to the
    collectives and DistributedOptimizer."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet takes a list of ranks, not %s (hvd's Python package "
                             "has no mpi4py: communicators are not supported)"
                             % type(ranks_or_comm).__name__) from None
        if any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in ranks):
            raise ValueError("ProcessSet takes a list of integer ranks, got %r" % (ranks,))
        self.ranks = [int(r) for r in ranks]

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set; None before it is added."""
        if self.process_set_id is None:
            return None
        n = lib.hvd_process_set_size(self.process_set_id)
        if n < 0:
            raise ValueError("%s is not known to the runtime (hvd.init() first)" % self)
        return n

    def rank(self):
        """This process's index in the set (0 for its first rank); None before it is
        added. A rank outside the set gets ValueError, as in Horovod."""
        if self.process_set_id is None:
            return None
        r = lib.hvd_process_set_rank(self.process_set_id)
        if r < 0:
            raise ValueError("rank %d is not part of %s" % (lib.hvd_rank(), self))
        return r

    def included(self):
        """Whether this process is one of the set's ranks (None without ranks)."""
        if self.ranks is None:
            return None
        return lib.hvd_rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)" % (
            self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# Every set added and not removed, by id. Every rank adds and removes the same sets in
# the same order (the C calls are collective), so every rank's table is the same and a
# refusal below happens on every rank alike.
_registered = {}


def _on_init():
    global_process_set.ranks = list(range(lib.hvd_size()))


def _on_shutdown():
    for ps in _registered.values():
        ps._invalidate()
    _registered.clear()


def add_process_set(process_set):
    """Registers process_set (a ProcessSet or a list of ranks) on every rank and returns
    it with its id. Collective: every rank calls it with the same ranks, including the
    ranks outside the set. A set with the ranks of one already there: ValueError."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if not lib.hvd_initialized():
        raise ValueError("hvd.add_process_set: Horovod has not been initialized; use "
                         "hvd.init() first")
    n = len(process_set.ranks)
    new_id = ctypes.c_int32(-1)
    # The C call first: it makes the ranks agree on the list (HVD_ERR_MISMATCH on every
    # rank when they differ), so the refusal below is the same on every rank and no rank
    # is left waiting in a collective the others skipped.
    check(lib.hvd_process_set_add((ctypes.c_int * n)(*process_set.ranks), n,
                                  ctypes.byref(new_id)),
          "add_process_set(%s)" % process_set.ranks)
    same = [ps for ps in [global_process_set] + list(_registered.values())
            if ps.ranks == process_set.ranks]
    if same or process_set.process_set_id is not None:
        check(lib.hvd_process_set_remove(new_id.value), "add_process_set(%s)" % process_set.ranks)
        raise ValueError("hvd.add_process_set: attempted to add a duplicate process set: %s "
                         "(%s has these ranks)" % (process_set, same[0] if same else "it"))
    process_set.process_set_id = new_id.value
    _registered[new_id.value] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes process_set on every rank (collective, with none of its collectives in
    flight); True if it was removed, False if it was not there (or is the global set)."""
    ps_id = getattr(process_set, "process_set_id", None)
    if ps_id is None or ps_id == 0 or _registered.get(ps_id) is not process_set:
        return False
    check(lib.hvd_process_set_remove(ps_id), "remove_process_set(%s)" % process_set.ranks)
    del _registered[ps_id]
    process_set._invalidate()
    return True


class Resolved:
    """What a collective needs of its set: the C options, its size, this rank's index
    (-1 outside it: the C call then fails with hvd's message) and its global ranks."""

    def __init__(self, ps_id, size, index, ranks):
        self.options = _lib.Options(ps_id, 0.0, 0.0)
        self.id, self.size, self.index, self.ranks = ps_id, size, index, ranks

    def root_index(self, root_rank, what):
        """A global root rank as the set's index (the C API counts roots in the set)."""
        root_rank = int(root_rank)
        if self.id == 0:
            return root_rank
        if root_rank in self.ranks:
            return self.ranks.index(root_rank)
        if self.index < 0:
            return 0      # not a member: the call fails with hvd's message instead
        raise ValueError("hvd.%s: root_rank %d is not in the process set (ranks %s)"
                         % (what, root_rank, self.ranks))


def resolve(process_set, what):
    if process_set is None or process_set is global_process_set:
        # Before init (size -1) the C call reports it; the Python side plans for size 1.
        n = lib.hvd_size()
        return Resolved(0, max(n, 1), max(lib.hvd_rank(), 0), list(range(max(n, 1))))
    if not isinstance(process_set, ProcessSet):
        raise TypeError("hvd.%s: process_set must be a hvd.ProcessSet, not %s"
                        % (what, type(process_set).__name__))
    ps_id = process_set.process_set_id
    if ps_id is None or _registered.get(ps_id) is not process_set:
        raise ValueError("hvd.%s: %s has not been added (hvd.add_process_set, or "
                         "hvd.init(process_sets=[...])) or was removed" % (what, process_set))
    return Resolved(ps_id, lib.hvd_process_set_size(ps_id), lib.hvd_process_set_rank(ps_id),
                    process_set.ranks)
