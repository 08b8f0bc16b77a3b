/* hvd/requests.c: the table of requests in flight (by key, for duplicate names and for
   the executor to find a response's request) and their completion: results handed over
   to the caller's pointers, failures of everything pending when the runtime stops.
   Every function is called with hvd_g.mu held (hvd_request_new and hvd_request_free
   excepted: the request is not shared yet, or not any more). */
#include "hvd/requests.h"
#include "hvd/hvd_internal.h"

#include <stdlib.h>
#include <string.h>

struct hvd_request *hvd_request_new(hvd_kind_t kind) {
  struct hvd_request *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->kind = kind;
  r->submit_time = util_now_us();
  return r;
}

void hvd_request_free(struct hvd_request *r) {
  hvd_request_free_results(r);
  hvd_device_release_event(r->ready_event);   /* a submission event never consumed */
  free(r->splits);
  free(r->member_send);
  free(r->member_recv);
  free(r->member_count);
  free(r);
}

static unsigned key_hash(const char *key) {
  unsigned h = 2166136261u;           /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)key; *p; p++)
    h = (h ^ *p) * 16777619u;
  return h % HVD_INFLIGHT_BUCKETS;
}

struct hvd_request *hvd_inflight_find(const char *key) {
  for (struct hvd_request *r = hvd_g.inflight[key_hash(key)]; r; r = r->next_inflight)
    if (strcmp(r->key, key) == 0) return r;
  return NULL;
}

void hvd_inflight_insert(struct hvd_request *r) {
  unsigned h = key_hash(r->key);
  r->next_inflight = hvd_g.inflight[h];
  hvd_g.inflight[h] = r;
  hvd_g.ninflight++;
}

void hvd_inflight_remove(struct hvd_request *r) {
  struct hvd_request **pp = &hvd_g.inflight[key_hash(r->key)];
  while (*pp && *pp != r) pp = &(*pp)->next_inflight;
  if (*pp) *pp = r->next_inflight;
  r->next_inflight = NULL;
}

void hvd_request_free_results(struct hvd_request *r) {
  free(r->result);
  free(r->result_splits);
  r->result = NULL;
  r->result_splits = NULL;
  r->results = 0;
}

/* Writes the results through the caller's pointers (the request succeeds). */
static void request_hand_over(struct hvd_request *r) {
  if (r->results & HVD_RESULT_OUT) {
    *r->gather_out = r->result;
    r->result = NULL;
  }
  if (r->results & HVD_RESULT_COUNT) *r->gather_count = r->result_count;
  if (r->results & HVD_RESULT_SPLITS)
    memcpy(r->recv_splits, r->result_splits, (size_t)r->set_size * sizeof(*r->recv_splits));
  if ((r->results & HVD_RESULT_LAST_RANK) && r->last_rank) *r->last_rank = r->result_last_rank;
  hvd_request_free_results(r);
}

/* Once only: a request that hvd_fail_held completed already stays as it is when its
   executor comes back. A request with a recorded failure (fail_pending) completes with
   that failure, whatever the executor says: its waiter was to learn it the moment
   hvd_fail_all ran. The results of a failed request are freed with it (hvd_request_free),
   not here: a held one's executor may still be writing them. */
void hvd_request_complete(struct hvd_request *r, hvd_status_t s, const char *msg) {
  if (atomic_load(&r->done)) return;
  hvd_inflight_remove(r);
  hvd_g.ninflight--;
  if (!r->fail_pending) {
    r->status = s;
    snprintf(r->error, sizeof(r->error), "%s", (s != HVD_OK && msg) ? msg : "");
  }
  if (r->status == HVD_OK) request_hand_over(r);
  atomic_store(&r->done, 1);
  pthread_cond_broadcast(&hvd_g.done_cv);
}

void hvd_fail_all(hvd_status_t s, const char *msg) {
  for (int b = 0; b < HVD_INFLIGHT_BUCKETS; b++) {
    struct hvd_request **pp = &hvd_g.inflight[b];
    while (*pp) {
      struct hvd_request *r = *pp;
      if (!r->held) {
        hvd_request_complete(r, s, msg);   /* unlinks *pp */
        continue;
      }
      if (!r->fail_pending) {
        r->status = s;
        snprintf(r->error, sizeof(r->error), "%s", msg ? msg : "");
        r->fail_pending = 1;
      }
      pp = &r->next_inflight;
    }
  }
  hvd_g.queue_head = hvd_g.queue_tail = NULL;   /* every queued one was in flight too */
  atomic_store(&hvd_g.queued, 0);
  if (!hvd_g.stopped) {
    hvd_g.stopped = 1;
    /* Later calls: a lost peer stays the reason; anything else reads as shut down. */
    hvd_g.stop_status = s == HVD_ERR_PEER_LOST ? s : HVD_ERR_SHUTDOWN;
    snprintf(hvd_g.stop_msg, sizeof(hvd_g.stop_msg), "%s", msg);
  }
}

int hvd_fail_held(void) {
  int n = 0;
  for (int b = 0; b < HVD_INFLIGHT_BUCKETS; b++)
    while (hvd_g.inflight[b]) {
      struct hvd_request *r = hvd_g.inflight[b];
      n += r->held;
      if (!r->fail_pending) {
        r->status = HVD_ERR_SHUTDOWN;
        snprintf(r->error, sizeof(r->error), "%s", hvd_g.stop_msg);
        r->fail_pending = 1;
      }
      hvd_request_complete(r, r->status, r->error);
    }
  return n;
}

void hvd_request_release(struct hvd_request *r) {
  r->held = 0;
  if (r->abandoned)
    hvd_request_free(r);
  else if (r->fail_pending && !atomic_load(&r->done))
    hvd_request_complete(r, r->status, r->error);
}
