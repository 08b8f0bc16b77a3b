/* hvd/hvd.h: the one public header of the hvd runtime.
   The declarations below the line "contract" are a fixed contract (docs/api.md): programs
   outside the project are written against exactly these names and meanings; extend, never
   rename or change them. docs/api.md also lists the contract's calls not declared yet.
   Build a user program with the flags of
     PKG_CONFIG_PATH=build pkg-config --cflags --libs hvd                                */
#ifndef HVD_H
#define HVD_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contract (docs/api.md) ---- */
#include <stddef.h>
#include <stdint.h>

typedef enum {
  HVD_OK = 0,
  HVD_ERR_NOT_INITIALIZED,  /* called before hvd_init() or after hvd_shutdown()            */
  HVD_ERR_INVALID_ARGUMENT, /* NULL buffer with count > 0, bad dtype/op/root, name too long */
  HVD_ERR_MISMATCH,         /* ranks disagree on dtype/count/op/root for the same name      */
  HVD_ERR_DUPLICATE_NAME,   /* this name is already in flight on this rank                  */
  HVD_ERR_SHUTDOWN,         /* the runtime was shut down (by a peer's failure, a stall
                               shutdown, or hvd_shutdown); every later call returns this    */
  HVD_ERR_PEER_LOST,        /* a peer process died or became unreachable                    */
  HVD_ERR_TIMEOUT,          /* the stall-shutdown time passed with the op still incomplete  */
  HVD_ERR_BACKEND,          /* MPI, NCCL, CUDA or system error                              */
  HVD_ERR_NO_MEMORY
} hvd_status_t;

typedef enum { HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_BFLOAT16,
               HVD_INT8, HVD_UINT8, HVD_INT32, HVD_INT64 } hvd_dtype_t;

typedef enum { HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT } hvd_op_t;

typedef struct hvd_request *hvd_request_t;   /* handle of one asynchronous operation */

/* Lifetime and topology. hvd_init works under mpirun/hvdrun and also in a process
   started alone (size 1). A second hvd_init is a no-op returning HVD_OK. */
hvd_status_t hvd_init(void);
hvd_status_t hvd_shutdown(void);
int hvd_initialized(void);
int hvd_rank(void);        int hvd_size(void);         /* -1 when not initialized */
int hvd_local_rank(void);  int hvd_local_size(void);   /* within this host         */
int hvd_cross_rank(void);  int hvd_cross_size(void);   /* index/count of hosts     */

const char *hvd_status_string(hvd_status_t s);   /* "HVD_ERR_MISMATCH", ...            */
const char *hvd_last_error(void);                /* detailed message of the last failed
                                                    call on this thread ("" if none)  */

/* Collectives. Every rank must call the same collectives with the same name; the order
   of submission may differ between ranks (the runtime negotiates). name == NULL means
   "auto": the n-th unnamed call of that kind on each rank is matched with the n-th on
   the others. Buffers may be host memory or CUDA device memory. count is in elements.
   sendbuf == recvbuf means in place. The blocking form is the async form plus hvd_wait. */
hvd_status_t hvd_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                           size_t count, hvd_dtype_t dtype, hvd_op_t op);
hvd_status_t hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                                 size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                 hvd_request_t *req);

hvd_status_t hvd_broadcast(const char *name, void *buf, size_t count,
                           hvd_dtype_t dtype, int root);
hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count,
                                 hvd_dtype_t dtype, int root, hvd_request_t *req);

/* Each rank contributes count elements (counts may differ); the result is every rank's
   contribution concatenated in rank order, in a buffer the library allocates with
   malloc (the caller frees it); *recvcount receives the total element count. */
hvd_status_t hvd_allgather(const char *name, const void *sendbuf, size_t count,
                           hvd_dtype_t dtype, void **recvbuf, size_t *recvcount);

hvd_status_t hvd_barrier(void);

/* Horovod's remaining collectives (same naming and negotiation rules as above). */
/* alltoall: rank r sends splits[j] elements (of sendbuf, in order) to each rank j; the
   result, allocated with malloc, is what every rank sent to r concatenated in rank order;
   recv_splits (size() entries, caller-provided) receives how many came from each rank.
   splits == NULL means count divides evenly by size(). Splits that do not add up to
   count (or one larger than count) fail at the call with HVD_ERR_INVALID_ARGUMENT. */
hvd_status_t hvd_alltoall(const char *name, const void *sendbuf, size_t count,
                          const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                          size_t *recvcount, size_t *recv_splits);
/* reducescatter: reduce count elements across ranks; rank r receives segment r (the first
   count % size() ranks one element more), into recvbuf (caller-provided, large enough);
   *recvcount receives its length. */
hvd_status_t hvd_reducescatter(const char *name, const void *sendbuf, size_t count,
                               hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                               size_t *recvcount);
/* grouped allreduce: n tensors negotiated and executed as one unit (all or none ready). */
hvd_status_t hvd_grouped_allreduce(size_t n, const char *const *names,
                                   const void *const *sendbufs, void *const *recvbufs,
                                   const size_t *counts, hvd_dtype_t dtype, hvd_op_t op);
hvd_status_t hvd_grouped_allreduce_async(size_t n, const char *const *names,
                                         const void *const *sendbufs, void *const *recvbufs,
                                         const size_t *counts, hvd_dtype_t dtype, hvd_op_t op,
                                         hvd_request_t *req);

/* join: this rank has no more data. Until every rank has joined, the others' allreduces
   (grouped ones and reducescatters too) go on with this rank contributing zeros; AVERAGE
   still divides by size(), joined ranks included (as Horovod does). A broadcast,
   allgather or alltoall while a rank has joined fails on every rank with
   HVD_ERR_INVALID_ARGUMENT (Horovod does not support them with join either), as does an
   allreduce of device memory. Returns when all have joined; *last_rank (if not NULL)
   gets the last rank to join. The runtime is then usable as before. */
hvd_status_t hvd_join(int *last_rank);

/* The runtime's health, for a caller waiting on something of its own (point-to-point
   messages between ranks, outside hvd): HVD_OK while the runtime runs; once it stopped
   (a lost or stopped peer found by the heartbeats within HVD_PEER_TIMEOUT_SECONDS, an
   error on another rank), the status later calls get (HVD_ERR_PEER_LOST naming the
   ranks and hosts, as collectives report it) with hvd_last_error() set. Never blocks:
   poll it while waiting. */
hvd_status_t hvd_check_health(void);

hvd_status_t hvd_wait(hvd_request_t req);            /* blocks; frees req; its status */
hvd_status_t hvd_test(hvd_request_t req, int *done); /* never blocks; when *done, the
                                                        request is freed as by hvd_wait */

/* Process sets and per-call options (Horovod's process sets).
   A process set is a subset of the ranks; its collectives involve only its ranks.
   Set 0 is the world. hvd_process_set_add is collective over the world: every rank
   calls it with the same sorted, distinct ranks (different lists: HVD_ERR_MISMATCH on
   every rank; a bad list: HVD_ERR_INVALID_ARGUMENT), including the ranks outside the new
   set, and every rank gets the same id. hvd_process_set_remove is collective too; call
   it with no collective of the set in flight. */
typedef int32_t hvd_process_set_t;
hvd_status_t hvd_process_set_add(const int *ranks, int n, hvd_process_set_t *set);
hvd_status_t hvd_process_set_remove(hvd_process_set_t set);
int hvd_process_set_rank(hvd_process_set_t set);   /* this rank's index in the set; -1
                                                      if not in it (or unknown)     */
int hvd_process_set_size(hvd_process_set_t set);   /* -1 for an unknown set           */

typedef struct {
  hvd_process_set_t process_set;   /* 0 = every rank                                     */
  double prescale_factor;          /* multiply the input before reducing; 0 means 1       */
  double postscale_factor;         /* multiply the result after reducing; 0 means 1       */
} hvd_options_t;                   /* zero-initialised = today's behaviour; may grow at the end */

/* Each collective's _ex form: the same arguments, then opts (NULL = the plain form).
   Inside a set, roots, splits and the order of results are the set's own ranks (root 0 =
   the set's first rank), as with MPI sub-communicators; AVERAGE divides by the set's
   size. A call on a set this rank is not in, or an unknown set: HVD_ERR_INVALID_ARGUMENT
   at the call. The factors apply to the reductions (allreduce, grouped allreduce,
   reducescatter) of floating-point data (another dtype: HVD_ERR_INVALID_ARGUMENT) and
   are ignored by the other collectives; ranks that pass different factors or sets for a
   name get HVD_ERR_MISMATCH. A set's collectives, and the factors, work on host memory
   (device memory: HVD_ERR_INVALID_ARGUMENT on every rank of the set, at execution).
   hvd_join_ex joins within the set: as hvd_join, for the set's collectives and ranks
   (AVERAGE divides by the set's size, joined ranks included; *last_rank: the world rank
   of the set's last member to join). Joins are per set, as Horovod's: collectives of
   other sets and the world go on as usual, on this rank too (from another thread). One
   join per set at a time on a rank (two threads joining the same set: a fatal error of
   the runtime, as for hvd_join). While any join is open, every collective is negotiated
   in full (the response cache is not used), world ones included. */
hvd_status_t hvd_allreduce_ex(const char *name, const void *sendbuf, void *recvbuf,
                              size_t count, hvd_dtype_t dtype, hvd_op_t op,
                              const hvd_options_t *opts);
hvd_status_t hvd_allreduce_async_ex(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                    const hvd_options_t *opts, hvd_request_t *req);
hvd_status_t hvd_broadcast_ex(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                              int root, const hvd_options_t *opts);
hvd_status_t hvd_broadcast_async_ex(const char *name, void *buf, size_t count,
                                    hvd_dtype_t dtype, int root, const hvd_options_t *opts,
                                    hvd_request_t *req);
hvd_status_t hvd_allgather_ex(const char *name, const void *sendbuf, size_t count,
                              hvd_dtype_t dtype, void **recvbuf, size_t *recvcount,
                              const hvd_options_t *opts);
hvd_status_t hvd_alltoall_ex(const char *name, const void *sendbuf, size_t count,
                             const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                             size_t *recvcount, size_t *recv_splits,
                             const hvd_options_t *opts);
hvd_status_t hvd_alltoall_async_ex(const char *name, const void *sendbuf, size_t count,
                                   const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                                   size_t *recvcount, size_t *recv_splits,
                                   const hvd_options_t *opts, hvd_request_t *req);
hvd_status_t hvd_reducescatter_ex(const char *name, const void *sendbuf, size_t count,
                                  hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                  size_t *recvcount, const hvd_options_t *opts);
hvd_status_t hvd_reducescatter_async_ex(const char *name, const void *sendbuf, size_t count,
                                        hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                        size_t *recvcount, const hvd_options_t *opts,
                                        hvd_request_t *req);
hvd_status_t hvd_grouped_allreduce_ex(size_t n, const char *const *names,
                                      const void *const *sendbufs, void *const *recvbufs,
                                      const size_t *counts, hvd_dtype_t dtype, hvd_op_t op,
                                      const hvd_options_t *opts);
hvd_status_t hvd_grouped_allreduce_async_ex(size_t n, const char *const *names,
                                            const void *const *sendbufs,
                                            void *const *recvbufs, const size_t *counts,
                                            hvd_dtype_t dtype, hvd_op_t op,
                                            const hvd_options_t *opts, hvd_request_t *req);
hvd_status_t hvd_barrier_ex(const hvd_options_t *opts);
hvd_status_t hvd_join_ex(int *last_rank, const hvd_options_t *opts);

/* ---- extensions ---- */

/* Async forms of alltoall and reducescatter: the outputs (*recvbuf, *recvcount,
   recv_splits, recvbuf) are written by the time hvd_wait/hvd_test report completion;
   splits are copied at the call. AVERAGE divides by size(), as allreduce does.
   A grouped allreduce is keyed by its first name (names NULL: an automatic one); the
   other names are checked at the call but not negotiated. Its tensors must be host
   memory (device memory: HVD_ERR_INVALID_ARGUMENT on every rank, at execution). */
hvd_status_t hvd_alltoall_async(const char *name, const void *sendbuf, size_t count,
                                const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                                size_t *recvcount, size_t *recv_splits, hvd_request_t *req);
hvd_status_t hvd_reducescatter_async(const char *name, const void *sendbuf, size_t count,
                                     hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                     size_t *recvcount, hvd_request_t *req);

/* CUDA: hvd_wait without blocking the host on the GPU. For a collective of device memory
   it returns once the collective's work is queued on hvd's stream, after making stream
   (a cudaStream_t of the rank's GPU; NULL: the legacy default stream) wait for its
   completion event: work queued on stream afterwards sees the result, the host must not
   read it before that stream says so. It frees req; HVD_OK then means queued, and a
   failure of the collective after that stops the runtime (later calls report it).
   Anything else (host memory, a build or process without CUDA, a collective that has
   already completed or failed) is exactly hvd_wait. */
hvd_status_t hvd_wait_stream(hvd_request_t req, void *stream);

/* Bytes of one element of dtype; 0 for an invalid dtype. */
size_t hvd_dtype_size(hvd_dtype_t dtype);

/* Longest tensor name in bytes (without the terminating 0); longer names, empty names
   (pass NULL for an automatic one) and names that hold a control character are
   HVD_ERR_INVALID_ARGUMENT at the call, and the runtime goes on. */
#define HVD_NAME_MAX 255

/* CUDA: collectives on device buffers run on hvd's own stream after waiting for the
   work queued on this stream (a cudaStream_t, e.g. nn_cuda_stream()) before the
   submitting call (hvd_allreduce_async, hvd_broadcast_async, ...) returned: an event is
   recorded on it then, when the calling thread's current GPU is the rank's, and this
   stream is never synchronised. NULL (the default) means the legacy default stream. When
   hvd_wait or hvd_test reports a device collective done, its result is final for the
   host and every stream. A no-op in a build without CUDA. */
void hvd_cuda_set_stream(void *stream);

/* ---- gradient buckets (hvd/grad_buckets.c) ----
   Allreduce of a flat float32 gradient buffer in buckets, overlapped with backward
   (PyTorch DDP / Horovod style). Buckets are ranges of the buffer laid out from its END
   (backward produces gradients in reverse order): bucket 0 = the last
   first_bucket_bytes, then bucket_bytes each towards offset 0 (or, after
   hvd_grad_buckets_set_params, whole parameters until a bucket holds that much);
   identical on all ranks for the same (count, sizes, parameter starts). Bucket K is
   allreduced under the name "grad.bucket.K", so one set of buckets may be in flight at
   a time per process.
   Per step: hvd_grad_buckets_ready() from nn's grad-ready callback (or not at all),
   then hvd_grad_buckets_wait() before the optimizer step. One object is used by one
   thread at a time (the one running backward). */
typedef enum { HVD_COMPRESSION_NONE = 0, HVD_COMPRESSION_FP16 = 1 } hvd_compression_t;

typedef struct hvd_grad_buckets hvd_grad_buckets_t;

/* bucket_bytes 0: 25 MiB; first_bucket_bytes 0: 1 MiB (both of float32 gradients,
   rounded down to whole floats, at least one). op: usually HVD_AVERAGE. FP16 casts each
   bucket to float16 (round to nearest even) for the allreduce and back; grads in CUDA
   device memory are cast on their GPU by the collective, on hvd's stream after the work
   queued on the stream given to hvd_cuda_set_stream (the float16 copy is device memory
   too; that stream is never synchronised), and wait() returns once the casts back have
   finished. Does not need hvd_init (only ready/wait do). */
hvd_status_t hvd_grad_buckets_create(hvd_grad_buckets_t **out, float *grads, size_t count,
                                     size_t bucket_bytes, size_t first_bucket_bytes,
                                     hvd_compression_t compression, hvd_op_t op);
void hvd_grad_buckets_free(hvd_grad_buckets_t *b);

/* overlap 0: ready() only records, everything is submitted in wait() (for comparison).
   Default 1. */
void hvd_grad_buckets_set_overlap(hvd_grad_buckets_t *b, int overlap);
/* Buckets end only at parameter boundaries, as PyTorch DDP assigns them: starts[0..n)
   are the offsets where the parameters begin (strictly ascending, below count; e.g.
   nn_model_param_starts). From the end of the buffer, a bucket takes whole parameters
   until it holds at least its size (first_bucket_bytes for bucket 0, then bucket_bytes),
   so a large parameter makes a large bucket. n 0: the fixed layout above again. Call it
   between steps; the same starts on every rank give the same buckets. */
hvd_status_t hvd_grad_buckets_set_params(hvd_grad_buckets_t *b, const size_t *starts,
                                         size_t n);

/* Layout: number of buckets and the element range [*offset, *offset + *count) of
   bucket k (0 = submitted first, the end of the buffer). */
size_t hvd_grad_buckets_num(const hvd_grad_buckets_t *b);
void hvd_grad_buckets_range(const hvd_grad_buckets_t *b, size_t k, size_t *offset,
                            size_t *count);
/* Buckets submitted in the current step so far. */
size_t hvd_grad_buckets_num_submitted(const hvd_grad_buckets_t *b);

/* Every gradient at offset >= ready_from is final: submits (hvd_allreduce_async) every
   bucket not yet submitted that lies entirely at offsets >= ready_from, and polls those
   in flight. An error is also kept and returned again by wait(). */
hvd_status_t hvd_grad_buckets_ready(hvd_grad_buckets_t *b, size_t ready_from);
/* The same with nn's nn_grad_ready_fn signature: pass it and b to nn_model_backward. */
void hvd_grad_buckets_on_ready(void *b, size_t ready_from);
/* Submits what is left, waits for all, casts float16 back; the buffer then holds the
   reduced gradients. Ends the step: the next ready() starts a new one. */
hvd_status_t hvd_grad_buckets_wait(hvd_grad_buckets_t *b);

/* Communication accounting over the steps since creation or the last reset. Per step,
   communication time is the union of the buckets' [submission, completion] intervals
   (with fp16, up to the end of the cast back); completions before wait() are seen by
   polling in ready(), so they are late by at most the time between two ready() calls.
   blocked_s is the time spent inside wait(): the communication not hidden behind
   backward. Hidden fraction = 1 - blocked_s / comm_s. */
typedef struct {
  uint64_t steps;
  double comm_s;          /* sum over steps of communication time (see above)      */
  double blocked_s;       /* sum over steps of time inside wait()                  */
  uint64_t bytes;         /* bytes handed to the allreduce (after compression)     */
} hvd_grad_buckets_stats_t;
void hvd_grad_buckets_stats(const hvd_grad_buckets_t *b, hvd_grad_buckets_stats_t *s);
void hvd_grad_buckets_reset_stats(hvd_grad_buckets_t *b);

/* ---- parameter servers (hvd/ps_api.c, ps_engine.c, ps_placement.c) ----
   Variables (float32) registered by name and element count, laid out one after the
   other in a flat buffer in registration order (like nn's parameter buffer). Each is
   kept by one server rank, or split over several when larger than split_bytes; the
   servers are ranks 0..num_ps-1 (dedicated: they only serve) or, with num_ps 0, every
   rank (colocated: each serves its shards from its background thread and also works).
   A worker pushes the gradients of a range of variables and gets their new values back
   in one asynchronous request; the server applies them with the caller's update
   callback, so the optimizer and its state live with the shard.
   Sync mode: a shard's step t is applied once every worker pushed its gradient for t
   (their average); the push's answer is the values after step t. Async mode: each push
   is applied on arrival (its gradient divided by the number of workers, so that a round
   of pushes moves the weights as far as one sync step); a shard's version is the
   number of complete rounds (the slowest worker's count of pushes), and a push's
   staleness is its step (the version it would be applied to in sync mode) minus the
   version of the values the worker computed it on. max_staleness S >= 0 bounds it:
   the answer to a worker's push of step t (from 0) waits until the slowest worker has
   pushed its step t - S (stale-synchronous parallel); -1: never waits. Loss of a server or worker: every survivor's calls end
   with HVD_ERR_PEER_LOST naming it, as for collectives. One parameter-server set at a
   time per process. */
typedef struct hvd_ps hvd_ps_t;
typedef enum { HVD_PS_SYNC = 0, HVD_PS_ASYNC = 1 } hvd_ps_mode_t;
typedef enum { HVD_PS_GREEDY = 0, HVD_PS_ROUND_ROBIN = 1 } hvd_ps_placement_t;
/* Local aggregation (sync mode only; as BytePS): the workers of one host first sum their
   gradients of a shard kept on another host at one of them (the shards spread over the
   host's workers by bytes), which pushes the sum once and shares the answer inside the
   host, so a host's link carries each remote shard once per direction instead of once
   per worker. The result is the same average (another summation order). AUTO (the
   default, 0): on for colocated servers (num_ps 0), off for dedicated ones (each worker's
   push then reaches the server, as TF's ps/worker jobs); ON: for both; OFF: never. Hosts
   are those of hvd_local_rank. */
typedef enum {
  HVD_PS_AGG_AUTO = 0, HVD_PS_AGG_ON = 1, HVD_PS_AGG_OFF = 2
} hvd_ps_local_agg_t;

/* Runs on the server rank (on hvd's background thread, or a thread waiting in hvd_wait;
   never two at once), once per applied update of one shard: elements [offset, offset +
   count) of variable var, whose values it updates in place from grad (the averaged
   gradient in sync mode; may be overwritten). version: the shard's updates so far. It
   must not call hvd. It may run as soon as hvd_ps_create returns here (a worker that
   returned first may push at once): what ctx needs from the placement (hvd_ps_shard) must
   be ready before the workers push, e.g. made before a barrier that every rank passes
   after create. */
typedef void (*hvd_ps_update_fn)(void *ctx, size_t var, size_t offset, float *values,
                                 float *grad, size_t count, uint64_t version);

typedef struct {
  hvd_ps_mode_t mode;
  int num_ps;                    /* K > 0: ranks 0..K-1 serve only; 0: colocated     */
  hvd_ps_placement_t placement;  /* GREEDY (least bytes so far; TF's default) or
                                    ROUND_ROBIN (TF's replica_device_setter)          */
  size_t split_bytes;            /* split a larger variable over servers; 0: never    */
  int max_staleness;             /* async: S, or -1 (unbounded); sync: ignored         */
  hvd_ps_update_fn update;
  void *update_ctx;
  hvd_ps_local_agg_t local_aggregation;   /* sync: sum a host's gradients first (below) */
} hvd_ps_config_t;

/* Collective over every rank (after hvd_init): the same configuration and variables
   everywhere, else HVD_ERR_MISMATCH on every rank naming the variable (or setting) and
   both values. init (total elements, or NULL for zeros): each server takes its shards'
   first values from its own init, so give every rank the same (broadcast first). */
hvd_status_t hvd_ps_create(hvd_ps_t **out, const hvd_ps_config_t *cfg, size_t nvars,
                           const char *const *names, const size_t *counts,
                           const float *init);
int hvd_ps_is_worker(const hvd_ps_t *ps);
int hvd_ps_is_server(const hvd_ps_t *ps);
int hvd_ps_num_workers(const hvd_ps_t *ps);
/* This rank's index among the workers (0..num_workers-1), -1 on a dedicated server. */
int hvd_ps_worker_index(const hvd_ps_t *ps);
/* The placement: number of shards, and shard k's variable, element range within it and
   server rank. Identical on every rank. */
size_t hvd_ps_num_shards(const hvd_ps_t *ps);
void hvd_ps_shard(const hvd_ps_t *ps, size_t k, size_t *var, size_t *offset,
                  size_t *count, int *server);

/* Worker: pushes the gradients of variables [first, first + n) (read from grads, the
   flat gradient buffer, before the call returns) and receives their values after the
   update into values (the flat value buffer, written before completion). grads NULL:
   a pull only, answered at once with the newest values. A variable may be in one
   request at a time. */
hvd_status_t hvd_ps_push_pull_async(hvd_ps_t *ps, size_t first, size_t n,
                                    const float *grads, float *values, hvd_request_t *req);
hvd_status_t hvd_ps_push_pull(hvd_ps_t *ps, size_t first, size_t n, const float *grads,
                              float *values);

/* Collective: a worker's end (no request of its own in flight: else
   HVD_ERR_INVALID_ARGUMENT); a server serves until every worker has ended. It returns
   once every rank has called it (it ends with a barrier), so any rank may call
   hvd_shutdown right after. Afterwards only hvd_ps_stats and hvd_ps_free. */
hvd_status_t hvd_ps_finish(hvd_ps_t *ps);
/* Frees ps (after hvd_ps_finish, or after a failure; NULL: nothing). */
void hvd_ps_free(hvd_ps_t *ps);

#define HVD_PS_STALENESS_BINS 32
typedef struct {
  uint64_t pushes;               /* server: pushes applied to this rank's shards       */
  uint64_t updates;              /* server: update callbacks run                       */
  uint64_t bytes_in, bytes_out;  /* parameter-server messages of this rank, both roles */
  uint64_t staleness[HVD_PS_STALENESS_BINS];  /* server: pushes by staleness (the last
                                                 bin: that many or more)               */
  uint64_t max_staleness;        /* server: the largest seen                            */
  uint64_t messages_in, messages_out;  /* MPI messages behind bytes_in and bytes_out
                                          (small ones to one peer go as one)            */
  uint64_t bytes_in_remote, bytes_out_remote;  /* of bytes_in and bytes_out: from and to
                                                  ranks on other hosts (their links)   */
} hvd_ps_stats_t;
void hvd_ps_stats(const hvd_ps_t *ps, hvd_ps_stats_t *s);

#ifdef __cplusplus
}
#endif

#endif /* HVD_H */
