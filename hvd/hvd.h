/* hvd/hvd.h: the one public header of the hvd runtime.
   The declarations below the line "contract" are fixed by shared/design/API.md: programs
   outside the project are written against exactly these names and meanings.
   Build a user program with the flags of
     PKG_CONFIG_PATH=build pkg-config --cflags --libs hvd                                */
#ifndef HVD_H
#define HVD_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contract (API.md) ---- */
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

hvd_status_t hvd_wait(hvd_request_t req);            /* blocks; frees req; its status */
hvd_status_t hvd_test(hvd_request_t req, int *done); /* never blocks; when *done, the
                                                        request is freed as by hvd_wait */

/* ---- extensions ---- */

/* Bytes of one element of dtype; 0 for an invalid dtype. */
size_t hvd_dtype_size(hvd_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* HVD_H */
