/* test_nn_precision_emulation: mixed precision emulated on the CPU, to size the
   tolerances of test_cuda_mixed_precision (tests/mixed_precision_tolerances.h) and to
   keep them honest without a GPU.

   For each case of the GPU test (same model, batch, input size, seed-42 weights, input
   and labels) and each half type, one training step runs twice on the CPU: in float32
   (the reference) and with what the GPU stores in half precision rounded to it
   (round to nearest even; fp16 with subnormals; the fp16 loss scale as the GPU's):
   - the input batch, and the conv/linear weights and biases (the GPU's compute copy);
   - every layer's output, through the model's test hook (nn/model_internal.h);
   - the gradient of the logits as loss scale x gradient, and every activation
     gradient likewise, after each layer's backward has added into it (a residual
     block's input gradient is summed in half storage on the GPU, so rounded after
     each addition);
   - the conv/linear weight gradients (computed into a half buffer on the GPU).
   Batch-norm parameters, statistics and their gradients stay float32, as on the GPU.
   Then SGD steps each side's float32 master weights with its own gradients, and an
   evaluation forward (weights rounded again from the updated masters) gives the eval
   logits. Every metric of the header (max relative, relative L2, tensor norms for
   gradients) of every quantity, worst over MP_EMU_SEEDS inputs (the first the GPU
   test's; --seeds N for more), is printed beside the tolerance; the test fails when
   the error by the tolerance's metric exceeds half the tolerance (no room left for
   the GPU's other summation order), the tolerance exceeds 20x the error (vacuous) or,
   for max relative and relative L2, reaches 1 (the error of an answer of zeros).
   The GPU's float32 accumulation in cuDNN/cuBLAS is not emulated: its order differs
   from the CPU's, which is part of the margin. */
#include "collectives/coll.h"
#include "nn/model_internal.h"
#include "nn/nn.h"
#include "tests/check.h"
#include "tests/mixed_precision_tolerances.h"
#include "util/clock.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- rounding to the half types, float to float ---- */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bfloat16: float32's top 16 bits, rounded to nearest even (overflow gives inf, float
   subnormals round the same way). Selects rather than branches, so that the loops of
   round_buf vectorise: alexnet has 61M weights to round, twice a step. */
static inline float round_bf16(float f) {
  uint32_t u = bits_of(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return float_of((u & 0x7fffffffu) > 0x7f800000u ? u : r); /* NaN stays */
}

/* float16: 11 significant bits down to 2^-14, below that multiples of 2^-24 (subnormal
   halves); 65520 and above rounds to inf. */
static inline float round_fp16(float f) {
  uint32_t u = bits_of(f), a = u & 0x7fffffffu, sign = u ^ a;
  uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  /* Below 2^-14: adding 0.5 (whose ulp is 2^-24) rounds to a multiple of 2^-24, to
     nearest even; subtracting it again is exact. */
  uint32_t sub = bits_of((float_of(a) + 0.5f) - 0.5f);
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x477ff000u ? 0x7f800000u : r; /* to inf, and inf itself */
  return float_of(a > 0x7f800000u ? u : sign | r);
}

/* The same on 4 floats at once (GCC/Clang vector extensions: GCC does not vectorise
   these selects at -O2); checked against the scalar ones in test_rounding. */
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4u v4_select(v4u mask, v4u a, v4u b) { return (mask & a) | (~mask & b); }

static inline v4f round_bf16_v4(v4f f) {
  v4u u = (v4u)f;
  v4u r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return (v4f)v4_select((v4u)((u & 0x7fffffffu) > 0x7f800000u), u, r);
}

static inline v4f round_fp16_v4(v4f f) {
  v4u u = (v4u)f, a = u & 0x7fffffffu, sign = u ^ a;
  v4u normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  v4u sub = (v4u)(((v4f)a + 0.5f) - 0.5f);
  v4u r = v4_select((v4u)(a < 0x38800000u), sub, normal);
  r = v4_select((v4u)(a >= 0x477ff000u), (v4u){0x7f800000u, 0x7f800000u, 0x7f800000u,
                                                0x7f800000u}, r);
  return (v4f)v4_select((v4u)(a > 0x7f800000u), u, sign | r);
}

/* x = round(scale * x) / scale: a buffer the GPU stores scaled by the loss scale (a
   power of two, so the scaling itself is exact). */
static void round_buf(nn_precision_t p, float *x, size_t n, float scale) {
  const float inv = 1.0f / scale;
  const int fp16 = p == NN_PRECISION_FP16;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4f v;
    memcpy(&v, x + i, sizeof v);
    v = (fp16 ? round_fp16_v4(v * scale) : round_bf16_v4(v * scale)) * inv;
    memcpy(x + i, &v, sizeof v);
  }
  for (; i < n; i++) x[i] = (fp16 ? round_fp16(x[i] * scale) : round_bf16(x[i] * scale)) * inv;
}

/* Rounding of a double to `bits` significant bits, no finer than 2^min_exp: the
   definition, against which the bit tricks above are checked. */
static double round_ref(double v, int bits, int min_exp) {
  if (v == 0) return v;
  int e;
  frexp(v, &e);
  int q = e - bits < min_exp ? min_exp : e - bits;
  return ldexp(rint(ldexp(v, -q)), q);
}

static void test_rounding(void) {
  /* Ties go to even; the fp16 extremes. */
  CHECK(round_bf16(1.0f + 0x1p-8f) == 1.0f, "bf16 tie to even (down)");
  CHECK(round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "bf16 tie to even (up)");
  CHECK(round_fp16(1.0f + 0x1p-11f) == 1.0f, "fp16 tie to even (down)");
  CHECK(round_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f, "fp16 tie to even (up)");
  CHECK(round_fp16(65504.0f) == 65504.0f && isinf(round_fp16(65520.0f)) &&
            round_fp16(65519.0f) == 65504.0f, "fp16 largest value and overflow");
  CHECK(round_fp16(0x1p-24f) == 0x1p-24f && round_fp16(0x1p-25f) == 0.0f &&
            round_fp16(0x1.8p-25f) == 0x1p-24f && round_fp16(3 * 0x1p-25f) == 0x1p-23f,
        "fp16 subnormals (smallest, tie to zero, above the tie, tie to even)");
  CHECK(round_fp16(-0x1.8p-25f) == -0x1p-24f, "fp16 negative subnormal");
  /* Random values over the whole fp16 range and below (every 8th a tie), then
     specials: against the definition, fp16 against the collectives' float16
     conversion (coll_float_to_half), and round_buf's vector loop against the scalar
     functions, bit for bit. */
  enum { N = 200000 };
  float *v = malloc(N * sizeof(float)), *v16 = malloc(N * sizeof(float)),
        *vbf = malloc(N * sizeof(float));
  uint64_t s = 12345;
  for (int i = 0; i < N; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    uint32_t r = (uint32_t)(s >> 32);
    int e = (int)(r % 47) - 30; /* exponent in [-30, 16] */
    uint32_t mant = (uint32_t)(s >> 9) & 0x7fffffu;
    if (i % 8 == 0) mant = (mant & ~0x1fffu) | 0x1000u;
    v[i] = float_of(((uint32_t)(e + 127) << 23) | mant | (r & 0x80000000u));
  }
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f,
                            -65520.0f, 0x1p-24f, 0x1p-25f, 0x1p-149f, 3e38f, -3.4e38f};
  const int n_special = (int)(sizeof specials / sizeof specials[0]);
  memcpy(v + N - n_special, specials, sizeof specials);
  memcpy(v16, v, N * sizeof(float));
  memcpy(vbf, v, N * sizeof(float));
  round_buf(NN_PRECISION_FP16, v16, N, 1.0f);
  round_buf(NN_PRECISION_BF16, vbf, N, 1.0f);
  int bad16 = 0, bad16c = 0, bad_bf = 0, bad_vec = 0;
  for (int i = 0; i < N; i++) {
    float f = v[i];
    if (bits_of(v16[i]) != bits_of(round_fp16(f)) || bits_of(vbf[i]) != bits_of(round_bf16(f)))
      bad_vec++;
    if (isnan(f)) {
      bad16 += !isnan(round_fp16(f));
      bad_bf += !isnan(round_bf16(f));
      continue;
    }
    double want16 = isinf(f) ? f : round_ref(f, 11, -24);
    if (fabs(want16) >= 65520.0) want16 = copysign(INFINITY, f);
    double want_bf = isinf(f) ? f : round_ref(f, 8, -133);
    if (fabs(want_bf) > FLT_MAX) want_bf = copysign(INFINITY, f);
    bad16 += (double)round_fp16(f) != want16;
    bad16c += bits_of(round_fp16(f)) != bits_of(coll_half_to_float(coll_float_to_half(f)));
    bad_bf += (double)round_bf16(f) != want_bf;
  }
  CHECK(bad16 == 0 && bad16c == 0 && bad_bf == 0 && bad_vec == 0,
        "rounding of %d values: %d fp16 and %d bf16 differ from the definition, %d fp16 "
        "from coll_float_to_half, %d round_buf results from the scalar functions", N,
        bad16, bad_bf, bad16c, bad_vec);
  free(v);
  free(v16);
  free(vbf);
}

/* ---- the emulation ---- */

typedef struct {
  nn_precision_t p;
  float scale; /* loss scale: activation and weight gradients are stored scale x g */
} emu_t;

static int is_gemm(const nn_layer_t *l) {
  return l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR;
}

static void emulate_hook(void *ctx, nn_model_t *m, nn_model_hook_point_t point, int layer,
                         float *buf, size_t count) {
  const emu_t *e = ctx;
  switch (point) {
  case NN_HOOK_FORWARD: round_buf(e->p, buf, count, 1.0f); break;
  case NN_HOOK_LOSS: round_buf(e->p, buf, count, e->scale); break;
  case NN_HOOK_BACKWARD: {
    if (buf) round_buf(e->p, buf, count, e->scale);
    const nn_layer_t *l = &m->layers[layer];
    if (is_gemm(l))
      round_buf(e->p, m->grads + l->param_begin, l->param_end - l->param_begin, e->scale);
    break;
  }
  }
}

/* The conv/linear weights and biases as their half compute copy. */
static void round_gemm_params(nn_model_t *m, nn_precision_t p) {
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (is_gemm(l))
      round_buf(p, m->params + l->param_begin, l->param_end - l->param_begin, 1.0f);
  }
}

static int n_seeds = MP_EMU_SEEDS;

enum { Q_LOGITS, Q_LOSS, Q_GRADS, Q_STATS, Q_EVAL, NQ };
static const char *const q_names[NQ] = {"train logits", "loss", "gradients",
                                        "bn running stats", "eval logits"};

typedef struct {
  float *q[NQ];
  size_t n[NQ];
} step_out_t;

/* With grads_in_model, the gradients are read where the step left them, m->grads
   (alexnet has 61M: a copy per step costs). */
static void step_out_alloc(step_out_t *o, nn_model_t *m, int batch, int grads_in_model) {
  o->n[Q_LOGITS] = o->n[Q_EVAL] = (size_t)batch * m->num_classes;
  o->n[Q_LOSS] = 1;
  o->n[Q_GRADS] = m->param_len;
  o->n[Q_STATS] = m->num_buffers;
  for (int q = 0; q < NQ; q++)
    o->q[q] = q == Q_GRADS && grads_in_model ? m->grads
                                              : calloc(o->n[q] ? o->n[q] : 1, sizeof(float));
}

static void step_out_free(step_out_t *o, const nn_model_t *m) {
  for (int q = 0; q < NQ; q++)
    if (o->q[q] != m->grads) free(o->q[q]);
}

/* One step of m from the weights and statistics p0, b0: forward (training), loss,
   backward, SGD (opt, reset to its first step), forward (eval); emulating e when not
   NULL. */
static int run_step(nn_model_t *m, nn_optim_t *opt, const float *p0, const float *b0,
                    const float *x, size_t nx, const int32_t *labels, int batch,
                    const emu_t *e, step_out_t *o) {
  memcpy(m->params, p0, m->param_len * sizeof(float));
  memcpy(m->buffers, b0, m->num_buffers * sizeof(float));
  nn_model_set_dropout_step(m, 0);
  float *xin = malloc(nx * sizeof(float));
  memcpy(xin, x, nx * sizeof(float));
  if (e) {
    round_buf(e->p, xin, nx, 1.0f);
    round_gemm_params(m, e->p);
    m->hook = emulate_hook;
    m->hook_ctx = (void *)e;
  }
  int ok = nn_model_forward(m, xin, batch, 1) == NN_OK;
  if (ok) memcpy(o->q[Q_LOGITS], nn_model_logits(m), o->n[Q_LOGITS] * sizeof(float));
  ok = ok && nn_model_loss(m, labels, o->q[Q_LOSS], NULL) == NN_OK;
  ok = ok && nn_model_backward(m, NULL, NULL) == NN_OK;
  if (ok) {
    if (o->q[Q_GRADS] != m->grads)
      memcpy(o->q[Q_GRADS], m->grads, o->n[Q_GRADS] * sizeof(float));
    memcpy(o->q[Q_STATS], m->buffers, o->n[Q_STATS] * sizeof(float));
    /* The step updates the float32 masters, from which the eval weights are cast. */
    memcpy(m->params, p0, m->param_len * sizeof(float));
    size_t ns = 0;
    float *state = nn_optim_state(opt, &ns);
    memset(state, 0, ns * sizeof(float));
    *nn_optim_step_count(opt) = 0;
    ok = nn_optim_step(opt, m->params, m->grads, MP_LR) == NN_OK;
  }
  if (ok && e) round_gemm_params(m, e->p);
  ok = ok && nn_model_forward(m, xin, batch, 0) == NN_OK;
  if (ok) memcpy(o->q[Q_EVAL], nn_model_logits(m), o->n[Q_EVAL] * sizeof(float));
  CHECK(ok, "%s step%s: %s", m->name, e ? " (emulated)" : "", nn_last_error());
  m->hook = NULL;
  m->hook_ctx = NULL;
  free(xin);
  return ok;
}

typedef struct {
  double err[3];      /* worst over the inputs, by metric (mp_metric_t) */
  double max_rel_min; /* best max relative error, to show the spread */
} worst_t;

static const mp_tol_t *table_entry(const mp_case_t *k, int q, int j) {
  switch (q) {
  case Q_LOGITS: return &k->logits[j];
  case Q_LOSS: return &k->loss[j];
  case Q_GRADS: return &k->grads[j];
  case Q_STATS: return &k->stats[j];
  default: return &k->eval[j];
  }
}

static void run_case(const mp_case_t *k) {
  nn_model_config_t cfg = {k->batch, 42, 0, 0, k->hw, k->hw};
  nn_model_t *m = NULL;
  if (nn_model_create(&m, k->name, &cfg) != NN_OK) {
    CHECK(0, "create %s: %s", k->name, nn_last_error());
    return;
  }
  int c, h, w, classes = m->num_classes;
  nn_model_input_shape(m, &c, &h, &w);
  size_t nx = (size_t)k->batch * c * h * w;
  float *p0 = malloc(m->param_len * sizeof(float));
  float *b0 = malloc((m->num_buffers ? m->num_buffers : 1) * sizeof(float));
  float *x = malloc(nx * sizeof(float));
  int32_t *labels = malloc((size_t)k->batch * sizeof(int32_t));
  memcpy(p0, m->params, m->param_len * sizeof(float));
  memcpy(b0, m->buffers, m->num_buffers * sizeof(float));
  for (int i = 0; i < k->batch; i++) labels[i] = mp_label(i, classes);

  nn_optim_config_t oc = {NN_OPTIM_SGD, MP_MOMENTUM, 0, MP_WEIGHT_DECAY, 0, 0, 0};
  nn_optim_t *opt = NULL;
  if (nn_optim_create(&opt, &oc, m->param_len) != NN_OK) {
    CHECK(0, "optimizer for %s: %s", k->name, nn_last_error());
    nn_model_free(m);
    return;
  }
  step_out_t ref, emu;
  step_out_alloc(&ref, m, k->batch, 0);
  step_out_alloc(&emu, m, k->batch, 1);
  worst_t worst[2][NQ];
  for (int j = 0; j < 2; j++)
    for (int q = 0; q < NQ; q++) worst[j][q] = (worst_t){{0, 0, 0}, INFINITY};
  for (int seed = 0; seed < n_seeds; seed++) {
    mp_input(x, nx, MP_INPUT_SEED + 0x1000193ull * (uint64_t)seed);
    if (!run_step(m, opt, p0, b0, x, nx, labels, k->batch, NULL, &ref)) break;
    for (int j = 0; j < 2; j++) {
      emu_t e = {j == 0 ? NN_PRECISION_FP16 : NN_PRECISION_BF16,
                 j == 0 ? MP_FP16_SCALE : 1.0f};
      if (!run_step(m, opt, p0, b0, x, nx, labels, k->batch, &e, &emu)) break;
      for (int q = 0; q < NQ; q++) {
        if (ref.n[q] == 0) continue;
        worst_t *wq = &worst[j][q];
        double err[3] = {0, 0, 0};
        mp_max_rel_and_l2(emu.q[q], ref.q[q], ref.n[q], &err[MP_MAX], &err[MP_L2]);
        if (q == Q_GRADS) err[MP_NORMS] = mp_tensor_norms(m, emu.q[q], ref.q[q], NULL);
        for (int metric = MP_MAX; metric <= MP_NORMS; metric++)
          if (!(err[metric] <= wq->err[metric])) wq->err[metric] = err[metric]; /* NaN sticks */
        if (err[MP_MAX] < wq->max_rel_min) wq->max_rel_min = err[MP_MAX];
      }
    }
  }

  /* The table against the emulation. */
  for (int j = 0; j < 2; j++)
    for (int q = 0; q < NQ; q++) {
      const mp_tol_t *t = table_entry(k, q, j);
      const char *prec = j == 0 ? "fp16" : "bf16";
      const worst_t *wq = &worst[j][q];
      if (ref.n[q] == 0) {
        printf("%-9s %s %-17s %9s %9s %9s %9s  (no batch norm: nothing to compare)\n",
               k->name, prec, q_names[q], "-", "-", "-", "-");
        CHECK(t->tol == 0, "%s %s: the model has no batch norm, yet a tolerance %g for its "
              "statistics (MP_ABSENT expected)", k->name, q_names[q], t->tol);
        continue;
      }
      char norms[16] = "-";
      if (q == Q_GRADS) snprintf(norms, sizeof norms, "%9.2e", wq->err[MP_NORMS]);
      const char *metric = mp_metric_names[t->metric];
      double err = wq->err[t->metric];
      /* Room for the GPU's other summation order; not vacuous; and for the relative
         metrics below 1, the error of an answer of zeros. */
      int fits = err <= t->tol / 2, tight = t->tol <= 20 * err;
      int beats_zero = t->metric == MP_NORMS || t->tol < 1;
      printf("%-9s %s %-17s %9.2e %9.2e %9.2e %9s  %-6s %-7.2g %5.1fx%s\n", k->name, prec,
             q_names[q], wq->max_rel_min, wq->err[MP_MAX], wq->err[MP_L2], norms, metric,
             t->tol, t->tol / err, fits && tight && beats_zero ? "" : "  <-- FAIL");
      CHECK(t->tol > 0, "%s %s %s: tolerance %g: every compared quantity is checked",
            k->name, prec, q_names[q], t->tol);
      CHECK(t->metric != MP_NORMS || q == Q_GRADS, "%s %s %s: the norms metric is for "
            "gradients only", k->name, prec, q_names[q]);
      CHECK(fits, "%s %s %s: emulated worst %s error %.3g exceeds half its tolerance %g "
            "(no room for the GPU's summation order): raise it to about 3x the error",
            k->name, prec, q_names[q], metric, err, t->tol);
      CHECK(tight, "%s %s %s: tolerance %g is over 20x the emulated worst %s error %.3g "
            "(vacuous): lower it to about 3x the error", k->name, prec, q_names[q], t->tol,
            metric, err);
      CHECK(beats_zero, "%s %s %s: %s tolerance %g >= 1 passes an answer of zeros: use "
            "another metric", k->name, prec, q_names[q], metric, t->tol);
    }
  step_out_free(&ref, m);
  step_out_free(&emu, m);
  nn_optim_free(opt);
  free(p0);
  free(b0);
  free(x);
  free(labels);
  nn_model_free(m);
}

int main(int argc, char **argv) {
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
      n_seeds = atoi(argv[++i]);
      if (n_seeds < 1) {
        fprintf(stderr, "--seeds %s: expected a count >= 1\n", argv[i]);
        return 2;
      }
    } else if (argv[i][0] == '-') {
      printf("usage: test_nn_precision_emulation [--seeds N] [MODEL]\n"
             "Emulates the fp16/bf16 rounding of test_cuda_mixed_precision's training "
             "steps on the CPU\nand checks tests/mixed_precision_tolerances.h against the "
             "worst error over N inputs\n(default %d, the first the GPU test's; more to "
             "see the spread when resizing).\n", MP_EMU_SEEDS);
      return strcmp(argv[i], "--help") ? 2 : 0;
    } else {
      only = argv[i];
    }
  }
  const double t0 = util_now_s();
  test_rounding();
  printf("emulated error of one step against float32 over %d inputs, by metric (max "
         "relative: best and worst input;\nrelative L2, tensor norms: worst), and the "
         "tolerance (tests/mixed_precision_tolerances.h):\n", n_seeds);
  printf("%-9s %s %-17s %9s %9s %9s %9s  %-6s %-7s %6s\n", "model", "type", "quantity",
         "max best", "max", "rel-L2", "norms", "metric", "tol", "tol/err");
  for (int i = 0; i < MP_NUM_CASES; i++) {
    if (only && strcmp(only, mp_cases[i].name)) continue;
    run_case(&mp_cases[i]);
  }
  printf("%.1f s\n", util_now_s() - t0);
  if (failures) printf("%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
