/* collectives/allreduce.c: picks the allreduce algorithm by message size. */
#include "collectives/coll_internal.h"

coll_status_t coll_allreduce(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                             size_t count, coll_dtype_t dtype, coll_op_t op) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, op)) != COLL_OK) return st;
  /* Small: latency dominates, log2(N) rounds beat the ring's 2(N-1) steps. Also when
     there are fewer elements than ranks, where ring segments would be empty. */
  size_t bytes = count * coll_dtype_size(dtype);
  if (bytes < coll_small_message_bytes() || count < (size_t)t->size)
    return coll_recursive_doubling_allreduce(t, sendbuf, recvbuf, count, dtype, op);
  return coll_ring_allreduce(t, sendbuf, recvbuf, count, dtype, op);
}
