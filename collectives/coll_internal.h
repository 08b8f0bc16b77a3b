/* collectives/coll_internal.h: helpers shared by the collective algorithms and the
   transports. Not part of the public interface (coll.h). */
#ifndef COLL_INTERNAL_H
#define COLL_INTERNAL_H

#include "collectives/coll.h"

/* Message tags: one per algorithm, so two different collectives in flight between the
   same pair (e.g. a barrier racing the tail of an allreduce) never match each other. */
enum {
  COLL_TAG_RING = 11,
  COLL_TAG_RECURSIVE_DOUBLING = 12,
  COLL_TAG_BROADCAST = 13,
  COLL_TAG_ALLTOALL = 14,
  COLL_TAG_BARRIER = 15,
  COLL_TAG_ALLGATHERV = 16,
  COLL_TAG_REDUCE_SCATTER = 17
};

/* Formats a message into t->error and returns s (printf-style). */
coll_status_t coll_fail(coll_transport_t *t, coll_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Liveness, for the transports' waits. coll_progress records that a request started or
   completed. coll_wait_check, called now and then by a wait that is still not done (on
   peer, moving bytes; what: "send"/"receive"), returns COLL_OK to go on waiting, or the
   status to give up with (t->error filled): COLL_ERR_CANCELLED after coll_transport_abort
   or when t->interrupt says so (tried after 100 ms without progress, then every 20 ms;
   *next_interrupt_s starts at 0), COLL_ERR_PEER_LOST after t->peer_timeout_s without
   progress (t->lost_peer = peer). */
void coll_progress(coll_transport_t *t);
coll_status_t coll_wait_check(coll_transport_t *t, int peer, const char *what, size_t bytes,
                              double *next_interrupt_s);

/* Argument checks shared by every algorithm; on failure they fill t->error. */
coll_status_t coll_check_transport(coll_transport_t *t);
coll_status_t coll_check_dtype_op(coll_transport_t *t, coll_dtype_t dtype, coll_op_t op);

/* coll_copy's three forms, each for any length (tests reach them all through
   coll_copy_form; the SSE2 and AVX2 loops are x86-64 only, memcpy elsewhere). */
typedef enum { COLL_COPY_MEMCPY = 0, COLL_COPY_SSE2 = 1, COLL_COPY_AVX2 = 2 } coll_copy_form_t;
void coll_copy_form(void *dst, const void *src, size_t bytes, coll_copy_form_t form);
int coll_copy_avx2_supported(void);

/* out[i] = a[i] op b[i]; out may equal a (the in-place case), b never aliases out. */
void coll_reduce3(void *out, const void *a, const void *b, size_t count,
                  coll_dtype_t dtype, coll_op_t op);

/* The slots of t->scratch: the ring's staging (COLL_SCRATCH_STAGING) and a caller's
   full-size work buffer (COLL_SCRATCH_WORK) can be live at once. */
enum { COLL_SCRATCH_STAGING = 0, COLL_SCRATCH_WORK = 1 };
_Static_assert(COLL_SCRATCH_WORK < COLL_SCRATCH_SLOTS, "a scratch slot too many");
/* t->scratch[slot], grown to at least bytes (64-byte aligned); NULL when out of memory. */
void *coll_scratch(coll_transport_t *t, int slot, size_t bytes);

/* Temporary memory for one call: the transport's scratch when possible, else malloc.
   coll_temp_release frees only what coll_temp_get malloc'ed. */
typedef struct {
  void *ptr;
  int owned;
} coll_temp_t;
coll_status_t coll_temp_get(coll_transport_t *t, int slot, size_t bytes, coll_temp_t *tmp);
void coll_temp_release(coll_temp_t *tmp);

/* Gives up on a started request without waiting for it: t->ops->abandon, or a wait
   for a transport without one (coll.h says when which). */
void coll_abandon(coll_transport_t *t, coll_request_t *req);
/* Receives rbytes from `from` into rbuf while sending sbytes of sbuf to `to`, with one
   tag, and waits for both; on a failure it abandons what was started (never waits for a
   receive whose partner's send failed) and returns the failure. */
coll_status_t coll_sendrecv(coll_transport_t *t, int to, const void *sbuf, size_t sbytes,
                            int from, void *rbuf, size_t rbytes, int tag);

/* The ring engine (ring_allreduce.c) behind allreduce, reduce-scatter and allgatherv.
   The buffer is cut into nseg = t->size segments (offsets/counts in elements). At step
   s (0 <= s < nsteps) rank r sends segment (r + base - s) mod N to r + 1 and receives
   segment (r + base - s - 1) mod N from r - 1. Steps s < nreduce receive into a staging
   slot and reduce: work[seg] = src[seg] op received. Later steps receive straight into
   work[seg]. Step 0 sends own_first (the segment's data, wherever it lives); later steps
   send from work. Everything is cut into chunks (coll_ring_chunk_elems) and pipelined.
   divisor (0: none): the last reduce step divides its result by it (coll_divide)
   before sending it on. */
typedef struct {
  const char *src;         /* full-size contributions (reduce steps), may equal work */
  char *work;              /* full-size buffer the results are built in              */
  const char *own_first;   /* data of the segment sent at step 0                     */
  const size_t *offsets;   /* per segment, in elements                               */
  const size_t *counts;
  int base, nsteps, nreduce;
  int tag;
  coll_dtype_t dtype;
  coll_op_t op;
  int divisor;
} coll_ring_plan_t;
coll_status_t coll_ring_run(coll_transport_t *t, const coll_ring_plan_t *plan);
/* The ring's chunk in elements of es bytes for segments of counts[0..t->size): the
   pipeline chunk (coll_chunk_bytes), or on one host, for a buffer of at most
   coll_one_chunk_bytes(), the largest segment (each segment one message). */
size_t coll_ring_chunk_elems(const coll_transport_t *t, const size_t *counts, size_t es);
/* The ring allreduce with the plan's divisor (0: none; ring_allreduce.c). */
coll_status_t coll_ring_allreduce_divided(coll_transport_t *t, const void *sendbuf,
                                          void *recvbuf, size_t count, coll_dtype_t dtype,
                                          coll_op_t op, int divisor);

#endif /* COLL_INTERNAL_H */
