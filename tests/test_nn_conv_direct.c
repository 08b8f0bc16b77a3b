/* tests/test_nn_conv_direct.c: conv2d's direct kernel (nn/conv_direct.c: forward and
   input gradient of stride 1, forward of stride 2 on column planes, and the shapes of
   <= 32 channels that it takes before Winograd) against the im2col + GEMM path on the
   same data, in its AVX-512 form where the CPU has AVX-512 and in its AVX2 form
   (nn_simd_limit = 2) where it has AVX2: odd plane sizes, rows that end in a partial
   vector, channel counts that are not a multiple of the channel block, pads 0..2,
   non-square kernels and planes, bias or not, batch 1 and batches that 2 threads do not
   split evenly. Also: the path under test is taken (stride 1: its workspace holds the
   flipped weights; stride 2: nn_conv2d_direct_passes), y and dx are bit-identical for
   1 and 2 threads where the direct kernel computes them, every result is bit-identical
   from run to run for one thread count, and the weight gradient (3x3, stride 1 or 2,
   output channels in 16s on AVX-512, 8s on AVX2: the direct weight-gradient kernel,
   whatever runs the forward; else im2col) matches, each of its channel blocks included;
   the default channel limit (16 on Zen 4 and with AVX2 alone, else 32); and the
   default policy with AVX2 alone (no stride-2 forward; dW up to 32 input channels). */
#include "nn/nn.h"
#include "nn/conv2d_internal.h"
#include "nn/simd_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conv_compare.h"

static int failures, checked;
/* 1 while check_avx2_default runs: the default policy on AVX2 alone (see check_s). */
static int avx2_default;


static void run(const nn_conv2d_shape_t *s, int direct, const float *x, const float *w,
                const float *b, const float *dy, result_t *r) {
  nn_conv2d_direct = direct;
  nn_conv2d_winograd = direct;  /* the reference is im2col, even where Winograd applies */
  size_t ny = (size_t)s->n * s->c_out * s->h_out * s->w_out;
  size_t nx = (size_t)s->n * s->c_in * s->h_in * s->w_in;
  size_t nw = (size_t)s->c_out * s->c_in * s->kh * s->kw;
  /* Workspace poisoned with NaN: the kernel must not read scratch it did not write. */
  size_t nws = nn_conv2d_workspace_floats(s) + 1;
  float *ws = malloc(nws * sizeof(float));
  for (size_t i = 0; i < nws; i++) ws[i] = NAN;
  r->y = malloc(ny * sizeof(float));
  for (size_t i = 0; i < ny; i++) r->y[i] = NAN;  /* forward overwrites every y */
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

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* mode: 1 the default policy (AVX-512), 2 also on AVX2. Stride 1 or 2 (both ways). */
/* dw_only: a stride-1 shape whose forward and dx are not the direct kernel's (more
   channels than it takes): only its weight gradient is. */
static void check_s(int mode, int stride, int kh, int kw, int n, int ci, int co, int h,
                    int w, int ph, int pw, int bias, int dw_only) {
  nn_conv2d_shape_t s = {n, ci, h, w, co, kh, kw, stride, stride, ph, pw, 0, 0};
  if (nn_conv2d_shape(&s) != NN_OK) {
    printf("FAIL: bad test shape\n");
    failures++;
    return;
  }
  char name[160];
  snprintf(name, sizeof name,
           "simd %d k %dx%d s %d n %d ci %d co %d %dx%d pad %d,%d bias %d", nn_simd_level(),
           kh, kw, stride, n, ci, co, h, w, ph, pw, bias);
  unsigned seed = 99u + (unsigned)(kh * 3 + kw * 5 + n * 7 + ci * 13 + co * 17 + h * 19 +
                                   w * 23 + ph * 29 + pw * 31 + stride * 37);
  size_t ny = (size_t)n * co * s.h_out * s.w_out, nx = (size_t)n * ci * h * w;
  size_t nw = (size_t)co * ci * kh * kw;
  float *x = rnd(nx, &seed), *wt = rnd(nw, &seed), *b = bias ? rnd((size_t)co, &seed) : NULL;
  float *dy = rnd(ny, &seed);
  /* The direct path adds the flipped weights to the workspace: proof it is taken, and
     taken before Winograd (whose workspace differs) where both apply. */
  nn_conv2d_direct = 0;
  nn_conv2d_winograd = 0;
  size_t ws_gemm = nn_conv2d_workspace_floats(&s);
  nn_conv2d_direct = mode;
  size_t ws_direct = nn_conv2d_workspace_floats(&s);
  nn_conv2d_winograd = 1;
  if (stride == 1 && !dw_only &&
      (ws_direct <= ws_gemm || nn_conv2d_workspace_floats(&s) != ws_direct)) {
    printf("FAIL: %s: the direct path is not taken\n", name);
    failures++;
  }
  /* Stride 2: the forward, and the weight gradient of a 3x3 kernel with output channels
     in vectors (16s on AVX-512; 8s on AVX2, up to nn_conv2d_direct_avx2_dw_max_in input
     channels); dx stays on im2col. Stride 1: that weight gradient too. avx2_default (the
     default policy with AVX2 alone): no stride-2 forward. */
  const int vec = nn_conv_direct_vec();
  const int dw_direct = kh == 3 && kw == 3 && co % vec == 0 &&
                        ci <= nn_conv2d_direct_dw_max_channels &&
                        co <= nn_conv2d_direct_dw_max_channels &&
                        (vec == 16 || ci <= nn_conv2d_direct_avx2_dw_max_in);
  const int fwd_s2 = !avx2_default && ci <= nn_conv2d_direct_s2_max_channels &&
                     co <= nn_conv2d_direct_s2_max_channels && s.w_out >= 8;
  int passes = nn_conv2d_direct_passes(&s);
  if ((stride == 2 && passes != ((fwd_s2 ? 1 : 0) | (dw_direct ? 4 : 0))) ||
      (stride == 1 && !!(passes & 4) != dw_direct) ||
      (stride == 1 && avx2_default && (passes & 3) != (dw_only ? 0 : 3))) {
    printf("FAIL: %s: direct passes %d, expected %s the forward, %s the weight gradient\n",
           name, passes, stride == 1 || fwd_s2 ? "with" : "without",
           dw_direct ? "with" : "without");
    failures++;
  }
  result_t ref, got, again, again2;
  nn_set_threads(1);
  run(&s, 0, x, wt, b, dy, &ref);
  run(&s, mode, x, wt, b, dy, &got);
  nn_set_threads(2);
  run(&s, mode, x, wt, b, dy, &again);
  run(&s, mode, x, wt, b, dy, &again2);
  nn_set_threads(1);
  /* Different summation orders: a few float32 ulps of the largest value. */
  double ey = rel_err(got.y, ref.y, ny), ex = rel_err(got.dx, ref.dx, nx);
  double ew = rel_err(got.dw, ref.dw, nw), eb = rel_err(got.db, ref.db, (size_t)co);
  const double tol = 2e-6;
  if (!(ey < tol) || !(ex < tol) || !(ew < tol) || !(eb < tol)) {
    printf("FAIL: %s: rel err y %.2e dx %.2e dw %.2e db %.2e (tol %.0e)\n", name, ey, ex, ew,
           eb, tol);
    failures++;
  }
  /* dx of stride 2, and y and dx where the direct kernel does not run them, come from
     im2col + OpenBLAS, whose threaded GEMM need not match its one-thread sums bit for
     bit (0.3.21's Haswell kernels do not): there only runs with the same thread count
     must agree (below). */
  const int dx_ours = stride == 1 && !dw_only;
  const int y_ours = stride == 1 ? !dw_only : fwd_s2;
  if ((y_ours && !same_bits(got.y, again.y, ny)) ||
      (dx_ours && !same_bits(got.dx, again.dx, nx)) ||
      !same_bits(got.db, again.db, (size_t)co)) {
    printf("FAIL: %s: between 1 and 2 threads y %s, dx %s, db %s\n", name,
           same_bits(got.y, again.y, ny) ? "same" : "differs",
           same_bits(got.dx, again.dx, nx) ? "same" : "differs",
           same_bits(got.db, again.db, (size_t)co) ? "same" : "differs");
    failures++;
  }
  /* dw sums per-thread partial sums in chunk order: the same for the same thread count. */
  if (!same_bits(again.y, again2.y, ny) || !same_bits(again.dx, again2.dx, nx) ||
      !same_bits(again.dw, again2.dw, nw) || !same_bits(again.db, again2.db, (size_t)co)) {
    printf("FAIL: %s: two runs with 2 threads differ\n", name);
    failures++;
  }
  checked++;
  free_result(&ref);
  free_result(&got);
  free_result(&again);
  free_result(&again2);
  free(x);
  free(wt);
  free(b);
  free(dy);
}

static void check(int mode, int kh, int kw, int n, int ci, int co, int h, int w, int ph,
                  int pw, int bias) {
  check_s(mode, 1, kh, kw, n, ci, co, h, w, ph, pw, bias, 0);
}

static void check_all(int mode) {
  check(mode, 3, 3, 3, 16, 16, 32, 32, 1, 1, 0);   /* resnet20's layer, odd batch */
  check(mode, 3, 3, 1, 16, 16, 32, 32, 1, 1, 1);   /* batch 1, bias */
  check(mode, 3, 3, 2, 5, 9, 11, 13, 1, 1, 1);     /* odd sizes and channels: 8 + 1 */
  check(mode, 3, 3, 3, 8, 8, 10, 10, 0, 0, 0);     /* pad 0: 8 columns out */
  check(mode, 3, 3, 3, 17, 20, 9, 40, 1, 0, 1);    /* 38 columns: 3 vectors, partial */
  check(mode, 5, 5, 2, 12, 12, 14, 14, 2, 2, 0);   /* 5x5, pad 2 */
  check(mode, 5, 5, 3, 3, 12, 28, 28, 2, 2, 1);    /* 3 input channels: forward only */
  check(mode, 3, 5, 2, 9, 11, 12, 17, 1, 2, 0);    /* non-square kernel and pads */
  check(mode, 2, 2, 3, 8, 8, 12, 12, 1, 1, 1);     /* even kernel, output larger */
  check(mode, 3, 3, 2, 24, 32, 8, 19, 2, 1, 0);    /* pad 2 of a 3x3 */
  check(mode, 3, 3, 5, 16, 31, 33, 33, 1, 1, 0);   /* 33 columns: a 1-lane tail */
  check(mode, 3, 3, 3, 32, 32, 16, 16, 1, 1, 0);   /* resnet20's 32->32: before Winograd */
  check(mode, 3, 3, 2, 32, 32, 15, 15, 1, 1, 1);   /* ... on an odd plane */
  /* stride 2: the forward on even and odd column planes */
  check_s(mode, 2, 3, 3, 3, 16, 32, 32, 32, 1, 1, 0, 0);  /* resnet20's 16->32 */
  check_s(mode, 2, 3, 3, 1, 16, 32, 32, 32, 1, 1, 1, 0);  /* batch 1, bias */
  check_s(mode, 2, 3, 3, 5, 5, 9, 17, 19, 1, 1, 1, 0);    /* odd sizes, 8 + 1 channels */
  check_s(mode, 2, 3, 3, 3, 8, 8, 21, 20, 0, 0, 0, 0);    /* pad 0, odd rows, 9 columns */
  check_s(mode, 2, 5, 5, 2, 3, 12, 33, 33, 2, 2, 1, 0);   /* 5x5: 17 columns, 2 vectors */
  check_s(mode, 2, 3, 5, 2, 9, 11, 15, 36, 1, 2, 0, 0);   /* non-square kernel and pads */
  check_s(mode, 2, 2, 2, 3, 8, 8, 16, 17, 1, 1, 1, 0);    /* even kernel */
  check_s(mode, 2, 3, 3, 2, 24, 31, 30, 64, 1, 1, 0, 0);  /* 32 columns: 2 full vectors */
  /* the weight-gradient kernel's blocks: 32 output channels at a time, then 16 with
     input channels in 3s, 2s and 1s; odd planes; stride 2 with pad 0 (rows and columns
     of the input that no output reads) */
  check(mode, 3, 3, 2, 5, 16, 11, 13, 1, 1, 0);    /* 5 input channels: 3 + 2 */
  check_s(mode, 1, 3, 3, 3, 7, 48, 9, 9, 1, 1, 1, 1); /* 48 = 32 + 16; 7 = 3 + 3 + 1 */
  check_s(mode, 2, 3, 3, 2, 5, 16, 17, 19, 1, 1, 1, 0);
  check_s(mode, 2, 3, 3, 2, 3, 16, 20, 21, 0, 0, 0, 0);
  check_s(mode, 2, 3, 3, 1, 32, 64, 16, 16, 1, 1, 0, 0);  /* resnet20's 32->64 */
  check_s(mode, 1, 3, 3, 2, 64, 64, 8, 8, 1, 1, 0, 1);    /* resnet20's 64->64 */
}

/* The default policy with AVX2 alone (nn_simd_limit = 2, nn_conv2d_direct 1): the
   kernel computes forward and input gradient of stride-1 convolutions of up to 16
   channels (not stride-2 forwards) and weight gradients of up to 32 input channels,
   output channels in 8s (a last block of 8 included), stride 1 or 2; resnet20's 32->32
   and 64->64 stay on Winograd but for 32->32's weight gradient. */
static void check_avx2_default(void) {
  avx2_default = 1;
  nn_conv2d_direct_max_channels = 0;
  check(1, 3, 3, 3, 16, 16, 32, 32, 1, 1, 0);        /* resnet20's 16->16 */
  check(1, 3, 3, 2, 9, 8, 11, 13, 1, 1, 1);          /* one block of 8, odd plane */
  check_s(1, 1, 3, 3, 2, 5, 24, 9, 10, 1, 1, 1, 1);  /* 24 = 16 + 8 (y, dx: im2col) */
  check(1, 3, 3, 2, 13, 14, 9, 17, 1, 1, 1);         /* 14 = 6 + 4 + 2 + 2, 3 vectors */
  check(1, 3, 3, 1, 8, 11, 8, 10, 0, 0, 0);          /* 11 = 6 + 4 + 1, one vector */
  check_s(1, 2, 3, 3, 2, 3, 24, 17, 19, 1, 1, 0, 0); /* stride 2: dW only */
  check_s(1, 2, 3, 3, 1, 32, 64, 16, 16, 1, 1, 0, 0);  /* resnet20's 32->64 */
  struct { int c, hw, passes; } want[] = {{32, 16, 4}, {64, 8, 0}, {17, 16, 0}};
  for (int i = 0; i < 3; i++) {
    nn_conv2d_shape_t t = {2, want[i].c, want[i].hw, want[i].hw, want[i].c, 3, 3, 1, 1, 1,
                           1, 0, 0};
    nn_conv2d_shape(&t);
    if (nn_conv2d_direct_passes(&t) != want[i].passes) {
      printf("FAIL: AVX2 default policy: %d->%d %dx%d: passes %d, expected %d\n", want[i].c,
             want[i].c, want[i].hw, want[i].hw, nn_conv2d_direct_passes(&t), want[i].passes);
      failures++;
    }
  }
  nn_conv2d_direct_max_channels = 32;
  avx2_default = 0;
}

/* The default channel limit: 16 where AVX-512 is half width (Zen 4) or absent, else 32. */
static void check_channel_policy(void) {
  const int saved = nn_conv2d_direct_max_channels;
  nn_conv2d_direct_max_channels = 0;
  nn_conv2d_direct = 1;
  const int want = nn_cpu_avx512_half_width() || nn_conv_direct_vec() == 8 ? 16 : 32;
  nn_conv2d_shape_t at = {2, want, 16, 16, want, 3, 3, 1, 1, 1, 1, 0, 0};
  nn_conv2d_shape_t above = {2, want + 1, 16, 16, want + 1, 3, 3, 1, 1, 1, 1, 0, 0};
  nn_conv2d_shape(&at);
  nn_conv2d_shape(&above);
  if (!(nn_conv2d_direct_passes(&at) & 2) || (nn_conv2d_direct_passes(&above) & 2)) {
    printf("FAIL: with the default limit the direct kernel should take %d channels and "
           "not %d (passes %d, %d)\n", want, want + 1, nn_conv2d_direct_passes(&at),
           nn_conv2d_direct_passes(&above));
    failures++;
  }
  nn_conv2d_direct_max_channels = saved;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);  /* FAIL lines survive a crash of a later case */
  int level = nn_simd_level();
  if (level >= 3) check_channel_policy();
  /* The kernel on every shape of up to 32 channels, whatever this CPU's default. */
  nn_conv2d_direct_max_channels = 32;
  if (level >= 3) {
    check_all(1);
  } else {
    printf("note: no AVX-512 on this CPU: the AVX-512 kernel is not tested\n");
  }
  if (level >= 2) {
    nn_simd_limit = 2;
    check_all(2);
    check_channel_policy();
    check_avx2_default();
    nn_simd_limit = 3;
  } else {
    printf("note: no AVX2 + FMA on this CPU: the direct kernel is never used\n");
  }
  /* With neither, conv2d takes im2col: the default policy must not pick the kernel. */
  nn_simd_limit = 0;
  nn_conv2d_shape_t s = {2, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 0, 0};
  nn_conv2d_shape(&s);
  nn_conv2d_direct = 0;
  size_t ws_gemm = nn_conv2d_workspace_floats(&s);
  nn_conv2d_direct = 1;
  nn_conv2d_winograd = 1;
  if (nn_conv2d_workspace_floats(&s) != ws_gemm) {
    printf("FAIL: the direct path is chosen with nn_simd_limit = 0\n");
    failures++;
  }
  nn_simd_limit = 3;
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("PASS: %d shapes\n", checked);
  return 0;
}
