/* collectives/status.c: names, sizes, error messages and argument checks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "collectives/coll_internal.h"
#include "util/clock.h"

size_t coll_dtype_size(coll_dtype_t dtype) {
  switch (dtype) {
    case COLL_FLOAT32: return 4;
    case COLL_FLOAT64: return 8;
    case COLL_FLOAT16: return 2;
    case COLL_BFLOAT16: return 2;
    case COLL_INT8: return 1;
    case COLL_UINT8: return 1;
    case COLL_INT32: return 4;
    case COLL_INT64: return 8;
  }
  return 0;
}

const char *coll_dtype_name(coll_dtype_t dtype) {
  /* nccl-tests spellings, so the benchmark columns read as users expect. */
  switch (dtype) {
    case COLL_FLOAT32: return "float";
    case COLL_FLOAT64: return "double";
    case COLL_FLOAT16: return "half";
    case COLL_BFLOAT16: return "bfloat16";
    case COLL_INT8: return "int8";
    case COLL_UINT8: return "uint8";
    case COLL_INT32: return "int32";
    case COLL_INT64: return "int64";
  }
  return "invalid";
}

const char *coll_status_string(coll_status_t s) {
  switch (s) {
    case COLL_OK: return "ok";
    case COLL_ERR_ARG: return "invalid argument";
    case COLL_ERR_TRANSPORT: return "transport error";
    case COLL_ERR_PEER_LOST: return "peer lost";
    case COLL_ERR_CANCELLED: return "cancelled";
    case COLL_ERR_NO_MEMORY: return "out of memory";
  }
  return "unknown status";
}

coll_status_t coll_fail(coll_transport_t *t, coll_status_t s, const char *fmt, ...) {
  if (t) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
  }
  return s;
}

coll_status_t coll_check_transport(coll_transport_t *t) {
  if (!t) return COLL_ERR_ARG;
  if (!t->ops || t->size < 1 || t->rank < 0 || t->rank >= t->size)
    return coll_fail(t, COLL_ERR_ARG, "transport is not initialised (rank %d, size %d)",
                     t->rank, t->size);
  return COLL_OK;
}

coll_status_t coll_check_dtype_op(coll_transport_t *t, coll_dtype_t dtype, coll_op_t op) {
  if (coll_dtype_size(dtype) == 0)
    return coll_fail(t, COLL_ERR_ARG, "invalid dtype %d (expected 0..%d)", (int)dtype,
                     (int)COLL_INT64);
  if ((int)op < (int)COLL_SUM || (int)op > (int)COLL_PRODUCT)
    return coll_fail(t, COLL_ERR_ARG, "invalid reduction op %d (expected 0..%d)", (int)op,
                     (int)COLL_PRODUCT);
  return COLL_OK;
}

void coll_transport_destroy(coll_transport_t *t) {
  if (!t) return;
  for (int i = 0; i < COLL_SCRATCH_SLOTS; i++) {
    free(t->scratch[i]);
    t->scratch[i] = NULL;
    t->scratch_bytes[i] = 0;
  }
  if (t->ops && t->ops->destroy) t->ops->destroy(t);
}

void coll_transport_abort(coll_transport_t *t) {
  if (t) __atomic_store_n(&t->aborted, 1, __ATOMIC_RELAXED);
}

void coll_progress(coll_transport_t *t) { t->last_progress_s = util_now_s(); }

coll_status_t coll_wait_check(coll_transport_t *t, int peer, const char *what, size_t bytes,
                              double *next_interrupt_s) {
  if (__atomic_load_n(&t->aborted, __ATOMIC_RELAXED))
    return coll_fail(t, COLL_ERR_CANCELLED, "rank %d: the %s of %zu bytes (peer %d) was aborted",
                     t->rank, what, bytes, peer);
  double now = util_now_s(), quiet = now - t->last_progress_s;
  if (t->peer_timeout_s > 0 && quiet > t->peer_timeout_s) {
    t->lost_peer = peer;
    return coll_fail(t, COLL_ERR_PEER_LOST,
                     "rank %d: nothing moved to or from rank %d for %.1f s (a %s of %zu "
                     "bytes; peer timeout %g s)", t->rank, peer, quiet, what, bytes,
                     t->peer_timeout_s);
  }
  if (t->interrupt && quiet >= 0.1 && now >= *next_interrupt_s) {
    *next_interrupt_s = now + 0.02;
    if (t->interrupt(t->interrupt_arg))
      return coll_fail(t, COLL_ERR_CANCELLED,
                       "rank %d: a peer reported a failure while this rank waited for rank "
                       "%d (a %s of %zu bytes)", t->rank, peer, what, bytes);
  }
  return COLL_OK;
}

void *coll_scratch(coll_transport_t *t, int slot, size_t bytes) {
  if (!t || slot < 0 || slot >= COLL_SCRATCH_SLOTS) return NULL;
  if (bytes == 0) bytes = 1;
  if (t->scratch_bytes[slot] < bytes) {
    void *p = NULL;
    /* 64-byte aligned so the vector loops run on aligned staging memory. */
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    free(t->scratch[slot]);
    t->scratch[slot] = p;
    t->scratch_bytes[slot] = bytes;
  }
  return t->scratch[slot];
}

coll_status_t coll_temp_get(coll_transport_t *t, int slot, size_t bytes, coll_temp_t *tmp) {
  tmp->ptr = coll_scratch(t, slot, bytes);
  tmp->owned = 0;
  if (tmp->ptr) return COLL_OK;
  if (posix_memalign(&tmp->ptr, 64, bytes ? bytes : 1) != 0) {
    tmp->ptr = NULL;
    return coll_fail(t, COLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of staging memory",
                     bytes);
  }
  tmp->owned = 1;
  return COLL_OK;
}

void coll_temp_release(coll_temp_t *tmp) {
  if (tmp->owned) free(tmp->ptr);
  tmp->ptr = NULL;
  tmp->owned = 0;
}

void coll_abandon(coll_transport_t *t, coll_request_t *req) {
  if (!t || !req) return;
  if (t->ops->abandon) t->ops->abandon(t, req);
  else (void)t->ops->wait(t, req);   /* its own failure is not the one being reported */
}

coll_status_t coll_sendrecv(coll_transport_t *t, int to, const void *sbuf, size_t sbytes,
                            int from, void *rbuf, size_t rbytes, int tag) {
  coll_request_t sreq, rreq;
  coll_status_t st = t->ops->irecv(t, from, rbuf, rbytes, tag, &rreq);
  if (st != COLL_OK) return st;
  st = t->ops->isend(t, to, sbuf, sbytes, tag, &sreq);
  if (st != COLL_OK) {
    coll_abandon(t, &rreq);
    return st;
  }
  st = t->ops->wait(t, &rreq);
  if (st != COLL_OK) {
    coll_abandon(t, &sreq);
    return st;
  }
  return t->ops->wait(t, &sreq);
}
