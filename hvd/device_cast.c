/* hvd/device_cast.c: float32 <-> float16 casts of device gradients for
   hvd_grad_buckets' HVD_COMPRESSION_FP16, and the device buffer they use. Called by the
   user thread (the one running backward), not by the background thread.

   The kernels (hvd/device_kernels.cu) are compiled to PTX ahead of time and embedded
   here (hvd/device_kernels_ptx.h), then loaded once per process with cudaLibraryLoadData
   (CUDA 12+ runtime API; the driver JIT-compiles the PTX for the GPU at hand) and
   launched with cudaLaunchKernel on the kernel handle. So hvd stays plain C that any C
   compiler builds (see device_kernels.cu for why). The library stays loaded until the
   process ends, like the kernels nvcc registers.

   Launches go to the compute stream (hvd_cuda_set_stream): the cast to float16 runs
   after the backward kernels queued before it, and hvd's collective stream waits for it
   like for any submission; the cast back is queued after the allreduce has completed.
   Each call makes the gradients' device current for the call and restores the caller's. */
#include "hvd/hvd_internal.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#include <string.h>

#include "hvd/device_kernels_ptx.h"

#define CAST_THREADS 256
#define CAST_MAX_BLOCKS 4096      /* grid-stride loops cover the rest */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t load_error = cudaSuccess;
static const char *load_step = "";
static cudaLibrary_t library;
static cudaKernel_t to_half_kernel, from_half_kernel;

static void load(void) {
  load_step = "cudaLibraryLoadData(hvd_device_kernels_ptx)";
  load_error = cudaLibraryLoadData(&library, hvd_device_kernels_ptx, NULL, NULL, 0, NULL,
                                   NULL, 0);
  if (load_error != cudaSuccess) return;
  load_step = "cudaLibraryGetKernel(\"hvd_cast_f32_to_f16\")";
  load_error = cudaLibraryGetKernel(&to_half_kernel, library, "hvd_cast_f32_to_f16");
  if (load_error != cudaSuccess) return;
  load_step = "cudaLibraryGetKernel(\"hvd_cast_f16_to_f32\")";
  load_error = cudaLibraryGetKernel(&from_half_kernel, library, "hvd_cast_f16_to_f32");
}

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

hvd_status_t hvd_device_kernels_load(void) {
  pthread_once(&load_once, load);
  if (load_error != cudaSuccess)
    return hvd_set_error(HVD_ERR_BACKEND, "loading hvd's float16 cast kernels: %s failed: "
                         "%s (the driver must JIT-compile PTX ISA 7.0 for this GPU)",
                         load_step, cudaGetErrorString(load_error));
  return HVD_OK;
}

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

static hvd_status_t launch(const char *what, int device, cudaKernel_t kernel, void **args,
                           size_t n) {
  hvd_status_t s = hvd_device_kernels_load();
  if (s != HVD_OK) return s;
  if (n == 0) return HVD_OK;
  device_scope_t d;
  if ((s = enter(&d, device, what)) != HVD_OK) return s;
  size_t blocks = (n + CAST_THREADS - 1) / CAST_THREADS;
  if (blocks > CAST_MAX_BLOCKS) blocks = CAST_MAX_BLOCKS;
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {CAST_THREADS, 1, 1};
  cudaError_t e = cudaLaunchKernel((const void *)kernel, grid, block, args, 0,
                                   (cudaStream_t)hvd_device_compute_stream());
  leave(&d);
  if (e != cudaSuccess) return fail(what, "cudaLaunchKernel", e);
  return HVD_OK;
}

hvd_status_t hvd_device_to_half(int device, uint16_t *dst, const float *src, size_t n) {
  unsigned long long count = n;
  void *args[] = {&dst, &src, &count};
  return launch("float16 compression (cast to float16)", device, to_half_kernel, args, n);
}

hvd_status_t hvd_device_from_half(int device, float *dst, const uint16_t *src, size_t n,
                                  float div) {
  unsigned long long count = n;
  void *args[] = {&dst, &src, &count, &div};
  return launch("float16 compression (cast back to float32)", device, from_half_kernel, args,
                n);
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
hvd_status_t hvd_device_kernels_load(void) { return no_cuda(); }
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
