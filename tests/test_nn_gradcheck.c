/* tests/test_nn_gradcheck.c: every CPU kernel's backward against finite differences.

   For each kernel the test holds a double-precision reference forward (plain loops,
   written from the definitions, independent of the kernel code). It checks:
   1. the float kernel's forward equals the reference forward;
   2. the float kernel's backward equals the central finite differences (h = 1e-6) of
      L = sum(y * r), r random, computed with the double reference, for every element
      of every input and parameter;
   3. backward ADDS: gradients start from random values, and the test compares the
      increase.
   Shapes are small and odd (batch 3, non-square, stride 2, padding, with and without
   bias), and everything runs with 1 and with 2 threads (the batch-split paths); the
   convolutions also with im2col blocks of one output row.
   Error per tensor: max|got - want| / max(max|want|, 1e-6); limit 1e-4 (forward 1e-5). */
#include "nn/nn.h"
#include "nn/conv2d_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static double worst_seen;

/* ---- helpers ---- */
static uint64_t rng_state = 12345;
static double urand(void) {  /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float *frand(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)urand();
  return p;
}
static double *to_d(const float *p, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = p ? p[i] : 0;
  return d;
}
static float *fcopy(const float *p, size_t n) {
  float *c = malloc((n ? n : 1) * sizeof *c);
  memcpy(c, p, n * sizeof *c);
  return c;
}

/* got[i] - base[i] (or got when base NULL) against want; prints and counts failures. */
static void compare(const char *what, const float *got, const float *base, const double *want,
                    size_t n, double tol) {
  double maxdiff = 0, maxref = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double g = (double)got[i] - (base ? (double)base[i] : 0.0);
    double d = fabs(g - want[i]);
    if (d > maxdiff || d != d) {
      maxdiff = d;
      at = i;
    }
    if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
  }
  double err = maxdiff / (maxref > 1e-6 ? maxref : 1e-6);
  int ok = err <= tol;
  if (err > worst_seen) worst_seen = err;
  printf("  %-4s %-46s rel err %.2e (max|ref| %.3g)%s\n", ok ? "ok" : "FAIL", what, err, maxref,
         ok ? "" : " <-- too large");
  if (!ok) {
    printf("       worst at %zu: got %.8g want %.8g\n", at,
           (double)got[at] - (base ? (double)base[at] : 0.0), want[at]);
    failures++;
  }
}

/* Finite differences of loss(ctx) with respect to every element of p[0..n). */
typedef double (*loss_fn)(void *ctx);
static double *finite_diff(loss_fn loss, void *ctx, double *p, size_t n) {
  double *g = malloc((n ? n : 1) * sizeof *g);
  const double h = 1e-6;
  for (size_t i = 0; i < n; i++) {
    double keep = p[i];
    p[i] = keep + h;
    double lp = loss(ctx);
    p[i] = keep - h;
    double lm = loss(ctx);
    p[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

#define CHECK_OK(call)                                                            \
  do {                                                                            \
    nn_status_t st_ = (call);                                                     \
    if (st_ != NN_OK) {                                                           \
      printf("  FAIL %s: %s (%s)\n", #call, nn_status_string(st_), nn_last_error()); \
      failures++;                                                                 \
      return;                                                                     \
    }                                                                             \
  } while (0)

/* ---- conv2d ---- */
typedef struct {
  nn_conv2d_shape_t s;
  double *x, *w, *b, *y, *r;
  int has_bias;
} conv_ctx_t;

static void conv_ref(const conv_ctx_t *c) {
  const nn_conv2d_shape_t *s = &c->s;
  for (int n = 0; n < s->n; n++)
    for (int co = 0; co < s->c_out; co++)
      for (int oh = 0; oh < s->h_out; oh++)
        for (int ow = 0; ow < s->w_out; ow++) {
          double acc = c->has_bias ? c->b[co] : 0;
          for (int ci = 0; ci < s->c_in; ci++)
            for (int i = 0; i < s->kh; i++)
              for (int j = 0; j < s->kw; j++) {
                int ih = oh * s->stride_h - s->pad_h + i, iw = ow * s->stride_w - s->pad_w + j;
                if (ih < 0 || ih >= s->h_in || iw < 0 || iw >= s->w_in) continue;
                acc += c->x[((n * s->c_in + ci) * s->h_in + ih) * s->w_in + iw] *
                       c->w[((co * s->c_in + ci) * s->kh + i) * s->kw + j];
              }
          c->y[((n * s->c_out + co) * s->h_out + oh) * s->w_out + ow] = acc;
        }
}
static double conv_loss(void *v) {
  conv_ctx_t *c = v;
  conv_ref(c);
  return dot(c->y, c->r, (size_t)c->s.n * c->s.c_out * c->s.h_out * c->s.w_out);
}

static void check_conv(int n, int cin, int h, int w, int cout, int kh, int kw, int sh, int sw,
                       int ph, int pw, int bias) {
  nn_conv2d_shape_t s = {n, cin, h, w, cout, kh, kw, sh, sw, ph, pw, 0, 0};
  CHECK_OK(nn_conv2d_shape(&s));
  printf("conv2d n=%d %dx%dx%d -> %d k=%dx%d s=%dx%d p=%dx%d bias=%d -> %dx%d\n", n, cin, h, w,
         cout, kh, kw, sh, sw, ph, pw, bias, s.h_out, s.w_out);
  size_t nx = (size_t)n * cin * h * w, nw = (size_t)cout * cin * kh * kw,
         ny = (size_t)n * cout * s.h_out * s.w_out;
  float *x = frand(nx), *wt = frand(nw), *b = frand(cout), *r = frand(ny);
  float *y = calloc(ny, sizeof *y);
  float *ws = calloc(nn_conv2d_workspace_floats(&s) + 1, sizeof *ws);
  float *dx0 = frand(nx), *dw0 = frand(nw), *db0 = frand(cout);
  float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = fcopy(db0, cout);
  conv_ctx_t c = {s, to_d(x, nx), to_d(wt, nw), to_d(b, cout), calloc(ny, sizeof(double)),
                  to_d(r, ny), bias};
  CHECK_OK(nn_conv2d_forward(&s, x, wt, bias ? b : NULL, y, ws));
  conv_ref(&c);
  compare("forward y", y, NULL, c.y, ny, 1e-5);
  CHECK_OK(nn_conv2d_backward(&s, x, wt, r, dx, dw, bias ? db : NULL, ws));
  double *gx = finite_diff(conv_loss, &c, c.x, nx), *gw = finite_diff(conv_loss, &c, c.w, nw);
  compare("dx (added)", dx, dx0, gx, nx, 1e-4);
  compare("dw (added)", dw, dw0, gw, nw, 1e-4);
  if (bias) {
    double *gb = finite_diff(conv_loss, &c, c.b, cout);
    compare("db (added)", db, db0, gb, cout, 1e-4);
    free(gb);
  }
  /* Each gradient alone (the others NULL) gives the same values. */
  float *dx2 = fcopy(dx0, nx), *dw2 = fcopy(dw0, nw);
  CHECK_OK(nn_conv2d_backward(&s, x, wt, r, dx2, NULL, NULL, ws));
  CHECK_OK(nn_conv2d_backward(&s, x, wt, r, NULL, dw2, NULL, ws));
  compare("dx alone", dx2, dx0, gx, nx, 1e-4);
  compare("dw alone", dw2, dw0, gw, nw, 1e-4);
  free(dx2); free(dw2);
  free(gx); free(gw);
  free(x); free(wt); free(b); free(r); free(y); free(ws); free(dx0); free(dw0); free(db0);
  free(dx); free(dw); free(db);
  free(c.x); free(c.w); free(c.b); free(c.y); free(c.r);
}

/* ---- batchnorm2d ---- */
typedef struct {
  nn_batchnorm2d_shape_t s;
  double *x, *g, *b, *y, *r, *mean, *var;
} bn_ctx_t;

static void bn_ref(bn_ctx_t *c) {
  const nn_batchnorm2d_shape_t *s = &c->s;
  size_t hw = (size_t)s->h * s->w;
  double m = (double)s->n * hw;
  for (int ch = 0; ch < s->c; ch++) {
    double sum = 0, sq = 0;
    for (int n = 0; n < s->n; n++)
      for (size_t p = 0; p < hw; p++) sum += c->x[(n * s->c + ch) * hw + p];
    double mean = sum / m;
    for (int n = 0; n < s->n; n++)
      for (size_t p = 0; p < hw; p++) {
        double d = c->x[(n * s->c + ch) * hw + p] - mean;
        sq += d * d;
      }
    double var = sq / m;
    c->mean[ch] = mean;
    c->var[ch] = var;
    for (int n = 0; n < s->n; n++)
      for (size_t p = 0; p < hw; p++) {
        size_t i = (n * s->c + ch) * hw + p;
        c->y[i] = (c->x[i] - mean) / sqrt(var + s->eps) * c->g[ch] + c->b[ch];
      }
  }
}
static double bn_loss(void *v) {
  bn_ctx_t *c = v;
  bn_ref(c);
  return dot(c->y, c->r, (size_t)c->s.n * c->s.c * c->s.h * c->s.w);
}

static void check_bn(int n, int ch, int h, int w) {
  nn_batchnorm2d_shape_t s = {n, ch, h, w, 1e-5f, 0.1f};
  printf("batchnorm2d n=%d c=%d %dx%d\n", n, ch, h, w);
  size_t nx = (size_t)n * ch * h * w;
  float *x = frand(nx), *g = frand(ch), *b = frand(ch), *r = frand(nx);
  for (size_t i = 0; i < nx; i++) x[i] = x[i] * 3 + 0.5f;  /* mean and scale away from 0/1 */
  float *y = calloc(nx, sizeof *y), *rm = frand(ch), *rv = frand(ch);
  for (int i = 0; i < ch; i++) rv[i] = fabsf(rv[i]) + 0.5f;
  float *rm0 = fcopy(rm, ch), *rv0 = fcopy(rv, ch);
  float *sm = calloc(ch, sizeof *sm), *si = calloc(ch, sizeof *si);
  float *dx0 = frand(nx), *dg0 = frand(ch), *db0 = frand(ch);
  float *dx = fcopy(dx0, nx), *dg = fcopy(dg0, ch), *db = fcopy(db0, ch);
  bn_ctx_t c = {s, to_d(x, nx), to_d(g, ch), to_d(b, ch), calloc(nx, sizeof(double)),
                to_d(r, nx), calloc(ch, sizeof(double)), calloc(ch, sizeof(double))};
  CHECK_OK(nn_batchnorm2d_forward_train(&s, x, g, b, rm, rv, y, sm, si));
  bn_ref(&c);
  compare("train forward y", y, NULL, c.y, nx, 1e-5);
  double *want_rm = calloc(ch, sizeof(double)), *want_rv = calloc(ch, sizeof(double)),
         *want_si = calloc(ch, sizeof(double));
  double m = (double)n * h * w;
  for (int i = 0; i < ch; i++) {
    want_rm[i] = 0.9 * rm0[i] + 0.1 * c.mean[i];
    want_rv[i] = 0.9 * rv0[i] + 0.1 * c.var[i] * m / (m - 1);
    want_si[i] = 1 / sqrt(c.var[i] + 1e-5);
  }
  compare("save_mean", sm, NULL, c.mean, ch, 1e-5);
  compare("save_invstd", si, NULL, want_si, ch, 1e-5);
  compare("running_mean (momentum 0.1)", rm, NULL, want_rm, ch, 1e-5);
  compare("running_var (unbiased)", rv, NULL, want_rv, ch, 1e-5);
  CHECK_OK(nn_batchnorm2d_backward(&s, x, g, sm, si, r, dx, dg, db));
  double *gx = finite_diff(bn_loss, &c, c.x, nx), *gg = finite_diff(bn_loss, &c, c.g, ch),
         *gb = finite_diff(bn_loss, &c, c.b, ch);
  compare("dx (added)", dx, dx0, gx, nx, 1e-4);
  compare("dgamma (added)", dg, dg0, gg, ch, 1e-4);
  compare("dbeta (added)", db, db0, gb, ch, 1e-4);
  /* Inference uses the running statistics. */
  double *yi = calloc(nx, sizeof(double));
  size_t hw = (size_t)h * w;
  for (size_t i = 0; i < nx; i++) {
    int cc = (int)((i / hw) % ch);
    yi[i] = (x[i] - (double)rm[cc]) / sqrt((double)rv[cc] + 1e-5) * g[cc] + b[cc];
  }
  CHECK_OK(nn_batchnorm2d_forward_infer(&s, x, g, b, rm, rv, y));
  compare("infer forward y", y, NULL, yi, nx, 1e-5);
  free(yi); free(gx); free(gg); free(gb); free(want_rm); free(want_rv); free(want_si);
  free(x); free(g); free(b); free(r); free(y); free(rm); free(rv); free(rm0); free(rv0);
  free(sm); free(si); free(dx0); free(dg0); free(db0); free(dx); free(dg); free(db);
  free(c.x); free(c.g); free(c.b); free(c.y); free(c.r); free(c.mean); free(c.var);
}

/* ---- pooling ---- */
typedef struct {
  nn_pool2d_shape_t s;
  int is_max;
  double *x, *y, *r;
} pool_ctx_t;

static void pool_ref(pool_ctx_t *c) {
  const nn_pool2d_shape_t *s = &c->s;
  for (int pl = 0; pl < s->n * s->c; pl++)
    for (int oh = 0; oh < s->h_out; oh++)
      for (int ow = 0; ow < s->w_out; ow++) {
        double best = -INFINITY, sum = 0;
        for (int i = 0; i < s->kh; i++)
          for (int j = 0; j < s->kw; j++) {
            int ih = oh * s->stride_h - s->pad_h + i, iw = ow * s->stride_w - s->pad_w + j;
            if (ih < 0 || ih >= s->h_in || iw < 0 || iw >= s->w_in) continue;  /* pad: 0 / -inf */
            double v = c->x[((size_t)pl * s->h_in + ih) * s->w_in + iw];
            sum += v;
            if (v > best) best = v;
          }
        c->y[((size_t)pl * s->h_out + oh) * s->w_out + ow] =
            c->is_max ? best : sum / (s->kh * s->kw);
      }
}
static double pool_loss(void *v) {
  pool_ctx_t *c = v;
  pool_ref(c);
  return dot(c->y, c->r, (size_t)c->s.n * c->s.c * c->s.h_out * c->s.w_out);
}

static void check_pool(int is_max, int n, int ch, int h, int w, int kh, int kw, int sh, int sw,
                       int ph, int pw) {
  nn_pool2d_shape_t s = {n, ch, h, w, kh, kw, sh, sw, ph, pw, 0, 0};
  CHECK_OK(nn_pool2d_shape(&s));
  printf("%s n=%d c=%d %dx%d k=%dx%d s=%dx%d p=%dx%d -> %dx%d\n", is_max ? "maxpool2d" : "avgpool2d",
         n, ch, h, w, kh, kw, sh, sw, ph, pw, s.h_out, s.w_out);
  size_t nx = (size_t)n * ch * h * w, ny = (size_t)n * ch * s.h_out * s.w_out;
  float *x = frand(nx), *r = frand(ny), *y = calloc(ny, sizeof(float));
  int32_t *am = calloc(ny, sizeof *am);
  float *dx0 = frand(nx), *dx = fcopy(dx0, nx);
  pool_ctx_t c = {s, is_max, to_d(x, nx), calloc(ny, sizeof(double)), to_d(r, ny)};
  if (is_max) CHECK_OK(nn_maxpool2d_forward(&s, x, y, am));
  else CHECK_OK(nn_avgpool2d_forward(&s, x, y));
  pool_ref(&c);
  compare("forward y", y, NULL, c.y, ny, 1e-5);
  if (is_max) CHECK_OK(nn_maxpool2d_backward(&s, am, r, dx));
  else CHECK_OK(nn_avgpool2d_backward(&s, r, dx));
  double *gx = finite_diff(pool_loss, &c, c.x, nx);
  compare("dx (added)", dx, dx0, gx, nx, 1e-4);
  free(gx); free(x); free(r); free(y); free(am); free(dx0); free(dx);
  free(c.x); free(c.y); free(c.r);
}

/* ---- global average pool, relu, add, dropout: linear maps checked directly ---- */
static void check_elementwise(void) {
  printf("global_avgpool n=3 c=5 hw=7\n");
  {
    int n = 3, c = 5, hw = 7;
    size_t nx = (size_t)n * c * hw;
    float *x = frand(nx), *y = calloc(n * c, sizeof(float)), *r = frand(n * c);
    double *want = calloc(nx, sizeof(double)), *wy = calloc(n * c, sizeof(double));
    for (int p = 0; p < n * c; p++) {
      for (int k = 0; k < hw; k++) wy[p] += x[p * hw + k] / 7.0;
      for (int k = 0; k < hw; k++) want[p * hw + k] = r[p] / 7.0;
    }
    nn_global_avgpool_forward(n, c, hw, x, y);
    compare("forward y", y, NULL, wy, n * c, 1e-5);
    float *dx0 = frand(nx), *dx = fcopy(dx0, nx);
    nn_global_avgpool_backward(n, c, hw, r, dx);
    compare("dx (added)", dx, dx0, want, nx, 1e-4);
    free(x); free(y); free(r); free(want); free(wy); free(dx0); free(dx);
  }
  printf("relu and add, 1000003 elements (threaded path)\n");
  {
    size_t nx = 1000003;
    float *x = frand(nx), *b = frand(nx), *y = calloc(nx, sizeof(float)), *r = frand(nx);
    double *wy = calloc(nx, sizeof(double)), *wd = calloc(nx, sizeof(double));
    x[5] = 0.0f;  /* relu'(0) = 0, as PyTorch */
    for (size_t i = 0; i < nx; i++) {
      wy[i] = x[i] > 0 ? x[i] : 0;
      wd[i] = x[i] > 0 ? r[i] : 0;
    }
    nn_relu_forward(nx, x, y);
    compare("relu forward y", y, NULL, wy, nx, 0);
    float *dx0 = frand(nx), *dx = fcopy(dx0, nx);
    nn_relu_backward(nx, y, r, dx);
    compare("relu dx (added)", dx, dx0, wd, nx, 1e-6);
    for (size_t i = 0; i < nx; i++) wy[i] = (double)(x[i] + b[i]);
    nn_add_forward(nx, x, b, y);
    compare("add forward y", y, NULL, wy, nx, 0);
    free(x); free(b); free(y); free(r); free(wy); free(wd); free(dx0); free(dx);
  }
  printf("dropout p=0.3, 100000 elements\n");
  {
    size_t nx = 100000;
    float p = 0.3f;
    float *x = frand(nx), *y = calloc(nx, sizeof(float)), *y2 = calloc(nx, sizeof(float));
    uint8_t *m = calloc(nx, 1), *m2 = calloc(nx, 1);
    nn_dropout_forward(nx, p, 42, 7, x, y, m);
    nn_dropout_forward(nx, p, 42, 7, x, y2, m2);
    size_t kept = 0, differ = 0;
    for (size_t i = 0; i < nx; i++) kept += m[i];
    differ = memcmp(m, m2, nx) != 0 || memcmp(y, y2, nx * sizeof(float)) != 0;
    double frac = (double)kept / nx;
    int ok = !differ && fabs(frac - 0.7) < 0.01;
    printf("  %-4s same (seed, step) gives the same mask; kept %.4f (want 0.70 +- 0.01)\n",
           ok ? "ok" : "FAIL", frac);
    failures += !ok;
    nn_dropout_forward(nx, p, 42, 8, x, y2, m2);
    size_t same = 0;
    for (size_t i = 0; i < nx; i++) same += m[i] == m2[i];
    ok = same < nx * 0.65;  /* independent masks agree on ~0.58 of elements */
    printf("  %-4s another step gives another mask (agreement %.3f)\n", ok ? "ok" : "FAIL",
           (double)same / nx);
    failures += !ok;
    double *wy = calloc(nx, sizeof(double)), *wd = calloc(nx, sizeof(double));
    float *r = frand(nx), *dx0 = frand(nx), *dx = fcopy(dx0, nx);
    for (size_t i = 0; i < nx; i++) {
      wy[i] = m[i] ? x[i] / (1.0 - p) : 0;
      wd[i] = m[i] ? r[i] / (1.0 - p) : 0;
    }
    compare("forward y = x mask / (1-p)", y, NULL, wy, nx, 1e-6);
    nn_dropout_backward(nx, p, m, r, dx);
    compare("dx (added)", dx, dx0, wd, nx, 1e-6);
    free(x); free(y); free(y2); free(m); free(m2); free(wy); free(wd); free(r); free(dx0); free(dx);
  }
}

/* ---- linear ---- */
typedef struct {
  int n, in, out, has_bias;
  double *x, *w, *b, *y, *r;
} lin_ctx_t;
static void lin_ref(lin_ctx_t *c) {
  for (int i = 0; i < c->n; i++)
    for (int o = 0; o < c->out; o++) {
      double acc = c->has_bias ? c->b[o] : 0;
      for (int k = 0; k < c->in; k++) acc += c->x[i * c->in + k] * c->w[o * c->in + k];
      c->y[i * c->out + o] = acc;
    }
}
static double lin_loss(void *v) {
  lin_ctx_t *c = v;
  lin_ref(c);
  return dot(c->y, c->r, (size_t)c->n * c->out);
}
static void check_linear(int n, int in, int out, int bias) {
  printf("linear n=%d in=%d out=%d bias=%d\n", n, in, out, bias);
  size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
  float *x = frand(nx), *w = frand(nw), *b = frand(out), *r = frand(ny), *y = calloc(ny, 4);
  float *dx0 = frand(nx), *dw0 = frand(nw), *db0 = frand(out);
  float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = fcopy(db0, out);
  lin_ctx_t c = {n, in, out, bias, to_d(x, nx), to_d(w, nw), to_d(b, out),
                 calloc(ny, sizeof(double)), to_d(r, ny)};
  CHECK_OK(nn_linear_forward(n, in, out, x, w, bias ? b : NULL, y));
  lin_ref(&c);
  compare("forward y", y, NULL, c.y, ny, 1e-5);
  CHECK_OK(nn_linear_backward(n, in, out, x, w, r, dx, dw, bias ? db : NULL));
  double *gx = finite_diff(lin_loss, &c, c.x, nx), *gw = finite_diff(lin_loss, &c, c.w, nw);
  compare("dx (added)", dx, dx0, gx, nx, 1e-4);
  compare("dw (added)", dw, dw0, gw, nw, 1e-4);
  if (bias) {
    double *gb = finite_diff(lin_loss, &c, c.b, out);
    compare("db (added)", db, db0, gb, out, 1e-4);
    free(gb);
  }
  free(gx); free(gw); free(x); free(w); free(b); free(r); free(y);
  free(dx0); free(dw0); free(db0); free(dx); free(dw); free(db);
  free(c.x); free(c.w); free(c.b); free(c.y); free(c.r);
}

/* ---- softmax cross-entropy ---- */
typedef struct { int n, k; double *z; const int32_t *labels; } ce_ctx_t;
static double ce_loss(void *v) {
  ce_ctx_t *c = v;
  double total = 0;
  for (int i = 0; i < c->n; i++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < c->k; j++) if (c->z[i * c->k + j] > mx) mx = c->z[i * c->k + j];
    for (int j = 0; j < c->k; j++) s += exp(c->z[i * c->k + j] - mx);
    total += mx + log(s) - c->z[i * c->k + c->labels[i]];
  }
  return total / c->n;
}
static void check_softmax_ce(void) {
  int n = 5, k = 7;
  printf("softmax cross-entropy n=%d k=%d (one row with logits near 1e4)\n", n, k);
  float *z = frand((size_t)n * k), *d = calloc((size_t)n * k, sizeof(float));
  for (int j = 0; j < k; j++) z[2 * k + j] = 1e4f + j;  /* would overflow a naive exp */
  int32_t labels[5] = {0, 6, 3, 3, 1};
  /* Row 4: make the label the argmax so the correct count is known. */
  z[4 * k + 1] = 5.0f;
  int want_correct = 1;  /* row 2: argmax 6 != 3; others random: compute below */
  for (int i = 0; i < n; i++) {
    if (i == 4) continue;
    int arg = 0;
    for (int j = 1; j < k; j++) if (z[i * k + j] > z[i * k + arg]) arg = j;
    want_correct += arg == labels[i];
  }
  ce_ctx_t c = {n, k, to_d(z, (size_t)n * k), labels};
  float loss = 0;
  int correct = -1;
  CHECK_OK(nn_softmax_cross_entropy(n, k, z, labels, &loss, &correct, d));
  double want_loss = ce_loss(&c);
  float lf = loss;
  compare("mean loss", &lf, NULL, &want_loss, 1, 1e-6);
  int ok = correct == want_correct;
  printf("  %-4s correct count %d (want %d)\n", ok ? "ok" : "FAIL", correct, want_correct);
  failures += !ok;
  double *g = finite_diff(ce_loss, &c, c.z, (size_t)n * k);
  compare("dlogits (set)", d, NULL, g, (size_t)n * k, 1e-4);
  int32_t bad[5] = {0, 7, 0, 0, 0};
  ok = nn_softmax_cross_entropy(n, k, z, bad, &loss, &correct, d) == NN_ERR_ARG;
  printf("  %-4s label out of range gives NN_ERR_ARG (%s)\n", ok ? "ok" : "FAIL", nn_last_error());
  failures += !ok;
  free(g); free(z); free(d); free(c.z);
}

static void check_bad_shapes(void) {
  printf("argument checks\n");
  nn_conv2d_shape_t s = {1, 1, 2, 2, 1, 3, 3, 1, 1, 0, 0, 0, 0};
  int ok = nn_conv2d_shape(&s) == NN_ERR_ARG;
  nn_pool2d_shape_t p = {1, 1, 4, 4, 2, 2, 2, 2, 2, 0, 0, 0};
  ok &= nn_pool2d_shape(&p) == NN_ERR_ARG;  /* pad more than half the kernel */
  nn_batchnorm2d_shape_t b = {1, 2, 1, 1, 1e-5f, 0.1f};
  float x[2] = {0}, y[2];
  ok &= nn_batchnorm2d_forward_train(&b, x, NULL, NULL, NULL, NULL, y, NULL, NULL) == NN_ERR_ARG;
  ok &= nn_linear_forward(0, 1, 1, x, x, NULL, y) == NN_ERR_ARG;
  printf("  %-4s empty conv output, pool pad > k/2, batch norm with 1 value, n=0 linear\n",
         ok ? "ok" : "FAIL");
  failures += !ok;
}

/* Larger shapes take the threaded paths (batch norm and pooling split channels/planes
   only above a size): 2 threads must agree with 1 thread. */
static void check_threads_agree(void) {
  printf("1 thread vs 2 threads on resnet-sized layers (batch 8)\n");
  nn_conv2d_shape_t cs = {8, 16, 16, 16, 32, 3, 3, 2, 2, 1, 1, 0, 0};
  nn_conv2d_shape(&cs);
  nn_batchnorm2d_shape_t bs = {8, 16, 16, 16, 1e-5f, 0.1f};
  nn_pool2d_shape_t ps = {8, 16, 16, 16, 3, 3, 2, 2, 1, 1, 0, 0};
  nn_pool2d_shape(&ps);
  size_t nx = 8 * 16 * 16 * 16, nw = 32 * 16 * 9, ny = (size_t)8 * 32 * cs.h_out * cs.w_out,
         np = (size_t)8 * 16 * ps.h_out * ps.w_out;
  float *x = frand(nx), *w = frand(nw), *dyc = frand(ny), *dyp = frand(np), *dyb = frand(nx);
  float *g = frand(16), *b = frand(16);
  float *ws = calloc(nn_conv2d_workspace_floats(&cs), sizeof(float));
  float *out[2][12];
  int32_t *am = calloc(np, sizeof *am);
  size_t sizes[12] = {ny, nx, nw, nx, 16, 16, 16, 16, nx, 16, 16, np};
  for (int t = 0; t < 2; t++) {
    nn_set_threads(t + 1);
    for (int k = 0; k < 12; k++) out[t][k] = calloc(sizes[k] + np + nx, sizeof(float));
    nn_conv2d_forward(&cs, x, w, NULL, out[t][0], ws);
    nn_conv2d_backward(&cs, x, w, dyc, out[t][1], out[t][2], NULL, ws);
    nn_batchnorm2d_forward_train(&bs, x, g, b, out[t][4], out[t][5], out[t][3], out[t][6],
                                 out[t][7]);
    nn_batchnorm2d_backward(&bs, x, g, out[t][6], out[t][7], dyb, out[t][8], out[t][9],
                            out[t][10]);
    nn_maxpool2d_forward(&ps, x, out[t][11], am);
    nn_maxpool2d_backward(&ps, am, dyp, out[t][11] + np);
    nn_avgpool2d_forward(&ps, x, out[t][11] + np + nx);
  }
  const char *names[12] = {"conv y", "conv dx", "conv dw", "bn y", "bn running_mean",
                           "bn running_var", "bn save_mean", "bn save_invstd", "bn dx",
                           "bn dgamma", "bn dbeta", "maxpool y+dx, avgpool y"};
  sizes[11] = np + nx + np;
  for (int k = 0; k < 12; k++) {
    double *ref = to_d(out[0][k], sizes[k]);
    compare(names[k], out[1][k], NULL, ref, sizes[k], 1e-5);
    free(ref);
    free(out[0][k]);
    free(out[1][k]);
  }
  free(x); free(w); free(dyc); free(dyp); free(dyb); free(g); free(b); free(ws); free(am);

  /* Linear above its threading threshold: column blocks per thread. */
  int n = 16, in = 300, nout = 260;
  float *lx = frand((size_t)n * in), *lw = frand((size_t)nout * in), *lb = frand(nout),
        *ldy = frand((size_t)n * nout);
  float *lo[2][4];
  for (int t = 0; t < 2; t++) {
    nn_set_threads(t + 1);
    lo[t][0] = calloc((size_t)n * nout, 4);
    lo[t][1] = calloc((size_t)n * in, 4);
    lo[t][2] = calloc((size_t)nout * in, 4);
    lo[t][3] = calloc(nout, 4);
    nn_linear_forward(n, in, nout, lx, lw, lb, lo[t][0]);
    nn_linear_backward(n, in, nout, lx, lw, ldy, lo[t][1], lo[t][2], lo[t][3]);
  }
  const char *lnames[4] = {"linear y", "linear dx", "linear dw", "linear db"};
  size_t lsizes[4] = {(size_t)n * nout, (size_t)n * in, (size_t)nout * in, (size_t)nout};
  for (int k = 0; k < 4; k++) {
    double *ref = to_d(lo[0][k], lsizes[k]);
    compare(lnames[k], lo[1][k], NULL, ref, lsizes[k], 1e-5);
    free(ref);
    free(lo[0][k]);
    free(lo[1][k]);
  }
  free(lx); free(lw); free(lb); free(ldy);
}

static void run_all(void) {
  check_conv(3, 2, 7, 6, 3, 3, 2, 2, 1, 1, 0, 1);   /* rectangular kernel, stride 2x1, pad */
  check_conv(3, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 0);   /* resnet 3x3, no bias */
  check_conv(3, 4, 5, 5, 2, 1, 1, 1, 1, 0, 0, 1);   /* 1x1 direct GEMM path */
  check_conv(3, 4, 7, 5, 3, 1, 1, 2, 2, 0, 0, 0);   /* 1x1 stride 2 (downsample) */
  check_conv(2, 1, 9, 8, 2, 5, 5, 1, 2, 2, 1, 1);   /* 5x5, pad 2x1 */
  check_bn(3, 4, 5, 3);
  check_bn(2, 3, 1, 3);  /* few values per channel */
  check_pool(1, 3, 2, 6, 8, 2, 2, 2, 2, 0, 0);     /* lenet's 2x2 fast path */
  check_pool(1, 3, 2, 7, 6, 3, 2, 2, 1, 1, 1);     /* generic with -inf padding */
  check_pool(0, 3, 2, 7, 6, 3, 3, 2, 2, 1, 1);     /* average, padding counted */
  check_pool(0, 2, 3, 5, 4, 2, 2, 2, 2, 0, 0);
  check_elementwise();
  check_linear(3, 7, 5, 1);
  check_linear(4, 6, 3, 0);
  check_softmax_ce();
  check_bad_shapes();
}

int main(void) {
  for (int threads = 1; threads <= 2; threads++) {
    nn_set_threads(threads);
    printf("===== %d thread%s =====\n", threads, threads > 1 ? "s" : "");
    run_all();
  }
  /* Convolutions again with one output row per im2col block (the multi-block path). */
  nn_conv2d_block_bytes = 1;
  nn_conv2d_block_min_cols = 1;
  nn_set_threads(2);
  printf("===== conv2d with one output row per im2col block, 2 threads =====\n");
  check_conv(3, 2, 7, 6, 3, 3, 2, 2, 1, 1, 0, 1);
  check_conv(3, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 0);
  check_conv(2, 1, 9, 8, 2, 5, 5, 1, 2, 2, 1, 1);
  nn_conv2d_block_bytes = 192u << 10;
  nn_conv2d_block_min_cols = 256;
  check_threads_agree();
  printf("worst relative error seen: %.2e\n", worst_seen);
  if (failures) {
    printf("%d checks FAILED\n", failures);
    return 1;
  }
  printf("all gradient checks passed\n");
  return 0;
}
