/* hvd/ps_api.c: the parameter servers' public calls (hvd/hvd.h): creation (the
   registration every rank checks against rank 0's, through an allgather), requests,
   finish, statistics. The messages themselves are hvd/ps_engine.c's. */
#include "hvd/ps_internal.h"
#include "hvd/requests.h"

#include <stdlib.h>
#include <string.h>

/* One rank's registration as it travels: the settings, then one record per variable. */
typedef struct {
  int64_t mode, num_ps, placement, split_bytes, max_staleness, local_aggregation, nvars;
} reg_head_t;
typedef struct {
  int64_t count;
  char name[HVD_NAME_MAX + 1];
} reg_var_t;

static const char *mode_name(int64_t m) { return m == HVD_PS_SYNC ? "sync" : "async"; }
static const char *placement_name(int64_t p) {
  return p == HVD_PS_GREEDY ? "greedy" : "round-robin";
}
static const char *agg_name(int64_t a) {
  return a == HVD_PS_AGG_AUTO ? "auto" : a == HVD_PS_AGG_ON ? "on" : "off";
}

/* Each set's number (gen in the messages): sets are created collectively, in the same
   order on every rank. */
static uint32_t last_gen;

static hvd_status_t check_args(hvd_ps_t **out, const hvd_ps_config_t *cfg, size_t nvars,
                               const char *const *names, const size_t *counts) {
  const char *w = "hvd_ps_create";
  if (!out || !cfg || (nvars && (!names || !counts)))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: out, cfg, names and counts must "
                         "not be NULL", w);
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED, "%s called before hvd_init()", w);
  if (cfg->mode != HVD_PS_SYNC && cfg->mode != HVD_PS_ASYNC)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: mode %d is neither HVD_PS_SYNC nor "
                         "HVD_PS_ASYNC", w, (int)cfg->mode);
  if (cfg->placement != HVD_PS_GREEDY && cfg->placement != HVD_PS_ROUND_ROBIN)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: placement %d is neither "
                         "HVD_PS_GREEDY nor HVD_PS_ROUND_ROBIN", w, (int)cfg->placement);
  if (cfg->num_ps < 0 || cfg->num_ps >= hvd_g.size)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: num_ps %d: expected 0 (colocated) "
                         "to %d (at least one rank must work; size is %d)", w, cfg->num_ps,
                         hvd_g.size - 1, hvd_g.size);
  if (cfg->max_staleness < -1)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: max_staleness %d: expected -1 "
                         "(unbounded) or more", w, cfg->max_staleness);
  if (cfg->local_aggregation != HVD_PS_AGG_AUTO && cfg->local_aggregation != HVD_PS_AGG_ON &&
      cfg->local_aggregation != HVD_PS_AGG_OFF)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: local_aggregation %d is none of "
                         "HVD_PS_AGG_AUTO, HVD_PS_AGG_ON, HVD_PS_AGG_OFF", w,
                         (int)cfg->local_aggregation);
  if (!cfg->update)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: the update callback is NULL", w);
  for (size_t v = 0; v < nvars; v++) {
    size_t l = names[v] ? strlen(names[v]) : 0;
    int ctl = 0;
    for (size_t i = 0; i < l; i++) ctl |= (unsigned char)names[v][i] < 0x20;
    if (l == 0 || l > HVD_NAME_MAX || ctl)
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: variable %zu has an empty, "
                           "too long (over %d bytes) or control-character name", w, v,
                           HVD_NAME_MAX);
    /* A shard travels as one MPI message (an int count of bytes). */
    size_t bytes = counts[v] * sizeof(float), parts = 1;
    size_t nservers = cfg->num_ps > 0 ? (size_t)cfg->num_ps : (size_t)hvd_g.size;
    if (cfg->split_bytes && bytes > cfg->split_bytes) {
      parts = (bytes + cfg->split_bytes - 1) / cfg->split_bytes;
      if (parts > nservers) parts = nservers;
    }
    if (counts[v] > (1ull << 40) || bytes / parts > (size_t)1 << 30)
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: variable \"%s\" of %zu elements "
                           "is too large for one message per shard (1 GiB); set split_bytes",
                           w, names[v], counts[v]);
  }
  return HVD_OK;
}

/* The first difference between rank r's registration and rank 0's, as
   HVD_ERR_MISMATCH naming both; HVD_OK when they agree. */
static hvd_status_t compare(const char *r0, const char *rr, int r) {
  reg_head_t a, b;
  memcpy(&a, r0, sizeof(a));
  memcpy(&b, rr, sizeof(b));
  if (a.mode != b.mode || a.num_ps != b.num_ps || a.placement != b.placement ||
      a.split_bytes != b.split_bytes || a.max_staleness != b.max_staleness ||
      a.local_aggregation != b.local_aggregation)
    return hvd_set_error(HVD_ERR_MISMATCH, "Mismatched parameter-server settings: rank 0 "
                         "has mode %s, num_ps %lld, placement %s, split_bytes %lld, "
                         "max_staleness %lld, local_aggregation %s; rank %d has %s, %lld, "
                         "%s, %lld, %lld, %s",
                         mode_name(a.mode), (long long)a.num_ps, placement_name(a.placement),
                         (long long)a.split_bytes, (long long)a.max_staleness,
                         agg_name(a.local_aggregation), r, mode_name(b.mode),
                         (long long)b.num_ps, placement_name(b.placement),
                         (long long)b.split_bytes, (long long)b.max_staleness,
                         agg_name(b.local_aggregation));
  int64_t n = a.nvars < b.nvars ? a.nvars : b.nvars;
  for (int64_t v = 0; v < n; v++) {
    reg_var_t x, y;
    memcpy(&x, r0 + sizeof(a) + (size_t)v * sizeof(x), sizeof(x));
    memcpy(&y, rr + sizeof(b) + (size_t)v * sizeof(y), sizeof(y));
    if (strcmp(x.name, y.name) != 0)
      return hvd_set_error(HVD_ERR_MISMATCH, "Mismatched parameter-server variables: "
                           "variable %lld is \"%s\" on rank 0 and \"%s\" on rank %d",
                           (long long)v, x.name, y.name, r);
    if (x.count != y.count)
      return hvd_set_error(HVD_ERR_MISMATCH, "Mismatched parameter-server registrations "
                           "for variable \"%s\": rank 0 registered %lld elements, rank %d "
                           "registered %lld", x.name, (long long)x.count, r,
                           (long long)y.count);
  }
  if (a.nvars != b.nvars)
    return hvd_set_error(HVD_ERR_MISMATCH, "Mismatched parameter-server registrations: rank "
                         "0 registered %lld variables, rank %d registered %lld",
                         (long long)a.nvars, r, (long long)b.nvars);
  return HVD_OK;
}

/* Every rank's registration, checked against rank 0's on every rank alike. */
static hvd_status_t agree(const hvd_ps_config_t *cfg, size_t nvars,
                          const char *const *names, const size_t *counts) {
  size_t len = sizeof(reg_head_t) + nvars * sizeof(reg_var_t);
  char *mine = calloc(1, len);
  if (!mine) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_ps_create: out of memory");
  reg_head_t h = {cfg->mode, cfg->num_ps, cfg->placement, (int64_t)cfg->split_bytes,
                  cfg->mode == HVD_PS_ASYNC ? cfg->max_staleness : -1,
                  cfg->local_aggregation, (int64_t)nvars};
  memcpy(mine, &h, sizeof(h));
  for (size_t v = 0; v < nvars; v++) {
    reg_var_t x;
    memset(&x, 0, sizeof(x));
    x.count = (int64_t)counts[v];
    snprintf(x.name, sizeof(x.name), "%s", names[v]);
    memcpy(mine + sizeof(h) + v * sizeof(x), &x, sizeof(x));
  }
  void *all = NULL;
  size_t total = 0;
  hvd_status_t s = hvd_allgather("hvd.ps.registration", mine, len, HVD_UINT8, &all, &total);
  free(mine);
  if (s != HVD_OK) return s;
  /* Each rank's registration starts with its header, which gives its length. */
  const char *p = all, *end = (const char *)all + total, *r0 = all;
  for (int r = 0; r < hvd_g.size && s == HVD_OK; r++) {
    reg_head_t b;
    if ((size_t)(end - p) < sizeof(b)) {
      s = hvd_set_error(HVD_ERR_BACKEND, "hvd_ps_create: the registrations came back cut "
                        "short");
      break;
    }
    memcpy(&b, p, sizeof(b));
    size_t lr = sizeof(b) + (size_t)b.nvars * sizeof(reg_var_t);
    if (b.nvars < 0 || lr > (size_t)(end - p)) {
      s = hvd_set_error(HVD_ERR_BACKEND, "hvd_ps_create: rank %d's registration came back "
                        "cut short", r);
      break;
    }
    if (r > 0) s = compare(r0, p, r);
    p += lr;
  }
  free(all);
  return s;
}

static void ps_free(hvd_ps_t *ps) {
  if (!ps) return;
  for (size_t v = 0; ps->names && v < ps->nvars; v++) free(ps->names[v]);
  free(ps->names);
  free(ps->counts);
  free(ps->starts);
  free(ps->shards);
  free(ps->var_shard0);
  free(ps->var_nshards);
  for (size_t k = 0; ps->kept && k < ps->nshards; k++) {
    free(ps->kept[k].values);
    free(ps->kept[k].accum);
    free(ps->kept[k].clock);
    free(ps->kept[k].want);
    if (ps->agg_sum) free(ps->agg_sum[k]);
  }
  free(ps->kept);
  free(ps->agg_rank);
  free(ps->locals);
  free(ps->agg_sum);
  free(ps->agg_arrived);
  free(ps->agg_fwd);
  free(ps->step);
  free(ps->vread);
  /* A request's op can be left only after a failure: its request failed already. */
  for (size_t k = 0; ps->waiting && k < ps->nshards; k++) {
    ps_op_t *op = ps->waiting[k];
    if (!op) continue;
    for (size_t j = k; j < ps->nshards; j++)
      if (ps->waiting[j] == op) ps->waiting[j] = NULL;
    free(op);
  }
  free(ps->waiting);
  /* Sends never posted are ours; a posted one may still be read by MPI after a failure,
     so its buffer is left (the runtime is over then). */
  while (ps->sends) {
    ps_send_t *s = ps->sends;
    ps->sends = s->next;
    if (!s->posted) free(s->buf);
    free(s);
  }
  free(ps);
}

/* The variables, the placement and this rank's roles and shards. 0: out of memory. */
static int build(hvd_ps_t *ps, size_t nvars, const char *const *names, const size_t *counts,
                 const float *init) {
  ps->nvars = nvars;
  ps->names = calloc(nvars ? nvars : 1, sizeof(char *));
  ps->counts = calloc(nvars ? nvars : 1, sizeof(size_t));
  ps->starts = calloc(nvars ? nvars : 1, sizeof(size_t));
  if (!ps->names || !ps->counts || !ps->starts) return 0;
  for (size_t v = 0; v < nvars; v++) {
    if (!(ps->names[v] = strdup(names[v]))) return 0;
    ps->counts[v] = counts[v];
    ps->starts[v] = ps->total;
    ps->total += counts[v];
  }
  int K = ps->cfg.num_ps;
  ps->first_worker = K;
  ps->nworkers = hvd_g.size - K;
  ps->is_worker = hvd_g.rank >= K;
  ps->is_server = K == 0 || hvd_g.rank < K;
  if (!hvd_ps_place(ps, K > 0 ? K : hvd_g.size)) return 0;
  size_t n = ps->nshards ? ps->nshards : 1;
  ps->kept = calloc(n, sizeof(*ps->kept));
  ps->step = calloc(n, sizeof(uint64_t));
  ps->vread = calloc(n, sizeof(uint64_t));
  ps->waiting = calloc(n, sizeof(ps_op_t *));
  if (!ps->kept || !ps->step || !ps->vread || !ps->waiting) return 0;
  hvd_ps_local_agg_t a = ps->cfg.local_aggregation;
  int agg = ps->cfg.mode == HVD_PS_SYNC &&
            (a == HVD_PS_AGG_ON || (a == HVD_PS_AGG_AUTO && K == 0));
  ps->host = hvd_ps_hosts();
  ps->agg_sum = calloc(n, sizeof(float *));
  ps->agg_arrived = calloc(n, sizeof(int));
  ps->agg_fwd = calloc(n, 1);
  if (!ps->host || !ps->agg_sum || !ps->agg_arrived || !ps->agg_fwd ||
      !hvd_ps_place_aggregators(ps, agg))
    return 0;
  for (size_t k = 0; k < ps->nshards; k++)
    if (ps->agg_rank[k] == hvd_g.rank &&
        !(ps->agg_sum[k] = calloc(ps->shards[k].count, sizeof(float))))
      return 0;
  for (size_t k = 0; k < ps->nshards; k++) {
    const ps_shard_t *sh = &ps->shards[k];
    if (sh->server != hvd_g.rank) continue;
    ps_kept_t *kp = &ps->kept[k];
    size_t c = sh->count ? sh->count : 1;
    kp->values = calloc(c, sizeof(float));
    kp->accum = calloc(c, sizeof(float));
    kp->clock = calloc((size_t)ps->nworkers, sizeof(uint64_t));
    kp->want = malloc((size_t)ps->nworkers * sizeof(uint64_t));
    if (!kp->values || !kp->accum || !kp->clock || !kp->want) return 0;
    for (int w = 0; w < ps->nworkers; w++) kp->want[w] = UINT64_MAX;
    if (init) memcpy(kp->values, init + sh->flat, sh->count * sizeof(float));
  }
  return 1;
}

hvd_status_t hvd_ps_create(hvd_ps_t **out, const hvd_ps_config_t *cfg, size_t nvars,
                           const char *const *names, const size_t *counts,
                           const float *init) {
  hvd_status_t s = check_args(out, cfg, nvars, names, counts);
  if (s != HVD_OK) return s;
  *out = NULL;
  if (hvd_ps_busy())
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_ps_create: a parameter-server set "
                         "is already running on rank %d (one at a time; hvd_ps_finish it)",
                         hvd_g.rank);
  /* Each rank checks the others' arguments too, so every rank fails alike. */
  if ((s = agree(cfg, nvars, names, counts)) != HVD_OK) return s;
  hvd_ps_t *ps = calloc(1, sizeof(*ps));
  if (!ps) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_ps_create: out of memory");
  ps->cfg = *cfg;
  ps->gen = ++last_gen;
  if (!build(ps, nvars, names, counts, init)) {
    ps_free(ps);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_ps_create: out of memory for %zu "
                         "variables", nvars);
  }
  hvd_ps_install(ps);
  *out = ps;
  return HVD_OK;
}

int hvd_ps_is_worker(const hvd_ps_t *ps) { return ps && ps->is_worker; }
int hvd_ps_is_server(const hvd_ps_t *ps) { return ps && ps->is_server; }
int hvd_ps_num_workers(const hvd_ps_t *ps) { return ps ? ps->nworkers : 0; }
int hvd_ps_worker_index(const hvd_ps_t *ps) {
  return ps && ps->is_worker ? hvd_g.rank - ps->first_worker : -1;
}
size_t hvd_ps_num_shards(const hvd_ps_t *ps) { return ps ? ps->nshards : 0; }

void hvd_ps_shard(const hvd_ps_t *ps, size_t k, size_t *var, size_t *offset,
                  size_t *count, int *server) {
  const ps_shard_t *sh = &ps->shards[k];
  if (var) *var = sh->var;
  if (offset) *offset = sh->offset;
  if (count) *count = sh->count;
  if (server) *server = sh->server;
}

hvd_status_t hvd_ps_push_pull_async(hvd_ps_t *ps, size_t first, size_t n,
                                    const float *grads, float *values, hvd_request_t *req) {
  const char *w = "hvd_ps_push_pull";
  if (req) *req = NULL;
  if (!ps || !req || !values)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: ps, values and req must not be "
                         "NULL", w);
  if (!ps->is_worker)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: rank %d is a dedicated server "
                         "(num_ps %d), not a worker", w, hvd_g.rank, ps->cfg.num_ps);
  if (n == 0 || first >= ps->nvars || n > ps->nvars - first)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: variables [%zu, %zu) are not a "
                         "non-empty range of the %zu registered", w, first, first + n,
                         ps->nvars);
  ps_op_t *op = calloc(1, sizeof(*op));
  struct hvd_request *r = hvd_request_new(HVD_KIND_COUNT);
  if (!op || !r) {
    free(op);
    free(r);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "%s: out of memory", w);
  }
  op->req = r;
  op->values = values;
  op->pull_only = grads == NULL;
  op->s0 = ps->var_shard0[first];
  size_t last = first + n - 1;
  op->s1 = ps->var_shard0[last] + ps->var_nshards[last];
  hvd_status_t s = hvd_ps_submit(ps, op, grads);
  if (s != HVD_OK) {
    free(op);
    hvd_request_free(r);
    return s;
  }
  *req = r;
  return HVD_OK;
}

hvd_status_t hvd_ps_push_pull(hvd_ps_t *ps, size_t first, size_t n, const float *grads,
                              float *values) {
  hvd_request_t req;
  hvd_status_t s = hvd_ps_push_pull_async(ps, first, n, grads, values, &req);
  return s != HVD_OK ? s : hvd_wait(req);
}

hvd_status_t hvd_ps_finish(hvd_ps_t *ps) {
  if (!ps) return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_ps_finish: ps is NULL");
  int pending = hvd_ps_ops_pending(ps);
  if (pending)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_ps_finish: %d variable(s) of rank "
                         "%d are still in a request; wait for them first (ps is kept)",
                         pending, hvd_g.rank);
  struct hvd_request *r = hvd_request_new(HVD_KIND_COUNT);
  hvd_status_t s = r ? hvd_ps_submit_finish(ps, r)
                     : hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_ps_finish: out of memory");
  if (s == HVD_OK) s = hvd_wait(r);
  else if (r) hvd_request_free(r);
  hvd_ps_uninstall(ps);
  /* A worker's DONEs may be delivered, and its finish over, while a server or another
     worker is still in finish; were it to call hvd_shutdown then, the runtime would stop
     on every rank and fail their finish with HVD_ERR_SHUTDOWN. A barrier ends it: every
     rank's background thread completes the barrier before it reads any rank's later
     shutdown, so finish returns HVD_OK on every rank, as a collective does. */
  if (s == HVD_OK) s = hvd_barrier();
  return s;
}

void hvd_ps_free(hvd_ps_t *ps) {
  if (!ps) return;
  hvd_ps_uninstall(ps);
  ps_free(ps);
}

void hvd_ps_stats(const hvd_ps_t *ps, hvd_ps_stats_t *s) {
  if (!s) return;
  memset(s, 0, sizeof(*s));
  if (ps) hvd_ps_stats_copy(ps, s);
}
