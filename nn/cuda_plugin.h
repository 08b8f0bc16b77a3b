/* nn/cuda_plugin.h: the table between the shared libnn and its CUDA backend.

   The installed shared libnn (libnn.so) links no CUDA library, so a CPU program built
   against it needs none at link or run time. nn's CUDA backend (nn/cuda/, with cuDNN,
   cuBLAS and the CUDA runtime) is a library of its own, libnn_cuda.so.0, installed next
   to libnn.so; nn/cuda_loader.c loads it with dlopen the first time a program asks for
   the device (nn_cuda_available, nn_model_to_device, ...) and reaches it through this
   table, which the backend hands out from its one exported function
   (NN_CUDA_PLUGIN_SYMBOL, nn/cuda/plugin.c). The static libnn.a links nn/cuda directly
   and has neither the loader nor the table.

   The functions are those of nn/nn_cuda.h that every build defines (nn/device_stub.c
   stands in for them without CUDA): the runtime, the memory helpers, the device
   optimizer and the device model. The kernels (nn_conv2d_forward_cuda, ...) stay
   inside the backend. A field added here raises NN_CUDA_PLUGIN_ABI, so that a backend
   of another build is refused with a message instead of called through a wrong table. */
#ifndef NN_CUDA_PLUGIN_H
#define NN_CUDA_PLUGIN_H

#include "nn/nn_cuda.h"

#include <stddef.h>

#define NN_CUDA_PLUGIN_ABI 2
#define NN_CUDA_PLUGIN_SONAME "libnn_cuda.so.0"
#define NN_CUDA_PLUGIN_SYMBOL "nn_cuda_plugin_v1"

typedef struct {
  int abi;                  /* NN_CUDA_PLUGIN_ABI of the backend's build */
  size_t size;              /* sizeof(nn_cuda_plugin_t) there            */
  /* runtime */
  int (*available)(void);
  const char *(*info)(void);
  const char *(*reason)(void);
  int (*device_count)(void);
  nn_status_t (*set_device)(int device);
  void *(*stream)(void);
  nn_status_t (*synchronize)(void);
  nn_status_t (*set_tf32)(int on);
  /* memory */
  nn_status_t (*malloc)(void **p, size_t bytes);
  void (*free)(void *p);
  nn_status_t (*to_device)(void *dst, const void *src, size_t bytes);
  nn_status_t (*to_host)(void *dst, const void *src, size_t bytes);
  nn_status_t (*memset0)(void *p, size_t bytes);
  int (*is_device_ptr)(const void *p);
  /* optimizer on the device */
  nn_status_t (*optim_create)(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                              size_t count);
  void (*optim_free)(nn_cuda_optim_t *o);
  nn_status_t (*optim_step)(nn_cuda_optim_t *o, float *params_dev, const float *grads_dev,
                            float lr);
  nn_status_t (*optim_state_to_host)(nn_cuda_optim_t *o, float *state, size_t count,
                                     int64_t *step);
  nn_status_t (*optim_state_to_device)(nn_cuda_optim_t *o, const float *state,
                                       size_t count, int64_t step);
  /* models */
  nn_status_t (*model_to_device)(nn_model_t *m, nn_device_t device);
  nn_status_t (*model_optim_step_cuda)(nn_model_t *m, nn_cuda_optim_t *o, float lr);
  const float *(*model_device_logits)(const nn_model_t *m);
} nn_cuda_plugin_t;

/* What NN_CUDA_PLUGIN_SYMBOL is: returns the backend's table (never NULL). */
typedef const nn_cuda_plugin_t *(*nn_cuda_plugin_fn)(void);

#endif /* NN_CUDA_PLUGIN_H */
