/* nn/cuda/elementwise.c: the public _cuda entry points of nn's own kernels
   (kernels.cu), in float32: argument checks, the context's stream, launch errors. The
   model (model_cuda.c) calls the typed launchers directly for half precision. Also the
   element types of each precision. */
#include "nn/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

cudnnDataType_t nn_cudnn_type(nn_precision_t p) {
  switch (p) {
  case NN_PRECISION_FP16: return CUDNN_DATA_HALF;
  case NN_PRECISION_BF16: return CUDNN_DATA_BFLOAT16;
  default: return CUDNN_DATA_FLOAT;
  }
}

cudaDataType_t nn_cublas_type(nn_precision_t p) {
  switch (p) {
  case NN_PRECISION_FP16: return CUDA_R_16F;
  case NN_PRECISION_BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

#define GET_CTX(c)                             \
  nn_cuda_ctx_t *c;                            \
  do {                                         \
    nn_status_t s_ = nn_cuda_ctx(&c);          \
    if (s_ != NN_OK) return s_;                \
  } while (0)

nn_status_t nn_relu_forward_cuda(size_t count, const float *x, float *y) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_relu_forward(c->stream, NN_PRECISION_FP32, count, x, y));
  return NN_OK;
}

nn_status_t nn_relu_backward_cuda(size_t count, const float *y, const float *dy, float *dx) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_relu_backward(c->stream, NN_PRECISION_FP32, count, y, dy, dx, 1));
  return NN_OK;
}

nn_status_t nn_add_forward_cuda(size_t count, const float *a, const float *b, float *y) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_add_forward(c->stream, NN_PRECISION_FP32, count, a, b, y));
  return NN_OK;
}

nn_status_t nn_add_backward_cuda(size_t count, const float *dy, float *da, float *db) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_add_backward(c->stream, NN_PRECISION_FP32, count, dy, da, 1, db, 1));
  return NN_OK;
}

nn_status_t nn_global_avgpool_forward_cuda(int n, int c_, int hw, const float *x, float *y) {
  if (n < 1 || c_ < 1 || hw < 1)
    return nn_set_error(NN_ERR_ARG, "nn_global_avgpool_forward_cuda: bad shape");
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_gap_forward(c->stream, NN_PRECISION_FP32, 0, n, c_, hw, x, y));
  return NN_OK;
}

nn_status_t nn_global_avgpool_backward_cuda(int n, int c_, int hw, const float *dy,
                                            float *dx) {
  if (n < 1 || c_ < 1 || hw < 1)
    return nn_set_error(NN_ERR_ARG, "nn_global_avgpool_backward_cuda: bad shape");
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_gap_backward(c->stream, NN_PRECISION_FP32, 0, n, c_, hw, dy, dx, 1));
  return NN_OK;
}

nn_status_t nn_dropout_forward_cuda(size_t count, float p, uint64_t seed, uint64_t step,
                                    const float *x, float *y, uint8_t *mask) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_dropout_forward(c->stream, NN_PRECISION_FP32, count, p, seed, step, x,
                                       y, mask));
  return NN_OK;
}

nn_status_t nn_dropout_backward_cuda(size_t count, float p, const uint8_t *mask,
                                     const float *dy, float *dx) {
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_dropout_backward(c->stream, NN_PRECISION_FP32, count, p, mask, dy,
                                        dx, 1));
  return NN_OK;
}

nn_status_t nn_softmax_cross_entropy_cuda(int n, int k, const float *logits,
                                          const int32_t *labels, float *loss_dev,
                                          int *correct_dev, float *dlogits) {
  if (n < 1 || k < 1)
    return nn_set_error(NN_ERR_ARG, "nn_softmax_cross_entropy_cuda: bad shape n=%d k=%d",
                        n, k);
  if (!logits || !labels)
    return nn_set_error(NN_ERR_ARG, "nn_softmax_cross_entropy_cuda: NULL logits or labels");
  GET_CTX(c);
  NN_CUDA_CHECK(nn_cuk_softmax_xent(c->stream, NN_PRECISION_FP32, n, k, logits, labels,
                                    loss_dev, correct_dev, dlogits, NULL));
  return NN_OK;
}
