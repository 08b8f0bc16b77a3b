/* collectives/barrier.c: dissemination barrier. In round k (distance d = 2^k < N)
   rank r signals r + d and waits for r - d. After ceil(log2 N) rounds every rank has
   heard, directly or through others, from every rank, so none leaves before all came. */
#include "collectives/coll_internal.h"

coll_status_t coll_barrier(coll_transport_t *t) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  const int N = t->size, r = t->rank;
  unsigned char out = 1, in = 0;
  for (int d = 1; d < N && st == COLL_OK; d *= 2) {
    st = coll_sendrecv(t, (r + d) % N, &out, 1, (r - d + N) % N, &in, 1, COLL_TAG_BARRIER);
  }
  return st;
}
