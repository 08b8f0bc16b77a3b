/* collectives/allreduce.c: picks the allreduce algorithm by message size. */
#include "collectives/coll_internal.h"

/* Small: latency dominates, log2(N) rounds beat the ring's 2(N-1) steps. Also when there
   are fewer elements than ranks, where ring segments would be empty. */
static int use_recursive_doubling(const coll_transport_t *t, size_t count, coll_dtype_t dtype) {
  return count * coll_dtype_size(dtype) < coll_small_message_bytes() || count < (size_t)t->size;
}

coll_status_t coll_allreduce(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                             size_t count, coll_dtype_t dtype, coll_op_t op) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, op)) != COLL_OK) return st;
  if (use_recursive_doubling(t, count, dtype))
    return coll_recursive_doubling_allreduce(t, sendbuf, recvbuf, count, dtype, op);
  return coll_ring_allreduce(t, sendbuf, recvbuf, count, dtype, op);
}

coll_status_t coll_allreduce_divided(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                     size_t count, coll_dtype_t dtype, int divisor) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, COLL_SUM)) != COLL_OK) return st;
  if (!use_recursive_doubling(t, count, dtype))
    return coll_ring_allreduce_divided(t, sendbuf, recvbuf, count, dtype, COLL_SUM, divisor);
  st = coll_recursive_doubling_allreduce(t, sendbuf, recvbuf, count, dtype, COLL_SUM);
  if (st == COLL_OK) coll_divide(recvbuf, count, dtype, divisor);
  return st;
}
