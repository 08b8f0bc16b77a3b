/* tests/test_coll_transport_table.c: the collectives reach a transport only through its
   table (coll_transport_ops_t) and the generic fields of coll_transport_t. The transport
   here is defined by the test, as a user's would be: a wrapper that forwards to the
   in-process transport. On 3 ranks it checks that
   - the ring allreduce over it is exact, and its staging memory is the wrapper's own
     scratch (t->scratch), not the inner transport's: no layout of impl is assumed;
   - coll_abandon calls the table's abandon (a receive that no peer will ever match is
     given up at once, not waited for);
   - without an abandon in the table, coll_abandon waits for the request instead.
   Exits 1 on a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

#define CHECK_MAX_FAILURES 20
#include "tests/check.h"

typedef struct {
  coll_transport_t *inner;
  int waits, abandons;
} wrap_t;

static coll_status_t forwarded(coll_transport_t *t, coll_status_t s) {
  if (s != COLL_OK)
    snprintf(t->error, sizeof t->error, "%s", ((wrap_t *)t->impl)->inner->error);
  return s;
}

static coll_status_t wrap_isend(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                int tag, coll_request_t *req) {
  coll_transport_t *in = ((wrap_t *)t->impl)->inner;
  return forwarded(t, in->ops->isend(in, peer, buf, bytes, tag, req));
}

static coll_status_t wrap_irecv(coll_transport_t *t, int peer, void *buf, size_t bytes,
                                int tag, coll_request_t *req) {
  coll_transport_t *in = ((wrap_t *)t->impl)->inner;
  return forwarded(t, in->ops->irecv(in, peer, buf, bytes, tag, req));
}

static coll_status_t wrap_wait(coll_transport_t *t, coll_request_t *req) {
  wrap_t *w = t->impl;
  w->waits++;
  return forwarded(t, w->inner->ops->wait(w->inner, req));
}

static void wrap_abandon(coll_transport_t *t, coll_request_t *req) {
  wrap_t *w = t->impl;
  w->abandons++;
  coll_abandon(w->inner, req);
}

static void wrap_destroy(coll_transport_t *t) { free(t); }   /* impl is the rank's own */

static const coll_transport_ops_t with_abandon = {
    .isend = wrap_isend, .irecv = wrap_irecv, .wait = wrap_wait,
    .abandon = wrap_abandon, .destroy = wrap_destroy,
};
static const coll_transport_ops_t without_abandon = {
    .isend = wrap_isend, .irecv = wrap_irecv, .wait = wrap_wait,
    .abandon = NULL, .destroy = wrap_destroy,
};

enum { COUNT = 10000, TAG_NEVER_SENT = 99, TAG_PLAIN = 98 };

static void check_ring(coll_transport_t *t, coll_transport_t *inner) {
  int r = t->rank, N = t->size;
  float *x = malloc(COUNT * sizeof *x);
  if (!x) { CHECK(0, "rank %d: out of memory", r); return; }
  for (size_t i = 0; i < COUNT; i++) x[i] = (float)((r + i) % 7);
  coll_status_t s = coll_ring_allreduce(t, x, x, COUNT, COLL_FLOAT32, COLL_SUM);
  CHECK(s == COLL_OK, "rank %d: ring allreduce over the wrapper: %s (%s)", r,
        coll_status_string(s), t->error);
  size_t wrong = 0;
  for (size_t i = 0; i < COUNT && s == COLL_OK; i++) {
    float want = 0;
    for (int k = 0; k < N; k++) want += (float)((k + i) % 7);
    wrong += x[i] != want;
  }
  CHECK(wrong == 0, "rank %d: %zu of %d elements wrong", r, wrong, COUNT);
  CHECK(t->scratch[COLL_SCRATCH_STAGING] != NULL && t->scratch_bytes[COLL_SCRATCH_STAGING] > 0,
        "rank %d: the ring's staging is not the wrapper's scratch", r);
  CHECK(inner->scratch[COLL_SCRATCH_STAGING] == NULL,
        "rank %d: the ring staged in the inner transport's scratch", r);
  free(x);
}

static coll_status_t rank_main(coll_transport_t *inner, void *arg) {
  (void)arg;
  wrap_t w = {inner, 0, 0};
  coll_transport_t *t = calloc(1, sizeof *t);
  if (!t) return COLL_ERR_NO_MEMORY;
  t->rank = inner->rank;
  t->size = inner->size;
  t->ops = &with_abandon;
  t->impl = &w;
  t->lost_peer = -1;
  int r = t->rank, N = t->size, next = (r + 1) % N, prev = (r + N - 1) % N;

  check_ring(t, inner);

  /* A receive nobody will match: abandoned through the table, never waited for (the
     peer timeout only bounds a wrong wait, so that a failure does not hang). */
  inner->peer_timeout_s = 5;
  float never = 0;
  coll_request_t req;
  coll_status_t s = t->ops->irecv(t, next, &never, sizeof never, TAG_NEVER_SENT, &req);
  CHECK(s == COLL_OK, "rank %d: irecv: %s", r, t->error);
  w.waits = w.abandons = 0;
  if (s == COLL_OK) coll_abandon(t, &req);
  CHECK(w.abandons == 1 && w.waits == 0,
        "rank %d: coll_abandon made %d abandon and %d wait calls, expected 1 and 0", r,
        w.abandons, w.waits);

  /* No abandon in the table: a (completed) send is waited for instead. */
  t->ops = &without_abandon;
  float out = (float)r + 0.5f, in = -1;
  w.waits = w.abandons = 0;
  s = t->ops->isend(t, next, &out, sizeof out, TAG_PLAIN, &req);
  CHECK(s == COLL_OK, "rank %d: isend: %s", r, t->error);
  if (s == COLL_OK) coll_abandon(t, &req);
  CHECK(w.waits == 1 && w.abandons == 0,
        "rank %d: without abandon, coll_abandon made %d wait calls, expected 1", r, w.waits);
  s = t->ops->irecv(t, prev, &in, sizeof in, TAG_PLAIN, &req);
  if (s == COLL_OK) s = t->ops->wait(t, &req);
  CHECK(s == COLL_OK && in == (float)prev + 0.5f, "rank %d: received %g from rank %d (%s)",
        r, in, prev, s == COLL_OK ? "ok" : t->error);

  coll_transport_destroy(t);   /* frees the scratch, then wrap_destroy */
  return COLL_OK;
}

int main(void) {
  coll_status_t s = coll_inproc_run(3, rank_main, NULL);
  CHECK(s == COLL_OK, "coll_inproc_run: %s", coll_status_string(s));
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("test_coll_transport_table: a transport of its own works through the table\n");
  return 0;
}
