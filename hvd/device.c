/* hvd/device.c: collectives on CUDA device memory.

   Device buffers are recognised with cudaPointerGetAttributes (after a one-time check
   that a device exists at all, so a CUDA build on a machine without a GPU or driver
   never calls CUDA beyond cudaGetDeviceCount). They are reduced by the background
   thread, in the order the coordinator negotiated, like host buffers, on a dedicated
   stream ("hvd's stream"). A group of several tensors is packed into a fusion buffer in
   device memory.

   Event flow of one allreduce (or broadcast), no host round trip on the way:

     user thread, hvd_allreduce_async      compute stream:  backward ... [E_submit]
       records E_submit on the compute
       stream (hvd_cuda_set_stream), after
       the kernels that produced the data
     background thread, at the response   hvd's stream:    wait(E_submit of each
       queues, without waiting:                             tensor) [fp16: cast to
                                                            float16] pack  NCCL  unpack
                                                            [fp16: cast back] [E_done]
       and hands the group with E_done to
       hvd/device_flight.c
     background thread, every turn         cudaEventQuery(E_done) of the oldest groups:
                                           completed -> the requests complete, in order

   So the background thread goes on to the next response while the GPU runs this one,
   and several buckets are queued on hvd's stream at once; the compute stream is never
   synchronised (it only records E_submit), and the float16 casts of compression run on
   hvd's stream. hvd_wait returns once E_done has completed: the result is then final
   for the host and for every stream. A request submitted from a thread whose current
   GPU is not this rank's (or before the backend knew of CUDA) has no E_submit: the
   compute stream's event is then recorded when its response is run (the older rule).
   The only host waits left are inside the schedules that must see the data on the host
   (the hierarchical cross-host step, builds without NCCL) and before a buffer grows.

   With NCCL (HVD_WITH_NCCL):
   - flat (the default): one communicator over the world; AVERAGE is ncclAvg.
   - hierarchical (hvd_g.hierarchical: HVD_HIERARCHICAL_ALLREDUCE=1 and several hosts of
     equal size), Horovod's NCCLHierarchicalAllreduce, with the layout of
     coll_hierarchical_split (collectives/coll.h), the host path's too:

       1. NCCL reduce-scatter over this host's ranks (a second communicator, "local"):
          local rank l holds the host's sum of its shard [l*per, (l+1)*per); the last
          count % L elements are reduced (ncclReduce) to local rank L-1
       2. the shard (L-1: shard + remainder, which are adjacent) is copied to pinned host
          memory on hvd's stream, the stream is waited for, and the host collectives
          allreduce it over hvd_g.cross (the ranks of this local rank on every host);
          AVERAGE is a SUM everywhere, divided here by the world size, once
       3. copied back; NCCL allgather of the shards, broadcast of the remainder from L-1

     So only 1/L of the buffer per rank crosses the network, over the existing
     transport. AVERAGE uses no ncclAvg, so a NCCL older than 2.10 works here too.
   - Each communicator is created at its first use (the first rank's ncclUniqueId
     broadcast over the matching host transport) and destroyed at hvd_shutdown.
   Without NCCL: staged through pinned host memory and the host allreduce.

   Failures: every CUDA and NCCL call is checked, with file and line in the message, and
   fails the request (the runtime then stops on every rank). A first use (device,
   stream, buffers) happens at the same response on every rank and is agreed on (one
   small allreduce), so a rank that fails there leaves no peer inside a collective.
   Events are polled, with ncclCommGetAsyncError, so a peer lost inside a NCCL
   collective ends the wait with an error (the communicator is aborted) instead of
   hanging. Local rank i uses GPU i; more local ranks than GPUs is an error. */
#include "hvd/hvd_internal.h"
#include "hvd/device_events.h"
#include "hvd/device_flight.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#ifdef HVD_WITH_NCCL
#include <nccl.h>
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
#define HVD_NCCL_HAS_AVG 1           /* ncclAvg and ncclBfloat16 (2.10.3) */
/* The nccl.h of older releases (2.11.4, for one) declares ncclBfloat16 only #if
   __CUDA_BF16_TYPES_EXIST__, which cuda_bf16.h defines for C++ alone, so from this C file
   it is undeclared there: it is named by its value (9, the same in every release since
   2.10). A library built without bfloat16 refuses it with ncclInvalidArgument. */
#if defined(__CUDA_BF16_TYPES_EXIST__) || NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define HVD_NCCL_BFLOAT16 ncclBfloat16
_Static_assert((int)ncclBfloat16 == 9, "ncclBfloat16 is 9 in every NCCL release");
#else
#define HVD_NCCL_BFLOAT16 ((ncclDataType_t)9)
#endif
#endif
#endif
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* hvd/device_kernels.cu: the casts of float16 compression, queued on stream. */
cudaError_t hvd_cuk_cast_to_half(void *stream, uint16_t *dst, const float *src, size_t n);
cudaError_t hvd_cuk_cast_from_half(void *stream, float *dst, const uint16_t *src, size_t n,
                                   float div);

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int device_count;
static void *user_stream;           /* cudaStream_t of the compute stream, or NULL */

/* ---- the CUDA calls made before a device is in use ----
   Counting the devices, choosing one, and asking whether a pointer is device memory go
   through this table, so that a test can stand a GPU-less machine in for one with GPUs
   and see which thread makes which call in which order (hvd_device_set_probe). */
static int real_device_count(int *n) {
  cudaError_t e = cudaGetDeviceCount(n);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return (int)e;
}
static int real_set_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return (int)e;
}
static int real_is_device_memory(const void *p, int *yes) {
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return (int)e;
  }
  *yes = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  return 0;
}
static const char *real_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }
static hvd_cuda_probe_t probe = {real_device_count, real_set_device, real_is_device_memory,
                                 real_error_string};

/* Before the first hvd_init of the process: the device count is read once. */
void hvd_device_set_probe(const hvd_cuda_probe_t *p) {
  hvd_cuda_probe_t real = {real_device_count, real_set_device, real_is_device_memory,
                           real_error_string};
  probe = p ? *p : real;
}

static struct {
  int ready;
  int device;
  int failed;                       /* a CUDA/NCCL call failed: later device collectives
                                       are refused, communicators aborted at shutdown */
  cudaStream_t stream;
  cudaEvent_t compute_done;         /* recorded on the compute stream when a request
                                       brought no submission event */
  cudaEvent_t stream_done;          /* recorded on hvd's stream, polled (wait_stream) */
  hvd_flight_t flight;              /* groups queued on hvd's stream, not yet complete */
  void *fusion;                     /* device fusion buffer */
  size_t fusion_cap;
  void *staging;                    /* pinned host buffer: cross-host shard, or no NCCL */
  size_t staging_cap;
#ifdef HVD_WITH_NCCL
  ncclComm_t world;                 /* all ranks (flat allreduce, broadcast)  */
  ncclComm_t local;                 /* this host's ranks (hierarchical)       */
#endif
} dev;

static int detect_error;
static atomic_int announced;

static void detect(void) {
  int n = 0;
  int e = probe.device_count(&n);
  if (e != 0) n = 0;
  device_count = n;
  detect_error = e;
}

/* Said once, at HVD_LOG_LEVEL=info, and only once hvd_init has read the log level
   (hvd_grad_buckets_create may ask before): a CUDA build without a GPU runs on the CPU. */
static void announce(void) {
  if (!hvd_initialized() || atomic_exchange(&announced, 1)) return;
  int n = device_count;
  if (n == 0)
    hvd_log(HVD_LOG_INFO, "CUDA: no device (%s); all buffers are host memory",
            detect_error == 0 ? "none found" : probe.error_string(detect_error));
  else
    hvd_log(HVD_LOG_INFO, "CUDA: %d device(s); device buffers are reduced with %s", n,
#ifdef HVD_WITH_NCCL
            "NCCL"
#else
            "pinned host staging and the CPU ring"
#endif
    );
}

/* The GPU of this rank: local rank i drives GPU i; where the process sees one GPU only
   (CUDA_VISIBLE_DEVICES set per rank, as SLURM's --gpus-per-task does), that one; -1
   when it has none of its own (more local ranks than GPUs). */
static int rank_device(void) {
  if (device_count <= 0) return -1;
  if (hvd_g.local_rank < device_count) return hvd_g.local_rank;
  return device_count == 1 ? 0 : -1;
}

/* The background thread's device. A thread's first CUDA call creates a context on its
   current device, GPU 0 by default: were the background thread to ask about a pointer
   before choosing, every rank of an 8-GPU node would hold a context on GPU 0 (about
   0.5 GB each, and a failure in exclusive-process mode). So the thread chooses its
   rank's GPU (rank_device, as device_init) before any other CUDA call, and a rank with
   no GPU of its own makes no CUDA call on it at all: it takes every buffer for host
   memory (such a rank must pass host buffers; hvd_init says so at HVD_LOG_LEVEL=info). */
static _Thread_local int on_hvd_thread;     /* this is hvd's background thread        */
static _Thread_local int thread_device = -1; /* and the GPU it chose, or -1            */
static atomic_int selected_device = -1;      /* the same, for other threads to read     */

void hvd_device_thread_start(void) {
  on_hvd_thread = 1;
  thread_device = -1;
  atomic_store(&selected_device, -1);
  pthread_once(&detect_once, detect);
  if (device_count == 0) return;
  const int device = rank_device();
  if (device < 0) {
    hvd_log(HVD_LOG_INFO, "CUDA: local rank %d has no GPU of its own (%d visible): hvd "
            "takes its buffers for host memory", hvd_g.local_rank, device_count);
    return;
  }
  int e = probe.set_device(device);
  if (e != 0) {
    hvd_log(HVD_LOG_WARNING, "CUDA: the background thread could not select GPU %d (%s): "
            "hvd takes its buffers for host memory", device, probe.error_string(e));
    return;
  }
  thread_device = device;
  atomic_store(&selected_device, thread_device);
  hvd_log(HVD_LOG_DEBUG, "CUDA: background thread on GPU %d", thread_device);
}

int hvd_device_thread_device(void) { return atomic_load(&selected_device); }

/* The background thread chose no GPU: it takes every buffer for host memory. */
int hvd_device_host_only(void) { return atomic_load(&selected_device) < 0; }

int hvd_device_is_device_ptr(const void *p) {
  pthread_once(&detect_once, detect);
  if (!atomic_load(&announced)) announce();
  if (!p || device_count == 0) return 0;
  if (on_hvd_thread && thread_device < 0) return 0;   /* see hvd_device_thread_start */
  int yes = 0;
  return probe.is_device_memory(p, &yes) == 0 && yes;
}

void hvd_cuda_set_stream(void *stream) { user_stream = stream; }
void *hvd_device_compute_stream(void) { return user_stream; }

/* Pooled events (hvd/device_events.c), as cudaEvent_t. */
static cudaError_t event_take(cudaEvent_t *ev) {
  void *p = NULL;
  cudaError_t e = (cudaError_t)hvd_device_event_take(&p);
  *ev = (cudaEvent_t)p;
  return e;
}
static void event_give(cudaEvent_t ev) { hvd_device_event_give(ev); }

/* The submitting thread records E_submit (see the top of the file) when r is an
   allreduce or broadcast of device memory and this thread's current GPU is the rank's:
   the compute stream (hvd_cuda_set_stream) is a stream of the current GPU, and a thread
   on another GPU (or on none yet: cudaGetDevice makes no context) must not create a
   context on this one. Anything else, or a failed call, leaves r without one: its
   response then records the compute stream's event when it runs. */
void hvd_device_submit(struct hvd_request *r) {
  if ((r->kind != HVD_KIND_ALLREDUCE && r->kind != HVD_KIND_BROADCAST) || r->count == 0 ||
      r->nmembers > 0)
    return;
  pthread_once(&detect_once, detect);
  const int device = atomic_load(&selected_device);
  int current = -1;
  if (device_count == 0 || device < 0) return;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (current != device ||
      (!hvd_device_is_device_ptr(r->recvbuf) && !hvd_device_is_device_ptr(r->sendbuf)))
    return;
  cudaEvent_t ev;
  if (event_take(&ev) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  cudaError_t e = cudaEventRecord(ev, (cudaStream_t)user_stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    event_give(ev);
    hvd_log(HVD_LOG_DEBUG, "CUDA: recording a submission event failed (%s); the compute "
            "stream's event is recorded when the response runs", cudaGetErrorString(e));
    return;
  }
  r->ready_event = ev;
}

static hvd_status_t cuda_fail(cudaError_t e, const char *call, const char *file, int line,
                              char *msg, size_t len) {
  (void)cudaGetLastError();   /* clears a non-sticky error */
  dev.failed = 1;
  snprintf(msg, len, "rank %d: %s:%d: %s failed: %s", hvd_g.rank, file, line, call,
           cudaGetErrorString(e));
  return HVD_ERR_BACKEND;
}
#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__, msg, len);  \
  } while (0)

#ifdef HVD_WITH_NCCL
static hvd_status_t nccl_fail(ncclResult_t e, const char *call, const char *file, int line,
                              char *msg, size_t len) {
  dev.failed = 1;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char *detail = ncclGetLastError(NULL);
#else
  const char *detail = "";
#endif
  snprintf(msg, len, "rank %d: %s:%d: %s failed: %s%s%s", hvd_g.rank, file, line, call,
           ncclGetErrorString(e), detail && detail[0] ? ": " : "", detail ? detail : "");
  return HVD_ERR_BACKEND;
}
#define NCCL_OK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t e_ = (call);                                                          \
    if (e_ != ncclSuccess) return nccl_fail(e_, #call, __FILE__, __LINE__, msg, len);  \
  } while (0)
#endif

/* The setup of a first use (device, stream, a larger buffer) happens at the same response
   on every rank, because every rank runs the same responses with the same sizes. A rank
   whose setup failed must not leave the others inside a collective it never joins, so
   the outcome is agreed over t (the highest failing rank). Returns s, or an error naming
   the failed rank. */
static hvd_status_t agree(coll_transport_t *t, hvd_status_t s, const char *what, char *msg,
                          size_t len) {
  if (t == NULL || t->size <= 1) return s;
  int32_t failed = s != HVD_OK ? t->rank : -1;
  coll_status_t cs = coll_allreduce(t, &failed, &failed, 1, COLL_INT32, COLL_MAX);
  if (cs != COLL_OK) {
    snprintf(msg, len, "rank %d: agreeing on the setup of %s failed: %s", hvd_g.rank, what,
             t->error);
    return hvd_status_from_coll(cs);
  }
  if (s == HVD_OK && failed >= 0) {
    snprintf(msg, len, "rank %d: the setup of %s failed on another rank (rank %d of that "
             "group; its error says why)", hvd_g.rank, what, (int)failed);
    return HVD_ERR_BACKEND;
  }
  return s;
}

static int flight_query(void *ctx, void *event, char *msg, size_t len);
static hvd_status_t flight_check(void *ctx, double waited_us, char *msg, size_t len);
static void flight_recycle(void *ctx, void *event);

/* This rank's device, stream and events (no collective). *setup = 1 on the first call. */
static hvd_status_t device_init(int *setup, char *msg, size_t len) {
  if (dev.ready) {
    CUDA_OK(cudaSetDevice(dev.device));
    return HVD_OK;
  }
  *setup = 1;
  pthread_once(&detect_once, detect);
  if (device_count == 0) {
    snprintf(msg, len, "rank %d: a device buffer but no CUDA device", hvd_g.rank);
    return HVD_ERR_BACKEND;
  }
  if (rank_device() < 0) {
    snprintf(msg, len, "rank %d: local rank %d but this host has %d GPU(s): start at most "
             "one process per GPU", hvd_g.rank, hvd_g.local_rank, device_count);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  dev.device = rank_device();
  CUDA_OK(cudaSetDevice(dev.device));
  CUDA_OK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&dev.compute_done, cudaEventDisableTiming));
  CUDA_OK(cudaEventCreateWithFlags(&dev.stream_done, cudaEventDisableTiming));
  const hvd_flight_ops_t ops = {flight_query, flight_check, flight_recycle, NULL};
  hvd_flight_init(&dev.flight, &ops);
  dev.ready = 1;
  return HVD_OK;
}

/* Grows a device (pinned = 0) or pinned host buffer to at least bytes. hvd's stream is
   idle here: every collective waits for it before returning. */
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
/* Creates *comm over the ranks of transport t (rank 0 of t makes the unique id). A
   collective over t: every rank of t calls it at the same response. */
static hvd_status_t comm_create(ncclComm_t *comm, coll_transport_t *t, const char *what,
                                char *msg, size_t len) {
  struct {
    int32_t ok;
    ncclUniqueId id;
  } m;
  memset(&m, 0, sizeof m);
  ncclResult_t r = ncclSuccess;
  if (t->rank == 0) {
    r = ncclGetUniqueId(&m.id);
    m.ok = r == ncclSuccess;
  }
  if (t->size > 1) {
    coll_status_t cs = coll_broadcast(t, &m, sizeof m, COLL_UINT8, 0);
    if (cs != COLL_OK) {
      snprintf(msg, len, "rank %d: broadcast of the NCCL unique id of the %s communicator "
               "failed: %s", hvd_g.rank, what, t->error);
      return hvd_status_from_coll(cs);
    }
  }
  if (!m.ok) {
    if (t->rank == 0) return nccl_fail(r, "ncclGetUniqueId(&m.id)", __FILE__, __LINE__, msg, len);
    dev.failed = 1;
    snprintf(msg, len, "rank %d: the first rank of the %s NCCL communicator could not make "
             "its unique id (its error says why)", hvd_g.rank, what);
    return HVD_ERR_BACKEND;
  }
  hvd_status_t s = HVD_OK;
  ncclResult_t ir = ncclCommInitRank(comm, t->size, m.id, t->rank);
  if (ir != ncclSuccess) {
    *comm = NULL;
    s = nccl_fail(ir, "ncclCommInitRank(comm, t->size, m.id, t->rank)", __FILE__, __LINE__,
                  msg, len);
  }
  s = agree(t, s, what, msg, len);
  if (s != HVD_OK && *comm) {
    dev.failed = 1;
    (void)ncclCommAbort(*comm);
    *comm = NULL;
  }
  if (s == HVD_OK)
    hvd_log(HVD_LOG_DEBUG, "NCCL %s communicator: rank %d of %d on GPU %d", what, t->rank,
            t->size, dev.device);
  return s;
}

/* An asynchronous error of *comm (a peer lost inside a collective, a network failure)
   aborts it, so what is queued on it ends, and fails the wait. */
static hvd_status_t check_async(ncclComm_t *comm, const char *what, char *msg, size_t len) {
  if (*comm == NULL) return HVD_OK;
  ncclResult_t r = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(*comm, &r);
  if (q != ncclSuccess) r = q;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (r == ncclInProgress) return HVD_OK;
#endif
  if (r == ncclSuccess) return HVD_OK;
  nccl_fail(r, what, __FILE__, __LINE__, msg, len);
  size_t used = strlen(msg);
  snprintf(msg + used, len - used, " (asynchronous error during a collective; the "
           "communicator was aborted)");
  (void)ncclCommAbort(*comm);
  *comm = NULL;
  return HVD_ERR_BACKEND;
}
#endif

/* Whether what is queued on hvd's stream may still complete, after waited_us of
   waiting: an asynchronous NCCL error (a peer lost inside a collective, a network
   failure) aborts its communicator. NCCL does not always raise one when a peer on the
   same host dies or hangs: HVD_STALL_SHUTDOWN_TIME_SECONDS, when set, also bounds the
   wait, and the runtime's cancel flag ends it. Either marks the device failed, so the
   communicators are aborted, not destroyed, at shutdown. */
static hvd_status_t health(double waited_us, char *msg, size_t len) {
#ifdef HVD_WITH_NCCL
  hvd_status_t s = check_async(&dev.world, "NCCL world communicator", msg, len);
  if (s == HVD_OK) s = check_async(&dev.local, "NCCL local communicator", msg, len);
  if (s != HVD_OK) return s;
#endif
  if (hvd_g.cancel) {
    dev.failed = 1;
    snprintf(msg, len, "rank %d: the runtime was stopped while a device collective was "
             "running", hvd_g.rank);
    return HVD_ERR_BACKEND;
  }
  if (hvd_g.cfg.stall_shutdown_s > 0 && waited_us > hvd_g.cfg.stall_shutdown_s * 1e6) {
    dev.failed = 1;
    snprintf(msg, len, "rank %d: a device collective did not finish within "
             "HVD_STALL_SHUTDOWN_TIME_SECONDS=%g s (a peer may have died or hung); the "
             "NCCL communicators will be aborted", hvd_g.rank, hvd_g.cfg.stall_shutdown_s);
    return HVD_ERR_TIMEOUT;
  }
  return HVD_OK;
}

/* hvd/device_flight.c's view of the events (hvd_flight_ops_t). */
static int flight_query(void *ctx, void *event, char *msg, size_t len) {
  (void)ctx;
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaSuccess) return 0;
  if (e == cudaErrorNotReady) return 1;
  (void)cuda_fail(e, "cudaEventQuery(E_done)", __FILE__, __LINE__, msg, len);
  return -1;
}
static hvd_status_t flight_check(void *ctx, double waited_us, char *msg, size_t len) {
  (void)ctx;
  return health(waited_us, msg, len);
}
static void flight_recycle(void *ctx, void *event) {
  (void)ctx;
  event_give((cudaEvent_t)event);
}

/* Waits on the host until everything queued on hvd's stream so far has run, where a
   schedule needs the data on the host. Polls (yielding, then sleeping 50 us) rather
   than cudaStreamSynchronize, so that a NCCL asynchronous error ends the wait instead of
   hanging it (NCCL's recommended pattern). */
static hvd_status_t wait_stream(char *msg, size_t len) {
  CUDA_OK(cudaEventRecord(dev.stream_done, dev.stream));
  const double start_us = util_now_us();
  for (long polls = 0;; polls++) {
    cudaError_t e = cudaEventQuery(dev.stream_done);
    if (e == cudaSuccess) return HVD_OK;
    if (e != cudaErrorNotReady)
      return cuda_fail(e, "cudaEventQuery(dev.stream_done)", __FILE__, __LINE__, msg, len);
    hvd_status_t s = health(util_now_us() - start_us, msg, len);
    if (s != HVD_OK) return s;
    if (polls < 2000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* Hands the group reqs[0..n), whose work is queued on hvd's stream, to the flight with
   a completion event recorded after it; the background thread completes it when the
   event has (hvd_device_poll). A group of a joined rank's stand-ins, or one that cannot
   be handed over, is waited for here instead. */
static hvd_status_t finish_async(struct hvd_request **reqs, int n, const char *activity,
                                 char *msg, size_t len) {
  int phantom = 0;
  for (int i = 0; i < n; i++) phantom |= reqs[i]->phantom;
  cudaEvent_t done;
  if (phantom || event_take(&done) != cudaSuccess) {
    (void)cudaGetLastError();
    return wait_stream(msg, len);
  }
  cudaError_t e = cudaEventRecord(done, dev.stream);
  if (e != cudaSuccess) {
    event_give(done);
    return cuda_fail(e, "cudaEventRecord(E_done, dev.stream)", __FILE__, __LINE__, msg, len);
  }
  if (hvd_flight_push(&dev.flight, reqs, n, done, activity, msg, len) != HVD_OK) {
    event_give(done);
    return wait_stream(msg, len);
  }
  /* For a caller in hvd_wait_stream: its stream may wait for E_done from now on. */
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < n; i++) reqs[i]->done_event = done;
  pthread_cond_broadcast(&hvd_g.done_cv);
  pthread_mutex_unlock(&hvd_g.mu);
  return HVD_OK;
}

int hvd_device_stream_wait(void *stream, void *event) {
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return (int)e;
}

/* Device collectives queued on hvd's stream and not yet complete (background thread). */
size_t hvd_device_pending(void) { return dev.ready ? hvd_flight_pending(&dev.flight) : 0; }

hvd_status_t hvd_device_poll(int *completed, char *msg, size_t len) {
  *completed = 0;
  if (!dev.ready || hvd_flight_pending(&dev.flight) == 0) return HVD_OK;
  hvd_status_t s = hvd_flight_poll(&dev.flight, completed, msg, len);
  if (s != HVD_OK) dev.failed = 1;
  return s;
}

/* Buffers are grown only with nothing in flight: the queued work may still use them. */
static hvd_status_t drain(char *msg, size_t len) {
  hvd_status_t s = hvd_flight_drain(&dev.flight, msg, len);
  if (s != HVD_OK) dev.failed = 1;
  return s;
}

/* hvd's stream waits for the data of reqs[0..n): the E_submit of each (consumed here),
   or, for one that brought none, everything queued on the compute stream so far. */
static hvd_status_t wait_submissions(struct hvd_request **reqs, int n, char *msg,
                                     size_t len) {
  int missing = 0;
  for (int i = 0; i < n; i++) {
    cudaEvent_t ev = (cudaEvent_t)reqs[i]->ready_event;
    if (ev == NULL) {
      missing = 1;
      continue;
    }
    reqs[i]->ready_event = NULL;
    cudaError_t e = cudaStreamWaitEvent(dev.stream, ev, 0);
    event_give(ev);
    if (e != cudaSuccess)
      return cuda_fail(e, "cudaStreamWaitEvent(dev.stream, E_submit, 0)", __FILE__,
                       __LINE__, msg, len);
  }
  if (missing) {
    CUDA_OK(cudaEventRecord(dev.compute_done, (cudaStream_t)user_stream));
    CUDA_OK(cudaStreamWaitEvent(dev.stream, dev.compute_done, 0));
  }
  return HVD_OK;
}

static hvd_status_t refuse_after_failure(char *msg, size_t len) {
  snprintf(msg, len, "rank %d: an earlier CUDA or NCCL failure on this rank left its "
           "device collectives unusable (the NCCL communicators were aborted)", hvd_g.rank);
  return HVD_ERR_BACKEND;
}

#ifdef HVD_WITH_NCCL
/* NCCL's type and op. sum_for_average: AVERAGE as ncclSum (the caller divides). */
static int nccl_types(hvd_dtype_t d, hvd_op_t op, int sum_for_average, ncclDataType_t *t,
                      ncclRedOp_t *o) {
  switch (d) {
    case HVD_FLOAT32: *t = ncclFloat32; break;
    case HVD_FLOAT64: *t = ncclFloat64; break;
    case HVD_FLOAT16: *t = ncclFloat16; break;
#ifdef HVD_NCCL_HAS_AVG
    case HVD_BFLOAT16: *t = HVD_NCCL_BFLOAT16; break;
#endif
    case HVD_INT8: *t = ncclInt8; break;
    case HVD_UINT8: *t = ncclUint8; break;
    case HVD_INT32: *t = ncclInt32; break;
    case HVD_INT64: *t = ncclInt64; break;
    default: return 0;
  }
  switch (op) {
    case HVD_SUM: *o = ncclSum; break;
    case HVD_AVERAGE:
      if (sum_for_average) {
        *o = ncclSum;
        break;
      }
#ifdef HVD_NCCL_HAS_AVG
      *o = ncclAvg;
      break;
#else
      return 0;
#endif
    case HVD_MIN: *o = ncclMin; break;
    case HVD_MAX: *o = ncclMax; break;
    case HVD_PRODUCT: *o = ncclProd; break;
    default: return 0;
  }
  return 1;
}

/* Steps 1-3 of the hierarchical schedule (see the top of the file) of count elements
   from src into dst (device memory, may be the same), queued on hvd's stream; o is
   ncclSum for AVERAGE. The caller waits for the stream afterwards. */
static hvd_status_t hierarchical_allreduce(const void *src, void *dst, size_t count,
                                           hvd_dtype_t dtype, hvd_op_t op,
                                           ncclDataType_t t, ncclRedOp_t o, char *msg,
                                           size_t len) {
  coll_hierarchical_split_t p;
  if (!coll_hierarchical_split(count, hvd_g.local_size, hvd_g.local_rank, &p)) {
    snprintf(msg, len, "rank %d: local rank %d of %d is not a valid shard layout",
             hvd_g.rank, hvd_g.local_rank, hvd_g.local_size);
    return HVD_ERR_BACKEND;
  }
  size_t es = hvd_dtype_size(dtype);
  const char *s8 = src;
  char *d8 = dst;
  char *shard = d8 + p.offset * es;             /* this rank's cross range starts here */
  char *rem = d8 + p.remainder_offset * es;
  if (p.per_rank > 0)
    NCCL_OK(ncclReduceScatter(s8, shard, p.per_rank, t, o, dev.local, dev.stream));
  if (p.remainder > 0)
    NCCL_OK(ncclReduce(s8 + p.remainder_offset * es, rem, p.remainder, t, o,
                       p.remainder_root, dev.local, dev.stream));
  /* A failed cross step still runs the intra-host steps below, so that no local peer is
     left waiting inside them for this rank; the request then fails here. */
  hvd_status_t cross = HVD_OK;
  if (p.cross_count > 0) {
    size_t bytes = p.cross_count * es;   /* <= staging_cap: sized for (per + rem) */
    CUDA_OK(cudaMemcpyAsync(dev.staging, shard, bytes, cudaMemcpyDeviceToHost, dev.stream));
    hvd_status_t s = wait_stream(msg, len);
    if (s != HVD_OK) return s;
    coll_status_t cs = coll_allreduce(hvd_g.cross, dev.staging, dev.staging, p.cross_count,
                                      (coll_dtype_t)dtype, hvd_coll_op(op));
    if (cs == COLL_OK) {
      if (op == HVD_AVERAGE)
        coll_divide(dev.staging, p.cross_count, (coll_dtype_t)dtype, hvd_g.size);
      CUDA_OK(cudaMemcpyAsync(shard, dev.staging, bytes, cudaMemcpyHostToDevice, dev.stream));
    } else {
      cross = hvd_status_from_coll(cs);
      dev.failed = 1;   /* a peer may be gone: abort the communicators at shutdown */
      snprintf(msg, len, "rank %d: cross-host allreduce of a %zu-byte shard failed: %s",
               hvd_g.rank, bytes, hvd_g.cross->error);
    }
  }
  if (p.per_rank > 0)
    NCCL_OK(ncclAllGather(shard, d8, p.per_rank, t, dev.local, dev.stream));
  if (p.remainder > 0)
    NCCL_OK(ncclBroadcast(rem, rem, p.remainder, t, p.remainder_root, dev.local,
                          dev.stream));
  return cross;
}
#endif

static hvd_status_t device_allreduce(struct hvd_request **reqs, int n, char *msg,
                                     size_t len) {
  if (dev.failed) return refuse_after_failure(msg, len);
  hvd_dtype_t dtype = reqs[0]->dtype;
  hvd_op_t op = reqs[0]->op;
  size_t es = hvd_dtype_size(dtype), total = 0;
  for (int i = 0; i < n; i++) total += reqs[i]->count;
#ifdef HVD_WITH_NCCL
  int hier = hvd_g.hierarchical;
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_types(dtype, op, hier, &t, &o)) {
    snprintf(msg, len, "rank %d: %s %s of device memory is not supported by this NCCL "
             "(%d; ncclAvg and ncclBfloat16 need 2.10)", hvd_g.rank, hvd_dtype_name(dtype),
             hvd_op_name(op), NCCL_VERSION_CODE);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  /* Pinned staging for the cross-host range: the largest any local rank has (the last
     one's: shard + remainder), so that every rank grows it at the same response. */
  size_t staging_bytes = 0;
  if (hier) {
    coll_hierarchical_split_t p;
    if (coll_hierarchical_split(total, hvd_g.local_size, hvd_g.local_size - 1, &p))
      staging_bytes = p.cross_count * es;
  }
#else
  size_t staging_bytes = total * es;
#endif

  /* Setup of this rank, agreed on when it happened (same response on every rank). */
  int setup = 0;
  hvd_status_t s = device_init(&setup, msg, len);
  int grows = (n > 1 && total * es > dev.fusion_cap) || staging_bytes > dev.staging_cap;
  if (s == HVD_OK && grows && (s = drain(msg, len)) != HVD_OK) return s;
  if (s == HVD_OK && n > 1 && total * es > dev.fusion_cap) {
    setup = 1;
    s = grow(&dev.fusion, &dev.fusion_cap, total * es, 0, msg, len);
  }
  if (s == HVD_OK && staging_bytes > dev.staging_cap) {
    setup = 1;
    s = grow(&dev.staging, &dev.staging_cap, staging_bytes, 1, msg, len);
  }
  if (setup) s = agree(hvd_g.world, s, "device buffers", msg, len);
  if (s != HVD_OK) return s;
#ifdef HVD_WITH_NCCL
  if (hier && dev.local == NULL)
    s = comm_create(&dev.local, hvd_g.local, "local", msg, len);
  else if (!hier && dev.world == NULL)
    s = comm_create(&dev.world, hvd_g.world, "world", msg, len);
  if (s != HVD_OK) return s;
#endif
  if ((s = wait_submissions(reqs, n, msg, len)) != HVD_OK) return s;
  /* float16 compression: the float32 gradients become the float16 send data here, on
     hvd's stream (in place: sendbuf is recvbuf, hvd_allreduce_async_fp16). */
  for (int i = 0; i < n; i++)
    if (reqs[i]->half_src != NULL)
      CUDA_OK(hvd_cuk_cast_to_half(dev.stream, (uint16_t *)reqs[i]->recvbuf,
                                   reqs[i]->half_src, reqs[i]->count));

  /* One tensor is reduced from the user's buffers; several go through the fusion buffer. */
  const void *src = reqs[0]->sendbuf;
  void *dst = reqs[0]->recvbuf;
  if (n > 1) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      CUDA_OK(cudaMemcpyAsync((char *)dev.fusion + off, reqs[i]->sendbuf,
                              reqs[i]->count * es, cudaMemcpyDeviceToDevice, dev.stream));
      off += reqs[i]->count * es;
    }
    src = dst = dev.fusion;
  }
  hvd_status_t result = HVD_OK;
#ifdef HVD_WITH_NCCL
  if (total > 0) {
    if (hier)
      result = hierarchical_allreduce(src, dst, total, dtype, op, t, o, msg, len);
    else
      NCCL_OK(ncclAllReduce(src, dst, total, t, o, dev.world, dev.stream));
  }
#else
  CUDA_OK(cudaMemcpyAsync(dev.staging, src, total * es, cudaMemcpyDeviceToHost, dev.stream));
  if ((s = wait_stream(msg, len)) != HVD_OK) return s;
  if ((s = hvd_host_allreduce(dev.staging, total, dtype, op, msg, len)) != HVD_OK) return s;
  CUDA_OK(cudaMemcpyAsync(dst, dev.staging, total * es, cudaMemcpyHostToDevice, dev.stream));
#endif
  if (n > 1 && result == HVD_OK) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      CUDA_OK(cudaMemcpyAsync(reqs[i]->recvbuf, (char *)dev.fusion + off,
                              reqs[i]->count * es, cudaMemcpyDeviceToDevice, dev.stream));
      off += reqs[i]->count * es;
    }
  }
  if (result == HVD_OK) {
    for (int i = 0; i < n; i++)
      if (reqs[i]->half_dst != NULL)
        CUDA_OK(hvd_cuk_cast_from_half(dev.stream, reqs[i]->half_dst,
                                       (const uint16_t *)reqs[i]->recvbuf, reqs[i]->count,
                                       reqs[i]->half_div));
    return finish_async(reqs, n, hvd_g.hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE"
                                                    : "NCCL_ALLREDUCE", msg, len);
  }
  /* msg already holds result's message: a failed wait overwrites it, which is the more
     fundamental error. */
  char wait_msg[HVD_ERROR_MAX];
  if ((s = wait_stream(wait_msg, sizeof wait_msg)) != HVD_OK) {
    snprintf(msg, len, "%s", wait_msg);
    return s;
  }
  return result;
}

static hvd_status_t device_broadcast_run(struct hvd_request *r, char *msg, size_t len) {
  if (dev.failed) return refuse_after_failure(msg, len);
  size_t bytes = r->count * hvd_dtype_size(r->dtype);
  int setup = 0;
  hvd_status_t s = device_init(&setup, msg, len);
#ifndef HVD_WITH_NCCL
  if (s == HVD_OK && bytes > dev.staging_cap && (s = drain(msg, len)) != HVD_OK) return s;
  if (s == HVD_OK && bytes > dev.staging_cap) {
    setup = 1;
    s = grow(&dev.staging, &dev.staging_cap, bytes, 1, msg, len);
  }
#endif
  if (setup) s = agree(hvd_g.world, s, "device buffers", msg, len);
  if (s != HVD_OK) return s;
#ifdef HVD_WITH_NCCL
  if (dev.world == NULL && (s = comm_create(&dev.world, hvd_g.world, "world", msg, len)) != HVD_OK)
    return s;
#endif
  if ((s = wait_submissions(&r, 1, msg, len)) != HVD_OK) return s;
  if (bytes == 0) return HVD_OK;
#ifdef HVD_WITH_NCCL
  NCCL_OK(ncclBroadcast(r->recvbuf, r->recvbuf, bytes, ncclUint8, r->root, dev.world,
                        dev.stream));
#else
  CUDA_OK(cudaMemcpyAsync(dev.staging, r->recvbuf, bytes, cudaMemcpyDeviceToHost, dev.stream));
  if ((s = wait_stream(msg, len)) != HVD_OK) return s;
  if (coll_broadcast(hvd_g.world, dev.staging, bytes, COLL_UINT8, r->root) != COLL_OK) {
    snprintf(msg, len, "rank %d: broadcast failed: %s", hvd_g.rank, hvd_g.world->error);
    return HVD_ERR_BACKEND;
  }
  CUDA_OK(cudaMemcpyAsync(r->recvbuf, dev.staging, bytes, cudaMemcpyHostToDevice, dev.stream));
#endif
  return finish_async(&r, 1, "NCCL_BROADCAST", msg, len);
}

static hvd_status_t device_allreduce_op(struct hvd_request **reqs,
                                        const hvd_response_t *resp, int n, char *msg,
                                        size_t len) {
  (void)resp;
  double t0 = util_now_us();
  hvd_status_t s = device_allreduce(reqs, n, msg, len);
  double t1 = util_now_us();
  for (int i = 0; i < n; i++)   /* a deferred one: hvd/device_flight.c at completion */
    if (!reqs[i]->deferred)
      hvd_timeline_op(reqs[i]->key,
                    hvd_g.hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE",
                    t0, t1, reqs[i]->count * hvd_dtype_size(reqs[i]->dtype));
  return s;
}

static hvd_status_t device_broadcast(struct hvd_request *r, const hvd_response_t *resp,
                                     char *msg, size_t len) {
  (void)resp;
  double t0 = util_now_us();
  hvd_status_t s = device_broadcast_run(r, msg, len);
  if (!r->deferred)
    hvd_timeline_op(r->key, "NCCL_BROADCAST", t0, util_now_us(),
                    r->count * hvd_dtype_size(r->dtype));
  return s;
}

/* Allgather and barrier have no device form: they are refused (the same on every rank,
   as the memory kind is agreed) before any data moves. The shared libhvd's stand-in for
   this table (hvd/device_loader.c) forwards the same operations: change both. */
const hvd_backend_ops_t hvd_device_ops = {
  .name = "device memory",
  .allreduce = device_allreduce_op,
  .broadcast = device_broadcast,
};

int hvd_device_of_buffers(const void *sendbuf, const void *recvbuf) {
  if (!hvd_device_is_device_ptr(recvbuf) && !hvd_device_is_device_ptr(sendbuf)) return -1;
  int d = hvd_device_thread_device();
  return d >= 0 ? d : 0;
}

/* On the background thread as it ends (its device is current), while the host
   transports are still up. After a failure, queued NCCL work may wait for a peer that
   never comes: the communicators are aborted (which does not wait) before the stream is
   waited for; otherwise the stream is idle and they are destroyed. */
void hvd_device_shutdown(void) {
  if (dev.ready) {
#ifdef HVD_WITH_NCCL
    if (dev.failed) {
      if (dev.local) (void)ncclCommAbort(dev.local);
      if (dev.world) (void)ncclCommAbort(dev.world);
    }
#endif
    (void)cudaStreamSynchronize(dev.stream);
    /* What is still in flight failed with the runtime (its waiters were told so). */
    hvd_flight_fail_all(&dev.flight, HVD_ERR_SHUTDOWN, "the hvd runtime was shut down "
                        "while a device collective was in flight");
    hvd_flight_free(&dev.flight);
#ifdef HVD_WITH_NCCL
    if (!dev.failed) {
      if (dev.local) (void)ncclCommDestroy(dev.local);
      if (dev.world) (void)ncclCommDestroy(dev.world);
    }
#endif
    if (dev.fusion) (void)cudaFree(dev.fusion);
    if (dev.staging) (void)cudaFreeHost(dev.staging);
    (void)cudaEventDestroy(dev.stream_done);
    (void)cudaEventDestroy(dev.compute_done);
    (void)cudaStreamDestroy(dev.stream);
    hvd_device_events_destroy();
  }
  memset(&dev, 0, sizeof dev);   /* also forgets a failure: the next hvd_init starts clean */
}

#else /* no CUDA in this build: no buffer is device memory */

/* Before the first hvd_init of the process: the device count is read once. */
void hvd_device_set_probe(const hvd_cuda_probe_t *p) { (void)p; }
void hvd_device_thread_start(void) {}
int hvd_device_thread_device(void) { return -1; }
int hvd_device_host_only(void) { return 1; }

int hvd_device_is_device_ptr(const void *p) {
  (void)p;
  return 0;
}

void hvd_cuda_set_stream(void *stream) { (void)stream; }
void *hvd_device_compute_stream(void) { return NULL; }
void hvd_device_submit(struct hvd_request *r) { (void)r; }
int hvd_device_stream_wait(void *stream, void *event) {
  (void)stream;
  (void)event;
  return -1;
}
size_t hvd_device_pending(void) { return 0; }
hvd_status_t hvd_device_poll(int *completed, char *msg, size_t len) {
  (void)msg;
  (void)len;
  *completed = 0;
  return HVD_OK;
}

/* Never used: no buffer is device memory here. */
const hvd_backend_ops_t hvd_device_ops = {.name = "device memory (not in this build)"};

int hvd_device_of_buffers(const void *sendbuf, const void *recvbuf) {
  (void)sendbuf;
  (void)recvbuf;
  return -1;
}

void hvd_device_shutdown(void) {}

#endif
