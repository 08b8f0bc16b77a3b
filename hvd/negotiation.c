/* hvd/negotiation.c: how the ranks agree on what to run, and in which order.

   Every rank sends the requests its user threads submitted (name, kind, dtype, count,
   op, root, device) to the coordinator, rank 0. The coordinator counts, per name, the
   ranks that submitted it; when all have, it checks that they agree (else the response
   carries HVD_ERR_MISMATCH and a message naming both values) and appends the name to
   the ready list. The ready list goes out as one ordered RESPONSES message that every
   rank, rank 0 included, executes in that order, so collectives line up even when the
   ranks submitted in different orders.

   The coordinator also decides the fusion plan (Horovod's FuseResponses): allreduce
   responses of the same dtype, op and memory kind (host or device) are grouped, up to
   rank 0's HVD_FUSION_THRESHOLD bytes (a later ready response may join an earlier
   group); a response marked fuse_with_prev runs in the same collective as the one
   before it. Every rank executes exactly this plan (hvd/execute.c).

   The response cache (HVD_CACHE_CAPACITY, hvd/response_cache.c) answers a name that was
   negotiated before with the same signature without the coordinator: every rank keeps
   the responses it executed (as hvd_encode_response writes them), and the ranks agree
   on the cached names they all submitted with one small allreduce of a bit vector
   (hvd/background.c); those hits are planned by hvd_plan, the coordinator's own rules.
   A name submitted with another signature invalidates its entry and comes here, so the
   coordinator still gives the exact mismatch error.

   Wire format (all ranks run the same binary on the same architecture, so structs go
   as bytes): hvd_msg_header_t, then n records:
     request:  wire_request_t, key bytes
     response: wire_response_t, key bytes, message bytes, [allgather: size x int64]
   Records follow each other without padding, so a reader copies fields out (memcpy)
   instead of loading them in place. */
#include "hvd/negotiation.h"
#include "hvd/hvd_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t kind, dtype, op, root, device;
  uint32_t key_len;
  int64_t count;
  int32_t set, set_size;       /* process set (0: the world) and its size */
  double prescale, postscale;
} wire_request_t;

typedef struct {
  int32_t kind, dtype, op, root, status;
  uint32_t key_len, msg_len;
  int32_t device;              /* -1 host, else a CUDA device ordinal (rank 0's)  */
  int32_t fuse_with_prev, set;
  int64_t count;
} wire_response_t;

int hvd_buf_put(hvd_buf_t *b, const void *data, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  return 1;
}

void hvd_buf_free(hvd_buf_t *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

int hvd_encode_request(hvd_buf_t *b, const struct hvd_request *r) {
  wire_request_t w = {r->kind, r->dtype, r->op, r->root, r->device,
                      (uint32_t)strlen(r->key), (int64_t)r->count, r->set, r->set_size,
                      r->prescale, r->postscale};
  return hvd_buf_put(b, &w, sizeof(w)) && hvd_buf_put(b, r->key, w.key_len);
}

/* ---- coordinator (rank 0) ---- */

typedef struct {
  char key[HVD_KEY_MAX];
  wire_request_t *req;         /* per rank */
  unsigned char *have;         /* per rank */
  int nhave;
  int ref;                     /* the lowest rank that submitted it: the reference the
                                  others are checked against (a joined rank has none) */
  double first_seen_us, ready_us, last_warn_us;
} entry_t;

/* One process set's join in progress (Horovod keeps one per process set): the ranks of
   the set that joined (they count as having submitted every name of the set, with
   zeros) and the last one to join (a world rank); dropped when all have. */
typedef struct {
  int32_t set, set_size;
  unsigned char *joined;       /* per world rank */
  int njoined, last_joined;
} join_state_t;

struct hvd_coordinator {
  int size;
  entry_t **pending;           /* names not yet submitted by every rank */
  int npending, cap_pending;
  entry_t **ready;             /* in the order they became ready */
  int nready, cap_ready;
  size_t ready_bytes;
  double *times;               /* of the last emit */
  int cap_times;
  /* hvd_join per process set: the sets with a join in progress. */
  join_state_t *joins;
  int njoins, cap_joins;
};

hvd_coordinator_t *hvd_coordinator_create(int size) {
  hvd_coordinator_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->size = size;
  return c;
}

static void entry_free(entry_t *e) {
  if (!e) return;
  free(e->req);
  free(e->have);
  free(e);
}

void hvd_coordinator_free(hvd_coordinator_t *c) {
  if (!c) return;
  for (int i = 0; i < c->npending; i++) entry_free(c->pending[i]);
  for (int i = 0; i < c->nready; i++) entry_free(c->ready[i]);
  free(c->pending);
  free(c->ready);
  free(c->times);
  for (int i = 0; i < c->njoins; i++) free(c->joins[i].joined);
  free(c->joins);
  free(c);
}

static int push(entry_t ***arr, int *n, int *cap, entry_t *e) {
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 16;
    entry_t **p = realloc(*arr, (size_t)nc * sizeof(*p));
    if (!p) return 0;
    *arr = p;
    *cap = nc;
  }
  (*arr)[(*n)++] = e;
  return 1;
}

static entry_t *entry_new(const hvd_coordinator_t *c, const char *key, size_t key_len,
                          int rank, double now_us) {
  entry_t *e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  e->req = calloc((size_t)c->size, sizeof(*e->req));
  e->have = calloc((size_t)c->size, 1);
  if (!e->req || !e->have) {
    entry_free(e);
    return NULL;
  }
  memcpy(e->key, key, key_len + 1);
  e->ref = rank;
  e->first_seen_us = now_us;
  e->last_warn_us = now_us;
  return e;
}

/* The ranks that must submit e: its process set's (only the ranks of the set submit
   its names), else every rank. */
static int entry_need(const hvd_coordinator_t *c, const entry_t *e) {
  const wire_request_t *w = &e->req[e->ref];
  return w->set != 0 ? w->set_size : c->size;
}

/* The join in progress in set (NULL: none). */
static join_state_t *join_find(const hvd_coordinator_t *c, int32_t set) {
  for (int i = 0; i < c->njoins; i++)
    if (c->joins[i].set == set) return &c->joins[i];
  return NULL;
}

/* A rank of e's set that has joined it and not submitted e (-1: none). */
static int joined_rank_of(const hvd_coordinator_t *c, const entry_t *e) {
  const join_state_t *js = join_find(c, e->req[e->ref].set);
  for (int r = 0; js && r < c->size; r++)
    if (js->joined[r] && !e->have[r]) return r;
  return -1;
}

/* Whether every rank has submitted pending[idx] or joined its set (a join counts for
   the names of its own set only); if so it moves to the ready list (pending keeps
   arrival order: it is also the stall report's order). 0 when out of memory. */
static int promote_if_ready(hvd_coordinator_t *c, int idx, double now_us) {
  entry_t *e = c->pending[idx];
  int have = e->nhave;
  const join_state_t *js = join_find(c, e->req[e->ref].set);
  for (int r = 0; js && r < c->size; r++)
    have += js->joined[r] && !e->have[r];
  if (have < entry_need(c, e)) return 1;
  memmove(&c->pending[idx], &c->pending[idx + 1],
          (size_t)(c->npending - idx - 1) * sizeof(entry_t *));
  c->npending--;
  e->ready_us = now_us;
  if (!push(&c->ready, &c->nready, &c->cap_ready, e)) return 0;
  const wire_request_t *w = &e->req[e->ref];
  size_t es = hvd_dtype_size((hvd_dtype_t)w->dtype);
  c->ready_bytes += (size_t)w->count * (es ? es : 1);
  return 1;
}

/* The join state of w's set, a new one if none is in progress. NULL: out of memory. */
static join_state_t *join_open(hvd_coordinator_t *c, const wire_request_t *w) {
  join_state_t *js = join_find(c, w->set);
  if (js) return js;
  if (c->njoins == c->cap_joins) {
    int nc = c->cap_joins ? 2 * c->cap_joins : 4;
    join_state_t *p = realloc(c->joins, (size_t)nc * sizeof(*p));
    if (!p) return NULL;
    c->joins = p;
    c->cap_joins = nc;
  }
  unsigned char *joined = calloc((size_t)c->size, 1);
  if (!joined) return NULL;
  js = &c->joins[c->njoins++];
  *js = (join_state_t){w->set, w->set != 0 ? w->set_size : c->size, joined, 0, -1};
  return js;
}

/* rank joined w's set (its join request w under key): every pending name of the set
   that only waited for it becomes ready; when it is the set's last, the join itself is
   answered (to the set's ranks; root: the last rank to join). */
static int add_join(hvd_coordinator_t *c, int rank, const wire_request_t *w,
                    const char *key, size_t key_len, double now_us) {
  join_state_t *js = join_open(c, w);
  if (!js || js->joined[rank]) return 0;   /* a rank never has two joins of a set */
  js->joined[rank] = 1;
  js->njoined++;
  js->last_joined = rank;
  for (int j = c->npending - 1; j >= 0; j--)
    if (!promote_if_ready(c, j, now_us)) return 0;
  if (js->njoined < js->set_size) return 1;
  entry_t *e = entry_new(c, key, key_len, rank, now_us);
  if (!e) return 0;
  e->req[rank] = *w;
  e->req[rank].root = js->last_joined;
  e->ready_us = now_us;
  if (!push(&c->ready, &c->nready, &c->cap_ready, e)) {
    entry_free(e);
    return 0;
  }
  free(js->joined);
  *js = c->joins[--c->njoins];
  return 1;
}

int hvd_coordinator_add(hvd_coordinator_t *c, int rank, const char *payload, size_t len,
                        int n, double now_us) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    wire_request_t w;
    if (off + sizeof(w) > len) return 0;
    memcpy(&w, payload + off, sizeof(w));
    off += sizeof(w);
    if (w.key_len == 0 || w.key_len >= HVD_KEY_MAX || off + w.key_len > len) return 0;
    char key[HVD_KEY_MAX];
    memcpy(key, payload + off, w.key_len);
    key[w.key_len] = '\0';
    off += w.key_len;
    if (w.kind == HVD_KIND_JOIN) {
      if (!add_join(c, rank, &w, key, w.key_len, now_us)) return 0;
      continue;
    }

    int idx = -1;
    for (int j = 0; j < c->npending; j++)
      if (strcmp(c->pending[j]->key, key) == 0) { idx = j; break; }
    entry_t *e;
    if (idx < 0) {
      e = entry_new(c, key, w.key_len, rank, now_us);
      if (!e || !push(&c->pending, &c->npending, &c->cap_pending, e)) {
        entry_free(e);
        return 0;
      }
      idx = c->npending - 1;
    }
    e = c->pending[idx];
    if (e->have[rank]) return 0;   /* a rank never has one name in flight twice */
    e->have[rank] = 1;
    e->req[rank] = w;
    e->nhave++;
    /* The lowest rank is the reference, not the first to arrive: a mismatch message
       then reads the same whatever the timing (cache rounds change who comes first). */
    if (rank < e->ref) e->ref = rank;
    if (!promote_if_ready(c, idx, now_us)) return 0;
  }
  return off == len;
}

int hvd_coordinator_should_emit(hvd_coordinator_t *c, double now_us) {
  if (c->nready == 0) return 0;
  /* Nothing else is on its way: waiting would only add latency. */
  if (c->npending == 0) return 1;
  if (c->ready_bytes >= hvd_g.cfg.fusion_threshold) return 1;
  return now_us - c->ready[0]->ready_us >= hvd_g.cfg.cycle_time_ms * 1000.0;
}

/* Fills msg (HVD_ERROR_MAX) when the ranks disagree on e; returns the status. */
static hvd_status_t check_mismatch(const hvd_coordinator_t *c, const entry_t *e,
                                   char *msg) {
  char dbuf[HVD_KEY_MAX + 32];
  const char *name = hvd_display_name(e->key, dbuf, sizeof(dbuf));
  const wire_request_t *a = &e->req[e->ref];
  const char *kind = hvd_kind_name((hvd_kind_t)a->kind);
  msg[0] = '\0';
  if (a->kind == HVD_KIND_JOIN) return HVD_OK;
  for (int r = 0; r < c->size; r++) {
    if (!e->have[r] || r == e->ref) continue;   /* a joined rank sends zeros */
    const wire_request_t *b = &e->req[r];
    if (a->kind != b->kind) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched operations for tensor \"%s\": one rank sent %s, another rank "
               "sent %s.", name, kind, hvd_kind_name((hvd_kind_t)b->kind));
      return HVD_ERR_MISMATCH;
    }
    if (a->set != b->set || a->set_size != b->set_size) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s process sets for tensor \"%s\": one rank sent set %d of %d "
               "ranks, another rank sent set %d of %d ranks.", kind, name, a->set,
               a->set_size, b->set, b->set_size);
      return HVD_ERR_MISMATCH;
    }
    if ((a->kind == HVD_KIND_ALLREDUCE || a->kind == HVD_KIND_REDUCESCATTER) &&
        (a->prescale != b->prescale || a->postscale != b->postscale)) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s scale factors for tensor \"%s\": one rank sent prescale %g "
               "postscale %g, another rank sent prescale %g postscale %g.", kind, name,
               a->prescale, a->postscale, b->prescale, b->postscale);
      return HVD_ERR_MISMATCH;
    }
    if (a->dtype != b->dtype) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s data types for tensor \"%s\": one rank sent %s, another "
               "rank sent %s.", kind, name, hvd_dtype_name((hvd_dtype_t)a->dtype),
               hvd_dtype_name((hvd_dtype_t)b->dtype));
      return HVD_ERR_MISMATCH;
    }
    /* allgather and alltoall: each rank sends its own amount */
    if (a->kind != HVD_KIND_ALLGATHER && a->kind != HVD_KIND_ALLTOALL &&
        a->count != b->count) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s counts for tensor \"%s\": one rank sent %lld, another rank "
               "sent %lld.", kind, name, (long long)a->count, (long long)b->count);
      return HVD_ERR_MISMATCH;
    }
    if ((a->kind == HVD_KIND_ALLREDUCE || a->kind == HVD_KIND_REDUCESCATTER) &&
        a->op != b->op) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s ops for tensor \"%s\": one rank sent %s, another rank sent "
               "%s.", kind, name, hvd_op_name((hvd_op_t)a->op),
               hvd_op_name((hvd_op_t)b->op));
      return HVD_ERR_MISMATCH;
    }
    /* A grouped allreduce carries a digest of its members' counts in root: the same
       total in other pieces is still a mismatch. */
    if (a->kind == HVD_KIND_ALLREDUCE && a->root != b->root) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s groups for tensor \"%s\": the ranks passed different numbers "
               "of tensors or different counts per tensor (digests %d and %d).", kind, name,
               a->root, b->root);
      return HVD_ERR_MISMATCH;
    }
    if (a->kind == HVD_KIND_BROADCAST && a->root != b->root) {
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s root ranks for tensor \"%s\": one rank sent %d, another "
               "rank sent %d.", kind, name, a->root, b->root);
      return HVD_ERR_MISMATCH;
    }
    /* Host against device memory, as Horovod checks it: device ordinals differ
       between the ranks of a host (local rank i drives GPU i) and may. */
    if ((a->device < 0) != (b->device < 0)) {
      char da[32], db[32];
      snprintf(da, sizeof(da), a->device < 0 ? "host memory" : "CUDA device %d", a->device);
      snprintf(db, sizeof(db), b->device < 0 ? "host memory" : "CUDA device %d", b->device);
      snprintf(msg, HVD_ERROR_MAX,
               "Mismatched %s devices for tensor \"%s\": one rank sent %s, another rank "
               "sent %s.", kind, name, da, db);
      return HVD_ERR_MISMATCH;
    }
  }
  if (e->nhave < entry_need(c, e)) {
    /* Some rank joined. Zeros stand in for it only where they mean "no contribution"
       to a reduction; Horovod refuses the other collectives under join alike. */
    int unsupported = a->kind != HVD_KIND_ALLREDUCE && a->kind != HVD_KIND_REDUCESCATTER &&
                      a->kind != HVD_KIND_BARRIER;
    if (unsupported || a->device >= 0) {
      snprintf(msg, HVD_ERROR_MAX,
               "%s of tensor \"%s\"%s is not supported while a rank has called hvd_join "
               "(rank %d has joined%s)", kind, name,
               unsupported ? "" : " on CUDA device memory", joined_rank_of(c, e),
               a->set != 0 ? " the process set" : "");
      return HVD_ERR_INVALID_ARGUMENT;
    }
  }
  return HVD_OK;
}

/* Whether item b may run in the same fused allreduce as a. */
static int fusable(const hvd_plan_item_t *a, const hvd_plan_item_t *b) {
  return b->kind == HVD_KIND_ALLREDUCE && b->dtype == a->dtype && b->op == a->op &&
         b->on_device == a->on_device && b->count > 0 && b->set == a->set &&
         b->prescale == a->prescale && b->postscale == a->postscale;
}

static size_t item_bytes(const hvd_plan_item_t *it) {
  return (size_t)it->count * hvd_dtype_size(it->dtype);
}

/* Horovod's FuseResponses. Groups follow the first member's position in the list; a
   later item may join an earlier group. The response cache plans its hits with this
   same function, so the same inputs in the same order give the same plan everywhere. */
void hvd_plan(const hvd_plan_item_t *items, int n, size_t threshold, int *order,
              unsigned char *fuse) {
  int k = 0;
  unsigned char *used = fuse + n;     /* scratch: n more bytes */
  memset(used, 0, (size_t)n);
  for (int i = 0; i < n; i++) {
    if (used[i]) continue;
    used[i] = 1;
    order[k] = i;
    fuse[k++] = 0;
    const hvd_plan_item_t *e = &items[i];
    size_t bytes = item_bytes(e);
    if (e->status != HVD_OK || e->kind != HVD_KIND_ALLREDUCE || bytes == 0 ||
        bytes > threshold)
      continue;
    for (int j = i + 1; j < n; j++) {
      if (used[j] || items[j].status != HVD_OK || !fusable(e, &items[j])) continue;
      size_t b = item_bytes(&items[j]);
      if (bytes + b > threshold) continue;
      bytes += b;
      used[j] = 1;
      order[k] = j;
      fuse[k++] = 1;
    }
  }
}

/* The coordinator's plan of its ready list: order[] (indices into c->ready) and fuse[]
   (1: same collective as the previous one). */
static int plan(const hvd_coordinator_t *c, const hvd_status_t *status, int *order,
                unsigned char *fuse) {
  int n = c->nready;
  hvd_plan_item_t *items = malloc((size_t)n * sizeof(*items));
  if (!items) return 0;
  for (int i = 0; i < n; i++) {
    const wire_request_t *w = &c->ready[i]->req[c->ready[i]->ref];
    items[i] = (hvd_plan_item_t){(hvd_kind_t)w->kind, (hvd_dtype_t)w->dtype,
                                 (hvd_op_t)w->op, w->device >= 0, w->count, status[i],
                                 w->set, w->prescale, w->postscale};
  }
  hvd_plan(items, n, hvd_g.cfg.fusion_threshold, order, fuse);
  free(items);
  return 1;
}

int hvd_coordinator_emit(hvd_coordinator_t *c, hvd_buf_t *msg) {
  int n = c->nready;
  msg->len = 0;
  hvd_msg_header_t h = {HVD_MSG_RESPONSES, n, 0, 0};
  if (!hvd_buf_put(msg, &h, sizeof(h))) return -1;
  if (c->cap_times < 2 * n) {
    double *t = realloc(c->times, (size_t)(2 * n) * sizeof(double));
    if (!t) return -1;
    c->times = t;
    c->cap_times = 2 * n;
  }
  hvd_status_t *status = malloc((size_t)n * sizeof(*status));
  int *order = malloc((size_t)n * sizeof(*order));
  unsigned char *fuse = malloc(2 * (size_t)n);
  int ok = status && order && fuse;
  char text[HVD_ERROR_MAX];
  for (int i = 0; ok && i < n; i++) status[i] = check_mismatch(c, c->ready[i], text);
  if (ok) ok = plan(c, status, order, fuse);
  for (int k = 0; ok && k < n; k++) {
    entry_t *e = c->ready[order[k]];
    hvd_status_t s = check_mismatch(c, e, text);
    const wire_request_t *a = &e->req[e->ref];
    int64_t total = a->count;
    if (a->kind == HVD_KIND_ALLGATHER) {
      total = 0;
      for (int r = 0; r < c->size; r++) total += e->req[r].count;
    }
    wire_response_t w = {a->kind, a->dtype, a->op, a->root, s, (uint32_t)strlen(e->key),
                         (uint32_t)strlen(text), a->device, fuse[k], a->set, total};
    ok = hvd_buf_put(msg, &w, sizeof(w)) && hvd_buf_put(msg, e->key, w.key_len) &&
         hvd_buf_put(msg, text, w.msg_len);
    if (ok && a->kind == HVD_KIND_ALLGATHER && s == HVD_OK)
      for (int r = 0; r < c->size && ok; r++)
        ok = hvd_buf_put(msg, &e->req[r].count, sizeof(int64_t));
    c->times[2 * k] = e->first_seen_us;
    c->times[2 * k + 1] = e->ready_us;
  }
  free(status);
  free(order);
  free(fuse);
  if (!ok) return -1;
  for (int i = 0; i < n; i++) entry_free(c->ready[i]);
  c->nready = 0;
  c->ready_bytes = 0;
  return n;
}

int hvd_encode_response(hvd_buf_t *b, const hvd_response_t *r, int fuse_with_prev) {
  wire_response_t w = {r->kind, r->dtype, r->op, r->root, r->status, r->key_len,
                       r->msg_len, r->device, fuse_with_prev, r->set, r->count};
  int ok = hvd_buf_put(b, &w, sizeof(w)) && hvd_buf_put(b, r->key, r->key_len) &&
           (r->msg_len == 0 || hvd_buf_put(b, r->msg, r->msg_len));
  if (ok && r->kind == HVD_KIND_ALLGATHER && r->status == HVD_OK && r->counts)
    ok = hvd_buf_put(b, r->counts, (size_t)hvd_g.size * sizeof(int64_t));
  return ok;
}

const double *hvd_coordinator_emitted_times(const hvd_coordinator_t *c) {
  return c->times;
}

int hvd_decode_responses(const char *payload, size_t len, int n, int size,
                         hvd_response_t *resp) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    wire_response_t w;
    if (off + sizeof(w) > len) return 0;
    memcpy(&w, payload + off, sizeof(w));
    off += sizeof(w);
    hvd_response_t *r = &resp[i];
    memset(r, 0, sizeof(*r));
    r->kind = (hvd_kind_t)w.kind;
    r->dtype = (hvd_dtype_t)w.dtype;
    r->op = (hvd_op_t)w.op;
    r->root = w.root;
    r->status = (hvd_status_t)w.status;
    r->device = w.device;
    r->fuse_with_prev = w.fuse_with_prev != 0;
    r->set = w.set;
    r->count = w.count;
    if (off + w.key_len + w.msg_len > len) return 0;
    r->key = payload + off;
    off += w.key_len;
    r->msg = payload + off;
    off += w.msg_len;
    r->key_len = w.key_len;
    r->msg_len = w.msg_len;
    if (r->kind == HVD_KIND_ALLGATHER && r->status == HVD_OK) {
      if (off + (size_t)size * sizeof(int64_t) > len) return 0;
      r->counts = payload + off;
      off += (size_t)size * sizeof(int64_t);
    }
  }
  return off == len;
}

int64_t hvd_response_count(const hvd_response_t *r, int i) {
  int64_t c;
  memcpy(&c, r->counts + (size_t)i * sizeof(c), sizeof(c));
  return c;
}

int hvd_coordinator_check_stalls(hvd_coordinator_t *c, double now_us, char *msg,
                                 size_t len) {
  double check_us = hvd_g.cfg.stall_check_s * 1e6;
  double shut_us = hvd_g.cfg.stall_shutdown_s * 1e6;
  int shutdown = 0;
  char report[4096];
  size_t rlen = 0;
  int nstalled = 0;
  report[0] = '\0';
  for (int i = 0; i < c->npending; i++) {
    entry_t *e = c->pending[i];
    double waited = now_us - e->first_seen_us;
    int warn = check_us > 0 && waited >= check_us && now_us - e->last_warn_us >= check_us;
    int kill = shut_us > 0 && waited >= shut_us;
    if (!warn && !kill) continue;
    char dbuf[HVD_KEY_MAX + 32], missing[512];
    size_t ml = 0;
    missing[0] = '\0';
    for (int r = 0; r < c->size && ml < sizeof(missing) - 16; r++)
      if (!e->have[r])
        ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml, "%s%d", ml ? ", " : "", r);
    const wire_request_t *any = NULL;
    for (int r = 0; r < c->size && !any; r++)
      if (e->have[r]) any = &e->req[r];
    const char *name = hvd_display_name(e->key, dbuf, sizeof(dbuf));
    if (rlen < sizeof(report) - 1)
      rlen += (size_t)snprintf(report + rlen, sizeof(report) - rlen,
                               "\n  %s \"%s\": waiting %.1f s; missing ranks: %s",
                               any ? hvd_kind_name((hvd_kind_t)any->kind) : "?", name,
                               waited * 1e-6, missing);
    nstalled++;
    if (warn) e->last_warn_us = now_us;
    if (kill && !shutdown) {
      shutdown = 1;
      snprintf(msg, len,
               "stall shutdown: tensor \"%s\" waited %.1f s (HVD_STALL_SHUTDOWN_TIME_SECONDS"
               "=%g) for ranks %s that never submitted it", name, waited * 1e-6,
               hvd_g.cfg.stall_shutdown_s, missing);
    }
  }
  if (nstalled > 0)
    hvd_log(HVD_LOG_WARNING,
            "stall: %d tensor(s) submitted by some ranks have waited for the others for "
            "more than %g s (a rank may be stuck, or the ranks call different "
            "collectives):%s", nstalled,
            shutdown && (check_us <= 0 || shut_us < check_us) ? hvd_g.cfg.stall_shutdown_s
                                                               : hvd_g.cfg.stall_check_s,
            report);
  return shutdown;
}
