/* train/pipeline_plan.c: cutting a model into pipeline stages balanced by measured time.

   Each layer is timed on this machine (the forward and backward of a micro-batch, the
   best of PASSES passes so that a busy moment does not count), and the layer list is cut
   into S contiguous stages that minimise the slowest stage: the pipeline runs at the
   pace of its slowest stage. A stage that keeps several micro-batches in flight also
   copies each one's activations out of the model's buffers and back (the stash): its
   bytes times the copy time measured here count too, so that the activation-heavy
   first layers of a convolutional network do not make the slowest stage (1F1B's last
   stage copies nothing: its backward follows its forward). Only cuts that no connection crosses are allowed
   (nn_model_range_cut_ok: a residual block stays whole). Dynamic programming over
   (stages, layers): S * L^2 steps, nothing for the layer counts of real models. */
#include "train/pipeline_plan.h"
#include "util/clock.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSES 3

/* The model's running statistics, counters and dropout step, put back after timing. */
typedef struct {
  float *buffers;
  int64_t *counters;
  size_t nbuf, ncnt;
  uint64_t dropout_step;
} saved_state_t;

static int save_state(nn_model_t *m, saved_state_t *s) {
  s->nbuf = nn_model_num_buffers(m);
  s->ncnt = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++)
    s->ncnt += nn_model_slice(m, i)->kind == NN_SLICE_COUNTER;
  s->buffers = malloc((s->nbuf ? s->nbuf : 1) * sizeof(float));
  s->counters = malloc((s->ncnt ? s->ncnt : 1) * sizeof(int64_t));
  if (!s->buffers || !s->counters) return 0;
  if (s->nbuf) memcpy(s->buffers, nn_model_buffers(m), s->nbuf * sizeof(float));
  if (s->ncnt) memcpy(s->counters, nn_model_counters(m), s->ncnt * sizeof(int64_t));
  s->dropout_step = nn_model_dropout_step(m);
  return 1;
}

static void restore_state(nn_model_t *m, saved_state_t *s) {
  if (s->nbuf) memcpy(nn_model_buffers(m), s->buffers, s->nbuf * sizeof(float));
  if (s->ncnt) memcpy(nn_model_counters(m), s->counters, s->ncnt * sizeof(int64_t));
  nn_model_set_dropout_step(m, s->dropout_step);
  free(s->buffers);
  free(s->counters);
}

int train_pipeline_time_layers(nn_model_t *m, int micro_n, double *layer_s, char *err,
                               size_t errlen) {
  int c, h, w, L = nn_model_num_layers(m);
  nn_model_input_shape(m, &c, &h, &w);
  float *x = calloc((size_t)micro_n * c * h * w, sizeof(float));
  int32_t *y = calloc((size_t)micro_n, sizeof(int32_t));
  saved_state_t st = {0};
  if (!x || !y || !save_state(m, &st)) {
    free(x);
    free(y);
    free(st.buffers);
    free(st.counters);
    snprintf(err, errlen, "out of memory timing the layers");
    return -1;
  }
  for (int i = 0; i < L; i++) layer_s[i] = DBL_MAX;
  nn_status_t s = NN_OK;
  for (int pass = 0; pass < PASSES && s == NN_OK; pass++) {
    s = nn_model_forward(m, x, micro_n, 1);
    if (s == NN_OK) s = nn_model_loss(m, y, NULL, NULL);
    if (s == NN_OK) s = nn_model_backward(m, NULL, NULL);
    for (int i = 0; s == NN_OK && i < L; i++) {
      double f, b;
      nn_model_layer_times(m, i, &f, &b);
      if (f + b < layer_s[i]) layer_s[i] = f + b;
    }
  }
  restore_state(m, &st);
  free(x);
  free(y);
  if (s == NN_OK) s = nn_model_zero_grads(m);
  if (s != NN_OK) {
    snprintf(err, errlen, "timing the layers: %s", nn_last_error());
    return -1;
  }
  return 0;
}

double train_pipeline_stage_time(nn_model_t *m, const double *layer_s, int first, int last,
                                 int micro_n, double copy_s_per_byte, int stashes) {
  double t = 0;
  for (int i = first; i < last; i++) t += layer_s[i];
  if (stashes && copy_s_per_byte > 0)
    t += copy_s_per_byte * (double)nn_model_range_stash_bytes(m, first, last, micro_n);
  return t;
}

int train_pipeline_balance(nn_model_t *m, const double *layer_s, int S, int micro_n,
                           double copy_s_per_byte, int last_stashes, int *cuts, char *err,
                           size_t errlen) {
  int L = nn_model_num_layers(m);
  /* best[s][j]: the least slowest-stage time of layers [0, j) in s + 1 stages;
     from[s][j]: where its last stage starts. */
  double *best = malloc((size_t)S * (L + 1) * sizeof(double));
  int *from = malloc((size_t)S * (L + 1) * sizeof(int));
  if (!best || !from) {
    free(best);
    free(from);
    snprintf(err, errlen, "out of memory planning the pipeline");
    return -1;
  }
#define BEST(s, j) best[(size_t)(s) * (L + 1) + (j)]
#define FROM(s, j) from[(size_t)(s) * (L + 1) + (j)]
  for (int s = 0; s < S; s++)
    for (int j = 0; j <= L; j++) {
      BEST(s, j) = DBL_MAX;
      FROM(s, j) = -1;
      /* Stage s of [0, j) stashes unless it is the pipeline's last stage (j = L). */
      int stashes = j < L || s < S - 1 || last_stashes;
      if (s == 0) {
        if (j > 0)
          BEST(s, j) = train_pipeline_stage_time(m, layer_s, 0, j, micro_n, copy_s_per_byte,
                                                 stashes);
        continue;
      }
      for (int k = s; k < j; k++) {   /* the last stage is [k, j): a cut before k */
        if (BEST(s - 1, k) == DBL_MAX || !nn_model_range_cut_ok(m, k)) continue;
        double t = train_pipeline_stage_time(m, layer_s, k, j, micro_n, copy_s_per_byte,
                                             stashes);
        double worst = t > BEST(s - 1, k) ? t : BEST(s - 1, k);
        if (worst < BEST(s, j)) {
          BEST(s, j) = worst;
          FROM(s, j) = k;
        }
      }
    }
  int ok = BEST(S - 1, L) < DBL_MAX;
  for (int s = S - 1, j = L; ok && s > 0; s--) {
    cuts[s - 1] = FROM(s, j);
    j = FROM(s, j);
  }
#undef BEST
#undef FROM
  free(best);
  free(from);
  if (!ok) {
    snprintf(err, errlen, "%s cannot be cut into %d stages: it has fewer places that no "
             "connection crosses (a residual block stays whole)", nn_model_name(m), S);
    return -1;
  }
  return 0;
}
