/* test_cuda_layers: every CUDA kernel of nn against the CPU reference on random inputs
   (forward and backward, accumulation into existing gradients included), in fp32 and,
   with TF32 enabled, with the looser TF32 tolerance; the layer kinds of imported graphs
   in a small model (check_graph_layers). Exits 77 without a CUDA device. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <string.h>

#ifdef NN_WITH_CUDA
#include "nn/cuda/cuda_internal.h"   /* nn_cuda_conv_searches */
#include "nn/graph_kernels_internal.h"
#include "nn/model_internal.h"          /* the graph builders */
#include "tests/cuda_check.h"

static double tol;   /* for GEMM/convolution results (TF32 or fp32) */
#define TOL_EXACT 1e-5

static void check_conv(int n, int cin, int h, int w, int cout, int k, int stride, int pad,
                       int bias) {
  nn_conv2d_shape_t s = {n, cin, h, w, cout, k, k, stride, stride, pad, pad, 0, 0};
  CC_OK(nn_conv2d_shape(&s));
  size_t nx = (size_t)n * cin * h * w, nw = (size_t)cout * cin * k * k;
  size_t ny = (size_t)n * cout * s.h_out * s.w_out;
  float *x = cc_random(nx), *wt = cc_random(nw), *b = cc_random((size_t)cout);
  float *dy = cc_random(ny), *dx = cc_random(nx), *dw = cc_random(nw), *db = cc_random((size_t)cout);
  float *y = cc_host(ny), *ws = cc_host(nn_conv2d_workspace_floats(&s) + 1);
  float *Dx = cc_dev(x, nx), *Dw = cc_dev(wt, nw), *Db = cc_dev(b, (size_t)cout);
  float *Ddy = cc_dev(dy, ny), *Ddx = cc_dev(dx, nx), *Ddw = cc_dev(dw, nw);
  float *Ddb = cc_dev(db, (size_t)cout), *Dy = cc_dev(NULL, ny);
  char what[128];
  CC_OK(nn_conv2d_forward(&s, x, wt, bias ? b : NULL, y, ws));
  CC_OK(nn_conv2d_forward_cuda(&s, Dx, Dw, bias ? Db : NULL, Dy));
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d %dx%d fwd", k, k, stride, cin, cout, h, w);
  cc_compare(what, Dy, 1, y, ny, tol);
  CC_OK(nn_conv2d_backward(&s, x, wt, dy, dx, dw, bias ? db : NULL, ws));
  CC_OK(nn_conv2d_backward_cuda(&s, Dx, Dw, Ddy, Ddx, Ddw, bias ? Ddb : NULL));
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d dx (+=)", k, k, stride, cin, cout);
  cc_compare(what, Ddx, 1, dx, nx, tol);
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d dw (+=)", k, k, stride, cin, cout);
  cc_compare(what, Ddw, 1, dw, nw, tol);
  if (bias) cc_compare("conv db (+=)", Ddb, 1, db, (size_t)cout, TOL_EXACT * 10);
  free(x); free(wt); free(b); free(dy); free(dx); free(dw); free(db); free(y); free(ws);
  nn_cuda_free(Dx); nn_cuda_free(Dw); nn_cuda_free(Db); nn_cuda_free(Ddy);
  nn_cuda_free(Ddx); nn_cuda_free(Ddw); nn_cuda_free(Ddb); nn_cuda_free(Dy);
}

static void check_bn(void) {
  nn_batchnorm2d_shape_t s = {4, 8, 6, 5, 1e-5f, 0.1f};
  size_t nx = 4 * 8 * 6 * 5, c = 8;
  float *x = cc_random(nx), *g = cc_random(c), *b = cc_random(c);
  float *rm = cc_random(c), *rv = cc_host(c), *y = cc_host(nx), *sm = cc_host(c), *si = cc_host(c);
  for (size_t i = 0; i < c; i++) rv[i] = 1.0f + 0.5f * cc_uniform();
  float *dy = cc_random(nx), *dx = cc_random(nx), *dg = cc_random(c), *dbt = cc_random(c);
  float *Dx = cc_dev(x, nx), *Dg = cc_dev(g, c), *Db = cc_dev(b, c), *Drm = cc_dev(rm, c);
  float *Drv = cc_dev(rv, c), *Dy = cc_dev(NULL, nx), *Dsm = cc_dev(NULL, c), *Dsi = cc_dev(NULL, c);
  float *Ddy = cc_dev(dy, nx), *Ddx = cc_dev(dx, nx), *Ddg = cc_dev(dg, c), *Ddb = cc_dev(dbt, c);
  CC_OK(nn_batchnorm2d_forward_train(&s, x, g, b, rm, rv, y, sm, si));
  CC_OK(nn_batchnorm2d_forward_train_cuda(&s, Dx, Dg, Db, Drm, Drv, Dy, Dsm, Dsi));
  cc_compare("batchnorm train y", Dy, 1, y, nx, 1e-4);
  cc_compare("batchnorm running_mean", Drm, 1, rm, c, 1e-4);
  cc_compare("batchnorm running_var (unbiased)", Drv, 1, rv, c, 1e-4);
  cc_compare("batchnorm save_mean", Dsm, 1, sm, c, 1e-4);
  cc_compare("batchnorm save_invstd", Dsi, 1, si, c, 1e-4);
  CC_OK(nn_batchnorm2d_backward(&s, x, g, sm, si, dy, dx, dg, dbt));
  CC_OK(nn_batchnorm2d_backward_cuda(&s, Dx, Dg, Dsm, Dsi, Ddy, Ddx, Ddg, Ddb));
  cc_compare("batchnorm dx (+=)", Ddx, 1, dx, nx, 1e-4);
  cc_compare("batchnorm dgamma (+=)", Ddg, 1, dg, c, 1e-4);
  cc_compare("batchnorm dbeta (+=)", Ddb, 1, dbt, c, 1e-4);
  CC_OK(nn_batchnorm2d_forward_infer(&s, x, g, b, rm, rv, y));
  CC_OK(nn_batchnorm2d_forward_infer_cuda(&s, Dx, Dg, Db, Drm, Drv, Dy));
  cc_compare("batchnorm infer y", Dy, 1, y, nx, 1e-4);
}

static void check_pool(int max, int k, int stride, int pad) {
  nn_pool2d_shape_t s = {3, 4, 9, 9, k, k, stride, stride, pad, pad, 0, 0};
  CC_OK(nn_pool2d_shape(&s));
  size_t nx = 3 * 4 * 9 * 9, ny = (size_t)3 * 4 * s.h_out * s.w_out;
  float *x = cc_random(nx), *y = cc_host(ny), *dy = cc_random(ny), *dx = cc_random(nx);
  int32_t *am = calloc(ny, sizeof(int32_t));
  float *Dx = cc_dev(x, nx), *Dy = cc_dev(NULL, ny), *Ddy = cc_dev(dy, ny), *Ddx = cc_dev(dx, nx);
  char what[96];
  if (max) {
    CC_OK(nn_maxpool2d_forward(&s, x, y, am));
    CC_OK(nn_maxpool2d_forward_cuda(&s, Dx, Dy));
    CC_OK(nn_maxpool2d_backward(&s, am, dy, dx));
    CC_OK(nn_maxpool2d_backward_cuda(&s, Dx, Dy, Ddy, Ddx));
  } else {
    CC_OK(nn_avgpool2d_forward(&s, x, y));
    CC_OK(nn_avgpool2d_forward_cuda(&s, Dx, Dy));
    CC_OK(nn_avgpool2d_backward(&s, dy, dx));
    CC_OK(nn_avgpool2d_backward_cuda(&s, Dx, Dy, Ddy, Ddx));
  }
  snprintf(what, sizeof what, "%spool %dx%d/%d pad %d fwd", max ? "max" : "avg", k, k, stride, pad);
  cc_compare(what, Dy, 1, y, ny, TOL_EXACT);
  snprintf(what, sizeof what, "%spool %dx%d/%d pad %d dx (+=)", max ? "max" : "avg", k, k, stride, pad);
  cc_compare(what, Ddx, 1, dx, nx, TOL_EXACT);
  free(am);
}

static void check_elementwise(void) {
  size_t n = 10007;
  float *a = cc_random(n), *b = cc_random(n), *y = cc_host(n), *dy = cc_random(n);
  float *da = cc_random(n), *db = cc_random(n);
  float *Da = cc_dev(a, n), *Db = cc_dev(b, n), *Dy = cc_dev(NULL, n), *Ddy = cc_dev(dy, n);
  float *Dda = cc_dev(da, n), *Ddb = cc_dev(db, n);
  nn_relu_forward(n, a, y);
  CC_OK(nn_relu_forward_cuda(n, Da, Dy));
  cc_compare("relu fwd", Dy, 1, y, n, 0);
  nn_relu_backward(n, y, dy, da);
  CC_OK(nn_relu_backward_cuda(n, Dy, Ddy, Dda));
  cc_compare("relu dx (+=)", Dda, 1, da, n, 0);
  nn_add_forward(n, a, b, y);
  CC_OK(nn_add_forward_cuda(n, Da, Db, Dy));
  cc_compare("add fwd", Dy, 1, y, n, 0);
  for (size_t i = 0; i < n; i++) { da[i] += dy[i]; db[i] += dy[i]; }
  CC_OK(nn_add_backward_cuda(n, Ddy, Dda, Ddb));
  cc_compare("add da (+=)", Dda, 1, da, n, 0);
  cc_compare("add db (+=)", Ddb, 1, db, n, 0);
  /* global average pooling: n=5, c=7, hw=49 */
  int gn = 5, gc = 7, hw = 49;
  size_t nx = (size_t)gn * gc * hw;
  float *x = cc_random(nx), *gy = cc_host((size_t)gn * gc), *gdy = cc_random((size_t)gn * gc);
  float *gdx = cc_random(nx);
  float *Dx = cc_dev(x, nx), *Dgy = cc_dev(NULL, (size_t)gn * gc);
  float *Dgdy = cc_dev(gdy, (size_t)gn * gc), *Dgdx = cc_dev(gdx, nx);
  nn_global_avgpool_forward(gn, gc, hw, x, gy);
  CC_OK(nn_global_avgpool_forward_cuda(gn, gc, hw, Dx, Dgy));
  cc_compare("global avgpool fwd", Dgy, 1, gy, (size_t)gn * gc, TOL_EXACT);
  nn_global_avgpool_backward(gn, gc, hw, gdy, gdx);
  CC_OK(nn_global_avgpool_backward_cuda(gn, gc, hw, Dgdy, Dgdx));
  cc_compare("global avgpool dx (+=)", Dgdx, 1, gdx, nx, TOL_EXACT);
  /* dropout: the very same mask */
  uint8_t *mask = malloc(n), *Dmask = cc_dev_bytes(NULL, n), *gmask = malloc(n);
  nn_dropout_forward(n, 0.3f, 1234, 7, a, y, mask);
  CC_OK(nn_dropout_forward_cuda(n, 0.3f, 1234, 7, Da, Dy, Dmask));
  cc_compare("dropout fwd", Dy, 1, y, n, 0);
  CC_OK(nn_cuda_to_host(gmask, Dmask, n));
  int same = memcmp(mask, gmask, n) == 0;
  printf("%-4s dropout mask identical to the CPU's\n", same ? "ok" : "FAIL");
  if (!same) cc_failures++;
  nn_dropout_backward(n, 0.3f, mask, dy, da);
  CC_OK(nn_dropout_backward_cuda(n, 0.3f, Dmask, Ddy, Dda));
  cc_compare("dropout dx (+=)", Dda, 1, da, n, TOL_EXACT);
}

static void check_linear(int n, int in, int out) {
  size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
  float *x = cc_random(nx), *w = cc_random(nw), *b = cc_random((size_t)out), *y = cc_host(ny);
  float *dy = cc_random(ny), *dx = cc_random(nx), *dw = cc_random(nw), *db = cc_random((size_t)out);
  float *Dx = cc_dev(x, nx), *Dw = cc_dev(w, nw), *Db = cc_dev(b, (size_t)out), *Dy = cc_dev(NULL, ny);
  float *Ddy = cc_dev(dy, ny), *Ddx = cc_dev(dx, nx), *Ddw = cc_dev(dw, nw), *Ddb = cc_dev(db, (size_t)out);
  CC_OK(nn_linear_forward(n, in, out, x, w, b, y));
  CC_OK(nn_linear_forward_cuda(n, in, out, Dx, Dw, Db, Dy));
  cc_compare("linear fwd", Dy, 1, y, ny, tol);
  CC_OK(nn_linear_backward(n, in, out, x, w, dy, dx, dw, db));
  CC_OK(nn_linear_backward_cuda(n, in, out, Dx, Dw, Ddy, Ddx, Ddw, Ddb));
  cc_compare("linear dx (+=)", Ddx, 1, dx, nx, tol);
  cc_compare("linear dw (+=)", Ddw, 1, dw, nw, tol);
  cc_compare("linear db (+=)", Ddb, 1, db, (size_t)out, 1e-5);
}

static void check_softmax(void) {
  int n = 37, k = 10;
  float *z = cc_random((size_t)n * k), *d = cc_host((size_t)n * k);
  for (int i = 0; i < n * k; i++) z[i] *= 4.0f;
  int32_t lab[37];
  for (int i = 0; i < n; i++) lab[i] = (i * 7) % k;
  float loss = 0;
  int correct = 0;
  CC_OK(nn_softmax_cross_entropy(n, k, z, lab, &loss, &correct, d));
  float *Dz = cc_dev(z, (size_t)n * k), *Dd = cc_dev(NULL, (size_t)n * k), *Dl = cc_dev(NULL, 1);
  int32_t *Dlab = cc_dev_bytes(lab, sizeof lab);
  int *Dc = cc_dev_bytes(NULL, sizeof(int));
  CC_OK(nn_softmax_cross_entropy_cuda(n, k, Dz, Dlab, Dl, Dc, Dd));
  cc_compare("softmax xent loss", Dl, 1, &loss, 1, 1e-6);
  cc_compare("softmax xent dlogits", Dd, 1, d, (size_t)n * k, 1e-6);
  int gc = -1;
  CC_OK(nn_cuda_to_host(&gc, Dc, sizeof gc));
  printf("%-4s softmax xent correct %d (CPU %d)\n", gc == correct ? "ok" : "FAIL", gc, correct);
  if (gc != correct) cc_failures++;
}

static void check_optim(nn_optim_kind_t kind, float mom, int nesterov, float wd) {
  size_t n = 4099;
  nn_optim_config_t cfg = {kind, mom, nesterov, wd, 0, 0, 0};
  nn_optim_t *o;
  nn_cuda_optim_t *go;
  CC_OK(nn_optim_create(&o, &cfg, n));
  CC_OK(nn_cuda_optim_create(&go, &cfg, n));
  float *p = cc_random(n), *Dp = cc_dev(p, n);
  for (int step = 0; step < 3; step++) {
    float *g = cc_random(n), *Dg = cc_dev(g, n);
    CC_OK(nn_optim_step(o, p, g, 0.05f));
    CC_OK(nn_cuda_optim_step(go, Dp, Dg, 0.05f));
    free(g);
    nn_cuda_free(Dg);
  }
  char what[96];
  snprintf(what, sizeof what, "%s mom %.1f%s wd %.2f, 3 steps",
           kind == NN_OPTIM_SGD ? "sgd" : kind == NN_OPTIM_ADAM ? "adam" : "adamw", mom,
           nesterov ? " nesterov" : "", wd);
  cc_compare(what, Dp, 1, p, n, 1e-5);
  size_t sc = 0;
  float *st = nn_optim_state(o, &sc), *gst = cc_host(sc);
  int64_t gstep = 0;
  CC_OK(nn_cuda_optim_state_to_host(go, gst, sc, &gstep));
  cc_compare("  optimizer state", gst, 0, st, sc, 1e-5);
  nn_optim_free(o);
  nn_cuda_optim_free(go);
}

/* Each op's convolution algorithm is chosen at its first use: a forward alone searches
   no backward algorithm, and a backward without dx (the first convolution) no
   backward-data one; dx computed afterwards is still right. */
static void check_conv_lazy_plan(void) {
  nn_conv2d_shape_t s = {2, 5, 11, 9, 7, 3, 3, 1, 1, 1, 1, 0, 0};   /* a shape of its own */
  CC_OK(nn_conv2d_shape(&s));
  size_t nx = 2 * 5 * 11 * 9, nw = 7 * 5 * 9, ny = (size_t)2 * 7 * s.h_out * s.w_out;
  float *x = cc_random(nx), *wt = cc_random(nw), *dy = cc_random(ny);
  float *dx = cc_host(nx), *dw = cc_host(nw), *y = cc_host(ny);
  float *ws = cc_host(nn_conv2d_workspace_floats(&s) + 1);
  float *Dx = cc_dev(x, nx), *Dw = cc_dev(wt, nw), *Ddy = cc_dev(dy, ny);
  float *Ddx = cc_dev(NULL, nx), *Ddw = cc_dev(NULL, nw), *Dy = cc_dev(NULL, ny);
  int f0 = nn_cuda_conv_searches(0), d0 = nn_cuda_conv_searches(1);
  int w0 = nn_cuda_conv_searches(2);
  CC_OK(nn_conv2d_forward_cuda(&s, Dx, Dw, NULL, Dy));
  int ok = nn_cuda_conv_searches(0) == f0 + 1 && nn_cuda_conv_searches(1) == d0 &&
           nn_cuda_conv_searches(2) == w0;
  printf("%-4s conv plan: a forward searches only the forward algorithm\n", ok ? "ok" : "FAIL");
  if (!ok) cc_failures++;
  CC_OK(nn_conv2d_backward_cuda(&s, Dx, Dw, Ddy, NULL, Ddw, NULL));
  ok = nn_cuda_conv_searches(1) == d0 && nn_cuda_conv_searches(2) == w0 + 1;
  printf("%-4s conv plan: a backward without dx searches no backward-data algorithm\n",
         ok ? "ok" : "FAIL");
  if (!ok) cc_failures++;
  CC_OK(nn_conv2d_forward(&s, x, wt, NULL, y, ws));
  CC_OK(nn_conv2d_backward(&s, x, wt, dy, dx, dw, NULL, ws));
  cc_compare("conv plan: dw without dx", Ddw, 1, dw, nw, tol);
  CC_OK(nn_conv2d_backward_cuda(&s, Dx, Dw, Ddy, Ddx, NULL, NULL));
  ok = nn_cuda_conv_searches(1) == d0 + 1 && nn_cuda_conv_searches(2) == w0 + 1;
  printf("%-4s conv plan: dx later searches its algorithm once\n", ok ? "ok" : "FAIL");
  if (!ok) cc_failures++;
  cc_compare("conv plan: dx chosen late", Ddx, 1, dx, nx, tol);
  free(x); free(wt); free(dy); free(dx); free(dw); free(y); free(ws);
  nn_cuda_free(Dx); nn_cuda_free(Dw); nn_cuda_free(Ddy); nn_cuda_free(Ddx);
  nn_cuda_free(Ddw); nn_cuda_free(Dy);
}

/* ---- the layer kinds of imported graphs (nn/cuda/graph_cuda_internal.h) ----
   Grouped and dilated convolutions, LeakyRelu, Sigmoid, Tanh, Clip, Mul of the same shape
   and per channel, Concat: one small model holds them all, built with nn's graph builders
   as nn/onnx_import.c builds them (the same seed on the CPU and the GPU):
     input 4x8x8 -> dw: depthwise 3x3, dilation 2, pad 2, bias -> LeakyRelu(0.1)
       -> g2: 2 groups 4->8, 3x1 kernel, strides 2x1, pads 1x0 (8x4x8)
       -> Sigmoid * Tanh (Mul, same shape) -> scaled per channel by Clip(0, 6) of its
          global average (Mul, per channel) -> Concat with g2's output (16x4x8)
       -> flatten -> linear to 10 classes.
   Forward in training mode, loss, backward (every parameter's gradient: each layer's
   input gradient reaches them through the layers below it) and an evaluation forward
   after one SGD step, in float32 NCHW, float32 NHWC and float16 NCHW. */
#define GRAPH_BATCH 3

static nn_model_t *graph_model(void) {
  nn_model_config_t cfg = {.batch = GRAPH_BATCH, .seed = 7};
  nn_model_t *m = nn_model_begin("graph_layers", &cfg, 4, 8, 8, 10);
  if (!m) return NULL;
  int x = nn_model_add_gconv(m, "dw", NN_MODEL_INPUT, 4, 3, 3, (const int[2]){1, 1},
                             (const int[2]){2, 2}, (const int[2]){2, 2}, 4, 1);
  x = nn_model_add_act(m, "leaky", x, NN_ACT_LEAKY_RELU, 0.1f, 0, 0);
  int g2 = nn_model_add_gconv(m, "g2", x, 8, 3, 1, (const int[2]){2, 1}, (const int[2]){1, 0},
                              (const int[2]){1, 1}, 2, 0);
  int sig = nn_model_add_act(m, "sigmoid", g2, NN_ACT_SIGMOID, 0, 0, 0);
  int th = nn_model_add_act(m, "tanh", g2, NN_ACT_TANH, 0, 0, 0);
  int prod = nn_model_add_mul(m, "mul", sig, th);
  int gate = nn_model_add_global_avgpool(m, "gap", prod);
  gate = nn_model_add_act(m, "clip", gate, NN_ACT_CLIP, 0, 0.0f, 6.0f);
  int scaled = nn_model_add_mul(m, "scale", prod, gate);
  x = nn_model_add_concat(m, "concat", scaled, g2);
  x = nn_model_add_flatten(m, "flatten", x);
  nn_model_add_linear(m, "fc", x, 10, 1);
  CC_OK(nn_model_finish(m));
  return m;
}

typedef struct { const char *name; nn_precision_t prec; int nhwc; double tol, gtol; } graph_case_t;

static void check_graph_case(const graph_case_t *k) {
  printf("== graph layers, %s\n", k->name);
  nn_model_t *cpu = graph_model(), *gpu = graph_model();
  if (!cpu || !gpu) {
    printf("FAIL building the model: %s\n", nn_last_error());
    cc_failures++;
    return;
  }
  /* A loss scale of 1: the float16 gradients compare as they are. */
  nn_precision_config_t pc = {.precision = k->prec, .init_scale = 1, .static_scale = 1,
                              .channels_last = k->nhwc};
  CC_OK(nn_model_set_precision(gpu, &pc));
  CC_OK(nn_model_to_device(gpu, NN_DEVICE_CUDA));
  size_t nx = (size_t)GRAPH_BATCH * 4 * 8 * 8, np = nn_model_param_len(cpu);
  float *x = cc_random(nx);
  int32_t labels[GRAPH_BATCH] = {1, 7, 3};
  float lc = 0, lg = 0;
  CC_OK(nn_model_forward(cpu, x, GRAPH_BATCH, 1));
  CC_OK(nn_model_forward(gpu, x, GRAPH_BATCH, 1));
  cc_compare("train logits", nn_model_device_logits(gpu), 1, nn_model_logits(cpu),
             (size_t)GRAPH_BATCH * 10, k->tol);
  CC_OK(nn_model_loss(cpu, labels, &lc, NULL));
  CC_OK(nn_model_loss(gpu, labels, &lg, NULL));
  cc_compare("loss", &lg, 0, &lc, 1, k->tol);
  CC_OK(nn_model_backward(cpu, NULL, NULL));
  CC_OK(nn_model_backward(gpu, NULL, NULL));
  /* Each parameter on its own: a layer's error shows under its name. */
  float *g = cc_host(np);
  CC_OK(nn_cuda_to_host(g, nn_model_device_grads(gpu), np * sizeof(float)));
  for (int i = 0; i < nn_model_num_slices(cpu); i++) {
    const nn_slice_t *s = nn_model_slice(cpu, i);
    if (s->kind != NN_SLICE_PARAM) continue;
    char what[128];
    snprintf(what, sizeof what, "gradient of %s", s->name);
    cc_compare(what, g + s->offset, 0, nn_model_grads(cpu) + s->offset, s->numel, k->gtol);
  }
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  CC_OK(nn_model_optim_create(cpu, &oc));
  CC_OK(nn_model_optim_create(gpu, &oc));
  CC_OK(nn_model_optim_step(cpu, 0.05f));
  CC_OK(nn_model_optim_step(gpu, 0.05f));
  CC_OK(nn_model_forward(cpu, x, GRAPH_BATCH, 0));
  CC_OK(nn_model_forward(gpu, x, GRAPH_BATCH, 0));
  cc_compare("eval logits after a step", nn_model_device_logits(gpu), 1,
             nn_model_logits(cpu), (size_t)GRAPH_BATCH * 10, k->gtol);
  free(g);
  free(x);
  nn_model_free(cpu);
  nn_model_free(gpu);
}


static void check_graph_layers(void) {
  /* fp32: summation order only; fp16: every stored activation rounded to 11 bits. */
  static const graph_case_t cases[] = {
      {"float32 NCHW", NN_PRECISION_FP32, 0, 1e-5, 1e-4},
      {"float32 NHWC", NN_PRECISION_FP32, 1, 1e-5, 1e-4},
      {"float16 NCHW", NN_PRECISION_FP16, 0, 1e-2, 3e-2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_graph_case(&cases[i]);
}

int main(int argc, char **argv) {
  cc_require_device();
  if (argc > 1 && strcmp(argv[1], "--probe") == 0) return 0;  /* gpu_check: device present */
  for (int pass = 0; pass < 2; pass++) {
    nn_cuda_set_tf32(pass);
    tol = pass ? 5e-3 : 1e-4;
    printf("== %s\n", pass ? "TF32" : "fp32");
    check_conv(2, 3, 17, 15, 8, 3, 1, 1, 1);
    check_conv(3, 16, 14, 14, 32, 3, 2, 1, 0);
    check_conv(2, 32, 8, 8, 64, 1, 1, 0, 0);
    check_conv(2, 64, 8, 8, 32, 1, 2, 0, 0);
    check_conv(2, 3, 32, 32, 16, 7, 2, 3, 0);
    check_conv(2, 1, 28, 28, 6, 5, 1, 0, 1);
    check_linear(9, 300, 17);
    check_linear(64, 2048, 1000);
  }
  nn_cuda_set_tf32(0);
  tol = 1e-4;
  check_conv_lazy_plan();
  check_bn();
  check_pool(1, 3, 2, 1);
  check_pool(1, 2, 2, 0);
  check_pool(0, 2, 2, 0);
  check_pool(0, 3, 1, 1);
  check_elementwise();
  check_softmax();
  check_optim(NN_OPTIM_SGD, 0.0f, 0, 0.0f);
  check_optim(NN_OPTIM_SGD, 0.9f, 0, 1e-4f);
  check_optim(NN_OPTIM_SGD, 0.9f, 1, 1e-4f);
  check_optim(NN_OPTIM_ADAM, 0, 0, 1e-2f);
  check_optim(NN_OPTIM_ADAMW, 0, 0, 1e-2f);
  check_graph_layers();
  return cc_finish("all CUDA layer checks passed");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
