/* hvd/hvd_internal.h: state and helpers shared by the files of the hvd runtime.
   Not part of the public interface (hvd.h).

   Threads: user threads only validate, enqueue (hvd_g.queue) and wait on hvd_g.done_cv;
   the background loop does ALL MPI communication: it sends this rank's new requests to
   the coordinator (rank 0), receives the ordered response lists, and runs the
   collectives. Its turns run on the background thread, or, one at a time under the
   loop's own lock, on a user thread that waits for its request (hvd_background_help in
   background.c). Everything shared between the loop and user threads is guarded by
   hvd_g.mu.

   Who calls whom (one way, no cycles between files; scripts/check_deps.sh fails on
   one): api.c (the public calls) -> requests.c (the table of requests in flight) and
   background.c (the loop) -> control.c (control messages), cache_rounds.c (the
   response cache's protocol, over the MPI peers of rounds.c), negotiation.c (the wire
   format and rank 0's coordinator, which also decides the fusion plan) and execute.c
   (runs a plan) -> the backend tables: host_backend.c (host memory: the fusion buffer
   and the collectives over MPI) and device.c (CUDA device memory: NCCL), which uses
   the host backend to stage. The shared state (hvd_g) lives in state.c.
   Process sets: api_ex.c (the _ex forms) -> call_options.c (this call's set and
   factors, which api.c reads) -> process_set_registry.c (the sets, which the coordinator
   does not need and host_backend.c and execute.c read); process_sets.c (add/remove)
   -> api.c and the registry. joined_sets.c: the sets this rank has joined (the
   background loop's, read by execute.c).

   This header holds what nearly every file uses: the request, the response, the shared
   state, the names (names.c), the log (env.c), the backend tables and the device
   interface (device.c's, whose files include only this header). Each part of the
   runtime declares its own functions in its own header (requests.h, negotiation.h,
   execute.h, background.h, control.h, cache_rounds.h, rounds.h, liveness.h,
   watchdog.h, timeline.h, env.h), which a file includes when it calls them. */
#ifndef HVD_INTERNAL_H
#define HVD_INTERNAL_H

#include "hvd/hvd.h"
#include "collectives/coll.h"
#include "util/clock.h"

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#define HVD_KEY_MAX (HVD_NAME_MAX + 16)  /* a name, or the key of an unnamed call,
                                            with a process set's prefix          */
#define HVD_ERROR_MAX 512
#define HVD_INFLIGHT_BUCKETS 1024
#define HVD_HOST_MAX 64

/* Kinds of operation that go through negotiation. */
typedef enum {
  HVD_KIND_ALLREDUCE, HVD_KIND_BROADCAST, HVD_KIND_ALLGATHER, HVD_KIND_BARRIER,
  HVD_KIND_ALLTOALL, HVD_KIND_REDUCESCATTER,
  HVD_KIND_JOIN,            /* hvd_join: answered once every rank has joined (root: the
                               last rank to join)                                     */
  HVD_KIND_COUNT
} hvd_kind_t;

const char *hvd_kind_name(hvd_kind_t k);           /* "allreduce", ...               */
const char *hvd_dtype_name(hvd_dtype_t d);         /* "float32", ...                 */
const char *hvd_op_name(hvd_op_t op);              /* "sum", ...                     */

/* Unnamed calls get the key "\x01<kind>.<n>" (n-th unnamed call of that kind on this
   rank); user names may not start with a control character, so the two never meet.
   hvd_display_name writes the key as a person reads it. */
#define HVD_AUTO_KEY_MARK '\x01'
const char *hvd_display_name(const char *key, char *buf, size_t len);
/* A collective of process set s != 0 has the key "\x02<s>\x1f<name or unnamed key>",
   so the same name in two sets is two tensors (hvd/call_options.c). */
#define HVD_SET_KEY_MARK '\x02'
#define HVD_SET_KEY_SEP '\x1f'

/* One asynchronous operation, from submission until hvd_wait/hvd_test frees it. */
struct hvd_request {
  hvd_kind_t kind;
  char key[HVD_KEY_MAX];
  hvd_dtype_t dtype;
  hvd_op_t op;
  int root;
  size_t count;
  int device;               /* -1: host memory; else the CUDA device of the buffers (set
                               by the background thread before the request goes out) */
  const void *sendbuf;
  void *recvbuf;
  void **gather_out;        /* allgather, alltoall: where the malloc'ed result goes */
  size_t *gather_count;     /* and its element count (reducescatter: recvbuf's)   */
  size_t *splits;           /* alltoall: elements to each rank (size entries, owned) */
  size_t *recv_splits;      /* alltoall: the caller's array for what came from each */
  int *last_rank;           /* join: where the last rank to join goes (may be NULL)  */
  /* Process set (0: the world) and its size; root and splits are in the set's ranks.
     prescale/postscale: the factors of hvd_options_t (1: none). */
  int32_t set, set_size;
  double prescale, postscale;   /* 0 is taken as 1 too (HVD_SCALES)                  */
  /* A stand-in on a rank that has joined: zeros of the response's size, in buffers it
     owns; never in flight, freed by the executor. */
  int phantom;
  /* grouped allreduce: nmembers tensors reduced as one (owned arrays); count is their
     total. 0: a plain request of sendbuf/recvbuf/count. */
  size_t nmembers;
  const void **member_send;
  void **member_recv;
  size_t *member_count;
  double submit_time;
  /* Guarded by hvd_g.mu; done is also read without it by a waiter that spins. */
  atomic_int done;
  hvd_status_t status;
  char error[HVD_ERROR_MAX];
  /* The executor (hvd_execute) holds the request from finding it to the end of its
     list: another thread that fails it then (the watchdog's stall shutdown) records the
     failure (fail_pending) and the executor completes it on letting go, so a waiter
     never frees a request, nor reuses its buffers, while a collective still uses them.
     A waiter that finishes a held request all the same (abandoned: the executor never
     came back, see hvd_fail_held) leaves it to the executor to free. */
  int held, fail_pending, abandoned;
  /* Device memory (hvd/device.c, hvd/device_flight.c). ready_event: a CUDA event
     recorded on the compute stream when the caller submitted the request (NULL: none;
     the request owns it until the device path consumes it). deferred: the collective
     is queued on the device and completes when its event has (the executor neither
     completes nor lets go of it). half_src/half_dst: float16 compression of float32
     device gradients, cast on hvd's stream: half_src into sendbuf before the
     collective, recvbuf into half_dst (divided by half_div) after it. done_event: while
     deferred, the event recorded after its work (hvd_wait_stream; under hvd_g.mu). */
  void *ready_event;
  int deferred;
  void *done_event;
  const float *half_src;
  float *half_dst;
  float half_div;
  /* What the executor produced for the caller's pointers (gather_out, gather_count,
     recv_splits, last_rank), handed over by hvd_request_complete under hvd_g.mu to a
     request that succeeds, and freed with the request otherwise: those pointers are
     often the caller's locals, never written once its call may have returned. */
  void *result;
  size_t result_count;
  size_t *result_splits;    /* hvd_g.size entries (malloc'ed) */
  int result_last_rank;
  unsigned results;         /* HVD_RESULT_* bits: which of them were produced */
  struct hvd_request *next_inflight;   /* chain of the in-flight hash table      */
  struct hvd_request *next_queue;      /* submitted, not yet taken by background  */
};

enum { HVD_RESULT_OUT = 1, HVD_RESULT_COUNT = 2, HVD_RESULT_SPLITS = 4,
       HVD_RESULT_LAST_RANK = 8 };

typedef enum { HVD_LOG_TRACE, HVD_LOG_DEBUG, HVD_LOG_INFO, HVD_LOG_WARNING,
               HVD_LOG_ERROR } hvd_log_level_t;

typedef struct {
  size_t fusion_threshold;      /* bytes; 0 = no fusion                              */
  double cycle_time_ms;         /* the most the coordinator waits to batch           */
  char timeline[1024];          /* file name; "" = off                               */
  double stall_check_s;         /* <= 0: no stall warnings                           */
  double stall_shutdown_s;      /* <= 0: never                                       */
  int hierarchical;
  int log_level;
  size_t cache_capacity;        /* response cache entries; 0 = off                   */
  double peer_timeout_s;        /* <= 0: off                                         */
  double start_timeout_s;       /* hvd_init waits this long for every rank; <= 0: ever */
  char thread_affinity[256];    /* "c0,c1,...": core of local rank i's background
                                   thread; "" = inherit the rank's binding            */
  int background_nice;          /* nice steps of the background thread below the
                                   rank's (at most nice 19); -1 = auto: 19 steps on a
                                   machine without a GPU, else 0 (background.c) */
} hvd_config_t;

/* env.c: a message at level (HVD_LOG_LEVEL decides) on stderr. */
void hvd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* names.c */
hvd_status_t hvd_set_error(hvd_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));   /* sets this thread's last error */
void hvd_set_error_text(const char *msg);

/* hvd/timeline.h */
typedef struct hvd_timeline hvd_timeline_t;

/* A response of the coordinator, as every rank executes it. */
typedef struct {
  hvd_kind_t kind;
  hvd_dtype_t dtype;
  hvd_op_t op;
  int root;
  hvd_status_t status;        /* HVD_OK, or the error every rank reports (mismatch)  */
  int device;                 /* -1: host memory, else device memory (rank 0's ordinal) */
  int fuse_with_prev;         /* the coordinator's plan: this response runs in the same
                                 collective as the one before it                      */
  int set;                    /* process set (0: the world); ranks outside it skip it */
  int64_t count;              /* elements; allgather: the total                      */
  const char *key;            /* key_len bytes, not 0-terminated (points into a message) */
  const char *msg;            /* msg_len bytes, likewise                                */
  uint32_t key_len, msg_len;
  const char *counts;         /* allgather: per rank (size int64 values, at any
                                 alignment inside the message: read with
                                 hvd_response_count)                                  */
  /* rank 0 only, for the timeline */
  double first_seen_us, ready_us;
} hvd_response_t;

typedef struct {
  /* topology */
  int rank, size, local_rank, local_size, cross_rank, cross_size;
  int owns_mpi;               /* we called MPI_Init, so we finalize                  */
  MPI_Comm ctrl;              /* negotiation messages                                */
  MPI_Comm local_comm, cross_comm;
  coll_transport_t *world, *local, *cross;
  int hierarchical;           /* use coll_hierarchical_allreduce                     */
  hvd_config_t cfg;
  void *fusion_buf;
  size_t fusion_cap;
  hvd_timeline_t *timeline;
  double start_us;

  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work_cv;     /* background waits: new submission, hvd_shutdown      */
  pthread_cond_t done_cv;     /* user threads wait: a request completed              */
  struct hvd_request *queue_head, *queue_tail;
  struct hvd_request *inflight[HVD_INFLIGHT_BUCKETS];
  uint64_t auto_seq[HVD_KIND_COUNT];
  int shutdown_requested;     /* hvd_shutdown was called on this rank                */
  int stopped;                /* the runtime stopped: later calls fail               */
  hvd_status_t stop_status;
  char stop_msg[HVD_ERROR_MAX];
  int bg_waiting;             /* background thread sleeps on work_cv                 */
  volatile int cancel;        /* device waits give up when set (hvd_g_cancel_set)   */
  /* The runtime ended on a failure (a lost peer, a stall, an error on some rank): peers
     may be gone, so hvd_shutdown finalizes MPI only if every rank reaches it in time. */
  atomic_int failed;
  atomic_int peer_lost;       /* and a census named a lost rank: no waiting for it    */
  char (*hosts)[HVD_HOST_MAX]; /* per rank: its host name (messages about lost ranks) */
  atomic_llong bg_alive_us;   /* the background loop's last turn (the watchdog reads) */
  atomic_llong watchdog_us;   /* the watchdog's last turn, and the longest gap between */
  atomic_llong frozen_us;     /* two of its turns above the peer timeout (SIGSTOP)    */
  pthread_t watchdog;
  pthread_mutex_t watchdog_mu;
  pthread_cond_t watchdog_cv;
  int watchdog_stop;
  atomic_int queued;          /* submissions not yet taken (lock-free peek)          */
  int ninflight;              /* submitted and not yet completed                     */
  /* Response cache rounds (hvd/background.c, hvd/rounds.c): one at a time on
     round_comm. Owned by the background loop while it runs; hvd_shutdown drains a
     round it left in flight after a failure, so every rank ends on the same round. */
  MPI_Comm round_comm;
  MPI_Request *round_reqs;    /* hvd/rounds.c: a receive and a send per peer, or one */
  uint64_t *round_send, *round_recv;
  uint64_t *round_peer;       /* the peers' words of the round in flight (p2p)       */
  int round_words;            /* 0: no rounds (cache off)                            */
  int round_inflight;
  uint64_t rounds_started;
  /* Responses executed: from the cache (agreed hits) and from coordinator lists; the
     tests read them (the background loop writes, anyone reads). */
  atomic_ullong stat_cached, stat_negotiated;
} hvd_state_t;

extern hvd_state_t hvd_g;
extern atomic_int hvd_g_initialized;

/* The operations of one memory kind, the only way the executor reaches collectives.
   reqs/resp: the requests of one plan group (allreduce: n >= 1 fused into one
   collective; the others: n == 1) and their responses (timeline). Each returns the
   status every request of the group completes with (msg filled on failure); a failure
   is fatal unless *agreed says every rank stopped at this group. The executor completes
   the requests. A NULL operation: not supported on this memory. */
typedef struct {
  const char *name;           /* "host memory", "device memory" */
  hvd_status_t (*allreduce)(struct hvd_request **reqs, const hvd_response_t *resp, int n,
                            char *msg, size_t len);
  hvd_status_t (*broadcast)(struct hvd_request *r, const hvd_response_t *resp, char *msg,
                            size_t len);
  hvd_status_t (*allgather)(struct hvd_request *r, const hvd_response_t *resp, char *msg,
                            size_t len, int *agreed);
  hvd_status_t (*barrier)(struct hvd_request *r, const hvd_response_t *resp, char *msg,
                          size_t len);
  hvd_status_t (*alltoall)(struct hvd_request *r, const hvd_response_t *resp, char *msg,
                           size_t len, int *agreed);
  hvd_status_t (*reducescatter)(struct hvd_request *r, const hvd_response_t *resp,
                                char *msg, size_t len);
} hvd_backend_ops_t;
extern const hvd_backend_ops_t hvd_host_ops;     /* host_backend.c */
extern const hvd_backend_ops_t hvd_device_ops;   /* device.c */

/* host_backend.c: the collective op that implements op (AVERAGE: SUM, divided afterwards),
   the runtime status of a collectives status, and an in-place host allreduce (device.c
   stages through it when the build has CUDA but no NCCL). */
coll_op_t hvd_coll_op(hvd_op_t op);
hvd_status_t hvd_status_from_coll(coll_status_t s);
hvd_status_t hvd_host_allreduce(void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                char *msg, size_t len);
/* The fusion buffer holds at least bytes (it grows to what the plan needs). */
hvd_status_t hvd_fusion_reserve(size_t bytes, char *msg, size_t len);
/* Records an event of key on the timeline (rank 0, when it is on). */
void hvd_timeline_op(const char *key, const char *event, double t0, double t1,
                     size_t bytes);

/* device.c: collectives on CUDA device memory (background thread). Without CUDA in the
   build, no pointer is device memory. host_allreduce (in place, host memory) is used
   only to stage when the build has CUDA but no NCCL. */
int hvd_device_is_device_ptr(const void *p);
/* The device of a request's buffers: -1 for host memory, else the CUDA device ordinal
   (background thread). */
int hvd_device_of_buffers(const void *sendbuf, const void *recvbuf);
/* 1 when the background thread takes every buffer of this process for host memory (it
   chose no GPU; no CUDA in the process), so hvd_device_of_buffers would say -1 on it:
   another thread may then stand in for it (hvd_background_help). Any thread; no CUDA
   call. */
int hvd_device_host_only(void);
/* The background thread calls this first: it selects its rank's GPU (local rank i: GPU
   i) before any other CUDA call, so it never creates a context on another GPU; a rank
   without a GPU of its own makes no CUDA call there (its buffers are host memory).
   hvd_device_thread_device: the GPU the background thread selected, or -1. */
void hvd_device_thread_start(void);
int hvd_device_thread_device(void);
/* The CUDA calls made before a device is in use, replaceable for tests (before hvd_init;
   NULL: the real ones). Each returns 0 or a CUDA error code. */
typedef struct {
  int (*device_count)(int *count);
  int (*set_device)(int device);
  int (*is_device_memory)(const void *p, int *yes);
  const char *(*error_string)(int error);
} hvd_cuda_probe_t;
void hvd_device_set_probe(const hvd_cuda_probe_t *probe);
void hvd_device_shutdown(void);   /* the background thread, as it ends */
void *hvd_device_compute_stream(void);   /* what hvd_cuda_set_stream set (NULL: legacy) */
/* The submitting thread, before r is queued: for device memory, records r->ready_event
   on the compute stream (what the collective's stream will wait for). Never fails: where
   no event can be recorded the device path records one when it runs r. */
void hvd_device_submit(struct hvd_request *r);
void hvd_device_release_event(void *event);   /* a ready_event nobody consumed */
/* stream (a cudaStream_t of the rank's GPU) waits for event: 0, or a CUDA error. */
int hvd_device_stream_wait(void *stream, void *event);
/* The background thread, each turn: device collectives queued and not yet completed,
   and the completion of those whose event has completed (*completed: how many). A
   failure there fails them and is fatal for the runtime (msg says why). */
size_t hvd_device_pending(void);
hvd_status_t hvd_device_poll(int *completed, char *msg, size_t len);

/* device_cast.c: the float16 staging buffer of device gradients (hvd_grad_buckets), on
   the user thread; sets hvd's last error on failure. hvd_device_of_ptr: the device
   holding p, or -1. */
int hvd_device_of_ptr(const void *p);
hvd_status_t hvd_device_buffer_alloc(void **p, size_t bytes, int device);
void hvd_device_buffer_free(void *p);

/* api.c: hvd_allreduce_async of count float16 elements in device memory half, which the
   device path fills from src (float32) on its stream after the submission event and
   casts back into dst (divided by div) before the request completes: hvd_grad_buckets'
   float16 compression, with no cast on the compute stream. */
hvd_status_t hvd_allreduce_async_fp16(const char *name, const float *src, uint16_t *half,
                                      float *dst, size_t count, hvd_op_t op, float div,
                                      hvd_request_t *req);

/* hvd/process_set_registry.c. The transport, size and this rank's index of set s (0: the
   world; hierarchical allreduce only there); 0 when this rank is not in s. */
typedef struct {
  coll_transport_t *t;
  int size, rank;
  const int *ranks;           /* the set's world ranks; NULL for the world */
} hvd_set_view_t;
int hvd_set_view(int32_t set, hvd_set_view_t *v);
/* 1 when set is a known (added, not removed) process set this rank is not in. */
int hvd_process_set_outside(int32_t set);
/* api.c, under hvd_g.mu: the per-call options of the _ex form running on this thread
   (set, size, factors) go into r, and r's key gets the set's prefix. */
void hvd_call_options_apply(struct hvd_request *r, const char *name);
/* The size of the set the call on this thread addresses (hvd_g.size outside _ex). */
int hvd_call_size(void);
/* Whether this rank may address set (0, or a set it is in); *size gets its size.
   Otherwise HVD_ERR_INVALID_ARGUMENT, with the message set for the caller. */
hvd_status_t hvd_process_set_check(int32_t set, int *size, const char *what);
/* The number of the next unnamed call of kind in set (each set counts its own). */
uint64_t hvd_process_set_next_auto(int32_t set, hvd_kind_t kind);
/* Records a set every rank agreed on (its id: the next one); marks one removed (0 when
   unknown); the number of the next add/remove call (names of their agreement). */
hvd_status_t hvd_process_set_register(const int *ranks, int n, hvd_process_set_t *set);
int hvd_process_set_unregister(hvd_process_set_t set);
uint64_t hvd_process_set_next_call(void);
/* Whether a factor of hvd_options_t changes the data (0 and 1 do not). */
#define HVD_SCALES(f) ((f) != 0.0 && (f) != 1.0)
/* Frees the process sets (hvd_shutdown). */
void hvd_process_sets_free(void);

/* Sets hvd_g.cancel from any thread. */
#define hvd_g_cancel_set() __atomic_store_n(&hvd_g.cancel, 1, __ATOMIC_RELAXED)

/* hvd/launch_env.c: HVD_ERR_BACKEND with msg when SLURM started this process as one task
   of many but MPI says the job has mpi_size 1 rank (srun without PMIx, a program typed in
   an allocation's shell); HVD_OK otherwise. */
hvd_status_t hvd_launch_env_check(int mpi_size, char *msg, size_t len);

#endif /* HVD_INTERNAL_H */
