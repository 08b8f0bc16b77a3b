/* hvd/device_events.c: the CUDA events of the device path (hvd/device.c): the submission
   events that user threads record and the completion events of the background thread.

   Reused through a pool: creating one costs a few microseconds, and a step of resnet50
   submits tens of buckets. cudaStreamWaitEvent takes the record as it is at the call,
   so an event goes back to the pool as soon as a stream has been told to wait for it.
   The pooled events are destroyed at shutdown; one given back later (a request freed
   after it, hvd/requests.c) is kept for the next hvd_init. A file of its own because
   hvd/requests.c gives back the events of requests that never reached the device path,
   and must not call hvd/device.c, which calls it. */
#include "hvd/device_events.h"
#include "hvd/hvd_internal.h"

#ifdef HVD_WITH_CUDA
#include <cuda_runtime.h>
#include <stdlib.h>

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaEvent_t *pool;
static size_t pool_n, pool_cap;

int hvd_device_event_take(void **event) {
  cudaEvent_t ev = NULL;
  pthread_mutex_lock(&pool_mu);
  int have = pool_n > 0;
  if (have) ev = pool[--pool_n];
  pthread_mutex_unlock(&pool_mu);
  cudaError_t e = have ? cudaSuccess : cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *event = e == cudaSuccess ? (void *)ev : NULL;
  return (int)e;
}

void hvd_device_event_give(void *event) {
  if (event == NULL) return;
  pthread_mutex_lock(&pool_mu);
  if (pool_n == pool_cap) {
    size_t cap = pool_cap ? 2 * pool_cap : 64;
    cudaEvent_t *p = realloc(pool, cap * sizeof *p);
    if (p != NULL) {
      pool = p;
      pool_cap = cap;
    }
  }
  int kept = pool_n < pool_cap;
  if (kept) pool[pool_n++] = (cudaEvent_t)event;
  pthread_mutex_unlock(&pool_mu);
  if (!kept) (void)cudaEventDestroy((cudaEvent_t)event);   /* no memory for the pool */
}

void hvd_device_events_destroy(void) {
  pthread_mutex_lock(&pool_mu);
  for (size_t i = 0; i < pool_n; i++) (void)cudaEventDestroy(pool[i]);
  free(pool);
  pool = NULL;
  pool_n = pool_cap = 0;
  pthread_mutex_unlock(&pool_mu);
}

void hvd_device_release_event(void *event) { hvd_device_event_give(event); }

#else /* no CUDA in this build: no request carries an event */

void hvd_device_release_event(void *event) { (void)event; }

#endif
