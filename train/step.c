/* train/step.c: one data-parallel training step (see step.h). */
#include "train/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn_cuda.h"
#include "train/ps_update.h"
#include "util/clock.h"

const char *const train_phase_names[TRAIN_NUM_PHASES] = {"forward", "backward",
                                                         "allreduce wait", "optimizer"};

/* nn's grad-ready callback: gradients [ready_from, count) are final. Scales what is new
   of them when the step is uneven, then lets the buckets that are complete start their
   allreduce. The first failure of each kind is kept for after backward. */
static void grad_ready(void *ctx, size_t ready_from) {
  train_step_t *t = ctx;
  if (t->scale != 1.0f && ready_from < t->scaled_from) {
    nn_status_t s = nn_model_scale_grads(t->model, ready_from, t->scaled_from, t->scale);
    if (s != NN_OK && t->nn_status == NN_OK) t->nn_status = s;
  }
  if (ready_from < t->scaled_from) t->scaled_from = ready_from;
  if (t->buckets) {
    /* The buckets start at the trainable gradients (nn_model_trainable_from). */
    size_t from = nn_model_trainable_from(t->model);
    hvd_status_t s = hvd_grad_buckets_ready(t->buckets, ready_from > from ? ready_from - from : 0);
    if (s != HVD_OK && t->hvd_status == HVD_OK) t->hvd_status = s;
  }
  if (t->ps) {
    hvd_status_t s = train_ps_ready(t->ps, ready_from);
    if (s != HVD_OK && t->hvd_status == HVD_OK) t->hvd_status = s;
  }
}


static int nn_failed(train_step_t *t, const char *what, nn_status_t s) {
  t->failed = what;
  t->nn_status = s;
  t->hvd_status = HVD_OK;
  return -1;
}

static int hvd_failed(train_step_t *t, const char *what, hvd_status_t s) {
  t->failed = what;
  t->hvd_status = s;
  t->nn_status = NN_OK;
  return -1;
}

/* A parameter server's step: pushes what is left, waits for the new values. */
static int ps_step(train_step_t *t, int gpu, int flags) {
  t->phase_start[TRAIN_PHASE_WAIT] = util_now_s();
  hvd_status_t h = train_ps_wait(t->ps);
  if (h != HVD_OK) return hvd_failed(t, "parameter-server push and pull", h);
  t->phase_start[TRAIN_PHASE_UPDATE] = util_now_s();
  if (gpu && (flags & TRAIN_STEP_SYNC)) {
    nn_status_t s = nn_cuda_synchronize();
    if (s != NN_OK) return nn_failed(t, "synchronising the GPU", s);
  }
  t->phase_start[TRAIN_NUM_PHASES] = util_now_s();
  return 0;
}

int train_step_run(train_step_t *t, const float *x, const int32_t *y, int n, int total,
                   float lr, int flags) {
  const int gpu = nn_model_device(t->model) == NN_DEVICE_CUDA;
  const int fetch = (flags & TRAIN_STEP_FETCH_LOSS) || !gpu;
  const int last = !(flags & TRAIN_STEP_ACCUMULATE);
  const size_t len = nn_model_param_len(t->model);
  const double pre = t->predivide > 0 && t->predivide != 1.0f ? t->predivide : 1.0;
  nn_status_t s;
  t->failed = NULL;
  t->nn_status = NN_OK;
  t->hvd_status = HVD_OK;
  t->loss = NAN;
  t->correct = 0;
  t->scaled_from = len;
  t->scale = 1.0f;

  t->phase_start[TRAIN_PHASE_FORWARD] = util_now_s();
  if (t->ps && !train_ps_is_worker(t->ps)) {   /* a dedicated server: nothing to compute */
    for (int p = TRAIN_PHASE_BACKWARD; p <= TRAIN_NUM_PHASES; p++) t->phase_start[p] = util_now_s();
    return 0;
  }
  double weight = 1.0;  /* this pass's share, size * n / total (1 on an even step) */
  if (n > 0) {
    s = nn_model_forward(t->model, x, n, 1);
    if (s != NN_OK) return nn_failed(t, "forward", s);
    s = nn_model_loss(t->model, y, fetch ? &t->loss : NULL, fetch ? &t->correct : NULL);
    if (s != NN_OK) return nn_failed(t, "loss", s);
    if (total > 0 && (long long)n * t->size != total) weight = (double)t->size * n / total;
  }

  t->phase_start[TRAIN_PHASE_BACKWARD] = util_now_s();
  if (n > 0) {
    const int accumulate = t->window_passes > 0;
    /* The sum so far holds each earlier pass at its weight over the previous pass's:
       bring it to this pass's (see step.h). */
    if (accumulate && weight != t->window_weight) {
      s = nn_model_scale_grads(t->model, 0, len, (float)(t->window_weight / weight));
      if (s != NN_OK) return nn_failed(t, "scaling the accumulated gradients", s);
    }
    t->window_passes++;
    t->window_weight = weight;
    if (last) t->scale = (float)(weight / pre);
    /* Without buckets the callback still applies an uneven step's scale. */
    const int need_callback = last && (t->buckets || t->ps || t->scale != 1.0f);
    s = accumulate ? nn_model_backward_accumulate(t->model, need_callback ? grad_ready : NULL, t)
                   : nn_model_backward(t->model, need_callback ? grad_ready : NULL, t);
    if (s != NN_OK) return nn_failed(t, "backward", s);
  } else if (last && t->window_passes > 0) {
    /* No sample for this rank in the window's last pass: its earlier passes count. */
    t->scale = (float)(t->window_weight / pre);
  } else if (last) {
    s = nn_model_zero_grads(t->model);
    if (s != NN_OK) return nn_failed(t, "zeroing the gradients", s);
  }
  if (!last) {
    for (int p = TRAIN_PHASE_WAIT; p <= TRAIN_NUM_PHASES; p++) t->phase_start[p] = util_now_s();
    return 0;
  }
  t->window_passes = 0;
  grad_ready(t, 0);   /* whatever the callback has not covered yet */
  if (t->nn_status != NN_OK) return nn_failed(t, "scaling the gradients", t->nn_status);
  if (t->hvd_status != HVD_OK) return hvd_failed(t, "gradient allreduce", t->hvd_status);

  if (t->ps) return ps_step(t, gpu, flags);
  t->phase_start[TRAIN_PHASE_WAIT] = util_now_s();
  if (t->buckets) {
    hvd_status_t h = hvd_grad_buckets_wait(t->buckets);
    if (h != HVD_OK) return hvd_failed(t, "gradient allreduce", h);
  }
  /* Predivide: the buckets summed g / X over the ranks; X / size makes it the average
     (without buckets nothing was summed: X undoes the division). */
  if (pre != 1.0) {
    s = nn_model_scale_grads(t->model, 0, len,
                             (float)(t->buckets ? pre / t->size : pre));
    if (s != NN_OK) return nn_failed(t, "scaling the gradients after the allreduce", s);
  }

  t->phase_start[TRAIN_PHASE_UPDATE] = util_now_s();
  /* In fp16/bf16 on a GPU it also unscales the gradients, skips the update on inf/NaN
     and adapts the loss scale, all on the device. */
  s = nn_model_optim_step(t->model, lr);
  if (s != NN_OK) return nn_failed(t, "optimizer step", s);
  if (gpu && (flags & TRAIN_STEP_SYNC)) {
    s = nn_cuda_synchronize();
    if (s != NN_OK) return nn_failed(t, "synchronising the GPU", s);
  }
  t->phase_start[TRAIN_NUM_PHASES] = util_now_s();
  return 0;
}

int train_buckets_at_params(hvd_grad_buckets_t *b, const nn_model_t *m, char *err,
                            size_t errlen) {
  size_t n = nn_model_param_starts(m, NULL);
  size_t *starts = malloc((n ? n : 1) * sizeof *starts);
  if (starts == NULL) {
    snprintf(err, errlen, "out of memory for %zu parameter offsets", n);
    return -1;
  }
  nn_model_param_starts(m, starts);
  /* The buckets cover the trainable gradients only (from nn_model_trainable_from on). */
  size_t from = nn_model_trainable_from(m), kept = 0;
  for (size_t k = 0; k < n; k++)
    if (starts[k] >= from) starts[kept++] = starts[k] - from;
  hvd_status_t s = hvd_grad_buckets_set_params(b, starts, kept);
  free(starts);
  if (s != HVD_OK) {
    snprintf(err, errlen, "bucket boundaries at the parameters: %s", hvd_last_error());
    return -1;
  }
  return 0;
}
