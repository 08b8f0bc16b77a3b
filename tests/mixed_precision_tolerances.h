/* tests/mixed_precision_tolerances.h: what test_cuda_mixed_precision (GPU: fp16/bf16
   training steps against float32 on the CPU) checks, and how closely, shared with
   test_nn_precision_emulation (CPU: the same steps with the half rounding emulated),
   which sizes these tolerances and fails when they no longer fit. Header only: the
   GPU test is also compiled alone from one source file (scripts/gpu_check.sh).

   Both tests run the same models, batches, seed-42 weights, input (mp_input from
   MP_INPUT_SEED), labels (mp_label), one training step (SGD, MP_LR) and an evaluation
   forward. Each quantity's error against float32 is measured by one metric:
   - MP_MAX: max |got - want| / max |want|, the worst element against the largest
     value (cc_compare in tests/cuda_check.h). Most quantities.
   - MP_L2: ||got - want|| / ||want||, over all elements: where the worst element is
     wrong by the order of the quantity itself (resnet20 bf16 gradients, resnet50 bf16
     training logits), but the vector as a whole still points the right way.
   - MP_NORMS (gradients): the worst over the parameter tensors of |ln(||got|| /
     ||want||)|: for the resnet50 gradients, which no elementwise metric can check.
     Their emulated relative L2 error is 0.8 in fp16 and 1.4 in bf16 (that of a vector
     unrelated to the reference): the rounding of the forward activations (not of the
     gradients: rounding only those changes resnet20's fp16 gradients by 1e-3) changes
     which gradient the step computes at initialisation, amplified through 50 layers of
     batch norm over few values (2x2 maps at the end at 64x64). Each tensor's norm
     stays within a factor of about 1.6, so this still catches a tensor left at zero,
     not unscaled, or scaled or accumulated wrongly; the exact check of the update
     against SGD on the GPU's own gradients covers the rest of the step.
   Each tolerance is about 3x the worst emulated error (over 12 inputs, those of
   `test_nn_precision_emulation --seeds 12`: the worst over 4 can be 3x smaller), as
   room for the GPU's other summation order. The emulation test fails when, over its 4
   inputs, an error exceeds half its tolerance, a tolerance exceeds 20x the error
   (vacuous), or an MP_MAX/MP_L2 tolerance reaches 1 (an answer of zeros would pass). */
#ifndef TESTS_MIXED_PRECISION_TOLERANCES_H
#define TESTS_MIXED_PRECISION_TOLERANCES_H

#include "nn/nn.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { MP_MAX, MP_L2, MP_NORMS } mp_metric_t;
static const char *const mp_metric_names[] = {"max", "rel-L2", "norms"};
typedef struct {
  mp_metric_t metric;
  double tol;
} mp_tol_t;

/* Per precision: [0] fp16, [1] bf16, [2] fp32, which the GPU test runs only in NHWC
   (channels last; its error is summation order only) and the emulation does not
   size. NHWC fp16/bf16 take the NCHW ones. */
typedef struct {
  const char *name;
  int batch, hw;  /* hw: input height and width, 0 for the model's default */
  mp_tol_t logits[3], loss[3], grads[3], stats[3], eval[3];
} mp_case_t;

#define MP_M(t) {MP_MAX, (t)}
#define MP_R(t) {MP_L2, (t)}
#define MP_N(t) {MP_NORMS, (t)}
#define MP_ABSENT {MP_MAX, 0} /* statistics of a model without batch norm: none */

/* Sized from `test_nn_precision_emulation --seeds 12` (its worst errors are quoted in
   test_cuda_mixed_precision.c): about 3x the worst of the metric used. */
static const mp_case_t mp_cases[] = {
    {"lenet", 16, 0,
     {MP_M(2.5e-3), MP_M(2e-2), MP_M(1e-4)},  /* train logits */
     {MP_M(2e-5), MP_M(1.5e-4), MP_M(1e-4)},  /* loss */
     {MP_M(0.2), MP_M(0.22), MP_M(5e-3)},     /* gradients / loss scale */
     {MP_ABSENT, MP_ABSENT, MP_ABSENT},       /* batch-norm running statistics */
     {MP_M(5e-3), MP_M(2.5e-2), MP_M(5e-4)}}, /* eval logits after the step */
    {"resnet20", 8, 0,
     {MP_M(5e-3), MP_M(3.5e-2), MP_M(1e-3)},
     {MP_M(3.5e-4), MP_M(2.5e-3), MP_M(1e-3)},
     {MP_M(0.4), MP_R(0.9), MP_M(2e-2)},
     {MP_M(2e-4), MP_M(1.5e-3), MP_M(1e-3)},
     {MP_M(2e-3), MP_M(1.3e-2), MP_M(5e-3)}},
    {"alexnet", 2, 0,
     {MP_M(2.5e-3), MP_M(1.7e-2), MP_M(1e-3)},
     {MP_M(1e-6), MP_M(2e-5), MP_M(1e-3)},
     {MP_M(4.5e-2), MP_M(7e-2), MP_M(4e-2)},
     {MP_ABSENT, MP_ABSENT, MP_ABSENT},
     {MP_M(4e-3), MP_M(1.5e-2), MP_M(5e-3)}},
    {"resnet50", 4, 64,
     {MP_M(0.3), MP_R(0.9), MP_M(2e-3)},
     {MP_M(2e-2), MP_M(0.1), MP_M(2e-3)},
     {MP_N(1.4), MP_N(1.4), MP_M(0.25)},
     {MP_M(3.5e-2), MP_M(0.22), MP_M(2e-3)},
     {MP_M(0.35), MP_M(0.45), MP_M(0.1)}},
};
#define MP_NUM_CASES ((int)(sizeof mp_cases / sizeof mp_cases[0]))

/* The fp16 loss scale of the comparisons: small enough that no gradient of these
   models overflows float16 (resnet50 at 64x64 has gradients near 35, times 65536, the
   default scale, they overflow and the update is skipped, as GradScaler would), large
   enough that none of interest flushes to zero. A power of two: scaling is exact. bf16
   keeps its default static scale of 1. */
#define MP_FP16_SCALE 256.0f
/* The step: SGD, momentum 0.9, weight decay 1e-4, this learning rate. */
#define MP_LR 0.01f
#define MP_MOMENTUM 0.9f
#define MP_WEIGHT_DECAY 1e-4f

/* The input of every case; the emulation also draws from other seeds. */
#define MP_INPUT_SEED 0x9E3779B97F4A7C15ull
#define MP_EMU_SEEDS 4

/* n values uniform in [-1, 1): xorshift64 from seed, as cc_uniform. */
static inline void mp_input(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = (float)((double)(s >> 40) / 8388608.0 - 1.0);
  }
}

static inline int32_t mp_label(int i, int classes) { return (i * 3 + 1) % classes; }

/* MP_MAX and MP_L2 in one pass (alexnet's 61M gradients); INFINITY when got holds an
   inf or NaN. */
static inline void mp_max_rel_and_l2(const float *got, const float *want, size_t n,
                                     double *max_rel, double *rel_l2) {
  double err = 0, scale = 1e-6, d2 = 0, w2 = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) {
      *max_rel = *rel_l2 = INFINITY;
      return;
    }
    double e = (double)got[i] - want[i];
    if (fabs(e) > err) err = fabs(e);
    if (fabs(want[i]) > scale) scale = fabs(want[i]);
    d2 += e * e;
    w2 += (double)want[i] * want[i];
  }
  *max_rel = err / scale;
  *rel_l2 = sqrt(d2) / (w2 > 1e-24 ? sqrt(w2) : 1e-12);
}

static inline double mp_max_rel(const float *got, const float *want, size_t n) {
  double m, l;
  mp_max_rel_and_l2(got, want, n, &m, &l);
  return m;
}

static inline double mp_rel_l2(const float *got, const float *want, size_t n) {
  double m, l;
  mp_max_rel_and_l2(got, want, n, &m, &l);
  return l;
}

/* Gradients only: the worst over m's parameter tensors of |ln(||got|| / ||want||)|
   (a tensor all zeros on one side only: INFINITY); *worst_slice (when not NULL) is
   that tensor's slice index, -1 when none. */
static inline double mp_tensor_norms(const nn_model_t *m, const float *got,
                                     const float *want, int *worst_slice) {
  double worst = 0;
  if (worst_slice) *worst_slice = -1;
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *s = nn_model_slice(m, i);
    if (s->kind != NN_SLICE_PARAM) continue;
    double g2 = 0, w2 = 0;
    for (size_t j = s->offset; j < s->offset + s->numel; j++) {
      if (!isfinite(got[j])) {
        if (worst_slice) *worst_slice = i;
        return INFINITY;
      }
      g2 += (double)got[j] * got[j];
      w2 += (double)want[j] * want[j];
    }
    if (g2 == 0 && w2 == 0) continue;
    double e = g2 == 0 || w2 == 0 ? INFINITY : fabs(0.5 * log(g2 / w2));
    if (e > worst) {
      worst = e;
      if (worst_slice) *worst_slice = i;
    }
  }
  return worst;
}

#endif /* TESTS_MIXED_PRECISION_TOLERANCES_H */
