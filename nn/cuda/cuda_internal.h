/* nn/cuda/cuda_internal.h: what the files of nn's CUDA backend share: the per-process
   context (device, compute stream, cuDNN and cuBLAS handles, a growable workspace) and
   the checking macros that turn a failed CUDA/cuDNN/cuBLAS call into NN_ERR_BACKEND with
   the call, file and line in nn_last_error(). Compiled only when HVD_WITH_CUDA=1. */
#ifndef NN_CUDA_INTERNAL_H
#define NN_CUDA_INTERNAL_H

#include "nn/nn_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int device;
  cudaStream_t stream;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  void *ws;                 /* cuDNN workspace, grown on demand, never shrunk */
  size_t ws_bytes;
  int tf32;
} nn_cuda_ctx_t;

/* The context, created at first use on the selected device. NN_ERR_UNSUPPORTED when
   there is no device (nn_cuda_available() == 0). */
nn_status_t nn_cuda_ctx(nn_cuda_ctx_t **out);
/* A workspace of at least bytes on the compute stream (may free and reallocate). */
nn_status_t nn_cuda_workspace(nn_cuda_ctx_t *c, size_t bytes, void **ws);

nn_status_t nn_cuda_fail(const char *file, int line, const char *call, const char *what);

#define NN_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    cudaError_t nn_e_ = (call);                                                      \
    if (nn_e_ != cudaSuccess)                                                        \
      return nn_cuda_fail(__FILE__, __LINE__, #call, cudaGetErrorString(nn_e_));     \
  } while (0)
#define NN_CUDNN_CHECK(call)                                                         \
  do {                                                                               \
    cudnnStatus_t nn_e_ = (call);                                                    \
    if (nn_e_ != CUDNN_STATUS_SUCCESS)                                               \
      return nn_cuda_fail(__FILE__, __LINE__, #call, cudnnGetErrorString(nn_e_));    \
  } while (0)
#define NN_CUBLAS_CHECK(call)                                                        \
  do {                                                                               \
    cublasStatus_t nn_e_ = (call);                                                   \
    if (nn_e_ != CUBLAS_STATUS_SUCCESS)                                              \
      return nn_cuda_fail(__FILE__, __LINE__, #call, cublasGetStatusString(nn_e_));  \
  } while (0)
/* After a kernel launch: launch errors (bad configuration, no kernel image). */
#define NN_CUDA_CHECK_LAUNCH() NN_CUDA_CHECK(cudaGetLastError())

/* Kernel launchers (kernels.cu), all on stream. Return cudaGetLastError(). */
cudaError_t nn_cuk_relu_forward(cudaStream_t st, size_t n, const float *x, float *y);
cudaError_t nn_cuk_relu_backward(cudaStream_t st, size_t n, const float *y,
                                 const float *dy, float *dx);
cudaError_t nn_cuk_add_forward(cudaStream_t st, size_t n, const float *a, const float *b,
                               float *y);
cudaError_t nn_cuk_add_backward(cudaStream_t st, size_t n, const float *dy, float *da,
                                float *db);
cudaError_t nn_cuk_accumulate(cudaStream_t st, size_t n, const float *dy, float *dx);
cudaError_t nn_cuk_gap_forward(cudaStream_t st, int n, int c, int hw, const float *x,
                               float *y);
cudaError_t nn_cuk_gap_backward(cudaStream_t st, int n, int c, int hw, const float *dy,
                                float *dx);
cudaError_t nn_cuk_bias_add(cudaStream_t st, int n, int out, const float *b, float *y);
cudaError_t nn_cuk_bias_grad(cudaStream_t st, int n, int out, const float *dy, float *db);
cudaError_t nn_cuk_dropout_forward(cudaStream_t st, size_t n, float p, uint64_t seed,
                                   uint64_t step, const float *x, float *y, uint8_t *mask);
cudaError_t nn_cuk_dropout_backward(cudaStream_t st, size_t n, float p,
                                    const uint8_t *mask, const float *dy, float *dx);
cudaError_t nn_cuk_softmax_xent(cudaStream_t st, int n, int k, const float *logits,
                                const int32_t *labels, float *loss, int *correct,
                                float *dlogits);
cudaError_t nn_cuk_sgd(cudaStream_t st, size_t n, float *p, const float *g, float *buf,
                       float lr, float wd, float mom, int nesterov);
cudaError_t nn_cuk_adam(cudaStream_t st, size_t n, float *p, const float *g, float *m,
                        float *v, float step_size, float bc2_sqrt, float b1, float b2,
                        float eps, float decay, float l2);

#ifdef __cplusplus
}
#endif

#endif /* NN_CUDA_INTERNAL_H */
