/* collectives/reduce_scatter.c: ring reduce-scatter with per-rank counts.
   The allreduce's first half shifted by one segment: at step s (0 <= s < N-1) rank r
   sends segment (r - 1 - s) mod N and receives segment (r - 2 - s) mod N, so after the
   last step it holds its own segment r complete. Partial sums are built in a full-size
   work buffer (the transport's scratch), then segment r is copied out. */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

coll_status_t coll_reduce_scatter(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                  const size_t *counts, coll_dtype_t dtype, coll_op_t op) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, op)) != COLL_OK) return st;
  if (!counts) return coll_fail(t, COLL_ERR_ARG, "reduce_scatter: NULL counts");
  const int N = t->size, r = t->rank;
  const size_t es = coll_dtype_size(dtype);
  size_t *offsets = malloc((size_t)N * sizeof *offsets), total = 0;
  if (!offsets) return coll_fail(t, COLL_ERR_NO_MEMORY, "reduce_scatter: out of memory");
  for (int g = 0; g < N; g++) {
    offsets[g] = total;
    total += counts[g];
  }
  if ((total > 0 && !sendbuf) || (counts[r] > 0 && !recvbuf)) {
    free(offsets);
    return coll_fail(t, COLL_ERR_ARG, "reduce_scatter: NULL buffer (own count %zu, total %zu)",
                     counts[r], total);
  }
  if (N == 1) {
    if (counts[0] && sendbuf != recvbuf) memmove(recvbuf, sendbuf, counts[0] * es);
    free(offsets);
    return COLL_OK;
  }
  coll_temp_t work;
  st = coll_temp_get(t, COLL_SCRATCH_WORK, total * es, &work);
  if (st == COLL_OK) {
    int seg0 = ((r - 1) % N + N) % N;
    coll_ring_plan_t plan = {
        .src = sendbuf,
        .work = work.ptr,
        .own_first = (const char *)sendbuf + offsets[seg0] * es,
        .offsets = offsets,
        .counts = counts,
        .base = -1,
        .nsteps = N - 1,
        .nreduce = N - 1,
        .tag = COLL_TAG_REDUCE_SCATTER,
        .dtype = dtype,
        .op = op,
    };
    st = coll_ring_run(t, &plan);
    if (st == COLL_OK && counts[r])
      coll_copy(recvbuf, (char *)work.ptr + offsets[r] * es, counts[r] * es);
    coll_temp_release(&work);
  }
  free(offsets);
  return st;
}
