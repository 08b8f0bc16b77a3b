/* nn/cuda/linear_cublas.c: the linear layer through cuBLAS.
   Row-major x[n][in], W[out][in], y[n][out] are column-major x^T, W^T, y^T, so
   y^T = W x^T is one GEMM with W transposed, and the backward GEMMs likewise; beta = 1
   accumulates into dw as the CPU kernels do, and into dx unless the caller stores it
   (beta = 0: cuBLAS does not read C). float32 data: SGEMM, TF32 following
   nn_cuda_set_tf32. float16/bfloat16 data (mixed precision): cublasGemmEx with float32
   accumulation (tensor cores). */
#include "nn/cuda/cuda_internal.h"

/* C (m x n, column-major) = alpha op(A) op(B) + beta C, all in precision p. */
static nn_status_t gemm(nn_cuda_ctx_t *c, nn_precision_t p, cublasOperation_t ta,
                        cublasOperation_t tb, int m, int n, int k, const void *a, int lda,
                        const void *b, int ldb, float beta, void *out, int ldc) {
  const float alpha = 1.0f;
  if (p == NN_PRECISION_FP32) {
    NN_CUBLAS_CHECK(cublasSgemm(c->cublas, ta, tb, m, n, k, &alpha, (const float *)a, lda,
                                (const float *)b, ldb, &beta, (float *)out, ldc));
    return NN_OK;
  }
  const cudaDataType_t t = nn_cublas_type(p);
  NN_CUBLAS_CHECK(cublasGemmEx(c->cublas, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta,
                               out, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return NN_OK;
}

nn_status_t nn_linear_forward_cuda_p(nn_precision_t p, int n, int in, int out, const void *x,
                                     const void *w, const void *b, void *y) {
  if (n < 1 || in < 1 || out < 1 || !x || !w || !y)
    return nn_set_error(NN_ERR_ARG, "nn_linear_forward_cuda: bad shape or NULL argument");
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  s = gemm(c, p, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, 0.0f, y, out);
  if (s != NN_OK) return s;
  if (b) NN_CUDA_CHECK(nn_cuk_bias_add(c->stream, p, n, out, b, y));
  return NN_OK;
}

nn_status_t nn_linear_backward_cuda_p(nn_precision_t p, int n, int in, int out,
                                      const void *x, const void *w, const void *dy, void *dx,
                                      int dx_add, void *dw, void *db) {
  if (n < 1 || in < 1 || out < 1 || !dy)
    return nn_set_error(NN_ERR_ARG, "nn_linear_backward_cuda: bad shape or NULL dy");
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  /* dx^T (in x n) += (or =) W^T (in x out) dy^T (out x n) */
  if (dx && (s = gemm(c, p, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out,
                      dx_add ? 1.0f : 0.0f, dx, in)) != NN_OK)
    return s;
  /* dW^T (in x out) += x^T (in x n) dy (n x out) */
  if (dw && (s = gemm(c, p, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, 1.0f, dw,
                      in)) != NN_OK)
    return s;
  if (db) NN_CUDA_CHECK(nn_cuk_bias_grad(c->stream, p, n, out, dy, db));
  return NN_OK;
}

nn_status_t nn_linear_forward_cuda(int n, int in, int out, const float *x, const float *w,
                                   const float *b, float *y) {
  return nn_linear_forward_cuda_p(NN_PRECISION_FP32, n, in, out, x, w, b, y);
}

nn_status_t nn_linear_backward_cuda(int n, int in, int out, const float *x,
                                    const float *w, const float *dy, float *dx, float *dw,
                                    float *db) {
  return nn_linear_backward_cuda_p(NN_PRECISION_FP32, n, in, out, x, w, dy, dx, 1, dw, db);
}
