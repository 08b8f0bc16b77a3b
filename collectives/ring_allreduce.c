/* collectives/ring_allreduce.c: the pipelined ring (reduce-scatter then allgather) and
   the engine it shares with coll_reduce_scatter and coll_allgatherv. */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

/* Staging slots for received chunks that still have to be reduced: receives run this
   many chunks ahead of the reduction, so the transfer of chunk k+1.. overlaps the
   reduction of chunk k. */
#define RING_DEPTH 4

static int mod(int a, int n) { return ((a % n) + n) % n; }

typedef struct {
  int step, seg;
  size_t off;   /* element offset in the full buffer */
  size_t n;     /* elements */
  size_t cid;   /* chunk id: chunk_base[seg] + chunk index, the region's identity */
} ring_op_t;

typedef struct {
  coll_request_t req;
  int live;     /* started and not yet waited */
} ring_req_t;

/* Waits for one request if it is still live. */
static coll_status_t finish(coll_transport_t *t, ring_req_t *q) {
  if (!q->live) return COLL_OK;
  q->live = 0;
  return t->ops->wait(t, &q->req);
}

size_t coll_ring_chunk_elems(const coll_transport_t *t, const size_t *counts, size_t es) {
  size_t chunk_elems = coll_chunk_bytes() / es;
  if (chunk_elems == 0) chunk_elems = 1;
  size_t total = 0, largest = 0;
  for (int g = 0; g < t->size; g++) {
    total += counts[g];
    if (counts[g] > largest) largest = counts[g];
  }
  /* On one host a small buffer goes one message per segment (coll_set_one_chunk_bytes). */
  if (t->one_host && total * es <= coll_one_chunk_bytes() && largest > chunk_elems)
    chunk_elems = largest;
  return chunk_elems;
}

coll_status_t coll_ring_run(coll_transport_t *t, const coll_ring_plan_t *p) {
  const int N = t->size, r = t->rank;
  const int right = mod(r + 1, N), left = mod(r - 1, N);
  const size_t es = coll_dtype_size(p->dtype);
  const size_t chunk_elems = coll_ring_chunk_elems(t, p->counts, es);

  /* Chunking is a function of the segment and of what every rank has alike (the counts,
     one_host, the knobs), so the chunks a rank receives at step s are exactly the chunks
     it forwards at step s + 1 (the same segment), and its neighbours cut them the same. */
  size_t *nchunks = malloc(2 * (size_t)N * sizeof *nchunks);
  if (!nchunks) return coll_fail(t, COLL_ERR_NO_MEMORY, "ring: out of memory");
  size_t *chunk_base = nchunks + N, total_chunks = 0;
  for (int g = 0; g < N; g++) {
    nchunks[g] = p->counts[g] ? (p->counts[g] + chunk_elems - 1) / chunk_elems : 1;
    chunk_base[g] = total_chunks;
    total_chunks += nchunks[g];
  }
  size_t nrecv = 0, nreduce_ops = 0;
  for (int s = 0; s < p->nsteps; s++) {
    nrecv += nchunks[mod(r + p->base - s - 1, N)];
    if (s < p->nreduce) nreduce_ops = nrecv;
  }
  const int seg0 = mod(r + p->base, N);
  const size_t nsend0 = nchunks[seg0];

  /* One allocation for the schedule and the request bookkeeping. */
  size_t bytes = nrecv * sizeof(ring_op_t) + (nsend0 + nrecv + RING_DEPTH) * sizeof(ring_req_t) +
                 total_chunks * sizeof(ring_req_t *);
  char *mem = calloc(1, bytes);
  if (!mem) {
    free(nchunks);
    return coll_fail(t, COLL_ERR_NO_MEMORY, "ring: out of memory for a %zu-op schedule", nrecv);
  }
  /* Most-aligned first: ops and pointers are 8-aligned, ring_req_t only 4. */
  ring_op_t *ops = (ring_op_t *)mem;
  ring_req_t **reader = (ring_req_t **)(ops + nrecv); /* last send reading work[cid] */
  ring_req_t *sends = (ring_req_t *)(reader + total_chunks); /* step 0: [0, nsend0), then 1 per op */
  ring_req_t *recvs = sends + nsend0 + nrecv;                /* RING_DEPTH slots */

  size_t k = 0;
  for (int s = 0; s < p->nsteps; s++) {
    int g = mod(r + p->base - s - 1, N);
    for (size_t c = 0; c < nchunks[g]; c++, k++) {
      size_t lo = c * chunk_elems, hi = lo + chunk_elems;
      if (hi > p->counts[g]) hi = p->counts[g];
      if (lo > hi) lo = hi;
      ops[k] = (ring_op_t){s, g, p->offsets[g] + lo, hi - lo, chunk_base[g] + c};
    }
  }

  coll_status_t st = COLL_OK;
  coll_temp_t staging = {NULL, 0};
  /* Reduce-step receives come first in ops, so they use slots 0 .. nreduce_ops - 1
     (mod RING_DEPTH): no more slots than that are needed. */
  const size_t slots = nreduce_ops < RING_DEPTH ? nreduce_ops : RING_DEPTH;
  if (slots > 0) st = coll_temp_get(t, COLL_SCRATCH_STAGING, slots * chunk_elems * es, &staging);

  /* Step 0: this rank's own data, all chunks at once. */
  const int own_in_work = p->own_first == p->work + p->offsets[seg0] * es;
  for (size_t c = 0; c < nsend0 && st == COLL_OK; c++) {
    size_t lo = c * chunk_elems, hi = lo + chunk_elems;
    if (hi > p->counts[seg0]) hi = p->counts[seg0];
    if (lo > hi) lo = hi;
    st = t->ops->isend(t, right, p->own_first + lo * es, (hi - lo) * es, p->tag, &sends[c].req);
    if (st == COLL_OK) {
      sends[c].live = 1;
      if (own_in_work) reader[chunk_base[seg0] + c] = &sends[c];
    }
  }

  /* Receive op j goes to staging slot j % RING_DEPTH (reduce steps) or straight into work
     (copy steps), after any send still reading that region of work has completed. */
  size_t posted = 0;
#define POST_RECV()                                                                        \
  do {                                                                                     \
    const ring_op_t *o = &ops[posted];                                                     \
    ring_req_t *q = &recvs[posted % RING_DEPTH];                                           \
    void *dst;                                                                             \
    if (o->step < p->nreduce) {                                                            \
      dst = (char *)staging.ptr + (posted % RING_DEPTH) * chunk_elems * es;                \
    } else {                                                                               \
      if (reader[o->cid]) st = finish(t, reader[o->cid]);                                  \
      reader[o->cid] = NULL;                                                               \
      dst = p->work + o->off * es;                                                         \
    }                                                                                      \
    if (st == COLL_OK) st = t->ops->irecv(t, left, dst, o->n * es, p->tag, &q->req);       \
    if (st == COLL_OK) q->live = 1;                                                        \
    posted++;                                                                              \
  } while (0)

  while (st == COLL_OK && posted < nrecv && posted < RING_DEPTH) POST_RECV();

  for (size_t j = 0; j < nrecv && st == COLL_OK; j++) {
    const ring_op_t *o = &ops[j];
    st = finish(t, &recvs[j % RING_DEPTH]);
    if (st != COLL_OK) break;
    if (o->step < p->nreduce) {
      if (reader[o->cid]) {
        st = finish(t, reader[o->cid]);
        reader[o->cid] = NULL;
        if (st != COLL_OK) break;
      }
      const char *slot = (const char *)staging.ptr + (j % RING_DEPTH) * chunk_elems * es;
      coll_reduce3(p->work + o->off * es, p->src + o->off * es, slot, o->n, p->dtype, p->op);
      /* The chunk's sum is complete (and still in cache): divide it here, once. */
      if (o->step == p->nreduce - 1) coll_divide(p->work + o->off * es, o->n, p->dtype, p->divisor);
    }
    /* Pass it on: the chunk is final for this step, the neighbour needs it next. Start
       the send before posting the next receive so the wire never idles. */
    if (o->step + 1 < p->nsteps) {
      ring_req_t *q = &sends[nsend0 + j];
      st = t->ops->isend(t, right, p->work + o->off * es, o->n * es, p->tag, &q->req);
      if (st != COLL_OK) break;
      q->live = 1;
      reader[o->cid] = q;
    }
    if (posted < nrecv) POST_RECV();
  }
#undef POST_RECV

  /* Drain: on success every send must complete before the caller may touch its buffers.
     On failure the peers may never complete what is in flight: give it up instead of
     waiting (which could hang). */
  for (size_t i = 0; i < nsend0 + nrecv; i++) {
    if (st == COLL_OK) st = finish(t, &sends[i]);
    else if (sends[i].live) coll_abandon(t, &sends[i].req), sends[i].live = 0;
  }
  for (int i = 0; i < RING_DEPTH; i++)
    if (recvs[i].live) coll_abandon(t, &recvs[i].req), recvs[i].live = 0;
  coll_temp_release(&staging);
  free(mem);
  free(nchunks);
  return st;
}

/* The ring allreduce (baidu-allreduce schedule). The buffer is cut into N segments, the
   first count % N one element longer. At step s (0 <= s < 2N-2) rank r sends segment
   (r - s) mod N to rank r+1 and receives segment (r - s - 1) mod N from rank r-1. In the
   first N-1 steps (reduce-scatter) it adds the received partial sum to its own data and
   forwards the result; after them rank r holds the complete segment (r + 1) mod N. In
   the last N-1 steps (allgather) the complete segments travel around the ring and
   overwrite. Worked example, N = 3, "g:abc" = segment g summed over ranks a, b, c:

            rank 0                  rank 1                  rank 2
   step 0   send 0:0    -> 1        send 1:1    -> 2        send 2:2    -> 0
            recv 2:2,  += 2:02      recv 0:0,  += 0:01      recv 1:1,  += 1:12
   step 1   send 2:02   -> 1        send 0:01   -> 2        send 1:12   -> 0
            recv 1:12, += 1:012     recv 2:02, += 2:012     recv 0:01, += 0:012
   ---- reduce-scatter done: rank r holds segment r+1 complete ----
   step 2   send 1:012  -> 1        send 2:012  -> 2        send 0:012  -> 0
            recv 0:012              recv 1:012              recv 2:012
   step 3   send 0:012  -> 1        send 1:012  -> 2        send 2:012  -> 0
            recv 2:012              recv 0:012              recv 1:012

   Every rank sends and receives 2(N-1)/N of the buffer. Each segment is further cut into
   chunks of coll_chunk_bytes(); a chunk is forwarded as soon as it is reduced, so step
   s+1 of chunk c runs while step s of chunk c+1 is still arriving (on one host, a buffer
   of at most coll_one_chunk_bytes() goes as one chunk per segment: coll_ring_chunk_elems).
   Every element is reduced on exactly one rank and copied to the others, so all ranks
   end bitwise equal.
   Out of place, the first reduction writes recvbuf = sendbuf + received and step 0 sends
   straight from sendbuf: sendbuf is never copied. divisor (0: none): an average, each
   segment divided by its owner at the end of the reduce-scatter. */
coll_status_t coll_ring_allreduce_divided(coll_transport_t *t, const void *sendbuf,
                                          void *recvbuf, size_t count, coll_dtype_t dtype,
                                          coll_op_t op, int divisor) {
  coll_status_t st = coll_check_transport(t);
  if (st != COLL_OK) return st;
  if ((st = coll_check_dtype_op(t, dtype, op)) != COLL_OK) return st;
  if (count > 0 && (!sendbuf || !recvbuf))
    return coll_fail(t, COLL_ERR_ARG, "ring allreduce: NULL buffer for %zu elements", count);
  const size_t es = coll_dtype_size(dtype);
  const int N = t->size;
  if (N == 1 || count == 0) {
    if (count && sendbuf != recvbuf) memmove(recvbuf, sendbuf, count * es);
    coll_divide(recvbuf, count, dtype, divisor);
    return COLL_OK;
  }
  size_t *offsets = malloc(2 * (size_t)N * sizeof *offsets);
  if (!offsets) return coll_fail(t, COLL_ERR_NO_MEMORY, "ring allreduce: out of memory");
  size_t *counts = offsets + N, off = 0;
  for (int g = 0; g < N; g++) {
    counts[g] = count / (size_t)N + ((size_t)g < count % (size_t)N ? 1 : 0);
    offsets[g] = off;
    off += counts[g];
  }
  const int seg0 = t->rank;
  coll_ring_plan_t plan = {
      .src = sendbuf,
      .work = recvbuf,
      .own_first = (const char *)sendbuf + offsets[seg0] * es,
      .offsets = offsets,
      .counts = counts,
      .base = 0,
      .nsteps = 2 * N - 2,
      .nreduce = N - 1,
      .tag = COLL_TAG_RING,
      .dtype = dtype,
      .op = op,
      .divisor = divisor,
  };
  st = coll_ring_run(t, &plan);
  free(offsets);
  return st;
}

coll_status_t coll_ring_allreduce(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                  size_t count, coll_dtype_t dtype, coll_op_t op) {
  return coll_ring_allreduce_divided(t, sendbuf, recvbuf, count, dtype, op, 0);
}
