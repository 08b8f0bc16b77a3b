/* train/pipeline_step.c: one pipeline step (the schedules and the weights: see
   train/pipeline.c) and the gather of the whole model. */
#include "train/pipeline_internal.h"
#include "util/clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one step carries between its micro-batches. */
typedef struct {
  const float *x;
  const int32_t *y;
  int n, M;                       /* M: micro-batches of this step (fewer than the
                                     pipeline's when n is smaller: an epoch's tail) */
  int size[1024], off[1024];      /* micro-batch k: samples [off, off + size) */
  double loss_sum, weight;        /* weight: of the gradients summed so far (0: none) */
  long long correct;
  char *err;
  size_t errlen;
} step_t;

static int nn_fail(step_t *st, const char *what) {
  snprintf(st->err, st->errlen, "%s: %s", what, nn_last_error());
  return -1;
}

static int mpi_fail(step_t *st, const char *what, int peer) {
  snprintf(st->err, st->errlen, "%s (rank %d) failed", what, peer);
  return -1;
}

/* Micro-batch k's activation set in use (a free one for its forward): each micro-batch
   in flight keeps its activations in its own set, so switching costs no copy. */
static int use_set(train_pipeline_t *p, step_t *st, int k) {
  int first = p->bounds[p->stage], last = p->bounds[p->stage + 1];
  double t0 = util_now_s();
  if (!p->stash[k] && p->npool > 0) p->stash[k] = p->pool[--p->npool];
  if (!p->stash[k] &&
      nn_range_acts_create(p->m, first, last, p->micro_n, &p->stash[k]) != NN_OK)
    return nn_fail(st, "pipeline activation set");
  if (nn_model_range_use(p->m, first, last, p->stash[k]) != NN_OK)
    return nn_fail(st, "pipeline activation set");
  p->stats.copy_s += util_now_s() - t0;
  return 0;
}

/* Micro-batch k's backward is done: its activations are no longer needed. */
static void release(train_pipeline_t *p, int k) {
  if (p->stash[k]) {
    p->pool[p->npool++] = p->stash[k];
    p->stash[k] = NULL;
  }
  p->inflight--;
}

static int forward(train_pipeline_t *p, step_t *st, int k) {
  int first = p->bounds[p->stage], last = p->bounds[p->stage + 1], nk = st->size[k];
  const float *in = NULL;
  if (p->steps_begun - 1 == p->fail_step && k == (p->stage == 0 && st->M > 1)) {
    snprintf(st->err, st->errlen, "HVD_TRAIN_TEST_PIPE_FAIL_STEP: step %lld fails here",
             p->fail_step);
    return -1;
  }
  if (p->stage == 0) {
    int c, h, w;
    nn_model_input_shape(p->m, &c, &h, &w);
    in = st->x + (size_t)st->off[k] * c * h * w;
  } else {
    if (train_pipeline_wait_peer(p, &p->recv_act[k], p->rank - 1, "activations", st->err,
                                 st->errlen) != 0)
      return -1;
    in = p->act_in[k];
  }
  double t0 = util_now_s();
  if (use_set(p, st, k) != 0) return -1;
  if (nn_model_forward_range(p->m, first, last, in, nk, 1) != NN_OK)
    return nn_fail(st, "pipeline forward");
  if (p->stage == p->S - 1) {
    float loss = 0;
    int correct = 0;
    if (nn_model_loss(p->m, st->y + st->off[k], &loss, &correct) != NN_OK)
      return nn_fail(st, "pipeline loss");
    st->loss_sum += (double)loss * nk;
    st->correct += correct;
  } else {
    size_t floats = (size_t)nk * p->out_floats;
    double c0 = util_now_s();
    memcpy(p->act_out[k], nn_model_layer_out(p->m, last - 1), floats * sizeof(float));
    p->stats.copy_s += util_now_s() - c0;
    if (MPI_Isend(p->act_out[k], (int)(floats * sizeof(float)), MPI_BYTE, p->rank + 1, TAG_ACT + k, p->comm,
                  &p->send_act[k]) != MPI_SUCCESS)
      return mpi_fail(st, "MPI_Isend of activations", p->rank + 1);
  }
  if (++p->inflight > p->peak_inflight) p->peak_inflight = p->inflight;
  p->stats.busy_s += util_now_s() - t0;
  train_pipeline_note(p, 'F', k, t0);
  return 0;
}

static int backward(train_pipeline_t *p, step_t *st, int k) {
  int first = p->bounds[p->stage], last = p->bounds[p->stage + 1];
  int last_stage = p->stage == p->S - 1;
  /* A stage whose output gradient nobody computes (a flatten of the input alone) has
     no parameters: nothing to do but let the stash go. */
  if (!last_stage && !p->next_sends_dx) {
    release(p, k);
    return 0;
  }
  if (!last_stage && train_pipeline_wait_peer(p, &p->recv_grad[k], p->rank + 1, "gradients",
                                              st->err, st->errlen) != 0)
    return -1;
  double t0 = util_now_s();
  if (use_set(p, st, k) != 0) return -1;
  double w = (double)st->size[k] / st->n;
  if (st->weight != 0 && w != st->weight &&
      nn_model_scale_grads(p->m, p->pbegin, p->pend, (float)(st->weight / w)) != NN_OK)
    return nn_fail(st, "pipeline gradient weights");
  st->weight = w;
  if (nn_model_backward_range(p->m, first, last, last_stage ? NULL : p->grad_in[k], NULL,
                              NULL) != NN_OK)
    return nn_fail(st, "pipeline backward");
  release(p, k);
  if (p->wants_dx) {
    size_t floats = (size_t)st->size[k] * p->in_floats;
    double c0 = util_now_s();
    memcpy(p->grad_out[k], nn_model_range_input_grad(p->m, first), floats * sizeof(float));
    p->stats.copy_s += util_now_s() - c0;
    if (MPI_Isend(p->grad_out[k], (int)(floats * sizeof(float)), MPI_BYTE, p->rank - 1, TAG_GRAD + k, p->comm,
                  &p->send_grad[k]) != MPI_SUCCESS)
      return mpi_fail(st, "MPI_Isend of gradients", p->rank - 1);
  }
  p->stats.busy_s += util_now_s() - t0;
  train_pipeline_note(p, 'B', k, t0);
  return 0;
}

/* Every receive of the step, at its start. */
static int post_receives(train_pipeline_t *p, step_t *st) {
  for (int k = 0; k < st->M; k++) {
    if (p->stage > 0 &&
        MPI_Irecv(p->act_in[k], (int)((size_t)st->size[k] * p->in_floats * sizeof(float)), MPI_BYTE,
                  p->rank - 1, TAG_ACT + k, p->comm, &p->recv_act[k]) != MPI_SUCCESS)
      return mpi_fail(st, "MPI_Irecv of activations", p->rank - 1);
    if (p->next_sends_dx &&
        MPI_Irecv(p->grad_in[k], (int)((size_t)st->size[k] * p->out_floats * sizeof(float)), MPI_BYTE,
                  p->rank + 1, TAG_GRAD + k, p->comm, &p->recv_grad[k]) != MPI_SUCCESS)
      return mpi_fail(st, "MPI_Irecv of gradients", p->rank + 1);
  }
  return 0;
}

/* The schedule (train/pipeline.c draws both). */
static int run_schedule(train_pipeline_t *p, step_t *st) {
  int M = st->M, rc = 0;
  if (p->schedule == TRAIN_PIPE_GPIPE) {
    for (int k = 0; k < M && rc == 0; k++) rc = forward(p, st, k);
    for (int k = 0; k < M && rc == 0; k++) rc = backward(p, st, k);
    return rc;
  }
  int warm = p->S - 1 - p->stage < M ? p->S - 1 - p->stage : M;
  for (int k = 0; k < warm && rc == 0; k++) rc = forward(p, st, k);
  for (int i = 0; i < M - warm && rc == 0; i++) {
    rc = forward(p, st, warm + i);
    if (rc == 0) rc = backward(p, st, i);
  }
  for (int k = M - warm; k < M && rc == 0; k++) rc = backward(p, st, k);
  return rc;
}

/* The replica's batch as its stage 0 took it (train: only stage 0 reads the data set):
   stage 0 sends its sample count and labels to the other stages (the last computes the
   loss; the others need the count), which wait for them. An invalid count goes too, so
   that every stage refuses the step alike. */
static int share_batch(train_pipeline_t *p, step_t *st) {
  int first = p->rank - p->stage, cap = p->M * p->micro_n;
  if (p->stage == 0) {
    int labels = st->n > 0 && st->n <= cap ? st->n : 0;
    p->batch[0] = st->n;
    if (labels) memcpy(p->batch + 1, st->y, (size_t)labels * sizeof(int32_t));
    for (int s = 1; s < p->S; s++)
      if (MPI_Isend(p->batch, (int)((1 + labels) * sizeof(int32_t)), MPI_BYTE, first + s,
                    TAG_BATCH, p->comm, &p->batch_req[s]) != MPI_SUCCESS)
        return mpi_fail(st, "MPI_Isend of the batch", first + s);
    return 0;
  }
  if (MPI_Irecv(p->batch, (int)((1 + cap) * sizeof(int32_t)), MPI_BYTE, first, TAG_BATCH,
                p->comm, &p->batch_req[0]) != MPI_SUCCESS)
    return mpi_fail(st, "MPI_Irecv of the batch", first);
  if (train_pipeline_wait_peer(p, &p->batch_req[0], first, "the batch", st->err,
                               st->errlen) != 0)
    return -1;
  st->n = p->batch[0];
  st->x = NULL;
  st->y = p->batch + 1;
  return 0;
}

/* The sends of the step, done. */
static int finish_sends(train_pipeline_t *p, step_t *st) {
  for (int s = 1; p->stage == 0 && s < p->S; s++)
    if (p->batch_req[s] != MPI_REQUEST_NULL &&
        train_pipeline_wait_peer(p, &p->batch_req[s], p->rank + s, "receipt of the batch",
                                 st->err, st->errlen) != 0)
      return -1;
  for (int k = 0; k < st->M; k++) {
    if (p->send_act[k] != MPI_REQUEST_NULL &&
        train_pipeline_wait_peer(p, &p->send_act[k], p->rank + 1, "receipt of activations",
                                 st->err, st->errlen) != 0)
      return -1;
    if (p->send_grad[k] != MPI_REQUEST_NULL &&
        train_pipeline_wait_peer(p, &p->send_grad[k], p->rank - 1, "receipt of gradients",
                                 st->err, st->errlen) != 0)
      return -1;
  }
  return 0;
}

/* The stage's trainable gradients averaged over the replicas (frozen ones (--freeze)
   have none worth sending, as the unsplit run's buckets skip them), the update, and the
   loss sums. */
static int reduce_and_update(train_pipeline_t *p, step_t *st, float lr) {
  if (st->weight != 0 && nn_model_scale_grads(p->m, p->pbegin, p->pend, (float)st->weight) != NN_OK)
    return nn_fail(st, "pipeline gradient weights");
  size_t from = nn_model_trainable_from(p->m), b = p->pbegin > from ? p->pbegin : from;
  hvd_status_t hs = HVD_OK;
  if (p->R > 1 && p->pend > b) {
    hvd_options_t o = {.process_set = p->sets[p->stage]};
    float *g = nn_model_grads(p->m) + b;
    hs = hvd_allreduce_ex("pipe.grads", g, g, p->pend - b, HVD_FLOAT32, HVD_AVERAGE, &o);
  }
  if (hs != HVD_OK) {
    snprintf(st->err, st->errlen, "stage %d's gradient allreduce: %s", p->stage, hvd_last_error());
    return -1;
  }
  if (nn_model_optim_step(p->m, lr) != NN_OK) return nn_fail(st, "optimizer step");
  double sums[2] = {p->stage == p->S - 1 ? st->loss_sum : 0.0,
                    p->stage == p->S - 1 ? (double)st->correct : 0.0};
  hs = hvd_allreduce("pipe.loss", sums, sums, 2, HVD_FLOAT64, HVD_SUM);
  if (hs != HVD_OK) {
    snprintf(st->err, st->errlen, "the loss's allreduce: %s", hvd_last_error());
    return -1;
  }
  st->loss_sum = sums[0];
  st->correct = (long long)sums[1];
  return 0;
}

int train_pipeline_step(train_pipeline_t *p, const float *x, const int32_t *y, int n,
                        float lr, double *loss_sum, long long *correct, char *err,
                        size_t errlen) {
  step_t *st = calloc(1, sizeof(*st));
  if (!st) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  /* Every stage of a replica takes stage 0's n, so all agree on the micro-batches. A
     replica without samples (a shard's tail) still reduces (zeros) and steps. */
  *st = (step_t){.x = x, .y = y, .n = n, .err = err, .errlen = errlen};
  int rc = 0;
  if (p->failed_step >= 0) {
    snprintf(err, errlen, "the pipeline's step %lld failed: its stages no longer agree on "
             "the messages in flight; restart (train resumes from its newest checkpoint)",
             p->failed_step);
    free(st);
    return -1;
  }
  p->steps_begun++;
  double t0 = util_now_s();
  if (p->S > 1) rc = share_batch(p, st);
  n = st->n;
  st->M = n < p->M ? n : p->M;
  if (rc == 0 && (n < 0 || p->M > 1024 || (st->M > 0 && (n + st->M - 1) / st->M > p->micro_n))) {
    snprintf(err, errlen, "a batch of %d samples cannot make %d micro-batches of at most %d",
             n, p->M, p->micro_n);
    rc = -1;
  }
  for (int k = 0, off = 0; rc == 0 && k < st->M; k++) {
    st->size[k] = n / st->M + (k < n % st->M);
    st->off[k] = off;
    off += st->size[k];
  }
  p->step_start_s = t0;
  p->ntrace = 0;
  if (rc == 0) rc = nn_model_zero_grads(p->m) == NN_OK ? 0 : nn_fail(st, "zeroing gradients");
  if (rc == 0) rc = post_receives(p, st);
  if (rc == 0) rc = run_schedule(p, st);
  /* The model's own buffers back, for whatever uses the whole model next. */
  if (nn_model_range_use(p->m, p->bounds[p->stage], p->bounds[p->stage + 1], NULL) != NN_OK &&
      rc == 0)
    rc = nn_fail(st, "pipeline activation set");
  if (rc == 0) rc = finish_sends(p, st);
  if (rc == 0) {
    p->stats.wall_s += util_now_s() - t0;
    p->stats.steps++;
    rc = reduce_and_update(p, st, lr);
  }
  if (rc != 0) {
    train_pipeline_drop_requests(p);
    p->failed_step = p->steps_begun - 1;
  }
  if (rc == 0 && loss_sum) *loss_sum = st->loss_sum;
  if (rc == 0 && correct) *correct = st->correct;
  free(st);
  return rc;
}

static int gather_stats(train_pipeline_t *p, char *err, size_t errlen);

/* The parameters, and the optimizer's state laid out as they are (one or more arrays of
   one float per trainable parameter, params[from, param_len) with --freeze: SGD's
   momentum, Adam's m and v), from each stage's first rank. */
int train_pipeline_gather(train_pipeline_t *p, char *err, size_t errlen) {
  size_t plen = nn_model_param_len(p->m), nstate = 0;
  size_t from = nn_model_trainable_from(p->m), per = plen - from;
  float *state = nn_model_optim_state(p->m, &nstate);
  size_t arrays = state && per && nstate % per == 0 ? nstate / per : 0;
  for (size_t a = 0; a <= arrays; a++) {
    for (int s = 0; s < p->S; s++) {
      size_t b, e;
      nn_model_range_params(p->m, p->bounds[s], p->bounds[s + 1], &b, &e);
      if (a > 0 && b < from) b = from < e ? from : e;  /* frozen: no optimizer state */
      if (e == b) continue;
      float *base = a == 0 ? nn_model_params(p->m) + b : state + (a - 1) * per + (b - from);
      char name[64];
      snprintf(name, sizeof(name), "pipe.gather.%zu.%d", a, s);
      if (hvd_broadcast(name, base, e - b, HVD_FLOAT32, s) != HVD_OK) {
        snprintf(err, errlen, "gathering stage %d's parameters: %s", s, hvd_last_error());
        return -1;
      }
    }
  }
  return gather_stats(p, err, errlen);
}

/* Stage s's batch-norm statistics and counters from its first rank (s) to the ranks of
   the other stages; the replicas of stage s keep their own (they advance on their own
   samples until train_pipeline_average_stats), receiving into scratch. Every rank says
   whether its scratch was allocated before any broadcast, so that all take part in
   each one or all fail alike. */
static int gather_stats(train_pipeline_t *p, char *err, size_t errlen) {
  size_t b, e;
  int cb, ce;
  nn_model_range_buffers(p->m, p->bounds[p->stage], p->bounds[p->stage + 1], &b, &e, &cb, &ce);
  int keeps = p->rank != p->stage;
  float *fb = keeps ? malloc((e - b + 1) * sizeof(float)) : NULL;
  int64_t *cnt = keeps ? malloc((size_t)(ce - cb + 1) * sizeof(int64_t)) : NULL;
  int32_t mine = (keeps && (!fb || !cnt)) || p->gather_nomem ? p->rank : INT32_MAX, first;
  hvd_status_t hs = hvd_allreduce("pipe.gather.nomem", &mine, &first, 1, HVD_INT32, HVD_MIN);
  if (hs == HVD_OK && first != INT32_MAX) {
    snprintf(err, errlen, "gathering the batch-norm statistics: rank %d is out of memory "
             "for %zu floats of scratch", (int)first, e - b + 1);
    hs = HVD_ERR_INVALID_ARGUMENT;
  } else if (hs != HVD_OK) {
    snprintf(err, errlen, "gathering the batch-norm statistics: %s", hvd_last_error());
  }
  for (int s = 0; hs == HVD_OK && s < p->S; s++) {
    nn_model_range_buffers(p->m, p->bounds[s], p->bounds[s + 1], &b, &e, &cb, &ce);
    int keep = p->stage == s && keeps;
    char name[64];
    snprintf(name, sizeof(name), "pipe.gather.buffers.%d", s);
    if (e > b) hs = hvd_broadcast(name, keep ? fb : nn_model_buffers(p->m) + b, e - b,
                                  HVD_FLOAT32, s);
    snprintf(name, sizeof(name), "pipe.gather.counters.%d", s);
    if (hs == HVD_OK && ce > cb)
      hs = hvd_broadcast(name, keep ? cnt : nn_model_counters(p->m) + cb, (size_t)(ce - cb),
                         HVD_INT64, s);
    if (hs != HVD_OK)
      snprintf(err, errlen, "gathering stage %d's batch-norm statistics: %s", s,
               hvd_last_error());
  }
  free(fb);
  free(cnt);
  return hs == HVD_OK ? 0 : -1;
}

int train_pipeline_average_stats(train_pipeline_t *p, char *err, size_t errlen) {
  size_t b, e;
  int cb, ce;
  nn_model_range_buffers(p->m, p->bounds[p->stage], p->bounds[p->stage + 1], &b, &e, &cb, &ce);
  hvd_options_t o = {.process_set = p->sets[p->stage]};
  hvd_status_t hs = HVD_OK;
  float *fb = nn_model_buffers(p->m) + b;
  int64_t *cnt = nn_model_counters(p->m) + cb;
  if (p->R > 1 && e > b)
    hs = hvd_allreduce_ex("pipe.stats.buffers", fb, fb, e - b, HVD_FLOAT32, HVD_AVERAGE, &o);
  if (hs == HVD_OK && p->R > 1 && ce > cb)
    hs = hvd_allreduce_ex("pipe.stats.counters", cnt, cnt, (size_t)(ce - cb), HVD_INT64,
                          HVD_MAX, &o);
  if (hs != HVD_OK) {
    snprintf(err, errlen, "averaging stage %d's batch-norm statistics over its replicas: %s",
             p->stage, hvd_last_error());
    return -1;
  }
  return 0;
}
