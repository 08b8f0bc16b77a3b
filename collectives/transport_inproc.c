/* collectives/transport_inproc.c: the in-process transport. Each rank is a thread with
   its own coll_transport_t; all share one "world". Matching follows MPI: a receive
   takes the oldest message from (peer, tag); a send that finds a posted receive copies
   straight into it, otherwise it copies into a heap message queued for the receiver.
   Sends therefore complete at once (buffered), receives when data has arrived.
   Waits sleep on the rank's condition variable in short slices so that
   coll_transport_abort, the interrupt hook and the peer timeout are noticed; when one rank's function fails, the world is marked aborted and every
   blocked wait returns COLL_ERR_PEER_LOST instead of hanging. */
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll_internal.h"

typedef struct inproc_msg {
  int src, dst, tag;
  size_t bytes;
  struct inproc_msg *next;
  unsigned char data[];
} inproc_msg_t;

/* A receive posted before its message arrived. */
typedef struct inproc_recv {
  int src, dst, tag;
  void *buf;
  size_t bytes;
  int done;
  coll_status_t status;
  char error[128];
  struct inproc_recv *next;
} inproc_recv_t;

typedef struct {
  int size;
  pthread_mutex_t lock;
  pthread_cond_t *arrived; /* one per rank */
  inproc_msg_t *unexpected; /* FIFO of messages with no posted receive */
  inproc_recv_t *posted;    /* FIFO of receives with no message yet   */
  int aborted;
} inproc_world_t;

typedef struct {
  inproc_world_t *world;
} inproc_impl_t;

/* What a request holds: the receive record, or nothing for a completed send. */
typedef struct {
  inproc_recv_t *recv;
  coll_status_t status; /* for sends: their (immediate) result */
} inproc_req_t;

_Static_assert(sizeof(inproc_req_t) <= sizeof(coll_request_t), "request too small");

static inproc_world_t *world_of(coll_transport_t *t) {
  return ((inproc_impl_t *)t->impl)->world;
}

static coll_status_t check_peer(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                coll_request_t *req) {
  if (peer < 0 || peer >= t->size)
    return coll_fail(t, COLL_ERR_ARG, "inproc: peer %d out of range 0..%d", peer, t->size - 1);
  if (!req || (bytes > 0 && !buf))
    return coll_fail(t, COLL_ERR_ARG, "inproc: NULL buffer or request");
  return COLL_OK;
}

/* Copies a message into a posted receive; a length mismatch is an error of the receive. */
static void deliver(inproc_recv_t *r, const void *data, size_t bytes) {
  if (bytes != r->bytes) {
    r->status = COLL_ERR_ARG;
    snprintf(r->error, sizeof r->error,
             "inproc: rank %d expected %zu bytes from rank %d (tag %d), got %zu", r->dst,
             r->bytes, r->src, r->tag, bytes);
  } else {
    if (bytes) memcpy(r->buf, data, bytes);
    r->status = COLL_OK;
  }
  r->done = 1;
}

static coll_status_t inproc_isend_aligned(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                  int tag, void *req) {
  coll_status_t s = check_peer(t, peer, buf, bytes, req);
  if (s != COLL_OK) return s;
  inproc_world_t *w = world_of(t);
  inproc_req_t *q = (inproc_req_t *)req;
  q->recv = NULL;
  q->status = COLL_OK;
  pthread_mutex_lock(&w->lock);
  inproc_recv_t **pp = &w->posted;
  while (*pp && !((*pp)->dst == peer && (*pp)->src == t->rank && (*pp)->tag == tag))
    pp = &(*pp)->next;
  if (*pp) {
    inproc_recv_t *r = *pp;
    *pp = r->next;
    deliver(r, buf, bytes);
    pthread_cond_broadcast(&w->arrived[peer]);
  } else {
    inproc_msg_t *m = malloc(sizeof *m + bytes);
    if (!m) {
      pthread_mutex_unlock(&w->lock);
      return q->status = coll_fail(t, COLL_ERR_NO_MEMORY,
                                   "inproc: cannot buffer a %zu-byte message", bytes);
    }
    m->src = t->rank;
    m->dst = peer;
    m->tag = tag;
    m->bytes = bytes;
    m->next = NULL;
    if (bytes) memcpy(m->data, buf, bytes);
    inproc_msg_t **tail = &w->unexpected;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
  }
  pthread_mutex_unlock(&w->lock);
  return COLL_OK;
}

static coll_status_t inproc_irecv_aligned(coll_transport_t *t, int peer, void *buf, size_t bytes,
                                  int tag, void *req) {
  coll_status_t s = check_peer(t, peer, buf, bytes, req);
  if (s != COLL_OK) return s;
  inproc_world_t *w = world_of(t);
  inproc_req_t *q = (inproc_req_t *)req;
  inproc_recv_t *r = calloc(1, sizeof *r);
  if (!r) return coll_fail(t, COLL_ERR_NO_MEMORY, "inproc: out of memory posting a receive");
  r->src = peer;
  r->dst = t->rank;
  r->tag = tag;
  r->buf = buf;
  r->bytes = bytes;
  q->recv = r;
  q->status = COLL_OK;
  pthread_mutex_lock(&w->lock);
  inproc_msg_t **pp = &w->unexpected;
  while (*pp && !((*pp)->dst == t->rank && (*pp)->src == peer && (*pp)->tag == tag))
    pp = &(*pp)->next;
  if (*pp) {
    inproc_msg_t *m = *pp;
    *pp = m->next;
    deliver(r, m->data, m->bytes);
    free(m);
  } else {
    inproc_recv_t **tail = &w->posted;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
  }
  pthread_mutex_unlock(&w->lock);
  return COLL_OK;
}

/* Removes a still-posted receive (on cancel/abort) so no sender writes into it later. */
static void unpost(inproc_world_t *w, inproc_recv_t *r) {
  for (inproc_recv_t **pp = &w->posted; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      return;
    }
}

static coll_status_t inproc_wait_aligned(coll_transport_t *t, void *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "inproc: wait on a NULL request");
  inproc_req_t *q = (inproc_req_t *)req;
  inproc_recv_t *r = q->recv;
  if (!r) return q->status; /* a send: complete when started */
  inproc_world_t *w = world_of(t);
  coll_status_t s = COLL_OK;
  double next_interrupt_s = 0;
  pthread_mutex_lock(&w->lock);
  while (!r->done) {
    s = coll_wait_check(t, r->src, "receive", r->bytes, &next_interrupt_s);
    if (s != COLL_OK) break;
    if (w->aborted) {
      s = coll_fail(t, COLL_ERR_PEER_LOST,
                    "inproc: rank %d gave up waiting for rank %d: another rank failed",
                    t->rank, r->src);
      break;
    }
    /* Short slices: abort is a plain flag nobody signals us about. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 5 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->arrived[t->rank], &w->lock, &until);
  }
  if (r->done && r->status != COLL_OK) s = coll_fail(t, r->status, "%s", r->error);
  if (r->done) coll_progress(t);
  if (!r->done) unpost(w, r);
  pthread_mutex_unlock(&w->lock);
  free(r);
  q->recv = NULL;
  q->status = s;
  return s;
}

static void inproc_abandon_aligned(coll_transport_t *t, void *req) {
  inproc_req_t *q = (inproc_req_t *)req;
  inproc_recv_t *r = q->recv;
  if (!r) return; /* sends are complete when started */
  inproc_world_t *w = world_of(t);
  pthread_mutex_lock(&w->lock);
  if (!r->done) unpost(w, r);
  pthread_mutex_unlock(&w->lock);
  free(r);
  q->recv = NULL;
}

/* coll_request_t is a byte array (alignment 1): the state is copied to and from an
   aligned local rather than accessed in place. */
#define REQ_LOAD(q, req) memcpy(&(q), (req), sizeof(q))
static coll_status_t inproc_isend(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                  int tag, coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "inproc: isend with a NULL request");
  inproc_req_t q = {NULL, COLL_OK};
  coll_status_t s = inproc_isend_aligned(t, peer, buf, bytes, tag, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static coll_status_t inproc_irecv(coll_transport_t *t, int peer, void *buf, size_t bytes,
                                  int tag, coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "inproc: irecv with a NULL request");
  inproc_req_t q = {NULL, COLL_OK};
  coll_status_t s = inproc_irecv_aligned(t, peer, buf, bytes, tag, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static coll_status_t inproc_wait(coll_transport_t *t, coll_request_t *req) {
  if (!req) return coll_fail(t, COLL_ERR_ARG, "inproc: wait on a NULL request");
  inproc_req_t q;
  REQ_LOAD(q, req);
  coll_status_t s = inproc_wait_aligned(t, &q);
  memcpy(req, &q, sizeof q);
  return s;
}
static void inproc_abandon(coll_transport_t *t, coll_request_t *req) {
  if (!req) return;
  inproc_req_t q;
  REQ_LOAD(q, req);
  inproc_abandon_aligned(t, &q);
  memcpy(req, &q, sizeof q);
}

static void inproc_destroy(coll_transport_t *t) {
  if (!t) return;
  free(t->impl);
  free(t);
}

static const coll_transport_ops_t inproc_ops = {
    .isend = inproc_isend,
    .irecv = inproc_irecv,
    .wait = inproc_wait,
    .abandon = inproc_abandon,
    .destroy = inproc_destroy,
};

typedef struct {
  coll_transport_t *t;
  coll_rank_fn fn;
  void *arg;
  coll_status_t status;
  inproc_world_t *world;
} inproc_thread_t;

static void *rank_main(void *p) {
  inproc_thread_t *th = p;
  th->status = th->fn(th->t, th->arg);
  if (th->status != COLL_OK) {
    pthread_mutex_lock(&th->world->lock);
    th->world->aborted = 1;
    for (int i = 0; i < th->world->size; i++) pthread_cond_broadcast(&th->world->arrived[i]);
    pthread_mutex_unlock(&th->world->lock);
  }
  return NULL;
}

coll_status_t coll_inproc_run(int size, coll_rank_fn fn, void *arg) {
  if (size < 1 || !fn) return COLL_ERR_ARG;
  coll_status_t result = COLL_OK;
  inproc_world_t w;
  memset(&w, 0, sizeof w);
  w.size = size;
  if (pthread_mutex_init(&w.lock, NULL) != 0) return COLL_ERR_TRANSPORT;
  w.arrived = calloc((size_t)size, sizeof *w.arrived);
  inproc_thread_t *th = calloc((size_t)size, sizeof *th);
  pthread_t *tid = calloc((size_t)size, sizeof *tid);
  int ncond = 0, nthreads = 0;
  if (!w.arrived || !th || !tid) {
    result = COLL_ERR_NO_MEMORY;
    goto out;
  }
  for (; ncond < size; ncond++)
    if (pthread_cond_init(&w.arrived[ncond], NULL) != 0) {
      result = COLL_ERR_TRANSPORT;
      goto out;
    }
  for (int r = 0; r < size; r++) {
    coll_transport_t *t = calloc(1, sizeof *t);
    inproc_impl_t *impl = calloc(1, sizeof *impl);
    if (!t || !impl) {
      free(t);
      free(impl);
      result = COLL_ERR_NO_MEMORY;
      goto out;
    }
    impl->world = &w;
    t->rank = r;
    t->size = size;
    t->ops = &inproc_ops;
    t->impl = impl;
    t->lost_peer = -1;
    coll_progress(t);
    th[r] = (inproc_thread_t){t, fn, arg, COLL_OK, &w};
  }
  for (; nthreads < size; nthreads++)
    if (pthread_create(&tid[nthreads], NULL, rank_main, &th[nthreads]) != 0) {
      /* Release the ranks already started: they fail their waits, not hang. */
      pthread_mutex_lock(&w.lock);
      w.aborted = 1;
      for (int i = 0; i < size; i++) pthread_cond_broadcast(&w.arrived[i]);
      pthread_mutex_unlock(&w.lock);
      result = COLL_ERR_TRANSPORT;
      break;
    }
  for (int r = 0; r < nthreads; r++) pthread_join(tid[r], NULL);
  for (int r = 0; r < nthreads && result == COLL_OK; r++)
    if (th[r].status != COLL_OK && th[r].status != COLL_ERR_PEER_LOST) result = th[r].status;
  for (int r = 0; r < nthreads && result == COLL_OK; r++)
    if (th[r].status != COLL_OK) result = th[r].status;
out:
  if (th)
    for (int r = 0; r < size; r++)
      if (th[r].t) coll_transport_destroy(th[r].t);
  while (w.unexpected) {
    inproc_msg_t *m = w.unexpected;
    w.unexpected = m->next;
    free(m);
  }
  for (int i = 0; i < ncond; i++) pthread_cond_destroy(&w.arrived[i]);
  pthread_mutex_destroy(&w.lock);
  free(w.arrived);
  free(th);
  free(tid);
  return result;
}
