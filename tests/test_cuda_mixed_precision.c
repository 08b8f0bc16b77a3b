/* test_cuda_mixed_precision: whole training steps of models in mixed precision (fp16
   and bf16 on the GPU) against the same models in float32 on the CPU: logits and loss,
   every gradient (divided by the loss scale), batch-norm running statistics and
   evaluation logits after the step, with tolerances per model and precision; the
   parameters after nn_model_optim_step exactly against SGD on the GPU's gradients.
   Then the loss scaling itself: an overflowing scale skips the update (parameters and
   the optimizer's step count unchanged) and backs off; clean steps grow it; bf16 keeps
   a static scale of 1; input from device memory equals input from host memory; an
   optimizer of the wrong size is refused. The same comparisons in NHWC (channels last)
   in fp16, bf16 and fp32. Exits 77 without a CUDA device. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <string.h>

#ifdef NN_WITH_CUDA
#include "tests/cuda_check.h"

#include "tests/mixed_precision_tolerances.h"

/* The cases, the input, the step and the tolerances are tests/mixed_precision_
   tolerances.h's, shared with test_nn_precision_emulation, which emulates the half
   rounding on the CPU, sizes the tolerances from it and fails when they no longer fit.
   The reference is the same model in float32 on the CPU, so the errors measure what
   rounding every stored activation, weight and gradient to the half type does to each
   quantity, which the network amplifies; each tolerance is about 3x the worst error of
   the emulation (worst errors in main). Most quantities are compared by the worst
   element against the largest reference value (cc_compare); resnet20 bf16 gradients
   and resnet50 bf16 training logits, whose worst elements are wrong by the order of
   the values themselves, by the relative L2 error; the resnet50 gradients, which the
   forward rounding decorrelates from float32's at initialisation (relative L2 error
   0.8 in fp16, 1.4 in bf16), by the gradient norm of each parameter tensor (see the
   header). The update is then checked exactly against SGD applied to the GPU's own
   gradients. */
#define CMP_SCALE MP_FP16_SCALE

/* A model: on the CPU in float32 (the reference) when p is fp32 and not nhwc, else on
   the GPU in precision p and the layout asked. */
static nn_model_t *make_layout(const char *name, int batch, int hw, nn_precision_t p,
                               float init_scale, int interval, int nhwc) {
  nn_model_config_t cfg = {batch, 42, 0, 0, hw, hw};
  nn_model_t *m;
  CC_OK(nn_model_create(&m, name, &cfg));
  if (p != NN_PRECISION_FP32 || nhwc) {
    nn_precision_config_t pc = {p, init_scale, 0, 0, interval, 0, nhwc};
    CC_OK(nn_model_set_precision(m, &pc));
    CC_OK(nn_model_to_device(m, NN_DEVICE_CUDA));
  }
  return m;
}

static nn_model_t *make(const char *name, int batch, int hw, nn_precision_t p,
                        float init_scale, int interval) {
  return make_layout(name, batch, hw, p, init_scale, interval, 0);
}

static int32_t *make_labels(int n, int classes) {
  int32_t *l = calloc((size_t)n, sizeof(int32_t));
  for (int i = 0; i < n; i++) l[i] = mp_label(i, classes);
  return l;
}

/* The same input for every run of a model, whatever ran before: the emulation's. */
static float *input_for(nn_model_t *m, int n) {
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t count = (size_t)n * c * h * w;
  float *x = cc_host(count);
  mp_input(x, count, MP_INPUT_SEED);
  return x;
}

/* Compares got (device memory when dev) with want by t's metric: cc_compare for
   MP_MAX, else the same line with the relative L2 error or the worst tensor's norm
   ratio; ref is the reference model (its parameter tensors, for MP_NORMS). */
static void check(const char *what, const nn_model_t *ref, const float *got, int dev,
                  const float *want, size_t n, mp_tol_t t) {
  if (!(t.tol > 0)) {
    printf("FAIL %-44s no tolerance in tests/mixed_precision_tolerances.h\n", what);
    cc_failures++;
    return;
  }
  if (t.metric == MP_MAX) {
    cc_compare(what, got, dev, want, n, t.tol);
    return;
  }
  float *g = (float *)got;
  if (dev) {
    g = cc_host(n);
    CC_OK(nn_cuda_to_host(g, got, n * sizeof(float)));
  }
  int worst = -1;
  double err = t.metric == MP_L2 ? mp_rel_l2(g, want, n) : mp_tensor_norms(ref, g, want, &worst);
  int ok = err <= t.tol;
  printf("%-4s %-44s %s %.2e (tol %.2g)\n", ok ? "ok" : "FAIL", what,
         t.metric == MP_L2 ? "rel L2 err" : "|ln norm ratio|", err, t.tol);
  if (!ok && worst >= 0) {
    const nn_slice_t *sl = nn_model_slice(ref, worst);
    double g2 = 0, w2 = 0;
    for (size_t i = sl->offset; i < sl->offset + sl->numel; i++) {
      g2 += (double)g[i] * g[i];
      w2 += (double)want[i] * want[i];
    }
    printf("     worst tensor %s: gradient norm %.4g, want %.4g\n", sl->name, sqrt(g2),
           sqrt(w2));
  }
  if (!ok) cc_failures++;
  if (dev) free(g);
}

/* The float32 CPU reference of one case, computed once and compared with every
   precision and layout (with the plain C SGEMM of the GPU check's build, the CPU step of
   resnet50 is the slow part of this test). The model itself stays for its parameter
   slices (MP_NORMS). */
typedef struct {
  nn_model_t *cpu;      /* after the step */
  size_t np;
  int classes;
  float *x;             /* the input */
  int32_t *labels;
  float *logits;        /* training forward */
  float loss;
  float *grads;
  float *params0;       /* the weights before the step (every model starts from them) */
  float *buffers;       /* batch-norm statistics after the step (NULL: none) */
  float *eval_logits;   /* evaluation forward after the step */
} mp_ref_t;

static float *copy_of(const float *src, size_t n) {
  float *d = cc_host(n ? n : 1);
  if (n) memcpy(d, src, n * sizeof(float));
  return d;
}

static void reference(const mp_case_t *k, mp_ref_t *r) {
  memset(r, 0, sizeof *r);
  r->cpu = make(k->name, k->batch, k->hw, NN_PRECISION_FP32, 0, 0);
  r->np = nn_model_param_len(r->cpu);
  r->classes = nn_model_num_classes(r->cpu);
  r->x = input_for(r->cpu, k->batch);
  r->labels = make_labels(k->batch, r->classes);
  size_t nl = (size_t)k->batch * r->classes;
  int correct = 0;
  r->params0 = copy_of(nn_model_params(r->cpu), r->np);
  CC_OK(nn_model_forward(r->cpu, r->x, k->batch, 1));
  r->logits = copy_of(nn_model_logits(r->cpu), nl);
  CC_OK(nn_model_loss(r->cpu, r->labels, &r->loss, &correct));
  CC_OK(nn_model_backward(r->cpu, NULL, NULL));
  r->grads = copy_of(nn_model_grads(r->cpu), r->np);
  nn_optim_config_t oc = {NN_OPTIM_SGD, MP_MOMENTUM, 0, MP_WEIGHT_DECAY, 0, 0, 0};
  CC_OK(nn_model_optim_create(r->cpu, &oc));
  CC_OK(nn_model_optim_step(r->cpu, MP_LR));
  size_t nb = nn_model_num_buffers(r->cpu);
  if (nb) r->buffers = copy_of(nn_model_buffers(r->cpu), nb);
  CC_OK(nn_model_forward(r->cpu, r->x, k->batch, 0));
  r->eval_logits = copy_of(nn_model_logits(r->cpu), nl);
}

static void reference_free(mp_ref_t *r) {
  nn_model_free(r->cpu);
  free(r->x);
  free(r->labels);
  free(r->logits);
  free(r->grads);
  free(r->params0);
  free(r->buffers);
  free(r->eval_logits);
}

static void run_case(const mp_case_t *k, const mp_ref_t *r, nn_precision_t p, int nhwc) {
  const int j = p == NN_PRECISION_FP16 ? 0 : p == NN_PRECISION_BF16 ? 1 : 2;
  const float init_scale = p == NN_PRECISION_FP16 ? CMP_SCALE : 1.0f;
  nn_model_t *gpu = make_layout(k->name, k->batch, k->hw, p,
                                p == NN_PRECISION_FP16 ? CMP_SCALE : 0, 0, nhwc);
  printf("== %s %s %s batch %d%s\n", k->name, nn_precision_name(p),
         nhwc ? "NHWC (channels last)" : "NCHW", k->batch,
         k->hw ? " (reduced input size)" : "");
  const size_t np = r->np;
  const nn_model_t *cpu = r->cpu;
  float lg = 0, scale = 0;
  int cg = 0;
  int64_t skipped = -1;
  CC_OK(nn_model_forward(gpu, r->x, k->batch, 1));
  check("train logits", cpu, nn_model_device_logits(gpu), 1, r->logits,
        (size_t)k->batch * r->classes, k->logits[j]);
  CC_OK(nn_model_loss(gpu, r->labels, &lg, &cg));
  check("loss", cpu, &lg, 0, &r->loss, 1, k->loss[j]);
  CC_OK(nn_model_backward(gpu, NULL, NULL));
  CC_OK(nn_model_loss_scale(gpu, &scale, &skipped));
  float *g = cc_host(np);
  CC_OK(nn_cuda_to_host(g, nn_model_device_grads(gpu), np * sizeof(float)));
  for (size_t i = 0; i < np; i++) g[i] /= scale;
  char what[96];
  snprintf(what, sizeof what, "all gradients / loss scale %g", (double)scale);
  check(what, cpu, g, 0, r->grads, np, k->grads[j]);
  /* The step: the GPU's against SGD applied on the CPU to the GPU's own (unscaled)
     gradients from the same starting weights, which must agree to float rounding
     whatever the gradients' own error. */
  nn_optim_config_t oc = {NN_OPTIM_SGD, MP_MOMENTUM, 0, MP_WEIGHT_DECAY, 0, 0, 0};
  nn_optim_t *own;
  float *expect_p = copy_of(r->params0, np);
  CC_OK(nn_model_optim_create(gpu, &oc));
  CC_OK(nn_optim_create(&own, &oc, np));
  CC_OK(nn_optim_step(own, expect_p, g, MP_LR));
  CC_OK(nn_model_optim_step(gpu, MP_LR));   /* unscales, checks, steps, adapts */
  CC_OK(nn_model_loss_scale(gpu, &scale, &skipped));
  int ok = skipped == 0 && scale == init_scale;
  printf("%-4s no update skipped (skipped %lld), scale %g (want %g)\n", ok ? "ok" : "FAIL",
         (long long)skipped, (double)scale, (double)init_scale);
  if (!ok) cc_failures++;
  cc_compare("params = SGD on the GPU's gradients", nn_model_device_params(gpu), 1, expect_p,
             np, 1e-5);
  CC_OK(nn_model_sync_to_host(gpu));
  if (r->buffers)
    check("batch-norm running statistics", cpu, nn_model_buffers(gpu), 0, r->buffers,
          nn_model_num_buffers(cpu), k->stats[j]);
  CC_OK(nn_model_forward(gpu, r->x, k->batch, 0));
  check("eval logits after the step", cpu, nn_model_logits(gpu), 0, r->eval_logits,
        (size_t)k->batch * r->classes, k->eval[j]);
  nn_optim_free(own);
  nn_model_free(gpu);
  free(g);
  free(expect_p);
}

/* One training step of m (on the device) with optimizer go; returns the loss. */
static float step(nn_model_t *m, nn_cuda_optim_t *go, const float *x, const int32_t *labels,
                  int n) {
  float loss = 0;
  CC_OK(nn_model_forward(m, x, n, 1));
  CC_OK(nn_model_loss(m, labels, &loss, NULL));
  CC_OK(nn_model_backward(m, NULL, NULL));
  CC_OK(nn_model_optim_step_cuda(m, go, 1e-3f));
  return loss;
}

static void expect(int cond, const char *what) {
  printf("%-4s %s\n", cond ? "ok" : "FAIL", what);
  if (!cond) cc_failures++;
}

static void check_loss_scaling(void) {
  printf("== loss scaling (lenet fp16)\n");
  const int n = 8;
  nn_optim_config_t oc = {NN_OPTIM_ADAM, 0, 0, 0, 0, 0, 0};
  char what[160];
  /* 1. A scale that overflows float16 in the first gradients: the update is skipped. */
  nn_model_t *m = make("lenet", n, 0, NN_PRECISION_FP16, 3e38f, 1000);
  size_t np = nn_model_param_len(m);
  float *x = input_for(m, n);
  int32_t *labels = make_labels(n, nn_model_num_classes(m));
  nn_cuda_optim_t *go;
  CC_OK(nn_cuda_optim_create(&go, &oc, np));
  float *before = cc_host(np), *after = cc_host(np);
  CC_OK(nn_cuda_to_host(before, nn_model_device_params(m), np * sizeof(float)));
  step(m, go, x, labels, n);
  CC_OK(nn_cuda_to_host(after, nn_model_device_params(m), np * sizeof(float)));
  float scale = 0;
  int64_t skipped = 0, opt_step = -1;
  CC_OK(nn_model_loss_scale(m, &scale, &skipped));
  float *state = cc_host(2 * np);
  CC_OK(nn_cuda_optim_state_to_host(go, state, 2 * np, &opt_step));
  snprintf(what, sizeof what, "overflow: skipped %lld (want 1), scale %g (want 1.5e38), "
           "optimizer step %lld (want 0)", (long long)skipped, (double)scale,
           (long long)opt_step);
  expect(skipped == 1 && scale == 1.5e38f && opt_step == 0, what);
  expect(memcmp(before, after, np * sizeof(float)) == 0,
         "overflow: parameters unchanged by the skipped update");
  nn_cuda_optim_free(go);
  nn_model_free(m);

  /* 2. Clean steps: the scale doubles every growth_interval (2) steps; updates apply. */
  m = make("lenet", n, 0, NN_PRECISION_FP16, 1024.0f, 2);
  CC_OK(nn_cuda_optim_create(&go, &oc, np));
  float first = step(m, go, x, labels, n), last = first;
  for (int i = 1; i < 4; i++) last = step(m, go, x, labels, n);
  CC_OK(nn_model_loss_scale(m, &scale, &skipped));
  CC_OK(nn_cuda_optim_state_to_host(go, state, 2 * np, &opt_step));
  snprintf(what, sizeof what, "4 clean steps: scale %g (want 4096), skipped %lld, optimizer "
           "step %lld (want 4)", (double)scale, (long long)skipped, (long long)opt_step);
  expect(scale == 4096.0f && skipped == 0 && opt_step == 4, what);
  snprintf(what, sizeof what, "the same batch 4 times: loss %.4f -> %.4f goes down",
           (double)first, (double)last);
  expect(isfinite(last) && last < first, what);

  /* 3. Input from device memory gives the very same logits as from host memory. */
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t nx = (size_t)n * c * h * w, nl = (size_t)n * nn_model_num_classes(m);
  float *dx = cc_dev(x, nx), *l1 = cc_host(nl), *l2 = cc_host(nl);
  CC_OK(nn_model_forward(m, x, n, 0));
  memcpy(l1, nn_model_logits(m), nl * sizeof(float));
  CC_OK(nn_model_forward(m, dx, n, 0));
  memcpy(l2, nn_model_logits(m), nl * sizeof(float));
  expect(memcmp(l1, l2, nl * sizeof(float)) == 0, "device input == host input");

  /* 4. An optimizer made for another model is refused, with both sizes named. */
  nn_cuda_optim_t *small;
  CC_OK(nn_cuda_optim_create(&small, &oc, 10));
  nn_status_t s = nn_model_optim_step_cuda(m, small, 0.1f);
  expect(s == NN_ERR_ARG && strstr(nn_last_error(), "10"), "optimizer of the wrong size");
  nn_cuda_optim_free(small);
  nn_cuda_optim_free(go);
  nn_model_free(m);
  nn_cuda_free(dx);

  /* 5. bf16: static scale 1 by default. */
  m = make("lenet", n, 0, NN_PRECISION_BF16, 0, 0);
  CC_OK(nn_cuda_optim_create(&go, &oc, np));
  for (int i = 0; i < 3; i++) step(m, go, x, labels, n);
  CC_OK(nn_model_loss_scale(m, &scale, &skipped));
  snprintf(what, sizeof what, "bf16: scale %g (want 1), skipped %lld", (double)scale,
           (long long)skipped);
  expect(scale == 1.0f && skipped == 0, what);
  nn_cuda_optim_free(go);
  nn_model_free(m);
  free(x); free(labels); free(before); free(after); free(state); free(l1); free(l2);
}

int main(int argc, char **argv) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  /* The worst errors of the emulation over 12 inputs (test_nn_precision_emulation
     --seeds 12), fp16 / bf16, max relative unless marked L2 (relative L2) or N
     (tensor norms); each tolerance is about 3x: lenet logits 8.5e-4 / 6.3e-3, loss
     6.2e-6 / 5.6e-5, gradients 6.8e-2 / 7.4e-2, eval 1.6e-3 / 8.9e-3; resnet20 logits
     1.7e-3 / 1.2e-2, loss 1.2e-4 / 8.6e-4, gradients 0.14 / L2 0.34, statistics
     6.4e-5 / 5.5e-4, eval 6.8e-4 / 4.3e-3; alexnet logits 8.0e-4 / 5.6e-3, loss
     3.5e-7 / 7.0e-6, gradients 1.5e-2 / 2.3e-2, eval 1.3e-3 / 4.9e-3; resnet50 logits
     0.10 / L2 0.36, loss 6.7e-3 / 3.7e-2, gradients N 0.45 / N 0.38 (L2 0.82 / 1.39),
     statistics 1.2e-2 / 7.5e-2, eval 0.11 / 0.16. */
  /* NCHW in fp16 and bf16, then NHWC (channels last: the flatten of lenet and alexnet
     permutes, conv weights are permuted) in fp16, bf16 and fp32. */
  for (int i = 0; i < MP_NUM_CASES; i++) {
    if (argc > 1 && !strstr(argv[1], mp_cases[i].name)) continue;
    mp_ref_t ref;
    reference(&mp_cases[i], &ref);   /* once a model: the slow part on the CPU */
    run_case(&mp_cases[i], &ref, NN_PRECISION_FP16, 0);
    run_case(&mp_cases[i], &ref, NN_PRECISION_BF16, 0);
    run_case(&mp_cases[i], &ref, NN_PRECISION_FP16, 1);
    run_case(&mp_cases[i], &ref, NN_PRECISION_BF16, 1);
    run_case(&mp_cases[i], &ref, NN_PRECISION_FP32, 1);
    reference_free(&ref);
  }
  if (argc <= 1 || strstr(argv[1], "scaling")) check_loss_scaling();
  return cc_finish("all mixed-precision model checks passed");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
