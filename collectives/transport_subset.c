/* collectives/transport_subset.c: a transport over some of another transport's ranks
   (MPI's sub-communicator, without a new communicator).

   Rank i of the subset is rank ranks[i] of the parent; every send, receive and wait is
   the parent's, with the peer translated, so liveness (peer timeout, abort, the
   interrupt hook) and the byte counter are the parent's too. Messages share the parent's
   tags: the caller must not run a collective of the subset while another collective of
   the same pair of ranks is in flight (the hvd runtime runs one collective at a time). */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

typedef struct {
  coll_transport_t *parent;
  int *ranks;     /* subset rank -> parent rank */
} subset_impl_t;

/* The parent's message of its last failure, as this transport's. */
static coll_status_t relay(coll_transport_t *t, coll_status_t s) {
  if (s == COLL_OK) return s;
  subset_impl_t *impl = t->impl;
  memcpy(t->error, impl->parent->error, sizeof(t->error));
  t->lost_peer = impl->parent->lost_peer;
  return s;
}

static coll_status_t check_peer(coll_transport_t *t, int peer) {
  if (peer < 0 || peer >= t->size)
    return coll_fail(t, COLL_ERR_ARG, "subset: peer %d out of range 0..%d", peer, t->size - 1);
  return COLL_OK;
}

static coll_status_t subset_isend(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                  int tag, coll_request_t *req) {
  coll_status_t s = check_peer(t, peer);
  if (s != COLL_OK) return s;
  subset_impl_t *impl = t->impl;
  coll_transport_t *p = impl->parent;
  return relay(t, p->ops->isend(p, impl->ranks[peer], buf, bytes, tag, req));
}

static coll_status_t subset_irecv(coll_transport_t *t, int peer, void *buf, size_t bytes,
                                  int tag, coll_request_t *req) {
  coll_status_t s = check_peer(t, peer);
  if (s != COLL_OK) return s;
  subset_impl_t *impl = t->impl;
  coll_transport_t *p = impl->parent;
  return relay(t, p->ops->irecv(p, impl->ranks[peer], buf, bytes, tag, req));
}

static coll_status_t subset_wait(coll_transport_t *t, coll_request_t *req) {
  subset_impl_t *impl = t->impl;
  coll_transport_t *p = impl->parent;
  return relay(t, p->ops->wait(p, req));
}

static void subset_abandon(coll_transport_t *t, coll_request_t *req) {
  subset_impl_t *impl = t->impl;
  coll_transport_t *p = impl->parent;
  if (p->ops->abandon) p->ops->abandon(p, req);
  else p->ops->wait(p, req);
}

static void subset_destroy(coll_transport_t *t) {
  subset_impl_t *impl = t->impl;
  if (impl) free(impl->ranks);
  free(impl);
  free(t);
}

static const coll_transport_ops_t subset_ops = {
  subset_isend, subset_irecv, subset_wait, subset_abandon, subset_destroy,
};

coll_status_t coll_transport_subset_create(coll_transport_t *parent, const int *ranks, int n,
                                           coll_transport_t **out) {
  if (out == NULL) return COLL_ERR_ARG;
  *out = NULL;
  if (parent == NULL || ranks == NULL || n < 1 || n > parent->size) return COLL_ERR_ARG;
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= parent->size || (i > 0 && ranks[i] <= ranks[i - 1]))
      return COLL_ERR_ARG;
    if (ranks[i] == parent->rank) me = i;
  }
  if (me < 0) return COLL_ERR_ARG;
  coll_transport_t *t = calloc(1, sizeof(*t));
  subset_impl_t *impl = calloc(1, sizeof(*impl));
  int *copy = malloc((size_t)n * sizeof(*copy));
  if (!t || !impl || !copy) {
    free(t);
    free(impl);
    free(copy);
    return COLL_ERR_NO_MEMORY;
  }
  memcpy(copy, ranks, (size_t)n * sizeof(*copy));
  impl->parent = parent;
  impl->ranks = copy;
  t->rank = me;
  t->size = n;
  t->ops = &subset_ops;
  t->impl = impl;
  t->lost_peer = -1;
  t->one_host = parent->one_host;
  *out = t;
  return COLL_OK;
}
