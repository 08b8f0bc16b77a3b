/* nn/nn_cuda.h: the CUDA backend of nn (cuDNN, cuBLAS and nn's own kernels).

   Built when the Makefile finds CUDA (NN_WITH_CUDA=1). Without it, or on a machine
   without a GPU or driver, every function here returns NN_ERR_UNSUPPORTED (or 0 for
   nn_cuda_available) and nothing touches CUDA: the CPU paths run as in a CPU-only build.

   Kernels: the same names as the CPU reference with a _cuda suffix, the same shapes and
   semantics (backward ADDS into gradients), all pointers in device memory. They are
   enqueued on nn's compute stream (nn_cuda_stream) and do not synchronise; errors of a
   launch are checked at once, errors of execution show up at the next synchronising
   call. Every CUDA, cuDNN and cuBLAS call is checked and a failure is NN_ERR_BACKEND
   with the file and line in nn_last_error().

   Models on the device: nn.h's device-neutral model API (nn_model_to_device,
   nn_model_optim_*, nn_model_sync_*, nn_model_*_home) is all a training loop needs; a
   model on the device copies back only the loss and the number of correct predictions,
   and only when asked. The model functions below are the device-only views of it. */
#ifndef NN_CUDA_H
#define NN_CUDA_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime ---- */
/* 1 when this build has CUDA and a usable device is present. Decided once per process
   (cudaGetDeviceCount; "no device" and "insufficient driver" mean 0) and never touches
   CUDA again when 0. nn_cuda_info() says why in one line ("CUDA: 1 device(s): NVIDIA
   H200 (sm_90)" or "CUDA: no device: ..."), for programs to print once. */
int nn_cuda_available(void);
const char *nn_cuda_info(void);
/* nn_cuda_info() without its "; running on CPU": for a program that asked for the GPU
   and stops instead ("--device gpu: no usable GPU (CUDA: no device (...))"). */
const char *nn_cuda_reason(void);
int nn_cuda_device_count(void);
/* Selects the device of this process (local rank i uses GPU i). Call before any other
   nn_cuda_* call in the process that uses the device; NN_ERR_ARG when out of range. */
nn_status_t nn_cuda_set_device(int device);
/* The compute stream (a cudaStream_t) every nn kernel runs on; hand it to
   hvd_cuda_set_stream so allreduces of gradients are ordered after backward. */
void *nn_cuda_stream(void);
nn_status_t nn_cuda_synchronize(void);
/* TF32 tensor-core math for cuBLAS GEMMs and cuDNN convolutions (default off: fp32).
   Remembered until the device is first used; NN_ERR_BACKEND when cuBLAS refuses the
   math mode (the setting is then unchanged). NN_OK without CUDA (nothing to set). */
nn_status_t nn_cuda_set_tf32(int on);

/* Device memory helpers (float counts, not bytes, for the float versions). */
nn_status_t nn_cuda_malloc(void **p, size_t bytes);
void nn_cuda_free(void *p);
nn_status_t nn_cuda_to_device(void *dst, const void *src, size_t bytes);   /* H2D, sync */
nn_status_t nn_cuda_to_host(void *dst, const void *src, size_t bytes);     /* D2H, sync */
nn_status_t nn_cuda_memset0(void *p, size_t bytes);                        /* async */
/* 1 when p points into device memory (cudaPointerGetAttributes). */
int nn_cuda_is_device_ptr(const void *p);

/* ---- kernels on device memory ---- */
nn_status_t nn_conv2d_forward_cuda(const nn_conv2d_shape_t *s, const float *x,
                                   const float *w, const float *b, float *y);
nn_status_t nn_conv2d_backward_cuda(const nn_conv2d_shape_t *s, const float *x,
                                    const float *w, const float *dy, float *dx, float *dw,
                                    float *db);
nn_status_t nn_batchnorm2d_forward_train_cuda(const nn_batchnorm2d_shape_t *s,
                                              const float *x, const float *gamma,
                                              const float *beta, float *running_mean,
                                              float *running_var, float *y,
                                              float *save_mean, float *save_invstd);
nn_status_t nn_batchnorm2d_forward_infer_cuda(const nn_batchnorm2d_shape_t *s,
                                              const float *x, const float *gamma,
                                              const float *beta, const float *running_mean,
                                              const float *running_var, float *y);
nn_status_t nn_batchnorm2d_backward_cuda(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, const float *dy,
                                         float *dx, float *dgamma, float *dbeta);
nn_status_t nn_relu_forward_cuda(size_t count, const float *x, float *y);
/* dx += (y > 0) * dy; with dx == dy (in-place relu) the gradient is masked instead. */
nn_status_t nn_relu_backward_cuda(size_t count, const float *y, const float *dy, float *dx);
nn_status_t nn_add_forward_cuda(size_t count, const float *a, const float *b, float *y);
/* da += dy and db += dy. */
nn_status_t nn_add_backward_cuda(size_t count, const float *dy, float *da, float *db);
/* Max pooling: cuDNN keeps no argmax; backward needs x and y of the forward. */
nn_status_t nn_maxpool2d_forward_cuda(const nn_pool2d_shape_t *s, const float *x, float *y);
nn_status_t nn_maxpool2d_backward_cuda(const nn_pool2d_shape_t *s, const float *x,
                                       const float *y, const float *dy, float *dx);
nn_status_t nn_avgpool2d_forward_cuda(const nn_pool2d_shape_t *s, const float *x, float *y);
nn_status_t nn_avgpool2d_backward_cuda(const nn_pool2d_shape_t *s, const float *x,
                                       const float *y, const float *dy, float *dx);
nn_status_t nn_global_avgpool_forward_cuda(int n, int c, int hw, const float *x, float *y);
nn_status_t nn_global_avgpool_backward_cuda(int n, int c, int hw, const float *dy,
                                            float *dx);
nn_status_t nn_linear_forward_cuda(int n, int in, int out, const float *x, const float *w,
                                   const float *b, float *y);
nn_status_t nn_linear_backward_cuda(int n, int in, int out, const float *x,
                                    const float *w, const float *dy, float *dx, float *dw,
                                    float *db);
/* Same mask as the CPU kernel for the same (seed, step). */
nn_status_t nn_dropout_forward_cuda(size_t count, float p, uint64_t seed, uint64_t step,
                                    const float *x, float *y, uint8_t *mask);
nn_status_t nn_dropout_backward_cuda(size_t count, float p, const uint8_t *mask,
                                     const float *dy, float *dx);
/* labels on the device. loss_dev (1 float) and correct_dev (1 int) are device memory
   and are SET; dlogits (may be NULL) is SET. Labels outside [0, k) give a NaN loss. */
nn_status_t nn_softmax_cross_entropy_cuda(int n, int k, const float *logits,
                                          const int32_t *labels, float *loss_dev,
                                          int *correct_dev, float *dlogits);

/* ---- optimizer on device (torch.optim rules as nn_optim, state in device memory) ---- */
typedef struct nn_cuda_optim nn_cuda_optim_t;
nn_status_t nn_cuda_optim_create(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                                 size_t count);
void nn_cuda_optim_free(nn_cuda_optim_t *o);
/* One fused kernel over the flat device parameter buffer. */
nn_status_t nn_cuda_optim_step(nn_cuda_optim_t *o, float *params_dev,
                               const float *grads_dev, float lr);
/* Copies the state (as nn_optim_state: momentum, or m then v) and step to/from host. */
nn_status_t nn_cuda_optim_state_to_host(nn_cuda_optim_t *o, float *state, size_t count,
                                        int64_t *step);
nn_status_t nn_cuda_optim_state_to_device(nn_cuda_optim_t *o, const float *state,
                                          size_t count, int64_t step);

/* ---- models on device ---- */
/* Device parameter and gradient buffers (nn_model_params_home/_grads_home of a model
   on the device); NULL on the CPU. */
float *nn_model_device_params(nn_model_t *m);
float *nn_model_device_grads(nn_model_t *m);
/* Logits of the last forward, in device memory (float32); NULL on the CPU. */
const float *nn_model_device_logits(const nn_model_t *m);

/* An update with a device optimizer the caller owns (nn_cuda_optim_create for
   nn_model_param_len parameters), instead of the model's own (nn_model_optim_step, the
   same rules): fp32 is nn_cuda_optim_step on the model's parameters and gradients;
   fp16/bf16 also unscale, skip on inf/NaN and adapt the loss scale. */
nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr);

#ifdef __cplusplus
}
#endif

#endif /* NN_CUDA_H */
