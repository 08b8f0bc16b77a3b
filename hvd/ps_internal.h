/* hvd/ps_internal.h: the parameter servers' state, shared by their three files.
   ps_api.c (the public calls, on user threads) -> ps_engine.c (the messages, on the
   background loop's turns) and ps_placement.c (which server keeps which shard). The
   engine is called by background.c (a turn) and init.c (the communicator). */
#ifndef HVD_PS_INTERNAL_H
#define HVD_PS_INTERNAL_H

#include "hvd/hvd_internal.h"

typedef struct {
  size_t var, offset, count;   /* elements [offset, offset + count) of variable var   */
  size_t flat;                 /* where they start in the flat buffer                 */
  int server;                  /* the rank that keeps them                            */
} ps_shard_t;

/* One shard kept on this rank. */
typedef struct {
  float *values;
  float *accum;                /* sync: the sum of this step's gradients so far        */
  int arrived;                 /* sync: workers whose gradient for this step came      */
  uint64_t version;            /* complete rounds (sync: applied steps)                */
  uint64_t updates;            /* callbacks run (async: one per push)                  */
  uint64_t *clock;             /* async: per worker, its pushes applied                */
  uint64_t *want;              /* per worker: the version its pending answer waits for,
                                  or UINT64_MAX when none is pending                    */
} ps_kept_t;

/* A worker's push-and-pull of a range of shards: one request. */
typedef struct ps_op {
  struct hvd_request *req;
  float *values;               /* the caller's flat value buffer                      */
  size_t s0, s1;               /* shards [s0, s1)                                     */
  size_t remaining;            /* answers still to come                               */
  int pull_only;
} ps_op_t;

/* A message to send (posted by the engine) or in flight, and the buffer it reads. */
typedef struct ps_send {
  MPI_Request req;
  int posted, dest;
  void *buf;
  size_t len;
  struct ps_send *next;
} ps_send_t;

struct hvd_ps {
  hvd_ps_config_t cfg;
  size_t nvars, total;
  char **names;
  size_t *counts, *starts;
  size_t nshards;
  ps_shard_t *shards;
  size_t *var_shard0, *var_nshards;   /* per variable: its first shard and how many  */
  int nworkers, first_worker;         /* workers are ranks first_worker..size-1      */
  int is_server, is_worker;
  ps_kept_t *kept;                    /* per shard; values NULL where not kept here   */
  /* worker side, under ps_mu (ps_engine.c) */
  uint64_t *step;                     /* per shard: pushes answered                   */
  uint64_t *vread;                    /* per shard: version of the values last pulled */
  ps_op_t **waiting;                  /* per shard: the op its answer goes to          */
  ps_send_t *sends;                   /* to post or in flight (both roles)            */
  uint64_t seq;
  /* finish */
  uint32_t gen;                       /* this set's number: the same on every rank     */
  const int *host;                    /* per rank: its host (ps_engine.c's table)      */
  /* local aggregation (sync): per shard, the worker of this host that sums the host's
     gradients of it, or -1 (kept on this host, or no aggregation) */
  int *agg_rank;
  int nlocal, *locals;                /* the workers of this host, ascending           */
  float **agg_sum;                    /* per shard this rank aggregates: the sum so far */
  int *agg_arrived;                   /* ... and the gradients in it                   */
  unsigned char *agg_fwd;             /* ... an aggregated push awaits its answer: share
                                         it with the host's other workers              */
  int finishing;                      /* this rank called hvd_ps_finish                */
  int done_sent, dones;               /* worker: DONE sent; server: DONEs received    */
  struct hvd_request *finish_req;
  hvd_ps_stats_t stats;
};

/* Wire: every record is this header, then count float32 values (PUSH: the gradient,
   or a host's sum of weight gradients; LPUSH: a gradient to the host's aggregator of the
   shard; VALUES: the shard's values); PULL and DONE carry none. A message is one record
   or several back to back. gen: the set's number, so that a message left over from an
   earlier set (a receive posted before it failed) is dropped, not taken as this set's. */
enum { PS_MSG_PUSH = 1, PS_MSG_PULL = 2, PS_MSG_VALUES = 3, PS_MSG_DONE = 4,
       PS_MSG_LPUSH = 5 };
typedef struct {
  int32_t type, weight;
  uint32_t gen, count;
  uint64_t shard, step, version;
} ps_header_t;

/* ps_placement.c: the aggregators of this rank's host (ps->agg_rank, locals, nlocal)
   from ps->host and the placement; agg_rank all -1 without local aggregation. 0: out of
   memory. */
int hvd_ps_place_aggregators(struct hvd_ps *ps, int on);

/* ps_placement.c: fills ps->shards, nshards, var_shard0, var_nshards from the
   variables and the configuration (servers: ranks 0..nservers-1). 0: out of memory. */
int hvd_ps_place(struct hvd_ps *ps, int nservers);

/* ps_engine.c */
hvd_status_t hvd_ps_comm_init(MPI_Comm ctrl);   /* init.c: dups ctrl (collective)    */
void hvd_ps_comm_free(int mpi_too);
const int *hvd_ps_hosts(void);                  /* per rank: the lowest rank of its host */
/* One turn (background loop, engine lock held): 1 progress, 0 none, -1 a fatal error
   (err filled). */
int hvd_ps_turn(char *err, size_t len);
int hvd_ps_busy(void);                          /* a set is installed: poll often    */
int hvd_ps_ops_pending(const struct hvd_ps *ps);   /* worker requests in flight      */
/* User threads: install the set (the engine serves it from the next turn), hand it an
   op or the finish, uninstall it (the engine no longer touches it on return). */
void hvd_ps_install(struct hvd_ps *ps);
hvd_status_t hvd_ps_submit(struct hvd_ps *ps, ps_op_t *op, const float *grads);
hvd_status_t hvd_ps_submit_finish(struct hvd_ps *ps, struct hvd_request *r);
void hvd_ps_uninstall(struct hvd_ps *ps);
void hvd_ps_stats_copy(const struct hvd_ps *ps, hvd_ps_stats_t *s);

#endif /* HVD_PS_INTERNAL_H */
