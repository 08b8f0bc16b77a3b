"""Process sets of hvd (numpy) and hvd.torch against numpy's result, run inside
check_collectives.py's processes (no mpirun of its own): sets added by
hvd.init(process_sets=...) and by add_process_set; every collective with process_set=
(Average divides by the set's size, roots are global ranks, results in the set's order);
DistributedOptimizer over a set; a rank outside a set getting hvd's message; a root
outside the set, a set never added, a removed set, a duplicate and a mismatched add
refused. run() appends to failures through check(what, got, want)."""
import numpy as np
import torch

import hvd
import hvd.torch as ht


def value(r, shape):
    """Rank r's input: small integers, different on every rank, exact in every dtype."""
    n = int(np.prod(shape))
    return ((np.arange(n) * (r + 2) + r) % 3 + 1).reshape(shape).astype(np.float64)


def _expect_error(failures, what, exc, words, fn):
    try:
        fn()
        failures.append("%s: did not raise" % what)
    except exc as e:
        if any(w not in str(e) for w in words):
            failures.append("%s: the message lacks %s: %s" % (what, words, e))


def _collectives(api, to_arr, ps, tag, check):
    """Every collective of api (hvd or hvd.torch) on the set ps, from one of its ranks."""
    R, ranks = hvd.rank(), ps.ranks
    n, me = len(ranks), ranks.index(R)
    mine = lambda r=R, s=(4, 3): value(r, s)
    xs = [mine(r) for r in ranks]
    total = np.sum(xs, axis=0)
    check("%s allreduce Sum" % tag, api.allreduce(to_arr(mine()), op=hvd.Sum, process_set=ps),
          total)
    # Average divides by the set's size, not the world's
    check("%s allreduce Average" % tag, api.allreduce(to_arr(mine()), process_set=ps),
          total / n)
    t = to_arr(mine())
    api.synchronize(api.allreduce_async_(t, op=hvd.Max, name=tag + ".max", process_set=ps))
    check("%s allreduce_async_ Max" % tag, t, np.max(xs, axis=0))
    got = api.grouped_allreduce([to_arr(mine()), to_arr(mine(R, (2,)))], op=hvd.Sum,
                                process_set=ps)
    check("%s grouped_allreduce[1]" % tag, got[1], np.sum([mine(r, (2,)) for r in ranks], 0))
    # allgather: the set's k-th rank contributes k + 1 rows, in the set's order
    parts = [value(r, (k + 1, 2)) for k, r in enumerate(ranks)]
    check("%s allgather" % tag, api.allgather(to_arr(parts[me]), process_set=ps),
          np.concatenate(parts))
    # broadcast from the set's last rank, named by its global rank
    root = ranks[-1]
    check("%s broadcast root %d" % (tag, root),
          api.broadcast(to_arr(mine()), root, process_set=ps), mine(root))
    # alltoall: the set's k-th rank sends (k + j) % 3 + 1 rows to its j-th
    rows = lambda k: [(k + j) % 3 + 1 for j in range(n)]
    srcs = [value(r, (sum(rows(k)), 2)) for k, r in enumerate(ranks)]
    out, recv = api.alltoall(to_arr(srcs[me]), splits=rows(me), process_set=ps)
    want = [srcs[k][sum(rows(k)[:me]):sum(rows(k)[:me]) + rows(k)[me]] for k in range(n)]
    check("%s alltoall" % tag, out, np.concatenate(want))
    check("%s alltoall received splits" % tag, recv, np.array([rows(k)[me] for k in range(n)]))
    # reducescatter over the set: 2n + 1 rows, the set's first rank one row more
    zs = [value(r, (2 * n + 1, 2)) for r in ranks]
    start = me * 2 + min(me, 1)
    check("%s reducescatter" % tag, api.reducescatter(to_arr(zs[me]), op=hvd.Sum,
                                                     process_set=ps),
          np.sum(zs, 0)[start:start + 2 + (1 if me < 1 else 0)])
    api.barrier(process_set=ps)


def _optimizer(ps, check):
    """DistributedOptimizer over ps: rank r's gradient is r + 1, so SGD(lr=1) from 0 moves
    w to minus the set's average of r + 1; a rank outside the set steps on its own
    gradient (as Horovod's: no allreduce, no error)."""
    w = torch.nn.Parameter(torch.zeros(2))
    opt = ht.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                  named_parameters=[("w", w)], process_set=ps)
    (w * (hvd.rank() + 1)).sum().backward()
    opt.step()
    want = np.mean([r + 1 for r in ps.ranks]) if hvd.rank() in ps.ranks else hvd.rank() + 1
    check("DistributedOptimizer over %s on rank %d" % (ps.ranks, hvd.rank()), w.detach(),
          np.full(2, -want))


def run(A, check, failures):
    """A: a set hvd.init(process_sets=[A]) added (ranks 1..N-1)."""
    R, N = hvd.rank(), hvd.size()
    evens = [r for r in range(N) if r % 2 == 0]
    B = hvd.add_process_set(evens)
    check("add_process_set returns the set, with an id", [B.process_set_id > 0], [True])
    check("ids differ", [A.process_set_id != B.process_set_id], [True])
    for ps in (A, B):
        inside = R in ps.ranks
        check("%s included()" % ps.ranks, [ps.included()], [inside])
        check("%s size()" % ps.ranks, [ps.size()], [len(ps.ranks)])
        if inside:
            check("%s rank()" % ps.ranks, [ps.rank()], [ps.ranks.index(R)])
            _collectives(hvd, lambda a: np.ascontiguousarray(a.astype(np.float32)), ps,
                         "numpy %s" % ps.ranks, check)
            _collectives(ht, lambda a: torch.from_numpy(a).to(torch.int32), ps,
                         "torch int32 %s" % ps.ranks, check)
            obj = hvd.broadcast_object({"from": R} if R == ps.ranks[-1] else None,
                                       root_rank=ps.ranks[-1], process_set=ps)
            check("broadcast_object over %s" % ps.ranks, [obj["from"]], [ps.ranks[-1]])
            check("allgather_object over %s" % ps.ranks,
                  [o["r"] for o in hvd.allgather_object({"r": R}, process_set=ps)], ps.ranks)
            _optimizer(ps, check)
            if len(ps.ranks) < N:
                outside = min(set(range(N)) - set(ps.ranks))
                _expect_error(failures, "broadcast from root %d outside %s" % (outside, ps.ranks),
                              ValueError, ["root_rank %d" % outside],
                              lambda: ht.broadcast(torch.ones(1), outside, process_set=ps))
        else:
            _optimizer(ps, check)
            # A rank outside the set: hvd's own message, from the C call.
            for api, mk in ((hvd, lambda: np.ones(2, np.float32)), (ht, lambda: torch.ones(2))):
                _expect_error(failures, "%s allreduce outside %s" % (api.__name__, ps.ranks),
                              hvd.HorovodInternalError,
                              ["HVD_ERR_INVALID_ARGUMENT", "rank %d is not in process set %d"
                               % (R, ps.process_set_id)],
                              lambda: api.allreduce(mk(), process_set=ps))
            _expect_error(failures, "rank() outside %s" % ps.ranks, ValueError,
                          ["not part of"], ps.rank)
    # Refusals, alike on every rank.
    never = hvd.ProcessSet([0])
    _expect_error(failures, "a set never added", ValueError, ["has not been added"],
                  lambda: hvd.allreduce(np.ones(1), process_set=never))
    _expect_error(failures, "a duplicate add", ValueError, ["duplicate"],
                  lambda: hvd.add_process_set(list(range(N))))
    _expect_error(failures, "a mismatched add", hvd.HorovodInternalError,
                  ["HVD_ERR_MISMATCH", "different arguments"],
                  lambda: hvd.add_process_set([0] if R == 0 else [N - 1]))
    check("remove_process_set", [hvd.remove_process_set(B)], [True])
    check("remove_process_set twice", [hvd.remove_process_set(B)], [False])
    check("remove the global set", [hvd.remove_process_set(hvd.global_process_set)], [False])
    _expect_error(failures, "a removed set", ValueError, ["has not been added"],
                  lambda: ht.allreduce(torch.ones(1), process_set=B))
    # The same ranks can be added again once removed.
    again = hvd.add_process_set(evens)
    check("added again", [again.size()], [len(evens)])
    hvd.remove_process_set(again)
