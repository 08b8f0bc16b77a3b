/* collectives/recursive_doubling.c: latency-optimal allreduce for small messages.

   log2(P) rounds; in round k rank r exchanges its whole buffer with r XOR 2^k and both
   reduce, so after the last round everybody holds the full reduction. Sizes that are
   not a power of two (MPICH's scheme): with P the largest power of two <= N and
   rem = N - P, the first 2*rem ranks pair up first; each even one hands its data to its
   odd neighbour and sits the rounds out, the P survivors run the rounds (renumbered),
   and at the end each odd one hands the result back. Example N = 6 (P = 4, rem = 2):

     pre:   0 -> 1, 2 -> 3            (survivors 1, 3, 4, 5 become 0, 1, 2, 3)
     k = 0: 1 <-> 3, 4 <-> 5
     k = 1: 1 <-> 4, 3 <-> 5
     post:  1 -> 0, 3 -> 2

   The reductions are commutative and IEEE addition/multiplication are exactly
   commutative, so both partners of a round compute bitwise equal results. */
#include <string.h>

#include "collectives/coll_internal.h"

static coll_status_t send_recv(coll_transport_t *t, int peer, const void *sbuf, void *rbuf,
                               size_t bytes) {
  return coll_sendrecv(t, peer, sbuf, bytes, peer, rbuf, bytes, COLL_TAG_RECURSIVE_DOUBLING);
}

static coll_status_t send_only(coll_transport_t *t, int peer, const void *buf, size_t bytes) {
  coll_request_t req;
  coll_status_t st = t->ops->isend(t, peer, buf, bytes, COLL_TAG_RECURSIVE_DOUBLING, &req);
  return st != COLL_OK ? st : t->ops->wait(t, &req);
}

static coll_status_t recv_only(coll_transport_t *t, int peer, void *buf, size_t bytes) {
  coll_request_t req;
  coll_status_t st = t->ops->irecv(t, peer, buf, bytes, COLL_TAG_RECURSIVE_DOUBLING, &req);
  return st != COLL_OK ? st : t->ops->wait(t, &req);
}

coll_status_t coll_recursive_doubling_allreduce(coll_transport_t *t, const void *sendbuf,
                                                void *recvbuf, size_t count,
                                                coll_dtype_t dtype, coll_op_t op) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, op)) != COLL_OK) return st;
  if (count > 0 && (!sendbuf || !recvbuf))
    return coll_fail(t, COLL_ERR_ARG, "recursive doubling: NULL buffer for %zu elements", count);
  const size_t bytes = count * coll_dtype_size(dtype);
  if (bytes && sendbuf != recvbuf) memmove(recvbuf, sendbuf, bytes);
  const int N = t->size, r = t->rank;
  if (N == 1 || count == 0) return COLL_OK;

  int P = 1;
  while (P * 2 <= N) P *= 2;
  const int rem = N - P;
  coll_temp_t tmp;
  if ((st = coll_temp_get(t, COLL_SCRATCH_WORK, bytes, &tmp)) != COLL_OK) return st;

  int newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      st = send_only(t, r + 1, recvbuf, bytes);
      newrank = -1;
    } else {
      st = recv_only(t, r - 1, tmp.ptr, bytes);
      if (st == COLL_OK) coll_reduce3(recvbuf, recvbuf, tmp.ptr, count, dtype, op);
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }
  for (int mask = 1; st == COLL_OK && newrank >= 0 && mask < P; mask <<= 1) {
    int np = newrank ^ mask;
    int peer = np < rem ? np * 2 + 1 : np + rem;
    st = send_recv(t, peer, recvbuf, tmp.ptr, bytes);
    if (st == COLL_OK) coll_reduce3(recvbuf, recvbuf, tmp.ptr, count, dtype, op);
  }
  if (st == COLL_OK && r < 2 * rem)
    st = (r % 2) ? send_only(t, r - 1, recvbuf, bytes) : recv_only(t, r + 1, recvbuf, bytes);
  coll_temp_release(&tmp);
  return st;
}
