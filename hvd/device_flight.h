/* hvd/device_flight.h: the device collectives in flight (hvd/device_flight.c).

   The device path (hvd/device.c) queues a group's work on its stream, records a
   completion event after it and hands the group here instead of waiting: the background
   thread goes on to the next response while the GPU runs this one, so several buckets
   are queued at once. Each turn of the background loop polls the oldest groups' events
   (never blocking) and completes the requests of those that have finished, in order.

   Nothing here calls CUDA: the events are opaque, asked about through hvd_flight_ops_t,
   so a test on a machine without a GPU runs this code with stand-in events. Used by
   the background thread only. */
#ifndef HVD_DEVICE_FLIGHT_H
#define HVD_DEVICE_FLIGHT_H

#include "hvd/hvd_internal.h"

#include <stddef.h>

typedef struct {
  /* 0: the event has completed; 1: not yet; -1: an error (msg says which). */
  int (*query)(void *ctx, void *event, char *msg, size_t len);
  /* HVD_OK while the groups in flight may still complete; otherwise why they never
     will (an asynchronous NCCL error, the runtime cancelled, waited_us over a limit),
     in msg. waited_us: since the oldest group was queued. */
  hvd_status_t (*check)(void *ctx, double waited_us, char *msg, size_t len);
  void (*recycle)(void *ctx, void *event);   /* a group's event is not needed any more */
  void *ctx;
} hvd_flight_ops_t;

typedef struct {
  struct hvd_request **reqs;   /* the group's requests (malloc'ed copy of the pointers) */
  int n;
  void *event;                 /* recorded after the group's last operation            */
  double queued_us;
  const char *activity;        /* the timeline's name of the operation                 */
} hvd_flight_group_t;

typedef struct {
  hvd_flight_ops_t ops;
  hvd_flight_group_t *ring;
  size_t cap, head, count;     /* count groups from ring[head], oldest first            */
} hvd_flight_t;

void hvd_flight_init(hvd_flight_t *f, const hvd_flight_ops_t *ops);
/* Takes over the group reqs[0..n) (held by the executor, which then neither completes
   nor lets go of them: each is marked deferred) with its completion event. Fails only
   when out of memory (nothing taken then: the caller still owns event and requests). */
hvd_status_t hvd_flight_push(hvd_flight_t *f, struct hvd_request **reqs, int n, void *event,
                             const char *activity, char *msg, size_t len);
size_t hvd_flight_pending(const hvd_flight_t *f);
/* Completes the groups whose event has completed, oldest first, stopping at the first
   that has not (they are on one stream, so none after it has either); *completed: how
   many. A failed query or check fails every group in flight with its message and is
   returned (the groups are then gone). */
hvd_status_t hvd_flight_poll(hvd_flight_t *f, int *completed, char *msg, size_t len);
/* Polls until nothing is in flight (yielding, then sleeping 50 us). */
hvd_status_t hvd_flight_drain(hvd_flight_t *f, char *msg, size_t len);
/* Fails every group in flight with s/msg (their work is abandoned). */
void hvd_flight_fail_all(hvd_flight_t *f, hvd_status_t s, const char *msg);
void hvd_flight_free(hvd_flight_t *f);   /* after hvd_flight_fail_all or a drain */

#endif /* HVD_DEVICE_FLIGHT_H */
