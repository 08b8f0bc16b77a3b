/* hvd/device_cast.c: float32 <-> float16 casts of device gradients for
   hvd_grad_buckets' HVD_COMPRESSION_FP16, and the device buffer they use. Called by the
   user thread (the one running backward), not by the background thread.

   The kernels are in hvd/device_kernels.cu (nvcc, linked into libhvd.a).

   Launches go to the compute stream (hvd_cuda_set_stream): the cast to float16 runs
   after the backward kernels queued before it, and hvd's collective stream waits for it
   like for any submission; the cast back is queued after the allreduce has completed.
   Each call makes the gradients' device current for the call and restores the caller's. */
#include "hvd/hvd_internal.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#include <string.h>

/* hvd/device_kernels.cu */
cudaError_t hvd_cuk_cast_to_half(void *stream, uint16_t *dst, const float *src, size_t n);
cudaError_t hvd_cuk_cast_from_half(void *stream, float *dst, const uint16_t *src, size_t n,
                                   float div);

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

hvd_status_t hvd_device_to_half(int device, uint16_t *dst, const float *src, size_t n) {
  const char *what = "float16 compression (cast to float16)";
  device_scope_t d;
  hvd_status_t s = enter(&d, device, what);
  if (s != HVD_OK) return s;
  cudaError_t e = hvd_cuk_cast_to_half(hvd_device_compute_stream(), dst, src, n);
  leave(&d);
  if (e != cudaSuccess) return fail(what, "hvd_cuk_cast_to_half", e);
  return HVD_OK;
}

hvd_status_t hvd_device_from_half(int device, float *dst, const uint16_t *src, size_t n,
                                  float div) {
  const char *what = "float16 compression (cast back to float32)";
  device_scope_t d;
  hvd_status_t s = enter(&d, device, what);
  if (s != HVD_OK) return s;
  cudaError_t e = hvd_cuk_cast_from_half(hvd_device_compute_stream(), dst, src, n, div);
  leave(&d);
  if (e != cudaSuccess) return fail(what, "hvd_cuk_cast_from_half", e);
  return HVD_OK;
}

hvd_status_t hvd_device_sync_compute(int device) {
  device_scope_t d;
  hvd_status_t s = enter(&d, device, "hvd_grad_buckets_wait");
  if (s != HVD_OK) return s;
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)hvd_device_compute_stream());
  leave(&d);
  if (e != cudaSuccess) return fail("hvd_grad_buckets_wait", "cudaStreamSynchronize", e);
  return HVD_OK;
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
hvd_status_t hvd_device_to_half(int device, uint16_t *dst, const float *src, size_t n) {
  (void)device, (void)dst, (void)src, (void)n;
  return no_cuda();
}
hvd_status_t hvd_device_from_half(int device, float *dst, const uint16_t *src, size_t n,
                                  float div) {
  (void)device, (void)dst, (void)src, (void)n, (void)div;
  return no_cuda();
}
hvd_status_t hvd_device_sync_compute(int device) {
  (void)device;
  return no_cuda();
}

#endif
