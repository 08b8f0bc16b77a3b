/* collectives/alltoall.c: pairwise exchange. In step k (1 <= k < N) rank r sends its
   block for r + k and receives the block from r - k, so each step is a permutation
   and no rank is hit by two senders at once. In place (sendbuf == recvbuf) the send
   blocks are first copied to scratch. */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

/* The exchange, with per-rank counts: block j of src (scounts[j] elements, blocks in
   rank order) goes to rank j, and block j of dst (rcounts[j]) comes from rank j. */
static coll_status_t pairwise(coll_transport_t *t, const char *src, const size_t *scounts,
                              char *dst, const size_t *rcounts, coll_dtype_t dtype) {
  const int N = t->size, r = t->rank;
  const size_t es = coll_dtype_size(dtype);
  size_t soff = 0, roff = 0, my_soff = 0, my_roff = 0;
  size_t *sdis = malloc(2 * (size_t)N * sizeof(*sdis));
  if (!sdis) return coll_fail(t, COLL_ERR_NO_MEMORY, "alltoall: out of memory");
  size_t *rdis = sdis + N;
  for (int j = 0; j < N; j++) {
    sdis[j] = soff;
    rdis[j] = roff;
    soff += scounts[j] * es;
    roff += rcounts[j] * es;
  }
  my_soff = sdis[r];
  my_roff = rdis[r];
  coll_status_t st = COLL_OK;
  if (src + my_soff != dst + my_roff) memmove(dst + my_roff, src + my_soff, scounts[r] * es);
  for (int k = 1; k < N && st == COLL_OK; k++) {
    int to = (r + k) % N, from = (r - k + N) % N;
    st = coll_sendrecv(t, to, src + sdis[to], scounts[to] * es, from, dst + rdis[from],
                       rcounts[from] * es, COLL_TAG_ALLTOALL);
  }
  free(sdis);
  return st;
}

static coll_status_t equal_counts(coll_transport_t *t, size_t count, size_t **out) {
  *out = malloc((size_t)t->size * sizeof(**out));
  if (!*out) return coll_fail(t, COLL_ERR_NO_MEMORY, "alltoall: out of memory");
  for (int j = 0; j < t->size; j++) (*out)[j] = count;
  return COLL_OK;
}

coll_status_t coll_alltoall(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                            size_t count, coll_dtype_t dtype) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "alltoall: invalid dtype %d", (int)dtype);
  if (count > 0 && (!sendbuf || !recvbuf)) return coll_fail(t, COLL_ERR_ARG, "alltoall: NULL buffer");
  if (count == 0) return COLL_OK;
  const int N = t->size;
  const size_t bs = count * coll_dtype_size(dtype);
  coll_temp_t copy = {NULL, 0};
  const char *src = sendbuf;
  if (sendbuf == recvbuf && N > 1) {
    if ((st = coll_temp_get(t, COLL_SCRATCH_WORK, bs * (size_t)N, &copy)) != COLL_OK) return st;
    coll_copy(copy.ptr, sendbuf, bs * (size_t)N);
    src = copy.ptr;
  }
  size_t *sc = NULL;
  if ((st = equal_counts(t, count, &sc)) == COLL_OK)
    st = pairwise(t, src, sc, recvbuf, sc, dtype);
  free(sc);
  coll_temp_release(&copy);
  return st;
}

coll_status_t coll_alltoallv(coll_transport_t *t, const void *sendbuf,
                             const size_t *sendcounts, void *recvbuf,
                             const size_t *recvcounts, coll_dtype_t dtype) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "alltoallv: invalid dtype %d", (int)dtype);
  if (!sendcounts || !recvcounts) return coll_fail(t, COLL_ERR_ARG, "alltoallv: NULL counts");
  size_t ns = 0, nr = 0;
  for (int j = 0; j < t->size; j++) {
    ns += sendcounts[j];
    nr += recvcounts[j];
  }
  if ((ns > 0 && !sendbuf) || (nr > 0 && !recvbuf))
    return coll_fail(t, COLL_ERR_ARG, "alltoallv: NULL buffer");
  if (ns > 0 && sendbuf == recvbuf)
    return coll_fail(t, COLL_ERR_ARG, "alltoallv: not in place");
  return pairwise(t, sendbuf, sendcounts, recvbuf, recvcounts, dtype);
}
