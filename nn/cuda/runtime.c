/* nn/cuda/runtime.c: device detection, the per-process context, memory helpers.

   Detection runs once (pthread_once): cudaGetDeviceCount. With no device or no (or too
   old a) driver the answer is "no CUDA" and nothing else here calls CUDA again, so a
   CUDA build runs every CPU path on a machine without a GPU. The CUDA runtime is linked
   statically, so the program starts without libcuda; only this call finds out. */
#include "nn/cuda/cuda_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int detected_count;          /* devices, 0 when none or unusable */
static char detected_info[800];   /* room for the reason and its tail */
static char detected_reason[768];  /* detected_info without "; running on CPU" */

static void detect(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    (void)cudaGetLastError(); /* clear the sticky-free error so it is not reported later */
    detected_count = 0;
    snprintf(detected_reason, sizeof detected_reason, "CUDA: no device (%s)",
             e == cudaSuccess ? "cudaGetDeviceCount found 0" : cudaGetErrorString(e));
    snprintf(detected_info, sizeof detected_info, "%s; running on CPU", detected_reason);
    return;
  }
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(prop.name, sizeof prop.name, "?");
  }
  detected_count = n;
  snprintf(detected_info, sizeof detected_info, "CUDA: %d device(s), device 0: %s (sm_%d%d, %.1f GiB)",
           n, prop.name, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  snprintf(detected_reason, sizeof detected_reason, "%.700s", detected_info);
}

int nn_cuda_available(void) {
  pthread_once(&detect_once, detect);
  return detected_count > 0;
}

int nn_cuda_device_count(void) {
  pthread_once(&detect_once, detect);
  return detected_count;
}

const char *nn_cuda_info(void) {
  pthread_once(&detect_once, detect);
  return detected_info;
}

const char *nn_cuda_reason(void) {
  pthread_once(&detect_once, detect);
  return detected_reason;
}

nn_status_t nn_cuda_fail(const char *file, int line, const char *call, const char *what) {
  return nn_set_error(NN_ERR_BACKEND, "%s:%d: %s failed: %s", file, line, call, what);
}

static nn_status_t no_device(const char *fn) {
  return nn_set_error(NN_ERR_UNSUPPORTED, "%s: %s", fn, nn_cuda_info());
}

/* One context per process: a process drives one GPU (local rank i uses GPU i). */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static nn_cuda_ctx_t ctx;
static int ctx_ready;
static int wanted_device;
static int wanted_tf32;

nn_status_t nn_cuda_set_device(int device) {
  if (!nn_cuda_available()) return no_device("nn_cuda_set_device");
  if (device < 0 || device >= detected_count)
    return nn_set_error(NN_ERR_ARG, "nn_cuda_set_device: device %d, this machine has %d "
                        "(one process per GPU: more local ranks than GPUs?)", device,
                        detected_count);
  pthread_mutex_lock(&ctx_mu);
  int ready = ctx_ready, cur = ctx.device;
  if (!ready) wanted_device = device;
  pthread_mutex_unlock(&ctx_mu);
  if (ready && cur != device)
    return nn_set_error(NN_ERR_ARG, "nn_cuda_set_device(%d): device %d is already in use "
                        "by this process", device, cur);
  NN_CUDA_CHECK(cudaSetDevice(device));
  return NN_OK;
}

static nn_status_t ctx_create(void) {
  memset(&ctx, 0, sizeof ctx);
  ctx.device = wanted_device;
  NN_CUDA_CHECK(cudaSetDevice(ctx.device));
  /* A blocking stream: work that other code puts on the legacy default stream stays
     ordered with nn's kernels. */
  NN_CUDA_CHECK(cudaStreamCreate(&ctx.stream));
  NN_CUDNN_CHECK(cudnnCreate(&ctx.cudnn));
  NN_CUDNN_CHECK(cudnnSetStream(ctx.cudnn, ctx.stream));
  NN_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
  NN_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
  ctx.tf32 = wanted_tf32;
  NN_CUBLAS_CHECK(cublasSetMathMode(ctx.cublas, ctx.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                         : CUBLAS_DEFAULT_MATH));
  return NN_OK;
}

nn_status_t nn_cuda_ctx(nn_cuda_ctx_t **out) {
  *out = NULL;
  if (!nn_cuda_available()) return no_device("nn CUDA backend");
  pthread_mutex_lock(&ctx_mu);
  nn_status_t s = NN_OK;
  if (!ctx_ready) {
    s = ctx_create();
    if (s == NN_OK) ctx_ready = 1;
  }
  pthread_mutex_unlock(&ctx_mu);
  if (s != NN_OK) return s;
  /* The current device is per thread: make every calling thread use ours. */
  int cur = -1;
  NN_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != ctx.device) NN_CUDA_CHECK(cudaSetDevice(ctx.device));
  *out = &ctx;
  return NN_OK;
}

nn_status_t nn_cuda_workspace(nn_cuda_ctx_t *c, size_t bytes, void **ws) {
  if (bytes > c->ws_bytes) {
    if (c->ws) {
      /* Kernels queued on the stream may still read the old buffer. */
      NN_CUDA_CHECK(cudaStreamSynchronize(c->stream));
      NN_CUDA_CHECK(cudaFree(c->ws));
      c->ws = NULL;
      c->ws_bytes = 0;
    }
    NN_CUDA_CHECK(cudaMalloc(&c->ws, bytes));
    c->ws_bytes = bytes;
  }
  *ws = c->ws;
  return NN_OK;
}

void *nn_cuda_stream(void) {
  nn_cuda_ctx_t *c;
  if (nn_cuda_ctx(&c) != NN_OK) return NULL;
  return (void *)c->stream;
}

nn_status_t nn_cuda_synchronize(void) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return NN_OK;
}

int nn_cuda_tf32(void) {
  pthread_mutex_lock(&ctx_mu);
  int on = ctx.tf32;
  pthread_mutex_unlock(&ctx_mu);
  return on;
}

nn_status_t nn_cuda_set_tf32(int on) {
  nn_status_t s = NN_OK;
  pthread_mutex_lock(&ctx_mu);
  if (ctx_ready) {
    /* Under the lock: ctx.tf32 (which cuDNN's convolutions follow) and cuBLAS's mode
       change together or not at all. */
    cublasStatus_t e = cublasSetMathMode(ctx.cublas, on ? CUBLAS_TF32_TENSOR_OP_MATH
                                                        : CUBLAS_DEFAULT_MATH);
    if (e != CUBLAS_STATUS_SUCCESS)
      s = nn_cuda_fail(__FILE__, __LINE__, "cublasSetMathMode", cublasGetStatusString(e));
    else
      ctx.tf32 = on != 0;
  }
  if (s == NN_OK) wanted_tf32 = on != 0;
  pthread_mutex_unlock(&ctx_mu);
  return s;
}

nn_status_t nn_cuda_malloc(void **p, size_t bytes) {
  nn_cuda_ctx_t *c;
  *p = NULL;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *p = NULL;
    return nn_set_error(e == cudaErrorMemoryAllocation ? NN_ERR_NO_MEMORY : NN_ERR_BACKEND,
                        "%s:%d: cudaMalloc(%zu bytes) failed: %s", __FILE__, __LINE__,
                        bytes, cudaGetErrorString(e));
  }
  return NN_OK;
}

void nn_cuda_free(void *p) {
  if (p && nn_cuda_available()) (void)cudaFree(p);
}

nn_status_t nn_cuda_to_device(void *dst, const void *src, size_t bytes) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  if (bytes == 0) return NN_OK;
  NN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
  NN_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return NN_OK;
}

nn_status_t nn_cuda_to_host(void *dst, const void *src, size_t bytes) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  if (bytes == 0) return NN_OK;
  NN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
  NN_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return NN_OK;
}

nn_status_t nn_cuda_memset0(void *p, size_t bytes) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  if (bytes == 0) return NN_OK;
  NN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
  return NN_OK;
}

int nn_cuda_is_device_ptr(const void *p) {
  if (!p || !nn_cuda_available()) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
