/* nn/cuda/amp_rules.h: the loss-scaling state of a mixed-precision model and its update
   rule (PyTorch's GradScaler: back off after an inf/NaN, grow after growth_interval
   clean steps). Plain C usable from both the CUDA kernel (kernels.cu, on the device)
   and the CPU tests, so the rule is tested on machines without a GPU. */
#ifndef NN_CUDA_AMP_RULES_H
#define NN_CUDA_AMP_RULES_H

#include <math.h>

#ifdef __CUDACC__
#define NN_AMP_HD __host__ __device__
#else
#define NN_AMP_HD
#endif

/* In device memory for a mixed-precision model. */
typedef struct {
  float scale;            /* the loss (and so every gradient) is multiplied by it   */
  int found_inf;          /* set by the unscale kernel, cleared by the update       */
  int growth_tracker;     /* finite steps since the last change of scale            */
  int pad;
  long long skipped;      /* updates skipped for inf/NaN so far                     */
} nn_cuda_amp_t;

/* After the optimizer has read found_inf: count a skipped step and back off, or count a
   clean step and grow the scale every interval clean steps (never to inf); clear the
   flag for the next step. static_scale keeps the scale as it is. */
static inline NN_AMP_HD void nn_amp_update_rule(nn_cuda_amp_t *a, float growth,
                                                float backoff, int interval,
                                                int static_scale) {
  if (a->found_inf) {
    a->skipped += 1;
    a->growth_tracker = 0;
    if (!static_scale) a->scale *= backoff;
  } else if (!static_scale && ++a->growth_tracker >= interval) {
    float grown = a->scale * growth;
    if (isfinite(grown)) a->scale = grown;
    a->growth_tracker = 0;
  }
  a->found_inf = 0;
}

#endif /* NN_CUDA_AMP_RULES_H */
