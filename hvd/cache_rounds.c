/* hvd/cache_rounds.c: the response cache's protocol (hvd/cache_rounds.h).

   A request whose name is cached with the same signature is not sent to rank 0 but
   becomes a pending hit. The ranks agree on hits in "rounds", each an AND of every
   rank's uint64 words (the peers: hvd/rounds.c in the runtime, point-to-point at small
   sizes, else MPI_Iallreduce): rank 0's count of response lists emitted, flags (a rank
   has joined; stop), one hit bit per cache slot (agreed when every rank set it) and one
   inverted invalid bit per slot (set by a rank whose request contradicts the cached
   signature). One round at a time; the next starts when the last one was processed and
   some rank has news for it (hvd_cache_rounds_turn). Response lists do not run when
   they arrive (or, on rank 0, when they are emitted): they run when a round says they
   are due, after that round's hits, so that every rank changes its cache in the same
   order and the slot numbers agree everywhere. Rounds are only tested, never waited
   for, so a stopped peer cannot keep the background thread from its liveness checks.
   At a clean shutdown every rank's rounds carry the stop flag until a round that has it
   completes: the last one everywhere. After a failure a round may be left in flight;
   hvd_shutdown drains it when every rank arrives (hvd/init.c). */
#include "hvd/cache_rounds.h"
#include "hvd/hvd_internal.h"
#include "hvd/negotiation.h"
#include "hvd/response_cache.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

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

struct hvd_cache_rounds {
  hvd_cache_rounds_config_t cfg;
  hvd_round_peers_t *peers;
  hvd_cache_rounds_hooks_t hooks;
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
  uint64_t started;                  /* rounds started                                */
  int inflight;                      /* a round started and not yet seen complete     */
  int round_result;                  /* a completed round waits to be processed       */
  int rounds_over;                   /* a round with the stop flag completed          */
  int stopping;                      /* this rank's rounds carry the stop flag         */
  int halted;                        /* worker: fatal error, waits for SHUTDOWN       */
  int vacuous;                       /* hit bits of the round in flight that this rank
                                        set for sets it is not in                     */
  int joined_seen;                   /* the last round said some rank has joined      */
  double last_round_us;
  uint64_t sent_lists;               /* rank 0: lists_seen as the last round said it  */
  unsigned sent_flags;               /* the flags of this rank's last round           */
};

/* A fatal error: the loop's hook decides (returns 1: the loop must end). */
static int fail(hvd_cache_rounds_t *cr, hvd_status_t s, const char *text) {
  return cr->hooks.fail(cr->hooks.arg, s, text);
}

int hvd_cache_rounds_words(size_t capacity) {
  return (int)(2 + 2 * ((capacity + 63) / 64));
}

hvd_cache_rounds_t *hvd_cache_rounds_create(const hvd_cache_rounds_config_t *cfg,
                                            hvd_round_peers_t *peers,
                                            const hvd_cache_rounds_hooks_t *hooks) {
  if (cfg->capacity == 0 || peers->words != hvd_cache_rounds_words(cfg->capacity))
    return NULL;
  hvd_cache_rounds_t *cr = calloc(1, sizeof(*cr));
  if (!cr) return NULL;
  cr->cfg = *cfg;
  cr->peers = peers;
  cr->hooks = *hooks;
  cr->nwords = (peers->words - 2) / 2;
  if (!(cr->cache = hvd_cache_create(cfg->capacity))) {
    free(cr);
    return NULL;
  }
  return cr;
}

void hvd_cache_rounds_free(hvd_cache_rounds_t *cr) {
  if (!cr) return;
  hvd_cache_free(cr->cache);
  for (int i = 0; i < cr->nhits; i++) hvd_buf_free(&cr->hits[i].wire);
  free(cr->hits);
  free(cr->invals);
  for (int i = 0; i < cr->nlists; i++) {
    free(cr->lists[i].data);
    free(cr->lists[i].times);
  }
  free(cr->lists);
  free(cr);
}

static int cacheable_kind(int kind) {
  /* Not allgather/alltoall (per-rank counts), barrier or join. */
  return kind == HVD_KIND_ALLREDUCE || kind == HVD_KIND_BROADCAST ||
         kind == HVD_KIND_REDUCESCATTER;
}

static hvd_cache_sig_t sig_of_request(const struct hvd_request *r) {
  hvd_cache_sig_t g = {r->kind, r->dtype, r->op, r->root, r->device >= 0,
                       (int64_t)r->count, r->set};
  return g;
}

static hvd_cache_sig_t sig_of_response(const hvd_response_t *r) {
  hvd_cache_sig_t g = {r->kind, r->dtype, r->op, r->root, r->device >= 0, r->count,
                       r->set};
  return g;
}

static int add_pending_invalid(hvd_cache_rounds_t *cr, const char *key, size_t key_len,
                               const hvd_cache_sig_t *sig) {
  if (cr->ninvals == cr->cap_invals) {
    int nc = cr->cap_invals ? cr->cap_invals * 2 : 8;
    pending_invalid_t *p = realloc(cr->invals, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    cr->invals = p;
    cr->cap_invals = nc;
  }
  pending_invalid_t *v = &cr->invals[cr->ninvals++];
  memcpy(v->key, key, key_len);
  v->key[key_len] = '\0';
  v->key_len = key_len;
  v->sig = *sig;
  v->in_round = 0;
  return 1;
}

static int add_pending_hit(hvd_cache_rounds_t *cr, const struct hvd_request *r, size_t key_len,
                           const hvd_cache_sig_t *sig) {
  if (cr->nhits == cr->cap_hits) {
    int nc = cr->cap_hits ? cr->cap_hits * 2 : 16;
    pending_hit_t *p = realloc(cr->hits, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    cr->hits = p;
    cr->cap_hits = nc;
  }
  pending_hit_t *h = &cr->hits[cr->nhits];
  memset(h, 0, sizeof(*h));
  memcpy(h->key, r->key, key_len + 1);
  h->key_len = key_len;
  h->sig = *sig;
  h->slot = -1;
  if (!hvd_encode_request(&h->wire, r)) {
    hvd_buf_free(&h->wire);
    return 0;
  }
  cr->nhits++;
  return 1;
}

/* Hands pending hit i to the coordinator (it missed, or a rank has joined). */
static int hit_to_coordinator(hvd_cache_rounds_t *cr, int i) {
  int ok = cr->hooks.to_coordinator(cr->hooks.arg, cr->hits[i].wire.p, cr->hits[i].wire.len);
  hvd_buf_free(&cr->hits[i].wire);
  cr->hits[i] = cr->hits[--cr->nhits];
  return ok;
}

/* A process set's cached names: the ranks outside the set never ask for them, so they
   set those bits always, and the AND agrees on a hit when every rank of the set asked
   (the others skip the response when it runs, as they skip the coordinator's). */
static int outside_hits(hvd_cache_rounds_t *cr, uint64_t *hit) {
  int n = 0, high = hvd_cache_slots_high(cr->cache);
  for (int s = 0; s < high; s++) {
    int set = hvd_cache_slot_set(cr->cache, s);
    if (set > 0 && hvd_process_set_outside(set)) {
      hit[s / 64] |= (uint64_t)1 << (s % 64);
      n++;
    }
  }
  return n;
}

/* Starts the next round. The bits are computed now, from the cache as it is after the
   last round was processed: the same state on every rank, so a slot means the same
   name everywhere. Words: [0] rank 0's count of lists emitted (others: all ones, so
   AND gives rank 0's); [1] inverted flags (AND of the inverses: the OR); then the hit
   bits (AND: every rank asked) and the inverted invalid bits (OR: any rank). */
static int start_round(hvd_cache_rounds_t *cr, char *err, size_t errlen) {
  uint64_t *w = cr->peers->send;
  int W = cr->nwords;
  unsigned flags = (cr->hooks.self_joined(cr->hooks.arg) ? ROUND_FLAG_JOINED : 0) |
                   (cr->stopping ? ROUND_FLAG_STOP : 0);
  w[0] = cr->cfg.rank == 0 ? cr->lists_seen : ~(uint64_t)0;
  w[1] = ~(uint64_t)flags;
  uint64_t *hit = w + 2, *inval = w + 2 + W;
  memset(hit, 0, (size_t)W * sizeof(uint64_t));
  memset(inval, 0xff, (size_t)W * sizeof(uint64_t));
  cr->vacuous = 0;
  if (!cr->stopping && !cr->halted) {
    for (int i = 0; i < cr->nhits;) {
      pending_hit_t *h = &cr->hits[i];
      hvd_cache_sig_t have;
      int s = hvd_cache_lookup(cr->cache, h->key, h->key_len, &have);
      if (s >= 0 && hvd_cache_sig_equal(&have, &h->sig)) {
        h->slot = s;
        h->announced = 1;
        hit[s / 64] |= (uint64_t)1 << (s % 64);
        i++;
        continue;
      }
      /* Evicted or replaced by what ran since it was looked up: a miss now. */
      if (s >= 0 && !add_pending_invalid(cr, h->key, h->key_len, &have)) goto oom;
      if (!hit_to_coordinator(cr, i)) goto oom;
    }
    for (int i = 0; i < cr->ninvals;) {
      pending_invalid_t *v = &cr->invals[i];
      hvd_cache_sig_t have;
      int s = hvd_cache_lookup(cr->cache, v->key, v->key_len, &have);
      if (s >= 0 && hvd_cache_sig_equal(&have, &v->sig)) {
        v->in_round = 1;
        inval[s / 64] &= ~((uint64_t)1 << (s % 64));
        i++;
      } else {
        cr->invals[i] = cr->invals[--cr->ninvals];   /* already gone */
      }
    }
    if (!cr->hooks.flush(cr->hooks.arg, err, errlen)) return 0;
    cr->vacuous = outside_hits(cr, hit);
  }
  if (!cr->peers->start(cr->peers, err, errlen)) return 0;
  cr->inflight = 1;
  cr->started++;
  cr->last_round_us = util_now_us();
  cr->sent_lists = cr->lists_seen;
  cr->sent_flags = flags;
  return 1;
oom:
  snprintf(err, errlen, "rank %d: out of memory for the response cache", cr->cfg.rank);
  return 0;
}

/* Whether the round in flight completed (then its result waits in round_recv). Never
   blocks: a peer that stopped must not keep this thread from its liveness checks. */
static int test_round(hvd_cache_rounds_t *cr, char *err, size_t errlen) {
  if (!cr->inflight) return 1;
  int done = 0;
  if (!cr->peers->test(cr->peers, &done, err, errlen)) return 0;
  if (done) {
    cr->inflight = 0;
    cr->round_result = 1;
  }
  return 1;
}

/* Clean shutdown: every rank must stop starting rounds after the same one, or a
   nonblocking allreduce would be left on a communicator that is then freed. This
   rank's rounds carry the stop flag from now on; a round whose result has it is the
   last one everywhere. */
int hvd_cache_rounds_stop_step(hvd_cache_rounds_t *cr, char *err, size_t len) {
  if (cr->rounds_over) return 1;
  cr->stopping = 1;
  if (!test_round(cr, err, len)) return -1;
  if (cr->inflight) return 0;
  if (cr->round_result) {
    cr->round_result = 0;
    if (~cr->peers->recv[1] & ROUND_FLAG_STOP) {
      cr->rounds_over = 1;
      return 1;
    }
  }
  return start_round(cr, err, len) ? 0 : -1;
}

/* Queues a coordinator list until a round says it is due (cache on). 0: out of memory. */
int hvd_cache_rounds_queue_list(hvd_cache_rounds_t *cr, const char *data, size_t len,
                                const double *times, int n) {
  if (cr->nlists == cr->cap_lists) {
    int nc = cr->cap_lists ? cr->cap_lists * 2 : 8;
    queued_list_t *p = realloc(cr->lists, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    cr->lists = p;
    cr->cap_lists = nc;
  }
  queued_list_t *q = &cr->lists[cr->nlists];
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
  cr->nlists++;
  cr->lists_seen++;
  return 1;
}

/* Runs the agreed hits (slots[0..n), ascending) as one list of the cached responses,
   fused by the coordinator's rules. Returns 1 when the loop must end. */
static int run_hits(hvd_cache_rounds_t *cr, const int *slots, int n) {
  hvd_response_t *one = malloc((size_t)n * sizeof(*one));
  hvd_plan_item_t *items = malloc((size_t)n * sizeof(*items));
  int *order = malloc((size_t)n * sizeof(*order));
  unsigned char *fuse = malloc(2 * (size_t)n);
  hvd_buf_t msg = {0};
  hvd_msg_header_t h = {HVD_MSG_RESPONSES, n, 0, 0};
  int ok = one && items && order && fuse && hvd_buf_put(&msg, &h, sizeof(h));
  for (int i = 0; ok && i < n; i++) {
    size_t len = 0;
    const char *wire = hvd_cache_wire(cr->cache, slots[i], &len);
    ok = wire && hvd_decode_responses(wire, len, 1, cr->cfg.size, &one[i]);
    if (ok)
      items[i] = (hvd_plan_item_t){one[i].kind, one[i].dtype, one[i].op,
                                   one[i].device >= 0, one[i].count, one[i].status,
                                   one[i].set, 1.0, 1.0};   /* no factors cached */
  }
  if (ok) hvd_plan(items, n, cr->cfg.fusion_threshold, order, fuse);
  for (int k = 0; ok && k < n; k++) ok = hvd_encode_response(&msg, &one[order[k]], fuse[k]);
  /* Touched in slot order, the same on every rank, before anything can fail. */
  for (int i = 0; ok && i < n; i++) hvd_cache_touch(cr->cache, slots[i]);
  free(one);
  free(items);
  free(order);
  free(fuse);
  if (!ok) {
    hvd_buf_free(&msg);
    return fail(cr, HVD_ERR_NO_MEMORY, "out of memory running cached responses");
  }
  /* No negotiation happened: the timeline shows it as taking no time. */
  double now = util_now_us(), *times = malloc((size_t)(2 * n) * sizeof(double));
  for (int i = 0; times && i < 2 * n; i++) times[i] = now;
  int end = cr->hooks.run(cr->hooks.arg, msg.p, msg.len, times, 1);
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
int hvd_cache_rounds_process(hvd_cache_rounds_t *cr, int *progressed) {
  const uint64_t *w = cr->peers->recv;
  unsigned flags = (unsigned)~w[1];
  if (flags & ROUND_FLAG_STOP) {   /* the coordinator is shutting down: the last round */
    cr->rounds_over = 1;
    cr->round_result = 0;
    return 0;
  }
  if (cr->halted) {   /* waiting for SHUTDOWN: nothing runs any more */
    cr->round_result = 0;
    return 0;
  }
  uint64_t due = w[0];
  /* Rank 0 sent those lists before it started this round: they are on their way. */
  if (cr->cfg.rank != 0 && cr->lists_seen < due) return 0;
  cr->round_result = 0;
  int W = cr->nwords;
  const uint64_t *hit = w + 2, *inval = w + 2 + W;
  int *slots = NULL, nslots = 0;
  for (int k = 0; k < W; k++) {
    uint64_t bad = ~inval[k], good = hit[k] & inval[k];
    for (int b = 0; bad && b < 64; b++)
      if (bad >> b & 1) hvd_cache_evict(cr->cache, k * 64 + b);
    for (int b = 0; good && b < 64; b++)
      if (good >> b & 1) {
        /* Every agreed bit is one of this rank's pending hits, or of a set it is not
           in. */
        if (nslots >= cr->nhits + cr->vacuous) {
          free(slots);
          return fail(cr, HVD_ERR_BACKEND, "the response cache round agreed on a "
                      "slot this rank did not ask for (internal error)");
        }
        if (!slots && !(slots = malloc((size_t)(cr->nhits + cr->vacuous) * sizeof(*slots)))) {
          return fail(cr, HVD_ERR_NO_MEMORY, "out of memory for cache hits");
        }
        slots[nslots++] = k * 64 + b;
      }
  }
  for (int i = 0; i < cr->ninvals;) {
    if (cr->invals[i].in_round) cr->invals[i] = cr->invals[--cr->ninvals];
    else i++;
  }
  if (nslots > 0) {
    /* Those hits leave the pending list: the requests run now. */
    for (int i = 0; i < cr->nhits;) {
      int s = cr->hits[i].slot, agreed = 0;
      if (s >= 0 && (hit[s / 64] & inval[s / 64]) >> (s % 64) & 1) agreed = 1;
      if (agreed) {
        hvd_buf_free(&cr->hits[i].wire);
        cr->hits[i] = cr->hits[--cr->nhits];
      } else {
        i++;
      }
    }
    *progressed = 1;
    int end = run_hits(cr, slots, nslots);
    free(slots);
    if (end) return 1;
  }
  for (int i = 0; i < cr->nhits; i++) cr->hits[i].slot = -1;
  cr->joined_seen = (flags & ROUND_FLAG_JOINED) != 0;
  if (cr->joined_seen && cr->nhits > 0) {
    char err[HVD_ERROR_MAX];
    int ok = 1;
    while (cr->nhits > 0 && ok) ok = hit_to_coordinator(cr, cr->nhits - 1);
    if (!ok) snprintf(err, sizeof(err), "rank %d: out of memory for requests", cr->cfg.rank);
    if (!ok || !cr->hooks.flush(cr->hooks.arg, err, sizeof(err)))
      return fail(cr, HVD_ERR_NO_MEMORY, err);
    *progressed = 1;
  }
  while (cr->lists_done < due && cr->nlists > 0) {
    queued_list_t q = cr->lists[0];
    memmove(&cr->lists[0], &cr->lists[1], (size_t)(cr->nlists - 1) * sizeof(q));
    cr->nlists--;
    cr->lists_done++;
    int end = cr->halted ? 0 : cr->hooks.run(cr->hooks.arg, q.data, q.len, q.times, 0);
    free(q.data);
    free(q.times);
    *progressed = 1;
    if (end) return 1;
  }
  return 0;
}

/* Waits (until deadline) for the round in flight and runs what it made due.
   Returns 1 when the loop must end (a failure while running it). */
int hvd_cache_rounds_finish(hvd_cache_rounds_t *cr, double deadline) {
  char err[HVD_ERROR_MAX];
  while (cr->inflight && util_now_us() < deadline) {
    if (!test_round(cr, err, sizeof(err))) return 0;
    if (cr->inflight) sched_yield();
  }
  int progressed = 0;
  return cr->round_result ? hvd_cache_rounds_process(cr, &progressed) : 0;
}

/* Whether this rank has something to say that no round of its has said yet: a hit or
   an invalidation not yet announced, rank 0's new lists, changed flags. */
static int round_news(const hvd_cache_rounds_t *cr) {
  unsigned flags = (cr->hooks.self_joined(cr->hooks.arg) ? ROUND_FLAG_JOINED : 0) |
                   (cr->stopping ? ROUND_FLAG_STOP : 0);
  if (flags != cr->sent_flags) return 1;
  if (cr->cfg.rank == 0 && cr->lists_seen != cr->sent_lists) return 1;
  /* Stopping or failed: start_round sends no hits or invalidations, so they are no
     news (else every turn would start a round until the STOP round). */
  if (cr->stopping || cr->halted) return 0;
  if (cr->ninvals > 0) return 1;
  for (int i = 0; i < cr->nhits; i++)
    if (!cr->hits[i].announced) return 1;
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
   peers' rounds cannot complete without this rank's. Returns 1 when the loop must end. */
int hvd_cache_rounds_turn(hvd_cache_rounds_t *cr, int recent_progress, int *progressed) {
  char err[HVD_ERROR_MAX];
  if (!test_round(cr, err, sizeof(err))) return fail(cr, HVD_ERR_BACKEND, err);
  if (cr->round_result && hvd_cache_rounds_process(cr, progressed)) return 1;
  if (cr->inflight || cr->round_result || cr->rounds_over) return 0;
  double now = util_now_us();
  int pending = cr->nhits > 0 || cr->ninvals > 0 || cr->nlists > 0;
  /* News first: then the peers need not be asked (one MPI call less on the way of a
     hit). */
  int news = round_news(cr), wanted;
  int peer = news ? 0 : cr->peers->peer_started(cr->peers, err, sizeof(err));
  if (peer == -2) return fail(cr, HVD_ERR_BACKEND, err);
  if (peer >= 0) {
    wanted = news || peer;
    /* A round that answers a peer or says something new is progress: keep spinning
       for its answer rather than sleep. */
    if (wanted) *progressed = 1;
    else wanted = pending && now - cr->last_round_us >= HVD_ROUND_IDLE_US;
  } else {
    wanted = pending || *progressed || recent_progress ||
             now - cr->last_round_us >= HVD_ROUND_IDLE_US;
  }
  if (wanted && !start_round(cr, err, sizeof(err)))
    return fail(cr, HVD_ERR_BACKEND, err);
  return 0;
}

/* Cache on: a name cached with the same signature waits for the others' bits in the
   rounds; one cached with another signature invalidates the entry everywhere and goes
   to the coordinator, which reports the mismatch. While a rank has joined, everything
   goes to the coordinator (it stands in for the joined rank). */
int hvd_cache_rounds_submit(hvd_cache_rounds_t *cr, const struct hvd_request *r) {
  if (!cacheable_kind(r->kind) || cr->joined_seen || cr->hooks.self_joined(cr->hooks.arg))
    return 0;
  /* Scaled reductions always go to the coordinator: the cached signature has no
     factors. */
  if (HVD_SCALES(r->prescale) || HVD_SCALES(r->postscale)) return 0;
  size_t kl = strlen(r->key);
  hvd_cache_sig_t want = sig_of_request(r), have;
  int slot = hvd_cache_lookup(cr->cache, r->key, kl, &have);
  if (slot >= 0 && hvd_cache_sig_equal(&want, &have))
    return add_pending_hit(cr, r, kl, &want) ? 1 : -1;
  if (slot >= 0 && !add_pending_invalid(cr, r->key, kl, &have)) return -1;
  return 0;
}

int hvd_cache_rounds_learn(hvd_cache_rounds_t *cr, const hvd_response_t *resp, int n) {
  hvd_buf_t w = {0};
  for (int i = 0; i < n; i++) {
    const hvd_response_t *r = &resp[i];
    if (r->status != HVD_OK || !cacheable_kind(r->kind)) continue;
    hvd_cache_sig_t g = sig_of_response(r);
    w.len = 0;
    if (!hvd_encode_response(&w, r, 0) ||
        !hvd_cache_put(cr->cache, r->key, r->key_len, &g, w.p, w.len)) {
      hvd_buf_free(&w);
      return 0;
    }
  }
  hvd_buf_free(&w);
  return 1;
}

int hvd_cache_rounds_start(hvd_cache_rounds_t *cr, char *err, size_t len) {
  return start_round(cr, err, len);
}

int hvd_cache_rounds_test(hvd_cache_rounds_t *cr, char *err, size_t len) {
  return test_round(cr, err, len);
}

void hvd_cache_rounds_halt(hvd_cache_rounds_t *cr) { cr->halted = 1; }

uint64_t hvd_cache_rounds_run(const hvd_cache_rounds_t *cr) {
  return cr->started - (hvd_cache_rounds_unfinished(cr) ? 1 : 0);
}

uint64_t hvd_cache_rounds_started(const hvd_cache_rounds_t *cr) { return cr->started; }

int hvd_cache_rounds_unfinished(const hvd_cache_rounds_t *cr) {
  return cr->inflight || cr->round_result;
}

int hvd_cache_rounds_busy(const hvd_cache_rounds_t *cr) {
  return cr->nlists > 0 || cr->round_result;
}

int hvd_cache_rounds_over(const hvd_cache_rounds_t *cr) { return cr->rounds_over; }

int hvd_cache_rounds_joined_seen(const hvd_cache_rounds_t *cr) { return cr->joined_seen; }

int hvd_cache_rounds_pending_hits(const hvd_cache_rounds_t *cr) { return cr->nhits; }

int hvd_cache_rounds_pending_invalids(const hvd_cache_rounds_t *cr) { return cr->ninvals; }

int hvd_cache_rounds_lookup(const hvd_cache_rounds_t *cr, const char *key) {
  hvd_cache_sig_t sig;
  return hvd_cache_lookup(cr->cache, key, strlen(key), &sig);
}
