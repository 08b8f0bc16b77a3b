/* tests/conv_compare.h: what the convolution path tests share (test_nn_conv_winograd,
   test_nn_conv_direct): random inputs from a fixed seed, the relative error of one
   path's output against the reference path's, and the four outputs of one run.
   Header-only. */
#ifndef TESTS_CONV_COMPARE_H
#define TESTS_CONV_COMPARE_H

#include <math.h>
#include <stdlib.h>

/* n floats in [-0.5, 0.5), the same for the same seed (an LCG; the caller frees). */
static float *rnd(size_t n, unsigned *seed) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    p[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return p;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (e > d) d = e;
    if (fabs(b[i]) > m) m = fabs(b[i]);
  }
  return d / m;
}

typedef struct { float *y, *dx, *dw, *db; } result_t;

#endif
