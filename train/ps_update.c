/* train/ps_update.c: the training step's parameter-server side (see ps_update.h). */
#include "train/ps_update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct train_ps {
  hvd_ps_t *ps;
  nn_model_t *model;
  train_ps_opts_t o;
  size_t nvars, np;
  size_t *starts;               /* nvars + 1: each parameter's offset, then np          */
  char **names;
  size_t nshards, *var_shard0;  /* shards of variable v: var_shard0[v] ..              */
  size_t *shard_offset, *shard_count;
  nn_optim_t **opt;             /* per shard: its optimizer where this rank keeps it   */
  size_t components;            /* optimizer state floats per parameter               */
  nn_status_t update_status;    /* the first failure of an update (callback)          */
  char update_error[256];       /* its message (the callback runs on hvd's thread)    */
  /* a worker's step */
  float *fresh;                 /* the answers' values, copied into the model at wait  */
  size_t next_var;              /* variables [next_var, nvars) pushed this step        */
  hvd_request_t *reqs;
  size_t nreqs;
};

/* hvd's update callback: one shard's optimizer step at the run's lr for its step. */
static void update(void *ctx, size_t var, size_t offset, float *values, float *grad,
                   size_t count, uint64_t version) {
  train_ps_t *p = ctx;
  size_t k = p->var_shard0[var];
  while (k + 1 < p->nshards && p->shard_offset[k] != offset) k++;
  uint64_t step = p->o.async ? version / (uint64_t)hvd_ps_num_workers(p->ps) : version;
  long long g = p->o.start_step + (long long)step;
  int epoch = (int)(g / p->o.windows), window = (int)(g % p->o.windows);
  float lr = nn_lr_at(&p->o.sched, epoch + (double)window * p->o.accum / p->o.steps);
  nn_status_t s = p->opt[k] ? nn_optim_step(p->opt[k], values, grad, lr) : NN_ERR_ARG;
  (void)count;
  if (s == NN_OK || p->update_status != NN_OK) return;
  p->update_status = s;
  if (p->opt[k])
    snprintf(p->update_error, sizeof p->update_error, "shard %zu of parameter %zu: %s", k,
             var, nn_last_error());
  else
    snprintf(p->update_error, sizeof p->update_error, "shard %zu of parameter %zu has no "
             "optimizer on rank %d (an update before the servers were ready)", k, var,
             hvd_rank());
}

static int fail(char *err, size_t len, const char *what) {
  snprintf(err, len, "%s", what);
  return -1;
}

/* The parameters as variables: their offsets and names. */
static int variables(train_ps_t *p) {
  p->np = nn_model_param_len(p->model);
  p->nvars = nn_model_param_starts(p->model, NULL);
  p->starts = malloc((p->nvars + 1) * sizeof(size_t));
  p->names = calloc(p->nvars ? p->nvars : 1, sizeof(char *));
  if (!p->starts || !p->names) return 0;
  nn_model_param_starts(p->model, p->starts);
  p->starts[p->nvars] = p->np;
  for (size_t v = 0; v < p->nvars; v++) {
    char name[32];
    snprintf(name, sizeof name, "param.%zu", v);
    if (!(p->names[v] = strdup(name))) return 0;
  }
  return 1;
}

/* The placement's shards, and an optimizer for each kept here, started from the slice
   of the model's own optimizer state. */
static int shard_optimizers(train_ps_t *p, char *err, size_t len) {
  p->nshards = hvd_ps_num_shards(p->ps);
  size_t n = p->nshards ? p->nshards : 1;
  p->var_shard0 = calloc(p->nvars ? p->nvars : 1, sizeof(size_t));
  p->shard_offset = calloc(n, sizeof(size_t));
  p->shard_count = calloc(n, sizeof(size_t));
  p->opt = calloc(n, sizeof(nn_optim_t *));
  if (!p->var_shard0 || !p->shard_offset || !p->shard_count || !p->opt)
    return fail(err, len, "out of memory for the parameter servers' shards");
  size_t full_count = 0;
  float *full = nn_model_optim_state(p->model, &full_count);
  int64_t *full_step = nn_model_optim_step_count(p->model);
  p->components = p->np ? full_count / p->np : 0;
  for (size_t k = p->nshards; k-- > 0;) {
    size_t var, offset, count;
    int server;
    hvd_ps_shard(p->ps, k, &var, &offset, &count, &server);
    p->var_shard0[var] = k;
    p->shard_offset[k] = offset;
    p->shard_count[k] = count;
    if (server != hvd_rank()) continue;
    if (nn_optim_create(&p->opt[k], &p->o.optim, count) != NN_OK) {
      snprintf(err, len, "the optimizer of shard %zu: %s", k, nn_last_error());
      return -1;
    }
    size_t sc = 0;
    float *st = nn_optim_state(p->opt[k], &sc);
    size_t at = p->starts[var] + offset;
    for (size_t c = 0; full && st && c < p->components && (c + 1) * count <= sc; c++)
      memcpy(st + c * count, full + c * p->np + at, count * sizeof(float));
    if (full_step && nn_optim_step_count(p->opt[k])) *nn_optim_step_count(p->opt[k]) = *full_step;
  }
  return 0;
}

int train_ps_create(train_ps_t **out, nn_model_t *m, const train_ps_opts_t *o, char *err,
                    size_t len) {
  *out = NULL;
  train_ps_t *p = calloc(1, sizeof *p);
  if (!p) return fail(err, len, "out of memory for the parameter servers");
  p->model = m;
  p->o = *o;
  if (p->o.windows < 1) p->o.windows = 1;
  if (p->o.steps < 1) p->o.steps = 1;
  size_t *counts = NULL;
  int ok = variables(p);
  if (ok) counts = malloc((p->nvars ? p->nvars : 1) * sizeof(size_t));
  p->fresh = malloc((p->np ? p->np : 1) * sizeof(float));
  p->reqs = malloc((p->nvars ? p->nvars : 1) * sizeof(hvd_request_t));
  if (!ok || !counts || !p->fresh || !p->reqs) {
    free(counts);
    train_ps_finish(p, NULL);
    return fail(err, len, "out of memory for the parameter servers' variables");
  }
  for (size_t v = 0; v < p->nvars; v++) counts[v] = p->starts[v + 1] - p->starts[v];
  /* A parameter over 4 MiB (vgg16's classifier) is split over the servers. */
  hvd_ps_config_t cfg = {o->async ? HVD_PS_ASYNC : HVD_PS_SYNC, o->num_ps,
                         o->round_robin ? HVD_PS_ROUND_ROBIN : HVD_PS_GREEDY, 4u << 20,
                         o->max_staleness, update, p, o->local_aggregation};
  hvd_status_t s = hvd_ps_create(&p->ps, &cfg, p->nvars, (const char *const *)p->names,
                                 counts, nn_model_params(m));
  free(counts);
  if (s != HVD_OK) {
    snprintf(err, len, "the parameter servers: %s (%s)", hvd_status_string(s),
             hvd_last_error());
    train_ps_finish(p, NULL);
    return -1;
  }
  /* hvd serves pushes as soon as hvd_ps_create returns, but the update callback needs
     the shards' optimizers made above: no worker pushes until every server has them
     (and every rank fails alike when one could not). */
  if (p->o.test_server_delay_ms > 0 && hvd_ps_is_server(p->ps))
    nanosleep(&(struct timespec){p->o.test_server_delay_ms / 1000,
                                 p->o.test_server_delay_ms % 1000 * 1000000L}, NULL);
  int ready = shard_optimizers(p, err, len) == 0;
  int all_ready = ready;
  s = hvd_allreduce("ps.shards.ready", &ready, &all_ready, 1, HVD_INT32, HVD_MIN);
  if (s != HVD_OK || !all_ready) {
    if (s != HVD_OK)
      snprintf(err, len, "the parameter servers' start: %s (%s)", hvd_status_string(s),
               hvd_last_error());
    else if (ready)
      snprintf(err, len, "another rank could not make its parameter servers' optimizers");
    train_ps_finish(p, NULL);
    return -1;
  }
  p->next_var = p->nvars;
  *out = p;
  return 0;
}

hvd_status_t train_ps_finish(train_ps_t *p, hvd_ps_stats_t *stats) {
  if (!p) return HVD_OK;
  hvd_status_t s = HVD_OK;
  if (p->ps) {
    s = hvd_ps_finish(p->ps);
    if (stats) hvd_ps_stats(p->ps, stats);
    hvd_ps_free(p->ps);
  }
  for (size_t k = 0; p->opt && k < p->nshards; k++) nn_optim_free(p->opt[k]);
  for (size_t v = 0; p->names && v < p->nvars; v++) free(p->names[v]);
  free(p->names);
  free(p->starts);
  free(p->var_shard0);
  free(p->shard_offset);
  free(p->shard_count);
  free(p->opt);
  free(p->fresh);
  free(p->reqs);
  free(p);
  return s;
}

int train_ps_is_worker(const train_ps_t *p) { return hvd_ps_is_worker(p->ps); }
int train_ps_worker_index(const train_ps_t *p) { return hvd_ps_worker_index(p->ps); }
int train_ps_num_workers(const train_ps_t *p) { return hvd_ps_num_workers(p->ps); }
int train_ps_first_worker(const train_ps_t *p) { return p->o.num_ps; }

hvd_status_t train_ps_ready(train_ps_t *p, size_t ready_from) {
  size_t end = p->next_var;
  while (p->next_var > 0 && p->starts[p->next_var - 1] >= ready_from) p->next_var--;
  if (p->next_var == end) return HVD_OK;
  hvd_status_t s = hvd_ps_push_pull_async(p->ps, p->next_var, end - p->next_var,
                                          nn_model_grads(p->model), p->fresh,
                                          &p->reqs[p->nreqs]);
  if (s == HVD_OK) p->nreqs++;
  return s;
}

hvd_status_t train_ps_wait(train_ps_t *p) {
  hvd_status_t s = train_ps_ready(p, 0);
  for (size_t i = 0; i < p->nreqs; i++) {
    hvd_status_t w = hvd_wait(p->reqs[i]);
    if (s == HVD_OK) s = w;
  }
  p->nreqs = 0;
  p->next_var = p->nvars;
  if (s != HVD_OK) return s;
  memcpy(nn_model_params(p->model), p->fresh, p->np * sizeof(float));
  return HVD_OK;
}

nn_status_t train_ps_update_status(const train_ps_t *p) { return p->update_status; }
const char *train_ps_update_error(const train_ps_t *p) { return p->update_error; }

hvd_status_t train_ps_gather_state(train_ps_t *p) {
  size_t full_count = 0;
  float *full = nn_model_optim_state(p->model, &full_count);
  int64_t *full_step = nn_model_optim_step_count(p->model);
  int64_t step = 0;
  if (full && full_count) memset(full, 0, full_count * sizeof(float));
  for (size_t k = 0; k < p->nshards; k++) {
    if (!p->opt[k]) continue;
    size_t var = 0, sc = 0, count = p->shard_count[k];
    while (var + 1 < p->nvars && p->var_shard0[var + 1] <= k) var++;
    float *st = nn_optim_state(p->opt[k], &sc);
    size_t at = p->starts[var] + p->shard_offset[k];
    for (size_t c = 0; full && st && c < p->components && (c + 1) * count <= sc; c++)
      memcpy(full + c * p->np + at, st + c * count, count * sizeof(float));
    int64_t *sp = nn_optim_step_count(p->opt[k]);
    if (sp && *sp > step) step = *sp;
  }
  hvd_status_t s = HVD_OK;
  if (full && full_count)
    s = hvd_allreduce("ps.optim.state", full, full, full_count, HVD_FLOAT32, HVD_SUM);
  if (s == HVD_OK) s = hvd_allreduce("ps.optim.step", &step, &step, 1, HVD_INT64, HVD_MAX);
  if (s == HVD_OK && full_step) *full_step = step;
  return s;
}

hvd_ps_local_agg_t train_ps_local_aggregation(const char *name) {
  return strcmp(name, "on") == 0 ? HVD_PS_AGG_ON
         : strcmp(name, "off") == 0 ? HVD_PS_AGG_OFF : HVD_PS_AGG_AUTO;
}
