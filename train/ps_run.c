/* train/ps_run.c: the train program's parameter-server phases (train/ps_run.h). */
#include "train/ps_run.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(train_ps_run_err_t *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(train_ps_run_err_t *e, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof e->err, fmt, ap);
  va_end(ap);
  e->status = status;
  e->hvd = HVD_OK;
  e->what = NULL;
  return -1;
}

/* A runtime call failed: the program reports it its own way (every rank, naming what). */
static int fail_hvd(train_ps_run_err_t *e, hvd_status_t s, const char *what) {
  e->status = 1;
  e->hvd = s;
  e->what = what;
  e->err[0] = '\0';
  return -1;
}

int train_ps_run_enabled(const train_opts_t *o) {
  return strcmp(o->variable_update, "horovod") != 0;
}

int train_ps_run_check_flags(const train_opts_t *o, train_ps_run_err_t *e) {
  if (!train_ps_run_enabled(o)) {
    if (o->num_ps > 0 || o->max_staleness >= 0)
      return fail(e, 2, "--%s applies to --variable-update ps-sync or ps-async (this run "
                  "uses horovod)", o->num_ps > 0 ? "num-ps" : "max-staleness");
    return 0;
  }
  if (strcmp(o->device, "cpu") != 0)
    return fail(e, 1, "--variable-update %s: parameter servers keep host memory; use "
                "--device cpu", o->variable_update);
  if (o->fp16_allreduce || o->predivide != 1.0f)
    return fail(e, 2, "--variable-update %s: %s applies to the ring allreduce only",
                o->variable_update,
                o->fp16_allreduce ? "--fp16-allreduce" : "--gradient-predivide-factor");
  if (o->checkpoint_every_steps > 0)
    return fail(e, 2, "--variable-update %s: checkpoints are taken at epoch ends only (drop "
                "--checkpoint-every-steps %d)", o->variable_update, o->checkpoint_every_steps);
  if (o->max_staleness >= 0 && strcmp(o->variable_update, "ps-async") != 0)
    return fail(e, 2, "--max-staleness %d applies to --variable-update ps-async",
                o->max_staleness);
  return 0;
}

int train_ps_run_data_ranks(const train_opts_t *o, int rank, int size, int *data_rank,
                            int *data_size, train_ps_run_err_t *e) {
  *data_rank = rank;
  *data_size = size;
  if (!train_ps_run_enabled(o)) return 0;
  if (o->num_ps >= size)
    return fail(e, 1, "--num-ps %d: with %d rank(s) no rank is left to work; use at most "
                "%d, or 0 (every rank serves and works)", o->num_ps, size, size - 1);
  *data_size = size - o->num_ps;
  *data_rank = rank >= o->num_ps ? rank - o->num_ps : -1;
  return 0;
}

int train_ps_run_start(train_ps_t **out, const train_opts_t *o, nn_model_t *m,
                       const train_ps_run_start_t *at, train_ps_run_err_t *e) {
  *out = NULL;
  if (!train_ps_run_enabled(o)) return 0;
  train_ps_opts_t po = {.async = strcmp(o->variable_update, "ps-async") == 0,
                        .num_ps = o->num_ps,
                        .round_robin = strcmp(o->ps_placement, "round-robin") == 0,
                        .local_aggregation =
                            train_ps_local_aggregation(o->ps_local_aggregation),
                        .max_staleness = o->max_staleness, .optim = at->optim,
                        .sched = at->sched, .steps = at->steps, .accum = at->accum,
                        .windows = at->windows,
                        .start_step = (long long)at->start_epoch * at->windows +
                                      at->start_step / at->accum};
  const char *delay = getenv("HVD_TRAIN_TEST_PS_SERVER_DELAY_MS");
  if (delay) po.test_server_delay_ms = atoi(delay);
  if (train_ps_create(out, m, &po, e->err, sizeof e->err) != 0) {
    e->status = 1;
    e->hvd = HVD_OK;
    e->what = NULL;
    return -1;
  }
  return 0;
}

int train_ps_run_epoch_end(train_ps_t *ps, nn_model_t *m, int gather_state, int rank,
                           train_ps_run_err_t *e) {
  if (!ps) return 0;
  if (train_ps_update_status(ps) != NN_OK)
    return fail(e, 1, "rank %d: an optimizer step on the parameter server failed: %s", rank,
                train_ps_update_error(ps));
  int root = train_ps_first_worker(ps);
  hvd_status_t s = hvd_broadcast("ps.epoch.params", nn_model_params(m),
                                 nn_model_param_len(m), HVD_FLOAT32, root);
  if (s != HVD_OK) return fail_hvd(e, s, "broadcast of the weights");
  size_t nb = nn_model_num_buffers(m);
  if (nb > 0) {
    s = hvd_broadcast("ps.epoch.buffers", nn_model_buffers(m), nb, HVD_FLOAT32, root);
    if (s != HVD_OK) return fail_hvd(e, s, "broadcast of the buffers");
  }
  if (gather_state) {
    s = train_ps_gather_state(ps);
    if (s != HVD_OK) return fail_hvd(e, s, "gathering the servers' optimizer state");
  }
  return 0;
}

int train_ps_run_end(train_ps_t *ps, const train_opts_t *o, int rank,
                     train_ps_run_report_t *r, train_ps_run_err_t *e) {
  hvd_ps_stats_t st;
  hvd_status_t s = train_ps_finish(ps, &st);
  if (s != HVD_OK) return fail_hvd(e, s, "the parameter servers' end");
  int64_t sums[HVD_PS_STALENESS_BINS + 3], most = (int64_t)st.max_staleness;
  for (int i = 0; i < HVD_PS_STALENESS_BINS; i++) sums[i] = (int64_t)st.staleness[i];
  sums[HVD_PS_STALENESS_BINS] = (int64_t)st.pushes;
  /* bytes through the servers' links: what a server received and sent */
  int serves = o->num_ps == 0 || rank < o->num_ps;
  sums[HVD_PS_STALENESS_BINS + 1] = serves ? (int64_t)st.bytes_in : 0;
  sums[HVD_PS_STALENESS_BINS + 2] = serves ? (int64_t)st.bytes_out : 0;
  int64_t busiest = serves ? (int64_t)(st.bytes_in + st.bytes_out) : 0;
  const char *what = "allreduce of the servers' figures";
  s = hvd_allreduce("ps.end.sums", sums, sums, HVD_PS_STALENESS_BINS + 3, HVD_INT64, HVD_SUM);
  if (s == HVD_OK) s = hvd_allreduce("ps.end.max", &most, &most, 1, HVD_INT64, HVD_MAX);
  if (s == HVD_OK)
    s = hvd_allreduce("ps.end.busiest", &busiest, &busiest, 1, HVD_INT64, HVD_MAX);
  if (s != HVD_OK) return fail_hvd(e, s, what);
  memcpy(r->staleness, sums, sizeof r->staleness);
  r->pushes = sums[HVD_PS_STALENESS_BINS];
  r->bytes_in = sums[HVD_PS_STALENESS_BINS + 1];
  r->bytes_out = sums[HVD_PS_STALENESS_BINS + 2];
  r->most = most;
  r->busiest = busiest;
  return 0;
}

void train_ps_run_format(const train_ps_run_report_t *r, const train_opts_t *o, char *line,
                         size_t len) {
  size_t at = 0;
#define ADD(...)                                                    \
  do {                                                              \
    int n_ = snprintf(line + at, at < len ? len - at : 0, __VA_ARGS__); \
    if (n_ > 0) at += (size_t)n_;                                   \
  } while (0)
  if (len) line[0] = '\0';
  ADD("parameter servers (%s, %s): %lld pushes, staleness max %lld, histogram",
      o->variable_update, o->num_ps ? "dedicated" : "colocated", (long long)r->pushes,
      (long long)r->most);
  int last = 0;
  for (int i = 0; i < HVD_PS_STALENESS_BINS; i++) if (r->staleness[i]) last = i;
  for (int i = 0; i <= last; i++) ADD(" %d:%lld", i, (long long)r->staleness[i]);
  ADD("; server links %.1f MB in, %.1f MB out, the busiest %.1f MB", r->bytes_in / 1e6,
      r->bytes_out / 1e6, r->busiest / 1e6);
#undef ADD
}

int train_ps_run_staleness_to_tensorboard(train_tfevents_t *tb, const char *logdir,
                                          const train_ps_run_report_t *r, int64_t step,
                                          double wall_time, train_ps_run_err_t *e) {
  double total = 0;
  for (int i = 0; i < HVD_PS_STALENESS_BINS; i++) total += (double)r->staleness[i];
  double keep = total > 1e6 ? 1e6 / total : 1.0;
  size_t n = 0;
  float *v = malloc((size_t)(total * keep + HVD_PS_STALENESS_BINS + 1) * sizeof(float));
  if (!v) return fail(e, 1, "out of memory for the staleness histogram");
  for (int i = 0; i < HVD_PS_STALENESS_BINS; i++)
    for (int64_t k = 0; k < (int64_t)((double)r->staleness[i] * keep + 0.5); k++)
      v[n++] = (float)i;
  int rc = train_tfevents_histogram(tb, "ps_staleness", v, n, step, wall_time);
  int saved = errno;
  free(v);
  if (rc != 0)
    return fail(e, 1, "--logdir %s: writing the staleness histogram failed: %s", logdir,
                strerror(saved));
  return 0;
}
