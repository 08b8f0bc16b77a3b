/* hvd/watchdog.c: the stall inspector that runs whatever the background thread is
   blocked in, on every rank.

   The coordinator's stall inspector (negotiation.c) runs on rank 0's background thread
   between collectives and names the ranks that did not submit. It cannot run while that
   thread waits inside a collective, nor on a worker. This thread wakes every
   WATCHDOG_EVERY_US and looks at this rank's own requests:
   - HVD_STALL_CHECK_TIME_SECONDS: while the background thread has been inside one
     collective for that long, a warning naming the oldest request of this rank and the
     bytes the transports moved since the last warning (a 2 GiB allreduce that takes
     minutes is not a stall: it says so);
   - HVD_STALL_SHUTDOWN_TIME_SECONDS: a request in flight that long (plus
     COORDINATOR_GRACE_S while the background thread still runs, so that the
     coordinator's report, which names the missing ranks, comes first) ends the runtime:
     every request fails with HVD_ERR_TIMEOUT and the transports are aborted, so the
     background thread leaves the collective it is in and tells the peers.
   It makes no MPI call (the background thread owns MPI). */
#include "hvd/watchdog.h"
#include "hvd/hvd_internal.h"
#include "hvd/liveness.h"
#include "hvd/requests.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCHDOG_EVERY_US 100e3
#define BLOCKED_AFTER_US 1e6     /* the background thread is "inside a collective" */
#define COORDINATOR_GRACE_S 2.0
#define HELD_WAIT_US 2e6         /* for the executor to leave an aborted collective */

/* The oldest in-flight request (age in s, name and kind into buf); 0 when none. */
static int oldest_request(double now_us, double *age_s, char *buf, size_t len) {
  const struct hvd_request *oldest = NULL;
  pthread_mutex_lock(&hvd_g.mu);
  for (int b = 0; b < HVD_INFLIGHT_BUCKETS; b++)
    for (const struct hvd_request *r = hvd_g.inflight[b]; r; r = r->next_inflight)
      if (!oldest || r->submit_time < oldest->submit_time) oldest = r;
  if (oldest) {
    char dbuf[HVD_KEY_MAX + 32];
    snprintf(buf, len, "%s \"%s\"", hvd_kind_name(oldest->kind),
             hvd_display_name(oldest->key, dbuf, sizeof(dbuf)));
    *age_s = (now_us - oldest->submit_time) * 1e-6;
  }
  pthread_mutex_unlock(&hvd_g.mu);
  return oldest != NULL;
}

/* Ends the runtime from this thread: fails every request, marks the runtime failed
   and aborts the transports (the background thread then tells the peers). */
static void stall_shutdown(const char *text) {
  /* failed first: a caller woken by the failed request may call hvd_shutdown at once,
     and the background thread must then see a failure, not a clean shutdown. */
  atomic_store(&hvd_g.failed, 1);
  pthread_mutex_lock(&hvd_g.mu);
  if (!hvd_g.stopped) hvd_fail_all(HVD_ERR_TIMEOUT, text);
  pthread_mutex_unlock(&hvd_g.mu);
  hvd_log(HVD_LOG_ERROR, "%s", text);
  hvd_g_cancel_set();
  coll_transport_abort(hvd_g.world);
  coll_transport_abort(hvd_g.local);
  coll_transport_abort(hvd_g.cross);
  /* The requests the executor holds (inside the collective) were left to it: it leaves
     the aborted collective and completes them with this failure, and only then may
     their waiters free them and reuse their buffers. Should it not come back within
     HELD_WAIT_US, they complete anyway, since a waiter must not hang (the executor then
     frees them itself, if it ever returns; their buffers may still be written). */
  const double until = util_now_us() + HELD_WAIT_US;
  for (;;) {
    /* still this thread's turns: the liveness checks must not read the wait as a freeze */
    atomic_store(&hvd_g.watchdog_us, (long long)util_now_us());
    pthread_mutex_lock(&hvd_g.mu);
    int left = hvd_g.ninflight > 0, forced = 0;
    if (left && util_now_us() >= until) forced = hvd_fail_held();
    pthread_mutex_unlock(&hvd_g.mu);
    if (forced)
      hvd_log(HVD_LOG_ERROR, "rank %d: the background thread did not leave its collective "
              "within %.0f s of the stall shutdown; %d request(s) completed without it",
              hvd_g.rank, HELD_WAIT_US * 1e-6, forced);
    if (!left || util_now_us() >= until) break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Bytes the host (MPI) transports have completed, sends and receives, summed; a device
   collective's bytes (NCCL) are not counted. */
static unsigned long long transport_bytes(void) {
  coll_transport_t *ts[3] = {hvd_g.world, hvd_g.local, hvd_g.cross};
  unsigned long long b = 0;
  for (int i = 0; i < 3; i++)
    if (ts[i]) b += __atomic_load_n(&ts[i]->bytes_done, __ATOMIC_RELAXED);
  return b;
}

static void bytes_text(char *buf, size_t len, unsigned long long b) {
  if (b >= 1ull << 30) snprintf(buf, len, "%.1f GiB", (double)b / (1ull << 30));
  else if (b >= 1ull << 20) snprintf(buf, len, "%.1f MiB", (double)b / (1ull << 20));
  else if (b >= 1ull << 10) snprintf(buf, len, "%.1f KiB", (double)b / (1ull << 10));
  else snprintf(buf, len, "%llu bytes", b);
}

void hvd_stall_warning_text(char *buf, size_t len, double away_s, unsigned long long moved,
                            double interval_s, const char *what, double age_s) {
  if (moved > 0) {
    char b[32];
    bytes_text(b, sizeof(b), moved);
    snprintf(buf, len, "long collective: rank %d (host %s): the background thread has been "
             "inside one collective for %.1f s and is still moving data: %s sent and "
             "received over MPI in the last %.1f s (a large transfer, not a stall); the "
             "oldest request of this rank is %s (%.1f s)", hvd_g.rank,
             hvd_host_of(hvd_g.rank), away_s, b, interval_s, what, age_s);
  } else {
    snprintf(buf, len, "stall: rank %d (host %s): the background thread has been inside "
             "one collective for %.1f s, waiting for its peers: no bytes sent or received "
             "over MPI in the last %.1f s; the oldest request of this rank is %s (%.1f s)",
             hvd_g.rank, hvd_host_of(hvd_g.rank), away_s, interval_s, what, age_s);
  }
}

/* A turn that comes longer than the peer timeout after the last one: the process was
   stopped (SIGSTOP, a debugger) or starved that long, and its peers have given it up. */
static void note_turn(void) {
  long long now = (long long)util_now_us();
  long long gap = now - atomic_load(&hvd_g.watchdog_us);
  if (hvd_g.cfg.peer_timeout_s > 0 && gap > (long long)(hvd_g.cfg.peer_timeout_s * 1e6) &&
      gap > atomic_load(&hvd_g.frozen_us))
    atomic_store(&hvd_g.frozen_us, gap);
  atomic_store(&hvd_g.watchdog_us, now);
}

static void *watchdog_main(void *arg) {
  (void)arg;
  double last_warn_us = 0;
  /* The transports' byte count when the last interval began: when this thread last saw
     the background thread take a turn (outside a collective), or the last warning. */
  unsigned long long base_bytes = transport_bytes();
  double base_us = util_now_us();
  long long seen_alive_us = -1;
  pthread_mutex_lock(&hvd_g.watchdog_mu);
  while (!hvd_g.watchdog_stop) {
    note_turn();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(WATCHDOG_EVERY_US * 1000.0);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&hvd_g.watchdog_cv, &hvd_g.watchdog_mu, &ts);
    if (hvd_g.watchdog_stop || atomic_load(&hvd_g.failed)) continue;
    pthread_mutex_unlock(&hvd_g.watchdog_mu);

    double now = util_now_us(), age = 0;
    long long alive_us = atomic_load(&hvd_g.bg_alive_us);
    double away_s = (now - (double)alive_us) * 1e-6;
    int blocked = away_s * 1e6 >= BLOCKED_AFTER_US;
    if (alive_us != seen_alive_us) {
      seen_alive_us = alive_us;
      base_bytes = transport_bytes();
      base_us = now;
    }
    char what[HVD_KEY_MAX + 64], text[HVD_ERROR_MAX];
    if (oldest_request(now, &age, what, sizeof(what))) {
      double check = hvd_g.cfg.stall_check_s, shut = hvd_g.cfg.stall_shutdown_s;
      if (shut > 0 && age >= shut + (blocked ? 0 : COORDINATOR_GRACE_S)) {
        snprintf(text, sizeof(text),
                 "stall shutdown on rank %d (host %s): %s waited %.1f s "
                 "(HVD_STALL_SHUTDOWN_TIME_SECONDS=%g); the background thread %s",
                 hvd_g.rank, hvd_host_of(hvd_g.rank), what, age, shut,
                 blocked ? "is stuck inside a collective" : "waits for other ranks");
        stall_shutdown(text);
      } else if (check > 0 && blocked && away_s >= check &&
                 now - last_warn_us >= check * 1e6) {
        last_warn_us = now;
        unsigned long long bytes = transport_bytes();
        hvd_stall_warning_text(text, sizeof(text), away_s, bytes - base_bytes,
                               (now - base_us) * 1e-6, what, age);
        hvd_log(HVD_LOG_WARNING, "%s", text);
        base_bytes = bytes;
        base_us = now;
      }
    }
    pthread_mutex_lock(&hvd_g.watchdog_mu);
  }
  pthread_mutex_unlock(&hvd_g.watchdog_mu);
  return NULL;
}

hvd_status_t hvd_watchdog_start(void) {
  hvd_g.watchdog_stop = 0;
  atomic_store(&hvd_g.watchdog_us, (long long)util_now_us());
  atomic_store(&hvd_g.frozen_us, 0);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int e = pthread_cond_init(&hvd_g.watchdog_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (e != 0)
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: pthread_cond_init failed: %s",
                         strerror(e));
  e = pthread_create(&hvd_g.watchdog, NULL, watchdog_main, NULL);
  if (e != 0) {
    pthread_cond_destroy(&hvd_g.watchdog_cv);
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: starting the watchdog thread failed: %s",
                         strerror(e));
  }
  return HVD_OK;
}

void hvd_watchdog_stop(void) {
  pthread_mutex_lock(&hvd_g.watchdog_mu);
  hvd_g.watchdog_stop = 1;
  pthread_cond_signal(&hvd_g.watchdog_cv);
  pthread_mutex_unlock(&hvd_g.watchdog_mu);
  pthread_join(hvd_g.watchdog, NULL);
  pthread_cond_destroy(&hvd_g.watchdog_cv);
}
