/* hvd/process_set_registry.c: the process sets this rank knows (Horovod's
   add_process_set; hvd/process_sets.c adds and removes them), collectives over a subset
   of the ranks.

   A set is a sorted list of world ranks with an id that every rank gives it alike (the
   n-th set added is id n: adding is collective over the world, so every rank adds in the
   same order). Its collectives go through the world's negotiation: the request carries
   the set and its size, the coordinator answers a name when every rank of the set has
   submitted it, and the ranks outside the set skip that response in the ordered list.
   Since every rank runs the list in the same order, the collectives of two overlapping
   sets never wait on each other in a cycle. A set's collective runs on a view of the
   world transport (collectives/transport_subset.c), so it needs no communicator of its
   own, and the peer timeout and failure notices are the world's.

   The registry is read by the background thread (hvd_set_view) and by user threads, so
   it has its own lock; it never takes hvd_g.mu (callers may hold that). Removed sets
   keep their memory until hvd_shutdown, since a background turn may still hold a view. */
#include "hvd/hvd_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t id;
  int n, my_index;            /* my_index: -1 when this rank is not in the set */
  int *ranks;
  coll_transport_t *t;        /* NULL when this rank is not in the set          */
  int removed;
  uint64_t auto_seq[HVD_KIND_COUNT];
} pset_t;

static pthread_mutex_t pset_mu = PTHREAD_MUTEX_INITIALIZER;
static pset_t *psets;
static int npsets, cap_psets;
static int32_t next_id = 1;
static uint64_t calls;        /* add/remove calls so far: names of their agreement */

static pset_t *find(int32_t id) {
  for (int i = 0; i < npsets; i++)
    if (psets[i].id == id && !psets[i].removed) return &psets[i];
  return NULL;
}

void hvd_process_sets_free(void) {
  pthread_mutex_lock(&pset_mu);
  for (int i = 0; i < npsets; i++) {
    if (psets[i].t) coll_transport_destroy(psets[i].t);
    free(psets[i].ranks);
  }
  free(psets);
  psets = NULL;
  npsets = cap_psets = 0;
  next_id = 1;
  calls = 0;
  pthread_mutex_unlock(&pset_mu);
}

int hvd_set_view(int32_t set, hvd_set_view_t *v) {
  if (set == 0) {
    *v = (hvd_set_view_t){hvd_g.world, hvd_g.size, hvd_g.rank, NULL};
    return 1;
  }
  pthread_mutex_lock(&pset_mu);
  pset_t *p = NULL;
  for (int i = 0; i < npsets && !p; i++)
    if (psets[i].id == set) p = &psets[i];
  int ok = p && p->t;
  if (ok) *v = (hvd_set_view_t){p->t, p->n, p->my_index, p->ranks};
  pthread_mutex_unlock(&pset_mu);
  return ok;
}

int hvd_process_set_outside(int32_t set) {
  pthread_mutex_lock(&pset_mu);
  pset_t *p = set != 0 ? find(set) : NULL;
  int out = p && p->my_index < 0;
  pthread_mutex_unlock(&pset_mu);
  return out;
}

int hvd_process_set_rank(hvd_process_set_t set) {
  if (!atomic_load(&hvd_g_initialized)) return -1;
  if (set == 0) return hvd_g.rank;
  pthread_mutex_lock(&pset_mu);
  pset_t *p = find(set);
  int r = p ? p->my_index : -1;
  pthread_mutex_unlock(&pset_mu);
  return r;
}

int hvd_process_set_size(hvd_process_set_t set) {
  if (!atomic_load(&hvd_g_initialized)) return -1;
  if (set == 0) return hvd_g.size;
  pthread_mutex_lock(&pset_mu);
  pset_t *p = find(set);
  int n = p ? p->n : -1;
  pthread_mutex_unlock(&pset_mu);
  return n;
}

/* Whether this rank may address set (0 or a set it is in); fills *size. Otherwise the
   error, set for the caller. */
hvd_status_t hvd_process_set_check(int32_t set, int *size, const char *what) {
  if (set == 0) {
    *size = hvd_g.size;
    return HVD_OK;
  }
  pthread_mutex_lock(&pset_mu);
  pset_t *p = find(set);
  int known = p != NULL, in = p && p->my_index >= 0;
  *size = p ? p->n : 0;
  pthread_mutex_unlock(&pset_mu);
  if (!known)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: process set %d is unknown (never "
                         "added, or removed); add it with hvd_process_set_add", what,
                         (int)set);
  if (!in)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: rank %d is not in process set %d; "
                         "only its ranks may call its collectives", what, hvd_g.rank,
                         (int)set);
  return HVD_OK;
}

uint64_t hvd_process_set_next_auto(int32_t set, hvd_kind_t kind) {
  pthread_mutex_lock(&pset_mu);
  pset_t *p = find(set);
  uint64_t n = p ? p->auto_seq[kind]++ : 0;
  pthread_mutex_unlock(&pset_mu);
  return n;
}

hvd_status_t hvd_process_set_register(const int *ranks, int n, hvd_process_set_t *set) {
  pset_t p = {0};
  p.n = n;
  p.my_index = -1;
  p.ranks = malloc((size_t)n * sizeof(int));
  if (!p.ranks) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_process_set_add: out of memory");
  memcpy(p.ranks, ranks, (size_t)n * sizeof(int));
  for (int i = 0; i < n; i++)
    if (ranks[i] == hvd_g.rank) p.my_index = i;
  if (p.my_index >= 0 &&
      coll_transport_subset_create(hvd_g.world, ranks, n, &p.t) != COLL_OK) {
    free(p.ranks);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_process_set_add: out of memory");
  }
  pthread_mutex_lock(&pset_mu);
  if (npsets == cap_psets) {
    int nc = cap_psets ? 2 * cap_psets : 8;
    pset_t *q = realloc(psets, (size_t)nc * sizeof(*q));
    if (!q) {
      pthread_mutex_unlock(&pset_mu);
      if (p.t) coll_transport_destroy(p.t);
      free(p.ranks);
      return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_process_set_add: out of memory");
    }
    psets = q;
    cap_psets = nc;
  }
  p.id = next_id++;
  psets[npsets++] = p;
  *set = p.id;
  pthread_mutex_unlock(&pset_mu);
  return HVD_OK;
}

int hvd_process_set_unregister(hvd_process_set_t set) {
  pthread_mutex_lock(&pset_mu);
  pset_t *p = find(set);
  if (p) p->removed = 1;
  pthread_mutex_unlock(&pset_mu);
  return p != NULL;
}

uint64_t hvd_process_set_next_call(void) {
  pthread_mutex_lock(&pset_mu);
  uint64_t n = calls++;
  pthread_mutex_unlock(&pset_mu);
  return n;
}
