/* test_hvd_held: a request the executor holds (inside a collective) is not completed,
   nor freed, by another thread that fails every request (the watchdog's stall
   shutdown): its failure is recorded and given when the executor lets go of it, so its
   waiter never frees it, nor reuses its buffers, while a collective still uses them. A
   waiter that finishes a held request anyway (hvd_fail_held, the last resort) leaves it
   to the executor to free. Found by ASan in test_hvd_liveness (stall_stop0): the
   background thread read a request's name after its waiter had freed it.
   A request completes once (the executor may come back after hvd_fail_held), and its
   results (an allgather's buffer and count, alltoall's splits, join's last rank) reach
   the caller's pointers only when it succeeds, at its completion: after a failure the
   caller's call may have returned, and those pointers are often its locals.
   One process, no MPI: the test plays the executor and the watchdog itself on the
   runtime's own request table (the background thread is never started). Under ASan a
   request freed too early is a use-after-free, and one never freed a leak. */
#include "hvd/hvd_internal.h"
#include "hvd/requests.h"
#include "tests/check.h"

#include <string.h>

static float buf[4];

/* Submits an allreduce named name and returns the request as the executor finds it,
   held. */
static struct hvd_request *submit_held(const char *name, hvd_request_t *req) {
  CHECK(hvd_allreduce_async(name, buf, buf, 4, HVD_FLOAT32, HVD_SUM, req) == HVD_OK,
        "hvd_allreduce_async(%s): %s", name, hvd_last_error());
  pthread_mutex_lock(&hvd_g.mu);
  struct hvd_request *r = hvd_inflight_find(name);
  CHECK(r != NULL, "%s is not in flight", name);
  if (r) r->held = 1;
  /* the executor took it off the queue */
  hvd_g.queue_head = hvd_g.queue_tail = NULL;
  atomic_store(&hvd_g.queued, 0);
  pthread_mutex_unlock(&hvd_g.mu);
  return r;
}

/* The watchdog's stall shutdown: every request fails; the runtime is stopped. */
static void stall_shutdown(void) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_fail_all(HVD_ERR_TIMEOUT, "stall shutdown (test)");
  pthread_mutex_unlock(&hvd_g.mu);
}

static void restart(void) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_g.stopped = 0;
  pthread_mutex_unlock(&hvd_g.mu);
}

static int is_done(hvd_request_t req, hvd_status_t *s) {
  int done = 0;
  *s = hvd_test(req, &done);
  return done;
}

int main(void) {
  hvd_g.rank = 0;
  hvd_g.size = 1;
  atomic_store(&hvd_g_initialized, 1);
  hvd_status_t s;

  /* 1. Failed while held: not done until the executor lets go, then the failure. */
  hvd_request_t req = NULL;
  struct hvd_request *r = submit_held("held", &req);
  stall_shutdown();
  CHECK(!is_done(req, &s), "a held request completed while the executor still held it");
  pthread_mutex_lock(&hvd_g.mu);
  CHECK(r->fail_pending && r->status == HVD_ERR_TIMEOUT, "its failure was not recorded");
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s), "the released request is not done");
  CHECK(s == HVD_ERR_TIMEOUT, "status %s, expected HVD_ERR_TIMEOUT", hvd_status_string(s));
  CHECK(strstr(hvd_last_error(), "stall shutdown (test)") != NULL, "message \"%s\"",
        hvd_last_error());
  CHECK(hvd_g.ninflight == 0, "%d request(s) still counted in flight", hvd_g.ninflight);
  restart();

  /* 2. The executor completes it as it lets go (its collective went through at the
     abort): the waiter still gets the failure it was owed. */
  r = submit_held("held_ok", &req);
  stall_shutdown();
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_complete(r, HVD_OK, NULL);
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_ERR_TIMEOUT, "status %s, expected HVD_ERR_TIMEOUT",
        hvd_status_string(s));
  restart();

  /* 3. The last resort: completed while held (the executor never came back); the
     waiter finishes it but must not free it: the executor frees it on letting go. */
  r = submit_held("abandoned", &req);
  stall_shutdown();
  pthread_mutex_lock(&hvd_g.mu);
  CHECK(hvd_fail_held() == 1, "hvd_fail_held did not count the held request");
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_ERR_TIMEOUT, "status %s, expected HVD_ERR_TIMEOUT",
        hvd_status_string(s));
  pthread_mutex_lock(&hvd_g.mu);
  CHECK(r->abandoned, "the waiter did not leave the held request to the executor");
  hvd_request_release(r);   /* frees it (ASan: a use-after-free if the waiter had) */
  pthread_mutex_unlock(&hvd_g.mu);
  restart();

  /* 4. Completed normally while held, finished by its waiter at once: the executor
     frees it on letting go; one not held is freed by its waiter. */
  r = submit_held("normal", &req);
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_complete(r, HVD_OK, NULL);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_OK, "status %s, expected HVD_OK", hvd_status_string(s));
  pthread_mutex_lock(&hvd_g.mu);
  CHECK(r->abandoned, "the waiter did not leave the held request to the executor");
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  r = submit_held("free", &req);
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_release(r);   /* let go before it completes: the waiter frees it */
  hvd_request_complete(r, HVD_OK, NULL);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_OK, "status %s, expected HVD_OK", hvd_status_string(s));

  /* 5. Completed by hvd_fail_held, then the executor comes back and completes it (its
     collective went through): once only, the failure stays, the count stays right. */
  r = submit_held("late", &req);
  stall_shutdown();
  pthread_mutex_lock(&hvd_g.mu);
  hvd_fail_held();
  hvd_request_complete(r, HVD_OK, NULL);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(hvd_g.ninflight == 0, "%d request(s) counted in flight after a second completion",
        hvd_g.ninflight);
  CHECK(is_done(req, &s) && s == HVD_ERR_TIMEOUT, "status %s, expected HVD_ERR_TIMEOUT",
        hvd_status_string(s));
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  restart();

  /* 6. Results (an allgather's buffer and count) reach the caller's pointers only when
     the request succeeds, at its completion; a failed request's are freed (LeakSanitizer)
     and the caller's pointers stay untouched. */
  void *out = (void *)&out;
  size_t count = 7;
  r = submit_held("result_ok", &req);
  r->gather_out = &out;
  r->gather_count = &count;
  r->result = malloc(16);
  r->result_count = 4;
  r->results = HVD_RESULT_OUT | HVD_RESULT_COUNT;
  CHECK(out == (void *)&out && count == 7, "results handed over before completion");
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_complete(r, HVD_OK, NULL);
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_OK, "status %s", hvd_status_string(s));
  CHECK(out != (void *)&out && count == 4, "the results were not handed over");
  free(out == (void *)&out ? NULL : out);
  out = (void *)&out;
  count = 7;
  r = submit_held("result_failed", &req);
  r->gather_out = &out;
  r->gather_count = &count;
  stall_shutdown();
  r->result = malloc(16);   /* the collective went through after the failure */
  r->result_count = 4;
  r->results = HVD_RESULT_OUT | HVD_RESULT_COUNT;
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_complete(r, HVD_OK, NULL);
  hvd_request_release(r);
  pthread_mutex_unlock(&hvd_g.mu);
  CHECK(is_done(req, &s) && s == HVD_ERR_TIMEOUT, "status %s", hvd_status_string(s));
  CHECK(out == (void *)&out && count == 7, "a failed request wrote the caller's pointers");
  restart();

  atomic_store(&hvd_g_initialized, 0);
  printf(failures ? "FAIL\n" : "PASS\n");
  return failures ? 1 : 0;
}
