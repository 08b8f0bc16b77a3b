/* test_cuda_half_layers: every layer of nn's CUDA backend in half precision (float16
   and bfloat16 data, float32 accumulation: what mixed-precision training runs) against
   the CPU float32 reference. Inputs are rounded to the half type first and the CPU
   computes on the rounded values, so the comparison measures the layer, not the input
   rounding; tolerances are per type (a few units of the type's rounding, relative to
   the largest expected value). Also the casts, the loss scale in softmax cross-entropy,
   nn's own batch-norm kernels (NN_CUDA_BN=native) in fp32, fp16 and bf16, and the
   layout-dependent layers (convolution, batch norm, pooling, global average pooling) in
   NHWC (channels last) in all three precisions; nn's own batch-norm kernels
   (NN_CUDA_BN=native: channel-vectorised in NHWC) and pooling kernels
   (NN_CUDA_POOL=native) in every precision and layout. Every backward also in its storing
   form (dx = ..., what the model walk's first writer of a gradient runs: cuDNN and
   cuBLAS with beta 0, nn's kernels with add 0) over a dx full of NaN, against the CPU's
   dx added into zeros. Exits 77 without a CUDA device. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <string.h>

#ifdef NN_WITH_CUDA
#include "nn/cuda/cuda_internal.h"
#include "tests/cuda_check.h"

static nn_precision_t P;
static int NHWC;          /* activations (and conv weights) channels last            */

static nn_cuda_fmt_t fmt(void) {
  nn_cuda_fmt_t f = {P, NHWC};
  return f;
}
static double tol_elem;   /* elementwise results: one rounding of the type          */
static double tol_acc;    /* accumulated results: convolutions, GEMMs, reductions   */

#define CUK_OK(call)                                                                  \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
              cudaGetErrorString(e_));                                                \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static cudaStream_t stream(void) { return (cudaStream_t)nn_cuda_stream(); }

/* Device buffer of n elements of type P holding h rounded to P; h is overwritten with
   the rounded values, so the CPU reference computes on exactly what the GPU sees. */
static void *half_dev(float *h, size_t n) {
  float *f = cc_dev(h, n);
  void *d = cc_dev_bytes(NULL, n * nn_cuda_elem_size(P));
  CUK_OK(nn_cuk_cast_from_float(stream(), P, n, f, d));
  CUK_OK(nn_cuk_cast_to_float(stream(), P, n, d, f));
  CC_OK(nn_cuda_to_host(h, f, n * sizeof(float)));
  nn_cuda_free(f);
  return d;
}

static void *half_random(float **host, size_t n) {
  *host = cc_random(n);
  return half_dev(*host, n);
}

static double half_compare(const char *what, const void *d, const float *want, size_t n,
                           double tol) {
  float *f = cc_dev(NULL, n);
  CUK_OK(nn_cuk_cast_to_float(stream(), P, n, d, f));
  char label[128];
  snprintf(label, sizeof label, "%s %s", nn_precision_name(P), what);
  double r = cc_compare(label, f, 1, want, n, tol);
  nn_cuda_free(f);
  return r;
}

/* A device buffer of n elements of type P full of NaN (all-ones bytes, NaN in float32,
   float16 and bfloat16): a backward that stores its dx must not read it. */
static void *nan_dev(size_t n) {
  void *d = cc_dev_bytes(NULL, n * nn_cuda_elem_size(P));
  CUK_OK(cudaMemsetAsync(d, 0xFF, n * nn_cuda_elem_size(P), stream()));
  return d;
}

/* n x c x hw host arrays between NCHW and NHWC. */
static void host_to_nhwc(const float *x, float *y, int n, int c, int hw) {
  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < c; ch++)
      for (int p = 0; p < hw; p++)
        y[((size_t)s * hw + p) * c + ch] = x[((size_t)s * c + ch) * hw + p];
}
static void host_from_nhwc(const float *x, float *y, int n, int c, int hw) {
  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < c; ch++)
      for (int p = 0; p < hw; p++)
        y[((size_t)s * c + ch) * hw + p] = x[((size_t)s * hw + p) * c + ch];
}

/* An activation (or conv weight: n = K, hw = R * S) of n x c x hw, h in NCHW order, on
   the device in the current layout and type; h is rounded in place like half_dev. */
static void *act_dev(float *h, int n, int c, int hw) {
  size_t total = (size_t)n * c * hw;
  if (!NHWC) return half_dev(h, total);
  float *t = cc_host(total);
  host_to_nhwc(h, t, n, c, hw);
  void *d = half_dev(t, total);
  host_from_nhwc(t, h, n, c, hw);
  free(t);
  return d;
}

static void *act_random(float **host, int n, int c, int hw) {
  *host = cc_random((size_t)n * c * hw);
  return act_dev(*host, n, c, hw);
}

/* Compares an activation in the current layout with the NCHW reference. */
static double act_compare(const char *what, const void *d, const float *want, int n, int c,
                          int hw, double tol) {
  size_t total = (size_t)n * c * hw;
  if (!NHWC) return half_compare(what, d, want, total, tol);
  float *f = cc_dev(NULL, total), *h = cc_host(total), *g = cc_host(total);
  CUK_OK(nn_cuk_cast_to_float(stream(), P, total, d, f));
  CC_OK(nn_cuda_to_host(h, f, total * sizeof(float)));
  host_from_nhwc(h, g, n, c, hw);
  char label[128];
  snprintf(label, sizeof label, "%s nhwc %s", nn_precision_name(P), what);
  double r = cc_compare(label, g, 0, want, total, tol);
  nn_cuda_free(f);
  free(h);
  free(g);
  return r;
}

static void check_casts(void) {
  /* Values exactly representable in both half types round-trip unchanged; the rest
     round to nearest (relative error at most half a unit: 2^-11 fp16, 2^-8 bf16). */
  float v[6] = {0.0f, 1.0f, -2.5f, 0.125f, 1024.0f, -0.75f};
  float r[6];
  memcpy(r, v, sizeof v);
  void *d = half_dev(r, 6);
  cc_compare("cast round trip (exact values)", r, 0, v, 6, 0);
  nn_cuda_free(d);
  size_t n = 4096;
  float *x = cc_random(n), *orig = cc_host(n);
  memcpy(orig, x, n * sizeof(float));
  d = half_dev(x, n);
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)x[i] - orig[i]) / (fabs(orig[i]) > 1e-3 ? fabs(orig[i]) : 1.0);
    if (e > worst) worst = e;
  }
  double bound = P == NN_PRECISION_FP16 ? 1.0 / 2048 : 1.0 / 256;
  int ok = worst <= bound * 1.0001;
  printf("%-4s %s cast to nearest: worst relative error %.2e (bound %.2e)\n", ok ? "ok" : "FAIL",
         nn_precision_name(P), worst, bound);
  if (!ok) cc_failures++;
  nn_cuda_free(d);
  free(x);
  free(orig);
}

static void check_conv(int n, int cin, int h, int w, int cout, int k, int stride, int pad,
                       int bias) {
  nn_conv2d_shape_t s = {n, cin, h, w, cout, k, k, stride, stride, pad, pad, 0, 0};
  CC_OK(nn_conv2d_shape(&s));
  size_t ny = (size_t)n * cout * s.h_out * s.w_out, nb = (size_t)cout;
  const int hwi = h * w, hwo = s.h_out * s.w_out, kk = k * k;
  float *x, *wt, *b, *dy, *dx, *dw, *db;
  void *Dx = act_random(&x, n, cin, hwi), *Dw = act_random(&wt, cout, cin, kk);
  void *Db = half_random(&b, nb), *Ddy = act_random(&dy, n, cout, hwo);
  void *Ddx = act_random(&dx, n, cin, hwi), *Ddw = act_random(&dw, cout, cin, kk);
  void *Ddb = half_random(&db, nb);
  void *Dy = cc_dev_bytes(NULL, ny * nn_cuda_elem_size(P));
  float *y = cc_host(ny), *ws = cc_host(nn_conv2d_workspace_floats(&s) + 1);
  char what[128];
  CC_OK(nn_conv2d_forward(&s, x, wt, bias ? b : NULL, y, ws));
  CC_OK(nn_conv2d_forward_cuda_p(fmt(), &s, Dx, Dw, bias ? Db : NULL, Dy));
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d fwd", k, k, stride, cin, cout);
  act_compare(what, Dy, y, n, cout, hwo, tol_acc);
  CC_OK(nn_conv2d_backward(&s, x, wt, dy, dx, dw, bias ? db : NULL, ws));
  CC_OK(nn_conv2d_backward_cuda_p(fmt(), &s, Dx, Dw, Ddy, Ddx, 1, Ddw, bias ? Ddb : NULL));
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d dx (+=)", k, k, stride, cin, cout);
  act_compare(what, Ddx, dx, n, cin, hwi, tol_acc);
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d dw (+=)", k, k, stride, cin, cout);
  act_compare(what, Ddw, dw, cout, cin, kk, tol_acc);
  if (bias) half_compare("conv db (+=)", Ddb, db, nb, tol_acc);
  /* dx stored (beta 0) over NaN, against the CPU's dx added into zeros. */
  float *dx0 = cc_host((size_t)n * cin * hwi);
  void *Dnan = nan_dev((size_t)n * cin * hwi);
  CC_OK(nn_conv2d_backward(&s, x, wt, dy, dx0, NULL, NULL, ws));
  CC_OK(nn_conv2d_backward_cuda_p(fmt(), &s, Dx, Dw, Ddy, Dnan, 0, NULL, NULL));
  snprintf(what, sizeof what, "conv%dx%d/%d c%d->%d dx (=)", k, k, stride, cin, cout);
  act_compare(what, Dnan, dx0, n, cin, hwi, tol_acc);
  free(dx0);
  nn_cuda_free(Dnan);
  free(x); free(wt); free(b); free(dy); free(dx); free(dw); free(db); free(y); free(ws);
  nn_cuda_free(Dx); nn_cuda_free(Dw); nn_cuda_free(Db); nn_cuda_free(Ddy);
  nn_cuda_free(Ddx); nn_cuda_free(Ddw); nn_cuda_free(Ddb); nn_cuda_free(Dy);
}

/* Batch norm over n x c x h x w. */
static void check_bn(int n, int ch, int h, int w) {
  nn_batchnorm2d_shape_t s = {n, ch, h, w, 1e-5f, 0.1f};
  const int hw = h * w;
  size_t nx = (size_t)n * ch * hw, c = (size_t)ch;
  float *x, *dy, *dx;
  void *Dx = act_random(&x, n, ch, hw), *Ddy = act_random(&dy, n, ch, hw);
  void *Ddx = act_random(&dx, n, ch, hw);
  void *Dy = cc_dev_bytes(NULL, nx * nn_cuda_elem_size(P));
  float *g = cc_random(c), *b = cc_random(c), *rm = cc_random(c), *rv = cc_host(c);
  for (size_t i = 0; i < c; i++) rv[i] = 1.0f + 0.5f * cc_uniform();
  float *y = cc_host(nx), *sm = cc_host(c), *si = cc_host(c);
  float *dg = cc_random(c), *dbt = cc_random(c);
  float *Dg = cc_dev(g, c), *Db = cc_dev(b, c), *Drm = cc_dev(rm, c), *Drv = cc_dev(rv, c);
  float *Dsm = cc_dev(NULL, c), *Dsi = cc_dev(NULL, c), *Ddg = cc_dev(dg, c);
  float *Ddb = cc_dev(dbt, c);
  CC_OK(nn_batchnorm2d_forward_train(&s, x, g, b, rm, rv, y, sm, si));
  /* With a reserve: NHWC training takes cuDNN's SPATIAL_PERSISTENT mode (Ex calls). */
  nn_cuda_bn_reserve_t rsv = {0};
  CC_OK(nn_batchnorm2d_forward_train_cuda_p(fmt(), &s, Dx, Dg, Db, Drm, Drv, Dy, Dsm, Dsi,
                                            &rsv));
  const char *path = nn_cuda_bn_path(fmt(), 1);
  printf("info batchnorm training path: %s%s\n", path,
         rsv.persistent ? " (this forward: PERSISTENT, reserve kept for backward)" : "");
  if (fmt().nhwc && strstr(path, "PERSISTENT") && !rsv.persistent) {
    printf("FAIL batchnorm: the PERSISTENT path is in force but the forward did not use it\n");
    cc_failures++;
  }
  act_compare("batchnorm train y", Dy, y, n, ch, hw, tol_elem * 4);
  cc_compare("batchnorm running_mean (float)", Drm, 1, rm, c, 1e-4);
  cc_compare("batchnorm running_var (float)", Drv, 1, rv, c, 1e-4);
  cc_compare("batchnorm save_invstd (float)", Dsi, 1, si, c, 1e-4);
  CC_OK(nn_batchnorm2d_backward(&s, x, g, sm, si, dy, dx, dg, dbt));
  CC_OK(nn_batchnorm2d_backward_cuda_p(fmt(), &s, Dx, Dg, Dsm, Dsi, Ddy, Ddx, 1, Ddg, Ddb,
                                       &rsv));
  /* A refusal of the PERSISTENT backward with dx added into (beta 1; the model adds only
     where batch norm is not its input gradient's first writer) is said, not failed; the
     storing backward below (what follows every convolution) must not be refused. */
  if (rsv.persistent && !strstr(nn_cuda_bn_path(fmt(), 1), "PERSISTENT"))
    printf("note batchnorm: cuDNN refused the PERSISTENT backward with dx added into: "
           "SPATIAL from now on, the storing backward below is not checked in PERSISTENT\n");
  const int was_persistent = rsv.persistent;
  nn_cuda_bn_reserve_free(&rsv);
  act_compare("batchnorm dx (+=)", Ddx, dx, n, ch, hw, tol_acc);
  cc_compare("batchnorm dgamma (+=, float)", Ddg, 1, dg, c, 1e-3);
  cc_compare("batchnorm dbeta (+=, float)", Ddb, 1, dbt, c, 1e-3);
  CC_OK(nn_batchnorm2d_forward_infer(&s, x, g, b, rm, rv, y));
  CC_OK(nn_batchnorm2d_forward_infer_cuda_p(fmt(), &s, Dx, Dg, Db, Drm, Drv, Dy, NULL));
  act_compare("batchnorm infer y", Dy, y, n, ch, hw, tol_elem * 4);
  /* dx stored (beta 0 for data) over NaN after a training forward with a layer state
     (descriptors kept, PERSISTENT in NHWC), against the CPU's dx added into zeros. */
  float *dx0 = cc_host(nx), *tg = cc_host(c), *tb = cc_host(c);
  float *Dtg = cc_dev(NULL, c), *Dtb = cc_dev(NULL, c);
  void *Dnan = nan_dev(nx);
  CC_OK(nn_batchnorm2d_backward(&s, x, g, sm, si, dy, dx0, tg, tb));
  nn_cuda_bn_reserve_t st = {0};
  CC_OK(nn_batchnorm2d_forward_train_cuda_p(fmt(), &s, Dx, Dg, Db, Drm, Drv, Dy, Dsm, Dsi,
                                            &st));
  CC_OK(nn_batchnorm2d_backward_cuda_p(fmt(), &s, Dx, Dg, Dsm, Dsi, Ddy, Dnan, 0, Dtg, Dtb,
                                       &st));
  if (was_persistent && st.persistent && !strstr(nn_cuda_bn_path(fmt(), 1), "PERSISTENT")) {
    printf("FAIL batchnorm: cuDNN refused the PERSISTENT backward (dx stored, beta 0)\n");
    cc_failures++;
  }
  nn_cuda_bn_reserve_free(&st);
  act_compare("batchnorm dx (=)", Dnan, dx0, n, ch, hw, tol_acc);
  cc_compare("batchnorm dgamma (into zeros, float)", Dtg, 1, tg, c, 1e-3);
  free(dx0); free(tg); free(tb);
  nn_cuda_free(Dtg); nn_cuda_free(Dtb); nn_cuda_free(Dnan);
}

static void check_pool(int max, int k, int stride, int pad) {
  nn_pool2d_shape_t s = {3, 4, 9, 9, k, k, stride, stride, pad, pad, 0, 0};
  CC_OK(nn_pool2d_shape(&s));
  size_t nx = 3 * 4 * 9 * 9, ny = (size_t)3 * 4 * s.h_out * s.w_out;
  /* Distinct values inside every window, exact in both half types (k/256): with ties
     the CPU's argmax and cuDNN could pick different elements for the gradient. */
  float *x = cc_host(nx), *dy, *dx, *y = cc_host(ny);
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 37) % 256) / 256.0f - 0.5f;
  const int hwo = s.h_out * s.w_out;
  void *Dx = act_dev(x, 3, 4, 81), *Ddy = act_random(&dy, 3, 4, hwo);
  void *Ddx = act_random(&dx, 3, 4, 81);
  void *Dy = cc_dev_bytes(NULL, ny * nn_cuda_elem_size(P));
  int32_t *am = calloc(ny, sizeof(int32_t));
  if (max) {
    CC_OK(nn_maxpool2d_forward(&s, x, y, am));
    CC_OK(nn_maxpool2d_backward(&s, am, dy, dx));
  } else {
    CC_OK(nn_avgpool2d_forward(&s, x, y));
    CC_OK(nn_avgpool2d_backward(&s, dy, dx));
  }
  CC_OK(nn_pool2d_forward_cuda_p(fmt(), max, &s, Dx, Dy, NULL));
  CC_OK(nn_pool2d_backward_cuda_p(fmt(), max, &s, Dx, Dy, Ddy, Ddx, 1, NULL));
  char what[96];
  snprintf(what, sizeof what, "%spool %dx%d/%d fwd", max ? "max" : "avg", k, k, stride);
  act_compare(what, Dy, y, 3, 4, hwo, max ? 0 : tol_elem * 2);
  snprintf(what, sizeof what, "%spool %dx%d/%d dx (+=)", max ? "max" : "avg", k, k, stride);
  act_compare(what, Ddx, dx, 3, 4, 81, tol_elem * 4);
  /* dx stored (beta 0) over NaN, through a layer's kept descriptors (used twice). */
  float *dx0 = cc_host(nx);
  if (max) CC_OK(nn_maxpool2d_backward(&s, am, dy, dx0));
  else CC_OK(nn_avgpool2d_backward(&s, dy, dx0));
  nn_cuda_pool_desc_t pd = {0};
  void *Dnan = nan_dev(nx);
  CC_OK(nn_pool2d_forward_cuda_p(fmt(), max, &s, Dx, Dy, &pd));
  CC_OK(nn_pool2d_backward_cuda_p(fmt(), max, &s, Dx, Dy, Ddy, Dnan, 0, &pd));
  nn_cuda_pool_desc_free(&pd);
  snprintf(what, sizeof what, "%spool %dx%d/%d dx (=)", max ? "max" : "avg", k, k, stride);
  act_compare(what, Dnan, dx0, 3, 4, 81, tol_elem * 4);
  free(dx0);
  nn_cuda_free(Dnan);
  free(am); free(x); free(dy); free(dx); free(y);
  nn_cuda_free(Dx); nn_cuda_free(Ddy); nn_cuda_free(Ddx); nn_cuda_free(Dy);
}

static void check_linear(int n, int in, int out) {
  size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
  float *x, *w, *b, *dy, *dx, *dw, *db, *y = cc_host(ny);
  void *Dx = half_random(&x, nx), *Dw = half_random(&w, nw), *Db = half_random(&b, out);
  void *Ddy = half_random(&dy, ny), *Ddx = half_random(&dx, nx), *Ddw = half_random(&dw, nw);
  void *Ddb = half_random(&db, out), *Dy = cc_dev_bytes(NULL, ny * nn_cuda_elem_size(P));
  CC_OK(nn_linear_forward(n, in, out, x, w, b, y));
  CC_OK(nn_linear_forward_cuda_p(P, n, in, out, Dx, Dw, Db, Dy));
  half_compare("linear fwd", Dy, y, ny, tol_acc);
  CC_OK(nn_linear_backward(n, in, out, x, w, dy, dx, dw, db));
  CC_OK(nn_linear_backward_cuda_p(P, n, in, out, Dx, Dw, Ddy, Ddx, 1, Ddw, Ddb));
  half_compare("linear dx (+=)", Ddx, dx, nx, tol_acc);
  half_compare("linear dw (+=)", Ddw, dw, nw, tol_acc);
  half_compare("linear db (+=)", Ddb, db, (size_t)out, tol_acc);
  float *dx0 = cc_host(nx);
  void *Dnan = nan_dev(nx);
  CC_OK(nn_linear_backward(n, in, out, x, w, dy, dx0, NULL, NULL));
  CC_OK(nn_linear_backward_cuda_p(P, n, in, out, Dx, Dw, Ddy, Dnan, 0, NULL, NULL));
  half_compare("linear dx (=)", Dnan, dx0, nx, tol_acc);
  free(dx0);
  nn_cuda_free(Dnan);
  free(x); free(w); free(b); free(dy); free(dx); free(dw); free(db); free(y);
  nn_cuda_free(Dx); nn_cuda_free(Dw); nn_cuda_free(Db); nn_cuda_free(Ddy);
  nn_cuda_free(Ddx); nn_cuda_free(Ddw); nn_cuda_free(Ddb); nn_cuda_free(Dy);
}

static void check_gap(void) {
  const size_t es = nn_cuda_elem_size(P);
  int gn = 5, gc = 7, hw = 49;
  size_t ng = (size_t)gn * gc;
  float *x, *gdy, *gdx, *gy = cc_host(ng);
  void *Dx = act_random(&x, gn, gc, hw), *Dgdy = half_random(&gdy, ng);
  void *Dgdx = act_random(&gdx, gn, gc, hw);
  void *Dgy = cc_dev_bytes(NULL, ng * es);
  nn_global_avgpool_forward(gn, gc, hw, x, gy);
  CUK_OK(nn_cuk_gap_forward(stream(), P, NHWC, gn, gc, hw, Dx, Dgy));
  half_compare(NHWC ? "nhwc global avgpool fwd" : "global avgpool fwd", Dgy, gy, ng,
               tol_elem * 2);
  nn_global_avgpool_backward(gn, gc, hw, gdy, gdx);
  CUK_OK(nn_cuk_gap_backward(stream(), P, NHWC, gn, gc, hw, Dgdy, Dgdx, 1));
  act_compare("global avgpool dx (+=)", Dgdx, gdx, gn, gc, hw, tol_elem * 2);
  float *gdx0 = cc_host((size_t)gn * gc * hw);
  void *Dnan = nan_dev((size_t)gn * gc * hw);
  nn_global_avgpool_backward(gn, gc, hw, gdy, gdx0);
  CUK_OK(nn_cuk_gap_backward(stream(), P, NHWC, gn, gc, hw, Dgdy, Dnan, 0));
  act_compare("global avgpool dx (=)", Dnan, gdx0, gn, gc, hw, tol_elem * 2);
  free(gdx0);
  nn_cuda_free(Dnan);
  free(x); free(gdy); free(gdx); free(gy);
  nn_cuda_free(Dx); nn_cuda_free(Dgdy); nn_cuda_free(Dgdx); nn_cuda_free(Dgy);
}

static void check_elementwise(void) {
  cudaStream_t st = stream();
  const size_t es = nn_cuda_elem_size(P);
  size_t n = 10007;
  float *a, *b, *dy, *da, *db, *y = cc_host(n);
  void *Da = half_random(&a, n), *Db = half_random(&b, n), *Ddy = half_random(&dy, n);
  void *Dda = half_random(&da, n), *Ddb = half_random(&db, n);
  void *Dy = cc_dev_bytes(NULL, n * es);
  nn_relu_forward(n, a, y);
  CUK_OK(nn_cuk_relu_forward(st, P, n, Da, Dy));
  half_compare("relu fwd", Dy, y, n, 0);
  nn_relu_backward(n, y, dy, da);
  CUK_OK(nn_cuk_relu_backward(st, P, n, Dy, Ddy, Dda, 1));
  half_compare("relu dx (+=)", Dda, da, n, tol_elem);
  nn_add_forward(n, a, b, y);
  CUK_OK(nn_cuk_add_forward(st, P, n, Da, Db, Dy));
  half_compare("add fwd", Dy, y, n, tol_elem);
  /* Restart from rounded values: the += results above were rounded on the GPU only. */
  void *Dda2 = half_random(&da, n);
  for (size_t i = 0; i < n; i++) { da[i] += dy[i]; db[i] += dy[i]; }
  CUK_OK(nn_cuk_add_backward(st, P, n, Ddy, Dda2, 1, Ddb, 1));
  half_compare("add da (+=)", Dda2, da, n, tol_elem);
  half_compare("add db (+=)", Ddb, db, n, tol_elem);
  /* dropout: the CPU's mask, bit for bit, in half precision too */
  uint8_t *mask = malloc(n), *gmask = malloc(n), *Dmask = cc_dev_bytes(NULL, n);
  void *Dda3 = half_random(&da, n);
  nn_dropout_forward(n, 0.3f, 1234, 7, a, y, mask);
  CUK_OK(nn_cuk_dropout_forward(st, P, n, 0.3f, 1234, 7, Da, Dy, Dmask));
  half_compare("dropout fwd", Dy, y, n, tol_elem);
  CC_OK(nn_cuda_to_host(gmask, Dmask, n));
  int same = memcmp(mask, gmask, n) == 0;
  printf("%-4s %s dropout mask identical to the CPU's\n", same ? "ok" : "FAIL",
         nn_precision_name(P));
  if (!same) cc_failures++;
  nn_dropout_backward(n, 0.3f, mask, dy, da);
  CUK_OK(nn_cuk_dropout_backward(st, P, n, 0.3f, Dmask, Ddy, Dda3, 1));
  half_compare("dropout dx (+=)", Dda3, da, n, tol_elem * 2);
  free(mask); free(gmask);
}

/* The storing forms (add 0) of the elementwise backward kernels, over NaN. */
static void check_elementwise_store(void) {
  cudaStream_t st = stream();
  const size_t n = 4099;
  float *a, *dy, *db, *y = cc_host(n), *want = cc_host(n), *want2 = cc_host(n);
  void *Da = half_random(&a, n), *Ddy = half_random(&dy, n), *Ddb = half_random(&db, n);
  void *Dy = cc_dev_bytes(NULL, n * nn_cuda_elem_size(P)), *Dnan = nan_dev(n);
  nn_relu_forward(n, a, y);
  nn_relu_backward(n, y, dy, want);                     /* into zeros */
  CUK_OK(nn_cuk_relu_forward(st, P, n, Da, Dy));
  CUK_OK(nn_cuk_relu_backward(st, P, n, Dy, Ddy, Dnan, 0));
  half_compare("relu dx (=)", Dnan, want, n, tol_elem);
  /* add: a stored, b added; then one buffer for both (x + x): stored, then added. */
  void *Dn2 = nan_dev(n), *Dn3 = nan_dev(n);
  for (size_t i = 0; i < n; i++) { want[i] = db[i] + dy[i]; want2[i] = 2.0f * dy[i]; }
  CUK_OK(nn_cuk_add_backward(st, P, n, Ddy, Dn2, 0, Ddb, 1));
  half_compare("add da (=)", Dn2, dy, n, tol_elem);
  half_compare("add db (+=) beside da (=)", Ddb, want, n, tol_elem);
  CUK_OK(nn_cuk_add_backward(st, P, n, Ddy, Dn3, 0, Dn3, 1));
  half_compare("add x + x (= then +=)", Dn3, want2, n, tol_elem);
  /* accumulate (flatten's backward): stored is a copy */
  void *Dn4 = nan_dev(n);
  CUK_OK(nn_cuk_accumulate(st, P, n, Ddy, Dn4, 0));
  half_compare("accumulate (=)", Dn4, dy, n, 0);
  /* dropout, and p = 1 (nothing kept: dx = 0) */
  uint8_t *mask = malloc(n), *Dmask = cc_dev_bytes(NULL, n);
  nn_dropout_forward(n, 0.3f, 99, 3, a, y, mask);
  CUK_OK(nn_cuk_dropout_forward(st, P, n, 0.3f, 99, 3, Da, Dy, Dmask));
  memset(want, 0, n * sizeof(float));
  nn_dropout_backward(n, 0.3f, mask, dy, want);
  void *Dn5 = nan_dev(n), *Dn6 = nan_dev(n);
  CUK_OK(nn_cuk_dropout_backward(st, P, n, 0.3f, Dmask, Ddy, Dn5, 0));
  half_compare("dropout dx (=)", Dn5, want, n, tol_elem * 2);
  memset(want, 0, n * sizeof(float));
  CUK_OK(nn_cuk_dropout_backward(st, P, n, 1.0f, Dmask, Ddy, Dn6, 0));
  half_compare("dropout p=1 dx (=)", Dn6, want, n, 0);
  /* flatten of NHWC: dx (NHWC) = dy (NCHW) permuted back */
  const int fn = 3, fc = 7, fhw = 13;
  const size_t ft = (size_t)fn * fc * fhw;
  float *fdy, *fwant = cc_host(ft);
  void *Dfdy = half_random(&fdy, ft), *Dn7 = nan_dev(ft);
  host_to_nhwc(fdy, fwant, fn, fc, fhw);
  CUK_OK(nn_cuk_nchw_to_nhwc_acc(st, P, fn, fc, fhw, Dfdy, Dn7, 0));
  half_compare("flatten nhwc dx (=)", Dn7, fwant, ft, 0);
  free(a); free(dy); free(db); free(y); free(want); free(want2); free(mask);
  free(fdy); free(fwant);
  nn_cuda_free(Da); nn_cuda_free(Ddy); nn_cuda_free(Ddb); nn_cuda_free(Dy);
  nn_cuda_free(Dnan); nn_cuda_free(Dn2); nn_cuda_free(Dn3); nn_cuda_free(Dn4);
  nn_cuda_free(Dn5); nn_cuda_free(Dn6); nn_cuda_free(Dn7); nn_cuda_free(Dmask);
  nn_cuda_free(Dfdy);
}

/* Softmax cross-entropy on half logits: the loss (float) as the CPU's, dlogits scaled by
   the loss scale. */
static void check_softmax(float scale) {
  int n = 37, k = 10;
  float *z = cc_random((size_t)n * k), *d = cc_host((size_t)n * k);
  for (int i = 0; i < n * k; i++) z[i] *= 4.0f;
  void *Dz = half_dev(z, (size_t)n * k);
  int32_t lab[37];
  for (int i = 0; i < n; i++) lab[i] = (i * 7) % k;
  float loss = 0;
  int correct = 0;
  CC_OK(nn_softmax_cross_entropy(n, k, z, lab, &loss, &correct, d));
  for (int i = 0; i < n * k; i++) d[i] *= scale;
  void *Dd = cc_dev_bytes(NULL, (size_t)n * k * nn_cuda_elem_size(P));
  float *Dl = cc_dev(NULL, 1), *Dscale = cc_dev(&scale, 1);
  int32_t *Dlab = cc_dev_bytes(lab, sizeof lab);
  int *Dc = cc_dev_bytes(NULL, sizeof(int));
  CUK_OK(nn_cuk_softmax_xent(stream(), P, n, k, Dz, Dlab, Dl, Dc, Dd, Dscale));
  char what[96];
  snprintf(what, sizeof what, "softmax xent loss (scale %g)", (double)scale);
  cc_compare(what, Dl, 1, &loss, 1, 1e-5);
  snprintf(what, sizeof what, "softmax xent dlogits x %g", (double)scale);
  half_compare(what, Dd, d, (size_t)n * k, tol_elem * 2);
  int gc = -1;
  CC_OK(nn_cuda_to_host(&gc, Dc, sizeof gc));
  printf("%-4s softmax xent correct %d (CPU %d)\n", gc == correct ? "ok" : "FAIL", gc, correct);
  if (gc != correct) cc_failures++;
}

/* Tolerances of precision p. */
static void set_precision(nn_precision_t p) {
  P = p;
  /* one rounding of the stored result; accumulated results: a few of those */
  tol_elem = P == NN_PRECISION_FP16 ? 1.0 / 1024 : P == NN_PRECISION_BF16 ? 1.0 / 128 : 1e-5;
  tol_acc = P == NN_PRECISION_FP16 ? 5e-3 : P == NN_PRECISION_BF16 ? 3e-2 : 1e-4;
}

/* The layers whose result depends on the layout. */
static void check_layout_dependent(void) {
  check_conv(2, 3, 17, 15, 8, 3, 1, 1, 1);
  check_conv(3, 16, 14, 14, 32, 3, 2, 1, 0);
  check_conv(2, 32, 8, 8, 64, 1, 1, 0, 0);
  check_conv(2, 3, 32, 32, 16, 7, 2, 3, 0);
  check_bn(4, 8, 6, 5);
  check_pool(1, 3, 2, 1);
  check_pool(0, 2, 2, 0);
  check_gap();
}

int main(void) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  const nn_precision_t all[3] = {NN_PRECISION_FP32, NN_PRECISION_FP16, NN_PRECISION_BF16};
  /* nn's own batch-norm kernels (what runs where cuDNN refuses a type or layout), in all
     three precisions and both layouts; cuDNN's below. */
  setenv("NN_CUDA_BN", "native", 1);
  for (int i = 0; i < 3; i++)
    for (NHWC = 0; NHWC < 2; NHWC++) {
      set_precision(all[i]);
      printf("== %s %s, nn's batch-norm kernels (NN_CUDA_BN=native)\n", nn_precision_name(P),
             NHWC ? "NHWC" : "NCHW");
      check_bn(4, 8, 6, 5);
      check_bn(8, 70, 7, 7);   /* NHWC: channel tiles of 32 and a partial one, 7 chunks */
    }
  unsetenv("NN_CUDA_BN");
  /* nn's own pooling kernels (what runs where cuDNN refuses a type or layout). */
  setenv("NN_CUDA_POOL", "native", 1);
  for (int i = 0; i < 3; i++)
    for (NHWC = 0; NHWC < 2; NHWC++) {
      set_precision(all[i]);
      printf("== %s %s, nn's pooling kernels (NN_CUDA_POOL=native)\n", nn_precision_name(P),
             NHWC ? "NHWC" : "NCHW");
      check_pool(1, 3, 2, 1);
      check_pool(0, 2, 2, 0);
      check_pool(0, 3, 1, 1);
    }
  unsetenv("NN_CUDA_POOL");
  for (int i = 1; i < 3; i++) {
    set_precision(all[i]);
    NHWC = 0;
    printf("== %s\n", nn_precision_name(P));
    check_casts();
    check_layout_dependent();
    check_linear(9, 300, 17);
    check_linear(64, 2048, 1000);
    check_elementwise();
    check_elementwise_store();
    check_softmax(1.0f);
    check_softmax(1024.0f);
  }
  for (int i = 0; i < 3; i++) {
    set_precision(all[i]);
    NHWC = 1;
    printf("== %s NHWC (channels last)\n", nn_precision_name(P));
    check_layout_dependent();
  }
  return cc_finish("all half-precision and channels-last CUDA layer checks passed");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
