/* tests/test_hvd_cache_rounds.c: the response cache's protocol (hvd/cache_rounds.c) on N
   in-process ranks (threads over collectives/transport_inproc.c), without MPI or the
   runtime, for N = 1..6. Each rank drives its own hvd_cache_rounds_t in lockstep with
   the others; its peers exchange the round's words with every other rank and AND them,
   and its hooks stand in for the background loop (the coordinator's lists are built
   here, the same on every rank). Checked, on every rank:
     1. a name not cached goes to the coordinator; the list that answers it runs when a
        round makes it due, and the cache learns it, in the same slot everywhere;
     2. the name submitted again is a hit every rank agrees on: it runs from the cache;
     3. a hit only some ranks asked for waits (nothing runs) until the last rank asks;
     4. a rank whose request contradicts the cached signature has the entry evicted on
        every rank, and the others' pending hits of it go to the coordinator;
     5. the stop flag: a clean shutdown's rounds end on every rank after the same round.
   Exits 1 on the first failure. */
#include "hvd/cache_rounds.h"
#include "hvd/negotiation.h"
#include "collectives/coll.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_FATAL 1
#include "tests/check.h"

#define MAX_RANKS 6
#define CAPACITY 70              /* two words of hit bits, two of invalid bits */
#define ROUND_TAG 7
#define MAX_RUNS 16

typedef struct {
  coll_transport_t *t;
  hvd_round_peers_t peers;
  uint64_t *send, *recv, *in;
  hvd_cache_rounds_t *cr;
  char ran[MAX_RUNS][HVD_KEY_MAX];      /* what the run hook ran, in order */
  int ran_cached[MAX_RUNS];
  int nran;
  char to_coord[MAX_RUNS][HVD_KEY_MAX]; /* what went to the coordinator */
  int nto_coord;
  int flushes;
} rank_t;

/* The slots every rank gave a name (each rank writes its own entry). */
static int slot_of[MAX_RANKS];

/* ---- the peers: one blocking exchange of the words with every other rank ---- */
static int peers_start(hvd_round_peers_t *p, char *err, size_t len) {
  rank_t *me = p->ctx;
  coll_transport_t *t = me->t;
  size_t bytes = (size_t)p->words * sizeof(uint64_t);
  coll_request_t rreq[MAX_RANKS], sreq[MAX_RANKS];
  memcpy(me->recv, me->send, bytes);
  for (int r = 0; r < t->size; r++) {
    if (r == t->rank) continue;
    if (t->ops->irecv(t, r, me->in + (size_t)r * (size_t)p->words, bytes, ROUND_TAG,
                      &rreq[r]) != COLL_OK ||
        t->ops->isend(t, r, me->send, bytes, ROUND_TAG, &sreq[r]) != COLL_OK) {
      snprintf(err, len, "rank %d: starting the exchange with rank %d failed: %s", t->rank, r,
               t->error);
      return 0;
    }
  }
  for (int r = 0; r < t->size; r++) {
    if (r == t->rank) continue;
    if (t->ops->wait(t, &rreq[r]) != COLL_OK || t->ops->wait(t, &sreq[r]) != COLL_OK) {
      snprintf(err, len, "rank %d: the exchange with rank %d failed: %s", t->rank, r, t->error);
      return 0;
    }
    for (int i = 0; i < p->words; i++) me->recv[i] &= me->in[(size_t)r * (size_t)p->words + i];
  }
  return 1;
}

static int peers_test(hvd_round_peers_t *p, int *done, char *err, size_t len) {
  (void)p; (void)err; (void)len;
  *done = 1;   /* start completed the exchange */
  return 1;
}

static int peers_started(hvd_round_peers_t *p, char *err, size_t len) {
  (void)p; (void)err; (void)len;
  return -1;
}

/* ---- the hooks: the background loop's part ---- */
static int hook_to_coordinator(void *arg, const void *wire, size_t len) {
  rank_t *me = arg;
  /* An encoded request ends with its key (hvd/negotiation.c); the keys here are one
     character long. */
  if (len > 0 && me->nto_coord < MAX_RUNS)
    snprintf(me->to_coord[me->nto_coord++], HVD_KEY_MAX, "%c", ((const char *)wire)[len - 1]);
  return 1;
}

static int hook_flush(void *arg, char *err, size_t len) {
  (void)err; (void)len;
  ((rank_t *)arg)->flushes++;
  return 1;
}

static int hook_run(void *arg, const char *list, size_t len, const double *times,
                    int from_cache) {
  (void)times;
  rank_t *me = arg;
  hvd_msg_header_t h;
  memcpy(&h, list, sizeof(h));
  hvd_response_t resp[MAX_RUNS];
  CHECK(h.n > 0 && h.n <= MAX_RUNS, "rank %d: a list of %d responses", me->t->rank, h.n);
  CHECK(hvd_decode_responses(list + sizeof(h), len - sizeof(h), h.n, me->t->size, resp),
        "rank %d: a malformed list", me->t->rank);
  for (int i = 0; i < h.n && me->nran < MAX_RUNS; i++) {
    snprintf(me->ran[me->nran], HVD_KEY_MAX, "%.*s", (int)resp[i].key_len, resp[i].key);
    me->ran_cached[me->nran++] = from_cache;
  }
  if (!from_cache)
    CHECK(hvd_cache_rounds_learn(me->cr, resp, h.n), "rank %d: learn failed", me->t->rank);
  return 0;
}

static int hook_fail(void *arg, hvd_status_t s, const char *text) {
  CHECK(0, "rank %d: the protocol failed (%s): %s", ((rank_t *)arg)->t->rank,
        hvd_status_string(s), text);
  return 1;
}

static int hook_self_joined(void *arg) {
  (void)arg;
  return 0;
}

/* ---- the steps ---- */
static struct hvd_request *request(const char *key, size_t count) {
  struct hvd_request *r = calloc(1, sizeof(*r));
  CHECK(r != NULL, "out of memory");
  r->kind = HVD_KIND_ALLREDUCE;
  snprintf(r->key, sizeof(r->key), "%s", key);
  r->dtype = HVD_FLOAT32;
  r->op = HVD_SUM;
  r->count = count;
  r->device = -1;
  return r;
}

/* Submits key (count elements) and checks what the protocol did with it. */
static void submit(rank_t *me, const char *key, size_t count, int want) {
  struct hvd_request *r = request(key, count);
  int got = hvd_cache_rounds_submit(me->cr, r);
  CHECK(got == want, "rank %d: submitting \"%s\" (count %zu) gave %d, expected %d (1 a "
        "pending hit, 0 to the coordinator)", me->t->rank, key, count, got, want);
  free(r);
}

/* The coordinator's list answering keys (count 4 each), as every rank receives it. */
static void queue_list(rank_t *me, const char *const *keys, int n) {
  hvd_buf_t b = {0};
  hvd_msg_header_t h = {HVD_MSG_RESPONSES, n, 0, 0};
  int ok = hvd_buf_put(&b, &h, sizeof(h));
  for (int i = 0; ok && i < n; i++) {
    hvd_response_t r = {0};
    r.kind = HVD_KIND_ALLREDUCE;
    r.dtype = HVD_FLOAT32;
    r.op = HVD_SUM;
    r.status = HVD_OK;
    r.device = -1;
    r.count = 4;
    r.key = keys[i];
    r.key_len = (uint32_t)strlen(keys[i]);
    ok = hvd_encode_response(&b, &r, 0);
  }
  CHECK(ok && hvd_cache_rounds_queue_list(me->cr, b.p, b.len, NULL, n),
        "rank %d: queueing a list failed", me->t->rank);
  hvd_buf_free(&b);
}

/* One round, every rank at once: start (the exchange), test, process. */
static void round_once(rank_t *me) {
  char err[256];
  int progressed = 0;
  CHECK(hvd_cache_rounds_start(me->cr, err, sizeof(err)), "rank %d: start: %s", me->t->rank,
        err);
  CHECK(hvd_cache_rounds_test(me->cr, err, sizeof(err)), "rank %d: test: %s", me->t->rank, err);
  CHECK(hvd_cache_rounds_process(me->cr, &progressed) == 0, "rank %d: process ended the loop",
        me->t->rank);
}

/* The runs since *from: exactly keys[0..n), each from the cache or not. */
static void expect_runs(rank_t *me, int *from, const char *const *keys, int n, int cached,
                        const char *what) {
  CHECK(me->nran - *from == n, "rank %d, %s: %d response(s) ran, expected %d", me->t->rank,
        what, me->nran - *from, n);
  for (int i = 0; i < n; i++) {
    CHECK(strcmp(me->ran[*from + i], keys[i]) == 0, "rank %d, %s: ran \"%s\", expected \"%s\"",
          me->t->rank, what, me->ran[*from + i], keys[i]);
    CHECK(me->ran_cached[*from + i] == cached, "rank %d, %s: \"%s\" ran %s, expected %s",
          me->t->rank, what, keys[i], me->ran_cached[*from + i] ? "from the cache" : "negotiated",
          cached ? "from the cache" : "negotiated");
  }
  *from = me->nran;
}

static coll_status_t rank_main(coll_transport_t *t, void *arg) {
  (void)arg;
  rank_t *me = calloc(1, sizeof(*me));
  int words = hvd_cache_rounds_words(CAPACITY);
  CHECK(me != NULL && words == 6, "setup: %d words for %d entries", words, CAPACITY);
  me->t = t;
  me->send = calloc((size_t)words, sizeof(uint64_t));
  me->recv = calloc((size_t)words, sizeof(uint64_t));
  me->in = calloc((size_t)words * MAX_RANKS, sizeof(uint64_t));
  me->peers = (hvd_round_peers_t){me->send, me->recv, words, peers_start, peers_test,
                                  peers_started, me};
  hvd_cache_rounds_config_t cfg = {t->rank, t->size, CAPACITY, 1 << 20};
  hvd_cache_rounds_hooks_t hooks = {me, hook_to_coordinator, hook_flush, hook_run, hook_fail,
                                    hook_self_joined};
  me->cr = hvd_cache_rounds_create(&cfg, &me->peers, &hooks);
  CHECK(me->cr != NULL, "rank %d: create failed", t->rank);
  const char *ab[] = {"a", "b"}, *a[] = {"a"}, *b[] = {"b"};
  int from = 0, last = t->rank == t->size - 1;

  /* 1. Not cached: to the coordinator; its list runs when a round makes it due. */
  submit(me, "a", 4, 0);
  submit(me, "b", 4, 0);
  queue_list(me, ab, 2);
  round_once(me);
  expect_runs(me, &from, ab, 2, 0, "step 1 (the coordinator's list)");
  int sa = hvd_cache_rounds_lookup(me->cr, "a");
  CHECK(sa >= 0 && hvd_cache_rounds_lookup(me->cr, "b") >= 0,
        "rank %d, step 1: the cache did not learn \"a\" and \"b\"", t->rank);
  slot_of[t->rank] = sa;

  /* 2. Every rank asks for "a": an agreed hit, from the cache, in the same slot. */
  submit(me, "a", 4, 1);
  round_once(me);
  expect_runs(me, &from, a, 1, 1, "step 2 (an agreed hit)");
  CHECK(slot_of[t->rank] == slot_of[0], "rank %d: \"a\" in slot %d, rank 0 has it in %d",
        t->rank, slot_of[t->rank], slot_of[0]);
  CHECK(hvd_cache_rounds_pending_hits(me->cr) == 0, "rank %d, step 2: %d hits left", t->rank,
        hvd_cache_rounds_pending_hits(me->cr));

  /* 3. All but the last rank ask for "b": nothing runs until the last one asks too. */
  if (t->size > 1) {
    if (!last) submit(me, "b", 4, 1);
    round_once(me);
    expect_runs(me, &from, b, 0, 1, "step 3 (a hit not every rank asked for)");
    CHECK(hvd_cache_rounds_pending_hits(me->cr) == !last, "rank %d, step 3: %d hits pending",
          t->rank, hvd_cache_rounds_pending_hits(me->cr));
    if (last) submit(me, "b", 4, 1);
    round_once(me);
    expect_runs(me, &from, b, 1, 1, "step 3 (the last rank asked)");
  }

  /* 4. The last rank asks for "a" with another count: evicted on every rank; the others'
     hits of "a" go to the coordinator. */
  submit(me, "a", last ? 5 : 4, last ? 0 : 1);
  CHECK(hvd_cache_rounds_pending_invalids(me->cr) == last, "rank %d, step 4: %d invalidations",
        t->rank, hvd_cache_rounds_pending_invalids(me->cr));
  round_once(me);
  expect_runs(me, &from, a, 0, 1, "step 4 (a contradicted entry)");
  CHECK(hvd_cache_rounds_lookup(me->cr, "a") < 0 && hvd_cache_rounds_lookup(me->cr, "b") >= 0,
        "rank %d, step 4: \"a\" %s evicted, \"b\" %s kept", t->rank,
        hvd_cache_rounds_lookup(me->cr, "a") < 0 ? "was" : "was NOT",
        hvd_cache_rounds_lookup(me->cr, "b") >= 0 ? "was" : "was NOT");
  int sent = me->nto_coord;
  round_once(me);
  CHECK(me->nto_coord - sent == !last && hvd_cache_rounds_pending_hits(me->cr) == 0 &&
            (last || strcmp(me->to_coord[sent], "a") == 0),
        "rank %d, step 4: %d pending hit(s) of \"a\" went to the coordinator, expected %d "
        "(%d still pending)", t->rank, me->nto_coord - sent, !last,
        hvd_cache_rounds_pending_hits(me->cr));

  /* 5. A clean shutdown: the rounds with the stop flag end everywhere at the same one. */
  char err[256];
  int steps = 0, r;
  while ((r = hvd_cache_rounds_stop_step(me->cr, err, sizeof(err))) == 0 && steps < 10) steps++;
  CHECK(r == 1 && hvd_cache_rounds_over(me->cr), "rank %d, step 5: stop step gave %d after %d "
        "steps (%s)", t->rank, r, steps, r < 0 ? err : "");

  hvd_cache_rounds_free(me->cr);
  free(me->send);
  free(me->recv);
  free(me->in);
  free(me);
  return COLL_OK;
}

int main(void) {
  for (int n = 1; n <= MAX_RANKS; n++) {
    coll_status_t st = coll_inproc_run(n, rank_main, NULL);
    CHECK(st == COLL_OK, "N=%d: %s", n, coll_status_string(st));
    printf("N=%d: the cache rounds agree\n", n);
  }
  printf(failures ? "FAIL\n" : "PASS\n");
  return failures ? 1 : 0;
}
