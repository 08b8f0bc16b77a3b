/* test_cuda_backward_store: the CUDA backend's first-writer rule (nn_layer_t.dx_first:
   the first writer of an activation gradient stores it, cuDNN/cuBLAS with beta 0, nn's
   kernels with add 0) and its per-layer batch-norm and pooling descriptors.
   1. A graph where gradients meet in every way (an output read by a convolution and
      both inputs of an add, an add of two branches, a relu over a max pool, which owns
      its gradient on the GPU, a flatten, which permutes in NHWC, a dropout, a global
      average pool) and resnet20, in fp32 NCHW, fp16 NHWC and bf16 NCHW, with
      nn's batch-norm kernels too: every activation gradient is filled with NaN after the
      loss, so a layer that adds into a gradient that nobody zeroed poisons the
      parameter gradients; those must equal the ones of the same model built with
      nn_backward_store 0 (everything zeroed, every layer adding); also with nn's
      batch-norm and pooling kernels (NN_CUDA_BN=native, NN_CUDA_POOL=native).
   2. Descriptors (the graph, fp32 NCHW and fp16 NHWC): a second step and an evaluation
      forward at the same batch set no batch-norm or pooling descriptor; a smaller batch
      sets each layer's once more.
   Exits 77 without a CUDA device. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NN_WITH_CUDA
#include "nn/backward_store_internal.h"
#include "nn/cuda/cuda_internal.h"
#include "nn/model_internal.h"
#include "tests/cuda_check.h"

enum { BATCH = 4, CLASSES = 5 };

static nn_model_t *build_graph(void) {
  nn_model_config_t cfg = {BATCH, 7, CLASSES, 2, 8, 8};
  nn_model_t *m = nn_model_begin("store-graph", &cfg, 2, 8, 8, CLASSES);
  if (!m) return NULL;
  int a = nn_model_add_conv2d(m, "a", NN_MODEL_INPUT, 8, 3, 1, 1, 1);
  int r = nn_model_add_relu(m, "r", a);
  int b = nn_model_add_conv2d(m, "b", r, 8, 3, 1, 1, 0);
  int rr = nn_model_add_add(m, "rr", r, r);          /* x + x */
  int bn = nn_model_add_batchnorm2d(m, "bn", b);
  int br = nn_model_add_relu(m, "br", bn);
  int s = nn_model_add_add(m, "s", br, rr);
  int p = nn_model_add_maxpool2d(m, "p", s, 2, 2, 0);
  int pr = nn_model_add_relu(m, "pr", p);            /* over a pool: owns its gradient */
  int c = nn_model_add_conv2d(m, "c", pr, 8, 3, 1, 1, 0);
  int cb = nn_model_add_batchnorm2d(m, "cb", c);
  int g = nn_model_add_global_avgpool(m, "g", s);    /* s's third reader */
  (void)g;
  int d = nn_model_add_dropout(m, "d", cb, 0.25f);
  int f = nn_model_add_flatten(m, "f", d);           /* permutes in NHWC */
  nn_model_add_linear(m, "fc", f, CLASSES, 1);
  if (nn_model_finish(m) != NN_OK) return NULL;
  return m;
}

static nn_model_t *make(const char *name, int store, nn_precision_t p, int nhwc) {
  nn_backward_store = store;
  nn_model_t *m = NULL;
  if (strcmp(name, "graph") == 0) {
    m = build_graph();
    if (!m) fprintf(stderr, "building the graph: %s\n", nn_last_error());
  } else {
    nn_model_config_t cfg = {BATCH, 42, 0, 0, 0, 0};
    CC_OK(nn_model_create(&m, name, &cfg));
  }
  nn_backward_store = 1;
  if (!m) exit(1);
  nn_precision_config_t pc = {p, 1024.0f, 0, 0, 2000, 1, nhwc};
  CC_OK(nn_model_set_precision(m, &pc));
  CC_OK(nn_model_to_device(m, NN_DEVICE_CUDA));
  return m;
}

static void fill_nan(void *p, size_t bytes) {
  cudaError_t e = cudaMemsetAsync(p, 0xFF, bytes, (cudaStream_t)nn_cuda_stream());
  if (e != cudaSuccess) {
    fprintf(stderr, "cudaMemsetAsync: %s\n", cudaGetErrorString(e));
    exit(1);
  }
}

/* Every activation gradient of m filled with NaN (all-ones bytes are NaN in float32,
   float16 and bfloat16). */
static void poison(nn_model_t *m, int n) {
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (l->own_dout && l->dout)
      fill_nan(l->dout, (size_t)n * nn_layer_sample_size(l) * m->act_size);
  }
  if (m->dinput)
    fill_nan(m->dinput, (size_t)n * nn_model_input_size(m) * m->act_size);
}

static void step(nn_model_t *m, const float *x, const int32_t *labels, int n, int poisoned) {
  CC_OK(nn_model_forward(m, x, n, 1));
  CC_OK(nn_model_loss(m, labels, NULL, NULL));
  if (poisoned) poison(m, n);
  CC_OK(nn_model_backward(m, NULL, NULL));
}

static void check_store(const char *name, nn_precision_t p, int nhwc, double tol) {
  printf("== %s %s %s, batch norm and pooling: %s\n", name, nn_precision_name(p),
         nhwc ? "NHWC" : "NCHW", getenv("NN_CUDA_BN") ? "nn's kernels" : "cuDNN");
  nn_model_t *add = make(name, 0, p, nhwc), *store = make(name, 1, p, nhwc);
  int c, h, w;
  nn_model_input_shape(add, &c, &h, &w);
  float *x = cc_random((size_t)BATCH * c * h * w);
  int32_t labels[BATCH];
  for (int i = 0; i < BATCH; i++) labels[i] = (i * 3 + 1) % nn_model_num_classes(add);
  const size_t np = nn_model_param_len(add);
  float *want = cc_host(np);
  /* Two steps each (no update): the second finds the first's values in the gradients. */
  for (int k = 0; k < 2; k++) {
    step(add, x, labels, BATCH, 0);
    step(store, x, labels, BATCH, 1);
  }
  CC_OK(nn_cuda_to_host(want, nn_model_device_grads(add), np * sizeof(float)));
  char what[96];
  snprintf(what, sizeof what, "%s: stored = added into zeros", name);
  cc_compare(what, nn_model_device_grads(store), 1, want, np, tol);
  free(x);
  free(want);
  nn_model_free(add);
  nn_model_free(store);
}

static void check_descriptors(nn_precision_t p, int nhwc) {
  nn_model_t *m = make("graph", 1, p, nhwc);   /* two batch norms, a max pool */
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  float *x = cc_random((size_t)BATCH * c * h * w);
  int32_t labels[BATCH] = {1, 2, 3, 4};
  int bns = 0, pools = 0;
  for (int i = 0; i < m->num_layers; i++) {
    bns += m->layers[i].kind == NN_LAYER_BATCHNORM2D;
    pools += m->layers[i].kind == NN_LAYER_MAXPOOL2D || m->layers[i].kind == NN_LAYER_AVGPOOL2D;
  }
  if (!(pools > 0 && bns > 0)) {
    printf("FAIL the descriptor check needs a batch norm and a pooling layer\n");
    cc_failures++;
  }
  step(m, x, labels, BATCH, 0);
  int b0 = nn_cuda_desc_sets(0), p0 = nn_cuda_desc_sets(1);
  step(m, x, labels, BATCH, 0);
  CC_OK(nn_model_forward(m, x, BATCH, 0));
  int b1 = nn_cuda_desc_sets(0), p1 = nn_cuda_desc_sets(1);
  step(m, x, labels, BATCH - 1, 0);
  int b2 = nn_cuda_desc_sets(0), p2 = nn_cuda_desc_sets(1);
  int ok = b1 == b0 && p1 == p0;
  printf("%-4s descriptors set by a second step and an evaluation forward: %d batch norm, "
         "%d pooling (want 0)\n", ok ? "ok" : "FAIL", b1 - b0, p1 - p0);
  cc_failures += !ok;
  /* Under nn's kernels (after a refusal) no descriptor is needed. */
  const nn_cuda_fmt_t f = {p, nhwc};
  int want_b = strcmp(nn_cuda_bn_path(f, 1), "nn's kernels") ? bns : 0;
  int want_p = strcmp(nn_cuda_pool_path(f), "nn's kernels") ? pools : 0;
  ok = b2 - b1 == want_b && p2 - p1 == want_p;
  printf("%-4s descriptors set by a smaller batch: %d batch norm (want %d), %d pooling "
         "(want %d)\n", ok ? "ok" : "FAIL", b2 - b1, want_b, p2 - p1, want_p);
  cc_failures += !ok;
  free(x);
  nn_model_free(m);
}

int main(void) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  check_store("graph", NN_PRECISION_FP32, 0, 1e-6);
  check_store("graph", NN_PRECISION_FP16, 1, 5e-3);
  check_store("graph", NN_PRECISION_BF16, 0, 3e-2);
  check_store("resnet20", NN_PRECISION_FP32, 0, 1e-6);
  check_store("resnet20", NN_PRECISION_FP16, 1, 5e-3);
  setenv("NN_CUDA_BN", "native", 1);
  setenv("NN_CUDA_POOL", "native", 1);
  check_store("graph", NN_PRECISION_FP32, 1, 1e-6);
  check_store("graph", NN_PRECISION_BF16, 1, 3e-2);
  unsetenv("NN_CUDA_BN");
  unsetenv("NN_CUDA_POOL");
  check_descriptors(NN_PRECISION_FP32, 0);
  check_descriptors(NN_PRECISION_FP16, 1);
  return cc_finish("all CUDA backward-store and descriptor checks passed");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
