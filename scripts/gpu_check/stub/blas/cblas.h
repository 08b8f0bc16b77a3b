/* scripts/gpu_check/stub/blas/cblas.h: A PLAIN C SGEMM, ONLY FOR THE GPU CHECK. The GPU
   machine has no OpenBLAS; the CPU reference of the GPU check (small shapes) runs on
   this instead. Built only with `make BLAS=ref` (what scripts/gpu_check.sh runs). */
#ifndef GPU_CHECK_STUB_CBLAS_H
#define GPU_CHECK_STUB_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc);
void openblas_set_num_threads(int n);

#endif
