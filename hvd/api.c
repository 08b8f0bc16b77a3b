/* hvd/api.c: what user threads do. Validate, record the request in the in-flight
   table (hvd/requests.c: for duplicate names) and the submission queue, wake the
   background thread, and wait for completion. No MPI here: only the background loop
   talks to peers (a waiting caller may run its turns: hvd_background_help). */
#include "hvd/hvd_internal.h"
#include "hvd/background.h"
#include "hvd/requests.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define HVD_WAIT_SPIN_US 100.0

static hvd_status_t check_common(const char *name, hvd_dtype_t dtype, size_t count,
                                 const void *buf1, const void *buf2, const char *what) {
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "%s called before hvd_init() or after hvd_shutdown()", what);
  if (name != NULL) {
    size_t n = strnlen(name, HVD_NAME_MAX + 1);
    if (n > HVD_NAME_MAX)
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                           "%s: tensor name \"%.40s...\" is longer than %d bytes", what,
                           name, HVD_NAME_MAX);
    if (n == 0)
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                           "%s: tensor name is empty (pass NULL for an automatic name)",
                           what);
    /* Control characters would be invisible in every message and the timeline, and
       a leading one could meet the keys of unnamed calls (HVD_AUTO_KEY_MARK). */
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)name[i];
      if (ch < 0x20 || ch == 0x7f)
        return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                             "%s: tensor name \"%.*s...\" has control character 0x%02x at "
                             "byte %zu (names are printable text)", what, (int)i, name, ch,
                             i);
    }
  }
  if (hvd_dtype_size(dtype) == 0)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "%s: invalid dtype %d (expected HVD_FLOAT32 .. HVD_INT64)", what,
                         (int)dtype);
  if (count > 0 && (buf1 == NULL || buf2 == NULL))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "%s: NULL buffer with count %zu (a buffer may be NULL only when "
                         "count is 0)", what, count);
  if (count > (SIZE_MAX / 2) / hvd_dtype_size(dtype))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: count %zu is too large", what,
                         count);
  return HVD_OK;
}

static hvd_status_t check_op(hvd_op_t op, const char *what) {
  if ((unsigned)op > HVD_PRODUCT)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "%s: invalid op %d (expected HVD_SUM .. HVD_PRODUCT)", what, (int)op);
  return HVD_OK;
}

/* Records r (filled by the caller except key) under name; on success r belongs to the
   runtime until hvd_wait/hvd_test. */
static hvd_status_t submit(struct hvd_request *r, const char *name) {
  pthread_mutex_lock(&hvd_g.mu);
  if (!atomic_load(&hvd_g_initialized)) {
    pthread_mutex_unlock(&hvd_g.mu);
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "%s called before hvd_init() or after hvd_shutdown()",
                         hvd_kind_name(r->kind));
  }
  if (hvd_g.stopped) {
    hvd_status_t s = hvd_set_error(hvd_g.stop_status, "%s", hvd_g.stop_msg);
    pthread_mutex_unlock(&hvd_g.mu);
    return s;
  }
  hvd_call_options_apply(r, name);   /* the key, and an _ex call's set and factors */
  if (hvd_inflight_find(r->key) != NULL) {
    hvd_status_t s = hvd_set_error(HVD_ERR_DUPLICATE_NAME,
                                   "%s: tensor \"%s\" is already in flight on rank %d; "
                                   "wait for it before submitting the name again",
                                   hvd_kind_name(r->kind), r->key, hvd_g.rank);
    pthread_mutex_unlock(&hvd_g.mu);
    return s;
  }
  hvd_inflight_insert(r);
  r->next_queue = NULL;
  if (hvd_g.queue_tail) hvd_g.queue_tail->next_queue = r;
  else hvd_g.queue_head = r;
  hvd_g.queue_tail = r;
  atomic_fetch_add(&hvd_g.queued, 1);
  /* A blocking call's caller runs the turn itself (hvd_background_help), and a futex
     wake-up of the background thread would cost it the core; hvd_wait wakes the thread
     if it leaves the request behind. */
  if (hvd_g.bg_waiting && !hvd_caller_will_help) pthread_cond_signal(&hvd_g.work_cv);
  pthread_mutex_unlock(&hvd_g.mu);
  return HVD_OK;
}

static hvd_status_t finish_submit(struct hvd_request *r, const char *name,
                                  hvd_request_t *req) {
  /* Device memory: the event the collective's stream will wait for, recorded now, on
     this thread, before the background thread can see r (hvd/device.c). */
  hvd_device_submit(r);
  hvd_status_t s = submit(r, name);
  if (s != HVD_OK) {
    hvd_request_free(r);
    return s;
  }
  *req = r;
  return HVD_OK;
}

/* A checked allreduce-like request (allreduce, reducescatter), not yet submitted. */
static hvd_status_t reduction_new(hvd_kind_t kind, const char *name, const void *sendbuf,
                                  void *recvbuf, size_t count, hvd_dtype_t dtype,
                                  hvd_op_t op, struct hvd_request **out) {
  char what[32];
  snprintf(what, sizeof what, "hvd_%s", hvd_kind_name(kind));
  hvd_status_t s = check_common(name, dtype, count, sendbuf, recvbuf, what);
  if (s == HVD_OK) s = check_op(op, what);
  if (s != HVD_OK) return s;
  struct hvd_request *r = *out = hvd_request_new(kind);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
  r->sendbuf = sendbuf;
  r->recvbuf = recvbuf;
  r->count = count;
  r->dtype = dtype;
  r->op = op;
  return HVD_OK;
}

hvd_status_t hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                                 size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                 hvd_request_t *req) {
  if (req == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_allreduce_async: req is NULL");
  *req = NULL;
  struct hvd_request *r;
  hvd_status_t s = reduction_new(HVD_KIND_ALLREDUCE, name, sendbuf, recvbuf, count, dtype,
                                 op, &r);
  return s != HVD_OK ? s : finish_submit(r, name, req);
}

/* hvd_grad_buckets' float16 compression of device gradients (hvd_internal.h). */
hvd_status_t hvd_allreduce_async_fp16(const char *name, const float *src, uint16_t *half,
                                      float *dst, size_t count, hvd_op_t op, float div,
                                      hvd_request_t *req) {
  *req = NULL;
  struct hvd_request *r;
  hvd_status_t s = reduction_new(HVD_KIND_ALLREDUCE, name, half, half, count, HVD_FLOAT16,
                                 op, &r);
  if (s != HVD_OK) return s;
  r->half_src = src;
  r->half_dst = dst;
  r->half_div = div;
  return finish_submit(r, name, req);
}

hvd_status_t hvd_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                           size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  hvd_request_t req = NULL;
  hvd_caller_will_help = 1;
  hvd_status_t s = hvd_allreduce_async(name, sendbuf, recvbuf, count, dtype, op, &req);
  hvd_caller_will_help = 0;
  return s != HVD_OK ? s : hvd_wait(req);
}

hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count,
                                 hvd_dtype_t dtype, int root, hvd_request_t *req) {
  if (req == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_broadcast_async: req is NULL");
  *req = NULL;
  hvd_status_t s = check_common(name, dtype, count, buf, buf, "hvd_broadcast");
  if (s != HVD_OK) return s;
  if (root < 0 || root >= hvd_call_size())
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_broadcast: root %d is not a rank (size is %d)", root,
                         hvd_call_size());
  struct hvd_request *r = hvd_request_new(HVD_KIND_BROADCAST);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_broadcast: out of memory");
  r->sendbuf = buf;
  r->recvbuf = buf;
  r->count = count;
  r->dtype = dtype;
  r->root = root;
  return finish_submit(r, name, req);
}

hvd_status_t hvd_broadcast(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                           int root) {
  hvd_request_t req = NULL;
  hvd_status_t s = hvd_broadcast_async(name, buf, count, dtype, root, &req);
  return s != HVD_OK ? s : hvd_wait(req);
}

hvd_status_t hvd_allgather(const char *name, const void *sendbuf, size_t count,
                           hvd_dtype_t dtype, void **recvbuf, size_t *recvcount) {
  if (recvbuf == NULL || recvcount == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_allgather: recvbuf and recvcount must not be NULL");
  *recvbuf = NULL;
  *recvcount = 0;
  hvd_status_t s = check_common(name, dtype, count, sendbuf, sendbuf, "hvd_allgather");
  if (s != HVD_OK) return s;
  struct hvd_request *r = hvd_request_new(HVD_KIND_ALLGATHER);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_allgather: out of memory");
  r->sendbuf = sendbuf;
  r->count = count;
  r->dtype = dtype;
  r->gather_out = recvbuf;
  r->gather_count = recvcount;
  hvd_request_t req = NULL;
  if ((s = finish_submit(r, name, &req)) != HVD_OK) return s;
  return hvd_wait(req);
}

hvd_status_t hvd_alltoall_async(const char *name, const void *sendbuf, size_t count,
                                const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                                size_t *recvcount, size_t *recv_splits,
                                hvd_request_t *req) {
  if (req == NULL || recvbuf == NULL || recvcount == NULL || recv_splits == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_alltoall: req, recvbuf, recvcount "
                         "and recv_splits must not be NULL");
  *req = NULL;
  *recvbuf = NULL;
  *recvcount = 0;
  hvd_status_t s = check_common(name, dtype, count, sendbuf, sendbuf, "hvd_alltoall");
  if (s != HVD_OK) return s;
  const int N = hvd_call_size();   /* of the process set, in an _ex call */
  size_t *own = malloc((size_t)N * sizeof(*own));
  if (own == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_alltoall: out of memory");
  /* Each split, and the sum so far, is checked against count before the next one is
     added, so the sum cannot wrap (count is below SIZE_MAX / 2, check_common): splits
     such as {9, SIZE_MAX} with count 8 would otherwise add up to 8 and have a peer
     allocate SIZE_MAX elements. */
  size_t total = 0;
  for (int j = 0; j < N; j++) {
    own[j] = splits ? splits[j] : count / (size_t)N;
    if (own[j] > count) {
      size_t bad = own[j];
      free(own);
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_alltoall: splits[%d] is %zu "
                           "elements, more than the whole buffer (count %zu)", j, bad,
                           count);
    }
    total += own[j];
    if (total > count) {
      free(own);
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_alltoall: splits[0..%d] already "
                           "add up to %zu elements, more than count %zu (the splits must "
                           "add up to count)", j, total, count);
    }
  }
  if (!splits && count % (size_t)N != 0) {
    free(own);
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_alltoall: count %zu does not divide "
                         "by %d ranks (pass splits)", count, N);
  }
  if (total != count) {
    free(own);
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_alltoall: the splits add up to %zu "
                         "elements, count is %zu", total, count);
  }
  struct hvd_request *r = hvd_request_new(HVD_KIND_ALLTOALL);
  if (r == NULL) {
    free(own);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_alltoall: out of memory");
  }
  r->sendbuf = sendbuf;
  r->count = count;
  r->dtype = dtype;
  r->splits = own;
  r->recv_splits = recv_splits;
  r->gather_out = recvbuf;
  r->gather_count = recvcount;
  return finish_submit(r, name, req);
}

hvd_status_t hvd_alltoall(const char *name, const void *sendbuf, size_t count,
                          const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                          size_t *recvcount, size_t *recv_splits) {
  hvd_request_t req = NULL;
  hvd_status_t s = hvd_alltoall_async(name, sendbuf, count, splits, dtype, recvbuf,
                                      recvcount, recv_splits, &req);
  return s != HVD_OK ? s : hvd_wait(req);
}

hvd_status_t hvd_reducescatter_async(const char *name, const void *sendbuf, size_t count,
                                     hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                     size_t *recvcount, hvd_request_t *req) {
  if (req == NULL || recvcount == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_reducescatter: req and recvcount must not be NULL");
  *req = NULL;
  *recvcount = 0;
  struct hvd_request *r;
  hvd_status_t s = reduction_new(HVD_KIND_REDUCESCATTER, name, sendbuf, recvbuf, count,
                                 dtype, op, &r);
  if (s != HVD_OK) return s;
  r->gather_count = recvcount;
  return finish_submit(r, name, req);
}

hvd_status_t hvd_reducescatter(const char *name, const void *sendbuf, size_t count,
                               hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                               size_t *recvcount) {
  hvd_request_t req = NULL;
  hvd_status_t s = hvd_reducescatter_async(name, sendbuf, count, dtype, op, recvbuf,
                                           recvcount, &req);
  return s != HVD_OK ? s : hvd_wait(req);
}

/* One request for the whole group, named by its first name: negotiated as one unit and
   reduced as one fused collective. root carries a digest of the member counts, so
   ranks that split the same total differently get a mismatch. */
hvd_status_t hvd_grouped_allreduce_async(size_t n, const char *const *names,
                                         const void *const *sendbufs, void *const *recvbufs,
                                         const size_t *counts, hvd_dtype_t dtype, hvd_op_t op,
                                         hvd_request_t *req) {
  const char *what = "hvd_grouped_allreduce";
  if (req == NULL || n == 0 || sendbufs == NULL || recvbufs == NULL || counts == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: req, sendbufs, recvbufs and counts "
                         "must not be NULL, and n (%zu) at least 1", what, n);
  *req = NULL;
  size_t total = 0;
  uint32_t digest = 2166136261u;
  hvd_status_t s = check_op(op, what);
  for (size_t i = 0; i < n && s == HVD_OK; i++) {
    /* Only the first name keys the group; the others are checked like any name. */
    s = check_common(names ? names[i] : NULL, dtype, counts[i], sendbufs[i], recvbufs[i],
                     what);
    total += counts[i];
    digest = (digest ^ (uint32_t)counts[i]) * 16777619u;
  }
  if (s != HVD_OK) return s;
  struct hvd_request *r = hvd_request_new(HVD_KIND_ALLREDUCE);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
  r->member_send = malloc(n * sizeof(*r->member_send));
  r->member_recv = malloc(n * sizeof(*r->member_recv));
  r->member_count = malloc(n * sizeof(*r->member_count));
  if (!r->member_send || !r->member_recv || !r->member_count) {
    hvd_request_free(r);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
  }
  for (size_t i = 0; i < n; i++) {
    r->member_send[i] = sendbufs[i];
    r->member_recv[i] = recvbufs[i];
    r->member_count[i] = counts[i];
  }
  r->nmembers = n;
  r->sendbuf = sendbufs[0];
  r->recvbuf = recvbufs[0];
  r->count = total;
  r->dtype = dtype;
  r->op = op;
  r->root = (int)(digest ^ (uint32_t)n) & 0x7fffffff;
  return finish_submit(r, names ? names[0] : NULL, req);
}

hvd_status_t hvd_grouped_allreduce(size_t n, const char *const *names,
                                   const void *const *sendbufs, void *const *recvbufs,
                                   const size_t *counts, hvd_dtype_t dtype, hvd_op_t op) {
  hvd_request_t req = NULL;
  hvd_status_t s = hvd_grouped_allreduce_async(n, names, sendbufs, recvbufs, counts, dtype,
                                               op, &req);
  return s != HVD_OK ? s : hvd_wait(req);
}

hvd_status_t hvd_barrier(void) {
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "hvd_barrier called before hvd_init() or after hvd_shutdown()");
  struct hvd_request *r = hvd_request_new(HVD_KIND_BARRIER);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_barrier: out of memory");
  hvd_request_t req = NULL;
  hvd_status_t s = finish_submit(r, NULL, &req);
  if (s != HVD_OK) return s;
  return hvd_wait(req);
}

/* Join: one request under an automatic key (every rank joins the same number of times,
   so the n-th joins meet). The coordinator answers it once every rank has joined;
   until then the background thread stands in for this rank with zeros. */
hvd_status_t hvd_join(int *last_rank) {
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "hvd_join called before hvd_init() or after hvd_shutdown()");
  struct hvd_request *r = hvd_request_new(HVD_KIND_JOIN);
  if (r == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_join: out of memory");
  r->last_rank = last_rank;
  hvd_request_t req = NULL;
  hvd_status_t s = finish_submit(r, NULL, &req);
  if (s != HVD_OK) return s;
  return hvd_wait(req);
}

/* Frees a completed request (or, while the executor still holds it, leaves that to
   the executor) and reports its status to this thread. Takes hvd_g.mu: the completer
   wrote status and error before done under it, and held is guarded by it. */
static hvd_status_t request_finish(struct hvd_request *r) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_status_t s = r->status;
  if (s != HVD_OK) hvd_set_error_text(r->error);
  int keep = r->held;
  if (keep) r->abandoned = 1;
  pthread_mutex_unlock(&hvd_g.mu);
  if (!keep) hvd_request_free(r);
  return s;
}

hvd_status_t hvd_wait(hvd_request_t req) {
  if (req == NULL) return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_wait: req is NULL");
  /* Run the background loop's turns here while they make progress: no hand-over to the
     background thread and back (hvd/background.c). */
  if (!atomic_load(&req->done)) hvd_background_help(req);
  /* A short operation finishes within tens of microseconds: poll that long (yielding
     the core) before sleeping, since a futex wake-up costs about as much again. */
  double until = util_now_us() + HVD_WAIT_SPIN_US;
  while (!atomic_load(&req->done) && util_now_us() < until) sched_yield();
  if (!atomic_load(&req->done)) {
    pthread_mutex_lock(&hvd_g.mu);
    while (!atomic_load(&req->done)) pthread_cond_wait(&hvd_g.done_cv, &hvd_g.mu);
    pthread_mutex_unlock(&hvd_g.mu);
  }
  return request_finish(req);
}

/* A device collective (hvd/device.c) gets a done_event once its work is queued on the
   GPU: from then on the caller's stream can wait for it instead of this thread. The
   request is then left to the device path to free (abandoned), as a waiter leaves a
   held request. Anything else, or a failed stream wait, waits as hvd_wait does. */
hvd_status_t hvd_wait_stream(hvd_request_t req, void *stream) {
  if (req == NULL) return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_wait_stream: req is NULL");
  if (hvd_device_host_only()) return hvd_wait(req);   /* no device collective here */
  pthread_mutex_lock(&hvd_g.mu);
  while (!atomic_load(&req->done) && req->done_event == NULL)
    pthread_cond_wait(&hvd_g.done_cv, &hvd_g.mu);
  if (!atomic_load(&req->done) && hvd_device_stream_wait(stream, req->done_event) == 0) {
    req->abandoned = 1;
    pthread_mutex_unlock(&hvd_g.mu);
    return HVD_OK;
  }
  pthread_mutex_unlock(&hvd_g.mu);
  return hvd_wait(req);
}

hvd_status_t hvd_test(hvd_request_t req, int *done) {
  if (req == NULL || done == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_test: req and done must not be NULL");
  pthread_mutex_lock(&hvd_g.mu);
  *done = req->done;
  pthread_mutex_unlock(&hvd_g.mu);
  return *done ? request_finish(req) : HVD_OK;
}
