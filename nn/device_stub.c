/* nn/device_stub.c: the device API of nn/nn_cuda.h in a build without CUDA
   (NN_WITH_CUDA unset): every call says the build lacks CUDA, so programs can call it
   unconditionally and fall back to the CPU. With CUDA, nn/cuda/ defines these. */
#ifndef NN_WITH_CUDA
#include "nn/nn_cuda.h"
#include "nn/model_internal.h"

#include <stddef.h>

static nn_status_t no_cuda(const char *fn) {
  return nn_set_error(NN_ERR_UNSUPPORTED, "%s: this build has no CUDA (make CUDA=1)", fn);
}

int nn_cuda_available(void) { return 0; }
const char *nn_cuda_info(void) { return "CUDA: not in this build"; }
const char *nn_cuda_reason(void) { return "CUDA: not in this build"; }
int nn_cuda_device_count(void) { return 0; }
nn_status_t nn_cuda_set_device(int device) {
  (void)device;
  return no_cuda("nn_cuda_set_device");
}
void *nn_cuda_stream(void) { return NULL; }
nn_status_t nn_cuda_synchronize(void) { return no_cuda("nn_cuda_synchronize"); }
nn_status_t nn_cuda_set_tf32(int on) {
  (void)on;
  return NN_OK;
}
int nn_cuda_is_device_ptr(const void *p) {
  (void)p;
  return 0;
}

const float *nn_model_device_logits(const nn_model_t *m) {
  (void)m;
  return NULL;
}
nn_status_t nn_cuda_optim_create(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                                 size_t count) {
  (void)cfg;
  (void)count;
  if (out) *out = NULL;
  return no_cuda("nn_cuda_optim_create");
}
void nn_cuda_optim_free(nn_cuda_optim_t *o) { (void)o; }
nn_status_t nn_cuda_malloc(void **p, size_t bytes) {
  (void)bytes;
  if (p) *p = NULL;
  return no_cuda("nn_cuda_malloc");
}
void nn_cuda_free(void *p) { (void)p; }
nn_status_t nn_cuda_to_device(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return no_cuda("nn_cuda_to_device");
}
nn_status_t nn_cuda_to_host(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return no_cuda("nn_cuda_to_host");
}
nn_status_t nn_cuda_memset0(void *p, size_t bytes) {
  (void)p, (void)bytes;
  return no_cuda("nn_cuda_memset0");
}
nn_status_t nn_cuda_optim_step(nn_cuda_optim_t *o, float *params_dev,
                               const float *grads_dev, float lr) {
  (void)o, (void)params_dev, (void)grads_dev, (void)lr;
  return no_cuda("nn_cuda_optim_step");
}
nn_status_t nn_cuda_optim_state_to_host(nn_cuda_optim_t *o, float *state, size_t count,
                                        int64_t *step) {
  (void)o, (void)state, (void)count, (void)step;
  return no_cuda("nn_cuda_optim_state_to_host");
}
nn_status_t nn_cuda_optim_state_to_device(nn_cuda_optim_t *o, const float *state,
                                          size_t count, int64_t step) {
  (void)o, (void)state, (void)count, (void)step;
  return no_cuda("nn_cuda_optim_state_to_device");
}
nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  (void)m, (void)o, (void)lr;
  return no_cuda("nn_model_optim_step_cuda");
}
nn_status_t nn_model_to_device(nn_model_t *m, nn_device_t device) {
  int done;
  nn_status_t s = nn_model_to_device_args(m, device, &done);
  if (s != NN_OK || done) return s;
  return no_cuda("nn_model_to_device");
}
#else
/* ISO C forbids an empty translation unit. */
typedef int nn_device_stub_unused_t;
#endif
