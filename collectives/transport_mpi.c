/* collectives/transport_mpi.c: the MPI point-to-point transport (host memory).
   Works on its own duplicate of the caller's communicator, so its messages never match
   the application's. Errors return (MPI_ERRORS_RETURN on the duplicate) and are turned
   into messages with MPI_Error_string. Messages above INT_MAX bytes go as a count of
   1 MiB blocks (a contiguous derived type) plus a remainder of bytes: two requests.
   wait polls MPI_Test rather than calling MPI_Wait, so that it can give up: after
   coll_transport_abort, when the interrupt hook says so, or after peer_timeout_s in which
   nothing started or completed (a stopped peer, a cut link: MPI itself would wait
   forever). */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"
#include "util/clock.h"

#define MPI_BLOCK_BYTES ((size_t)1 << 20)

typedef struct {
  MPI_Comm comm;
  MPI_Datatype block; /* MPI_BLOCK_BYTES contiguous bytes */
} mpi_impl_t;

typedef struct {
  MPI_Request r[2];
  int n;       /* requests in use */
  int is_recv;
  int peer;
  size_t bytes;
  size_t part[2]; /* bytes each request moves, to detect a short message */
} mpi_req_t;

_Static_assert(sizeof(mpi_req_t) <= sizeof(coll_request_t), "request too small");

static coll_status_t mpi_fail(coll_transport_t *t, int err, const char *what, int peer,
                              size_t bytes) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", err);
  int cls = 0;
  MPI_Error_class(err, &cls);
  coll_status_t s = COLL_ERR_TRANSPORT;
#ifdef MPIX_ERR_PROC_FAILED
  if (cls == MPIX_ERR_PROC_FAILED) {
    s = COLL_ERR_PEER_LOST;
    t->lost_peer = peer;
  }
#endif
  return coll_fail(t, s, "mpi: %s (rank %d, peer %d, %zu bytes) failed: %s", what, t->rank, peer,
                   bytes, msg);
}

static coll_status_t check_args(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                int tag, coll_request_t *req) {
  if (peer < 0 || peer >= t->size)
    return coll_fail(t, COLL_ERR_ARG, "mpi: peer %d out of range 0..%d", peer, t->size - 1);
  if (!req || (bytes > 0 && !buf))
    return coll_fail(t, COLL_ERR_ARG, "mpi: NULL buffer or request");
  if (tag < 0 || tag > 32767) /* MPI guarantees tags up to 32767 */
    return coll_fail(t, COLL_ERR_ARG, "mpi: tag %d outside 0..32767", tag);
  return COLL_OK;
}

/* Starts one message as up to two MPI requests (blocks + remainder). */
static coll_status_t start(coll_transport_t *t, int is_recv, int peer, void *buf, size_t bytes,
                           int tag, void *req) {
  coll_status_t s = check_args(t, peer, buf, bytes, tag, req);
  if (s != COLL_OK) return s;
  mpi_impl_t *impl = t->impl;
  mpi_req_t *q = (mpi_req_t *)req;
  memset(q, 0, sizeof *q);
  q->is_recv = is_recv;
  q->peer = peer;
  q->bytes = bytes;
  q->r[0] = q->r[1] = MPI_REQUEST_NULL;
  size_t nblocks = 0, rest = bytes;
  if (bytes > (size_t)INT_MAX) {
    nblocks = bytes / MPI_BLOCK_BYTES;
    rest = bytes % MPI_BLOCK_BYTES;
  }
  const char *what = is_recv ? "MPI_Irecv" : "MPI_Isend";
  if (nblocks > 0) {
    int err = is_recv ? MPI_Irecv(buf, (int)nblocks, impl->block, peer, tag, impl->comm, &q->r[q->n])
                      : MPI_Isend(buf, (int)nblocks, impl->block, peer, tag, impl->comm, &q->r[q->n]);
    if (err != MPI_SUCCESS) return mpi_fail(t, err, what, peer, bytes);
    q->part[q->n++] = nblocks * MPI_BLOCK_BYTES;
  }
  if (rest > 0 || nblocks == 0) {
    char *p = (char *)buf + nblocks * MPI_BLOCK_BYTES;
    int err = is_recv ? MPI_Irecv(p, (int)rest, MPI_BYTE, peer, tag, impl->comm, &q->r[q->n])
                      : MPI_Isend(p, (int)rest, MPI_BYTE, peer, tag, impl->comm, &q->r[q->n]);
    if (err != MPI_SUCCESS) return mpi_fail(t, err, what, peer, bytes);
    q->part[q->n++] = rest;
  }
  coll_progress(t);
  return COLL_OK;
}

/* Gives up on a request after cancel: a receive is cancelled (so it never writes into a
   buffer the caller is about to free); both are then freed, completing in the background. */
static void abandon(mpi_req_t *q) {
  for (int i = 0; i < q->n; i++)
    if (q->r[i] != MPI_REQUEST_NULL) {
      if (q->is_recv) MPI_Cancel(&q->r[i]);
      MPI_Request_free(&q->r[i]);
    }
}

static coll_status_t mpi_wait_aligned(coll_transport_t *t, void *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "mpi: wait on a NULL request");
  mpi_req_t *q = (mpi_req_t *)req;
  const char *what = q->is_recv ? "receive" : "send";
  unsigned spins = 0;
  double next_interrupt_s = 0;
  for (int i = 0; i < q->n; i++) {
    for (;;) {
      int done = 0;
      MPI_Status st;
      int err = MPI_Test(&q->r[i], &done, &st);
      if (err != MPI_SUCCESS) {
        coll_status_t s = mpi_fail(t, err, q->is_recv ? "MPI_Test (receive)" : "MPI_Test (send)",
                                   q->peer, q->bytes);
        abandon(q);
        return s;
      }
      if (done) {
        /* A longer message fails MPI_Test (truncation); a shorter one must be caught
           here: it means the ranks disagree about a length. */
        int n = 0;
        if (q->is_recv && MPI_Get_count(&st, MPI_BYTE, &n) == MPI_SUCCESS &&
            (size_t)n != q->part[i] && n != MPI_UNDEFINED) {
          q->n = 0;
          return coll_fail(t, COLL_ERR_ARG,
                           "mpi: rank %d expected %zu bytes from rank %d, received %d: the "
                           "ranks disagree about the message length",
                           t->rank, q->part[i], q->peer, n);
        }
        coll_progress(t);
        __atomic_add_fetch(&t->bytes_done, (unsigned long long)q->part[i], __ATOMIC_RELAXED);
        break;
      }
      /* Spinning is what MPI_Wait does too; yield now and then so an oversubscribed
         node (more ranks than cores) still lets the peer run, and see whether to give
         up. */
      if (++spins % 64 == 0) {
        sched_yield();
        coll_status_t s = coll_wait_check(t, q->peer, what, q->bytes, &next_interrupt_s);
        if (s != COLL_OK) {
          abandon(q);
          return s;
        }
      }
    }
  }
  q->n = 0;
  return COLL_OK;
}

/* coll_request_t is a byte array (alignment 1): the state is copied to and from an
   aligned local rather than accessed in place. */
static coll_status_t mpi_isend(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                               int tag, coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "mpi: isend with a NULL request");
  mpi_req_t q;
  memset(&q, 0, sizeof q);
  coll_status_t s = start(t, 0, peer, (void *)buf, bytes, tag, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static coll_status_t mpi_irecv(coll_transport_t *t, int peer, void *buf, size_t bytes, int tag,
                               coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "mpi: irecv with a NULL request");
  mpi_req_t q;
  memset(&q, 0, sizeof q);
  coll_status_t s = start(t, 1, peer, buf, bytes, tag, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static coll_status_t mpi_wait(coll_transport_t *t, coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "mpi: wait on a NULL request");
  mpi_req_t q;
  memcpy(&q, req, sizeof q);
  coll_status_t s = mpi_wait_aligned(t, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static void mpi_abandon(coll_transport_t *t, coll_request_t *req) {
  (void)t;
  if (!req) return;
  mpi_req_t q;
  memcpy(&q, req, sizeof q);
  abandon(&q);
  q.n = 0;
  memcpy(req, &q, sizeof q);
}

static void mpi_destroy(coll_transport_t *t) {
  if (!t) return;
  mpi_impl_t *impl = t->impl;
  if (impl) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (impl->block != MPI_DATATYPE_NULL) MPI_Type_free(&impl->block);
      if (impl->comm != MPI_COMM_NULL) MPI_Comm_free(&impl->comm);
    }
    free(impl);
  }
  free(t);
}

static const coll_transport_ops_t mpi_ops = {
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .abandon = mpi_abandon,
    .destroy = mpi_destroy,
};

coll_status_t coll_transport_mpi_create(const void *mpi_comm, coll_transport_t **out) {
  if (!out) return COLL_ERR_ARG;
  *out = NULL;
  if (!mpi_comm) return COLL_ERR_ARG;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return COLL_ERR_ARG;
  coll_transport_t *t = calloc(1, sizeof *t);
  mpi_impl_t *impl = calloc(1, sizeof *impl);
  if (!t || !impl) {
    free(t);
    free(impl);
    return COLL_ERR_NO_MEMORY;
  }
  impl->comm = MPI_COMM_NULL;
  impl->block = MPI_DATATYPE_NULL;
  t->ops = &mpi_ops;
  t->impl = impl;
  t->lost_peer = -1;
  t->last_progress_s = util_now_s();
  MPI_Comm comm = *(const MPI_Comm *)mpi_comm;
  int err = MPI_Comm_dup(comm, &impl->comm);
  if (err == MPI_SUCCESS) err = MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  if (err == MPI_SUCCESS) err = MPI_Comm_rank(impl->comm, &t->rank);
  if (err == MPI_SUCCESS) err = MPI_Comm_size(impl->comm, &t->size);
  if (err == MPI_SUCCESS) err = MPI_Type_contiguous((int)MPI_BLOCK_BYTES, MPI_BYTE, &impl->block);
  if (err == MPI_SUCCESS) err = MPI_Type_commit(&impl->block);
  if (err == MPI_SUCCESS) { /* one_host: do all ranks share this host's memory? */
    MPI_Comm node = MPI_COMM_NULL;
    int node_size = 0;
    err = MPI_Comm_split_type(impl->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(node, &node_size);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    t->one_host = node_size == t->size;
  }
  if (err != MPI_SUCCESS) {
    mpi_destroy(t);
    return COLL_ERR_TRANSPORT;
  }
  *out = t;
  return COLL_OK;
}
