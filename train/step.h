/* train/step.h: one data-parallel training step, the same for the train program and
   bench/cnn_bench: forward, loss, backward with each gradient bucket's allreduce
   started as soon as nn has finished it (hvd's grad buckets), the wait for the
   allreduces, the optimizer step. nn keeps the model, its gradients and its optimizer on
   the model's device, so the step has no device forks.

   Uneven steps: nn's loss is the mean over the local batch. The global mean gradient is
   sum_r n_r g_r / N; with an AVERAGE over `size` ranks each rank contributes
   g_r * size * n_r / N, which is g_r itself when the batches are equal (every step but
   possibly the last of an epoch). So the gradients are scaled only when that factor is
   not 1, bucket by bucket before its allreduce starts, where they live. A rank with no
   sample at a step (n = 0, the tail of a shorter shard) still joins every allreduce,
   with zeros, and takes the same optimizer step as the others.

   Gradient accumulation (Horovod's backward_passes_per_step, train's
   --batches-per-allreduce K): a window of K passes takes one optimizer step. The first
   K-1 passes (TRAIN_STEP_ACCUMULATE) run forward and backward only, summing into the
   gradients; the last one runs backward with the buckets, waits and steps. `total` is
   then the samples of the whole window over all ranks, and pass k of a rank weighs
   w_k = size * n_k / total, so the average over the ranks is the mean gradient over
   every sample of the window (the mean over a K-times larger batch). The weights are
   applied without a second buffer: before a pass whose weight differs from the
   previous one (only at an epoch's uneven tail), the sum so far is rescaled by
   w_prev / w_k; the last pass's callback multiplies everything by its w_k, bucket by
   bucket before each allreduce, as for a single pass.

   Predivide (Horovod's gradient_predivide_factor X): the gradients are multiplied by
   1/X before the sum over the ranks (in the same callback) and by X/size after it, so
   the result is the same average; the buckets must then SUM (HVD_SUM), not average. */
#ifndef TRAIN_STEP_H
#define TRAIN_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "hvd/hvd.h"
#include "nn/nn.h"

/* The phases of a step, in order; phase_start[] holds the clock at each one's start. */
typedef enum {
  TRAIN_PHASE_FORWARD,    /* forward and loss */
  TRAIN_PHASE_BACKWARD,   /* backward; the buckets' allreduces start during it */
  TRAIN_PHASE_WAIT,       /* the wait for the allreduces still in flight */
  TRAIN_PHASE_UPDATE,     /* the optimizer step */
  TRAIN_NUM_PHASES
} train_phase_t;
extern const char *const train_phase_names[TRAIN_NUM_PHASES];

/* Flags of train_step_run. */
enum {
  /* Fetch the loss and the number of correct predictions. On a GPU that waits for the
     forward kernels; on the CPU they are always there. */
  TRAIN_STEP_FETCH_LOSS = 1,
  /* On a GPU, wait for the whole step at its end (timing a step); without it the step
     only queues kernels. Nothing on the CPU. */
  TRAIN_STEP_SYNC = 2,
  /* Not the last pass of an accumulation window: backward sums into the gradients;
     no allreduce, no optimizer step (see above). */
  TRAIN_STEP_ACCUMULATE = 4,
};

typedef struct {
  /* Set by the caller. */
  nn_model_t *model;              /* with its optimizer (nn_model_optim_create) */
  hvd_grad_buckets_t *buckets;    /* over nn_model_grads_home(model); NULL: no allreduce */
  int size;                       /* ranks that share the global batch */
  float predivide;                /* Horovod's gradient_predivide_factor; 0 or 1: none.
                                     Other values need buckets that SUM */
  /* Parameter servers (train/ps_update.h) instead of buckets and the local optimizer:
     gradients pushed from the grad-ready callback, new values taken after backward. A
     dedicated server's step does nothing (its shards are served meanwhile). */
  struct train_ps *ps;
  /* The last step's results. */
  float loss;                     /* mean over this rank's samples; NAN if not fetched */
  int correct;                    /* correct predictions of this rank; 0 if not fetched */
  double phase_start[TRAIN_NUM_PHASES + 1];  /* util_now_s(); [TRAIN_NUM_PHASES]: the end */
  /* After a failure (train_step_run returned -1): what failed ("forward", "gradient
     allreduce", ...) and its status; the other status is OK. */
  const char *failed;
  nn_status_t nn_status;
  hvd_status_t hvd_status;
  /* Private: the grad-ready callback's state during backward, and the accumulation
     window's: passes with samples so far and the weight of the last one. */
  float scale;
  size_t scaled_from;
  int window_passes;
  double window_weight;
} train_step_t;

/* One step on this rank's n samples (x: n images in the model's input shape, host or
   device memory; y: n labels) of the `total` that all ranks take together at this step
   (with accumulation: in the whole window), with learning rate lr. flags: TRAIN_STEP_*.
   Returns 0, or -1 with failed, nn_status and hvd_status set (the step's state is then
   undefined: end the run). */
int train_step_run(train_step_t *t, const float *x, const int32_t *y, int n, int total,
                   float lr, int flags);

/* Makes b's buckets end at m's parameter boundaries (hvd_grad_buckets_set_params with
   nn_model_param_starts), as PyTorch DDP lays its buckets out. 0, or -1 with err saying
   why. */
int train_buckets_at_params(hvd_grad_buckets_t *b, const nn_model_t *m, char *err,
                            size_t errlen);

#endif /* TRAIN_STEP_H */
