"""hvd._core: the collectives once, for any array type.

A front end (hvd for numpy arrays, hvd.torch for tensors) passes an adapter with these
methods: describe(x, what, inplace) -> (pointer, element count, hvd dtype code) after
checking x (a CPU buffer of a supported dtype, contiguous where hvd writes into it);
clone(x); empty_like(x); scale_(x, factor) in place; shape(x); from_c(pointer, count,
code, shape, like) -> a new array holding a copy of the C buffer; zeros(shape, like);
cat(list of arrays); rows(x, start, stop).

Every collective is submitted asynchronously and returns a Handle; the blocking forms
are the async form plus synchronize(), as in the C API.
"""
import ctypes
import math
import pickle

import numpy as np

from . import _lib
from ._lib import HorovodInternalError, check, encode_name, lib

# Horovod's reduction ops (values are hvd_op_t's). Adasum is Horovod's too, not ours.
Sum, Average, Min, Max, Product = _lib.SUM, _lib.AVERAGE, _lib.MIN, _lib.MAX, _lib.PRODUCT
Adasum = "Adasum"
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}


def resolve_op(op, average=None):
    """Horovod's rule: op wins; else average=True/None means Average, False Sum."""
    if op is None:
        return Sum if average is False else Average
    if average is not None:
        raise ValueError("hvd: give op or average (deprecated), not both")
    if op == Adasum:
        raise NotImplementedError("hvd: op=Adasum is not supported: hvd's runtime has no "
                                  "Adasum reduction (Average, Sum, Min, Max and Product are)")
    if op not in _OP_NAMES:
        raise ValueError("hvd: op=%r is not one of Average, Sum, Min, Max, Product" % (op,))
    return op


# Buffers of every operation submitted and not yet waited for, keyed by its request: a
# handle the caller drops (allreduce_async_(t) with the result ignored) must not free a
# tensor the runtime still reads or writes. As Horovod's handle map, an entry goes at
# synchronize(); one never synchronized stays for the life of the process.
_in_flight = {}


class Handle:
    """An operation in flight: synchronize(handle) waits for it and returns its output;
    poll(handle) says whether it has finished. Holds every buffer the C call writes or
    reads until then, so nothing is freed under the runtime."""

    def __init__(self, what, keep, finish):
        self.what = what
        self.req = ctypes.c_void_p()
        self._keep = keep
        self._finish = finish
        self._status = None      # known once hvd_wait or hvd_test has freed the request
        self._done = False
        self._output = None

    def poll(self):
        if self._status is None:
            done = ctypes.c_int(0)
            status = lib.hvd_test(self.req, ctypes.byref(done))
            if done.value:
                self._status = status
                self._message = _lib.error_message(status) if status != _lib.OK else ""
            elif status != _lib.OK:
                check(status, self.what)
        return self._status is not None

    def wait(self):
        if not self._done:
            if self._status is None:
                self._status = lib.hvd_wait(self.req)
                self._message = _lib.error_message(self._status) if self._status else ""
            self._done = True
            _in_flight.pop(id(self.req), None)
            if self._status != _lib.OK:
                self._keep = self._finish = None
                raise HorovodInternalError("%s failed: %s" % (self.what, self._message))
            self._output = self._finish()
            self._keep = self._finish = None
        elif self._status != _lib.OK:
            raise HorovodInternalError("%s failed: %s" % (self.what, self._message))
        return self._output


def synchronize(handle):
    if not isinstance(handle, Handle):
        raise TypeError("hvd.synchronize: expected a handle of an *_async call, got %s"
                        % type(handle).__name__)
    return handle.wait()


def poll(handle):
    if not isinstance(handle, Handle):
        raise TypeError("hvd.poll: expected a handle of an *_async call, got %s"
                        % type(handle).__name__)
    return handle.poll()


def _submit(handle, status):
    check(status, handle.what)
    _in_flight[id(handle.req)] = (handle.req, handle._keep)
    return handle


def allreduce_async(A, x, inplace, op, prescale_factor, postscale_factor, name, ps):
    """Horovod's prescale/postscale: the input is multiplied by prescale_factor before the
    reduction and the result by postscale_factor after (Average divides by size too)."""
    ptr, count, code = A.describe(x, "allreduce", inplace)
    # Prescaled in a copy even in place: a call that fails (a duplicate name, before init)
    # leaves the caller's tensor as it was.
    src = A.clone(x) if prescale_factor != 1.0 else x
    if prescale_factor != 1.0:
        A.scale_(src, prescale_factor)
    out = x if inplace else A.empty_like(x)
    sptr = ptr if src is x else A.describe(src, "allreduce", False)[0]
    optr = ptr if out is x else A.describe(out, "allreduce", True)[0]

    def finish():
        if postscale_factor != 1.0:
            A.scale_(out, postscale_factor)
        return out

    h = Handle("allreduce(%s)" % (name or "unnamed"), (x, src, out, ps), finish)
    return _submit(h, lib.hvd_allreduce_async_ex(encode_name(name), sptr, optr, count, code,
                                                 op, ps.options, ctypes.byref(h.req)))


def grouped_allreduce_async(A, xs, inplace, op, prescale_factor, postscale_factor, name,
                            ps):
    xs = list(xs)
    if not xs:
        raise ValueError("hvd.grouped_allreduce: the list of tensors is empty")
    infos = [A.describe(x, "grouped_allreduce", inplace) for x in xs]
    codes = {c for _, _, c in infos}
    if len(codes) != 1:
        raise ValueError("hvd.grouped_allreduce: every tensor of a group must have the same "
                         "dtype (hvd reduces a group as one unit)")
    srcs = list(xs)
    if prescale_factor != 1.0:
        srcs = [A.clone(x) for x in xs]    # a copy in place too, as allreduce_async's
        for s in srcs:
            A.scale_(s, prescale_factor)
    outs = xs if inplace else [A.empty_like(x) for x in xs]
    n = len(xs)
    sptrs = (ctypes.c_void_p * n)(*[A.describe(s, "grouped_allreduce", False)[0] for s in srcs])
    optrs = (ctypes.c_void_p * n)(*[A.describe(o, "grouped_allreduce", True)[0] for o in outs])
    counts = (ctypes.c_size_t * n)(*[c for _, c, _ in infos])
    names = None
    if name is not None:
        names = (ctypes.c_char_p * n)(*[encode_name("%s.%d" % (name, i)) for i in range(n)])

    def finish():
        if postscale_factor != 1.0:
            for o in outs:
                A.scale_(o, postscale_factor)
        return outs

    h = Handle("grouped_allreduce(%s)" % (name or "unnamed"),
               (xs, srcs, outs, sptrs, optrs, counts, names, ps), finish)
    return _submit(h, lib.hvd_grouped_allreduce_async_ex(n, names, sptrs, optrs, counts,
                                                         codes.pop(), op, ps.options,
                                                         ctypes.byref(h.req)))


def broadcast_async(A, x, inplace, root_rank, name, ps):
    """root_rank is a global rank (Horovod's meaning, in a process set too)."""
    root = ps.root_index(root_rank, "broadcast")
    out = x if inplace else A.clone(x)
    ptr, count, code = A.describe(out, "broadcast", True)
    h = Handle("broadcast(%s)" % (name or "unnamed"), (x, out, ps), lambda: out)
    return _submit(h, lib.hvd_broadcast_async_ex(encode_name(name), ptr, count, code, root,
                                                 ps.options, ctypes.byref(h.req)))


def _row_elems(shape):
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def _rows_shape(A, x, what):
    shape = tuple(A.shape(x))
    if len(shape) == 0:
        raise ValueError("hvd.%s: the tensor must have at least one dimension (the one "
                         "ranks concatenate or split along)" % what)
    return shape


def _take_c_buffer(A, buf, count, code, shape, like, what):
    """Copies a buffer hvd allocated with malloc into a new array and frees it."""
    try:
        row = _row_elems(shape)
        if row and count % row:
            raise HorovodInternalError(
                "%s: received %d elements, not a whole number of rows of %d (shape %s "
                "here): the ranks' tensors differ beyond their first dimension"
                % (what, count, row, tuple(shape)))
        rows = count // row if row else 0
        return A.from_c(buf.value, count, code, (rows,) + tuple(shape[1:]), like)
    finally:
        _lib.free(buf)


def allgather(A, x, name, ps):
    shape = _rows_shape(A, x, "allgather")
    ptr, count, code = A.describe(x, "allgather", False)
    buf, total = ctypes.c_void_p(), ctypes.c_size_t()
    what = "allgather(%s)" % (name or "unnamed")
    check(lib.hvd_allgather_ex(encode_name(name), ptr, count, code, ctypes.byref(buf),
                               ctypes.byref(total), ps.options), what)
    return _take_c_buffer(A, buf, total.value, code, shape, x, what)


def alltoall_async(A, x, splits, name, ps):
    """splits: rows of x for each rank of the set in its order (None: an equal share
    each). The output of synchronize is (tensor, received rows per rank)."""
    shape = _rows_shape(A, x, "alltoall")
    ptr, count, code = A.describe(x, "alltoall", False)
    n = ps.size
    row = _row_elems(shape)
    csplits = None
    if splits is not None:
        rows = [int(s) for s in np.asarray(splits).reshape(-1)]
        if len(rows) != n or any(r < 0 for r in rows) or sum(rows) != shape[0]:
            raise ValueError("hvd.alltoall: splits %s must give %d non-negative row counts "
                             "(one per rank of the set) adding up to the tensor's %d rows"
                             % (rows, n, shape[0]))
        csplits = (ctypes.c_size_t * n)(*[r * row for r in rows])
    elif shape[0] % n:
        raise ValueError("hvd.alltoall: without splits the first dimension (%d) must divide "
                         "evenly by the number of ranks (%d)" % (shape[0], n))
    buf, total = ctypes.c_void_p(), ctypes.c_size_t()
    recv_splits = (ctypes.c_size_t * n)()
    what = "alltoall(%s)" % (name or "unnamed")

    def finish():
        out = _take_c_buffer(A, buf, total.value, code, shape, x, what)
        return out, [s // row if row else 0 for s in recv_splits]

    h = Handle(what, (x, csplits, buf, total, recv_splits, ps), finish)
    return _submit(h, lib.hvd_alltoall_async_ex(encode_name(name), ptr, count, csplits, code,
                                                ctypes.byref(buf), ctypes.byref(total),
                                                recv_splits, ps.options, ctypes.byref(h.req)))


def reducescatter_async(A, x, op, prescale_factor, postscale_factor, name, ps):
    """Horovod's split: rank r gets rows [r*q + min(r, e), ...), q = rows // size, the
    first e = rows % size ranks one row more. hvd splits elements the same way, so when
    rows do not divide evenly each rank's share is padded to q + 1 rows (the pad rows are
    reduced and dropped)."""
    shape = _rows_shape(A, x, "reducescatter")
    A.describe(x, "reducescatter", False)
    n, me = ps.size, max(ps.index, 0)
    rows = shape[0]
    q, e = divmod(rows, n)
    mine = q + (1 if me < e else 0)
    src = x
    if e:
        parts, start = [], 0
        for r in range(n):
            k = q + (1 if r < e else 0)
            parts.append(A.rows(x, start, start + k))
            if k == q:
                parts.append(A.zeros((1,) + tuple(shape[1:]), x))
            start += k
        src = A.cat(parts)
    elif prescale_factor != 1.0:
        src = A.clone(x)
    if prescale_factor != 1.0:
        A.scale_(src, prescale_factor)
    sptr, count, code = A.describe(src, "reducescatter", False)
    share = q + (1 if e else 0)
    out = A.zeros((share,) + tuple(shape[1:]), x)
    optr = A.describe(out, "reducescatter", True)[0]
    got = ctypes.c_size_t()

    def finish():
        res = A.rows(out, 0, mine) if mine != share else out
        if postscale_factor != 1.0:
            res = A.clone(res)
            A.scale_(res, postscale_factor)
        return res

    h = Handle("reducescatter(%s)" % (name or "unnamed"), (x, src, out, got, ps), finish)
    return _submit(h, lib.hvd_reducescatter_async_ex(encode_name(name), sptr, count, code, op,
                                                     optr, ctypes.byref(got), ps.options,
                                                     ctypes.byref(h.req)))


def join():
    last = ctypes.c_int(-1)
    check(lib.hvd_join(ctypes.byref(last)), "join")
    return last.value


def barrier(ps):
    check(lib.hvd_barrier_ex(ps.options), "barrier")


def broadcast_object(obj, root_rank, name, ps):
    """Pickles obj on root_rank (a global rank) and returns it on every rank of the set
    (Horovod uses cloudpickle; plain pickle here, so lambdas and local classes do not
    travel)."""
    base = name or "broadcast_object"
    root = ps.root_index(root_rank, "broadcast_object")
    is_root = ps.index == root
    if is_root:
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
        length = np.array([data.size], dtype=np.int64)
    else:
        data, length = None, np.zeros(1, dtype=np.int64)
    _broadcast_np(length, root, base + ".len", ps)
    if data is None:
        data = np.empty(int(length[0]), dtype=np.uint8)
    _broadcast_np(data, root, base + ".data", ps)
    return obj if is_root else pickle.loads(data.tobytes())


def allgather_object(obj, name, ps):
    """Every rank's obj (pickled) in a list, in the set's rank order."""
    base = name or "allgather_object"
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = _allgather_np(np.array([data.size], dtype=np.int64), base + ".len", ps)
    gathered = _allgather_np(data, base + ".data", ps)
    if lengths.size != ps.size or int(lengths.sum()) != gathered.size:
        raise HorovodInternalError("allgather_object(%s): %d lengths adding up to %d bytes "
                                   "for %d bytes received from %d ranks"
                                   % (base, lengths.size, int(lengths.sum()), gathered.size,
                                      ps.size))
    out, start = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(gathered[start:start + n].tobytes()))
        start += n
    return out


def _code_of(arr):
    return _lib.INT64 if arr.dtype == np.int64 else _lib.UINT8


def _broadcast_np(arr, root, name, ps):
    """root: the set's index of the root."""
    h = Handle("broadcast(%s)" % name, (arr, ps), lambda: arr)
    check(lib.hvd_broadcast_async_ex(encode_name(name), arr.ctypes.data, arr.size,
                                     _code_of(arr), root, ps.options, ctypes.byref(h.req)),
          h.what)
    return h.wait()


def _allgather_np(arr, name, ps):
    buf, total = ctypes.c_void_p(), ctypes.c_size_t()
    check(lib.hvd_allgather_ex(encode_name(name), arr.ctypes.data, arr.size, _code_of(arr),
                               ctypes.byref(buf), ctypes.byref(total), ps.options),
          "allgather(%s)" % name)
    try:
        out = np.empty(total.value, dtype=arr.dtype)
        if total.value:
            ctypes.memmove(out.ctypes.data, buf.value, out.nbytes)
        return out
    finally:
        _lib.free(buf)
