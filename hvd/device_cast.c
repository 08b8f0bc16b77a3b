/* hvd/device_cast.c: the float16 staging buffer of hvd_grad_buckets' HVD_COMPRESSION_FP16
   on device gradients, and the device of a pointer. Called by the user thread (the one
   running backward), not by the background thread.

   The casts themselves run on hvd's collective stream, inside the device allreduce
   (hvd/device.c, kernels in hvd/device_kernels.cu): float32 -> float16 after the wait
   on the submission event, float16 -> float32 before the completion event, so the
   compute stream is neither used nor synchronised for them. */
#include "hvd/hvd_internal.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#include <string.h>

static hvd_status_t fail(const char *what, const char *call, cudaError_t e) {
  (void)cudaGetLastError();   /* clears a non-sticky error */
  return hvd_set_error(HVD_ERR_BACKEND, "%s: %s:%d: %s failed: %s", what, __FILE__, __LINE__,
                       call, cudaGetErrorString(e));
}
#define CUDA_OK(what, call)                                                            \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) return fail(what, #call, e_);                               \
  } while (0)

int hvd_device_of_ptr(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return a.device;
}

/* Runs with device current, then restores the caller's current device. */
typedef struct { int prev, switched; } device_scope_t;
static hvd_status_t enter(device_scope_t *d, int device, const char *what) {
  d->switched = 0;
  CUDA_OK(what, cudaGetDevice(&d->prev));
  if (d->prev != device) {
    CUDA_OK(what, cudaSetDevice(device));
    d->switched = 1;
  }
  return HVD_OK;
}
static void leave(const device_scope_t *d) {
  if (d->switched) (void)cudaSetDevice(d->prev);
}

hvd_status_t hvd_device_buffer_alloc(void **p, size_t bytes, int device) {
  device_scope_t d;
  hvd_status_t s = enter(&d, device, "hvd_grad_buckets_create");
  if (s != HVD_OK) return s;
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  leave(&d);
  if (e != cudaSuccess) {
    *p = NULL;
    (void)cudaGetLastError();
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_grad_buckets_create: cudaMalloc of the "
                         "%zu-byte float16 staging buffer on GPU %d failed: %s", bytes, device,
                         cudaGetErrorString(e));
  }
  return HVD_OK;
}

void hvd_device_buffer_free(void *p) {
  if (p) (void)cudaFree(p);
}

#else /* no CUDA in this build: no gradient is in device memory, nothing calls these */

static hvd_status_t no_cuda(void) {
  return hvd_set_error(HVD_ERR_BACKEND, "device memory in a build without CUDA");
}
int hvd_device_of_ptr(const void *p) {
  (void)p;
  return -1;
}
hvd_status_t hvd_device_buffer_alloc(void **p, size_t bytes, int device) {
  (void)bytes;
  (void)device;
  *p = NULL;
  return no_cuda();
}
void hvd_device_buffer_free(void *p) { (void)p; }
#endif
