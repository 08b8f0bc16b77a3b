/* collectives/alltoall.c: pairwise exchange. In step k (1 <= k < N) rank r sends its
   block for r + k and receives the block from r - k, so each step is a permutation
   and no rank is hit by two senders at once. In place (sendbuf == recvbuf) the send
   blocks are first copied to scratch. */
#include <string.h>

#include "collectives/coll_internal.h"

coll_status_t coll_alltoall(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                            size_t count, coll_dtype_t dtype) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "alltoall: invalid dtype %d", (int)dtype);
  if (count > 0 && (!sendbuf || !recvbuf)) return coll_fail(t, COLL_ERR_ARG, "alltoall: NULL buffer");
  if (count == 0) return COLL_OK;
  const int N = t->size, r = t->rank;
  const size_t bs = count * coll_dtype_size(dtype);
  coll_temp_t copy = {NULL, 0};
  const char *src = sendbuf;
  if (sendbuf == recvbuf && N > 1) {
    if ((st = coll_temp_get(t, COLL_SCRATCH_WORK, bs * (size_t)N, &copy)) != COLL_OK) return st;
    memcpy(copy.ptr, sendbuf, bs * (size_t)N);
    src = copy.ptr;
  }
  char *dst = recvbuf;
  if (src != dst) memmove(dst + (size_t)r * bs, src + (size_t)r * bs, bs);
  for (int k = 1; k < N && st == COLL_OK; k++) {
    int to = (r + k) % N, from = (r - k + N) % N;
    coll_request_t sreq, rreq;
    st = t->ops->irecv(t, from, dst + (size_t)from * bs, bs, COLL_TAG_ALLTOALL, &rreq);
    if (st != COLL_OK) break;
    st = t->ops->isend(t, to, src + (size_t)to * bs, bs, COLL_TAG_ALLTOALL, &sreq);
    if (st != COLL_OK) { /* never wait for a receive whose partner we failed */
      coll_abandon(t, &rreq);
      break;
    }
    st = t->ops->wait(t, &rreq);
    if (st == COLL_OK) st = t->ops->wait(t, &sreq);
    else coll_abandon(t, &sreq);
  }
  coll_temp_release(&copy);
  return st;
}
