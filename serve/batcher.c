/* serve/batcher.c: the queue of jobs and the worker thread that runs them through the
   model (see batcher.h for the batching rule). */
#include "serve/batcher.h"
#include "serve/sync.h"

#include "util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct serve_batcher {
  nn_model_t *model;
  serve_batching_t cfg;
  int classes;
  size_t per;                 /* floats per sample                                    */
  float *stage;               /* [max_batch][per]: the jobs of one batch side by side */
  pthread_mutex_t mu;
  pthread_cond_t have_work;   /* a job was queued, or stop was asked                  */
  serve_job_t *head, *tail;
  int queued_samples;
  int stopping;
  pthread_t worker;
  serve_batcher_stats_t stats;
};

static void softmax_rows(const float *logits, int n, int k, float *out) {
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * k;
    float *p = out + (size_t)i * k;
    float mx = z[0];
    for (int j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
    double sum = 0;
    for (int j = 0; j < k; j++) sum += exp((double)(z[j] - mx));
    for (int j = 0; j < k; j++) p[j] = (float)(exp((double)(z[j] - mx)) / sum);
  }
}

/* Forward x[n] (n may exceed max_batch: slices) into probs; 0 or -1 with err. */
static int run_forward(serve_batcher_t *bt, const float *x, int n, float *probs, char *err,
                       size_t errlen) {
  for (int at = 0; at < n; at += bt->cfg.max_batch) {
    int m = n - at < bt->cfg.max_batch ? n - at : bt->cfg.max_batch;
    if (nn_model_forward(bt->model, x + (size_t)at * bt->per, m, 0) != NN_OK) {
      snprintf(err, errlen, "forward pass failed: %s", nn_last_error());
      return -1;
    }
    softmax_rows(nn_model_logits(bt->model), m, bt->classes, probs + (size_t)at * bt->classes);
  }
  return 0;
}

/* Waits (mu held) until the batch at head is due: full, timed out, or stopping. */
static void wait_for_company(serve_batcher_t *bt) {
  if (!bt->cfg.enabled || bt->cfg.batch_timeout_us <= 0) return;
  double deadline = bt->head->queued_at + 1e-6 * (double)bt->cfg.batch_timeout_us;
  while (!bt->stopping && bt->queued_samples < bt->cfg.max_batch) {
    double now = util_now_s();
    if (now >= deadline) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double left = deadline - now;
    long sec = (long)left;
    ts.tv_sec += sec;
    ts.tv_nsec += (long)((left - (double)sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    int rc = pthread_cond_timedwait(&bt->have_work, &bt->mu, &ts);
    if (rc != 0 && rc != ETIMEDOUT) serve_check_pthread(rc, "pthread_cond_timedwait");
  }
}

/* Unlinks (mu held) the jobs of the next batch; returns the first, the batch's samples
   in *total. Batching on: whole jobs while they fit; off: one job. */
static serve_job_t *take_batch(serve_batcher_t *bt, int *total) {
  serve_job_t *first = bt->head, *last = first;
  int sum = first->n;
  if (bt->cfg.enabled)
    while (last->next && sum + last->next->n <= bt->cfg.max_batch) {
      last = last->next;
      sum += last->n;
    }
  bt->head = last->next;
  if (!bt->head) bt->tail = NULL;
  last->next = NULL;
  bt->queued_samples -= sum;
  *total = sum;
  return first;
}

static void run_batch(serve_batcher_t *bt, serve_job_t *jobs, int total) {
  char err[160];
  if (!jobs->next) { /* one job: its own buffers, no copies */
    if (run_forward(bt, jobs->x, jobs->n, jobs->probs, jobs->err, sizeof jobs->err) != 0)
      jobs->status = -1;
    return;
  }
  /* several jobs: total <= max_batch, side by side in stage; the probabilities are
     copied back per job from the model's own softmax output. */
  size_t at = 0;
  for (serve_job_t *j = jobs; j; j = j->next) {
    memcpy(bt->stage + at * bt->per, j->x, (size_t)j->n * bt->per * sizeof(float));
    at += (size_t)j->n;
  }
  if (nn_model_forward(bt->model, bt->stage, total, 0) != NN_OK) {
    snprintf(err, sizeof err, "forward pass failed: %s", nn_last_error());
    for (serve_job_t *j = jobs; j; j = j->next) {
      j->status = -1;
      snprintf(j->err, sizeof j->err, "%s", err);
    }
    return;
  }
  const float *logits = nn_model_logits(bt->model);
  at = 0;
  for (serve_job_t *j = jobs; j; j = j->next) {
    softmax_rows(logits + at * (size_t)bt->classes, j->n, bt->classes, j->probs);
    at += (size_t)j->n;
  }
}

static void *worker_main(void *arg) {
  serve_batcher_t *bt = arg;
  serve_lock(&bt->mu);
  for (;;) {
    while (!bt->head && !bt->stopping)
      serve_check_pthread(pthread_cond_wait(&bt->have_work, &bt->mu), "pthread_cond_wait");
    if (!bt->head) break; /* stopping, and every job answered */
    wait_for_company(bt);
    int total = 0;
    serve_job_t *jobs = take_batch(bt, &total);
    serve_unlock(&bt->mu);
    run_batch(bt, jobs, total);
    serve_lock(&bt->mu);
    bt->stats.forwards += (uint64_t)((total + bt->cfg.max_batch - 1) / bt->cfg.max_batch);
    bt->stats.samples += (uint64_t)total;
    for (serve_job_t *j = jobs, *next; j; j = next) { /* j is its caller's again at done */
      next = j->next;
      j->done = 1;
      bt->stats.jobs++;
      serve_check_pthread(pthread_cond_signal(&j->answered), "pthread_cond_signal");
    }
  }
  serve_unlock(&bt->mu);
  return NULL;
}

int serve_batcher_start(serve_batcher_t **out, nn_model_t *model, const serve_batching_t *b,
                        char *err, size_t errlen) {
  *out = NULL;
  if (b->max_batch < 1) {
    snprintf(err, errlen, "max batch size %d: expected at least 1", b->max_batch);
    return -1;
  }
  serve_batcher_t *bt = calloc(1, sizeof *bt);
  if (!bt) {
    snprintf(err, errlen, "out of memory for the batcher");
    return -1;
  }
  int c, h, w;
  nn_model_input_shape(model, &c, &h, &w);
  bt->model = model;
  bt->cfg = *b;
  bt->classes = nn_model_num_classes(model);
  bt->per = (size_t)c * h * w;
  bt->stage = malloc((size_t)b->max_batch * bt->per * sizeof(float));
  pthread_condattr_t ca;
  int rc = bt->stage ? 0 : ENOMEM;
  if (rc == 0) rc = pthread_condattr_init(&ca);
  if (rc == 0) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_mutex_init(&bt->mu, NULL);
  if (rc == 0) rc = pthread_cond_init(&bt->have_work, &ca);
  if (rc == 0) rc = pthread_create(&bt->worker, NULL, worker_main, bt);
  if (rc != 0) {
    snprintf(err, errlen, "starting the batcher: %s", strerror(rc));
    free(bt->stage);
    free(bt);
    return -1;
  }
  *out = bt;
  return 0;
}

int serve_batcher_run(serve_batcher_t *bt, serve_job_t *job) {
  job->status = 0;
  job->done = 0;
  job->next = NULL;
  job->err[0] = '\0';
  serve_lock(&bt->mu);
  if (bt->stopping) {
    serve_unlock(&bt->mu);
    snprintf(job->err, sizeof job->err, "the model is being unloaded");
    return -1;
  }
  /* Its own condition: the worker wakes this job's thread only, not every waiting one
     at every batch. */
  serve_check_pthread(pthread_cond_init(&job->answered, NULL), "pthread_cond_init");
  job->queued_at = util_now_s();
  if (bt->tail) bt->tail->next = job;
  else bt->head = job;
  bt->tail = job;
  bt->queued_samples += job->n;
  serve_check_pthread(pthread_cond_signal(&bt->have_work), "pthread_cond_signal");
  while (!job->done)
    serve_check_pthread(pthread_cond_wait(&job->answered, &bt->mu), "pthread_cond_wait");
  serve_unlock(&bt->mu);
  pthread_cond_destroy(&job->answered);
  return job->status;
}

void serve_batcher_stop(serve_batcher_t *bt) {
  if (!bt) return;
  serve_lock(&bt->mu);
  bt->stopping = 1;
  serve_check_pthread(pthread_cond_broadcast(&bt->have_work), "pthread_cond_broadcast");
  serve_unlock(&bt->mu);
  serve_check_pthread(pthread_join(bt->worker, NULL), "pthread_join");
  pthread_cond_destroy(&bt->have_work);
  pthread_mutex_destroy(&bt->mu);
  nn_model_free(bt->model);
  free(bt->stage);
  free(bt);
}

void serve_batcher_stats(serve_batcher_t *bt, serve_batcher_stats_t *st) {
  serve_lock(&bt->mu);
  *st = bt->stats;
  serve_unlock(&bt->mu);
}

int serve_batcher_classes(const serve_batcher_t *bt) { return bt->classes; }
