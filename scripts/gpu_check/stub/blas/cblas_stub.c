/* scripts/gpu_check/stub/blas/cblas_stub.c: cblas_sgemm in plain C, ONLY FOR THE GPU CHECK
   (see cblas.h). Row-major C = alpha op(A) op(B) + beta C: each row of C accumulates
   rows of op(B) (contiguous after packing a transposed B), which compilers vectorise. */
#include "cblas.h"

#include <stdlib.h>

void openblas_set_num_threads(int n) { (void)n; }

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc) {
  if (order == CblasColMajor) { /* C^T = op(B)^T op(A)^T in row-major terms */
    cblas_sgemm(CblasRowMajor, tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
    return;
  }
  const int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
  float *bp = NULL;
  if (bt) { /* pack op(B) as k x n row-major */
    bp = malloc((size_t)k * n * sizeof(float));
    if (!bp) abort();
    for (int p = 0; p < k; p++)
      for (int j = 0; j < n; j++) bp[(size_t)p * n + j] = b[(size_t)j * ldb + p];
    b = bp;
    ldb = n;
  }
  for (int i = 0; i < m; i++) {
    float *ci = c + (size_t)i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < n; j++) ci[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < n; j++) ci[j] *= beta;
    for (int p = 0; p < k; p++) {
      float av = alpha * (at ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
      if (av == 0.0f) continue;
      const float *bk = b + (size_t)p * ldb;
      for (int j = 0; j < n; j++) ci[j] += av * bk[j];
    }
  }
  free(bp);
}
