/* tests/test_nn_graph_kernels.c: the CPU kernels of the graph kinds (nn/graph_kernels.c:
   grouped and dilated convolution, activations, elementwise product, concat) against
   finite differences, as tests/test_nn_gradcheck.c does for the others.

   For each kernel: a double-precision reference forward written from the definition
   (plain loops, independent of the kernel code); the float forward must equal it
   (1e-5), and the float backward must equal the central finite differences (h = 1e-6)
   of L = sum(y * r), r random, for every element of every input and parameter (1e-4).
   Backward ADDS: gradients start from random values and the increase is compared.
   Shapes are small and uneven: batch 2, groups 2, strides (2, 1), pads (1, 0),
   dilations (2, 1), a 3x2 kernel, with a bias; the product per channel and per element. */
#include "nn/graph_kernels_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static uint64_t rng = 99;

static double urand(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float *frand(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)urand();
  return p;
}

static void compare(const char *what, const float *got, const float *base, const double *want,
                    size_t n, double tol) {
  double maxdiff = 0, maxref = 0;
  for (size_t i = 0; i < n; i++) {
    double g = (double)got[i] - (base ? (double)base[i] : 0.0);
    double d = fabs(g - want[i]);
    if (d > maxdiff || d != d) maxdiff = d;
    if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
  }
  double err = maxdiff / (maxref > 1e-6 ? maxref : 1e-6);
  int ok = err <= tol;
  printf("  %-4s %-40s rel err %.2e\n", ok ? "ok" : "FAIL", what, err);
  if (!ok) failures++;
}

/* ---- the references (double) and L = sum(y * r) ---- */

typedef struct {
  int kind;                   /* 0 gconv, 1 act, 2 mul, 3 concat */
  nn_gconv_shape_t s;
  int act;
  float alpha, lo, hi;
  int n, c, hw, b_hw;         /* mul; concat: a_size = c * hw, b_size = b_hw */
  double *in[3];              /* x, w, b / a, b */
  size_t len[3];
  const double *r;
  size_t ylen;
} ref_t;

static void ref_forward(const ref_t *t, double *y) {
  const double *a = t->in[0], *b = t->in[1];
  if (t->kind == 0) {
    const nn_gconv_shape_t *s = &t->s;
    int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
    for (int n = 0; n < s->n; n++)
      for (int o = 0; o < s->c_out; o++)
        for (int oh = 0; oh < s->h_out; oh++)
          for (int ow = 0; ow < s->w_out; ow++) {
            double acc = t->in[2][o];
            for (int ic = 0; ic < cig; ic++)
              for (int ki = 0; ki < s->kh; ki++)
                for (int kj = 0; kj < s->kw; kj++) {
                  int ih = oh * s->stride_h - s->pad_h + ki * s->dil_h;
                  int iw = ow * s->stride_w - s->pad_w + kj * s->dil_w;
                  if (ih < 0 || ih >= s->h_in || iw < 0 || iw >= s->w_in) continue;
                  int c = (o / cog) * cig + ic;
                  acc += a[((n * s->c_in + c) * s->h_in + ih) * s->w_in + iw] *
                         b[((o * cig + ic) * s->kh + ki) * s->kw + kj];
                }
            y[((n * s->c_out + o) * s->h_out + oh) * s->w_out + ow] = acc;
          }
  } else if (t->kind == 1) {
    for (size_t i = 0; i < t->ylen; i++) {
      double v = a[i];
      y[i] = t->act == NN_ACT_LEAKY_RELU ? (v > 0 ? v : t->alpha * v)
             : t->act == NN_ACT_SIGMOID  ? 1.0 / (1.0 + exp(-v))
             : t->act == NN_ACT_TANH     ? tanh(v)
                                         : (v < t->lo ? t->lo : v > t->hi ? t->hi : v);
    }
  } else if (t->kind == 2) {
    for (int p = 0; p < t->n * t->c; p++)
      for (int k = 0; k < t->hw; k++)
        y[p * t->hw + k] = a[p * t->hw + k] * b[t->b_hw == 1 ? p : p * t->hw + k];
  } else {
    size_t as = (size_t)t->c * t->hw, bs = (size_t)t->b_hw;
    for (int n = 0; n < t->n; n++) {
      for (size_t k = 0; k < as; k++) y[n * (as + bs) + k] = a[n * as + k];
      for (size_t k = 0; k < bs; k++) y[n * (as + bs) + as + k] = b[n * bs + k];
    }
  }
}

static double ref_loss(const ref_t *t) {
  double *y = malloc(t->ylen * sizeof *y), l = 0;
  ref_forward(t, y);
  for (size_t i = 0; i < t->ylen; i++) l += y[i] * t->r[i];
  free(y);
  return l;
}

/* Checks forward and the gradients of every input k (got[k] minus base[k]). */
static void check(const char *name, ref_t *t, const float *y, float *const got[3],
                  float *const base[3]) {
  char what[96];
  double *want = malloc(t->ylen * sizeof *want);
  ref_forward(t, want);
  snprintf(what, sizeof what, "%s forward", name);
  compare(what, y, NULL, want, t->ylen, 1e-5);
  free(want);
  for (int k = 0; k < 3; k++) {
    if (!got[k]) continue;
    double *g = malloc(t->len[k] * sizeof *g);
    for (size_t i = 0; i < t->len[k]; i++) {
      double keep = t->in[k][i], h = 1e-6;
      t->in[k][i] = keep + h;
      double lp = ref_loss(t);
      t->in[k][i] = keep - h;
      double lm = ref_loss(t);
      t->in[k][i] = keep;
      g[i] = (lp - lm) / (2 * h);
    }
    snprintf(what, sizeof what, "%s d%s", name, t->kind == 0 ? (const char *[]){"x", "w", "b"}[k]
                                                             : (const char *[]){"a", "b", "-"}[k]);
    compare(what, got[k], base[k], g, t->len[k], 1e-4);
    free(g);
  }
}

static double *to_d(const float *p, size_t n) {
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = p[i];
  return d;
}
static float *fcopy(const float *p, size_t n) {
  float *c = malloc(n * sizeof *c);
  memcpy(c, p, n * sizeof *c);
  return c;
}

static void test_gconv(void) {
  nn_gconv_shape_t s = {2, 4, 7, 5, 6, 3, 2, 2, 2, 1, 1, 0, 2, 1, 0, 0};
  if (!nn_gconv_shape(&s)) {
    printf("FAIL gconv shape\n");
    failures++;
    return;
  }
  size_t nx = 2 * 4 * 7 * 5, nw = 6 * 2 * 3 * 2, nb = 6, ny = (size_t)2 * 6 * s.h_out * s.w_out;
  float *x = frand(nx), *w = frand(nw), *b = frand(nb), *r = frand(ny), *y = frand(ny);
  float *dx = frand(nx), *dw = frand(nw), *db = frand(nb);
  float *dx0 = fcopy(dx, nx), *dw0 = fcopy(dw, nw), *db0 = fcopy(db, nb);
  nn_gconv_forward(&s, x, w, b, y);
  nn_gconv_backward(&s, x, w, r, dx, dw, db);
  ref_t t = {.kind = 0, .s = s, .in = {to_d(x, nx), to_d(w, nw), to_d(b, nb)},
             .len = {nx, nw, nb}, .r = to_d(r, ny), .ylen = ny};
  check("gconv g2 s(2,1) p(1,0) d(2,1) 3x2", &t, y, (float *[]){dx, dw, db},
        (float *[]){dx0, dw0, db0});
  for (int k = 0; k < 3; k++) free(t.in[k]);
  free((void *)t.r);
  free(x), free(w), free(b), free(r), free(y), free(dx), free(dw), free(db);
  free(dx0), free(dw0), free(db0);
}

static void test_act(int act) {
  size_t n = 37;
  float *x = frand(n), *y = frand(n), *r = frand(n), *dx = frand(n), *dx0 = fcopy(dx, n);
  for (size_t i = 0; i < n; i++) x[i] *= 3.0f;   /* across the clip bounds */
  for (size_t i = 0; i < n; i++)   /* keep finite differences off the kinks */
    if (fabsf(x[i]) < 0.01f || fabsf(x[i] - 1.0f) < 0.01f || fabsf(x[i] + 0.5f) < 0.01f)
      x[i] += 0.05f;
  float alpha = 0.1f, lo = -0.5f, hi = 1.0f;
  nn_act_forward(act, alpha, lo, hi, n, x, y);
  nn_act_backward(act, alpha, lo, hi, n, x, r, dx);
  ref_t t = {.kind = 1, .act = act, .alpha = alpha, .lo = lo, .hi = hi, .in = {to_d(x, n)},
             .len = {n}, .r = to_d(r, n), .ylen = n};
  check(nn_act_name(act), &t, y, (float *[]){dx, NULL, NULL}, (float *[]){dx0, NULL, NULL});
  free(t.in[0]);
  free((void *)t.r);
  free(x), free(y), free(r), free(dx), free(dx0);
}

static void test_mul_concat(int kind, int b_hw) {
  int n = 2, c = 3, hw = 5;
  size_t na = (size_t)n * c * hw, nb = kind == 2 ? (size_t)n * c * b_hw : (size_t)n * b_hw;
  size_t ny = kind == 2 ? na : na + nb;
  float *a = frand(na), *b = frand(nb), *y = frand(ny), *r = frand(ny);
  float *da = frand(na), *db = frand(nb), *da0 = fcopy(da, na), *db0 = fcopy(db, nb);
  if (kind == 2) {
    nn_mul_forward(n, c, hw, b_hw, a, b, y);
    nn_mul_backward(n, c, hw, b_hw, a, b, r, da, db);
  } else {
    nn_concat_forward(n, (size_t)c * hw, (size_t)b_hw, a, b, y);
    nn_concat_backward(n, (size_t)c * hw, (size_t)b_hw, r, da, db);
  }
  ref_t t = {.kind = kind, .n = n, .c = c, .hw = hw, .b_hw = b_hw,
             .in = {to_d(a, na), to_d(b, nb)}, .len = {na, nb}, .r = to_d(r, ny), .ylen = ny};
  check(kind == 2 ? (b_hw == 1 ? "mul per channel" : "mul per element") : "concat", &t, y,
        (float *[]){da, db, NULL}, (float *[]){da0, db0, NULL});
  free(t.in[0]), free(t.in[1]);
  free((void *)t.r);
  free(a), free(b), free(y), free(r), free(da), free(db), free(da0), free(db0);
}

int main(void) {
  test_gconv();
  for (int act = NN_ACT_LEAKY_RELU; act <= NN_ACT_CLIP; act++) test_act(act);
  test_mul_concat(2, 1);
  test_mul_concat(2, 5);
  test_mul_concat(3, 7);
  printf("%s\n", failures ? "FAILED" : "all ok");
  return failures ? 1 : 0;
}
