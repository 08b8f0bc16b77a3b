/* nn/cuda/linear_cublas.c: the linear layer through cuBLAS.
   Row-major x[n][in], W[out][in], y[n][out] are column-major x^T, W^T, y^T, so
   y^T = W x^T is one SGEMM with W transposed, and the backward GEMMs likewise; beta = 1
   accumulates into dx and dw as the CPU kernels do. TF32 follows nn_cuda_set_tf32. */
#include "nn/cuda/cuda_internal.h"

nn_status_t nn_linear_forward_cuda(int n, int in, int out, const float *x, const float *w,
                                   const float *b, float *y) {
  if (n < 1 || in < 1 || out < 1 || !x || !w || !y)
    return nn_set_error(NN_ERR_ARG, "nn_linear_forward_cuda: bad shape or NULL argument");
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const float one = 1.0f, zero = 0.0f;
  NN_CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in,
                              x, in, &zero, y, out));
  if (b) NN_CUDA_CHECK(nn_cuk_bias_add(c->stream, n, out, b, y));
  return NN_OK;
}

nn_status_t nn_linear_backward_cuda(int n, int in, int out, const float *x,
                                    const float *w, const float *dy, float *dx, float *dw,
                                    float *db) {
  if (n < 1 || in < 1 || out < 1 || !dy)
    return nn_set_error(NN_ERR_ARG, "nn_linear_backward_cuda: bad shape or NULL dy");
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const float one = 1.0f;
  if (dx)  /* dx^T (in x n) += W^T (in x out) dy^T (out x n) */
    NN_CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w,
                                in, dy, out, &one, dx, in));
  if (dw)  /* dW^T (in x out) += x^T (in x n) dy (n x out) */
    NN_CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                in, dy, out, &one, dw, in));
  if (db) NN_CUDA_CHECK(nn_cuk_bias_grad(c->stream, n, out, dy, db));
  return NN_OK;
}
