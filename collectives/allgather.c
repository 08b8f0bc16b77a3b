/* collectives/allgather.c: ring allgather with unequal counts (0 allowed).
   At step s (0 <= s < N-1) rank r sends block (r - s) mod N to r+1 and receives block
   (r - s - 1) mod N from r-1: its own block first, then each block it just received,
   chunked and pipelined by the ring engine. */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

coll_status_t coll_allgatherv(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                              const size_t *counts, coll_dtype_t dtype) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "allgatherv: invalid dtype %d", (int)dtype);
  if (!counts) return coll_fail(t, COLL_ERR_ARG, "allgatherv: NULL counts");
  const int N = t->size, r = t->rank;
  const size_t es = coll_dtype_size(dtype);
  size_t *offsets = malloc((size_t)N * sizeof *offsets), total = 0;
  if (!offsets) return coll_fail(t, COLL_ERR_NO_MEMORY, "allgatherv: out of memory");
  for (int g = 0; g < N; g++) {
    offsets[g] = total;
    total += counts[g];
  }
  if ((counts[r] > 0 && !sendbuf) || (total > 0 && !recvbuf)) {
    free(offsets);
    return coll_fail(t, COLL_ERR_ARG, "allgatherv: NULL buffer (own count %zu, total %zu)",
                     counts[r], total);
  }
  char *own = (char *)recvbuf + offsets[r] * es;
  if (counts[r] && (const char *)sendbuf != own) memmove(own, sendbuf, counts[r] * es);
  if (N > 1) {
    coll_ring_plan_t plan = {
        .src = recvbuf,
        .work = recvbuf,
        .own_first = own,
        .offsets = offsets,
        .counts = counts,
        .base = 0,
        .nsteps = N - 1,
        .nreduce = 0,
        .tag = COLL_TAG_ALLGATHERV,
        .dtype = dtype,
        .op = COLL_SUM,
    };
    st = coll_ring_run(t, &plan);
  }
  free(offsets);
  return st;
}
