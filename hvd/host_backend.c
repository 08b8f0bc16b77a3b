/* hvd/host_backend.c: the host-memory backend (hvd_host_ops): collectives on host buffers
   over the MPI transports, and tensor fusion.

   Tensor fusion: the coordinator's plan (hvd/negotiation.c) groups allreduce responses
   of the same dtype and op, up to rank 0's HVD_FUSION_THRESHOLD bytes; a group is packed
   into the fusion buffer, reduced by one collective, and unpacked, which turns many
   small latency-bound allreduces into one bandwidth-bound one. A group of one tensor is
   reduced straight from the user's buffers. Every element goes through the same
   arithmetic fused or not (AVERAGE: sum, then divide element by element), so with a
   reduction order that does not depend on an element's offset (two ranks, or exact
   values) the two give bit-identical results.

   Errors: a failure to allocate an allgather result is agreed by all ranks (one small
   allreduce) before the data moves, so all ranks stop at the same response. A failure
   inside a collective is fatal and reported to the caller; peers learn it through the
   coordinator. */
#include "hvd/hvd_internal.h"
#include "hvd/negotiation.h"
#include "util/huge_pages.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

coll_op_t hvd_coll_op(hvd_op_t op) {
  switch (op) {
    case HVD_MIN: return COLL_MIN;
    case HVD_MAX: return COLL_MAX;
    case HVD_PRODUCT: return COLL_PRODUCT;
    default: return COLL_SUM;   /* SUM, and AVERAGE = SUM then divide */
  }
}

hvd_status_t hvd_status_from_coll(coll_status_t s) {
  switch (s) {
    case COLL_OK: return HVD_OK;
    case COLL_ERR_PEER_LOST: return HVD_ERR_PEER_LOST;
    case COLL_ERR_CANCELLED: return HVD_ERR_SHUTDOWN;
    case COLL_ERR_NO_MEMORY: return HVD_ERR_NO_MEMORY;
    case COLL_ERR_ARG: return HVD_ERR_INVALID_ARGUMENT;
    default: return HVD_ERR_BACKEND;
  }
}

hvd_status_t hvd_fusion_reserve(size_t bytes, char *msg, size_t len) {
  if (bytes <= hvd_g.fusion_cap) return HVD_OK;
  /* Nothing in the buffer outlives a response: the old contents need not move. */
  /* In huge pages (util/huge_pages.h): the MPI library's one-copy transfers pin the
     sender's pages one by one. */
  void *p = util_huge_alloc(bytes);
  if (!p) {
    snprintf(msg, len, "rank %d: cannot grow the fusion buffer to %zu bytes", hvd_g.rank,
             bytes);
    return HVD_ERR_NO_MEMORY;
  }
  util_huge_free(hvd_g.fusion_buf, hvd_g.fusion_cap);
  hvd_g.fusion_buf = p;
  hvd_g.fusion_cap = bytes;
  return HVD_OK;
}

/* The view of the process set a request addresses (0: the world). The set is known here:
   this rank submitted the request after adding it, and sets are never freed before
   hvd_shutdown. */
static hvd_set_view_t view_of(const struct hvd_request *r) {
  hvd_set_view_t v;
  if (!hvd_set_view(r->set, &v)) hvd_set_view(0, &v);
  return v;
}

static coll_status_t allreduce(const hvd_set_view_t *v, const void *send, void *recv,
                               size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (count == 0) return COLL_OK;
  coll_dtype_t dt = (coll_dtype_t)dtype;
  /* Hierarchical allreduce is the world's only (a set spans hosts as it likes). */
  int flat = !hvd_g.hierarchical || v->ranks != NULL;
  /* An average: the ring divides each segment once, on the rank that owns it. */
  if (flat && op == HVD_AVERAGE)
    return coll_allreduce_divided(v->t, send, recv, count, dt, v->size);
  if (flat) return coll_allreduce(v->t, send, recv, count, dt, hvd_coll_op(op));
  coll_status_t s = coll_hierarchical_allreduce(hvd_g.local, hvd_g.cross, send, recv, count,
                                                dt, hvd_coll_op(op));
  if (s == COLL_OK && op == HVD_AVERAGE) coll_divide(recv, count, dt, hvd_g.size);
  return s;
}

static const char *transport_error(const hvd_set_view_t *v) {
  if (v->ranks) return v->t->error;
  if (hvd_g.hierarchical) {
    if (hvd_g.local->error[0]) return hvd_g.local->error;
    if (hvd_g.cross->error[0]) return hvd_g.cross->error;
  }
  return hvd_g.world->error;
}

static void timeline(const hvd_response_t *resp, const char *key, const char *event,
                     double t0, double t1, size_t bytes) {
  (void)resp;
  hvd_timeline_op(key, event, t0, t1, bytes);
}

/* buf[0..count) *= f (floating-point dtypes: the _ex forms refuse the others). */
static void scale(void *buf, size_t count, hvd_dtype_t dtype, double f) {
  if (!HVD_SCALES(f)) return;
  if (dtype == HVD_FLOAT32) {
    float *p = buf;
    for (size_t i = 0; i < count; i++) p[i] = (float)(p[i] * f);
  } else if (dtype == HVD_FLOAT64) {
    double *p = buf;
    for (size_t i = 0; i < count; i++) p[i] *= f;
  } else {
    for (size_t i = 0; i < count; i++)
      coll_element_set(buf, i, (coll_dtype_t)dtype,
                       coll_element_get(buf, i, (coll_dtype_t)dtype) * f);
  }
}

/* Copies every tensor of reqs[0..n) (a grouped request's members one by one) into the
   fusion buffer fb (in) or back out of it (out). */
static void fusion_copy(struct hvd_request **reqs, int n, char *fb, size_t es, int out) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const struct hvd_request *r = reqs[i];
    size_t parts = r->nmembers ? r->nmembers : 1;
    for (size_t m = 0; m < parts; m++) {
      size_t bytes = (r->nmembers ? r->member_count[m] : r->count) * es;
      if (out) coll_copy(r->nmembers ? r->member_recv[m] : r->recvbuf, fb + off, bytes);
      else coll_copy(fb + off, r->nmembers ? r->member_send[m] : r->sendbuf, bytes);
      off += bytes;
    }
  }
}

/* Allreduce of reqs[0..n) (n >= 1, all the same dtype/op). */
static hvd_status_t run_allreduce(struct hvd_request **reqs, const hvd_response_t *resp,
                                  int n, char *msg, size_t len) {
  hvd_dtype_t dtype = reqs[0]->dtype;
  hvd_op_t op = reqs[0]->op;
  size_t es = hvd_dtype_size(dtype);
  double t0 = util_now_us();
  coll_status_t cs;
  double t1 = t0, t2, t3;
  hvd_set_view_t v = view_of(reqs[0]);   /* a fused group is of one set (the plan) */
  double pre = reqs[0]->prescale, post = reqs[0]->postscale;
  if (n == 1 && reqs[0]->nmembers == 0) {
    const void *send = reqs[0]->sendbuf;
    if (HVD_SCALES(pre)) {   /* the input is the caller's: scale a copy, in recvbuf */
      if (send != reqs[0]->recvbuf) coll_copy(reqs[0]->recvbuf, send, reqs[0]->count * es);
      scale(reqs[0]->recvbuf, reqs[0]->count, dtype, pre);
      send = reqs[0]->recvbuf;
    }
    cs = allreduce(&v, send, reqs[0]->recvbuf, reqs[0]->count, dtype, op);
    if (cs == COLL_OK) scale(reqs[0]->recvbuf, reqs[0]->count, dtype, post);
    t2 = t3 = util_now_us();
  } else {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += reqs[i]->count;
    hvd_status_t rs = hvd_fusion_reserve(total * es, msg, len);
    if (rs != HVD_OK) return rs;
    char *fb = hvd_g.fusion_buf;
    fusion_copy(reqs, n, fb, es, 0);
    scale(fb, total, dtype, pre);
    t1 = util_now_us();
    cs = allreduce(&v, fb, fb, total, dtype, op);
    t2 = util_now_us();
    if (cs == COLL_OK) scale(fb, total, dtype, post);
    if (cs == COLL_OK) fusion_copy(reqs, n, fb, es, 1);
    t3 = util_now_us();
  }
  if (hvd_g.timeline)
    for (int i = 0; i < n; i++) {
      size_t bytes = reqs[i]->count * es;
      if (n > 1) timeline(&resp[i], reqs[i]->key, "MEMCPY_IN_FUSION_BUFFER", t0, t1, bytes);
      timeline(&resp[i], reqs[i]->key, "ALLREDUCE", t1, t2, bytes);
      if (n > 1) timeline(&resp[i], reqs[i]->key, "MEMCPY_OUT_FUSION_BUFFER", t2, t3, bytes);
    }
  if (hvd_g.cfg.log_level <= HVD_LOG_TRACE) {
    size_t total_bytes = 0;
    for (int i = 0; i < n; i++) total_bytes += reqs[i]->count * es;
    hvd_log(HVD_LOG_TRACE, "allreduce of %d tensor(s) from \"%s\", %zu bytes, %s: %.1f us",
            n, reqs[0]->key, total_bytes, n > 1 ? "fused" : "unfused", t2 - t1);
  }
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK)
    snprintf(msg, len, "allreduce of tensor \"%s\"%s failed on rank %d: %s", reqs[0]->key,
             n > 1 ? " (fused with others)" : "", hvd_g.rank, transport_error(&v));
  return s;
}

hvd_status_t hvd_host_allreduce(void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                char *msg, size_t len) {
  hvd_set_view_t v;
  hvd_set_view(0, &v);
  hvd_status_t s = hvd_status_from_coll(allreduce(&v, buf, buf, count, dtype, op));
  if (s != HVD_OK) snprintf(msg, len, "rank %d: %s", hvd_g.rank, transport_error(&v));
  return s;
}

/* Agree before moving data: a rank without memory for a result must not leave the
   others inside the collective. Returns HVD_OK when every rank has its memory (*cs: the
   agreement's own status), else the status of this rank, with *agreed set. bytes_text:
   what this rank needed ("N bytes"), for its message. */
static hvd_status_t agree_allocation(int ok, const struct hvd_request *r,
                                     const char *bytes_text, coll_status_t *cs, char *msg,
                                     size_t len, int *agreed) {
  int32_t failed = ok ? -1 : hvd_g.rank;   /* the highest failing rank, or -1 */
  *cs = COLL_OK;
  hvd_set_view_t v = view_of(r);
  if (v.size > 1) *cs = coll_allreduce(v.t, &failed, &failed, 1, COLL_INT32, COLL_MAX);
  if (*cs != COLL_OK || failed < 0) return HVD_OK;
  /* Only the failing rank knows its size: the others would name their own. */
  if (failed == hvd_g.rank)
    snprintf(msg, len, "rank %d could not allocate %s for the result of %s \"%s\"",
             (int)failed, bytes_text, hvd_kind_name(r->kind), r->key);
  else
    snprintf(msg, len, "rank %d could not allocate the memory for the result of %s \"%s\" "
             "(its own message names the size)", (int)failed, hvd_kind_name(r->kind), r->key);
  *agreed = 1;
  return failed == hvd_g.rank ? HVD_ERR_NO_MEMORY : HVD_ERR_SHUTDOWN;
}

/* Alltoall with per-rank splits: the splits go first (an alltoall of one count per
   rank), so every rank knows what it receives from whom before the data moves. */
static hvd_status_t run_alltoall(struct hvd_request *r, const hvd_response_t *resp,
                                 char *msg, size_t len, int *agreed) {
  hvd_set_view_t v = view_of(r);
  const int N = v.size;
  size_t es = hvd_dtype_size(r->dtype), total = 0;
  double t0 = util_now_us();
  size_t *recv = malloc((size_t)N * sizeof(*recv));
  if (!recv) {
    snprintf(msg, len, "rank %d: out of memory for alltoall \"%s\"", hvd_g.rank, r->key);
    return HVD_ERR_NO_MEMORY;
  }
  _Static_assert(sizeof(size_t) == 8, "splits travel as 8-byte integers");
  coll_status_t cs = coll_alltoall(v.t, r->splits, recv, 1, COLL_INT64);
  void *out = NULL;
  if (cs == COLL_OK) {
    /* Every sender checked its splits against its count, but what all of them send
       to one rank may still exceed a size_t: that is a result this rank cannot hold. */
    int fits = 1;
    for (int j = 0; j < N; j++) {
      fits = fits && recv[j] <= SIZE_MAX / es - total;
      total += recv[j];
    }
    char need[96];
    if (fits) snprintf(need, sizeof(need), "%zu bytes", total * es);
    else snprintf(need, sizeof(need), "more than %zu bytes", SIZE_MAX);
    out = fits ? malloc(total * es > 0 ? total * es : 1) : NULL;
    hvd_status_t fs = agree_allocation(out != NULL, r, need, &cs, msg, len, agreed);
    if (fs != HVD_OK) {
      free(out);
      free(recv);
      return fs;
    }
  }
  if (cs == COLL_OK)
    cs = coll_alltoallv(v.t, r->sendbuf, r->splits, out, recv, (coll_dtype_t)r->dtype);
  timeline(resp, r->key, "ALLTOALL", t0, util_now_us(), total * es);
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK) {
    snprintf(msg, len, "alltoall of tensor \"%s\" failed on rank %d: %s", r->key,
             hvd_g.rank, v.t->error);
    free(out);
    free(recv);
  } else {
    r->result = out;
    r->result_count = total;
    r->result_splits = recv;
    r->results = HVD_RESULT_OUT | HVD_RESULT_COUNT | HVD_RESULT_SPLITS;
  }
  return s;
}

/* Reduce-scatter: rank j receives segment j of the reduction, the first count % size
   segments one element longer. */
static hvd_status_t run_reducescatter(struct hvd_request *r, const hvd_response_t *resp,
                                      char *msg, size_t len) {
  hvd_set_view_t v = view_of(r);
  const int N = v.size;
  double t0 = util_now_us();
  size_t *counts = malloc((size_t)N * sizeof(*counts));
  if (!counts) {
    snprintf(msg, len, "rank %d: out of memory for reducescatter \"%s\"", hvd_g.rank, r->key);
    return HVD_ERR_NO_MEMORY;
  }
  for (int j = 0; j < N; j++)
    counts[j] = r->count / (size_t)N + ((size_t)j < r->count % (size_t)N);
  coll_status_t cs = COLL_OK;
  const void *send = r->sendbuf;
  void *scaled = NULL;   /* the input is the caller's: prescale a copy */
  if (HVD_SCALES(r->prescale) && r->count > 0) {
    size_t bytes = r->count * hvd_dtype_size(r->dtype);
    if ((scaled = malloc(bytes)) == NULL) {
      free(counts);
      snprintf(msg, len, "rank %d: out of memory for reducescatter \"%s\"", hvd_g.rank,
               r->key);
      return HVD_ERR_NO_MEMORY;
    }
    coll_copy(scaled, send, bytes);
    scale(scaled, r->count, r->dtype, r->prescale);
    send = scaled;
  }
  if (r->count > 0)
    cs = coll_reduce_scatter(v.t, send, r->recvbuf, counts, (coll_dtype_t)r->dtype,
                             hvd_coll_op(r->op));
  free(scaled);
  size_t mine = counts[v.rank];
  if (cs == COLL_OK && r->op == HVD_AVERAGE && mine > 0)
    coll_divide(r->recvbuf, mine, (coll_dtype_t)r->dtype, N);
  if (cs == COLL_OK && mine > 0) scale(r->recvbuf, mine, r->dtype, r->postscale);
  free(counts);
  timeline(resp, r->key, "REDUCESCATTER", t0, util_now_us(),
           r->count * hvd_dtype_size(r->dtype));
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK)
    snprintf(msg, len, "reducescatter of tensor \"%s\" failed on rank %d: %s", r->key,
             hvd_g.rank, v.t->error);
  else {
    r->result_count = mine;
    r->results = HVD_RESULT_COUNT;
  }
  return s;
}

static hvd_status_t run_allgather(struct hvd_request *r, const hvd_response_t *resp,
                                  char *msg, size_t len, int *agreed) {
  size_t es = hvd_dtype_size(r->dtype);
  size_t total = (size_t)resp->count;
  hvd_set_view_t v = view_of(r);
  size_t *counts = malloc((size_t)v.size * sizeof(size_t));
  void *out = NULL;
  if (counts) {
    /* The response counts every world rank (0 outside the set). */
    for (int i = 0; i < v.size; i++)
      counts[i] = (size_t)hvd_response_count(resp, v.ranks ? v.ranks[i] : i);
    out = malloc(total * es > 0 ? total * es : 1);
  }
  char need[64];
  snprintf(need, sizeof(need), "%zu bytes", total * es);
  coll_status_t cs;
  hvd_status_t fs = agree_allocation(out != NULL, r, need, &cs, msg, len, agreed);
  if (fs != HVD_OK) {
    free(out);
    free(counts);
    return fs;
  }
  double t0 = util_now_us();
  if (cs == COLL_OK) cs = coll_allgatherv(v.t, r->sendbuf, out, counts, (coll_dtype_t)r->dtype);
  double t1 = util_now_us();
  free(counts);
  timeline(resp, r->key, "ALLGATHER", t0, t1, total * es);
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK) {
    snprintf(msg, len, "allgather of tensor \"%s\" failed on rank %d: %s", r->key,
             hvd_g.rank, v.t->error);
    free(out);
  } else {
    r->result = out;
    r->result_count = total;
    r->results = HVD_RESULT_OUT | HVD_RESULT_COUNT;
  }
  return s;
}

static hvd_status_t run_broadcast(struct hvd_request *r, const hvd_response_t *resp,
                                  char *msg, size_t len) {
  double t0 = util_now_us();
  coll_status_t cs = COLL_OK;
  hvd_set_view_t v = view_of(r);
  if (r->count > 0)
    cs = coll_broadcast(v.t, r->recvbuf, r->count, (coll_dtype_t)r->dtype, r->root);
  timeline(resp, r->key, "BROADCAST", t0, util_now_us(), r->count * hvd_dtype_size(r->dtype));
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK)
    snprintf(msg, len, "broadcast of tensor \"%s\" failed on rank %d: %s", r->key,
             hvd_g.rank, v.t->error);
  return s;
}

static hvd_status_t run_barrier(struct hvd_request *r, const hvd_response_t *resp,
                                char *msg, size_t len) {
  double t0 = util_now_us();
  hvd_set_view_t v = view_of(r);
  hvd_status_t s = hvd_status_from_coll(coll_barrier(v.t));
  timeline(resp, r->key, "BARRIER", t0, util_now_us(), 0);
  if (s != HVD_OK)
    snprintf(msg, len, "barrier failed on rank %d: %s", hvd_g.rank, v.t->error);
  return s;
}

const hvd_backend_ops_t hvd_host_ops = {
  .name = "host memory",
  .allreduce = run_allreduce,
  .broadcast = run_broadcast,
  .allgather = run_allgather,
  .barrier = run_barrier,
  .alltoall = run_alltoall,
  .reducescatter = run_reducescatter,
};
