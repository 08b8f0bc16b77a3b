/* collectives/coll.h: collective algorithms over a small transport interface.
   Knows nothing of hvd or nn. An algorithm sees only: its rank, the world size, and
   non-blocking send/receive of bytes to/from a peer plus wait (as gloo's "pairs"), so
   one ring serves every transport (MPI point-to-point, in-process threads, ...).

   Every function returns a coll_status_t; on failure the transport's error[] holds a
   message that says what failed (peer, bytes, the foreign call and its error string). */
#ifndef COLL_H
#define COLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  COLL_OK = 0,
  COLL_ERR_ARG,        /* bad count/dtype/op/root/peer                              */
  COLL_ERR_TRANSPORT,  /* the transport failed (MPI error, system error)            */
  COLL_ERR_PEER_LOST,  /* a peer died or became unreachable                         */
  COLL_ERR_CANCELLED,  /* coll_transport_abort, or the interrupt hook, ended a wait      */
  COLL_ERR_NO_MEMORY
} coll_status_t;

/* Same order and meaning as hvd_dtype_t. */
typedef enum {
  COLL_FLOAT32, COLL_FLOAT64, COLL_FLOAT16, COLL_BFLOAT16,
  COLL_INT8, COLL_UINT8, COLL_INT32, COLL_INT64
} coll_dtype_t;

/* Reductions the algorithms perform. AVERAGE is SUM followed by coll_divide(). */
typedef enum { COLL_SUM, COLL_MIN, COLL_MAX, COLL_PRODUCT } coll_op_t;

size_t coll_dtype_size(coll_dtype_t dtype);   /* 0 when invalid */
const char *coll_dtype_name(coll_dtype_t dtype);
const char *coll_status_string(coll_status_t s);

/* ---- reductions (vectorised; float16/bfloat16 accumulate in float32, round to nearest
   even) ---- */
/* inout[i] = inout[i] op in[i] for i < count. */
void coll_reduce(void *inout, const void *in, size_t count, coll_dtype_t dtype, coll_op_t op);
/* buf[i] /= divisor (integers: C integer division). */
void coll_divide(void *buf, size_t count, coll_dtype_t dtype, int divisor);
/* memcpy (no overlap) at the same speed whatever the buffers' alignment: see copy.c. */
void coll_copy(void *dst, const void *src, size_t bytes);
/* float32 <-> float16 / bfloat16 conversions, round to nearest even. */
uint16_t coll_float_to_half(float f);
float coll_half_to_float(uint16_t h);
uint16_t coll_float_to_bfloat16(float f);
float coll_bfloat16_to_float(uint16_t b);

/* Element i of buf as a double, and set from a double (float16/bfloat16 round to
   nearest even, integers truncate); an invalid dtype reads NaN and writes nothing. For
   programs that fill buffers with known values and check results exactly. */
double coll_element_get(const void *buf, size_t i, coll_dtype_t dtype);
void coll_element_set(void *buf, size_t i, coll_dtype_t dtype, double v);

/* ---- transport ---- */
/* Storage for one outstanding send or receive; a transport keeps its own state in it. */
typedef struct { unsigned char opaque[64]; } coll_request_t;

typedef struct coll_transport coll_transport_t;

typedef struct {
  /* Start a send of bytes to peer / a receive of exactly bytes from peer. tag separates
     concurrent streams between the same pair. Never blocks. */
  coll_status_t (*isend)(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                         int tag, coll_request_t *req);
  coll_status_t (*irecv)(coll_transport_t *t, int peer, void *buf, size_t bytes,
                         int tag, coll_request_t *req);
  /* Block until req completes. Must return COLL_ERR_CANCELLED (not hang) after
     coll_transport_abort or when the interrupt hook says so, and COLL_ERR_PEER_LOST
     when the transport can tell (the MPI transport: peer_timeout_s without progress). */
  coll_status_t (*wait)(coll_transport_t *t, coll_request_t *req);
  /* Give up on a started request without waiting for it (the algorithms' error paths:
     after a failure the peer may never complete it, and waiting would hang). A receive
     no longer writes into its buffer; a send's buffer may still be read, so the caller
     keeps it alive if it can. NULL: the request is waited for instead, which suits only
     a transport whose requests always complete. */
  void (*abandon)(coll_transport_t *t, coll_request_t *req);
  /* Releases t and its impl; coll_transport_destroy has freed the scratch already. */
  void (*destroy)(coll_transport_t *t);
} coll_transport_ops_t;

/* Slots of a transport's scratch memory (see struct coll_transport). */
#define COLL_SCRATCH_SLOTS 2

struct coll_transport {
  int rank;
  int size;
  const coll_transport_ops_t *ops;
  void *impl;
  /* Liveness (the MPI transport; 0 = off): a wait on which nothing has started or
     completed in this transport for peer_timeout_s seconds gives up with
     COLL_ERR_PEER_LOST, naming the peer it waited for in lost_peer. */
  double peer_timeout_s;
  double last_progress_s;     /* util_now_s() of the last start or completion        */
  /* Bytes of the sends and receives completed so far (atomic access: the hvd watchdog
     reads it from its own thread, to tell a long transfer from a stall). */
  unsigned long long bytes_done;
  int lost_peer;              /* after COLL_ERR_PEER_LOST: the peer, else -1          */
  /* Optional: called by a wait that has made no progress for a while (100 ms, then
     every 20 ms), on the waiting thread; non-zero ends the wait with COLL_ERR_CANCELLED.
     The hvd runtime looks there for its peers' failure notices. */
  int (*interrupt)(void *arg);
  void *interrupt_arg;
  int aborted;                /* set by coll_transport_abort (atomic access)          */
  /* Every rank shares this host's memory (the MPI transport: its communicator lies in
     one MPI_COMM_TYPE_SHARED group). A message is then copied by the receiving rank's
     own core, so the ring's pipeline overlaps nothing (see coll_set_one_chunk_bytes). */
  int one_host;
  /* Memory the algorithms reuse across calls (coll_temp_get), so the hot path does not
     malloc (and page-fault) per call; every transport has it, zeroed at creation, and
     coll_transport_destroy frees it. */
  void *scratch[COLL_SCRATCH_SLOTS];
  size_t scratch_bytes[COLL_SCRATCH_SLOTS];
  char error[256];
};

/* Frees the scratch memory, then the transport (ops->destroy). */
void coll_transport_destroy(coll_transport_t *t);
/* Makes every wait of t, now and later, give up with COLL_ERR_CANCELLED. Safe from any
   thread (a watchdog ending a collective the waiting thread is stuck in). */
void coll_transport_abort(coll_transport_t *t);

/* In-process transport: size threads in one process, each with its own transport.
   Runs fn(transport, arg) on every rank concurrently and joins them; returns the first
   non-OK status any rank's fn returned. For unit tests of the algorithms at any size. */
typedef coll_status_t (*coll_rank_fn)(coll_transport_t *t, void *arg);
coll_status_t coll_inproc_run(int size, coll_rank_fn fn, void *arg);

/* MPI point-to-point transport over a duplicate of comm (an MPI_Comm passed as a
   pointer so this header needs no mpi.h): coll_transport_mpi_create(&comm, &t).
   Host memory only. Requires MPI initialised with at least MPI_THREAD_SERIALIZED use
   from the calling thread. */
coll_status_t coll_transport_mpi_create(const void *mpi_comm, coll_transport_t **out);

/* A transport over the parent's ranks ranks[0..n) (ascending, distinct, the parent's own
   rank among them): rank i here is ranks[i] there (collectives/transport_subset.c).
   Sends, receives and waits are the parent's; the parent must outlive it. */
coll_status_t coll_transport_subset_create(coll_transport_t *parent, const int *ranks, int n,
                                           coll_transport_t **out);

/* ---- algorithms ---- */
/* Allreduce, choosing by size: recursive doubling (latency-bound) below the small-message
   threshold, else the pipelined ring. sendbuf == recvbuf means in place. */
coll_status_t coll_allreduce(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                             size_t count, coll_dtype_t dtype, coll_op_t op);
coll_status_t coll_ring_allreduce(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                  size_t count, coll_dtype_t dtype, coll_op_t op);
/* An average: coll_allreduce with COLL_SUM, then coll_divide(recvbuf, count, dtype,
   divisor), bit for bit; but on the ring each segment is divided once, by the rank that
   completes its sum, chunk by chunk before the allgather sends it on, so the division
   costs no extra pass over the buffer and 1/size of the work. */
coll_status_t coll_allreduce_divided(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                     size_t count, coll_dtype_t dtype, int divisor);
coll_status_t coll_recursive_doubling_allreduce(coll_transport_t *t, const void *sendbuf,
                                                void *recvbuf, size_t count,
                                                coll_dtype_t dtype, coll_op_t op);

/* Ring reduce-scatter: rank r receives in recvbuf the reduction of the segment of
   counts[r] elements that starts at sum(counts[0..r-1]) of every rank's sendbuf. */
coll_status_t coll_reduce_scatter(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                                  const size_t *counts, coll_dtype_t dtype, coll_op_t op);

/* Ring allgather with unequal counts (0 allowed): recvbuf receives every rank's
   counts[r] elements concatenated in rank order. sendbuf may point into recvbuf at this
   rank's place. */
coll_status_t coll_allgatherv(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                              const size_t *counts, coll_dtype_t dtype);

/* Pipelined broadcast from root. */
coll_status_t coll_broadcast(coll_transport_t *t, void *buf, size_t count,
                             coll_dtype_t dtype, int root);

/* Every rank sends count elements to every rank (block r of sendbuf goes to rank r). */
coll_status_t coll_alltoall(coll_transport_t *t, const void *sendbuf, void *recvbuf,
                            size_t count, coll_dtype_t dtype);
/* The same with per-rank counts: sendcounts[j] elements of sendbuf (blocks in rank
   order) go to rank j, recvcounts[j] come from rank j into recvbuf (in rank order; the
   counts must match the senders'). Not in place. */
coll_status_t coll_alltoallv(coll_transport_t *t, const void *sendbuf,
                             const size_t *sendcounts, void *recvbuf,
                             const size_t *recvcounts, coll_dtype_t dtype);

/* The split of a two-level (hierarchical) allreduce: how count elements are cut among
   the local_size ranks of a host. One layout for the host path below and the device
   path (hvd/device.c: NCCL's reduce-scatter and allgather take equal counts): every
   local rank has a shard of per_rank = count / local_size elements at offset =
   local_rank * per_rank; the remainder (count % local_size elements, from
   remainder_offset = local_size * per_rank) belongs to the last local rank
   (remainder_root), right after its shard. So each rank allreduces one contiguous range
   across hosts, [offset, offset + cross_count), and the ranges cover the buffer in
   local rank order. Returns 0 (p untouched) on invalid arguments, else 1. */
typedef struct {
  size_t per_rank, offset;
  size_t remainder, remainder_offset;
  int remainder_root;
  size_t cross_count;
} coll_hierarchical_split_t;
int coll_hierarchical_split(size_t count, int local_size, int local_rank,
                            coll_hierarchical_split_t *p);

/* Hierarchical allreduce across hosts: local is the transport among the ranks of this
   host (local rank = local->rank), cross the transport among the ranks of every host
   that have the same local rank. Intra-host reduce-scatter, cross-host allreduce of the
   range each rank holds (coll_hierarchical_split), intra-host allgather. Results equal
   the flat ring's exactly for integer-valued inputs. Requires the same local size on
   every host. */
coll_status_t coll_hierarchical_allreduce(coll_transport_t *local, coll_transport_t *cross,
                                          const void *sendbuf, void *recvbuf, size_t count,
                                          coll_dtype_t dtype, coll_op_t op);

coll_status_t coll_barrier(coll_transport_t *t);

/* ---- tuning knobs (also for tests that reach the multi-chunk paths) ---- */
void coll_set_chunk_bytes(size_t bytes);           /* ring pipeline chunk          */
size_t coll_chunk_bytes(void);
void coll_set_small_message_bytes(size_t bytes);   /* below: recursive doubling    */
size_t coll_small_message_bytes(void);
/* On one host (t->one_host), a ring collective over at most this many bytes sends each
   segment as one message instead of pipelined chunks (0: always pipeline). Like the
   chunk, it must be the same on every rank, or the ranks disagree about message lengths. */
void coll_set_one_chunk_bytes(size_t bytes);
size_t coll_one_chunk_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* COLL_H */
