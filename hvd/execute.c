/* hvd/execute.c: runs one ordered response list, the coordinator's plan, the same on
   every rank.

   The plan says everything that must be the same everywhere: the order, which
   responses run together in one collective (fuse_with_prev, decided by rank 0 with rank
   0's fusion threshold), and whether a group is host or device memory. A rank never
   groups by its own settings or its own view of its buffers, so all ranks always enter
   the same collectives with the same lengths. The collectives themselves are reached
   through the backend tables (hvd_host_ops in host_backend.c, hvd_device_ops in device.c).

   A mismatch arrives as a failed response and fails only that request.

   A rank that has called hvd_join (hvd_join_ex: of a process set, hvd/joined_sets.c) is
   answered the others' collectives of that set too: it takes part with a stand-in
   request (zeros of the response's dtype and count, its result dropped), so the
   collective has every rank. */
#include "hvd/execute.h"
#include "hvd/hvd_internal.h"
#include "hvd/joined_sets.h"
#include "hvd/requests.h"

#include <stdlib.h>
#include <string.h>

/* A deferred request (device memory, queued on the GPU) is completed and let go by
   hvd/device_flight.c once its completion event has completed, not here. */
static void complete_group(struct hvd_request **reqs, int n, hvd_status_t s,
                           const char *msg) {
  pthread_mutex_lock(&hvd_g.mu);
  for (int i = 0; i < n; i++)
    if (!reqs[i]->phantom && !reqs[i]->deferred) hvd_request_complete(reqs[i], s, msg);
  pthread_mutex_unlock(&hvd_g.mu);
}

/* The stand-in of a joined rank for response r: zeros to send, room for the result
   (reducescatter: apart, so the input stays zeros). NULL when out of memory. */
static struct hvd_request *phantom_new(const hvd_response_t *r) {
  struct hvd_request *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  size_t bytes = (size_t)r->count * hvd_dtype_size(r->dtype);
  char *buf = calloc(1, 2 * bytes + 1);
  if (buf == NULL) {
    free(p);
    return NULL;
  }
  p->phantom = 1;
  p->kind = r->kind;
  p->dtype = r->dtype;
  p->op = r->op;
  p->root = r->root;
  p->count = (size_t)r->count;
  p->device = -1;
  p->set = r->set;   /* the collective runs on the set's ranks */
  p->sendbuf = buf;
  p->recvbuf = buf + bytes;
  size_t kl = r->key_len < HVD_KEY_MAX - 1 ? r->key_len : HVD_KEY_MAX - 1;
  memcpy(p->key, r->key, kl);
  return p;
}

/* phantoms[0..n): the stand-ins (or NULL), kept apart from the requests since a
   completed request may already be freed by its waiter. */
static void phantoms_free(struct hvd_request **phantoms, int n) {
  for (int i = 0; i < n; i++)
    if (phantoms[i]) {
      hvd_request_free_results(phantoms[i]);   /* a stand-in's result is dropped */
      free((void *)phantoms[i]->sendbuf);
      free(phantoms[i]);
    }
}

/* Lets go of the requests of reqs[0..n) (with hvd_g.mu held). A completed one may be
   freed here (its waiter left it to us), so nothing reads reqs after this. */
static void release_all(struct hvd_request **reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i] && !reqs[i]->phantom) hvd_request_release(reqs[i]);
}

/* A response list this rank cannot run (a broken protocol; msg says why): lets go of
   the n requests found so far and frees the lookup, with hvd_g.mu held, which it
   releases. */
static hvd_status_t broken_list(struct hvd_request **reqs, struct hvd_request **phantoms,
                                int n) {
  release_all(reqs, n);
  phantoms_free(phantoms, n);
  pthread_mutex_unlock(&hvd_g.mu);
  free(reqs);
  return HVD_ERR_BACKEND;
}

/* Runs the group reqs[0..n) (responses resp[0..n)) on backend ops. */
static hvd_status_t run_group(const hvd_backend_ops_t *ops, struct hvd_request **reqs,
                              const hvd_response_t *resp, int n, char *msg, size_t len,
                              int *agreed) {
  double t0 = util_now_us();
  for (int i = 0; i < n; i++) {
    hvd_timeline_op(reqs[i]->key, "NEGOTIATE", resp[i].first_seen_us, resp[i].ready_us, 0);
    hvd_timeline_op(reqs[i]->key, "QUEUE", resp[i].ready_us, t0, 0);
  }
  hvd_kind_t kind = resp[0].kind;
  hvd_status_t s;
  int supported = 1;
  switch (kind) {
    case HVD_KIND_ALLREDUCE:
      supported = ops->allreduce != NULL;
      s = supported ? ops->allreduce(reqs, resp, n, msg, len) : HVD_OK;
      break;
    case HVD_KIND_BROADCAST:
      supported = ops->broadcast != NULL;
      s = supported ? ops->broadcast(reqs[0], resp, msg, len) : HVD_OK;
      break;
    case HVD_KIND_ALLGATHER:
      supported = ops->allgather != NULL;
      s = supported ? ops->allgather(reqs[0], resp, msg, len, agreed) : HVD_OK;
      break;
    case HVD_KIND_ALLTOALL:
      supported = ops->alltoall != NULL;
      s = supported ? ops->alltoall(reqs[0], resp, msg, len, agreed) : HVD_OK;
      break;
    case HVD_KIND_REDUCESCATTER:
      supported = ops->reducescatter != NULL;
      s = supported ? ops->reducescatter(reqs[0], resp, msg, len) : HVD_OK;
      break;
    default:
      supported = ops->barrier != NULL;
      s = supported ? ops->barrier(reqs[0], resp, msg, len) : HVD_OK;
      break;
  }
  if (!supported) {
    /* Every rank has the same memory kind (checked by the coordinator), so every rank
       refuses here, before any data moves: not fatal. */
    char text[HVD_ERROR_MAX];
    snprintf(text, sizeof(text), "%s of tensor \"%s\": not supported on %s",
             hvd_kind_name(kind), reqs[0]->key, ops->name);
    complete_group(reqs, n, HVD_ERR_INVALID_ARGUMENT, text);
    return HVD_OK;
  }
  /* A group that failed as a whole on every rank (agreed) ends the runtime too, but
     cleanly: the caller knows no peer is left inside a collective. Any other failure
     (a lost peer above all) is left in flight: the background thread finds out what
     happened (the census names the lost ranks) and fails every request with that. */
  if (s == HVD_OK || *agreed) complete_group(reqs, n, s, msg);
  return s;
}

hvd_status_t hvd_execute(const hvd_response_t *resp, int n, char *msg, size_t len,
                         int *fatal_agreed) {
  *fatal_agreed = 0;
  if (n <= 0) return HVD_OK;
  struct hvd_request **reqs = calloc(2 * (size_t)n, sizeof(*reqs));
  struct hvd_request **phantoms = reqs + n;
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
    if (reqs[i] && reqs[i]->held) {   /* a name twice in one list */
      snprintf(msg, len, "rank %d received tensor \"%s\" twice in one response list "
               "(internal error)", hvd_g.rank, key);
      reqs[i] = NULL;
      return broken_list(reqs, phantoms, i);
    }
    if (reqs[i]) reqs[i]->held = 1;
    /* The coordinator answers a name without this rank's request only when this rank
       has joined the name's set; a failed one needs no stand-in (the others only
       complete it). */
    int joined = reqs[i] == NULL && hvd_joined_sets_has(resp[i].set);
    if (joined && resp[i].status == HVD_OK) {
      reqs[i] = phantoms[i] = phantom_new(&resp[i]);
      if (reqs[i] == NULL) {
        snprintf(msg, len, "rank %d: out of memory for the zeros of tensor \"%s\" (it "
                 "has joined)", hvd_g.rank, key);
        return broken_list(reqs, phantoms, i);
      }
    }
    /* A process set's name comes to every rank; those outside the set skip it. (A rank
       of the set has submitted it or joined the set before the coordinator could
       answer it.) */
    if (reqs[i] == NULL && !joined && resp[i].set != 0) continue;
    if (reqs[i] == NULL && !joined) {
      snprintf(msg, len, "rank %d received a response for tensor \"%s\" that it has not "
               "submitted (internal error)", hvd_g.rank, key);
      return broken_list(reqs, phantoms, i);
    }
  }
  pthread_mutex_unlock(&hvd_g.mu);

  hvd_status_t fatal = HVD_OK;
  for (int i = 0; i < n && fatal == HVD_OK;) {
    if (reqs[i] == NULL) {   /* a failed response of a name this joined rank lacks, or
                                another process set's name */
      i++;
      continue;
    }
    if (resp[i].kind == HVD_KIND_JOIN) {
      /* Every rank of the set has joined: each one's join returns, the set goes on as
         before. */
      hvd_joined_sets_remove(resp[i].set);
      reqs[i]->result_last_rank = resp[i].root;
      reqs[i]->results |= HVD_RESULT_LAST_RANK;
      complete_group(&reqs[i], 1, HVD_OK, NULL);
      i++;
      continue;
    }
    if (resp[i].status != HVD_OK) {
      char text[HVD_ERROR_MAX];
      size_t ml = resp[i].msg_len < sizeof(text) - 1 ? resp[i].msg_len : sizeof(text) - 1;
      memcpy(text, resp[i].msg, ml);
      text[ml] = '\0';
      complete_group(&reqs[i], 1, resp[i].status, text);
      i++;
      continue;
    }
    int j = i + 1;
    while (j < n && resp[j].fuse_with_prev) j++;
    const hvd_backend_ops_t *ops = resp[i].device >= 0 ? &hvd_device_ops : &hvd_host_ops;
    /* Grouped allreduces (members) run on host memory only; every rank has the same
       group (its digest is negotiated), so every rank refuses alike. */
    static const hvd_backend_ops_t no_grouped = {.name = "device memory (grouped)"};
    for (int k = i; k < j && ops == &hvd_device_ops; k++)
      if (reqs[k]->nmembers > 0) ops = &no_grouped;
    /* Process sets and scale factors: host memory only; every rank of the set sees the
       same memory kind and options (negotiated), so all refuse alike. */
    static const hvd_backend_ops_t no_sets = {.name = "device memory (process sets, "
                                                      "scale factors)"};
    for (int k = i; k < j && ops == &hvd_device_ops; k++)
      if (resp[k].set != 0 || HVD_SCALES(reqs[k]->prescale) || HVD_SCALES(reqs[k]->postscale))
        ops = &no_sets;
    fatal = run_group(ops, &reqs[i], &resp[i], j - i, msg, len, fatal_agreed);
    /* A deferred request belongs to the device path from now on: a later group of this
       list may complete and let go of it (a buffer that grows waits for the queued
       ones first), so this list forgets it at once. */
    for (int k = i; k < j; k++)
      if (reqs[k] && reqs[k]->deferred) reqs[k] = NULL;
    i = j;
  }
  pthread_mutex_lock(&hvd_g.mu);
  release_all(reqs, n);
  pthread_mutex_unlock(&hvd_g.mu);
  phantoms_free(phantoms, n);
  free(reqs);
  return fatal;
}
