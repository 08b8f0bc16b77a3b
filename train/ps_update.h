/* train/ps_update.h: the training step's parameter-server side (--variable-update
   ps-sync | ps-async): every parameter of the model is a variable of hvd's parameter
   servers; the optimizer (nn's, one per shard this rank keeps) runs on the servers
   through hvd's update callback, so its state lives there. A worker's step pushes each
   parameter's gradient as soon as backward has finished it (nn's grad-ready callback,
   as the ring's buckets) and takes the new values after the last answer.

   Checkpoints: the model's own optimizer (nn_model_optim_state) is the carrier; before
   a checkpoint every rank gathers the shards' state into it (train_ps_gather_state),
   and a resumed or fresh run starts each shard's optimizer from it. */
#ifndef TRAIN_PS_UPDATE_H
#define TRAIN_PS_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include "hvd/hvd.h"
#include "nn/nn.h"

typedef struct train_ps train_ps_t;

typedef struct {
  int async;                    /* ps-async */
  int num_ps;                   /* 0: colocated */
  int round_robin;              /* placement */
  int max_staleness;
  hvd_ps_local_agg_t local_aggregation;   /* sync: a host's gradients summed first */
  nn_optim_config_t optim;
  /* The learning rate at optimizer step g of the run (from 0): epoch g / windows, window
     g % windows, as the training loop computes it. */
  nn_lr_schedule_t sched;
  int steps, accum, windows;
  long long start_step;         /* the run's optimizer steps before this start (resume) */
  int test_server_delay_ms;     /* tests: a server waits this long before making its
                                   shards' optimizers (HVD_TRAIN_TEST_PS_SERVER_DELAY_MS) */
} train_ps_opts_t;

/* Collective. The variables are m's parameters (named "param.I"), their first values
   m's parameters, each shard's optimizer state the slice of m's own optimizer state
   (and its step count). 0, or -1 with err. */
/* "auto", "on" or "off" (the flags' spelling) as hvd's setting; AUTO for anything else. */
hvd_ps_local_agg_t train_ps_local_aggregation(const char *name);

int train_ps_create(train_ps_t **out, nn_model_t *m, const train_ps_opts_t *o, char *err,
                    size_t len);
/* Finishes (collective) and frees; *stats gets this rank's figures first when not NULL. */
hvd_status_t train_ps_finish(train_ps_t *p, hvd_ps_stats_t *stats);
int train_ps_is_worker(const train_ps_t *p);
int train_ps_worker_index(const train_ps_t *p);
int train_ps_num_workers(const train_ps_t *p);
int train_ps_first_worker(const train_ps_t *p);

/* One step of a worker: ready() from nn's grad-ready callback (the gradients at offsets
   >= ready_from are final), then wait(): pushes what is left, waits for every answer and
   copies the new values into the model's parameters. */
hvd_status_t train_ps_ready(train_ps_t *p, size_t ready_from);
hvd_status_t train_ps_wait(train_ps_t *p);

/* The first failure of an optimizer step this rank ran for its shards (NN_OK: none). */
nn_status_t train_ps_update_status(const train_ps_t *p);
/* Its message ("" when none). */
const char *train_ps_update_error(const train_ps_t *p);

/* Collective: every shard's optimizer state into m's own optimizer state (the rest
   zeros), on every rank. */
hvd_status_t train_ps_gather_state(train_ps_t *p);

#endif /* TRAIN_PS_UPDATE_H */
