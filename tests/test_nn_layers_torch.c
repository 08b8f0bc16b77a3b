/* tests/test_nn_layers_torch.c: every CPU kernel against PyTorch fixtures.

   tests/fixtures/layers/<case>.safetensors come from scripts/make_fixtures.py (torch in float64,
   stored as float32): inputs, parameters, a random dy, outputs and every gradient, and an
   I64 "config" with the layer's shape. Each kernel runs on the stored inputs (backward
   with dy into gradients that start at zero) and every result is compared:
     err = max|ours - torch| / max(max|torch|, 1e-6)   must be below 1e-4.
   The worst error per tensor is printed. Runs with 1 and 2 threads. Dropout is not here:
   its random stream is ours, not torch's (test_nn_gradcheck covers it).
   Fixtures are read from $NN_FIXTURES_DIR or tests/fixtures/layers. */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

static int failures, checked;
static double worst_seen;
static const char *dir;

typedef struct {
  nn_st_file_t f;
  const char *name;
  int ok;
} fixture_t;

static int open_fixture(fixture_t *fx, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  fx->name = name;
  fx->ok = nn_st_read(path, &fx->f) == NN_OK;
  if (!fx->ok) {
    printf("FAIL %s: %s\n", name, nn_last_error());
    failures++;
  }
  return fx->ok;
}

/* A float tensor of the fixture, checked for dtype and element count. */
static const float *get(fixture_t *fx, const char *tensor, size_t numel) {
  const nn_st_tensor_t *t = nn_st_find(&fx->f, tensor);
  if (!t || t->dtype != NN_ST_F32 || t->nbytes != numel * sizeof(float)) {
    printf("  FAIL %s: tensor '%s' missing or not F32 of %zu elements\n", fx->name, tensor, numel);
    failures++;
    fx->ok = 0;
    static float dummy[1 << 16];
    return dummy;
  }
  return t->data;
}

static const int64_t *config(fixture_t *fx, int count) {
  const nn_st_tensor_t *t = nn_st_find(&fx->f, "config");
  if (!t || t->dtype != NN_ST_I64 || t->nbytes != (size_t)count * 8) {
    printf("  FAIL %s: config missing or not I64[%d]\n", fx->name, count);
    failures++;
    fx->ok = 0;
    return NULL;
  }
  return t->data;
}

static void compare(fixture_t *fx, const char *what, const float *got, const float *want, size_t n) {
  double maxdiff = 0, maxref = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    if (d > maxdiff || d != d) maxdiff = d;
    if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
  }
  double err = maxdiff / (maxref > 1e-6 ? maxref : 1e-6);
  int ok = err < TOL;
  checked++;
  if (err > worst_seen || err != err) worst_seen = err;
  printf("  %-4s %-32s %-18s rel err %.2e\n", ok ? "ok" : "FAIL", fx->name, what, err);
  if (!ok) failures++;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

#define CHECK_OK(call)                                                              \
  do {                                                                              \
    nn_status_t st_ = (call);                                                       \
    if (st_ != NN_OK) {                                                             \
      printf("  FAIL %s: %s: %s\n", fx.name, #call, nn_last_error());               \
      failures++;                                                                   \
      goto done;                                                                    \
    }                                                                               \
  } while (0)

static void test_conv(const char *name) {
  fixture_t fx;
  float *y = NULL, *ws = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 12);
  if (!c) goto done;
  nn_conv2d_shape_t s = {(int)c[0], (int)c[1], (int)c[2], (int)c[3], (int)c[4], (int)c[5],
                         (int)c[6], (int)c[7], (int)c[8], (int)c[9], (int)c[10], 0, 0};
  int bias = (int)c[11];
  CHECK_OK(nn_conv2d_shape(&s));
  size_t nx = (size_t)s.n * s.c_in * s.h_in * s.w_in, nw = (size_t)s.c_out * s.c_in * s.kh * s.kw,
         ny = (size_t)s.n * s.c_out * s.h_out * s.w_out;
  const float *x = get(&fx, "x", nx), *w = get(&fx, "weight", nw);
  const float *b = bias ? get(&fx, "bias", s.c_out) : NULL;
  const float *ty = get(&fx, "y", ny), *tdy = get(&fx, "dy", ny), *tdx = get(&fx, "dx", nx),
              *tdw = get(&fx, "dweight", nw);
  const float *tdb = bias ? get(&fx, "dbias", s.c_out) : NULL;
  if (!fx.ok) goto done;
  y = zeros(ny); ws = zeros(nn_conv2d_workspace_floats(&s)); dx = zeros(nx); dw = zeros(nw);
  db = zeros(s.c_out);
  CHECK_OK(nn_conv2d_forward(&s, x, w, b, y, ws));
  compare(&fx, "y", y, ty, ny);
  CHECK_OK(nn_conv2d_backward(&s, x, w, tdy, dx, dw, bias ? db : NULL, ws));
  compare(&fx, "dx", dx, tdx, nx);
  compare(&fx, "dweight", dw, tdw, nw);
  if (bias) compare(&fx, "dbias", db, tdb, s.c_out);
done:
  free(y); free(ws); free(dx); free(dw); free(db);
  nn_st_free(&fx.f);
}

static void test_batchnorm(const char *name) {
  fixture_t fx;
  float *y = NULL, *rm = NULL, *rv = NULL, *sm = NULL, *si = NULL, *dx = NULL, *dg = NULL,
        *db = NULL;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 4);
  if (!c) goto done;
  nn_batchnorm2d_shape_t s = {(int)c[0], (int)c[1], (int)c[2], (int)c[3], 1e-5f, 0.1f};
  size_t nx = (size_t)s.n * s.c * s.h * s.w;
  const float *x = get(&fx, "x", nx), *g = get(&fx, "weight", s.c), *b = get(&fx, "bias", s.c);
  const float *rm0 = get(&fx, "running_mean_before", s.c), *rv0 = get(&fx, "running_var_before", s.c);
  const float *ty = get(&fx, "y", nx), *trm = get(&fx, "running_mean_after", s.c),
              *trv = get(&fx, "running_var_after", s.c), *tyi = get(&fx, "y_infer", nx),
              *tdy = get(&fx, "dy", nx), *tdx = get(&fx, "dx", nx), *tdg = get(&fx, "dweight", s.c),
              *tdb = get(&fx, "dbias", s.c);
  if (!fx.ok) goto done;
  y = zeros(nx); dx = zeros(nx); dg = zeros(s.c); db = zeros(s.c); sm = zeros(s.c); si = zeros(s.c);
  rm = zeros(s.c); rv = zeros(s.c);
  memcpy(rm, rm0, s.c * sizeof(float));
  memcpy(rv, rv0, s.c * sizeof(float));
  CHECK_OK(nn_batchnorm2d_forward_train(&s, x, g, b, rm, rv, y, sm, si));
  compare(&fx, "y (train)", y, ty, nx);
  compare(&fx, "running_mean", rm, trm, s.c);
  compare(&fx, "running_var", rv, trv, s.c);
  CHECK_OK(nn_batchnorm2d_backward(&s, x, g, sm, si, tdy, dx, dg, db));
  compare(&fx, "dx", dx, tdx, nx);
  compare(&fx, "dweight", dg, tdg, s.c);
  compare(&fx, "dbias", db, tdb, s.c);
  CHECK_OK(nn_batchnorm2d_forward_infer(&s, x, g, b, rm, rv, y));
  compare(&fx, "y (infer)", y, tyi, nx);
done:
  free(y); free(rm); free(rv); free(sm); free(si); free(dx); free(dg); free(db);
  nn_st_free(&fx.f);
}

static void test_pool(const char *name, int is_max) {
  fixture_t fx;
  float *y = NULL, *dx = NULL;
  int32_t *am = NULL;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 10);
  if (!c) goto done;
  nn_pool2d_shape_t s = {(int)c[0], (int)c[1], (int)c[2], (int)c[3], (int)c[4], (int)c[5],
                         (int)c[6], (int)c[7], (int)c[8], (int)c[9], 0, 0};
  CHECK_OK(nn_pool2d_shape(&s));
  size_t nx = (size_t)s.n * s.c * s.h_in * s.w_in, ny = (size_t)s.n * s.c * s.h_out * s.w_out;
  const float *x = get(&fx, "x", nx), *ty = get(&fx, "y", ny), *tdy = get(&fx, "dy", ny),
              *tdx = get(&fx, "dx", nx);
  if (!fx.ok) goto done;
  y = zeros(ny); dx = zeros(nx); am = calloc(ny, sizeof *am);
  if (is_max) {
    CHECK_OK(nn_maxpool2d_forward(&s, x, y, am));
    CHECK_OK(nn_maxpool2d_backward(&s, am, tdy, dx));
  } else {
    CHECK_OK(nn_avgpool2d_forward(&s, x, y));
    CHECK_OK(nn_avgpool2d_backward(&s, tdy, dx));
  }
  compare(&fx, "y", y, ty, ny);
  compare(&fx, "dx", dx, tdx, nx);
done:
  free(y); free(dx); free(am);
  nn_st_free(&fx.f);
}

static void test_global_avgpool(const char *name) {
  fixture_t fx;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 4);
  if (!c) { nn_st_free(&fx.f); return; }
  int n = (int)c[0], ch = (int)c[1], hw = (int)(c[2] * c[3]);
  size_t nx = (size_t)n * ch * hw;
  const float *x = get(&fx, "x", nx), *ty = get(&fx, "y", (size_t)n * ch),
              *tdy = get(&fx, "dy", (size_t)n * ch), *tdx = get(&fx, "dx", nx);
  if (fx.ok) {
    float *y = zeros((size_t)n * ch), *dx = zeros(nx);
    nn_global_avgpool_forward(n, ch, hw, x, y);
    nn_global_avgpool_backward(n, ch, hw, tdy, dx);
    compare(&fx, "y", y, ty, (size_t)n * ch);
    compare(&fx, "dx", dx, tdx, nx);
    free(y); free(dx);
  }
  nn_st_free(&fx.f);
}

static void test_relu_add(const char *name) {
  fixture_t fx;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 1);
  if (!c) { nn_st_free(&fx.f); return; }
  size_t n = (size_t)c[0];
  const float *a = get(&fx, "a", n), *b = get(&fx, "b", n), *ty = get(&fx, "relu_y", n),
              *tdy = get(&fx, "dy", n), *tdx = get(&fx, "relu_dx", n), *tadd = get(&fx, "add_y", n);
  if (fx.ok) {
    float *y = zeros(n), *dx = zeros(n), *s = zeros(n);
    nn_relu_forward(n, a, y);
    nn_relu_backward(n, y, tdy, dx);
    nn_add_forward(n, a, b, s);
    compare(&fx, "relu y", y, ty, n);
    compare(&fx, "relu dx", dx, tdx, n);
    compare(&fx, "add y", s, tadd, n);
    free(y); free(dx); free(s);
  }
  nn_st_free(&fx.f);
}

static void test_linear(const char *name) {
  fixture_t fx;
  float *y = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 4);
  if (!c) goto done;
  int n = (int)c[0], in = (int)c[1], out = (int)c[2], bias = (int)c[3];
  const float *x = get(&fx, "x", (size_t)n * in), *w = get(&fx, "weight", (size_t)out * in);
  const float *b = bias ? get(&fx, "bias", out) : NULL;
  const float *ty = get(&fx, "y", (size_t)n * out), *tdy = get(&fx, "dy", (size_t)n * out),
              *tdx = get(&fx, "dx", (size_t)n * in), *tdw = get(&fx, "dweight", (size_t)out * in);
  const float *tdb = bias ? get(&fx, "dbias", out) : NULL;
  if (!fx.ok) goto done;
  y = zeros((size_t)n * out); dx = zeros((size_t)n * in); dw = zeros((size_t)out * in);
  db = zeros(out);
  CHECK_OK(nn_linear_forward(n, in, out, x, w, b, y));
  CHECK_OK(nn_linear_backward(n, in, out, x, w, tdy, dx, dw, bias ? db : NULL));
  compare(&fx, "y", y, ty, (size_t)n * out);
  compare(&fx, "dx", dx, tdx, (size_t)n * in);
  compare(&fx, "dweight", dw, tdw, (size_t)out * in);
  if (bias) compare(&fx, "dbias", db, tdb, out);
done:
  free(y); free(dx); free(dw); free(db);
  nn_st_free(&fx.f);
}

static void test_softmax_ce(const char *name) {
  fixture_t fx;
  float *d = NULL;
  if (!open_fixture(&fx, name)) return;
  const int64_t *c = config(&fx, 2);
  if (!c) goto done;
  int n = (int)c[0], k = (int)c[1];
  const float *z = get(&fx, "logits", (size_t)n * k), *tl = get(&fx, "loss", 1),
              *td = get(&fx, "dlogits", (size_t)n * k);
  const nn_st_tensor_t *lt = nn_st_find(&fx.f, "labels"), *ct = nn_st_find(&fx.f, "correct");
  if (!lt || lt->dtype != NN_ST_I32 || lt->nbytes != (size_t)n * 4 || !ct || ct->dtype != NN_ST_I64) {
    printf("  FAIL %s: labels (I32[%d]) or correct (I64) missing\n", fx.name, n);
    failures++;
    goto done;
  }
  if (!fx.ok) goto done;
  d = zeros((size_t)n * k);
  float loss;
  int correct;
  CHECK_OK(nn_softmax_cross_entropy(n, k, z, lt->data, &loss, &correct, d));
  compare(&fx, "loss", &loss, tl, 1);
  compare(&fx, "dlogits", d, td, (size_t)n * k);
  int64_t want = *(const int64_t *)ct->data;
  checked++;
  printf("  %-4s %-32s %-18s %d (torch %lld)\n", correct == want ? "ok" : "FAIL", fx.name,
         "correct count", correct, (long long)want);
  if (correct != want) failures++;
done:
  free(d);
  nn_st_free(&fx.f);
}

/* Max pooling against the rule it shares with PyTorch, computed here one candidate at a
   time: the first maximum in scan order (rows, then columns) wins, a NaN wins. Inputs of
   few distinct values (ties everywhere) with NaNs among them, on the 3x3/2 pool with
   padding 1 (whose inner rows run four outputs at a time) and the 2x2/2 one, widths
   around the vector path's bounds; y and argmax must match exactly. */
static void test_maxpool_exact(void) {
  static const int shapes[][5] = {/* k, stride, pad, h, w */
                                  {3, 2, 1, 9, 9},   {3, 2, 1, 12, 17}, {3, 2, 1, 7, 24},
                                  {3, 2, 1, 16, 40}, {3, 2, 1, 5, 15},  {3, 2, 1, 11, 31},
                                  {2, 2, 0, 8, 19},  {3, 1, 1, 6, 18}};
  unsigned seed = 12345u;
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    const int *sh = shapes[k];
    nn_pool2d_shape_t s = {2, 3, sh[3], sh[4], sh[0], sh[0], sh[1], sh[1], sh[2], sh[2], 0, 0};
    if (nn_pool2d_shape(&s) != NN_OK) {
      printf("FAIL maxpool: bad test shape %zu: %s\n", k, nn_last_error());
      failures++;
      continue;
    }
    const size_t plane = (size_t)s.h_in * s.w_in, oplane = (size_t)s.h_out * s.w_out;
    const size_t nx = (size_t)s.n * s.c * plane, ny = (size_t)s.n * s.c * oplane;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
    int32_t *am = malloc(ny * sizeof *am);
    for (size_t i = 0; i < nx; i++) {
      seed = seed * 1103515245u + 12345u;
      unsigned r = (seed >> 16) % 23;
      x[i] = r == 0 ? NAN : (float)(r % 5) - 2.0f;
    }
    int bad = nn_maxpool2d_forward(&s, x, y, am) != NN_OK;
    if (bad) {
      printf("FAIL maxpool forward: %s\n", nn_last_error());
      failures++;
    }
    for (size_t p = 0; p < (size_t)s.n * s.c && !bad; p++)
      for (int oh = 0; oh < s.h_out && !bad; oh++)
        for (int ow = 0; ow < s.w_out && !bad; ow++) {
          float best = -INFINITY;
          int bi = -1;
          for (int i = 0; i < s.kh; i++)
            for (int j = 0; j < s.kw; j++) {
              int ih = oh * s.stride_h - s.pad_h + i, iw = ow * s.stride_w - s.pad_w + j;
              if (ih < 0 || ih >= s.h_in || iw < 0 || iw >= s.w_in) continue;
              float v = x[p * plane + (size_t)ih * s.w_in + iw];
              if (bi < 0 || v > best || v != v) {
                best = v;
                bi = ih * s.w_in + iw;
              }
            }
          const size_t o = p * oplane + (size_t)oh * s.w_out + ow;
          if (am[o] != bi || memcmp(&y[o], &best, sizeof best) != 0) {
            printf("FAIL maxpool k%d s%d p%d %dx%d: plane %zu out (%d,%d): y %g argmax %d, "
                   "expected %g at %d\n", sh[0], sh[1], sh[2], sh[3], sh[4], p, oh, ow,
                   (double)y[o], am[o], (double)best, bi);
            failures++;
            bad = 1;
          }
        }
    checked++;
    free(x);
    free(y);
    free(am);
  }
}

static void run_all(void) {
  static const char *convs[] = {"conv2d_3x3_s1_p1_nobias", "conv2d_3x3_s2_p1_nobias",
                                "conv2d_5x5_p2_bias", "conv2d_3x2_s2x1_p1x0_bias",
                                "conv2d_1x1_bias", "conv2d_1x1_s2_nobias",
                                "conv2d_7x7_s2_p3_nobias", "conv2d_3x3_s1_p1_16ch_nobias",
                                "conv2d_3x3_s1_p1_32ch_bias", "conv2d_3x3_s2_p1_16to32_nobias"};
  for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) test_conv(convs[i]);
  test_batchnorm("batchnorm2d");
  test_batchnorm("batchnorm2d_1x1");
  test_pool("maxpool2d_2x2_s2", 1);
  test_pool("maxpool2d_3x3_s2_p1", 1);
  test_pool("avgpool2d_3x3_s2_p1", 0);
  test_pool("avgpool2d_2x3_s1x2", 0);
  test_maxpool_exact();
  test_global_avgpool("global_avgpool");
  test_relu_add("relu_add");
  test_linear("linear_bias");
  test_linear("linear_nobias");
  test_softmax_ce("softmax_cross_entropy");
}

int main(void) {
  dir = getenv("NN_FIXTURES_DIR");
  if (!dir || !*dir) dir = "tests/fixtures/layers";
  for (int threads = 1; threads <= 2; threads++) {
    nn_set_threads(threads);
    printf("===== %d thread%s (fixtures in %s) =====\n", threads, threads > 1 ? "s" : "", dir);
    run_all();
  }
  printf("%d comparisons, worst relative error %.2e (limit %.0e)\n", checked, worst_seen, TOL);
  if (failures || checked == 0) {
    printf("%d FAILED\n", failures);
    return 1;
  }
  printf("all layers match PyTorch\n");
  return 0;
}
