/* hvd/device_flight.c: the device collectives in flight, completed when their event
   has (hvd/device_flight.h).

   A group here is held as the executor holds one (hvd_request.held): a waiter that gives
   up on it (hvd_fail_held) leaves the request to us, and a failure recorded by
   hvd_fail_all meanwhile is what the request completes with. So completing a group is
   what the executor does at the end of a plain group: complete the requests (under
   hvd_g.mu), then let go of them. */
#include "hvd/device_flight.h"
#include "hvd/requests.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void hvd_flight_init(hvd_flight_t *f, const hvd_flight_ops_t *ops) {
  memset(f, 0, sizeof *f);
  f->ops = *ops;
}

size_t hvd_flight_pending(const hvd_flight_t *f) { return f->count; }

static int grow(hvd_flight_t *f) {
  size_t cap = f->cap ? 2 * f->cap : 16;
  hvd_flight_group_t *ring = malloc(cap * sizeof *ring);
  if (ring == NULL) return 0;
  for (size_t i = 0; i < f->count; i++) ring[i] = f->ring[(f->head + i) % f->cap];
  free(f->ring);
  f->ring = ring;
  f->cap = cap;
  f->head = 0;
  return 1;
}

hvd_status_t hvd_flight_push(hvd_flight_t *f, struct hvd_request **reqs, int n, void *event,
                             const char *activity, char *msg, size_t len) {
  struct hvd_request **copy = malloc((size_t)n * sizeof *copy);
  if (copy == NULL || (f->count == f->cap && !grow(f))) {
    free(copy);
    snprintf(msg, len, "rank %d: out of memory for a device collective in flight",
             hvd_g.rank);
    return HVD_ERR_NO_MEMORY;
  }
  memcpy(copy, reqs, (size_t)n * sizeof *copy);
  for (int i = 0; i < n; i++) reqs[i]->deferred = 1;
  f->ring[(f->head + f->count) % f->cap] = (hvd_flight_group_t){
      .reqs = copy, .n = n, .event = event, .queued_us = util_now_us(),
      .activity = activity};
  f->count++;
  return HVD_OK;
}

/* Completes the oldest group with s/text and lets go of it. */
static void finish_oldest(hvd_flight_t *f, hvd_status_t s, const char *text) {
  hvd_flight_group_t g = f->ring[f->head];
  f->head = (f->head + 1) % f->cap;
  f->count--;
  const double now = util_now_us();
  /* Still held: no waiter frees a request before hvd_request_release below. */
  for (int i = 0; i < g.n; i++)
    hvd_timeline_op(g.reqs[i]->key, g.activity, g.queued_us, now,
                    g.reqs[i]->count * hvd_dtype_size(g.reqs[i]->dtype));
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < g.n; i++) {
    g.reqs[i]->deferred = 0;
    g.reqs[i]->done_event = NULL;   /* back to the pool below */
    if (!g.reqs[i]->phantom) hvd_request_complete(g.reqs[i], s, text);
  }
  for (int i = 0; i < g.n; i++)
    if (!g.reqs[i]->phantom) hvd_request_release(g.reqs[i]);
  pthread_mutex_unlock(&hvd_g.mu);
  if (f->ops.recycle) f->ops.recycle(f->ops.ctx, g.event);
  free(g.reqs);
}

void hvd_flight_fail_all(hvd_flight_t *f, hvd_status_t s, const char *msg) {
  while (f->count > 0) finish_oldest(f, s, msg);
}

hvd_status_t hvd_flight_poll(hvd_flight_t *f, int *completed, char *msg, size_t len) {
  *completed = 0;
  while (f->count > 0) {
    int q = f->ops.query(f->ops.ctx, f->ring[f->head].event, msg, len);
    if (q == 0) {
      finish_oldest(f, HVD_OK, NULL);
      ++*completed;
      continue;
    }
    hvd_status_t s = HVD_ERR_BACKEND;
    if (q == 1) {
      s = f->ops.check(f->ops.ctx, util_now_us() - f->ring[f->head].queued_us, msg, len);
      if (s == HVD_OK) return HVD_OK;
    }
    hvd_flight_fail_all(f, s, msg);
    return s;
  }
  return HVD_OK;
}

hvd_status_t hvd_flight_drain(hvd_flight_t *f, char *msg, size_t len) {
  for (long polls = 0; f->count > 0; polls++) {
    int done;
    hvd_status_t s = hvd_flight_poll(f, &done, msg, len);
    if (s != HVD_OK) return s;
    if (f->count == 0) break;
    if (polls < 2000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  return HVD_OK;
}

void hvd_flight_free(hvd_flight_t *f) {
  free(f->ring);
  f->ring = NULL;
  f->cap = f->head = f->count = 0;
}
