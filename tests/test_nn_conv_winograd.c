/* tests/test_nn_conv_winograd.c: conv2d's Winograd F(2x2, 3x3) and F(2x2, 5x5) paths (forward and input
   gradient) against its im2col + GEMM path on the same data: odd and even sizes, pads
   0..2, non-square planes, bias or not, 1 and 2 threads, sample groups that do not divide
   the batch; and two runs of the same call must be bit-identical, as must the 4-tile
   (portable) and 8-tile (AVX2) input transforms. Also conv2d's stride-2
   im2col rows against a direct sum. */
#include "nn/nn.h"
#include "nn/conv2d_internal.h"
#include "nn/simd_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conv_compare.h"

static int failures;


static void run(const nn_conv2d_shape_t *s, int wino, const float *x, const float *w,
                const float *b, const float *dy, result_t *r) {
  nn_conv2d_winograd = wino;
  size_t ny = (size_t)s->n * s->c_out * s->h_out * s->w_out;
  size_t nx = (size_t)s->n * s->c_in * s->h_in * s->w_in;
  size_t nw = (size_t)s->c_out * s->c_in * s->kh * s->kw;
  float *ws = calloc(nn_conv2d_workspace_floats(s) + 1, sizeof(float));
  r->y = calloc(ny, sizeof(float));
  r->dx = calloc(nx, sizeof(float));
  r->dw = calloc(nw, sizeof(float));
  r->db = calloc((size_t)s->c_out, sizeof(float));
  for (size_t i = 0; i < nx; i++) r->dx[i] = 0.25f;  /* backward accumulates into dx */
  if (nn_conv2d_forward(s, x, w, b, r->y, ws) != NN_OK ||
      nn_conv2d_backward(s, x, w, dy, r->dx, r->dw, r->db, ws) != NN_OK) {
    printf("FAIL: conv2d call failed: %s\n", nn_last_error());
    failures++;
  }
  free(ws);
}

static void free_result(result_t *r) {
  free(r->y);
  free(r->dx);
  free(r->dw);
  free(r->db);
}

static void check(int k, int n, int ci, int co, int h, int w, int ph, int pw, int bias) {
  nn_conv2d_shape_t s = {n, ci, h, w, co, k, k, 1, 1, ph, pw, 0, 0};
  if (nn_conv2d_shape(&s) != NN_OK) {
    printf("FAIL: bad test shape\n");
    failures++;
    return;
  }
  unsigned seed = 1234u + (unsigned)(k * 3 + n * 7 + ci * 13 + co * 17 + h * 19 + w * 23 + ph * 29 + pw);
  size_t ny = (size_t)n * co * s.h_out * s.w_out, nx = (size_t)n * ci * h * w;
  size_t nw = (size_t)co * ci * k * k;
  float *x = rnd(nx, &seed), *wt = rnd(nw, &seed), *b = bias ? rnd((size_t)co, &seed) : NULL;
  float *dy = rnd(ny, &seed);
  /* Winograd needs extra workspace: a way to see that the path under test is taken. */
  nn_conv2d_winograd = 0;
  size_t ws_gemm = nn_conv2d_workspace_floats(&s);
  nn_conv2d_winograd = 1;
  if (nn_conv2d_workspace_floats(&s) == ws_gemm) {
    printf("FAIL: %dx%d n=%d %dx%dx%d -> %d does not take the Winograd path\n", k, k, n, ci, h,
           w, co);
    failures++;
  }
  result_t ref, got, again, narrow;
  run(&s, 0, x, wt, b, dy, &ref);
  run(&s, 1, x, wt, b, dy, &got);
  run(&s, 1, x, wt, b, dy, &again);
  /* The 4-tile transforms (no AVX2) compute the same sums in the same order as the 8-tile
     ones: bit-identical. */
  int limit = nn_simd_limit;
  nn_simd_limit = 1;
  run(&s, 1, x, wt, b, dy, &narrow);
  nn_simd_limit = limit;
  double ey = rel_err(got.y, ref.y, ny), ex = rel_err(got.dx, ref.dx, nx);
  double ew = rel_err(got.dw, ref.dw, nw), eb = rel_err(got.db, ref.db, (size_t)co);
  int same = !memcmp(got.y, again.y, ny * sizeof(float)) &&
             !memcmp(got.dx, again.dx, nx * sizeof(float)) &&
             !memcmp(got.dw, again.dw, nw * sizeof(float));
  int same_narrow = !memcmp(got.y, narrow.y, ny * sizeof(float)) &&
                    !memcmp(got.dx, narrow.dx, nx * sizeof(float)) &&
                    !memcmp(got.dw, narrow.dw, nw * sizeof(float));
  /* F(2x2, 5x5)'s transforms have larger coefficients (4, 5, 1/6, 2/3): its dW, a sum
     over every tile, is about 1e-5 off; F(2x2, 3x3) stays below 1e-6. */
  const double tol = k == 5 ? 5e-5 : 1e-5;
  int ok = ey < tol && ex < tol && ew < tol && eb < tol && same && same_narrow;
  printf("%s %dx%d n=%d %dx%dx%d -> %d pad %dx%d bias %d: rel err y %.1e dx %.1e dw %.1e db %.1e%s%s\n",
         ok ? "  ok" : "FAIL", k, k, n, ci, h, w, co, ph, pw, bias, ey, ex, ew, eb,
         same ? "" : " (two runs differ)", same_narrow ? "" : " (4- and 8-tile transforms differ)");
  if (!ok) failures++;
  free_result(&ref);
  free_result(&got);
  free_result(&again);
  free_result(&narrow);
  free(x);
  free(wt);
  free(b);
  free(dy);
}

/* The stride-2 im2col rows (vector path for rows longer than 4) against a direct sum. */
static void check_stride2(int n, int ci, int co, int h, int w, int k, int pad) {
  nn_conv2d_shape_t s = {n, ci, h, w, co, k, k, 2, 2, pad, pad, 0, 0};
  if (nn_conv2d_shape(&s) != NN_OK) {
    printf("FAIL: bad test shape\n");
    failures++;
    return;
  }
  unsigned seed = 99u + (unsigned)(h * 31 + w);
  size_t nx = (size_t)n * ci * h * w, nw = (size_t)co * ci * k * k;
  size_t ny = (size_t)n * co * s.h_out * s.w_out;
  float *x = rnd(nx, &seed), *wt = rnd(nw, &seed), *y = calloc(ny, sizeof(float));
  float *ws = calloc(nn_conv2d_workspace_floats(&s) + 1, sizeof(float));
  if (nn_conv2d_forward(&s, x, wt, NULL, y, ws) != NN_OK) failures++;
  double worst = 0;
  for (int i = 0; i < n; i++)
    for (int o = 0; o < co; o++)
      for (int oh = 0; oh < s.h_out; oh++)
        for (int ow = 0; ow < s.w_out; ow++) {
          double acc = 0;
          for (int c = 0; c < ci; c++)
            for (int a = 0; a < k; a++)
              for (int b = 0; b < k; b++) {
                int ih = oh * 2 - pad + a, iw = ow * 2 - pad + b;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                acc += (double)x[(((size_t)i * ci + c) * h + ih) * w + iw] *
                       wt[(((size_t)o * ci + c) * k + a) * k + b];
              }
          double e = fabs(acc - y[(((size_t)i * co + o) * s.h_out + oh) * s.w_out + ow]);
          if (e > worst) worst = e;
        }
  int ok = worst < 1e-5;
  printf("%s stride 2 %dx%d n=%d %dx%dx%d -> %d pad %d: max abs err %.1e\n", ok ? "  ok" : "FAIL",
         k, k, n, ci, h, w, co, pad, worst);
  if (!ok) failures++;
  free(x);
  free(wt);
  free(y);
  free(ws);
}

int main(void) {
  nn_conv2d_direct = 0;  /* it would take the shapes of <= 32 channels before Winograd */
  nn_conv2d_wino_min_channels = 1;  /* small shapes here */
  for (int threads = 1; threads <= 2; threads++) {
    nn_set_threads(threads);
    printf("===== %d thread%s =====\n", threads, threads > 1 ? "s" : "");
    check(3, 3, 2, 3, 5, 6, 1, 1, 1);    /* odd height: a half tile row */
    check(3, 2, 3, 2, 7, 7, 0, 0, 0);    /* no padding: 5x5 output */
    check(3, 2, 2, 4, 6, 9, 2, 2, 1);    /* pad 2: output larger than input */
    check(3, 3, 4, 3, 4, 11, 1, 0, 0);   /* different pads, 11 wide: partial vectors */
    check(3, 2, 3, 2, 5, 21, 1, 1, 1);   /* 11 tiles a row: one 8-tile vector and a partial */
    check(5, 2, 2, 3, 6, 37, 2, 2, 0);   /* 5x5, 19 tiles a row: two vectors and a partial */
    check(3, 5, 5, 6, 8, 8, 1, 1, 1);    /* resnet-like */
    check(3, 4, 3, 2, 1, 1, 1, 1, 0);    /* 1x1 plane */
    int tiles = nn_wino_group_tiles;
    nn_wino_group_tiles = 9;          /* one sample (3x3 tiles) per group */
    check(3, 3, 3, 3, 6, 6, 1, 1, 1);
    nn_wino_group_tiles = 20;         /* groups of 2 samples over a batch of 5 */
    check(3, 5, 3, 4, 6, 6, 1, 1, 0);
    nn_wino_group_tiles = tiles;
    check(3, 9, 32, 32, 16, 16, 1, 1, 0); /* resnet20's shapes, smaller batch */
    check(3, 9, 64, 64, 8, 8, 1, 1, 1);
    check(5, 3, 2, 3, 7, 9, 2, 2, 1);   /* 5x5 */
    check(5, 2, 3, 2, 6, 6, 0, 0, 0);   /* 5x5 unpadded: 2x2 output */
    check(5, 3, 2, 4, 5, 10, 4, 1, 1);  /* 5x5, pad 4 and 1 */
    check(5, 5, 32, 64, 14, 14, 2, 2, 1); /* lenet conv2, smaller batch */
  }
  check_stride2(2, 3, 4, 32, 32, 3, 1);  /* resnet20's downsampling conv, 16 wide */
  check_stride2(2, 3, 4, 19, 23, 3, 1);  /* odd sizes: vector and scalar tails */
  check_stride2(2, 3, 4, 17, 21, 1, 0);  /* 1x1 stride 2 */
  if (failures) {
    printf("%d checks FAILED\n", failures);
    return 1;
  }
  printf("all winograd checks passed\n");
  return 0;
}
