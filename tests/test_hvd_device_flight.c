/* tests/test_hvd_device_flight.c: the device collectives in flight (hvd/device_flight.c),
   the bookkeeping of the event-driven device path, on the CPU.

   The device path queues a group on hvd's CUDA stream, records a completion event and
   hands the group to the flight instead of waiting; the background thread polls. Here
   the events are stand-ins (a flag each) behind the same hvd_flight_ops_t that
   hvd/device.c fills with cudaEventQuery, and the requests are real ones in the runtime's
   in-flight table, held as the executor holds them. Checked:
   - several groups in flight at once; nothing completes while its event has not, and a
     group never completes before an older one (one stream: they finish in order);
   - completion: status OK, the executor's hold let go, the event recycled, the request
     out of the in-flight table; a request its waiter abandoned is freed here;
   - a failure recorded meanwhile (hvd_fail_all on a held request) is what it ends with;
   - a failed event query, and a check that says the work can never complete (stall
     limit, NCCL error), fail every group in flight with the message, and nothing hangs;
   - drain returns once another thread has completed the events. */
#include "hvd/device_flight.h"
#include "hvd/requests.h"
#include "tests/check.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define MAX_EV 16

typedef struct {
  atomic_int state[MAX_EV];   /* 0 pending, 1 done, -1 error */
  int recycled[4 * MAX_EV], nrecycled;   /* test_drain recycles 40 */
  double stall_us;            /* check(): a timeout past this wait (0: never) */
  int checks;
} fake_t;

static fake_t fake;
static int ev_id[MAX_EV];     /* the events are pointers to these */

static int q(void *ctx, void *event, char *msg, size_t len) {
  fake_t *f = ctx;
  int id = *(int *)event, st = atomic_load(&f->state[id]);
  if (st < 0) snprintf(msg, len, "fake event %d: illegal memory access", id);
  return st > 0 ? 0 : st == 0 ? 1 : -1;
}
static hvd_status_t chk(void *ctx, double waited_us, char *msg, size_t len) {
  fake_t *f = ctx;
  f->checks++;
  if (f->stall_us > 0 && waited_us > f->stall_us) {
    snprintf(msg, len, "stalled for %.0f us", waited_us);
    return HVD_ERR_TIMEOUT;
  }
  return HVD_OK;
}
static void recycle(void *ctx, void *event) {
  fake_t *f = ctx;
  if (f->nrecycled == (int)(sizeof f->recycled / sizeof f->recycled[0])) {
    fprintf(stderr, "FAIL: more events recycled than the test expects\n");
    exit(1);
  }
  f->recycled[f->nrecycled++] = *(int *)event;
}

/* A request in the in-flight table, held by "the executor". */
static struct hvd_request *req(const char *key) {
  struct hvd_request *r = hvd_request_new(HVD_KIND_ALLREDUCE);
  snprintf(r->key, sizeof r->key, "%s", key);
  r->count = 4;
  r->dtype = HVD_FLOAT32;
  pthread_mutex_lock(&hvd_g.mu);
  hvd_inflight_insert(r);
  r->held = 1;
  pthread_mutex_unlock(&hvd_g.mu);
  return r;
}

static void push(hvd_flight_t *f, struct hvd_request **reqs, int n, int ev) {
  char msg[HVD_ERROR_MAX];
  hvd_status_t s = hvd_flight_push(f, reqs, n, &ev_id[ev], "NCCL_ALLREDUCE", msg, sizeof msg);
  CHECK(s == HVD_OK, "push of event %d: %s", ev, msg);
  for (int i = 0; i < n; i++)
    CHECK(reqs[i]->deferred, "request %s not marked deferred: the executor would "
          "complete it before its collective ran", reqs[i]->key);
}

static int poll_n(hvd_flight_t *f, hvd_status_t want, char *msg, size_t len) {
  int done = -1;
  hvd_status_t s = hvd_flight_poll(f, &done, msg, len);
  CHECK(s == want, "poll returned %s, expected %s (%s)", hvd_status_string(s),
        hvd_status_string(want), msg);
  return done;
}

static void expect_done(struct hvd_request *r, hvd_status_t want, const char *text) {
  CHECK(atomic_load(&r->done), "request %s not completed", r->key);
  CHECK(r->status == want, "request %s completed with %s, expected %s", r->key,
        hvd_status_string(r->status), hvd_status_string(want));
  CHECK(!r->held && !r->deferred, "request %s: held %d deferred %d after completion (the "
        "executor's hold was not let go)", r->key, r->held, r->deferred);
  if (text) CHECK(strstr(r->error, text), "request %s: error \"%s\" lacks \"%s\"", r->key,
                  r->error, text);
  pthread_mutex_lock(&hvd_g.mu);
  CHECK(hvd_inflight_find(r->key) == NULL, "request %s still in the in-flight table",
        r->key);
  pthread_mutex_unlock(&hvd_g.mu);
}

static void test_order(void) {
  const hvd_flight_ops_t ops = {q, chk, recycle, &fake};
  hvd_flight_t f;
  hvd_flight_init(&f, &ops);
  char msg[HVD_ERROR_MAX] = "";
  struct hvd_request *a = req("a"), *b = req("b"), *c = req("c"), *d = req("d");
  struct hvd_request *g0[] = {a, b}, *g1[] = {c}, *g2[] = {d};
  push(&f, g0, 2, 0);
  push(&f, g1, 1, 1);
  push(&f, g2, 1, 2);
  CHECK(hvd_flight_pending(&f) == 3, "%zu groups in flight, expected 3",
        hvd_flight_pending(&f));
  CHECK(poll_n(&f, HVD_OK, msg, sizeof msg) == 0, "a group completed before its event");
  CHECK(!atomic_load(&a->done) && !atomic_load(&c->done), "a request completed before its "
        "event did");
  CHECK(fake.checks > 0, "a pending event was not followed by a health check");

  atomic_store(&fake.state[1], 1);   /* cannot happen on one stream: still in order */
  CHECK(poll_n(&f, HVD_OK, msg, sizeof msg) == 0, "group 1 completed before group 0");
  CHECK(!atomic_load(&c->done), "a newer group completed before an older one");

  atomic_store(&fake.state[0], 1);
  CHECK(poll_n(&f, HVD_OK, msg, sizeof msg) == 2, "groups 0 and 1 did not both complete");
  expect_done(a, HVD_OK, NULL);
  expect_done(b, HVD_OK, NULL);
  expect_done(c, HVD_OK, NULL);
  CHECK(!atomic_load(&d->done), "group 2 completed before its event");
  CHECK(fake.nrecycled == 2 && fake.recycled[0] == 0 && fake.recycled[1] == 1,
        "events recycled: %d (first %d), expected 0 then 1", fake.nrecycled,
        fake.recycled[0]);
  CHECK(hvd_flight_pending(&f) == 1, "%zu in flight, expected 1", hvd_flight_pending(&f));

  /* d's waiter gave up (hvd_fail_held, then its hvd_wait left it to the holder), and a
     new group's request has a failure recorded by hvd_fail_all. */
  struct hvd_request *e = req("e");
  struct hvd_request *g3[] = {e};
  push(&f, g3, 1, 3);
  pthread_mutex_lock(&hvd_g.mu);
  d->abandoned = 1;
  e->fail_pending = 1;
  e->status = HVD_ERR_PEER_LOST;
  snprintf(e->error, sizeof e->error, "rank 1 was lost");
  pthread_mutex_unlock(&hvd_g.mu);
  atomic_store(&fake.state[2], 1);
  atomic_store(&fake.state[3], 1);
  CHECK(poll_n(&f, HVD_OK, msg, sizeof msg) == 2, "groups 2 and 3 did not complete");
  expect_done(e, HVD_ERR_PEER_LOST, "rank 1 was lost");
  CHECK(hvd_flight_pending(&f) == 0, "%zu in flight, expected 0", hvd_flight_pending(&f));
  CHECK(hvd_g.ninflight == 0, "%d requests still counted in flight", hvd_g.ninflight);
  hvd_request_free(a), hvd_request_free(b), hvd_request_free(c), hvd_request_free(e);
  hvd_flight_free(&f);
}

static void test_failures(void) {
  const hvd_flight_ops_t ops = {q, chk, recycle, &fake};
  hvd_flight_t f;
  hvd_flight_init(&f, &ops);
  char msg[HVD_ERROR_MAX] = "";
  memset(&fake, 0, sizeof fake);
  struct hvd_request *a = req("fa"), *b = req("fb"), *c = req("fc");
  struct hvd_request *g0[] = {a}, *g1[] = {b}, *g2[] = {c};
  push(&f, g0, 1, 4);
  push(&f, g1, 1, 5);
  atomic_store(&fake.state[4], -1);
  poll_n(&f, HVD_ERR_BACKEND, msg, sizeof msg);
  expect_done(a, HVD_ERR_BACKEND, "illegal memory access");
  expect_done(b, HVD_ERR_BACKEND, "illegal memory access");
  CHECK(hvd_flight_pending(&f) == 0, "%zu in flight after a failed event",
        hvd_flight_pending(&f));
  CHECK(fake.nrecycled == 2, "%d events recycled after a failure, expected 2",
        fake.nrecycled);

  /* A wait that may never end: the check's stall limit ends it, from the group's
     queueing on. */
  fake.stall_us = 20000;
  push(&f, g2, 1, 6);
  hvd_status_t s = HVD_OK;
  const double give_up = util_now_us() + 5e6;   /* the test's own bound, not hvd's */
  while (s == HVD_OK && util_now_us() < give_up) {
    int done;
    s = hvd_flight_poll(&f, &done, msg, sizeof msg);
  }
  CHECK(s == HVD_ERR_TIMEOUT, "polling a never-completing group for 5 s returned %s (%s)",
        hvd_status_string(s), msg);
  expect_done(c, HVD_ERR_TIMEOUT, "stalled");
  hvd_request_free(a), hvd_request_free(b), hvd_request_free(c);
  hvd_flight_free(&f);
}

static void *complete_later(void *arg) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store((atomic_int *)arg, 1);
  return NULL;
}

static void test_drain(void) {
  const hvd_flight_ops_t ops = {q, chk, recycle, &fake};
  hvd_flight_t f;
  hvd_flight_init(&f, &ops);
  char msg[HVD_ERROR_MAX] = "";
  memset(&fake, 0, sizeof fake);
  /* More groups than the ring's first size: it grows with groups in flight. */
  enum { N = 40 };
  struct hvd_request *r[N];
  for (int i = 0; i < N; i++) {
    char key[16];
    snprintf(key, sizeof key, "d%d", i);
    r[i] = req(key);
    push(&f, &r[i], 1, 7 + (i == N - 1));   /* the last one has its own event */
  }
  atomic_store(&fake.state[7], 1);
  pthread_t t;
  pthread_create(&t, NULL, complete_later, &fake.state[8]);
  hvd_status_t s = hvd_flight_drain(&f, msg, sizeof msg);
  pthread_join(t, NULL);
  CHECK(s == HVD_OK, "drain returned %s (%s)", hvd_status_string(s), msg);
  for (int i = 0; i < N; i++) {
    expect_done(r[i], HVD_OK, NULL);
    hvd_request_free(r[i]);
  }
  hvd_flight_free(&f);
}

int main(void) {
  for (int i = 0; i < MAX_EV; i++) ev_id[i] = i;
  test_order();
  test_failures();
  test_drain();
  if (!failures) printf("device collectives in flight: order, completion, failures: ok\n");
  return failures ? 1 : 0;
}
