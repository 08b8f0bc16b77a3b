/* hvd/fusion.c: runs one ordered response list, the same on every rank.

   Tensor fusion: consecutive allreduce responses of the same dtype and op are packed
   into the fusion buffer, up to HVD_FUSION_THRESHOLD bytes, reduced by one collective,
   and unpacked, which turns many small latency-bound allreduces into one bandwidth-bound
   one. A group of one tensor (and any tensor larger than the threshold) is reduced
   straight from the user's buffers. Every element goes through the same arithmetic
   fused or not (AVERAGE: sum, then divide element by element), so with a reduction
   order that does not depend on an element's offset (two ranks, or exact values) the
   two give bit-identical results.

   Errors: a mismatch arrives as a failed response and only fails that request. A
   failure to allocate an allgather result is agreed by all ranks (one small allreduce)
   before the data moves, so all ranks stop at the same response. A failure inside a
   collective is fatal and reported to the caller; peers learn it through the
   coordinator. */
#include "hvd/hvd_internal.h"

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

static coll_status_t allreduce(const void *send, void *recv, size_t count,
                               hvd_dtype_t dtype, hvd_op_t op) {
  coll_status_t s;
  if (count == 0) return COLL_OK;
  if (hvd_g.hierarchical)
    s = coll_hierarchical_allreduce(hvd_g.local, hvd_g.cross, send, recv, count,
                                    (coll_dtype_t)dtype, hvd_coll_op(op));
  else
    s = coll_allreduce(hvd_g.world, send, recv, count, (coll_dtype_t)dtype, hvd_coll_op(op));
  if (s == COLL_OK && op == HVD_AVERAGE)
    coll_divide(recv, count, (coll_dtype_t)dtype, hvd_g.size);
  return s;
}

static const char *transport_error(void) {
  if (hvd_g.hierarchical) {
    if (hvd_g.local->error[0]) return hvd_g.local->error;
    if (hvd_g.cross->error[0]) return hvd_g.cross->error;
  }
  return hvd_g.world->error;
}

static void complete(struct hvd_request *r, hvd_status_t s, const char *msg) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_request_complete(r, s, msg);
  pthread_mutex_unlock(&hvd_g.mu);
}

static void timeline(const hvd_response_t *resp, const char *key, const char *event,
                     double t0, double t1, size_t bytes) {
  (void)resp;
  if (hvd_g.timeline) hvd_timeline_event(hvd_g.timeline, key, event, t0, t1, bytes);
}

/* Allreduce of reqs[0..n) (n >= 1, all the same dtype/op). */
static hvd_status_t run_allreduce(struct hvd_request **reqs, const hvd_response_t *resp,
                                  int n, char *msg, size_t len) {
  hvd_dtype_t dtype = reqs[0]->dtype;
  hvd_op_t op = reqs[0]->op;
  size_t es = hvd_dtype_size(dtype);
  double t0 = util_now_us();
  if (hvd_g.timeline)
    for (int i = 0; i < n; i++) {
      timeline(&resp[i], reqs[i]->key, "NEGOTIATE", resp[i].first_seen_us, resp[i].ready_us, 0);
      timeline(&resp[i], reqs[i]->key, "QUEUE", resp[i].ready_us, t0, 0);
    }
  coll_status_t cs;
  double t1 = t0, t2, t3;
  if (n == 1) {
    cs = allreduce(reqs[0]->sendbuf, reqs[0]->recvbuf, reqs[0]->count, dtype, op);
    t2 = t3 = util_now_us();
  } else {
    size_t off = 0, total = 0;
    char *fb = hvd_g.fusion_buf;
    for (int i = 0; i < n; i++) {
      memcpy(fb + off, reqs[i]->sendbuf, reqs[i]->count * es);
      off += reqs[i]->count * es;
      total += reqs[i]->count;
    }
    t1 = util_now_us();
    cs = allreduce(fb, fb, total, dtype, op);
    t2 = util_now_us();
    if (cs == COLL_OK) {
      off = 0;
      for (int i = 0; i < n; i++) {
        memcpy(reqs[i]->recvbuf, fb + off, reqs[i]->count * es);
        off += reqs[i]->count * es;
      }
    }
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
             n > 1 ? " (fused with others)" : "", hvd_g.rank, transport_error());
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < n; i++) hvd_request_complete(reqs[i], s, msg);
  pthread_mutex_unlock(&hvd_g.mu);
  return s;
}

/* In-place host allreduce, for device.c's staging when the build has CUDA but no NCCL. */
static hvd_status_t host_allreduce(void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                   char *msg, size_t len) {
  hvd_status_t s = hvd_status_from_coll(allreduce(buf, buf, count, dtype, op));
  if (s != HVD_OK) snprintf(msg, len, "rank %d: %s", hvd_g.rank, transport_error());
  return s;
}

/* Allreduce of reqs[0..n) in CUDA device memory (device.c: NCCL, flat or hierarchical,
   fusion in device memory). */
static hvd_status_t run_allreduce_device(struct hvd_request **reqs,
                                         const hvd_response_t *resp, int n, char *msg,
                                         size_t len) {
  double t0 = util_now_us();
  hvd_status_t s = hvd_device_allreduce(reqs, n, host_allreduce, msg, len);
  double t1 = util_now_us();
  if (hvd_g.timeline)
    for (int i = 0; i < n; i++) {
      timeline(&resp[i], reqs[i]->key, "NEGOTIATE", resp[i].first_seen_us, resp[i].ready_us, 0);
      timeline(&resp[i], reqs[i]->key, "QUEUE", resp[i].ready_us, t0, 0);
      timeline(&resp[i], reqs[i]->key,
               hvd_g.hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE", t0, t1,
               reqs[i]->count * hvd_dtype_size(reqs[i]->dtype));
    }
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < n; i++) hvd_request_complete(reqs[i], s, msg);
  pthread_mutex_unlock(&hvd_g.mu);
  return s;
}

static int on_device(const struct hvd_request *r) {
  return hvd_device_is_device_ptr(r->recvbuf) || hvd_device_is_device_ptr(r->sendbuf);
}

static hvd_status_t run_allgather(struct hvd_request *r, const hvd_response_t *resp,
                                  char *msg, size_t len, int *agreed) {
  size_t es = hvd_dtype_size(r->dtype);
  size_t total = (size_t)resp->count;
  size_t *counts = malloc((size_t)hvd_g.size * sizeof(size_t));
  void *out = NULL;
  if (counts) {
    /* resp->counts points into the response message, at any alignment (UBSan:
       misaligned int64_t load): each is copied out. */
    for (int i = 0; i < hvd_g.size; i++) {
      int64_t c;
      memcpy(&c, (const char *)resp->counts + (size_t)i * sizeof c, sizeof c);
      counts[i] = (size_t)c;
    }
    out = malloc(total * es > 0 ? total * es : 1);
  }
  /* Agree before moving data: a rank without memory must not leave the others inside
     the allgather. The highest failing rank, or -1. */
  int32_t failed = out ? -1 : hvd_g.rank;
  coll_status_t cs = COLL_OK;
  if (hvd_g.size > 1)
    cs = coll_allreduce(hvd_g.world, &failed, &failed, 1, COLL_INT32, COLL_MAX);
  if (cs == COLL_OK && failed >= 0) {
    snprintf(msg, len, "rank %d could not allocate %zu bytes for the result of allgather "
             "\"%s\"", (int)failed, total * es, r->key);
    *agreed = 1;
    complete(r, failed == hvd_g.rank ? HVD_ERR_NO_MEMORY : HVD_ERR_SHUTDOWN, msg);
    free(out);
    free(counts);
    return failed == hvd_g.rank ? HVD_ERR_NO_MEMORY : HVD_ERR_SHUTDOWN;
  }
  double t0 = util_now_us();
  if (cs == COLL_OK) cs = coll_allgatherv(hvd_g.world, r->sendbuf, out, counts,
                                          (coll_dtype_t)r->dtype);
  double t1 = util_now_us();
  free(counts);
  if (hvd_g.timeline) {
    timeline(resp, r->key, "NEGOTIATE", resp->first_seen_us, resp->ready_us, 0);
    timeline(resp, r->key, "QUEUE", resp->ready_us, t0, 0);
    timeline(resp, r->key, "ALLGATHER", t0, t1, total * es);
  }
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK) {
    snprintf(msg, len, "allgather of tensor \"%s\" failed on rank %d: %s", r->key,
             hvd_g.rank, hvd_g.world->error);
    free(out);
  } else {
    *r->gather_out = out;
    *r->gather_count = total;
  }
  complete(r, s, msg);
  return s;
}

static hvd_status_t run_single(struct hvd_request *r, const hvd_response_t *resp,
                               char *msg, size_t len) {
  double t0 = util_now_us();
  coll_status_t cs = COLL_OK;
  size_t bytes = r->count * hvd_dtype_size(r->dtype);
  if (r->kind == HVD_KIND_BROADCAST && on_device(r)) {
    hvd_status_t ds = hvd_device_broadcast(r, msg, len);
    complete(r, ds, msg);
    return ds;
  } else if (r->kind == HVD_KIND_BROADCAST) {
    if (r->count > 0)
      cs = coll_broadcast(hvd_g.world, r->recvbuf, r->count, (coll_dtype_t)r->dtype, r->root);
  } else {
    cs = coll_barrier(hvd_g.world);
  }
  double t1 = util_now_us();
  if (hvd_g.timeline) {
    timeline(resp, r->key, "NEGOTIATE", resp->first_seen_us, resp->ready_us, 0);
    timeline(resp, r->key, "QUEUE", resp->ready_us, t0, 0);
    timeline(resp, r->key, hvd_kind_event(r->kind), t0, t1, bytes);
  }
  hvd_status_t s = hvd_status_from_coll(cs);
  if (s != HVD_OK)
    snprintf(msg, len, "%s of tensor \"%s\" failed on rank %d: %s", hvd_kind_name(r->kind),
             r->key, hvd_g.rank, hvd_g.world->error);
  complete(r, s, msg);
  return s;
}

hvd_status_t hvd_execute(const hvd_response_t *resp, int n, char *msg, size_t len,
                         int *fatal_agreed) {
  *fatal_agreed = 0;
  if (n <= 0) return HVD_OK;
  struct hvd_request **reqs = malloc((size_t)n * sizeof(*reqs));
  if (!reqs) {
    snprintf(msg, len, "rank %d: out of memory for %d responses", hvd_g.rank, n);
    return HVD_ERR_NO_MEMORY;
  }
  /* Find this rank's request of every response. Every rank submitted every name before
     the coordinator answered it, so a missing one is a broken protocol. */
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < n; i++) {
    char key[HVD_KEY_MAX];
    size_t kl = resp[i].key_len < HVD_KEY_MAX - 1 ? resp[i].key_len : HVD_KEY_MAX - 1;
    memcpy(key, resp[i].key, kl);
    key[kl] = '\0';
    reqs[i] = hvd_inflight_find(key);
    if (reqs[i] == NULL) {
      pthread_mutex_unlock(&hvd_g.mu);
      snprintf(msg, len, "rank %d received a response for tensor \"%s\" that it has not "
               "submitted (internal error)", hvd_g.rank, key);
      free(reqs);
      return HVD_ERR_BACKEND;
    }
  }
  pthread_mutex_unlock(&hvd_g.mu);

  hvd_status_t fatal = HVD_OK;
  size_t threshold = hvd_g.cfg.fusion_threshold;
  for (int i = 0; i < n && fatal == HVD_OK;) {
    struct hvd_request *r = reqs[i];
    if (resp[i].status != HVD_OK) {
      char text[HVD_ERROR_MAX];
      size_t ml = resp[i].msg_len < sizeof(text) - 1 ? resp[i].msg_len : sizeof(text) - 1;
      memcpy(text, resp[i].msg, ml);
      text[ml] = '\0';
      complete(r, resp[i].status, text);
      i++;
      continue;
    }
    if (r->kind == HVD_KIND_ALLREDUCE) {
      size_t es = hvd_dtype_size(r->dtype);
      size_t bytes = r->count * es;
      int dev = on_device(r);
      int j = i + 1;
      /* Grow the group while the next response is a compatible allreduce that fits. */
      if (bytes <= threshold && bytes > 0)
        while (j < n && resp[j].status == HVD_OK && reqs[j]->kind == HVD_KIND_ALLREDUCE &&
               reqs[j]->dtype == r->dtype && reqs[j]->op == r->op &&
               reqs[j]->count > 0 && bytes + reqs[j]->count * es <= threshold &&
               on_device(reqs[j]) == dev) {
          bytes += reqs[j]->count * es;
          j++;
        }
      fatal = dev ? run_allreduce_device(&reqs[i], &resp[i], j - i, msg, len)
                  : run_allreduce(&reqs[i], &resp[i], j - i, msg, len);
      i = j;
    } else if (r->kind == HVD_KIND_ALLGATHER) {
      fatal = run_allgather(r, &resp[i], msg, len, fatal_agreed);
      i++;
    } else {
      fatal = run_single(r, &resp[i], msg, len);
      i++;
    }
  }
  free(reqs);
  return fatal;
}
