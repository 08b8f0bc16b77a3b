/* hvd/ps_engine.c: the parameter servers' messages, moved by the background loop.

   Its own communicator (a dup of the control one, made at hvd_init) keeps this traffic
   apart from negotiation and the collectives. Each turn of the background loop (or of
   a thread waiting in hvd_wait) calls hvd_ps_turn, which, with the installed set:
   1. posts the messages user threads packed (pushes, pulls) and the DONEs of a finish;
   2. receives every message that came: a server applies pushes (sync: once every
      worker's gradient for the step is in, averaged; async: each on arrival) and
      answers with VALUES when the pusher may go on (sync: the step applied; async:
      the slowest worker within max_staleness); a worker copies VALUES into the
      caller's buffer and completes the request when its last shard came;
   3. frees the sends that completed; completes a finish once every worker said DONE.
   Lost peers are the liveness protocol's business (hvd/liveness.c): it stops the
   runtime, which fails every request, ours included (they are in the in-flight table).
   After that no request is touched again (hvd_g.stopped, read under hvd_g.mu), nor the
   caller's value buffer.

   Locks: ps_mu guards the installed set (engine turns, submissions, install); taken
   before hvd_g.mu, never after. */
#include "hvd/ps_internal.h"
#include "hvd/requests.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS_TAG 1   /* every message: one tag keeps them in order per pair */
static pthread_mutex_t ps_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hvd_ps *cur;
static atomic_int installed;
static MPI_Comm ps_comm = MPI_COMM_NULL;
/* Receives posted for messages that came (receive_all), oldest first. */
typedef struct ps_recv {
  MPI_Request req;
  int src;
  char *buf;
  size_t len;
  struct ps_recv *next;
} ps_recv_t;
static ps_recv_t *recvs;

/* Per rank: its host, as the lowest rank of its local communicator (local aggregation
   and the bytes through other hosts' links). */
static int *ps_hosts;

const int *hvd_ps_hosts(void) { return ps_hosts; }

static hvd_status_t gather_hosts(MPI_Comm ctrl) {
  /* The lowest rank of the host: the largest negated one (MPI_MAX). */
  int neg = -hvd_g.rank, first = 0;
  int rc = MPI_Allreduce(&neg, &first, 1, MPI_INT, MPI_MAX, hvd_g.local_comm);
  first = -first;
  free(ps_hosts);
  ps_hosts = malloc((size_t)hvd_g.size * sizeof(int));
  /* Every rank learns whether all can go on before the gather, so a rank that cannot
     (no memory, a failed local reduction) does not leave the others waiting in it. */
  int ok = ps_hosts != NULL && rc == MPI_SUCCESS, bad = !ok, any_bad = 1;
  int rc_ok = MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, ctrl);
  const int all_ok = !any_bad;
  if (rc_ok == MPI_SUCCESS && all_ok)
    rc = MPI_Allgather(&first, 1, MPI_INT, ps_hosts, 1, MPI_INT, ctrl);
  if (rc_ok != MPI_SUCCESS || !all_ok || rc != MPI_SUCCESS) {
    free(ps_hosts);
    ps_hosts = NULL;
    if (rc_ok == MPI_SUCCESS && !ok && rc == MPI_SUCCESS)
      return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_init: out of memory (the ranks' hosts)");
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: gathering the ranks' hosts (parameter "
                         "servers) failed (MPI errors %d, %d%s)", rc, rc_ok,
                         rc_ok == MPI_SUCCESS && !all_ok ? "; another rank could not" : "");
  }
  return HVD_OK;
}

hvd_status_t hvd_ps_comm_init(MPI_Comm ctrl) {
  int rc = MPI_Comm_dup(ctrl, &ps_comm);
  if (rc != MPI_SUCCESS) {
    ps_comm = MPI_COMM_NULL;
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: MPI_Comm_dup (parameter servers) "
                         "failed with error %d", rc);
  }
  return gather_hosts(ctrl);
}

/* Receives whose buffers MPI may still write (matched, neither completed nor cancelled):
   kept, reachable, for the life of the process rather than freed under MPI. */
static ps_recv_t *abandoned;

/* Whether r's receive is over (completed or cancelled) within about 100 ms. */
static int recv_settled(ps_recv_t *r) {
  for (int i = 0; i < 1000; i++) {
    int done = 0;
    if (MPI_Test(&r->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    if (done) return 1;
    if (i == 0 && MPI_Cancel(&r->req) != MPI_SUCCESS) return 0;
    usleep(100);
  }
  return 0;
}

void hvd_ps_comm_free(int mpi_too) {
  /* What a stopped run left posted (a lost peer's message): not waited for. A receive
     MPI leaves running (or every receive, when MPI is left alone after a failure) keeps
     its buffer: it was matched to a message that may still be arriving. */
  while (recvs) {
    ps_recv_t *r = recvs;
    recvs = r->next;
    if (mpi_too && recv_settled(r)) {
      free(r->buf);
      free(r);
    } else {
      if (mpi_too) MPI_Request_free(&r->req);
      r->next = abandoned;
      abandoned = r;
    }
  }
  if (mpi_too && ps_comm != MPI_COMM_NULL) MPI_Comm_free(&ps_comm);
  ps_comm = MPI_COMM_NULL;
  free(ps_hosts);
  ps_hosts = NULL;
}

int hvd_ps_busy(void) { return atomic_load(&installed); }

/* ---- sends ---- */

static ps_send_t *queue_send(struct hvd_ps *ps, int dest, void *buf, size_t len) {
  ps_send_t *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->dest = dest;
  s->buf = buf;
  s->len = len;
  s->next = ps->sends;
  ps->sends = s;
  return s;
}

/* A record of header h (of this set, count floats) and count floats from data (NULL:
   none; add: plus these). */
static char *pack2(const struct hvd_ps *ps, ps_header_t h, const float *data,
                   const float *add, size_t count, size_t *len) {
  h.gen = ps->gen;
  h.count = (uint32_t)count;
  if (h.weight == 0) h.weight = 1;
  *len = sizeof(h) + count * sizeof(float);
  char *b = malloc(*len);
  if (!b) return NULL;
  memcpy(b, &h, sizeof(h));
  if (count && !add) memcpy(b + sizeof(h), data, count * sizeof(float));
  float *out = (float *)(b + sizeof(h));
  for (size_t i = 0; add && i < count; i++) out[i] = data[i] + add[i];
  return b;
}

static char *pack(const struct hvd_ps *ps, ps_header_t h, const float *data, size_t count,
                  size_t *len) {
  return pack2(ps, h, data, NULL, count, len);
}

/* Small messages to one peer go out as one: their records back to back, oldest first (the
   list is newest first). A worker's step would otherwise post one message per shard
   (resnet20: 65 variables) and a server one answer per shard; each costs a match, a
   header on the wire and a turn of the peer's loop. Large records go alone (no copy). */
#define PS_FUSE_BYTES (64 * 1024)
/* A fused message's cap: far below an int count of bytes (MPI's), however many shards. */
#define PS_FUSE_MAX (4 * 1024 * 1024)

static int fusable(const ps_send_t *s, const ps_send_t *first, size_t total) {
  return !s->posted && s->dest == first->dest && s->len < PS_FUSE_BYTES &&
         total + s->len <= PS_FUSE_MAX;
}

static void fuse_small(ps_send_t *first) {
  if (first->len >= PS_FUSE_BYTES) return;
  size_t total = first->len, n = 1;
  for (ps_send_t *s = first->next; s; s = s->next)
    if (fusable(s, first, total)) {
      total += s->len;
      n++;
    }
  if (n < 2) return;
  char *b = malloc(total);
  if (!b) return;   /* they go one by one */
  size_t at = total, taken = first->len;
  ps_send_t **pp = &first->next;
  memcpy(b + (at -= first->len), first->buf, first->len);
  while (*pp) {
    ps_send_t *s = *pp;
    if (!fusable(s, first, taken)) {
      pp = &s->next;
      continue;
    }
    taken += s->len;
    memcpy(b + (at -= s->len), s->buf, s->len);
    *pp = s->next;
    free(s->buf);
    free(s);
  }
  free(first->buf);
  first->buf = b;
  first->len = total;
}

static int post_sends(struct hvd_ps *ps, int *progressed, char *err, size_t len) {
  for (ps_send_t *s = ps->sends; s; s = s->next) {
    if (s->posted) continue;
    fuse_small(s);
    int rc = MPI_Isend(s->buf, (int)s->len, MPI_BYTE, s->dest, PS_TAG, ps_comm, &s->req);
    if (rc != MPI_SUCCESS) {
      snprintf(err, len, "rank %d: MPI_Isend of a %zu-byte parameter-server message to "
               "rank %d failed (error %d)", hvd_g.rank, s->len, s->dest, rc);
      return -1;
    }
    s->posted = 1;
    ps->stats.bytes_out += s->len;
    if (ps->host[s->dest] != ps->host[hvd_g.rank]) ps->stats.bytes_out_remote += s->len;
    ps->stats.messages_out++;
    *progressed = 1;
  }
  return 0;
}

static int reap_sends(struct hvd_ps *ps, int *progressed, char *err, size_t len) {
  ps_send_t **pp = &ps->sends;
  while (*pp) {
    ps_send_t *s = *pp;
    int done = 0;
    if (s->posted) {
      int rc = MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        snprintf(err, len, "rank %d: a parameter-server send to rank %d failed (error %d)",
                 hvd_g.rank, s->dest, rc);
        return -1;
      }
    }
    if (!done) {
      pp = &s->next;
      continue;
    }
    *pp = s->next;
    free(s->buf);
    free(s);
    *progressed = 1;
  }
  return 0;
}

/* ---- server ---- */

static int send_values(struct hvd_ps *ps, size_t shard, int dest) {
  ps_kept_t *k = &ps->kept[shard];
  ps_header_t h = {.type = PS_MSG_VALUES, .shard = shard, .version = k->version};
  size_t len;
  void *b = pack(ps, h, k->values, ps->shards[shard].count, &len);
  if (!b || !queue_send(ps, dest, b, len)) {
    free(b);
    return 0;
  }
  return 1;
}

/* Answers every worker whose pending answer the shard's version now allows. */
static int answer_ready(struct hvd_ps *ps, size_t shard) {
  ps_kept_t *k = &ps->kept[shard];
  for (int w = 0; w < ps->nworkers; w++) {
    if (k->want[w] == UINT64_MAX || k->version < k->want[w]) continue;
    k->want[w] = UINT64_MAX;
    if (!send_values(ps, shard, ps->first_worker + w)) return 0;
  }
  return 1;
}

/* weight: the workers' gradients in the push (a host's sum: several). */
static void record_staleness(struct hvd_ps *ps, uint64_t st, int weight) {
  ps->stats.pushes += (uint64_t)weight;
  ps->stats.staleness[st < HVD_PS_STALENESS_BINS ? st : HVD_PS_STALENESS_BINS - 1] +=
      (uint64_t)weight;
  if (st > ps->stats.max_staleness) ps->stats.max_staleness = st;
}

static void run_update(struct hvd_ps *ps, size_t shard, float *grad) {
  const ps_shard_t *sh = &ps->shards[shard];
  ps_kept_t *k = &ps->kept[shard];
  ps->cfg.update(ps->cfg.update_ctx, sh->var, sh->offset, k->values, grad, sh->count,
                 k->updates);
  k->updates++;
  ps->stats.updates++;
}

static int apply_push(struct hvd_ps *ps, int w, const ps_header_t *h, float *grad,
                      char *err, size_t len) {
  size_t shard = (size_t)h->shard, count = ps->shards[shard].count;
  ps_kept_t *k = &ps->kept[shard];
  float scale = 1.0f / (float)ps->nworkers;
  if (ps->cfg.mode == HVD_PS_SYNC) {
    if (h->step != k->version || k->want[w] != UINT64_MAX) {
      snprintf(err, len, "rank %d pushed step %llu of variable \"%s\" (shard %zu), but its "
               "server (rank %d) is at step %llu", ps->first_worker + w,
               (unsigned long long)h->step, ps->names[ps->shards[shard].var], shard,
               hvd_g.rank, (unsigned long long)k->version);
      return -1;
    }
    if (h->weight < 1 || h->weight > ps->nworkers - k->arrived) {
      snprintf(err, len, "rank %d pushed a sum of %d gradients of variable \"%s\" (shard "
               "%zu) to rank %d, which has %d of its %d workers' already", ps->first_worker + w,
               (int)h->weight, ps->names[ps->shards[shard].var], shard, hvd_g.rank,
               k->arrived, ps->nworkers);
      return -1;
    }
    if (k->arrived == 0) memcpy(k->accum, grad, count * sizeof(float));
    else
      for (size_t i = 0; i < count; i++) k->accum[i] += grad[i];
    k->arrived += h->weight;
    k->want[w] = h->step + 1;
    record_staleness(ps, 0, h->weight);
    if (k->arrived == ps->nworkers) {
      for (size_t i = 0; i < count; i++) k->accum[i] *= scale;
      run_update(ps, shard, k->accum);
      k->version++;
      k->arrived = 0;
    }
  } else {
    /* Its step minus the complete rounds of the values it was computed on. */
    record_staleness(ps, h->step > h->version ? h->step - h->version : 0, 1);
    for (size_t i = 0; i < count; i++) grad[i] *= scale;
    run_update(ps, shard, grad);
    k->clock[w]++;
    uint64_t v = UINT64_MAX;
    for (int i = 0; i < ps->nworkers; i++)
      if (k->clock[i] < v) v = k->clock[i];
    k->version = v;
    int S = ps->cfg.max_staleness;
    k->want[w] = S < 0 || h->step + 1 <= (uint64_t)S ? 0 : h->step + 1 - (uint64_t)S;
  }
  if (!answer_ready(ps, shard)) {
    snprintf(err, len, "rank %d: out of memory for a parameter-server answer", hvd_g.rank);
    return -1;
  }
  return 0;
}

/* ---- worker ---- */

static void complete(struct hvd_request *r, hvd_status_t s, const char *msg) {
  pthread_mutex_lock(&hvd_g.mu);
  if (!hvd_g.stopped) hvd_request_complete(r, s, msg);
  pthread_mutex_unlock(&hvd_g.mu);
}

static void take_values(struct hvd_ps *ps, const ps_header_t *h, const float *vals) {
  size_t shard = (size_t)h->shard;
  ps_op_t *op = ps->waiting[shard];
  const ps_shard_t *sh = &ps->shards[shard];
  pthread_mutex_lock(&hvd_g.mu);
  if (!hvd_g.stopped) memcpy(op->values + sh->flat, vals, sh->count * sizeof(float));
  pthread_mutex_unlock(&hvd_g.mu);
  ps->vread[shard] = h->version;
  if (!op->pull_only) ps->step[shard]++;
  ps->waiting[shard] = NULL;
  if (--op->remaining == 0) {
    complete(op->req, HVD_OK, NULL);
    free(op);
  }
}

/* ---- local aggregation ---- */

/* The host's gradients of shard are all in this rank's sum: one push to its server,
   with the sum's weight; its answer is shared with the host's other workers. */
static int push_sum(struct hvd_ps *ps, size_t shard, char *b, size_t l) {
  if (!queue_send(ps, ps->shards[shard].server, b, l)) return 0;
  memset(ps->agg_sum[shard], 0, ps->shards[shard].count * sizeof(float));
  ps->agg_arrived[shard] = 0;
  ps->agg_fwd[shard] = 1;
  return 1;
}

/* The aggregated push of shard once grad is added (the host's last gradient of it). */
static char *pack_sum(struct hvd_ps *ps, size_t shard, const float *grad, size_t *l) {
  ps_header_t h = {.type = PS_MSG_PUSH, .weight = ps->nlocal, .shard = shard,
                   .step = ps->step[shard], .version = ps->vread[shard]};
  return pack2(ps, h, ps->agg_sum[shard], grad, ps->shards[shard].count, l);
}

/* One of the host's gradients of shard into this rank's sum. 0: out of memory. */
static int aggregate(struct hvd_ps *ps, size_t shard, const float *grad) {
  if (ps->agg_arrived[shard] + 1 == ps->nlocal) {
    size_t l;
    char *b = pack_sum(ps, shard, grad, &l);
    if (!b || !push_sum(ps, shard, b, l)) {
      free(b);
      return 0;
    }
    return 1;
  }
  float *sum = ps->agg_sum[shard];
  for (size_t i = 0; i < ps->shards[shard].count; i++) sum[i] += grad[i];
  ps->agg_arrived[shard]++;
  return 1;
}

/* The answer to this host's aggregated push, to the host's other workers. */
static int share_values(struct hvd_ps *ps, const ps_header_t *h, const float *vals) {
  for (int i = 0; i < ps->nlocal; i++) {
    if (ps->locals[i] == hvd_g.rank) continue;
    size_t l;
    char *b = pack(ps, *h, vals, ps->shards[h->shard].count, &l);
    if (!b || !queue_send(ps, ps->locals[i], b, l)) {
      free(b);
      return 0;
    }
  }
  ps->agg_fwd[h->shard] = 0;
  return 1;
}

/* ---- receiving ---- */

/* Whether a record of header h from src is one this rank expects (its count checked). */
static int expected(const struct hvd_ps *ps, int src, const ps_header_t *h) {
  int w = src - ps->first_worker, from_worker = w >= 0 && w < ps->nworkers;
  if (h->shard >= ps->nshards) return 0;
  size_t k = (size_t)h->shard;
  if (h->count != (h->type == PS_MSG_PULL ? 0 : ps->shards[k].count)) return 0;
  switch (h->type) {
    case PS_MSG_PUSH:
      return ps->kept[k].values && from_worker &&
             (ps->cfg.mode == HVD_PS_SYNC || h->weight == 1);
    case PS_MSG_PULL:
      return ps->kept[k].values && from_worker;
    case PS_MSG_VALUES:
      return ps->waiting[k] != NULL;
    case PS_MSG_LPUSH:
      return ps->agg_rank[k] == hvd_g.rank && src != hvd_g.rank && from_worker &&
             ps->host[src] == ps->host[hvd_g.rank] && h->step == ps->step[k] &&
             ps->agg_arrived[k] < ps->nlocal;
    default:
      return 0;
  }
}

/* One record (a header and its floats) at rec, of at most n bytes; its length in *used. */
static int handle_record(struct hvd_ps *ps, int src, char *rec, size_t n, size_t *used,
                         char *err, size_t len) {
  ps_header_t h;
  if (n < sizeof(h)) {
    snprintf(err, len, "rank %d received a parameter-server record of %zu bytes from rank "
             "%d, shorter than its header", hvd_g.rank, n, src);
    return -1;
  }
  memcpy(&h, rec, sizeof(h));
  /* Exact: the record's floats must be in the message, and the message must end with
     its last record (handle). */
  if (h.count > (n - sizeof(h)) / sizeof(float)) {
    snprintf(err, len, "rank %d received a parameter-server record of %u values from rank "
             "%d, but only %zu bytes of its message remain", hvd_g.rank, h.count, src,
             n - sizeof(h));
    return -1;
  }
  *used = sizeof(h) + (size_t)h.count * sizeof(float);
  if (h.type == PS_MSG_DONE && h.count == 0) {
    ps->dones++;
    return 0;
  }
  if (!expected(ps, src, &h)) {
    snprintf(err, len, "rank %d received an unexpected parameter-server message from rank "
             "%d (type %d, shard %llu, %u values, step %llu): do both run the same "
             "variables?", hvd_g.rank, src, h.type, (unsigned long long)h.shard, h.count,
             (unsigned long long)h.step);
    return -1;
  }
  int w = src - ps->first_worker;
  float *data = (float *)(rec + sizeof(h));
  if (h.type == PS_MSG_VALUES) {
    if (ps->agg_fwd[h.shard] && !share_values(ps, &h, data)) {
      snprintf(err, len, "rank %d: out of memory for a parameter-server answer", hvd_g.rank);
      return -1;
    }
    take_values(ps, &h, data);
    return 0;
  }
  if (h.type == PS_MSG_LPUSH) {
    if (!aggregate(ps, (size_t)h.shard, data)) {
      snprintf(err, len, "rank %d: out of memory for a parameter-server push", hvd_g.rank);
      return -1;
    }
    return 0;
  }
  if (h.type == PS_MSG_PULL) {
    if (!send_values(ps, (size_t)h.shard, src)) {
      snprintf(err, len, "rank %d: out of memory for a parameter-server answer", hvd_g.rank);
      return -1;
    }
    return 0;
  }
  return apply_push(ps, w, &h, data, err, len);
}

/* A message: one record or several (fuse_small), back to back; one of another set
   (an earlier one's, received late) is dropped whole. */
static int handle(struct hvd_ps *ps, int src, char *buf, size_t n, char *err, size_t len) {
  ps_header_t h;
  if (n >= sizeof(h)) {
    memcpy(&h, buf, sizeof(h));
    if (h.gen != ps->gen) return 0;
  }
  size_t at = 0;
  do {
    size_t used = 0;
    if (handle_record(ps, src, buf + at, n - at, &used, err, len) < 0) return -1;
    at += used;
  } while (at < n);
  return 0;
}

/* Posts a receive for every message that came, then handles those complete. A blocking
   receive per message would hold this loop through each large message's rendezvous (the
   sender's turn to answer it, then the transfer) one after another; posted together,
   their transfers go at once (on a loaded machine each wait is a scheduling delay: the
   2026-12-05 colocated runs spent most of their step there). */
static int receive_all(struct hvd_ps *ps, int *progressed, char *err, size_t len) {
  ps_recv_t **tail = &recvs;
  while (*tail) tail = &(*tail)->next;
  for (;;) {
    int flag = 0, n = 0;
    MPI_Status st;
    int rc = MPI_Iprobe(MPI_ANY_SOURCE, PS_TAG, ps_comm, &flag, &st);
    if (rc == MPI_SUCCESS && !flag) break;
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS) {
      snprintf(err, len, "rank %d: probing for parameter-server messages failed (MPI error "
               "%d)", hvd_g.rank, rc);
      return -1;
    }
    ps_recv_t *r = calloc(1, sizeof(*r));
    char *b = malloc(n > 0 ? (size_t)n : 1);
    if (!r || !b) {
      free(r);
      free(b);
      snprintf(err, len, "rank %d: out of memory for a %d-byte parameter-server message",
               hvd_g.rank, n);
      return -1;
    }
    /* Messages of one source are matched in order: this receive takes the probed one. */
    rc = MPI_Irecv(b, n, MPI_BYTE, st.MPI_SOURCE, PS_TAG, ps_comm, &r->req);
    if (rc != MPI_SUCCESS) {
      free(r);
      free(b);
      snprintf(err, len, "rank %d: receiving a parameter-server message failed (MPI error "
               "%d)", hvd_g.rank, rc);
      return -1;
    }
    *r = (ps_recv_t){r->req, st.MPI_SOURCE, b, (size_t)n, NULL};
    *tail = r;
    tail = &r->next;
    ps->stats.bytes_in += (uint64_t)n;
    if (ps->host[st.MPI_SOURCE] != ps->host[hvd_g.rank]) ps->stats.bytes_in_remote += (uint64_t)n;
    ps->stats.messages_in++;
    *progressed = 1;
  }
  for (ps_recv_t **pp = &recvs; *pp;) {
    ps_recv_t *r = *pp;
    int done = 0;
    int rc = MPI_Test(&r->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      snprintf(err, len, "rank %d: receiving a parameter-server message from rank %d failed "
               "(MPI error %d)", hvd_g.rank, r->src, rc);
      return -1;
    }
    if (!done) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    *progressed = 1;
    int h = handle(ps, r->src, r->buf, r->len, err, len);
    free(r->buf);
    free(r);
    if (h < 0) return -1;
  }
  return 0;
}

/* ---- finish ---- */

static int finish_step(struct hvd_ps *ps, char *err, size_t len) {
  if (!ps->finish_req) return 0;
  if (ps->is_worker && !ps->done_sent) {
    int nservers = ps->cfg.num_ps > 0 ? ps->cfg.num_ps : hvd_g.size;
    for (int s = 0; s < nservers; s++) {
      ps_header_t h = {.type = PS_MSG_DONE};
      size_t l;
      void *b = pack(ps, h, NULL, 0, &l);
      if (!b || !queue_send(ps, s, b, l)) {
        free(b);
        snprintf(err, len, "rank %d: out of memory for a parameter-server message",
                 hvd_g.rank);
        return -1;
      }
    }
    ps->done_sent = 1;
  }
  if (ps->sends || recvs || (ps->is_server && ps->dones < ps->nworkers)) return 0;
  complete(ps->finish_req, HVD_OK, NULL);
  ps->finish_req = NULL;
  return 1;
}

int hvd_ps_turn(char *err, size_t len) {
  pthread_mutex_lock(&ps_mu);
  struct hvd_ps *ps = cur;
  int progressed = 0, rc = 0;
  if (ps) {
    rc = post_sends(ps, &progressed, err, len);
    if (rc == 0) rc = receive_all(ps, &progressed, err, len);
    if (rc == 0) rc = post_sends(ps, &progressed, err, len);   /* the answers */
    if (rc == 0) rc = reap_sends(ps, &progressed, err, len);
    if (rc == 0) {
      rc = finish_step(ps, err, len);
      if (rc > 0) progressed = 1;
    }
    if (rc == 0 && ps->sends) rc = post_sends(ps, &progressed, err, len);   /* DONEs */
  }
  pthread_mutex_unlock(&ps_mu);
  return rc < 0 ? -1 : progressed;
}

/* ---- user threads ---- */

void hvd_ps_install(struct hvd_ps *ps) {
  pthread_mutex_lock(&ps_mu);
  cur = ps;
  atomic_store(&installed, 1);
  pthread_mutex_unlock(&ps_mu);
}

void hvd_ps_uninstall(struct hvd_ps *ps) {
  pthread_mutex_lock(&ps_mu);
  if (cur == ps) {
    cur = NULL;
    atomic_store(&installed, 0);
  }
  pthread_mutex_unlock(&ps_mu);
}

int hvd_ps_ops_pending(const struct hvd_ps *ps) {
  pthread_mutex_lock(&ps_mu);
  int n = 0;
  for (size_t s = 0; s < ps->nshards; s++) n += ps->waiting[s] != NULL;
  pthread_mutex_unlock(&ps_mu);
  return n;
}

/* Puts r in the in-flight table (so a stop fails it) unless the runtime stopped. */
static hvd_status_t enter(struct hvd_ps *ps, struct hvd_request *r, const char *what) {
  pthread_mutex_lock(&hvd_g.mu);
  if (!atomic_load(&hvd_g_initialized)) {
    pthread_mutex_unlock(&hvd_g.mu);
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED, "%s called after hvd_shutdown()", what);
  }
  if (hvd_g.stopped) {
    hvd_status_t s = hvd_set_error(hvd_g.stop_status, "%s", hvd_g.stop_msg);
    pthread_mutex_unlock(&hvd_g.mu);
    return s;
  }
  snprintf(r->key, sizeof(r->key), "\x02ps.%llu", (unsigned long long)ps->seq++);
  hvd_inflight_insert(r);
  if (hvd_g.bg_waiting) pthread_cond_signal(&hvd_g.work_cv);
  pthread_mutex_unlock(&hvd_g.mu);
  return HVD_OK;
}

/* Shard s's message of a request (grads NULL: a pull): to its server, or with local
   aggregation to the host's aggregator of s (LPUSH), or, on that aggregator, the host's
   sum when grads are the last of the host's gradients; NULL (*ok still set) when they
   only go into the sum. *ok 0: out of memory. */
static ps_send_t *make_message(struct hvd_ps *ps, size_t s, const float *grads, int *ok) {
  const ps_shard_t *sh = &ps->shards[s];
  int agg = grads ? ps->agg_rank[s] : -1, dest = sh->server;
  ps_header_t h = {.type = grads ? PS_MSG_PUSH : PS_MSG_PULL, .shard = s,
                   .step = ps->step[s], .version = ps->vread[s]};
  size_t l;
  char *b;
  *ok = 1;
  if (agg == hvd_g.rank) {
    if (ps->agg_arrived[s] + 1 < ps->nlocal) return NULL;
    b = pack_sum(ps, s, grads + sh->flat, &l);
  } else {
    if (agg >= 0) {
      h.type = PS_MSG_LPUSH;
      dest = agg;
    }
    b = pack(ps, h, grads ? grads + sh->flat : NULL, grads ? sh->count : 0, &l);
  }
  ps_send_t *m = b ? calloc(1, sizeof(*m)) : NULL;
  if (!m) {
    free(b);
    *ok = 0;
    return NULL;
  }
  *m = (ps_send_t){.dest = dest, .buf = b, .len = l};
  return m;
}

hvd_status_t hvd_ps_submit(struct hvd_ps *ps, ps_op_t *op, const float *grads) {
  pthread_mutex_lock(&ps_mu);
  for (size_t s = op->s0; s < op->s1; s++)
    if (ps->waiting[s]) {
      pthread_mutex_unlock(&ps_mu);
      return hvd_set_error(HVD_ERR_DUPLICATE_NAME,
                           "hvd_ps_push_pull: variable \"%s\" is already in a request on "
                           "rank %d; wait for it first", ps->names[ps->shards[s].var],
                           hvd_g.rank);
    }
  /* Every message first, so that a failure leaves nothing behind. */
  size_t n = op->s1 - op->s0;
  ps_send_t **msgs = calloc(n ? n : 1, sizeof(*msgs));
  int ok = msgs != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    size_t s = op->s0 + i;
    int b_ok = 0;
    ps_send_t *m = make_message(ps, s, grads, &b_ok);
    if (!b_ok) ok = 0;
    else msgs[i] = m;
  }
  hvd_status_t st = ok ? enter(ps, op->req, "hvd_ps_push_pull")
                       : hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_ps_push_pull: out of memory");
  if (st != HVD_OK) {
    for (size_t i = 0; msgs && i < n; i++) {
      if (!msgs[i]) continue;
      free(msgs[i]->buf);
      free(msgs[i]);
    }
    free(msgs);
    pthread_mutex_unlock(&ps_mu);
    return st;
  }
  for (size_t i = 0; i < n; i++) {
    size_t s = op->s0 + i;
    ps->waiting[s] = op;
    int mine = grads && ps->agg_rank[s] == hvd_g.rank;
    if (mine && !msgs[i]) {   /* not the host's last gradient: into the sum */
      aggregate(ps, s, grads + ps->shards[s].flat);
      continue;
    }
    if (mine) {   /* the host's last: the sum's push, made above */
      memset(ps->agg_sum[s], 0, ps->shards[s].count * sizeof(float));
      ps->agg_arrived[s] = 0;
      ps->agg_fwd[s] = 1;
    }
    msgs[i]->next = ps->sends;
    ps->sends = msgs[i];
  }
  free(msgs);
  op->remaining = n;
  if (n == 0) {   /* variables of no elements */
    complete(op->req, HVD_OK, NULL);
    free(op);
  }
  pthread_mutex_unlock(&ps_mu);
  return HVD_OK;
}

hvd_status_t hvd_ps_submit_finish(struct hvd_ps *ps, struct hvd_request *r) {
  pthread_mutex_lock(&ps_mu);
  hvd_status_t s = enter(ps, r, "hvd_ps_finish");
  if (s == HVD_OK) {
    ps->finishing = 1;
    ps->finish_req = r;
  }
  pthread_mutex_unlock(&ps_mu);
  return s;
}

void hvd_ps_stats_copy(const struct hvd_ps *ps, hvd_ps_stats_t *s) {
  pthread_mutex_lock(&ps_mu);
  *s = ps->stats;
  pthread_mutex_unlock(&ps_mu);
}
