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

   Response cache (HVD_CACHE_CAPACITY > 0; 0 keeps the loop above exactly): a request
   whose name is cached with the same signature is not sent to rank 0 but becomes a
   pending hit. The ranks agree on hits in "rounds", each an AND of every rank's
   uint64 words (hvd/rounds.c: point-to-point at small sizes, else MPI_Iallreduce) on
   hvd_g.round_comm: rank 0's count of response lists emitted, flags
   (a rank has joined; stop), one hit bit per cache slot (agreed when every rank set
   it) and one inverted invalid bit per slot (set by a rank whose request contradicts
   the cached signature). One round at a time; the next starts when the last one was
   processed and some rank has news for it (rounds_turn). Response lists no longer
   run when they arrive (or, on rank 0, when they are emitted): they run when a round
   says they are due, after that round's hits, so that every rank changes its cache in
   the same order and the slot numbers agree everywhere. Rounds are only tested, never
   waited for, so a stopped peer cannot keep this thread from its liveness checks. At a
   clean shutdown every rank's rounds carry the stop flag until a round that has it
   completes: the last one everywhere. After a failure a round may be left in flight;
   hvd_shutdown drains it when every rank arrives (hvd/init.c).

   Shutdown (hvd_shutdown on any rank, the coordinator's stall timeout, an error every
   rank saw at the same response): the coordinator sends SHUTDOWN to every worker,
   fails everything pending, and waits (DRAIN_LIMIT_US at most) for every worker's
   SHUTDOWN_ACK, so no control message is left unreceived before the communicators are
   freed. A worker that wants to stop asks the coordinator (SHUTDOWN_REQ) and keeps
   executing response lists until SHUTDOWN arrives, so no peer is left waiting inside a
   collective for it.

   Failure (a lost peer, an error only this rank saw, the watchdog's stall shutdown):
   no waiting for anybody. A lost peer leads to a census that names the lost ranks
   (hvd/liveness.c); the rank tells the others with a STOP notice, which also ends the
   collective they may be blocked in, and stops. hvd_shutdown then finalizes MPI only
   if every rank reaches it (hvd/init.c). */
#include "hvd/hvd_internal.h"
#include "hvd/control.h"
#include "hvd/response_cache.h"

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
#define DRAIN_LIMIT_US 3e6           /* wait at most this for peers at shutdown       */
#define STOP_WAIT_LIMIT_US 30e6      /* a worker waits this for the coordinator       */
#define STALL_CHECK_EVERY_US 100e3
#define LIVENESS_EVERY_US 10e3       /* failure notices and heartbeats, this often    */
#define ROUND_IDLE_US 1000.0         /* cache on, idle: a round at least this often   */
#define ROUND_FLAG_JOINED 1u         /* some rank's hvd_join is not answered yet       */
#define ROUND_FLAG_STOP 2u           /* the last round: the runtime is shutting down   */

/* A submission the cache can answer, waiting until every rank asks for it. */
typedef struct {
  char key[HVD_KEY_MAX];
  size_t key_len;
  hvd_cache_sig_t sig;
  hvd_buf_t wire;                    /* its encoded request, for the coordinator      */
  int slot;                          /* its bit in the round in flight, or -1         */
  int announced;                     /* it was in a round already (on-demand rounds:
                                        only a hit not yet announced starts one)      */
} pending_hit_t;

/* A cached entry that a submission contradicted: every rank evicts it. */
typedef struct {
  char key[HVD_KEY_MAX];
  size_t key_len;
  hvd_cache_sig_t sig;               /* the cached signature that was contradicted    */
  int in_round;                      /* its bit is in the round in flight             */
} pending_invalid_t;

/* A coordinator list, received (or, on rank 0, emitted) and not yet due. */
typedef struct {
  char *data;
  size_t len;
  double *times;                     /* rank 0: for the timeline                      */
} queued_list_t;

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
  /* Response cache (NULL: off, no rounds, every name goes to the coordinator). */
  hvd_response_cache_t *cache;
  int nwords;                        /* words of each bit vector                      */
  pending_hit_t *hits;
  int nhits, cap_hits;
  pending_invalid_t *invals;
  int ninvals, cap_invals;
  queued_list_t *lists;
  int nlists, cap_lists;
  uint64_t lists_seen;               /* rank 0: emitted; workers: received            */
  uint64_t lists_done;               /* executed                                      */
  int round_result;                  /* a completed round waits to be processed       */
  int rounds_over;                   /* a round with the stop flag completed          */
  int stopping;                      /* this rank's rounds carry the stop flag         */
  int joined_seen;                   /* the last round said some rank has joined      */
  double last_round_us;
  uint64_t sent_lists;               /* rank 0: lists_seen as the last round said it  */
  unsigned sent_flags;               /* the flags of this rank's last round           */
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

static int cacheable_kind(int kind) {
  /* Not allgather/alltoall (per-rank counts), barrier or join. */
  return kind == HVD_KIND_ALLREDUCE || kind == HVD_KIND_BROADCAST ||
         kind == HVD_KIND_REDUCESCATTER;
}

static hvd_cache_sig_t sig_of_request(const struct hvd_request *r) {
  hvd_cache_sig_t g = {r->kind, r->dtype, r->op, r->root, r->device >= 0,
                       (int64_t)r->count};
  return g;
}

static hvd_cache_sig_t sig_of_response(const hvd_response_t *r) {
  hvd_cache_sig_t g = {r->kind, r->dtype, r->op, r->root, r->device >= 0, r->count};
  return g;
}

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

static int add_pending_invalid(bg_t *bg, const char *key, size_t key_len,
                               const hvd_cache_sig_t *sig) {
  if (bg->ninvals == bg->cap_invals) {
    int nc = bg->cap_invals ? bg->cap_invals * 2 : 8;
    pending_invalid_t *p = realloc(bg->invals, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    bg->invals = p;
    bg->cap_invals = nc;
  }
  pending_invalid_t *v = &bg->invals[bg->ninvals++];
  memcpy(v->key, key, key_len);
  v->key[key_len] = '\0';
  v->key_len = key_len;
  v->sig = *sig;
  v->in_round = 0;
  return 1;
}

static int add_pending_hit(bg_t *bg, const struct hvd_request *r, size_t key_len,
                           const hvd_cache_sig_t *sig) {
  if (bg->nhits == bg->cap_hits) {
    int nc = bg->cap_hits ? bg->cap_hits * 2 : 16;
    pending_hit_t *p = realloc(bg->hits, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    bg->hits = p;
    bg->cap_hits = nc;
  }
  pending_hit_t *h = &bg->hits[bg->nhits];
  memset(h, 0, sizeof(*h));
  memcpy(h->key, r->key, key_len + 1);
  h->key_len = key_len;
  h->sig = *sig;
  h->slot = -1;
  if (!hvd_encode_request(&h->wire, r)) {
    hvd_buf_free(&h->wire);
    return 0;
  }
  bg->nhits++;
  return 1;
}

/* Hands pending hit i to the coordinator (it missed, or a rank has joined). */
static int hit_to_coordinator(bg_t *bg, int i) {
  int ok = coord_queue(bg, bg->hits[i].wire.p, bg->hits[i].wire.len);
  hvd_buf_free(&bg->hits[i].wire);
  bg->hits[i] = bg->hits[--bg->nhits];
  return ok;
}

/* Starts the next round. The bits are computed now, from the cache as it is after the
   last round was processed: the same state on every rank, so a slot means the same
   name everywhere. Words: [0] rank 0's count of lists emitted (others: all ones, so
   AND gives rank 0's); [1] inverted flags (AND of the inverses: the OR); then the hit
   bits (AND: every rank asked) and the inverted invalid bits (OR: any rank). */
static int start_round(bg_t *bg, char *err, size_t errlen) {
  uint64_t *w = hvd_g.round_send;
  int W = bg->nwords;
  unsigned flags = (hvd_g.joined ? ROUND_FLAG_JOINED : 0) |
                   (bg->stopping ? ROUND_FLAG_STOP : 0);
  w[0] = hvd_g.rank == 0 ? bg->lists_seen : ~(uint64_t)0;
  w[1] = ~(uint64_t)flags;
  uint64_t *hit = w + 2, *inval = w + 2 + W;
  memset(hit, 0, (size_t)W * sizeof(uint64_t));
  memset(inval, 0xff, (size_t)W * sizeof(uint64_t));
  if (!bg->stopping && !bg->failed) {
    for (int i = 0; i < bg->nhits;) {
      pending_hit_t *h = &bg->hits[i];
      hvd_cache_sig_t have;
      int s = hvd_cache_lookup(bg->cache, h->key, h->key_len, &have);
      if (s >= 0 && hvd_cache_sig_equal(&have, &h->sig)) {
        h->slot = s;
        h->announced = 1;
        hit[s / 64] |= (uint64_t)1 << (s % 64);
        i++;
        continue;
      }
      /* Evicted or replaced by what ran since it was looked up: a miss now. */
      if (s >= 0 && !add_pending_invalid(bg, h->key, h->key_len, &have)) goto oom;
      if (!hit_to_coordinator(bg, i)) goto oom;
    }
    for (int i = 0; i < bg->ninvals;) {
      pending_invalid_t *v = &bg->invals[i];
      hvd_cache_sig_t have;
      int s = hvd_cache_lookup(bg->cache, v->key, v->key_len, &have);
      if (s >= 0 && hvd_cache_sig_equal(&have, &v->sig)) {
        v->in_round = 1;
        inval[s / 64] &= ~((uint64_t)1 << (s % 64));
        i++;
      } else {
        bg->invals[i] = bg->invals[--bg->ninvals];   /* already gone */
      }
    }
    if (!coord_flush(bg, err, errlen)) return 0;
  }
  if (!hvd_round_start(err, errlen)) return 0;
  bg->last_round_us = util_now_us();
  bg->sent_lists = bg->lists_seen;
  bg->sent_flags = flags;
  return 1;
oom:
  snprintf(err, errlen, "rank %d: out of memory for the response cache", hvd_g.rank);
  return 0;
}

/* Whether the round in flight completed (then its result waits in round_recv). Never
   blocks: a peer that stopped must not keep this thread from its liveness checks. */
static int test_round(bg_t *bg, char *err, size_t errlen) {
  if (!hvd_g.round_inflight) return 1;
  int done = 0;
  if (!hvd_round_test(&done, err, errlen)) return 0;
  if (done) bg->round_result = 1;
  return 1;
}

/* Clean shutdown: every rank must stop starting rounds after the same one, or a
   nonblocking allreduce would be left on a communicator that is then freed. This
   rank's rounds carry the stop flag from now on; a round whose result has it is the
   last one everywhere. Returns 1 when over (or the cache is off), 0 to call again. */
static int rounds_stop_step(bg_t *bg) {
  char err[HVD_ERROR_MAX];
  if (!bg->cache || bg->rounds_over) return 1;
  bg->stopping = 1;
  if (!test_round(bg, err, sizeof(err))) {
    hvd_log(HVD_LOG_ERROR, "%s", err);
    atomic_store(&hvd_g.failed, 1);
    return 1;
  }
  if (hvd_g.round_inflight) return 0;
  if (bg->round_result) {
    bg->round_result = 0;
    if (~hvd_g.round_recv[1] & ROUND_FLAG_STOP) {
      bg->rounds_over = 1;
      return 1;
    }
  }
  if (!start_round(bg, err, sizeof(err))) {
    hvd_log(HVD_LOG_ERROR, "%s", err);
    atomic_store(&hvd_g.failed, 1);
    return 1;
  }
  return 0;
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

/* Rank 0: stops every rank. s is what pending requests report. */
static void global_shutdown(bg_t *bg, hvd_status_t s, const char *text) {
  char full[HVD_ERROR_MAX], err[HVD_ERROR_MAX];
  /* A stall: the rank that stalls may never reach MPI_Finalize. */
  if (s != HVD_ERR_SHUTDOWN) atomic_store(&hvd_g.failed, 1);
  snprintf(full, sizeof(full), "the hvd runtime was shut down: %s", text);
  /* SHUTDOWN: the header, the number of rounds this rank has run (cache on: a worker
     runs the round it is in first if rank 0 ran it; see worker_message), the text. */
  uint64_t rounds_run = hvd_g.rounds_started -
                        (hvd_g.round_inflight || bg->round_result ? 1 : 0);
  hvd_buf_t b = {0};
  hvd_msg_header_t h = {HVD_MSG_SHUTDOWN, 0, 0, s};
  int ok = hvd_buf_put(&b, &h, sizeof(h)) && hvd_buf_put(&b, &rounds_run, sizeof(rounds_run)) &&
           hvd_buf_put(&b, full, strlen(full));
  if (!ok) hvd_log(HVD_LOG_ERROR, "rank 0: out of memory for the shutdown notice");
  /* A send that fails does not keep the notice from the other workers. */
  for (int r = 1; r < hvd_g.size && ok; r++)
    if (!hvd_control_send(&bg->ctl, r, b.p, b.len, err, sizeof(err))) hvd_log(HVD_LOG_ERROR, "%s", err);
  hvd_buf_free(&b);
  local_stop(s, full);
  double deadline = util_now_us() + DRAIN_LIMIT_US;
  int acks = 0, src;
  while (acks < hvd_g.size - 1 && util_now_us() < deadline) {
    int got = hvd_control_poll(&bg->ctl, &src, err, sizeof(err));
    if (got < 0) break;
    if (got == 1) {
      hvd_msg_header_t h;
      memcpy(&h, bg->ctl.in.p, sizeof(h));
      if (h.type == HVD_MSG_SHUTDOWN_ACK) acks++;
      continue;   /* anything else is moot now */
    }
    rounds_stop_step(bg);
    hvd_control_progress(&bg->ctl, 0, 0);
    sched_yield();
  }
  rounds_finish(bg, deadline);
  if (acks < hvd_g.size - 1) {
    hvd_log(HVD_LOG_WARNING, "shutdown: only %d of %d ranks acknowledged", acks,
            hvd_g.size - 1);
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
  if (bg->cache && !from_cache) {
    hvd_buf_t w = {0};
    for (int i = 0; i < h.n; i++) {
      const hvd_response_t *r = &bg->resp[i];
      if (r->status != HVD_OK || !cacheable_kind(r->kind)) continue;
      hvd_cache_sig_t g = sig_of_response(r);
      w.len = 0;
      if (!hvd_encode_response(&w, r, 0) ||
          !hvd_cache_put(bg->cache, r->key, r->key_len, &g, w.p, w.len)) {
        hvd_buf_free(&w);
        return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for the response cache",
                           0);
      }
    }
    hvd_buf_free(&w);
  }
  return 0;
}

/* Queues a coordinator list until a round says it is due (cache on). 0: out of memory. */
static int queue_list(bg_t *bg, const char *data, size_t len, const double *times, int n) {
  if (bg->nlists == bg->cap_lists) {
    int nc = bg->cap_lists ? bg->cap_lists * 2 : 8;
    queued_list_t *p = realloc(bg->lists, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    bg->lists = p;
    bg->cap_lists = nc;
  }
  queued_list_t *q = &bg->lists[bg->nlists];
  q->data = malloc(len);
  q->times = times ? malloc((size_t)(2 * n > 0 ? 2 * n : 1) * sizeof(double)) : NULL;
  if (!q->data || (times && !q->times)) {
    free(q->data);
    free(q->times);
    return 0;
  }
  memcpy(q->data, data, len);
  if (times) memcpy(q->times, times, (size_t)(2 * n) * sizeof(double));
  q->len = len;
  bg->nlists++;
  bg->lists_seen++;
  return 1;
}

/* Runs the agreed hits (slots[0..n), ascending) as one list of the cached responses,
   fused by the coordinator's rules. Returns 1 when the loop must end. */
static int run_hits(bg_t *bg, const int *slots, int n) {
  hvd_response_t *one = malloc((size_t)n * sizeof(*one));
  hvd_plan_item_t *items = malloc((size_t)n * sizeof(*items));
  int *order = malloc((size_t)n * sizeof(*order));
  unsigned char *fuse = malloc(2 * (size_t)n);
  hvd_buf_t msg = {0};
  hvd_msg_header_t h = {HVD_MSG_RESPONSES, n, 0, 0};
  int ok = one && items && order && fuse && hvd_buf_put(&msg, &h, sizeof(h));
  for (int i = 0; ok && i < n; i++) {
    size_t len = 0;
    const char *wire = hvd_cache_wire(bg->cache, slots[i], &len);
    ok = wire && hvd_decode_responses(wire, len, 1, hvd_g.size, &one[i]);
    if (ok)
      items[i] = (hvd_plan_item_t){one[i].kind, one[i].dtype, one[i].op,
                                   one[i].device >= 0, one[i].count, one[i].status};
  }
  if (ok) hvd_plan(items, n, hvd_g.cfg.fusion_threshold, order, fuse);
  for (int k = 0; ok && k < n; k++) ok = hvd_encode_response(&msg, &one[order[k]], fuse[k]);
  /* Touched in slot order, the same on every rank, before anything can fail. */
  for (int i = 0; ok && i < n; i++) hvd_cache_touch(bg->cache, slots[i]);
  free(one);
  free(items);
  free(order);
  free(fuse);
  if (!ok) {
    hvd_buf_free(&msg);
    return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory running cached responses", 0);
  }
  /* No negotiation happened: the timeline shows it as taking no time. */
  double now = util_now_us(), *times = malloc((size_t)(2 * n) * sizeof(double));
  for (int i = 0; times && i < 2 * n; i++) times[i] = now;
  int end = run_responses(bg, msg.p, msg.len, times, 1);
  free(times);
  hvd_buf_free(&msg);
  return end;
}

/* A completed round, once the lists it makes due are here. In order: evict what any
   rank invalidated; run the hits every rank asked for (their slots are the ones the
   round was started with: nothing ran since); if a rank has joined, hand the other
   hits to the coordinator (the joined rank will not ask for them); run the
   coordinator's lists that rank 0 had emitted when it started the round. Every rank
   does the same, so the caches stay identical. *progressed: something ran or moved.
   Returns 1 when the loop must end. */
static int process_round(bg_t *bg, int *progressed) {
  const uint64_t *w = hvd_g.round_recv;
  unsigned flags = (unsigned)~w[1];
  if (flags & ROUND_FLAG_STOP) {   /* the coordinator is shutting down: the last round */
    bg->rounds_over = 1;
    bg->round_result = 0;
    return 0;
  }
  if (bg->failed) {   /* waiting for SHUTDOWN: nothing runs any more */
    bg->round_result = 0;
    return 0;
  }
  uint64_t due = w[0];
  /* Rank 0 sent those lists before it started this round: they are on their way. */
  if (hvd_g.rank != 0 && bg->lists_seen < due) return 0;
  bg->round_result = 0;
  int W = bg->nwords;
  const uint64_t *hit = w + 2, *inval = w + 2 + W;
  int *slots = NULL, nslots = 0;
  for (int k = 0; k < W; k++) {
    uint64_t bad = ~inval[k], good = hit[k] & inval[k];
    for (int b = 0; bad && b < 64; b++)
      if (bad >> b & 1) hvd_cache_evict(bg->cache, k * 64 + b);
    for (int b = 0; good && b < 64; b++)
      if (good >> b & 1) {
        /* Every agreed bit is one of this rank's pending hits. */
        if (nslots >= bg->nhits) {
          free(slots);
          return fatal_error(bg, HVD_ERR_BACKEND, "the response cache round agreed on a "
                             "slot this rank did not ask for (internal error)", 0);
        }
        if (!slots && !(slots = malloc((size_t)bg->nhits * sizeof(*slots)))) {
          return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for cache hits", 0);
        }
        slots[nslots++] = k * 64 + b;
      }
  }
  for (int i = 0; i < bg->ninvals;) {
    if (bg->invals[i].in_round) bg->invals[i] = bg->invals[--bg->ninvals];
    else i++;
  }
  if (nslots > 0) {
    /* Those hits leave the pending list: the requests run now. */
    for (int i = 0; i < bg->nhits;) {
      int s = bg->hits[i].slot, agreed = 0;
      if (s >= 0 && (hit[s / 64] & inval[s / 64]) >> (s % 64) & 1) agreed = 1;
      if (agreed) {
        hvd_buf_free(&bg->hits[i].wire);
        bg->hits[i] = bg->hits[--bg->nhits];
      } else {
        i++;
      }
    }
    *progressed = 1;
    int end = run_hits(bg, slots, nslots);
    free(slots);
    if (end) return 1;
  }
  for (int i = 0; i < bg->nhits; i++) bg->hits[i].slot = -1;
  bg->joined_seen = (flags & ROUND_FLAG_JOINED) != 0;
  if (bg->joined_seen && bg->nhits > 0) {
    char err[HVD_ERROR_MAX];
    int ok = 1;
    while (bg->nhits > 0 && ok) ok = hit_to_coordinator(bg, bg->nhits - 1);
    if (!ok) snprintf(err, sizeof(err), "rank %d: out of memory for requests", hvd_g.rank);
    if (!ok || !coord_flush(bg, err, sizeof(err)))
      return fatal_error(bg, HVD_ERR_NO_MEMORY, err, 0);
    *progressed = 1;
  }
  while (bg->lists_done < due && bg->nlists > 0) {
    queued_list_t q = bg->lists[0];
    memmove(&bg->lists[0], &bg->lists[1], (size_t)(bg->nlists - 1) * sizeof(q));
    bg->nlists--;
    bg->lists_done++;
    int end = bg->failed ? 0 : run_responses(bg, q.data, q.len, q.times, 0);
    free(q.data);
    free(q.times);
    *progressed = 1;
    if (end) return 1;
  }
  return 0;
}

/* Waits (DRAIN_LIMIT_US at most) for the round in flight and runs what it made due.
   Returns 1 when the loop must end (a failure while running it). */
static int finish_round(bg_t *bg) {
  char err[HVD_ERROR_MAX];
  double deadline = util_now_us() + DRAIN_LIMIT_US;
  while (hvd_g.round_inflight && util_now_us() < deadline) {
    if (!test_round(bg, err, sizeof(err))) return 0;
    if (hvd_g.round_inflight) sched_yield();
  }
  int progressed = 0;
  return bg->round_result ? process_round(bg, &progressed) : 0;
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
    if (r->kind == HVD_KIND_JOIN) hvd_g.joined = 1;
    /* Cache on: a name cached with the same signature waits for the others' bits in
       the rounds; one cached with another signature invalidates the entry everywhere
       and goes to the coordinator, which reports the mismatch. While a rank has
       joined, everything goes to the coordinator (it stands in for the joined rank). */
    if (bg->cache && cacheable_kind(r->kind) && !bg->joined_seen && !hvd_g.joined) {
      size_t kl = strlen(r->key);
      hvd_cache_sig_t want = sig_of_request(r), have;
      int slot = hvd_cache_lookup(bg->cache, r->key, kl, &have);
      if (slot >= 0 && hvd_cache_sig_equal(&want, &have)) {
        ok = add_pending_hit(bg, r, kl, &want);
        continue;
      }
      if (slot >= 0 && !(ok = add_pending_invalid(bg, r->key, kl, &have))) break;
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
      if (bg->cache && h.status == HVD_OK && finish_round(bg)) return 1;
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
    if (bg->cache) {   /* runs when a round says it is due */
      if (!queue_list(bg, bg->ctl.in.p, bg->ctl.in.len, NULL, h.n))
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
    if (bg->cache && h.status == HVD_ERR_SHUTDOWN && !bg->failed &&
        (hvd_g.round_inflight || bg->round_result) && hvd_g.rounds_started <= rounds_run &&
        finish_round(bg))
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
  busy = busy || bg->stop_requested || bg->failed || bg->ctl.nsends > 0 || bg->nlists > 0 ||
         bg->round_result;
  if (busy) {
    double w = *sleep_us;
    *sleep_us = w * 2 < SLEEP_MAX_US ? w * 2 : SLEEP_MAX_US;
    return w;
  }
  /* Cache on: the peers' rounds wait for this rank's next one. */
  return bg->cache && !bg->rounds_over ? ROUND_IDLE_US : IDLE_SLEEP_US;
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

/* Whether this rank has something to say that no round of its has said yet: a hit or
   an invalidation not yet announced, rank 0's new lists, changed flags. */
static int round_news(const bg_t *bg) {
  unsigned flags = (hvd_g.joined ? ROUND_FLAG_JOINED : 0) |
                   (bg->stopping ? ROUND_FLAG_STOP : 0);
  if (flags != bg->sent_flags) return 1;
  if (hvd_g.rank == 0 && bg->lists_seen != bg->sent_lists) return 1;
  /* Stopping or failed: start_round sends no hits or invalidations, so they are no
     news (else every turn would start a round until the STOP round). */
  if (bg->stopping || bg->failed) return 0;
  if (bg->ninvals > 0) return 1;
  for (int i = 0; i < bg->nhits; i++)
    if (!bg->hits[i].announced) return 1;
  return 0;
}

/* The rounds' part of a loop turn (cache on): test the round in flight, process its
   result, start the next. Point-to-point rounds start on demand: when this rank has
   news (round_news), or a peer started one (it waits for this rank's words), or, as a
   safety net while anything is pending, ROUND_IDLE_US after the last. A hit then costs
   one exchange with the peers, not the rest of a round already in flight plus its own,
   and idle rounds do not take the core from the threads that submit. Collective rounds
   (above 16 ranks) cannot see a peer's start: they follow each other at once while
   anything waits or right after progress, else at most every ROUND_IDLE_US, since the
   peers' rounds cannot complete without this rank's. Returns 0 when the loop must end. */
static int rounds_turn(bg_t *bg, int *progressed) {
  char err[HVD_ERROR_MAX];
  if (!test_round(bg, err, sizeof(err))) return !fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  if (bg->round_result && process_round(bg, progressed)) return 0;
  if (hvd_g.round_inflight || bg->round_result || bg->rounds_over) return 1;
  double now = util_now_us();
  int pending = bg->nhits > 0 || bg->ninvals > 0 || bg->nlists > 0;
  /* News first: then the peers need not be asked (one MPI call less on the way of a
     hit). */
  int news = round_news(bg), wanted;
  int peer = news ? 0 : hvd_round_peer_started(err, sizeof(err));
  if (peer == -2) return !fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  if (peer >= 0) {
    wanted = news || peer;
    /* A round that answers a peer or says something new is progress: keep spinning
       for its answer rather than sleep. */
    if (wanted) *progressed = 1;
    else wanted = pending && now - bg->last_round_us >= ROUND_IDLE_US;
  } else {
    wanted = pending || *progressed || now - bg->last_progress_us < SPIN_US ||
             now - bg->last_round_us >= ROUND_IDLE_US;
  }
  if (wanted && !start_round(bg, err, sizeof(err)))
    return !fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  return 1;
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
      if (bg->cache) {   /* runs when a round says it is due, on every rank alike */
        if (!queue_list(bg, msg.p, msg.len, hvd_coordinator_emitted_times(bg->coord), n)) {
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
  if (bg->cache && !bg->rounds_over && !rounds_turn(bg, &progressed)) return 1;
  if (bg->ctl.nsends > 0) hvd_control_progress(&bg->ctl, 0, 0);
  if (progressed) bg->last_progress_us = util_now_us();
  *progressed_out = progressed;
  return 0;
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
  } else if (hvd_g.round_words > 0 &&
             (bg.cache = hvd_cache_create(hvd_g.cfg.cache_capacity)) == NULL) {
    local_stop(HVD_ERR_NO_MEMORY, "out of memory for the response cache");
  } else {
    bg.nwords = (hvd_g.round_words - 2) / 2;
    pthread_mutex_lock(&engine_mu);
    engine_bg = bg;
    engine_state = ENGINE_RUNNING;
    pthread_mutex_unlock(&engine_mu);
    loop(&engine_bg);
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
  hvd_cache_free(bg.cache);
  for (int i = 0; i < bg.nhits; i++) hvd_buf_free(&bg.hits[i].wire);
  free(bg.hits);
  free(bg.invals);
  for (int i = 0; i < bg.nlists; i++) {
    free(bg.lists[i].data);
    free(bg.lists[i].times);
  }
  free(bg.lists);
  hvd_buf_free(&bg.to_coord);
  return NULL;
}
