/* collectives/broadcast.c: pipelined chain broadcast from any root.
   Ranks form the chain root, root+1, ..., root-1. The buffer is cut into chunks of
   coll_chunk_bytes(); each rank forwards chunk c as soon as it has arrived, so the
   chain streams: time ~ (N - 1 + chunks) chunk transfers instead of N - 1 whole
   buffers. Receives are posted a few chunks ahead, straight into buf. */
#include <stdlib.h>

#include "collectives/coll_internal.h"

#define BCAST_DEPTH 4

coll_status_t coll_broadcast(coll_transport_t *t, void *buf, size_t count, coll_dtype_t dtype,
                             int root) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "broadcast: invalid dtype %d", (int)dtype);
  const int N = t->size, r = t->rank;
  if (root < 0 || root >= N)
    return coll_fail(t, COLL_ERR_ARG, "broadcast: root %d out of range 0..%d", root, N - 1);
  if (count > 0 && !buf) return coll_fail(t, COLL_ERR_ARG, "broadcast: NULL buffer");
  if (N == 1 || count == 0) return COLL_OK;
  const size_t es = coll_dtype_size(dtype);
  size_t ce = coll_chunk_bytes() / es;
  if (ce == 0) ce = 1;
  const size_t nch = (count + ce - 1) / ce;
  const int v = ((r - root) % N + N) % N; /* place in the chain */
  const int next = (r + 1) % N, prev = (r - 1 + N) % N;
  const int forwards = v < N - 1, receives = v > 0;

  coll_request_t *sends = forwards ? malloc(nch * sizeof *sends) : NULL;
  if (forwards && !sends) return coll_fail(t, COLL_ERR_NO_MEMORY, "broadcast: out of memory");
  coll_request_t recvs[BCAST_DEPTH];
  size_t nsent = 0, posted = 0, received = 0;
  char *base = buf;
#define CHUNK(c) (base + (c) * ce * es)
#define CHUNK_BYTES(c) (((c) + 1 < nch ? ce : count - (c) * ce) * es)

  if (!receives) {
    for (; nsent < nch && st == COLL_OK; nsent++)
      st = t->ops->isend(t, next, CHUNK(nsent), CHUNK_BYTES(nsent), COLL_TAG_BROADCAST,
                         &sends[nsent]);
    if (st != COLL_OK) nsent--; /* the failed one is not live */
  } else {
    while (posted < nch && posted < BCAST_DEPTH && st == COLL_OK) {
      st = t->ops->irecv(t, prev, CHUNK(posted), CHUNK_BYTES(posted), COLL_TAG_BROADCAST,
                         &recvs[posted % BCAST_DEPTH]);
      if (st == COLL_OK) posted++;
    }
    while (received < posted && st == COLL_OK) {
      st = t->ops->wait(t, &recvs[received % BCAST_DEPTH]);
      received++;
      if (st != COLL_OK) break;
      if (forwards) {
        st = t->ops->isend(t, next, CHUNK(received - 1), CHUNK_BYTES(received - 1),
                           COLL_TAG_BROADCAST, &sends[nsent]);
        if (st != COLL_OK) break;
        nsent++;
      }
      if (posted < nch) {
        st = t->ops->irecv(t, prev, CHUNK(posted), CHUNK_BYTES(posted), COLL_TAG_BROADCAST,
                           &recvs[posted % BCAST_DEPTH]);
        if (st == COLL_OK) posted++;
      }
    }
    /* On failure, give up the receives still posted into buf (never wait: the peer
       that failed will not send them). */
    for (; received < posted; received++) coll_abandon(t, &recvs[received % BCAST_DEPTH]);
  }
  for (size_t c = 0; c < nsent; c++) {
    if (st == COLL_OK) st = t->ops->wait(t, &sends[c]);
    else coll_abandon(t, &sends[c]);
  }
#undef CHUNK
#undef CHUNK_BYTES
  free(sends);
  return st;
}
