/* hvd/background.c: the background loop, the only code that talks to peers.

   Its turns run one at a time under engine_mu: on the background thread, or on a user
   thread that waits in hvd_wait for a request of its own (hvd_background_help, below:
   a blocking call then needs no hand-over to the background thread and back, which
   on a shared core costs more than a small collective). Either way one thread at a
   time calls MPI and sees the loop's state.

   One loop iteration (a turn):
     1. take the requests user threads queued; send them to the coordinator (rank 0
        adds its own directly);
     2. receive control messages: requests (rank 0), response lists (workers),
        shutdown notices;
     3. rank 0: when names are ready everywhere, send the ordered response list and run
        it; the stall inspector;
     4. nothing to do: wait. While this rank has requests in flight a peer's message is
        expected soon, so spin briefly (yielding the core), then sleep in short growing
        steps; with nothing in flight, sleep on the condition variable user threads
        signal on submit (a few ms at most, to see peers' shutdown notices).

   Response cache (HVD_CACHE_CAPACITY > 0; 0 keeps the loop above exactly): its
   protocol is hvd/cache_rounds.c (the ranks agree in rounds on the hits every rank
   asked for; coordinator lists run when a round says they are due), over the MPI
   peers of hvd/rounds.c. The loop hands it submissions and lists, runs its part of a
   turn (hvd_cache_rounds_turn), and lends it hooks: queue a request for the
   coordinator, run a response list, fail.

   Control messages (sends that never block, a poll): hvd/control.c.

   Shutdown (hvd_shutdown on any rank, the coordinator's stall timeout, an error every
   rank saw at the same response): the coordinator sends SHUTDOWN to every worker,
   fails everything pending, and waits for every worker's SHUTDOWN_ACK (DRAIN_LIMIT_US,
   or longer while the workers it waits for still send heartbeats: ack_wait_on), so no
   control message is left unreceived before the communicators are freed. A worker that wants to stop asks the coordinator (SHUTDOWN_REQ) and keeps
   executing response lists until SHUTDOWN arrives, so no peer is left waiting inside a
   collective for it.

   Failure (a lost peer, an error only this rank saw, the watchdog's stall shutdown):
   no waiting for anybody. A lost peer leads to a census that names the lost ranks
   (hvd/liveness.c); the rank tells the others with a STOP notice, which also ends the
   collective they may be blocked in, and stops. hvd_shutdown then finalizes MPI only
   if every rank reaches it (hvd/init.c). */
#include "hvd/background.h"
#include "hvd/hvd_internal.h"
#include "hvd/cache_rounds.h"
#include "hvd/control.h"
#include "hvd/execute.h"
#include "hvd/joined_sets.h"
#include "hvd/liveness.h"
#include "hvd/negotiation.h"
#include "hvd/ps_internal.h"
#include "hvd/requests.h"
#include "hvd/rounds.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US 200.0                /* busy-poll this long after the last progress   */
#define SLEEP_MIN_US 20.0            /* then sleep, doubling up to SLEEP_MAX_US       */
#define SLEEP_MAX_US 250.0
#define IDLE_SLEEP_US 5000.0         /* nothing in flight                             */
#define DEVICE_POLL_US 50.0          /* the longest sleep with device work queued      */
#define DRAIN_LIMIT_US 3e6           /* wait at most this for peers at shutdown       */
#define STOP_WAIT_LIMIT_US 30e6      /* a worker waits this for the coordinator       */
#define STALL_CHECK_EVERY_US 100e3
#define LIVENESS_EVERY_US 10e3       /* failure notices and heartbeats, this often    */
typedef struct {
  hvd_control_t ctl;                 /* control messages: sends in flight, last received */
  hvd_coordinator_t *coord;          /* rank 0                                        */
  hvd_response_t *resp;
  int cap_resp;
  int stop_requested;                /* worker sent SHUTDOWN_REQ                      */
  int failed;                        /* worker: fatal error, waits for SHUTDOWN       */
  double stop_deadline_us;
  double last_progress_us, last_stall_check_us;
  double last_liveness_us;
  /* The response cache's protocol (NULL: cache off, every name goes to the
     coordinator) and its peers (hvd/rounds.c). */
  hvd_cache_rounds_t *rounds;
  hvd_round_peers_t peers;
  hvd_buf_t to_coord;                /* requests for the coordinator (header first)   */
  int nto_coord;
} bg_t;

/* The engine (the turns' lock and state; see hvd_background_help). */
static pthread_mutex_t engine_mu = PTHREAD_MUTEX_INITIALIZER;
static bg_t engine_bg;             /* the loop's state, under engine_mu               */
static int engine_state;           /* ENGINE_*, under engine_mu                       */
static atomic_int engine_helpers;  /* user threads in hvd_background_help             */
static _Thread_local int helping;  /* this thread runs a turn for hvd_background_help */
enum { ENGINE_OFF, ENGINE_RUNNING, ENGINE_ENDED };
#define HELP_SPIN_US 200.0           /* a helper gives up this long after progress    */
/* The background thread's sleep while a helper runs the turns. It only matters when a
   helper is kept off the core between two turns (a helper that leaves work behind wakes
   it), so it is long: each wake-up preempts the helper on its core, and at 250 us they
   cost a 1-4 MiB allreduce about 20% (2026-12-01, np=2, mpirun's one core per rank). */
#define HELPERS_WAIT_US 5000.0

static void local_stop(hvd_status_t s, const char *text) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_fail_all(s, text);
  hvd_g_cancel_set();
  pthread_mutex_unlock(&hvd_g.mu);
}

/* Ends this rank's runtime on a failure its peers may not know of: every request fails
   with s and text; with tell_peers, the others get a STOP notice (a lost peer or a
   stall reaches them as such; any other error of this rank as a shutdown); hvd_shutdown
   will not wait for ranks that are gone. */
static void stop_on_failure(hvd_status_t s, const char *text, int tell_peers) {
  hvd_log(HVD_LOG_ERROR, "%s", text);
  atomic_store(&hvd_g.failed, 1);
  if (tell_peers) {
    char full[HVD_ERROR_MAX];
    snprintf(full, sizeof(full), "the hvd runtime was shut down: %s", text);
    int keep = s == HVD_ERR_PEER_LOST || s == HVD_ERR_TIMEOUT;
    hvd_liveness_send_stop(keep ? s : HVD_ERR_SHUTDOWN, keep ? text : full);
  }
  local_stop(s, text);
}

/* A failure, after which this rank stops at once (returns 1 for the loop to end): a
   peer's notice (the reason a collective was interrupted), the watchdog's stall
   shutdown, a lost peer (the census names who), or an error of this rank's. */
static int fail(hvd_status_t s, const char *text) {
  char msg[HVD_ERROR_MAX];
  hvd_status_t ns;
  if (hvd_liveness_take_notice(&ns, msg, sizeof(msg))) {
    if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
    stop_on_failure(ns, msg, (ns == HVD_ERR_PEER_LOST || ns == HVD_ERR_TIMEOUT) &&
                                 !hvd_liveness_given_up());
  } else if (atomic_load(&hvd_g.failed)) {
    pthread_mutex_lock(&hvd_g.mu);
    snprintf(msg, sizeof(msg), "%s", hvd_g.stop_msg);
    pthread_mutex_unlock(&hvd_g.mu);
    hvd_liveness_send_stop(HVD_ERR_TIMEOUT, msg);
  } else if (s == HVD_ERR_PEER_LOST) {
    ns = hvd_liveness_census(text, msg, sizeof(msg));
    /* A rank known gone never reaches hvd_shutdown: it need not wait for it. */
    if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
    stop_on_failure(ns, msg, !hvd_liveness_given_up());
  } else {
    stop_on_failure(s, text, 1);
  }
  return 1;
}

/* ---- response cache: submissions, rounds ---- */

/* Appends one encoded request to the next REQUESTS message for the coordinator. */
static int coord_queue(bg_t *bg, const void *wire, size_t len) {
  if (bg->to_coord.len == 0) {
    hvd_msg_header_t h = {HVD_MSG_REQUESTS, 0, hvd_g.rank, 0};
    if (!hvd_buf_put(&bg->to_coord, &h, sizeof(h))) return 0;
  }
  if (!hvd_buf_put(&bg->to_coord, wire, len)) return 0;
  bg->nto_coord++;
  return 1;
}

/* Sends (rank 0: adds) what coord_queue collected. 0 on failure (err filled). */
static int coord_flush(bg_t *bg, char *err, size_t errlen) {
  if (bg->nto_coord == 0) return 1;
  hvd_msg_header_t h;
  memcpy(&h, bg->to_coord.p, sizeof(h));
  h.n = bg->nto_coord;
  memcpy(bg->to_coord.p, &h, sizeof(h));
  int ok;
  if (hvd_g.rank == 0) {
    ok = hvd_coordinator_add(bg->coord, 0, bg->to_coord.p + sizeof(h),
                             bg->to_coord.len - sizeof(h), h.n, util_now_us());
    if (!ok)
      snprintf(err, errlen, "rank 0 could not hand %d request(s) to the coordinator", h.n);
  } else {
    ok = hvd_control_send(&bg->ctl, 0, bg->to_coord.p, bg->to_coord.len, err, errlen);
  }
  bg->to_coord.len = 0;
  bg->nto_coord = 0;
  return ok;
}

/* Clean shutdown, one step of the rounds' end (hvd_cache_rounds_stop_step): 1 when over
   (or the cache is off, or an error marked the runtime failed), 0 to call again. */
static int rounds_stop_step(bg_t *bg) {
  char err[HVD_ERROR_MAX];
  if (!bg->rounds) return 1;
  int r = hvd_cache_rounds_stop_step(bg->rounds, err, sizeof(err));
  if (r < 0) {
    hvd_log(HVD_LOG_ERROR, "%s", err);
    atomic_store(&hvd_g.failed, 1);
    return 1;
  }
  return r;
}

/* Runs rounds_stop_step until the last round or the deadline; a round left in flight
   marks the runtime failed (hvd_shutdown then drains it or leaves MPI alone). */
static void rounds_finish(bg_t *bg, double deadline_us) {
  while (!rounds_stop_step(bg)) {
    if (util_now_us() > deadline_us) {
      hvd_log(HVD_LOG_WARNING, "shutdown: the response cache's last round did not "
              "complete within %.0f s", DRAIN_LIMIT_US * 1e-6);
      atomic_store(&hvd_g.failed, 1);
      return;
    }
    hvd_control_progress(&bg->ctl, 0, 0);
    sched_yield();
  }
}

/* Rank 0, waiting for the workers' SHUTDOWN_ACK since start_us: whether to wait on at
   now_us. DRAIN_LIMIT_US at first; beyond it, as long as every worker that has not
   acknowledged (acked[r] == 0; acked NULL: none known) still gives signs of life
   (heartbeats, which rank 0 keeps exchanging here) within the peer timeout, and for the
   peer timeout more at most: a worker whose background thread runs seldom (nice 19 on
   a loaded machine) is waited for, a dead one ends the wait within the peer timeout
   (sooner when its silence is seen: time rank 0 itself was away does not count). */
static int ack_wait_on(const unsigned char *acked, double start_us, double now_us) {
  char reason[HVD_ERROR_MAX];
  (void)hvd_liveness_tick(now_us, reason, sizeof(reason));   /* the silent: below */
  if (now_us < start_us + DRAIN_LIMIT_US) return 1;
  double timeout_us = hvd_g.cfg.peer_timeout_s * 1e6;
  if (timeout_us <= 0 || acked == NULL) return 0;
  double limit_us = start_us + DRAIN_LIMIT_US + timeout_us;
  if (now_us >= limit_us) return 0;
  for (int r = 1; r < hvd_g.size; r++)
    if (!acked[r] && hvd_liveness_silent_us(r, now_us) > timeout_us) return 0;
  return 1;
}

/* Rank 0: stops every rank. s is what pending requests report. */
static void global_shutdown(bg_t *bg, hvd_status_t s, const char *text) {
  char full[HVD_ERROR_MAX], err[HVD_ERROR_MAX];
  /* A stall: the rank that stalls may never reach MPI_Finalize. */
  if (s != HVD_ERR_SHUTDOWN) atomic_store(&hvd_g.failed, 1);
  snprintf(full, sizeof(full), "the hvd runtime was shut down: %s", text);
  /* SHUTDOWN: the header, the number of rounds this rank has run (cache on: a worker
     runs the round it is in first if rank 0 ran it; see worker_message), the text. */
  uint64_t rounds_run = bg->rounds ? hvd_cache_rounds_run(bg->rounds) : 0;
  hvd_buf_t b = {0};
  hvd_msg_header_t h = {HVD_MSG_SHUTDOWN, 0, 0, s};
  int ok = hvd_buf_put(&b, &h, sizeof(h)) && hvd_buf_put(&b, &rounds_run, sizeof(rounds_run)) &&
           hvd_buf_put(&b, full, strlen(full));
  if (!ok) hvd_log(HVD_LOG_ERROR, "rank 0: out of memory for the shutdown notice");
  /* A send that fails does not keep the notice from the other workers. */
  for (int r = 1; r < hvd_g.size && ok; r++)
    if (!hvd_control_send(&bg->ctl, r, b.p, b.len, err, sizeof(err)))
      hvd_log(HVD_LOG_ERROR, "%s", err);
  hvd_buf_free(&b);
  local_stop(s, full);
  double start = util_now_us();
  unsigned char *acked = calloc((size_t)hvd_g.size, 1);   /* NULL: DRAIN_LIMIT_US only */
  int acks = 0, src;
  while (acks < hvd_g.size - 1 && ack_wait_on(acked, start, util_now_us())) {
    int got = hvd_control_poll(&bg->ctl, &src, err, sizeof(err));
    if (got < 0) break;
    if (got == 1) {
      hvd_msg_header_t h;
      memcpy(&h, bg->ctl.in.p, sizeof(h));
      if (h.type == HVD_MSG_SHUTDOWN_ACK) {
        acks++;
        if (acked) acked[src] = 1;
      }
      continue;   /* anything else is moot now */
    }
    rounds_stop_step(bg);
    hvd_control_progress(&bg->ctl, 0, 0);
    sched_yield();
  }
  free(acked);
  /* A worker that never acknowledged will not finish the rounds either. */
  double deadline = util_now_us() + (acks == hvd_g.size - 1 ? DRAIN_LIMIT_US : 0);
  rounds_finish(bg, deadline);
  if (acks < hvd_g.size - 1) {
    hvd_log(HVD_LOG_WARNING, "shutdown: only %d of %d ranks acknowledged within %.1f s",
            acks, hvd_g.size - 1, (util_now_us() - start) * 1e-6);
    atomic_store(&hvd_g.failed, 1);
  }
  hvd_control_progress(&bg->ctl, 1, deadline);
}

/* A fatal error on this rank. Returns 1 when the loop must end now. */
static int fatal_error(bg_t *bg, hvd_status_t s, const char *text, int agreed) {
  if (!agreed) return fail(s, text);
  hvd_log(HVD_LOG_ERROR, "%s", text);
  if (hvd_g.rank == 0) {
    global_shutdown(bg, s, text);
    return 1;
  }
  bg->failed = 1;
  if (bg->rounds) hvd_cache_rounds_halt(bg->rounds);
  bg->stop_deadline_us = util_now_us() + DRAIN_LIMIT_US;
  return 0;
}

/* Runs a RESPONSES message (header included). Returns 1 when the loop must end.
   from_cache: the agreed cache hits of a round (counted apart); otherwise a coordinator
   list, whose cacheable responses the cache learns once they ran. */
static int run_responses(bg_t *bg, const char *data, size_t len, const double *times,
                         int from_cache) {
  hvd_msg_header_t h;
  memcpy(&h, data, sizeof(h));
  char err[HVD_ERROR_MAX];
  if (h.n > bg->cap_resp) {
    hvd_response_t *p = realloc(bg->resp, (size_t)h.n * sizeof(*p));
    if (!p) return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for responses", 0);
    bg->resp = p;
    bg->cap_resp = h.n;
  }
  if (!hvd_decode_responses(data + sizeof(h), len - sizeof(h), h.n, hvd_g.size, bg->resp)) {
    snprintf(err, sizeof(err), "rank %d received a malformed response list", hvd_g.rank);
    return fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  }
  if (times)
    for (int i = 0; i < h.n; i++) {
      bg->resp[i].first_seen_us = times[2 * i];
      bg->resp[i].ready_us = times[2 * i + 1];
    }
  /* Counted before they run, so a caller that sees its request done sees it counted. */
  atomic_fetch_add(from_cache ? &hvd_g.stat_cached : &hvd_g.stat_negotiated,
                   (unsigned long long)h.n);
  int agreed = 0;
  hvd_status_t s = hvd_execute(bg->resp, h.n, err, sizeof(err), &agreed);
  if (s != HVD_OK) return fatal_error(bg, s, err, agreed);
  if (bg->rounds && !from_cache && !hvd_cache_rounds_learn(bg->rounds, bg->resp, h.n))
    return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for the response cache", 0);
  return 0;
}

/* Takes what user threads queued; rank 0 adds it, workers send it. 1 if anything. */
static int take_submissions(bg_t *bg, int *shutdown_requested, int *end) {
  pthread_mutex_lock(&hvd_g.mu);
  struct hvd_request *head = hvd_g.queue_head;
  hvd_g.queue_head = hvd_g.queue_tail = NULL;
  atomic_store(&hvd_g.queued, 0);
  *shutdown_requested = hvd_g.shutdown_requested;
  pthread_mutex_unlock(&hvd_g.mu);
  /* The taken requests stay in flight until this thread completes them, so they are
     read here without the lock. Their memory kind is asked here, on the thread that
     selected the GPU (hvd_device_thread_start). */
  if (head == NULL) return 0;
  char err[HVD_ERROR_MAX];
  int n = 0, ok = 1;
  for (struct hvd_request *r = head; r && ok; r = r->next_queue, n++) {
    r->device = r->kind == HVD_KIND_BARRIER || r->kind == HVD_KIND_JOIN || helping
                    ? -1 : hvd_device_of_buffers(r->sendbuf, r->recvbuf);
    /* From here this rank stands in with zeros for the set's collectives. */
    if (r->kind == HVD_KIND_JOIN && !hvd_joined_sets_add(r->set)) {
      ok = 0;
      break;
    }
    /* Cache on: a pending hit waits for the others in the rounds (hvd/cache_rounds.c). */
    if (bg->rounds) {
      int hit = hvd_cache_rounds_submit(bg->rounds, r);
      if (hit < 0) {
        ok = 0;
        break;
      }
      if (hit) continue;
    }
    hvd_buf_t b = {0};
    ok = hvd_encode_request(&b, r) && coord_queue(bg, b.p, b.len);
    hvd_buf_free(&b);
  }
  if (ok) ok = coord_flush(bg, err, sizeof(err));
  else snprintf(err, sizeof(err), "rank %d could not hand %d request(s) to the coordinator",
                hvd_g.rank, n);
  if (!ok) *end = fatal_error(bg, HVD_ERR_NO_MEMORY, err, 0);
  return 1;
}

/* Rank 0: one control message from src. Returns 1 when the loop must end. */
static int coordinator_message(bg_t *bg, int src) {
  hvd_msg_header_t h;
  memcpy(&h, bg->ctl.in.p, sizeof(h));
  char text[HVD_ERROR_MAX];
  switch (h.type) {
    case HVD_MSG_REQUESTS:
      if (!hvd_coordinator_add(bg->coord, src, bg->ctl.in.p + sizeof(h),
                               bg->ctl.in.len - sizeof(h), h.n, util_now_us())) {
        snprintf(text, sizeof(text), "malformed or duplicate requests from rank %d", src);
        return fatal_error(bg, HVD_ERR_BACKEND, text, 0);
      }
      return 0;
    case HVD_MSG_SHUTDOWN_REQ: {
      size_t tl = bg->ctl.in.len - sizeof(h);
      if (tl > sizeof(text) - 1) tl = sizeof(text) - 1;
      if (h.status == HVD_OK) {
        snprintf(text, sizeof(text), "hvd_shutdown was called on rank %d", src);
      } else {
        memcpy(text, bg->ctl.in.p + sizeof(h), tl);
        text[tl] = '\0';
      }
      /* Cache on: the worker asked after running what its last round made due (a
         mismatch answer, say, which moves no data); rank 0 runs that round too before
         it stops, so what the worker saw answered is answered here alike. */
      if (bg->rounds && h.status == HVD_OK &&
          hvd_cache_rounds_finish(bg->rounds, util_now_us() + DRAIN_LIMIT_US))
        return 1;
      global_shutdown(bg, HVD_ERR_SHUTDOWN, text);
      return 1;
    }
    default:
      return 0;   /* late ACKs */
  }
}

/* Worker: one control message from the coordinator. Returns 1 when the loop must end. */
static int worker_message(bg_t *bg) {
  hvd_msg_header_t h;
  memcpy(&h, bg->ctl.in.p, sizeof(h));
  if (h.type == HVD_MSG_RESPONSES) {
    if (bg->rounds) {   /* runs when a round says it is due */
      if (!hvd_cache_rounds_queue_list(bg->rounds, bg->ctl.in.p, bg->ctl.in.len, NULL, h.n))
        return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for responses", 0);
      return 0;
    }
    if (bg->failed) return 0;   /* every rank stopped at the same response */
    return run_responses(bg, bg->ctl.in.p, bg->ctl.in.len, NULL, 0);
  }
  if (h.type == HVD_MSG_SHUTDOWN) {
    char text[HVD_ERROR_MAX], err[HVD_ERROR_MAX];
    uint64_t rounds_run = 0;
    if (bg->ctl.in.len < sizeof(h) + sizeof(rounds_run))
      return fatal_error(bg, HVD_ERR_BACKEND, "a shutdown notice from rank 0 is too short", 0);
    memcpy(&rounds_run, bg->ctl.in.p + sizeof(h), sizeof(rounds_run));
    size_t tl = bg->ctl.in.len - sizeof(h) - sizeof(rounds_run);
    if (tl > sizeof(text) - 1) tl = sizeof(text) - 1;
    memcpy(text, bg->ctl.in.p + sizeof(h) + sizeof(rounds_run), tl);
    text[tl] = '\0';
    /* Cache on, a clean shutdown: rank 0 may have run the round this rank is in (its
       words are here) and answered requests in it that move no data (a count of 0, a
       mismatch), then stopped. This rank runs that round too, so what rank 0 answered
       is answered here alike; a round rank 0 did not run is not run here either (its
       collectives would wait for rank 0). */
    if (bg->rounds && h.status == HVD_ERR_SHUTDOWN && !bg->failed &&
        hvd_cache_rounds_unfinished(bg->rounds) &&
        hvd_cache_rounds_started(bg->rounds) <= rounds_run &&
        hvd_cache_rounds_finish(bg->rounds, util_now_us() + DRAIN_LIMIT_US))
      return 1;
    if (h.status != HVD_ERR_SHUTDOWN) atomic_store(&hvd_g.failed, 1);
    local_stop((hvd_status_t)h.status, text);
    if (!hvd_control_send_msg(&bg->ctl, 0, HVD_MSG_SHUTDOWN_ACK, 0, NULL, err, sizeof(err)))
      hvd_log(HVD_LOG_ERROR, "%s", err);
    rounds_finish(bg, util_now_us() + DRAIN_LIMIT_US);
    hvd_control_progress(&bg->ctl, 1, util_now_us() + DRAIN_LIMIT_US);
    return 1;
  }
  return 0;
}

/* How the background thread waits after a turn without progress (decided under the
   engine lock, from bg): 0 yield once (right after progress: a blocking caller submits
   its next collective within microseconds of the last one completing, and a
   condition-variable wake-up costs several), else sleep that many microseconds at most
   (user threads wake it on submit). While this rank has work in flight a peer's
   message is expected soon: short growing sleeps; with nothing in flight, long ones. */
static double idle_plan(bg_t *bg, double *sleep_us) {
  double now = util_now_us();
  if (now - bg->last_progress_us < SPIN_US) return 0;
  pthread_mutex_lock(&hvd_g.mu);
  int busy = hvd_g.ninflight > 0;
  pthread_mutex_unlock(&hvd_g.mu);
  busy = busy || bg->stop_requested || bg->failed || bg->ctl.nsends > 0 ||
         (bg->rounds && hvd_cache_rounds_busy(bg->rounds)) || hvd_ps_busy();
  /* A device collective in flight: its event is polled every DEVICE_POLL_US at least,
     so that its completion is seen about as soon as a blocking wait would. */
  if (hvd_device_pending() > 0) {
    double w = *sleep_us < DEVICE_POLL_US ? *sleep_us : DEVICE_POLL_US;
    *sleep_us = DEVICE_POLL_US;
    return w;
  }
  if (busy) {
    double w = *sleep_us;
    *sleep_us = w * 2 < SLEEP_MAX_US ? w * 2 : SLEEP_MAX_US;
    return w;
  }
  /* Cache on: the peers' rounds wait for this rank's next one. */
  return bg->rounds && !hvd_cache_rounds_over(bg->rounds) ? HVD_ROUND_IDLE_US : IDLE_SLEEP_US;
}

/* Sleeps wait_us at most on work_cv (0: yields), unless something was submitted or
   hvd_shutdown was called. */
static void idle_wait(double wait_us) {
  pthread_mutex_lock(&hvd_g.mu);
  if (atomic_load(&hvd_g.queued) > 0 || hvd_g.shutdown_requested) {
    pthread_mutex_unlock(&hvd_g.mu);
    return;
  }
  if (wait_us <= 0) {
    pthread_mutex_unlock(&hvd_g.mu);
    sched_yield();
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long ns = (long long)ts.tv_nsec + (long long)(wait_us * 1000.0);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  hvd_g.bg_waiting = 1;
  pthread_cond_timedwait(&hvd_g.work_cv, &hvd_g.mu, &ts);
  hvd_g.bg_waiting = 0;
  pthread_mutex_unlock(&hvd_g.mu);
}

/* One turn of the loop (the engine lock held): see the top of the file. *progressed:
   something moved. Returns 1 when the loop must end. */
static int turn(bg_t *bg, int *progressed_out) {
  char err[HVD_ERROR_MAX];
  int progressed = 0, end = 0, sd = 0, src;
  double started = util_now_us();
  atomic_store(&hvd_g.bg_alive_us, (long long)started);
  if (atomic_load(&hvd_g.failed)) {   /* the watchdog's stall shutdown */
    fail(HVD_ERR_TIMEOUT, "");
    return 1;
  }
  if (started - bg->last_liveness_us >= LIVENESS_EVERY_US) {
    bg->last_liveness_us = started;
    hvd_status_t ns;
    if (hvd_liveness_take_notice(&ns, err, sizeof(err))) {
      if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
      stop_on_failure(ns, err, (ns == HVD_ERR_PEER_LOST || ns == HVD_ERR_TIMEOUT) &&
                                   !hvd_liveness_given_up());
      return 1;
    }
    if (hvd_liveness_tick(started, err, sizeof(err))) {
      fail(HVD_ERR_PEER_LOST, err);
      return 1;
    }
  }
  progressed |= take_submissions(bg, &sd, &end);
  if (end) return 1;
  /* Device collectives queued on the GPU complete here once their event has
     (hvd/device.c); never blocks. A failure there (a NCCL error, a stall) is fatal. */
  if (hvd_device_pending() > 0) {
    int completed = 0;
    hvd_status_t ds = hvd_device_poll(&completed, err, sizeof(err));
    if (ds != HVD_OK) return fail(ds, err);
    progressed |= completed > 0;
  }
  /* hvd_shutdown right after the watchdog failed the requests: a failure, not a
     clean shutdown (the watchdog sets failed before it wakes the caller). */
  if (sd && atomic_load(&hvd_g.failed)) {
    fail(HVD_ERR_TIMEOUT, "");
    return 1;
  }
  if (sd && !bg->stop_requested) {
    if (hvd_g.rank == 0) {
      global_shutdown(bg, HVD_ERR_SHUTDOWN, "hvd_shutdown was called on rank 0");
      return 1;
    }
    if (!hvd_control_send_msg(&bg->ctl, 0, HVD_MSG_SHUTDOWN_REQ, HVD_OK, NULL, err, sizeof(err))) {
      local_stop(HVD_ERR_SHUTDOWN, err);
      return 1;
    }
    bg->stop_requested = 1;
    bg->stop_deadline_us = util_now_us() + STOP_WAIT_LIMIT_US;
  }
  for (;;) {
    int got = hvd_control_poll(&bg->ctl, &src, err, sizeof(err));
    if (got < 0) {
      if (fatal_error(bg, HVD_ERR_BACKEND, err, 0)) return 1;
      break;
    }
    if (got == 0) break;
    progressed = 1;
    if (hvd_g.rank == 0 ? coordinator_message(bg, src) : worker_message(bg)) return 1;
  }
  double now = util_now_us();
  if (hvd_g.rank == 0) {
    if (hvd_coordinator_should_emit(bg->coord, now)) {
      hvd_buf_t msg = {0};
      int n = hvd_coordinator_emit(bg->coord, &msg);
      int ok = n >= 0;
      for (int r = 1; r < hvd_g.size && ok; r++)
        ok = hvd_control_send(&bg->ctl, r, msg.p, msg.len, err, sizeof(err));
      if (!ok) {
        hvd_buf_free(&msg);
        if (n < 0) snprintf(err, sizeof(err), "rank 0: out of memory for responses");
        global_shutdown(bg, HVD_ERR_SHUTDOWN, err);
        return 1;
      }
      if (bg->rounds) {   /* runs when a round says it is due, on every rank alike */
        if (!hvd_cache_rounds_queue_list(bg->rounds, msg.p, msg.len,
                                         hvd_coordinator_emitted_times(bg->coord), n)) {
          hvd_buf_free(&msg);
          global_shutdown(bg, HVD_ERR_SHUTDOWN, "rank 0: out of memory for responses");
          return 1;
        }
      } else {
        end = run_responses(bg, msg.p, msg.len, hvd_coordinator_emitted_times(bg->coord),
                            0);
      }
      hvd_buf_free(&msg);
      if (end) return 1;
      progressed = 1;
    }
    if (now - bg->last_stall_check_us >= STALL_CHECK_EVERY_US) {
      bg->last_stall_check_us = now;
      char text[HVD_ERROR_MAX];
      if (hvd_coordinator_check_stalls(bg->coord, now, text, sizeof(text))) {
        global_shutdown(bg, HVD_ERR_TIMEOUT, text);
        return 1;
      }
    }
  } else if ((bg->stop_requested || bg->failed) && now > bg->stop_deadline_us) {
    local_stop(HVD_ERR_SHUTDOWN, "the hvd runtime was shut down: the coordinator (rank "
               "0) did not answer the shutdown request");
    return 1;
  }
  if (bg->rounds && !hvd_cache_rounds_over(bg->rounds) &&
      hvd_cache_rounds_turn(bg->rounds, util_now_us() - bg->last_progress_us < SPIN_US,
                            &progressed))
    return 1;
  /* Parameter servers (hvd/ps_engine.c): their own messages, on their own communicator. */
  int ps = hvd_ps_turn(err, sizeof(err));
  if (ps < 0) return fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  progressed |= ps;
  if (bg->ctl.nsends > 0) hvd_control_progress(&bg->ctl, 0, 0);
  if (progressed) bg->last_progress_us = util_now_us();
  *progressed_out = progressed;
  return 0;
}

/* ---- the response cache's protocol (hvd/cache_rounds.c) and the loop ---- */

static int hook_to_coordinator(void *arg, const void *wire, size_t len) {
  return coord_queue(arg, wire, len);
}

static int hook_flush(void *arg, char *err, size_t len) { return coord_flush(arg, err, len); }

static int hook_run(void *arg, const char *list, size_t len, const double *times,
                    int from_cache) {
  return run_responses(arg, list, len, times, from_cache);
}

static int hook_fail(void *arg, hvd_status_t s, const char *text) {
  return fatal_error(arg, s, text, 0);
}

static int hook_self_joined(void *arg) {
  (void)arg;
  return hvd_joined_sets_any();
}

/* Cache on (hvd_g.round_words > 0): the protocol, over the MPI peers. 0: out of memory. */
static int rounds_create(bg_t *bg) {
  if (hvd_g.round_words == 0) return 1;
  hvd_round_peers_mpi(&bg->peers);
  hvd_cache_rounds_config_t cfg = {hvd_g.rank, hvd_g.size, hvd_g.cfg.cache_capacity,
                                   hvd_g.cfg.fusion_threshold};
  hvd_cache_rounds_hooks_t hooks = {bg, hook_to_coordinator, hook_flush, hook_run, hook_fail,
                                    hook_self_joined};
  bg->rounds = hvd_cache_rounds_create(&cfg, &bg->peers, &hooks);
  return bg->rounds != NULL;
}

/* ---- the engine: who runs the turns ----

   The turns run under engine_mu, on the background thread or on a user thread that
   waits in hvd_wait (hvd_background_help). On one core the background thread and a
   blocking caller take turns: each hand-over (submission to the background thread,
   completion back to the caller) is a context switch and a wake-up, several
   microseconds each, longer than an 8-byte allreduce itself. So a caller that waits
   runs the turns itself while they make progress, and the background thread stays
   asleep meanwhile (it still runs every turn while nobody waits: asynchronous work,
   liveness, shutdown). One thread at a time calls MPI (MPI_THREAD_SERIALIZED holds).
   Only a process whose buffers are all host memory (hvd_device_host_only) is helped:
   the background thread is the one that chose the GPU, and it alone asks CUDA. */

/* The caller of a blocking call is about to wait in hvd_wait (api.c sets it around
   the submission): no wake-up of the background thread, the caller will run the turn. */
_Thread_local int hvd_caller_will_help;

/* Wakes the background thread when a helper leaves work behind. */
static void wake_if_work_left(void) {
  pthread_mutex_lock(&hvd_g.mu);
  if (hvd_g.bg_waiting && (hvd_g.ninflight > 0 || atomic_load(&hvd_g.queued) > 0 ||
                           hvd_g.shutdown_requested))
    pthread_cond_signal(&hvd_g.work_cv);
  pthread_mutex_unlock(&hvd_g.mu);
}

void hvd_background_help(struct hvd_request *req) {
  atomic_fetch_add(&engine_helpers, 1);
  double last_progress = util_now_us();
  unsigned idle_turns = 0;
  while (!atomic_load(&req->done)) {
    int progressed = 0;
    /* Asked again each turn: CUDA may come into the process meanwhile. */
    if (!hvd_device_host_only()) break;
    if (pthread_mutex_trylock(&engine_mu) == 0) {
      /* Asked again under the lock: the background thread's turns load the CUDA backend
         (under this lock), and a turn on this thread must not take a device buffer for
         host memory (take_submissions). */
      if (engine_state != ENGINE_RUNNING || !hvd_device_host_only()) {
        pthread_mutex_unlock(&engine_mu);
        break;
      }
      helping = 1;
      int end = turn(&engine_bg, &progressed);
      helping = 0;
      if (end) engine_state = ENGINE_ENDED;
      pthread_mutex_unlock(&engine_mu);
      if (end) break;
    }
    double now = util_now_us();
    if (progressed) {
      last_progress = now;
      idle_turns = 0;
    } else if (now - last_progress > HELP_SPIN_US) {
      break;   /* a peer is late: sleep until the background thread completes req */
    } else if (++idle_turns % 64 == 0) {
      sched_yield();   /* as MPI_Wait does now and then on an oversubscribed node */
    }
  }
  atomic_fetch_sub(&engine_helpers, 1);
  wake_if_work_left();
}

/* The background thread while a helper runs the turns: sleeps HELPERS_WAIT_US at most,
   less when a helper leaves work behind or a user thread submits. */
static void helpers_wait(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long ns = (long long)ts.tv_nsec + (long long)(HELPERS_WAIT_US * 1000.0);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  pthread_mutex_lock(&hvd_g.mu);
  if (atomic_load(&engine_helpers) > 0) {
    hvd_g.bg_waiting = 1;
    pthread_cond_timedwait(&hvd_g.work_cv, &hvd_g.mu, &ts);
    hvd_g.bg_waiting = 0;
  }
  pthread_mutex_unlock(&hvd_g.mu);
}

static void loop(bg_t *bg) {
  double sleep_us = SLEEP_MIN_US;
  for (;;) {
    if (atomic_load(&engine_helpers) > 0) {
      /* A waiting caller runs the turns (submissions included); it wakes this thread
         when it leaves work behind. A helper kept off the core between two turns holds
         nothing, though: then this thread takes a turn, so heartbeats and rank 0's
         coordination go on. */
      helpers_wait();
      if (pthread_mutex_trylock(&engine_mu) != 0) continue;
    } else {
      pthread_mutex_lock(&engine_mu);
    }
    int progressed = 0;
    double wait_us = 0;
    int end = engine_state != ENGINE_RUNNING;   /* a helper's turn ended the loop */
    if (!end) end = turn(bg, &progressed);
    if (end) {
      engine_state = ENGINE_ENDED;
    } else if (progressed) {
      sleep_us = SLEEP_MIN_US;
    } else {
      wait_us = idle_plan(bg, &sleep_us);
    }
    pthread_mutex_unlock(&engine_mu);
    if (end) return;
    if (!progressed) idle_wait(wait_us);
  }
}

/* Whether this machine has an NVIDIA GPU (a /dev/nvidiaN device node), whether or not
   CUDA is in the process yet: a program may initialise CUDA after hvd_init (and the
   shared library loads its CUDA backend only then), and a thread lowered now could not
   be raised again without privilege. */
int hvd_machine_has_nvidia_gpu(void) {
  DIR *d = opendir("/dev");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL)
    found = strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' &&
            e->d_name[6] <= '9';
  closedir(d);
  return found;
}

/* How far this thread yields to the rank's other threads (HVD_BACKGROUND_NICE: that many
   nice steps below the thread that called hvd_init, at most nice 19; on Linux a nice
   value belongs to one thread). A rank on a machine without a GPU computes on the CPU,
   and its caller's thread is the step's critical path. When the ranks fill the
   machine's cores, this thread at the same priority takes that thread's core at once at
   every wake-up (cnn_bench lenet np=2 on 2 cores: 700-980 preemptions a second of each
   rank's compute thread) and runs its ring steps on it in the middle of backward. At
   nice 19 its wake-ups rarely preempt the computation and it gets a small share of a
   busy core: it runs beside the computation where a core is free, else mostly once the
   caller waits in hvd_wait and so lends it the core. Auto (-1) is 19 on a machine
   without a GPU and 0 (the caller's priority) on a rank that drives a GPU or may come
   to (a GPU machine): its caller mostly queues kernels, and the exchange the GPU waits
   for must not queue behind other threads (data loaders). Raising a nice value needs no
   privilege; if the system refuses, the thread keeps its priority and says so. Threads
   this one starts later (NCCL's) inherit its nice value and name. */
static void background_priority(void) {
  /* Its name in top -H, perf and /proc (at most 15 characters). */
  int e = pthread_setname_np(pthread_self(), "hvd_background");
  if (e != 0) hvd_log(HVD_LOG_DEBUG, "naming the background thread failed: %s", strerror(e));
  int steps = hvd_g.cfg.background_nice;
  if (steps < 0) steps = hvd_device_host_only() && !hvd_machine_has_nvidia_gpu() ? 19 : 0;
  if (steps == 0) return;
  const id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, tid);   /* -1 is a valid nice value */
  if (errno != 0) {
    hvd_log(HVD_LOG_WARNING, "reading the background thread's priority failed: %s; it "
            "keeps the rank's priority", strerror(errno));
    return;
  }
  const int target = base + steps < 19 ? base + steps : 19;
  if (target == base) return;
  if (setpriority(PRIO_PROCESS, tid, target) != 0)
    hvd_log(HVD_LOG_WARNING, "could not set the background thread's nice value from %d to "
            "%d (HVD_BACKGROUND_NICE): %s; it keeps the rank's priority", base, target,
            strerror(errno));
  else
    hvd_log(HVD_LOG_DEBUG, "background thread at nice %d, the rank's threads at %d "
            "(HVD_BACKGROUND_NICE)", target, base);
}

void *hvd_background_main(void *arg) {
  (void)arg;
  /* No helper touches engine_bg until engine_state says RUNNING (set under engine_mu,
     after the set-up below), nor after the loop set it ENDED. */
  bg_t bg;
  memset(&bg, 0, sizeof(bg));
  bg.last_progress_us = bg.last_stall_check_us = util_now_us();
  hvd_device_thread_start();   /* before this thread makes any other CUDA call */
  background_priority();       /* after it: whether this rank drives a GPU */
  if (hvd_g.rank == 0 && (bg.coord = hvd_coordinator_create(hvd_g.size)) == NULL) {
    local_stop(HVD_ERR_NO_MEMORY, "rank 0: out of memory creating the coordinator");
  } else if (hvd_liveness_init() != HVD_OK) {
    local_stop(HVD_ERR_NO_MEMORY, "out of memory for the liveness state");
  } else {
    pthread_mutex_lock(&engine_mu);
    engine_bg = bg;
    /* The protocol's hooks point at engine_bg, where the loop's state lives. */
    int ok = rounds_create(&engine_bg);
    if (ok) engine_state = ENGINE_RUNNING;
    pthread_mutex_unlock(&engine_mu);
    if (ok) loop(&engine_bg);
    else local_stop(HVD_ERR_NO_MEMORY, "out of memory for the response cache");
    pthread_mutex_lock(&engine_mu);
    bg = engine_bg;
    pthread_mutex_unlock(&engine_mu);
  }
  /* Whatever is still pending (only possible on the error paths) fails. */
  local_stop(HVD_ERR_SHUTDOWN, "the hvd runtime was shut down");
  /* Device state goes here, on the thread that chose the device, while the host
     transports are still up. */
  hvd_device_shutdown();
  hvd_coordinator_free(bg.coord);
  hvd_liveness_free();
  /* After a failure a send to a lost peer never completes: no waiting for it. */
  hvd_control_progress(&bg.ctl, 1, util_now_us() + (atomic_load(&hvd_g.failed) ? 0 : 1e6));
  hvd_control_free(&bg.ctl);
  free(bg.resp);
  hvd_cache_rounds_free(bg.rounds);
  hvd_buf_free(&bg.to_coord);
  return NULL;
}
