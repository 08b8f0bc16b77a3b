/* serve/batcher.h: server-side batching in front of one nn model (TF Serving's
   BasicBatchScheduler). Request threads submit jobs of n samples and block; one worker
   thread owns the model and runs the jobs that arrived together as one forward pass in
   inference mode: it takes the first waiting job, then keeps taking whole jobs until the
   batch holds max_batch samples or batch_timeout_us has passed since the first one
   arrived. A job larger than max_batch runs alone in slices of max_batch.
   With batching off (max_batch_jobs 1) every job is its own forward pass.
   The model is not thread-safe: only the worker touches it after serve_batcher_start.
   Errors: functions return 0 or -1 with one line in err. */
#ifndef SERVE_BATCHER_H
#define SERVE_BATCHER_H

#include "nn/nn.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int max_batch;            /* samples per forward pass; the model is built for it    */
  long batch_timeout_us;    /* how long the first job of a batch waits for company    */
  int enabled;              /* 0: one job per forward pass, no waiting                */
} serve_batching_t;

typedef struct serve_job serve_job_t;
struct serve_job {
  const float *x;           /* [n][c][h][w], normalised                               */
  int n;
  float *probs;             /* [n][classes]: softmax of the logits (written)          */
  int status;               /* 0 ok, -1: err holds why                                */
  char err[160];
  int done;                 /* the batcher's own fields from here                     */
  pthread_cond_t answered;  /* signalled at done                                      */
  double queued_at;
  serve_job_t *next;
};

typedef struct {
  uint64_t forwards;        /* forward passes run                                     */
  uint64_t samples;         /* samples through them                                   */
  uint64_t jobs;            /* jobs answered                                          */
} serve_batcher_stats_t;

typedef struct serve_batcher serve_batcher_t;

/* Takes ownership of model (built with cfg.batch >= b->max_batch) and starts the worker. */
int serve_batcher_start(serve_batcher_t **out, nn_model_t *model, const serve_batching_t *b,
                        char *err, size_t errlen);
/* Runs job (x, n, probs set by the caller) and returns when it is answered: 0, or -1
   with job->err (the model failed, or the batcher is stopping). */
int serve_batcher_run(serve_batcher_t *bt, serve_job_t *job);
/* Answers every job already queued, stops the worker, frees the model. NULL: nothing. */
void serve_batcher_stop(serve_batcher_t *bt);
void serve_batcher_stats(serve_batcher_t *bt, serve_batcher_stats_t *st);
int serve_batcher_classes(const serve_batcher_t *bt);

#endif /* SERVE_BATCHER_H */
