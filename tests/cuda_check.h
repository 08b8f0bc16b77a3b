/* tests/cuda_check.h: helpers of the GPU tests (header only): skip when there is no
   device, device copies of random host arrays, relative comparison. Used by the
   tests/test_cuda_*.c programs, which scripts/gpu_check.sh also builds and runs. Every
   build can include it (without CUDA, nn_cuda_available() is 0: the test skips). */
#ifndef TESTS_CUDA_CHECK_H
#define TESTS_CUDA_CHECK_H

#include "nn/nn_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cc_failures;

#define CC_OK(expr)                                                                 \
  do {                                                                              \
    nn_status_t s_ = (expr);                                                        \
    if (s_ != NN_OK) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr,            \
              nn_status_string(s_), nn_last_error());                               \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

/* Exits 77 unless this build has CUDA and a device is present. */
static inline void cc_require_device(void) {
  if (!nn_cuda_available()) {
    printf("%s\nskipped: no CUDA device\n", nn_cuda_info());
    exit(77);
  }
  printf("%s\n", nn_cuda_info());
}

/* The end of a GPU test's main: how many checks failed (exit status 1), or the line
   saying that all passed (0). */
static inline int cc_finish(const char *all_passed) {
  if (cc_failures) {
    printf("%d check(s) failed\n", cc_failures);
    return 1;
  }
  printf("%s\n", all_passed);
  return 0;
}

static uint64_t cc_rng = 0x9E3779B97F4A7C15ull;
static inline float cc_uniform(void) { /* [-1, 1) */
  cc_rng ^= cc_rng << 13;
  cc_rng ^= cc_rng >> 7;
  cc_rng ^= cc_rng << 17;
  return (float)((double)(cc_rng >> 40) / 8388608.0 - 1.0);
}

static inline float *cc_host(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
  return p;
}
static inline float *cc_random(size_t n) {
  float *p = cc_host(n);
  for (size_t i = 0; i < n; i++) p[i] = cc_uniform();
  return p;
}
static inline void *cc_dev_bytes(const void *h, size_t bytes) {
  void *d = NULL;
  CC_OK(nn_cuda_malloc(&d, bytes));
  if (h) CC_OK(nn_cuda_to_device(d, h, bytes));
  else {
    CC_OK(nn_cuda_memset0(d, bytes));
    CC_OK(nn_cuda_synchronize());
  }
  return d;
}
static inline float *cc_dev(const float *h, size_t n) { return cc_dev_bytes(h, n * sizeof(float)); }

/* max |got - want| / max(max |want|, 1e-6) <= tol over n floats; got is device memory
   when dev, else host. Prints one line per comparison. */
static inline double cc_compare(const char *what, const float *got, int dev, const float *want,
                         size_t n, double tol) {
  float *g = (float *)got;
  if (dev) {
    g = cc_host(n);
    CC_OK(nn_cuda_to_host(g, got, n * sizeof(float)));
  }
  double err = 0, scale = 1e-6;
  size_t worst = 0;
  int nan = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(g[i])) nan = 1;
    double e = fabs((double)g[i] - want[i]);
    if (e > err) { err = e; worst = i; }
    if (fabs(want[i]) > scale) scale = fabs(want[i]);
  }
  double rel = nan ? INFINITY : err / scale;
  int ok = rel <= tol;
  printf("%-4s %-44s rel err %.2e (tol %.0e)%s\n", ok ? "ok" : "FAIL", what, rel, tol,
         ok ? "" : "");
  if (!ok && n)
    printf("     worst at %zu: got %.7g want %.7g\n", worst, (double)g[worst],
           (double)want[worst]);
  if (!ok) cc_failures++;
  if (dev) free(g);
  return rel;
}

#endif /* TESTS_CUDA_CHECK_H */
