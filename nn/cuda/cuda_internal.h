/* nn/cuda/cuda_internal.h: what the files of nn's CUDA backend share: the per-process
   context (device, compute stream, cuDNN and cuBLAS handles, a growable workspace) and
   the checking macros that turn a failed CUDA/cuDNN/cuBLAS call into NN_ERR_BACKEND with
   the call, file and line in nn_last_error(). Compiled only when NN_WITH_CUDA=1. */
#ifndef NN_CUDA_INTERNAL_H
#define NN_CUDA_INTERNAL_H

#include "nn/cuda/amp_rules.h"   /* nn_cuda_amp_t and its update rule */
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
/* ctx.tf32 now, read under the context's lock (nn_cuda_set_tf32 may change it from
   another thread): a plan reads it once and keeps that value. */
int nn_cuda_tf32(void);
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

/* Device-side scalars of an optimizer step (optim_cuda.c): computed by a one-thread
   kernel so that a step skipped for inf/NaN gradients needs no host round trip. */
typedef struct {
  long long step;         /* updates applied so far (torch.optim's state step)      */
  float step_size;        /* Adam: lr / (1 - beta1^step)                            */
  float bc2_sqrt;         /* Adam: sqrt(1 - beta2^step)                             */
  int skip;               /* this step is skipped                                   */
} nn_cuda_optim_dev_t;


/* Element size and library types of activations in a precision (the size inline: the
   kernels use it too, and elementwise.c calls the kernels). */
static inline size_t nn_cuda_elem_size(nn_precision_t p) {
  return p == NN_PRECISION_FP32 ? sizeof(float) : 2;
}
cudnnDataType_t nn_cudnn_type(nn_precision_t p);
cudaDataType_t nn_cublas_type(nn_precision_t p);

/* How activations are stored on the device: the element type, and NCHW or NHWC
   (channels last: [n][h][w][c]; convolution weights then K x R x S x C). */
typedef struct {
  nn_precision_t prec;
  int nhwc;
} nn_cuda_fmt_t;
#define NN_CUDA_FMT_FP32_NCHW ((nn_cuda_fmt_t){NN_PRECISION_FP32, 0})

/* Typed layer entry points: activations (x, y, dx, dy) in format f; weights and their
   gradients too for convolution and linear; batch-norm parameters, statistics and their
   gradients always float (cuDNN's rule for half inputs). The float public functions of
   nn_cuda.h are these with NN_CUDA_FMT_FP32_NCHW and dx added into. Backward: dx is added
   into when dx_add is non-zero, else stored (beta 0: dx is not read, it may hold
   anything); weight and batch-norm parameter gradients are always added into. */
nn_status_t nn_conv2d_forward_cuda_p(nn_cuda_fmt_t f, const nn_conv2d_shape_t *s,
                                     const void *x, const void *w, const void *b, void *y);
nn_status_t nn_conv2d_backward_cuda_p(nn_cuda_fmt_t f, const nn_conv2d_shape_t *s,
                                      const void *x, const void *w, const void *dy, void *dx,
                                      int dx_add, void *dw, void *db);
/* A batch-norm layer's state across calls: its cuDNN descriptors, made at its first
   call and set again only when its shape changes, and its reserve space from its
   training forward to its backward (cuDNN's SPATIAL_PERSISTENT mode, taken for NHWC
   training). Zero-initialise, pass the same one to all of the layer's calls, free with
   nn_cuda_bn_reserve_free. NULL: descriptors made per call, SPATIAL mode always. */
typedef struct {
  void *p;
  size_t bytes;
  int persistent;          /* the last forward ran in SPATIAL_PERSISTENT */
  cudnnTensorDescriptor_t x, param;
  nn_cuda_fmt_t fmt;       /* what x and param describe, when desc_ok     */
  int n, c, h, w;
  int desc_ok;
} nn_cuda_bn_reserve_t;
void nn_cuda_bn_reserve_free(nn_cuda_bn_reserve_t *r);
/* A pooling layer's cuDNN descriptors, kept across calls like a batch norm's (zero-
   initialise; free with nn_cuda_pool_desc_free). NULL: made per call. */
typedef struct {
  cudnnTensorDescriptor_t x, y;
  cudnnPoolingDescriptor_t pool;
  nn_cuda_fmt_t fmt;       /* what they describe, when ok */
  int mode;
  nn_pool2d_shape_t shape;
  int ok;
} nn_cuda_pool_desc_t;
void nn_cuda_pool_desc_free(nn_cuda_pool_desc_t *d);
/* How many times batch-norm (pool 0) or pooling (pool 1) descriptors were set in this
   process, for tests: once per layer and shape. */
int nn_cuda_desc_sets(int pool);
/* How many times a convolution algorithm was searched for op (0 forward, 1 backward
   data, 2 backward filter) in this process, for tests: each op's is searched at its
   first use per shape. */
int nn_cuda_conv_searches(int op);
/* Which way batch norm in format f runs now (training or not), for logs and tests:
   "cuDNN SPATIAL_PERSISTENT (Ex)", "cuDNN SPATIAL" or "nn's kernels". */
const char *nn_cuda_bn_path(nn_cuda_fmt_t f, int training);
/* Which way pooling in format f runs now: "cuDNN" or "nn's kernels" (after a refusal of
   the type or layout, or with NN_CUDA_POOL=native). */
const char *nn_cuda_pool_path(nn_cuda_fmt_t f);
nn_status_t nn_batchnorm2d_forward_train_cuda_p(nn_cuda_fmt_t f,
                                                const nn_batchnorm2d_shape_t *s,
                                                const void *x, const float *gamma,
                                                const float *beta, float *running_mean,
                                                float *running_var, void *y,
                                                float *save_mean, float *save_invstd,
                                                nn_cuda_bn_reserve_t *reserve);
nn_status_t nn_batchnorm2d_forward_infer_cuda_p(nn_cuda_fmt_t f,
                                                const nn_batchnorm2d_shape_t *s,
                                                const void *x, const float *gamma,
                                                const float *beta, const float *running_mean,
                                                const float *running_var, void *y,
                                                nn_cuda_bn_reserve_t *state);
nn_status_t nn_batchnorm2d_backward_cuda_p(nn_cuda_fmt_t f, const nn_batchnorm2d_shape_t *s,
                                           const void *x, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           const void *dy, void *dx, int dx_add,
                                           float *dgamma, float *dbeta,
                                           nn_cuda_bn_reserve_t *reserve);
nn_status_t nn_pool2d_forward_cuda_p(nn_cuda_fmt_t f, int max, const nn_pool2d_shape_t *s,
                                     const void *x, void *y, nn_cuda_pool_desc_t *cache);
nn_status_t nn_pool2d_backward_cuda_p(nn_cuda_fmt_t f, int max, const nn_pool2d_shape_t *s,
                                      const void *x, const void *y, const void *dy, void *dx,
                                      int dx_add, nn_cuda_pool_desc_t *cache);
nn_status_t nn_linear_forward_cuda_p(nn_precision_t p, int n, int in, int out, const void *x,
                                     const void *w, const void *b, void *y);
nn_status_t nn_linear_backward_cuda_p(nn_precision_t p, int n, int in, int out,
                                      const void *x, const void *w, const void *dy, void *dx,
                                      int dx_add, void *dw, void *db);
/* One optimizer step; skip_dev (device int, may be NULL): when it holds non-zero at the
   time the step runs on the GPU, nothing changes (not even the step count). */
nn_status_t nn_cuda_optim_step_skip(nn_cuda_optim_t *o, float *params_dev,
                                    const float *grads_dev, float lr, const int *skip_dev);
size_t nn_cuda_optim_count(const nn_cuda_optim_t *o);   /* parameters it was made for */

/* Kernel launchers (kernels.cu), all on stream st, activations in precision p.
   Return cudaGetLastError(). A backward kernel adds into its input gradient (dx += ...)
   when its add argument is non-zero and stores it (dx = ...) otherwise: the model walk's
   first writer of a gradient stores (nn_layer_t.dx_first). */
cudaError_t nn_cuk_relu_forward(cudaStream_t st, nn_precision_t p, size_t n, const void *x,
                                void *y);
cudaError_t nn_cuk_relu_backward(cudaStream_t st, nn_precision_t p, size_t n, const void *y,
                                 const void *dy, void *dx, int add);
cudaError_t nn_cuk_add_forward(cudaStream_t st, nn_precision_t p, size_t n, const void *a,
                               const void *b, void *y);
/* da may be db (y = x + x). */
cudaError_t nn_cuk_add_backward(cudaStream_t st, nn_precision_t p, size_t n, const void *dy,
                                void *da, int a_add, void *db, int b_add);
cudaError_t nn_cuk_accumulate(cudaStream_t st, nn_precision_t p, size_t n, const void *dy,
                              void *dx, int add);
cudaError_t nn_cuk_gap_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, const void *x, void *y);
cudaError_t nn_cuk_gap_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                int hw, const void *dy, void *dx, int add);
cudaError_t nn_cuk_bias_add(cudaStream_t st, nn_precision_t p, int n, int out, const void *b,
                            void *y);
cudaError_t nn_cuk_bias_grad(cudaStream_t st, nn_precision_t p, int n, int out,
                             const void *dy, void *db);
/* Convolution bias over NCHW or NHWC data: y[s][ch][p] += b[ch]; db[ch] += sum of dy
   over s, p. */
cudaError_t nn_cuk_channel_bias_add(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                    int hw, const void *b, void *y);
cudaError_t nn_cuk_channel_bias_grad(cudaStream_t st, nn_precision_t p, int nhwc, int n,
                                     int c, int hw, const void *dy, void *db);
/* Batch norm (NCHW or NHWC, float32 statistics and parameters), nn's own kernels: the
   formulas of nn/batchnorm2d.c (dgamma and dbeta always added into). Shapes must be
   valid. */
cudaError_t nn_cuk_bn_train(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c, int hw,
                            float eps, float momentum, const void *x, const float *gamma,
                            const float *beta, float *running_mean, float *running_var,
                            void *y, float *save_mean, float *save_invstd);
cudaError_t nn_cuk_bn_infer(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c, int hw,
                            float eps, const void *x, const float *gamma, const float *beta,
                            const float *running_mean, const float *running_var, void *y);
cudaError_t nn_cuk_bn_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, const void *x, const float *gamma,
                               const float *save_mean, const float *save_invstd,
                               const void *dy, void *dx, int add, float *dgamma,
                               float *dbeta);
/* Batch norm over NHWC, channel-vectorised (nn's kernels in channels last): a warp
   reads a contiguous run of channels, blocks split the rows, and the per-chunk partials
   are merged in a fixed order (deterministic). ws: nn_cuk_bn_nhwc_workspace bytes of
   device memory, used by the call only. Shapes must be valid. */
size_t nn_cuk_bn_nhwc_workspace(int n, int c, int hw);
cudaError_t nn_cuk_bn_nhwc_train(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 float eps, float momentum, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var,
                                 void *y, float *save_mean, float *save_invstd, float *ws);
cudaError_t nn_cuk_bn_nhwc_backward(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                    const void *x, const float *gamma, const float *save_mean,
                                    const float *save_invstd, const void *dy, void *dx,
                                    int add, float *dgamma, float *dbeta, float *ws);
/* Max or average pooling (nn's kernels, where cuDNN refuses a type), NCHW or NHWC, shape
   s filled by nn_pool2d_shape: the CPU's rules (max: first maximum in scan order, a NaN
   wins; average counts padding). Backward reads x (max) and dy. */
cudaError_t nn_cuk_pool_forward(cudaStream_t st, nn_precision_t p, int nhwc, int max,
                                const nn_pool2d_shape_t *s, const void *x, void *y);
cudaError_t nn_cuk_pool_backward(cudaStream_t st, nn_precision_t p, int nhwc, int max,
                                 const nn_pool2d_shape_t *s, const void *x, const void *dy,
                                 void *dx, int add);
/* Layout changes, n x c x hw elements: float NCHW -> type-p NHWC (the input batch; conv
   weights K x C x R x S -> K x R x S x C with n = K, hw = R * S) and back to float
   (weight gradients); flatten of NHWC activations into NCHW order, and its backward
   dx (NHWC) += dy (NCHW) (or =). */
cudaError_t nn_cuk_float_to_nhwc(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 const float *x, void *y);
cudaError_t nn_cuk_nhwc_to_float(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 const void *x, float *y);
cudaError_t nn_cuk_nhwc_to_nchw(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                const void *x, void *y);
cudaError_t nn_cuk_nchw_to_nhwc_acc(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                    const void *dy, void *dx, int add);
cudaError_t nn_cuk_dropout_forward(cudaStream_t st, nn_precision_t prec, size_t n, float p,
                                   uint64_t seed, uint64_t step, const void *x, void *y,
                                   uint8_t *mask);
cudaError_t nn_cuk_dropout_backward(cudaStream_t st, nn_precision_t prec, size_t n, float p,
                                    const uint8_t *mask, const void *dy, void *dx, int add);
/* dlogits = scale * d(mean loss)/d(logits); scale (device float) may be NULL for 1. */
cudaError_t nn_cuk_softmax_xent(cudaStream_t st, nn_precision_t p, int n, int k,
                                const void *logits, const int32_t *labels, float *loss,
                                int *correct, void *dlogits, const float *scale);
cudaError_t nn_cuk_cast_from_float(cudaStream_t st, nn_precision_t p, size_t n,
                                   const float *x, void *y);
cudaError_t nn_cuk_cast_to_float(cudaStream_t st, nn_precision_t p, size_t n, const void *x,
                                 float *y);
cudaError_t nn_cuk_optim_prepare(cudaStream_t st, nn_cuda_optim_dev_t *d, const int *skip,
                                 int adam, double b1, double b2, float lr);
cudaError_t nn_cuk_sgd(cudaStream_t st, size_t n, float *p, const float *g, float *buf,
                       float lr, float wd, float mom, int nesterov,
                       const nn_cuda_optim_dev_t *od);
cudaError_t nn_cuk_adam(cudaStream_t st, size_t n, float *p, const float *g, float *m,
                        float *v, float b1, float b2, float eps, float decay, float l2,
                        const nn_cuda_optim_dev_t *od);
/* x *= factor over n float32 values. */
cudaError_t nn_cuk_scale(cudaStream_t st, size_t n, float *x, float factor);
cudaError_t nn_cuk_amp_unscale(cudaStream_t st, size_t n, float *g, nn_cuda_amp_t *a);
cudaError_t nn_cuk_amp_update(cudaStream_t st, nn_cuda_amp_t *a, float growth, float backoff,
                              int interval, int static_scale);

#ifdef __cplusplus
}
#endif

#endif /* NN_CUDA_INTERNAL_H */
