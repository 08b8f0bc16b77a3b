/* hvd/device.c: collectives on CUDA device memory.

   Device buffers are recognised with cudaPointerGetAttributes (after a one-time check
   that a device exists at all, so a CUDA build on a machine without a GPU or driver
   never calls CUDA beyond cudaGetDeviceCount). They are reduced by the background
   thread, in the order the coordinator negotiated, like host buffers:
   - with NCCL (HVD_WITH_NCCL): one communicator for the world, created at the first
     device collective (rank 0's ncclUniqueId broadcast over the existing transport),
     on a dedicated stream that first waits (event) for the compute stream set by
     hvd_cuda_set_stream (default: the legacy default stream), so gradients computed by
     kernels queued before the submission are final. A group of several tensors is packed
     into a fusion buffer in device memory. AVERAGE is ncclAvg. The request completes
     when the stream has finished.
   - without NCCL: staged through pinned host memory and the host allreduce.
   Local rank i uses GPU i; more local ranks than GPUs is an error. */
#include "hvd/hvd_internal.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#ifdef HVD_WITH_NCCL
#include <nccl.h>
#endif
#include <string.h>

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int device_count;
static void *user_stream;           /* cudaStream_t of the compute stream, or NULL */

static struct {
  int ready;
  int device;
  cudaStream_t stream;
  cudaEvent_t compute_done;
  void *fusion;                     /* device fusion buffer */
  size_t fusion_cap;
  void *staging;                    /* pinned host buffer (no NCCL) */
  size_t staging_cap;
#ifdef HVD_WITH_NCCL
  ncclComm_t comm;
#endif
} dev;

static void detect(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  device_count = n;
  /* Said once, at HVD_LOG_LEVEL=info: a CUDA build without a GPU runs on the CPU. */
  if (n == 0)
    hvd_log(HVD_LOG_INFO, "CUDA: no device (%s); all buffers are host memory",
            e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  else
    hvd_log(HVD_LOG_INFO, "CUDA: %d device(s); device buffers are reduced with %s", n,
#ifdef HVD_WITH_NCCL
            "NCCL"
#else
            "pinned host staging and the CPU ring"
#endif
    );
}

int hvd_device_is_device_ptr(const void *p) {
  pthread_once(&detect_once, detect);
  if (!p || device_count == 0) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void hvd_cuda_set_stream(void *stream) { user_stream = stream; }

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      snprintf(msg, len, "rank %d: %s:%d: %s failed: %s", hvd_g.rank, __FILE__,         \
               __LINE__, #call, cudaGetErrorString(e_));                               \
      return HVD_ERR_BACKEND;                                                          \
    }                                                                                  \
  } while (0)
#define NCCL_OK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t e_ = (call);                                                          \
    if (e_ != ncclSuccess) {                                                           \
      snprintf(msg, len, "rank %d: %s:%d: %s failed: %s", hvd_g.rank, __FILE__,         \
               __LINE__, #call, ncclGetErrorString(e_));                               \
      return HVD_ERR_BACKEND;                                                          \
    }                                                                                  \
  } while (0)

/* Background thread: the device of this rank, stream, event, communicator. */
static hvd_status_t device_init(char *msg, size_t len) {
  if (dev.ready) {
    CUDA_OK(cudaSetDevice(dev.device));
    return HVD_OK;
  }
  pthread_once(&detect_once, detect);
  if (device_count == 0) {
    snprintf(msg, len, "rank %d: a device buffer but no CUDA device", hvd_g.rank);
    return HVD_ERR_BACKEND;
  }
  if (hvd_g.local_rank >= device_count) {
    snprintf(msg, len, "rank %d: local rank %d but this host has %d GPU(s): start at most "
             "one process per GPU", hvd_g.rank, hvd_g.local_rank, device_count);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  dev.device = hvd_g.local_rank;
  CUDA_OK(cudaSetDevice(dev.device));
  CUDA_OK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&dev.compute_done, cudaEventDisableTiming));
#ifdef HVD_WITH_NCCL
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (hvd_g.rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  if (hvd_g.size > 1) {
    coll_status_t cs = coll_broadcast(hvd_g.world, &id, sizeof id, COLL_UINT8, 0);
    if (cs != COLL_OK) {
      snprintf(msg, len, "rank %d: broadcast of the NCCL unique id failed: %s", hvd_g.rank,
               hvd_g.world->error);
      return HVD_ERR_BACKEND;
    }
  }
  NCCL_OK(ncclCommInitRank(&dev.comm, hvd_g.size, id, hvd_g.rank));
#endif
  dev.ready = 1;
  return HVD_OK;
}

/* The collective stream waits for everything queued on the compute stream so far. */
static hvd_status_t after_compute(char *msg, size_t len) {
  CUDA_OK(cudaEventRecord(dev.compute_done, (cudaStream_t)user_stream));
  CUDA_OK(cudaStreamWaitEvent(dev.stream, dev.compute_done, 0));
  return HVD_OK;
}

static hvd_status_t grow(void **buf, size_t *cap, size_t bytes, int pinned, char *msg,
                         size_t len) {
  if (bytes <= *cap) return HVD_OK;
  if (*buf) {
    CUDA_OK(cudaStreamSynchronize(dev.stream));
    if (pinned) CUDA_OK(cudaFreeHost(*buf));
    else CUDA_OK(cudaFree(*buf));
    *buf = NULL;
    *cap = 0;
  }
  if (pinned) CUDA_OK(cudaMallocHost(buf, bytes));
  else CUDA_OK(cudaMalloc(buf, bytes));
  *cap = bytes;
  return HVD_OK;
}

#ifdef HVD_WITH_NCCL
static int nccl_types(hvd_dtype_t d, hvd_op_t op, ncclDataType_t *t, ncclRedOp_t *o) {
  switch (d) {
    case HVD_FLOAT32: *t = ncclFloat32; break;
    case HVD_FLOAT64: *t = ncclFloat64; break;
    case HVD_FLOAT16: *t = ncclFloat16; break;
    case HVD_BFLOAT16: *t = ncclBfloat16; break;
    case HVD_INT8: *t = ncclInt8; break;
    case HVD_UINT8: *t = ncclUint8; break;
    case HVD_INT32: *t = ncclInt32; break;
    case HVD_INT64: *t = ncclInt64; break;
    default: return 0;
  }
  switch (op) {
    case HVD_SUM: *o = ncclSum; break;
    case HVD_AVERAGE: *o = ncclAvg; break;
    case HVD_MIN: *o = ncclMin; break;
    case HVD_MAX: *o = ncclMax; break;
    case HVD_PRODUCT: *o = ncclProd; break;
    default: return 0;
  }
  return 1;
}
#endif

hvd_status_t hvd_device_allreduce(struct hvd_request **reqs, int n,
                                  hvd_host_allreduce_fn host_allreduce, char *msg,
                                  size_t len) {
  hvd_status_t s = device_init(msg, len);
  if (s != HVD_OK) return s;
  if ((s = after_compute(msg, len)) != HVD_OK) return s;
  hvd_dtype_t dtype = reqs[0]->dtype;
  hvd_op_t op = reqs[0]->op;
  size_t es = hvd_dtype_size(dtype), total = 0;
  for (int i = 0; i < n; i++) total += reqs[i]->count;
  /* One tensor is reduced from the user's buffers; several go through the fusion buffer. */
  const void *src = reqs[0]->sendbuf;
  void *dst = reqs[0]->recvbuf;
  if (n > 1) {
    if ((s = grow(&dev.fusion, &dev.fusion_cap, total * es, 0, msg, len)) != HVD_OK)
      return s;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      CUDA_OK(cudaMemcpyAsync((char *)dev.fusion + off, reqs[i]->sendbuf,
                              reqs[i]->count * es, cudaMemcpyDeviceToDevice, dev.stream));
      off += reqs[i]->count * es;
    }
    src = dst = dev.fusion;
  }
#ifdef HVD_WITH_NCCL
  (void)host_allreduce;
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_types(dtype, op, &t, &o)) {
    snprintf(msg, len, "rank %d: dtype/op not supported by NCCL", hvd_g.rank);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (total > 0) NCCL_OK(ncclAllReduce(src, dst, total, t, o, dev.comm, dev.stream));
#else
  if ((s = grow(&dev.staging, &dev.staging_cap, total * es, 1, msg, len)) != HVD_OK) return s;
  CUDA_OK(cudaMemcpyAsync(dev.staging, src, total * es, cudaMemcpyDeviceToHost, dev.stream));
  CUDA_OK(cudaStreamSynchronize(dev.stream));
  if ((s = host_allreduce(dev.staging, total, dtype, op, msg, len)) != HVD_OK) return s;
  CUDA_OK(cudaMemcpyAsync(dst, dev.staging, total * es, cudaMemcpyHostToDevice, dev.stream));
#endif
  if (n > 1) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      CUDA_OK(cudaMemcpyAsync(reqs[i]->recvbuf, (char *)dev.fusion + off,
                              reqs[i]->count * es, cudaMemcpyDeviceToDevice, dev.stream));
      off += reqs[i]->count * es;
    }
  }
  CUDA_OK(cudaStreamSynchronize(dev.stream));
  return HVD_OK;
}

hvd_status_t hvd_device_broadcast(struct hvd_request *r, char *msg, size_t len) {
  hvd_status_t s = device_init(msg, len);
  if (s != HVD_OK) return s;
  if ((s = after_compute(msg, len)) != HVD_OK) return s;
  size_t bytes = r->count * hvd_dtype_size(r->dtype);
  if (bytes == 0) return HVD_OK;
#ifdef HVD_WITH_NCCL
  NCCL_OK(ncclBroadcast(r->recvbuf, r->recvbuf, bytes, ncclUint8, r->root, dev.comm,
                        dev.stream));
#else
  if ((s = grow(&dev.staging, &dev.staging_cap, bytes, 1, msg, len)) != HVD_OK) return s;
  CUDA_OK(cudaMemcpyAsync(dev.staging, r->recvbuf, bytes, cudaMemcpyDeviceToHost, dev.stream));
  CUDA_OK(cudaStreamSynchronize(dev.stream));
  if (coll_broadcast(hvd_g.world, dev.staging, bytes, COLL_UINT8, r->root) != COLL_OK) {
    snprintf(msg, len, "rank %d: broadcast failed: %s", hvd_g.rank, hvd_g.world->error);
    return HVD_ERR_BACKEND;
  }
  CUDA_OK(cudaMemcpyAsync(r->recvbuf, dev.staging, bytes, cudaMemcpyHostToDevice, dev.stream));
#endif
  CUDA_OK(cudaStreamSynchronize(dev.stream));
  return HVD_OK;
}

void hvd_device_shutdown(void) {
  if (!dev.ready) return;
  (void)cudaSetDevice(dev.device);
  (void)cudaStreamSynchronize(dev.stream);
#ifdef HVD_WITH_NCCL
  (void)ncclCommDestroy(dev.comm);
#endif
  if (dev.fusion) (void)cudaFree(dev.fusion);
  if (dev.staging) (void)cudaFreeHost(dev.staging);
  (void)cudaEventDestroy(dev.compute_done);
  (void)cudaStreamDestroy(dev.stream);
  memset(&dev, 0, sizeof dev);
}

#else /* no CUDA in this build: no buffer is device memory */

int hvd_device_is_device_ptr(const void *p) {
  (void)p;
  return 0;
}

void hvd_cuda_set_stream(void *stream) { (void)stream; }

hvd_status_t hvd_device_allreduce(struct hvd_request **reqs, int n,
                                  hvd_host_allreduce_fn host_allreduce, char *msg,
                                  size_t len) {
  (void)reqs;
  (void)n;
  (void)host_allreduce;
  snprintf(msg, len, "device memory in a build without CUDA");
  return HVD_ERR_BACKEND;
}

hvd_status_t hvd_device_broadcast(struct hvd_request *r, char *msg, size_t len) {
  (void)r;
  snprintf(msg, len, "device memory in a build without CUDA");
  return HVD_ERR_BACKEND;
}

void hvd_device_shutdown(void) {}

#endif
