/* hvd/cache_rounds.h: the response cache's protocol (as Horovod's CacheCoordinator):
   the ranks agree, round by round, on which cached responses every rank asked for, which
   entries some rank contradicted, and which coordinator lists are due (docs at the top
   of hvd/cache_rounds.c). Its state is its own; it reaches the peers only through
   hvd_round_peers_t (one AND of every rank's words, as Horovod's
   Controller::CrossRankBitwiseAnd) and the background loop only through
   hvd_cache_rounds_hooks_t, so it runs as well on threads over the in-process transport
   (tests/test_hvd_cache_rounds.c) as in the runtime (hvd/rounds.c, hvd/background.c).
   One thread at a time (the background loop's turns). */
#ifndef HVD_CACHE_ROUNDS_H
#define HVD_CACHE_ROUNDS_H

#include "hvd/hvd_internal.h"

#include <stddef.h>
#include <stdint.h>

/* Cache on, idle: a round at least this often (the peers' rounds may wait for ours). */
#define HVD_ROUND_IDLE_US 1000.0

/* The peers: one round at a time, every rank's send[0..words) combined with AND into
   recv. start never waits for a peer; test says whether the round completed (then recv
   holds the result); peer_started, between rounds: 1 a peer has started the next round,
   0 none has, -1 cannot tell (then rounds follow each other while anything waits), -2 an
   error. start and test return 0 on an error (err filled). */
typedef struct hvd_round_peers {
  uint64_t *send;
  const uint64_t *recv;
  int words;
  int (*start)(struct hvd_round_peers *p, char *err, size_t len);
  int (*test)(struct hvd_round_peers *p, int *done, char *err, size_t len);
  int (*peer_started)(struct hvd_round_peers *p, char *err, size_t len);
  void *ctx;
} hvd_round_peers_t;

/* The words a round needs for a cache of capacity entries (a word of lists, a word of
   flags, then the hit and the invalid bits). */
int hvd_cache_rounds_words(size_t capacity);

/* What the protocol asks of the background loop (arg: its state). Each returning int:
   to_coordinator and flush 1 on success, 0 on failure (flush fills err); run and fail
   1 when the loop must end, else 0. */
typedef struct {
  void *arg;
  /* Queue one encoded request for the coordinator (a miss). */
  int (*to_coordinator)(void *arg, const void *wire, size_t len);
  /* Send what to_coordinator queued. */
  int (*flush)(void *arg, char *err, size_t len);
  /* Run a RESPONSES message (header included); from_cache: the agreed hits of a round,
     else a coordinator list (the loop then calls hvd_cache_rounds_learn). times: two
     per response (first seen, ready; the timeline), or NULL. */
  int (*run)(void *arg, const char *list, size_t len, const double *times, int from_cache);
  /* A fatal error of this rank (the protocol cannot go on). */
  int (*fail)(void *arg, hvd_status_t s, const char *text);
  /* Whether this rank's hvd_join went out and is not answered yet. */
  int (*self_joined)(void *arg);
} hvd_cache_rounds_hooks_t;

typedef struct {
  int rank, size;
  size_t capacity;                   /* cache entries (> 0)                            */
  size_t fusion_threshold;           /* how the agreed hits are fused (hvd_plan)       */
} hvd_cache_rounds_config_t;

typedef struct hvd_cache_rounds hvd_cache_rounds_t;

/* NULL when out of memory, or when peers->words is not hvd_cache_rounds_words(capacity). */
hvd_cache_rounds_t *hvd_cache_rounds_create(const hvd_cache_rounds_config_t *cfg,
                                            hvd_round_peers_t *peers,
                                            const hvd_cache_rounds_hooks_t *hooks);
void hvd_cache_rounds_free(hvd_cache_rounds_t *cr);

/* A submission: 1 it is a pending hit (it waits for the others' bits); 0 it goes to the
   coordinator (the caller sends it; a contradicted entry is to be evicted everywhere);
   -1 out of memory. */
int hvd_cache_rounds_submit(hvd_cache_rounds_t *cr, const struct hvd_request *r);
/* A coordinator list (header included), received, or on rank 0 emitted: it runs when a
   round says it is due. 0: out of memory. */
int hvd_cache_rounds_queue_list(hvd_cache_rounds_t *cr, const char *list, size_t len,
                                const double *times, int n);
/* After a coordinator list ran: the cache learns its cacheable responses. 0: out of
   memory. */
int hvd_cache_rounds_learn(hvd_cache_rounds_t *cr, const hvd_response_t *resp, int n);

/* The steps of a round. start: compute this rank's words and start the round (0 on an
   error, err filled); test: whether it completed (0 on an error); process: run what a
   completed round decided (1 when the loop must end). */
int hvd_cache_rounds_start(hvd_cache_rounds_t *cr, char *err, size_t len);
int hvd_cache_rounds_test(hvd_cache_rounds_t *cr, char *err, size_t len);
int hvd_cache_rounds_process(hvd_cache_rounds_t *cr, int *progressed);

/* The rounds' part of a loop turn: test the round in flight, process its result, start
   the next when wanted. recent_progress: the loop moved something a moment ago.
   *progressed: something ran or moved. Returns 1 when the loop must end. */
int hvd_cache_rounds_turn(hvd_cache_rounds_t *cr, int recent_progress, int *progressed);
/* Clean shutdown, one step: this rank's rounds carry the stop flag from now on; 1 when
   a round that has it completed (the last one everywhere), 0 to call again, -1 on an
   error (err filled). */
int hvd_cache_rounds_stop_step(hvd_cache_rounds_t *cr, char *err, size_t len);
/* Waits (until deadline_us) for the round in flight and runs what it made due. Returns
   1 when the loop must end. */
int hvd_cache_rounds_finish(hvd_cache_rounds_t *cr, double deadline_us);
/* This worker failed and waits for the coordinator's SHUTDOWN: nothing runs any more,
   and its rounds carry no hits or invalidations. */
void hvd_cache_rounds_halt(hvd_cache_rounds_t *cr);

/* Rounds this rank started and processed (or is in: the last one unprocessed not
   counted): what rank 0's SHUTDOWN says. */
uint64_t hvd_cache_rounds_run(const hvd_cache_rounds_t *cr);
uint64_t hvd_cache_rounds_started(const hvd_cache_rounds_t *cr);
/* A round is in flight or its result waits to be processed. */
int hvd_cache_rounds_unfinished(const hvd_cache_rounds_t *cr);
/* Lists wait, or a result waits: the loop expects work soon. */
int hvd_cache_rounds_busy(const hvd_cache_rounds_t *cr);
/* A round with the stop flag completed: no more rounds. */
int hvd_cache_rounds_over(const hvd_cache_rounds_t *cr);
/* The last round said some rank has joined: everything goes to the coordinator. */
int hvd_cache_rounds_joined_seen(const hvd_cache_rounds_t *cr);
/* Pending hits and invalidations (tests). */
int hvd_cache_rounds_pending_hits(const hvd_cache_rounds_t *cr);
int hvd_cache_rounds_pending_invalids(const hvd_cache_rounds_t *cr);
/* The cache's slot of key, or -1 (tests). */
int hvd_cache_rounds_lookup(const hvd_cache_rounds_t *cr, const char *key);

#endif /* HVD_CACHE_ROUNDS_H */
