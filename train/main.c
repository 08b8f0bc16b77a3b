/* train/main.c: the `train` program. Trains a model of nn data-parallel on every
   rank with the hvd runtime, in the Horovod recipe:
     - rank 0's initial weights and buffers (and optimizer state on resume) are
       broadcast to all ranks;
     - each rank trains on its slice of each global batch of an epoch order drawn from
       the shared seed (the same batches on any number of ranks: train/data.h);
     - the learning rate is scaled by the number of ranks, with a linear warm-up from
       the unscaled rate;
     - gradients are averaged in fixed buckets (ranges of the flat gradient buffer) whose
       allreduces start from nn's grad-ready callback during backward, and are waited on
       before the optimizer step;
     - validation loss and accuracy are sums and counts allreduced over the ranks;
     - only rank 0 prints and writes files.
   --device gpu: the model, its gradients and its optimizer live on GPU local_rank
   (nn_model_to_device), the buckets are allreduced in device memory (NCCL); the data
   stays on the host and nn_model_forward copies each batch up. The loop itself is the
   same on either device: nn keeps parameters, gradients and optimizer where the model
   lives (nn_model_optim_step, nn_model_scale_grads, nn_model_zero_grads), and the host
   arrays (nn_model_params, nn_model_optim_state, ...) are the mirror that broadcasts,
   checkpoints, best weights and --export read, refreshed by nn_model_sync_to_host once
   per epoch and before export (no-ops on the CPU).
   --use-fp16 / --use-bf16 (GPU only): mixed precision (nn_model_set_precision before
   the move; nn_model_optim_step unscales and adapts the loss scale); weights, gradients,
   optimizer state and checkpoints stay float32, and the fp16 loss scale is shown every
   epoch.
   Flags: train/flags.c; data: train/data.c; checkpoints: train/checkpoint.c; callbacks
   (EarlyStopping, ModelCheckpoint, CSV): train/callbacks.c; TensorBoard:
   train/tfevents.c; progress display: train/progress.c. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/agree.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/flags.h"
#include "train/progress.h"
#include "train/step.h"
#include "train/tfevents.h"
#include "hvd/hvd.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"
#include "util/clock.h"

/* ---- errors: one line on stderr from rank 0, then a non-zero exit on every rank ---- */

static int g_rank;            /* set from the launcher's environment before hvd_init */
static int g_hvd_up;

/* Prints msg from rank 0, shuts the runtime down and exits with code on every rank. */
static void die_msg(int code, const char *msg) __attribute__((noreturn));
static void die_msg(int code, const char *msg) {
  if (g_rank == 0) {
    fprintf(stderr, "train: %s\n", msg);
    fflush(stderr);
  }
  /* Before the runtime is up (bad data, found on every rank alike), only rank 0 says
     why; the others wait a moment before they exit, or the launcher, which ends the job
     at the first rank that exits non-zero, could end rank 0 before its line is out. */
  if (g_rank != 0 && !g_hvd_up) sleep(2);
  if (g_hvd_up) hvd_shutdown();
  exit(code);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  char msg[12288];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die_msg(1, msg);
}

/* A mistake in what the user gave (exit status 2, as a bad flag): found before the
   runtime is up and before anything is written. */
static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
  char msg[12288];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die_msg(2, msg);
}

static int g_launched;        /* started by mpirun/hvdrun (a rank variable was set) */

static int env_rank(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HVD_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      g_launched = 1;
      return atoi(v);
    }
  }
  return 0;
}

/* Whether s is rank 0 having shut the runtime down on its way out (die, or a failure it
   reported itself): it printed the reason, so a line from here would only blame the
   collective this rank happened to be in. */
static int stopped_by_rank0(hvd_status_t s) {
  return s == HVD_ERR_SHUTDOWN && g_rank != 0 &&
         strstr(hvd_last_error(), "hvd_shutdown was called on rank 0") != NULL;
}

/* MiB of float32 gradients in b's largest bucket. */
static double largest_bucket_mib(const hvd_grad_buckets_t *b) {
  size_t most = 0;
  for (size_t k = 0; k < hvd_grad_buckets_num(b); k++) {
    size_t count;
    hvd_grad_buckets_range(b, k, NULL, &count);
    if (count > most) most = count;
  }
  return (double)most * sizeof(float) / 1048576.0;
}

/* A runtime failure (a peer lost, a stall, a mismatch) can show on any rank, so every
   rank reports it, naming itself; except when rank 0 stopped everybody (above): then
   the other ranks exit non-zero without a line of their own. */
static void hvd_check(hvd_status_t s, const char *what) {
  if (s == HVD_OK) return;
  if (!stopped_by_rank0(s)) {
    fprintf(stderr, "train: rank %d: %s failed: %s (%s)\n", g_rank, what, hvd_status_string(s),
            hvd_last_error());
    fflush(stderr);
  }
  if (g_hvd_up) hvd_shutdown();
  exit(1);
}

static void nn_check(nn_status_t s, const char *what) {
  if (s != NN_OK) die("%s: %s", what, nn_last_error());
}

/* GPU failures (out of device memory, a missing device for this local rank) can differ
   between ranks, so the rank that sees one reports it. */
static void nn_check_rank(nn_status_t s, const char *what) {
  if (s == NN_OK) return;
  fprintf(stderr, "train: rank %d: %s failed: %s (%s)\n", g_rank, what, nn_status_string(s),
          nn_last_error());
  fflush(stderr);
  if (g_hvd_up) hvd_shutdown();
  exit(1);
}

/* Failures of nn on the model's device: on a GPU they can differ between ranks (out of
   device memory, a missing device for this local rank), so each rank reports its own;
   on the CPU every rank fails the same way and rank 0 speaks for all. */
static int g_gpu;
static void nn_check_model(nn_status_t s, const char *what) {
  if (g_gpu) nn_check_rank(s, what);
  else nn_check(s, what);
}

/* Appends one item to an epoch line's note, "; " between items. */
static void note_add(char *note, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_add(char *note, size_t size, const char *fmt, ...) {
  size_t l = strlen(note);
  if (l + 2 >= size) return;
  if (l) {
    memcpy(note + l, "; ", 3);
    l += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note + l, size - l, fmt, ap);
  va_end(ap);
}

/* ---- evaluation across ranks ---- */
typedef struct {
  double loss, acc;
} eval_t;

static eval_t evaluate(nn_model_t *m, const train_dataset_t *d, const train_batch_opts_t *bo,
                       int batch, int rank, int size, float *x, int32_t *y, uint32_t *idx,
                       const char *name) {
  int b, e;
  train_shard_range(d->n, rank, size, &b, &e);
  double sums[3] = {0, 0, 0}; /* loss * n, correct, n */
  train_batch_opts_t plain = *bo;
  plain.aug_pad = 0;
  plain.aug_flip = 0;
  for (int i = b; i < e; i += batch) {
    int n = e - i < batch ? e - i : batch;
    for (int k = 0; k < n; k++) idx[k] = (uint32_t)(i + k);
    train_make_batch(d, idx, n, &plain, x, y);
    float loss;
    int correct;
    nn_check(nn_model_forward(m, x, n, 0), "forward (evaluation)");
    nn_check(nn_model_loss(m, y, &loss, &correct), "loss (evaluation)");
    sums[0] += (double)loss * n;
    sums[1] += correct;
    sums[2] += n;
  }
  hvd_check(hvd_allreduce(name, sums, sums, 3, HVD_FLOAT64, HVD_SUM), "allreduce of metrics");
  eval_t r = {sums[2] > 0 ? sums[0] / sums[2] : 0, sums[2] > 0 ? sums[1] / sums[2] : 0};
  return r;
}

/* ---- training state that checkpoints carry besides weights and optimizer ---- */
enum {
  ST_EPOCHS_DONE, ST_ES_BEST, ST_ES_BEST_EPOCH, ST_ES_WAIT, ST_CK_BEST, ST_CK_BEST_EPOCH,
  ST_BEST_VAL_ACC, ST_BEST_VAL_ACC_EPOCH, ST_TRAIN_SECONDS, ST_TRAIN_IMAGES, ST_HAVE_BEST,
  ST_DROPOUT_STEP, /* nn's dropout mask counter: a resumed run draws the same masks */
  ST_COUNT_V1,     /* the fields above are all that checkpoints before mid-epoch ones hold */
  /* Mid-epoch (--checkpoint-every-steps): steps of epoch epochs_done already taken (0 at
     an epoch end), of how many, and the epoch's metrics so far, summed over the ranks. */
  ST_STEPS_DONE = ST_COUNT_V1, ST_STEPS_PER_EPOCH, ST_EPOCH_LOSS_SUM, ST_EPOCH_CORRECT,
  ST_EPOCH_SAMPLES, ST_EPOCH_SECONDS,
  ST_COUNT
};

typedef struct {
  const train_opts_t *o;
  nn_model_t *model;          /* with its optimizer (nn_model_optim_create) */
  float *best_params;          /* restore-best-weights copy (NULL when off) */
  float *best_buffers;
  double st[ST_COUNT];
  int ranks;
  double lr_scale;             /* the lr is o->lr times this: the ranks of the global
                                  batch's first run (linear scaling) */
  /* Rank 0 after loading a mid-epoch checkpoint: every rank's batch-norm statistics
     (they are averaged only at epoch ends), ranks_in_file * buffers floats; else NULL. */
  float *rank_buffers;
  /* What the loaded checkpoint's run was: ranks, batch per rank, lr factor. */
  int ranks_in_file, batch_in_file;
  double lr_scale_in_file;
} run_t;

static void checkpoint_meta(const run_t *r, char *buf, size_t len) {
  char settings[4096];
  train_flags_describe(r->o, r->ranks, settings, sizeof settings);
  snprintf(buf, len,
           "format=%s%d\n%sglobal_batch=%d\nlr_scale=%.17g\nepochs_done=%d\n"
           "steps_done=%d\nmodel_params=%zu\nmodel_buffers=%zu\n"
           "rng=stateless splitmix64 of (seed, epoch, sample)\n",
           TRAIN_CKPT_FORMAT_PREFIX, TRAIN_CKPT_FORMAT, settings, r->o->batch * r->ranks,
           r->lr_scale, (int)r->st[ST_EPOCHS_DONE], (int)r->st[ST_STEPS_DONE],
           nn_model_num_params(r->model),
           nn_model_num_buffers(r->model));
}

/* buffers: the batch-norm statistics to store (NULL: the model's); rank_buffers: every
   rank's (a mid-epoch checkpoint of several ranks), NULL when none. */
static void save_checkpoint(run_t *r, const char *path, const float *buffers,
                            const float *rank_buffers) {
  r->st[ST_DROPOUT_STEP] = (double)nn_model_dropout_step(r->model);
  size_t optn = 0;
  float *opt = nn_model_optim_state(r->model, &optn);
  int ncounters = 0;
  for (int i = 0; i < nn_model_num_slices(r->model); i++)
    if (nn_model_slice(r->model, i)->kind == NN_SLICE_COUNTER) ncounters++;
  train_ckpt_section_t s[9];
  int n = 0;
  s[n++] = (train_ckpt_section_t){"params", nn_model_params(r->model),
                                  nn_model_param_len(r->model) * sizeof(float)};
  s[n++] = (train_ckpt_section_t){"buffers", buffers ? buffers : nn_model_buffers(r->model),
                                  nn_model_num_buffers(r->model) * sizeof(float)};
  if (rank_buffers)
    s[n++] = (train_ckpt_section_t){"rank.buffers", rank_buffers,
                                    (size_t)r->ranks * nn_model_num_buffers(r->model) *
                                        sizeof(float)};
  s[n++] = (train_ckpt_section_t){"counters", nn_model_counters(r->model),
                                  (size_t)ncounters * sizeof(int64_t)};
  s[n++] = (train_ckpt_section_t){"optim.state", opt, optn * sizeof(float)};
  s[n++] = (train_ckpt_section_t){"optim.step", nn_model_optim_step_count(r->model),
                                  sizeof(int64_t)};
  s[n++] = (train_ckpt_section_t){"state", r->st, sizeof r->st};
  if (r->best_params && r->st[ST_HAVE_BEST] != 0) {
    s[n++] = (train_ckpt_section_t){"best.params", r->best_params,
                                    nn_model_param_len(r->model) * sizeof(float)};
    s[n++] = (train_ckpt_section_t){"best.buffers", r->best_buffers,
                                    nn_model_num_buffers(r->model) * sizeof(float)};
  }
  char meta[8192], err[8192];
  checkpoint_meta(r, meta, sizeof meta);
  if (train_ckpt_write(path, meta, s, n, err, sizeof err) != 0) die("%s", err);
}

/* ---- believing a checkpoint only after checking it ----
   The CRC proves only that the file is what some writer wrote: a field edited by hand
   (CRC recomputed) or written by a buggy run must not make this run loop from epoch
   INT_MIN, write epoch--04.ckpt or train on NaN. Every value is checked against this
   run's flags and the other fields before anything is copied in; the message names the
   file and the field. */
static const char *const st_names[ST_COUNT] = {
    "epochs_done", "es_best", "es_best_epoch", "es_wait", "ck_best", "ck_best_epoch",
    "best_val_acc", "best_val_acc_epoch", "train_seconds", "train_images", "have_best",
    "dropout_step", "steps_done", "steps_per_epoch", "epoch_loss_sum", "epoch_correct",
    "epoch_samples", "epoch_seconds"};

/* The state section: ST_COUNT doubles, or the ST_COUNT_V1 of an older checkpoint (the
   mid-epoch fields then 0: an epoch end). */
static void ckpt_state(const train_ckpt_t *c, double st[ST_COUNT]) {
  const train_ckpt_section_t *s = train_ckpt_find(c, "state");
  memset(st, 0, ST_COUNT * sizeof st[0]);
  memcpy(st, s->data, s->nbytes < ST_COUNT * sizeof st[0] ? s->nbytes : ST_COUNT * sizeof st[0]);
}

/* A count of samples or steps per epoch never exceeds an int. */
#define CKPT_MAX_RANKS 1000000
#define CKPT_MAX_PER_EPOCH 2147483647.0

static int whole_in(double v, double lo, double hi) {
  return isfinite(v) && v == floor(v) && v >= lo && v <= hi;
}

static int ckpt_bad(char *err, size_t errlen, const char *path, const char *field,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int ckpt_bad(char *err, size_t errlen, const char *path, const char *field,
                    const char *fmt, ...) {
  int k = snprintf(err, errlen, "%s: bad checkpoint field %s: ", path, field);
  if (k < 0 || (size_t)k >= errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

/* Every float of a section is finite (and >= 0 from index nonneg_from on). The data
   sits at any offset of the file: read it with memcpy. */
static int check_floats(const train_ckpt_section_t *s, size_t nonneg_from, const char *path,
                        char *err, size_t errlen) {
  size_t n = s->nbytes / sizeof(float);
  const unsigned char *p = s->data;
  for (size_t i = 0; i < n; i++) {
    float v;
    memcpy(&v, p + i * sizeof v, sizeof v);
    if (!isfinite(v) || (i >= nonneg_from && v < 0))
      return ckpt_bad(err, errlen, path, s->name, "value %zu of %zu is %g, expected %s", i, n,
                      (double)v, i >= nonneg_from ? "a finite number >= 0" : "a finite number");
  }
  return 0;
}

/* The monitored metric's best (es_best or ck_best) and its epoch: a value of the metric
   with a whole epoch in [0, done), or the 'none' marker (+inf for a loss, -inf for an
   accuracy, as before the first epoch) with epoch -1. */
static int check_best(const double *st, int best, int epoch, int higher, int done,
                      const char *monitor, const char *path, char *err, size_t errlen) {
  double v = st[best], e = st[epoch];
  double none = higher ? -INFINITY : INFINITY;
  if (v != none && !(isfinite(v) && v >= 0 && (!higher || v <= 1)))
    return ckpt_bad(err, errlen, path, st_names[best],
                    "%g, expected a %s (%s) or %s for none yet", v, monitor,
                    higher ? "in [0, 1]" : ">= 0", higher ? "-inf" : "inf");
  if (!whole_in(e, -1, done - 1))
    return ckpt_bad(err, errlen, path, st_names[epoch],
                    "%g, expected a whole epoch in [-1, %d] (epochs_done %d)", e, done - 1, done);
  if ((v == none) != (e == -1))
    return ckpt_bad(err, errlen, path, st_names[epoch], "%g with %s %g: they disagree", e,
                    st_names[best], v);
  return 0;
}

/* The position inside epoch epochs_done and its metrics so far (all 0 at an epoch end). */
static int check_mid_epoch(const double *st, int done, int epochs, const char *path, char *err,
                           size_t errlen) {
  double steps = st[ST_STEPS_PER_EPOCH], at = st[ST_STEPS_DONE];
  if (!whole_in(steps, 0, CKPT_MAX_PER_EPOCH))
    return ckpt_bad(err, errlen, path, "steps_per_epoch", "%g, expected a whole number >= 0",
                    steps);
  if (!whole_in(at, 0, steps > 0 ? steps - 1 : 0))
    return ckpt_bad(err, errlen, path, "steps_done",
                    "%g, expected a whole number of steps in [0, %.0f] (steps_per_epoch %.0f)", at,
                    steps > 0 ? steps - 1 : 0, steps);
  if (at > 0 && done >= epochs)
    return ckpt_bad(err, errlen, path, "steps_done",
                    "%g inside epoch %d, but --epochs is %d", at, done + 1, epochs);
  double n = st[ST_EPOCH_SAMPLES];
  if (!whole_in(n, 0, at * CKPT_MAX_PER_EPOCH))
    return ckpt_bad(err, errlen, path, "epoch_samples",
                    "%g, expected a whole number in [0, %.0f] (%.0f steps done)", n,
                    at * CKPT_MAX_PER_EPOCH, at);
  if (!whole_in(st[ST_EPOCH_CORRECT], 0, n))
    return ckpt_bad(err, errlen, path, "epoch_correct",
                    "%g, expected a whole number in [0, %.0f] (epoch_samples)",
                    st[ST_EPOCH_CORRECT], n);
  const int nonneg[] = {ST_EPOCH_LOSS_SUM, ST_EPOCH_SECONDS};
  for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
    if (!(isfinite(st[nonneg[i]]) && st[nonneg[i]] >= 0))
      return ckpt_bad(err, errlen, path, st_names[nonneg[i]], "%g, expected a finite number >= 0",
                      st[nonneg[i]]);
  return 0;
}

static int check_checkpoint(const run_t *r, const train_ckpt_t *c, const char *path, char *err,
                            size_t errlen) {
  double st[ST_COUNT];
  ckpt_state(c, st);
  const int epochs = r->o->epochs;
  if (!whole_in(st[ST_EPOCHS_DONE], 0, epochs))
    return ckpt_bad(err, errlen, path, "epochs_done",
                    "%g, expected a whole number of epochs in [0, %d] (--epochs %d)",
                    st[ST_EPOCHS_DONE], epochs, epochs);
  const int done = (int)st[ST_EPOCHS_DONE];
  char v[64];
  const char *meta_done = train_ckpt_meta(c, "epochs_done", v, sizeof v);
  if (meta_done && strtol(meta_done, NULL, 10) != done)
    return ckpt_bad(err, errlen, path, "epochs_done", "%d, but its metadata says epochs_done=%s",
                    done, meta_done);
  /* The best values belong to the monitor of the run that wrote them. */
  char mon[32];
  const char *monitor = train_ckpt_meta(c, "monitor", mon, sizeof mon);
  if (!monitor) monitor = r->o->monitor;
  int higher = strstr(monitor, "acc") != NULL;
  if (check_best(st, ST_ES_BEST, ST_ES_BEST_EPOCH, higher, done, monitor, path, err, errlen) ||
      check_best(st, ST_CK_BEST, ST_CK_BEST_EPOCH, higher, done, monitor, path, err, errlen))
    return -1;
  if (!whole_in(st[ST_ES_WAIT], 0, done))
    return ckpt_bad(err, errlen, path, "es_wait",
                    "%g, expected a whole number of epochs in [0, %d] (epochs_done)",
                    st[ST_ES_WAIT], done);
  double acc = st[ST_BEST_VAL_ACC], acc_e = st[ST_BEST_VAL_ACC_EPOCH];
  if (acc != -1 && !(isfinite(acc) && acc >= 0 && acc <= 1))
    return ckpt_bad(err, errlen, path, "best_val_acc", "%g, expected an accuracy in [0, 1] or -1",
                    acc);
  if (!whole_in(acc_e, -1, done - 1) || (acc == -1) != (acc_e == -1))
    return ckpt_bad(err, errlen, path, "best_val_acc_epoch",
                    "%g, expected a whole epoch in [0, %d] (-1 with best_val_acc -1)", acc_e,
                    done - 1);
  if (!(isfinite(st[ST_TRAIN_SECONDS]) && st[ST_TRAIN_SECONDS] >= 0))
    return ckpt_bad(err, errlen, path, "train_seconds", "%g, expected a finite number >= 0",
                    st[ST_TRAIN_SECONDS]);
  if (check_mid_epoch(st, done, epochs, path, err, errlen) != 0) return -1;
  /* Steps and samples so far, counting the epoch under way of a mid-epoch checkpoint. */
  const double per_epoch_max = (done + (st[ST_STEPS_DONE] > 0)) * CKPT_MAX_PER_EPOCH;
  if (!whole_in(st[ST_TRAIN_IMAGES], 0, per_epoch_max))
    return ckpt_bad(err, errlen, path, "train_images",
                    "%g, expected a whole number in [0, %.0f] (%d epochs done)",
                    st[ST_TRAIN_IMAGES], per_epoch_max, done);
  if (st[ST_HAVE_BEST] != 0 && st[ST_HAVE_BEST] != 1)
    return ckpt_bad(err, errlen, path, "have_best", "%g, expected 0 or 1", st[ST_HAVE_BEST]);
  if (st[ST_HAVE_BEST] == 1 && st[ST_ES_BEST_EPOCH] < 0)
    return ckpt_bad(err, errlen, path, "have_best", "1, but es_best_epoch is -1 (no best yet)");
  if (!whole_in(st[ST_DROPOUT_STEP], 0, per_epoch_max))
    return ckpt_bad(err, errlen, path, "dropout_step",
                    "%g, expected a whole number of steps in [0, %.0f] (%d epochs done)",
                    st[ST_DROPOUT_STEP], per_epoch_max, done);
  int64_t step;
  memcpy(&step, train_ckpt_find(c, "optim.step")->data, sizeof step);
  if (step < 0 || (double)step > per_epoch_max)
    return ckpt_bad(err, errlen, path, "optim.step",
                    "%lld, expected a step count in [0, %.0f] (%d epochs done)",
                    (long long)step, per_epoch_max, done);
  const train_ckpt_section_t *cs = train_ckpt_find(c, "counters");
  for (size_t i = 0; i < cs->nbytes / sizeof(int64_t); i++) {
    int64_t k;
    memcpy(&k, (const unsigned char *)cs->data + i * sizeof k, sizeof k);
    if (k < 0 || (double)k > per_epoch_max)
      return ckpt_bad(err, errlen, path, "counters",
                      "value %zu is %lld, expected a batch count in [0, %.0f]", i, (long long)k,
                      per_epoch_max);
  }
  /* Weights and optimizer state: finite; Adam's second moments (the second half of its
     state, what scales each parameter's step) also >= 0. */
  size_t optn = 0;
  nn_model_optim_state(r->model, &optn);
  int adam = strcmp(r->o->optimizer, "sgd") != 0;
  const char *finite[] = {"params", "buffers", "best.params", "best.buffers"};
  for (size_t i = 0; i < sizeof finite / sizeof finite[0]; i++) {
    const train_ckpt_section_t *s = train_ckpt_find(c, finite[i]);
    if (s && check_floats(s, SIZE_MAX, path, err, errlen) != 0) return -1;
  }
  if (check_floats(train_ckpt_find(c, "optim.state"), adam ? optn / 2 : SIZE_MAX, path, err,
                   errlen) != 0)
    return -1;
  return 0;
}

/* Rank 0: reads and checks a checkpoint against this run, then copies it in. Returns 0,
   or -1 with err naming the file; on failure nothing of the run has changed. */
static int load_checkpoint(run_t *r, const char *path, int warn, char *err, size_t errlen) {
  train_ckpt_t c;
  if (train_ckpt_read(path, &c, err, errlen) != 0) return -1;
  int format;
  if (train_ckpt_format(&c, path, &format, err, errlen) != 0) goto fail;
  char v[256];
  const char *model = train_ckpt_meta(&c, "model", v, sizeof v);
  if (!model) {
    snprintf(err, errlen, "%s: not a train checkpoint (no model in its metadata)", path);
    goto fail;
  }
  if (strcmp(model, r->o->model) != 0) {
    snprintf(err, errlen, "%s: checkpoint of model %s, this run trains %s", path, model,
             r->o->model);
    goto fail;
  }
  const char *ds = train_ckpt_meta(&c, "dataset", v, sizeof v);
  if (!ds || strcmp(ds, r->o->dataset) != 0) {
    snprintf(err, errlen, "%s: checkpoint of data set %s, this run uses %s", path,
             ds ? ds : "(none)", r->o->dataset);
    goto fail;
  }
  const char *opt = train_ckpt_meta(&c, "optimizer", v, sizeof v);
  if (!opt || strcmp(opt, r->o->optimizer) != 0) {
    snprintf(err, errlen, "%s: checkpoint of optimizer %s, this run uses %s", path,
             opt ? opt : "(none)", r->o->optimizer);
    goto fail;
  }
  size_t optn = 0;
  float *ostate = nn_model_optim_state(r->model, &optn);
  size_t np = nn_model_param_len(r->model), nb = nn_model_num_buffers(r->model);
  int ncounters = 0;
  for (int i = 0; i < nn_model_num_slices(r->model); i++)
    if (nn_model_slice(r->model, i)->kind == NN_SLICE_COUNTER) ncounters++;
  /* Format 1 holds the state fields before the mid-epoch ones. */
  size_t state_bytes = (format == 1 ? ST_COUNT_V1 : ST_COUNT) * sizeof(double);
  struct {
    const char *name;
    size_t bytes;
  } want[] = {{"params", np * sizeof(float)},          {"buffers", nb * sizeof(float)},
              {"counters", ncounters * sizeof(int64_t)}, {"optim.state", optn * sizeof(float)},
              {"optim.step", sizeof(int64_t)},           {"state", state_bytes}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const train_ckpt_section_t *s = train_ckpt_find(&c, want[i].name);
    if (!s || s->nbytes != want[i].bytes) {
      snprintf(err, errlen, "%s: section %s has %zu bytes, model %s needs %zu (checkpoint "
               "format %d)", path, want[i].name, s ? s->nbytes : 0, r->o->model,
               want[i].bytes, format);
      goto fail;
    }
  }
  const train_ckpt_section_t *bp = train_ckpt_find(&c, "best.params");
  const train_ckpt_section_t *bb = train_ckpt_find(&c, "best.buffers");
  if ((bp && bp->nbytes != np * sizeof(float)) || (bb && bb->nbytes != nb * sizeof(float))) {
    snprintf(err, errlen, "%s: best weights of the wrong size", path);
    goto fail;
  }
  /* The run that wrote it (a checkpoint before global_batch and lr_ranks: its ranks). */
  const char *fr = train_ckpt_meta(&c, "ranks", v, sizeof v);
  int file_ranks = fr ? atoi(fr) : r->ranks;
  const char *fb = train_ckpt_meta(&c, "batch_size", v, sizeof v);
  int file_batch = fb ? atoi(fb) : r->o->batch;
  const char *fl = train_ckpt_meta(&c, "lr_scale", v, sizeof v);
  double file_lr_scale = fl ? atof(fl) : file_ranks;
  if (file_ranks < 1 || file_ranks > CKPT_MAX_RANKS || file_batch < 1 || file_batch > 65536 ||
      !(file_lr_scale > 0 && file_lr_scale <= CKPT_MAX_RANKS)) {
    snprintf(err, errlen, "%s: bad checkpoint metadata: ranks %d, batch_size %d, lr_scale %g "
             "(expected ranks in [1, %d], batch_size in [1, 65536], lr_scale in (0, %d])", path,
             file_ranks, file_batch, file_lr_scale, CKPT_MAX_RANKS, CKPT_MAX_RANKS);
    goto fail;
  }
  const train_ckpt_section_t *rb = train_ckpt_find(&c, "rank.buffers");
  if (rb && rb->nbytes != (size_t)file_ranks * nb * sizeof(float)) {
    snprintf(err, errlen, "%s: section rank.buffers has %zu bytes, %d ranks of model %s need %zu",
             path, rb->nbytes, file_ranks, r->o->model, (size_t)file_ranks * nb * sizeof(float));
    goto fail;
  }
  if (rb && check_floats(rb, SIZE_MAX, path, err, errlen) != 0) goto fail;
  if (check_checkpoint(r, &c, path, err, errlen) != 0) goto fail;
  float *rank_buffers = NULL;
  if (rb && rb->nbytes > 0) {
    rank_buffers = malloc(rb->nbytes);
    if (!rank_buffers) {
      snprintf(err, errlen, "%s: out of memory for rank.buffers (%zu bytes)", path, rb->nbytes);
      goto fail;
    }
    memcpy(rank_buffers, rb->data, rb->nbytes);
  }
  /* Everything checks out: copy in. */
  free(r->rank_buffers);
  r->rank_buffers = rank_buffers;
  r->ranks_in_file = file_ranks;
  r->batch_in_file = file_batch;
  r->lr_scale_in_file = file_lr_scale;
  memcpy(nn_model_params(r->model), train_ckpt_find(&c, "params")->data, np * sizeof(float));
  memcpy(nn_model_buffers(r->model), train_ckpt_find(&c, "buffers")->data, nb * sizeof(float));
  memcpy(nn_model_counters(r->model), train_ckpt_find(&c, "counters")->data,
         ncounters * sizeof(int64_t));
  memcpy(ostate, train_ckpt_find(&c, "optim.state")->data, optn * sizeof(float));
  memcpy(nn_model_optim_step_count(r->model), train_ckpt_find(&c, "optim.step")->data,
         sizeof(int64_t));
  ckpt_state(&c, r->st);
  if (r->best_params && bp && bb) {
    memcpy(r->best_params, bp->data, np * sizeof(float));
    memcpy(r->best_buffers, bb->data, nb * sizeof(float));
  } else {
    r->st[ST_HAVE_BEST] = 0;
  }
  /* Settings that change the arithmetic: resuming still works, but not bit for bit. A
     different number of ranks main() handles and reports itself (keeping the global batch),
     and a batch size then differs on purpose. */
  const char *keys[] = {"batch_size", "seed", "lr", "warmup_epochs", "lr_schedule",
                        "batches_per_allreduce", "gradient_predivide_factor"};
  char mine[4096];
  train_flags_describe(r->o, r->ranks, mine, sizeof mine);
  train_ckpt_t me = {.meta = mine};
  size_t first = file_ranks != r->ranks;  /* keys[0], batch_size: see above */
  for (size_t i = first; warn && i < sizeof keys / sizeof keys[0]; i++) {
    char a[128], b[128];
    const char *va = train_ckpt_meta(&c, keys[i], a, sizeof a);
    const char *vb = train_ckpt_meta(&me, keys[i], b, sizeof b);
    if (va && vb && strcmp(va, vb) != 0)
      fprintf(stderr, "train: warning: %s has %s=%s, this run %s: the continuation is not exact\n",
              path, keys[i], va, vb);
  }
  train_ckpt_free(&c);
  return 0;
fail:
  train_ckpt_free(&c);
  return -1;
}

/* ---- rank 0's output paths, checked before any training ---- */

/* Whether dir takes a new file: creates and removes one. 0, or -1 with errno set. */
static int probe_dir(const char *dir) {
  char p[4300];
  snprintf(p, sizeof p, "%s/.train-probe.%d", dir, (int)getpid());
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return -1;
  int e = close(fd) != 0 ? errno : 0;
  if (unlink(p) != 0 && !e) e = errno;
  errno = e;
  return e ? -1 : 0;
}

/* The TensorBoard runs of --logdir, as Keras's TensorBoard callback lays them out: one
   directory (one run) each, with the same tags in both, so that TensorBoard draws the
   train and validation curves of a tag in one chart. */
enum { TB_TRAIN, TB_VALIDATION, TB_RUNS };
static const char *const tb_run_names[TB_RUNS] = {"train", "validation"};

/* ---- --export: the weights and what a reader needs to feed them (docs/serve.md) ---- */

/* The export's format version: serve refuses a larger one (keys it would not know). */
#define EXPORT_FORMAT_VERSION "1"

/* The shortest decimal that strtof reads back as exactly f (0.2860f -> "0.286"). */
static void float_text(char *buf, size_t len, float f) {
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, len, "%.*g", p, (double)f);
    if (strtof(buf, NULL) == f) return;
  }
}

/* The class names of the named data sets, as a JSON array (NULL: none known). */
static const char *class_names_json(const char *dataset) {
  if (strcmp(dataset, "fashion-mnist") == 0)
    return "[\"T-shirt/top\",\"Trouser\",\"Pullover\",\"Dress\",\"Coat\",\"Sandal\","
           "\"Shirt\",\"Sneaker\",\"Bag\",\"Ankle boot\"]";
  if (strcmp(dataset, "mnist") == 0)
    return "[\"0\",\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]";
  if (strcmp(dataset, "cifar10") == 0)
    return "[\"airplane\",\"automobile\",\"bird\",\"cat\",\"deer\",\"dog\",\"frog\","
           "\"horse\",\"ship\",\"truck\"]";
  return NULL;
}

/* Writes the model's weights to --export with a safetensors "__metadata__" object
   (string values): hvd_format_version, model, dataset, input_shape "C,H,W", num_classes,
   norm_mean and norm_std (one value per input channel: the constants train_make_batch
   applied to that channel, x = (pixel/255 - mean) / std), and class_names (a JSON array,
   for the named data sets). The file is written to a temporary name and renamed, so a
   reader polling the folder (serve --model-base-path) never sees half a file. */
static void export_model(const nn_model_t *model, const train_opts_t *o, const train_dataset_t *d,
                         const float mean[3], const float std[3]) {
  char shape[64], classes[16], means[64 * 16] = "", stds[64 * 16] = "", v[32];
  snprintf(shape, sizeof shape, "%d,%d,%d", d->c, d->h, d->w);
  snprintf(classes, sizeof classes, "%d", d->num_classes);
  for (int ch = 0; ch < d->c && ch < 64; ch++) {
    int k = ch < 3 ? ch : 2; /* train_make_batch's channel -> constant */
    size_t at = strlen(means);
    float_text(v, sizeof v, mean[k]);
    snprintf(means + at, sizeof means - at, "%s%s", ch ? "," : "", v);
    at = strlen(stds);
    float_text(v, sizeof v, std[k]);
    snprintf(stds + at, sizeof stds - at, "%s%s", ch ? "," : "", v);
  }
  nn_st_meta_t meta[8] = {{"hvd_format_version", EXPORT_FORMAT_VERSION},
                          {"model", o->model},
                          {"dataset", o->dataset},
                          {"input_shape", shape},
                          {"num_classes", classes},
                          {"norm_mean", means},
                          {"norm_std", stds}};
  int nmeta = 7;
  const char *names = class_names_json(o->dataset);
  if (names && d->num_classes == 10) meta[nmeta++] = (nn_st_meta_t){"class_names", names};
  nn_check(nn_model_save_safetensors_meta(model, o->export_path, meta, nmeta), "--export");
}

/* Opens the event files and log.csv of --logdir, creates --checkpoint-dir, and probes it
   and the directory of --export: a path that cannot be written is found now, not after
   an epoch or after all of training. 0, or -1 with one line in err naming the flag or
   the file. */
static int open_outputs(const train_opts_t *o, train_tfevents_t tb[TB_RUNS], train_csv_t *csv,
                        char *err, size_t errlen) {
  if (o->checkpoint_dir) {
    if (train_mkdirs(o->checkpoint_dir) != 0) {
      snprintf(err, errlen, "--checkpoint-dir %s: cannot create (%s)", o->checkpoint_dir,
               strerror(errno));
      return -1;
    }
    if (probe_dir(o->checkpoint_dir) != 0) {
      snprintf(err, errlen, "--checkpoint-dir %s: cannot write there (%s)", o->checkpoint_dir,
               strerror(errno));
      return -1;
    }
  }
  if (o->export_path) {
    struct stat st;
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", o->export_path);
    const char *dir = dirname(buf);
    if (stat(o->export_path, &st) == 0 && S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "--export %s: is a directory (give a file name, such as %s/model.safetensors)",
               o->export_path, o->export_path);
      return -1;
    }
    if (stat(dir, &st) != 0) {
      snprintf(err, errlen, "--export %s: directory %s: %s", o->export_path, dir,
               errno == ENOENT ? "does not exist (create it first)" : strerror(errno));
      return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "--export %s: %s is not a directory", o->export_path, dir);
      return -1;
    }
    if (probe_dir(dir) != 0) {
      snprintf(err, errlen, "--export %s: cannot write in %s (%s)", o->export_path, dir,
               strerror(errno));
      return -1;
    }
  }
  if (o->logdir) {
    if (train_mkdirs(o->logdir) != 0) {
      snprintf(err, errlen, "--logdir %s: cannot create directory (%s)", o->logdir,
               strerror(errno));
      return -1;
    }
    char p[4200];
    int opened = 0;
    for (; opened < TB_RUNS; opened++) {
      snprintf(p, sizeof p, "%s/%s", o->logdir, tb_run_names[opened]);
      if (train_tfevents_open(&tb[opened], p, err, errlen) != 0) break;
    }
    if (opened == TB_RUNS) {
      snprintf(p, sizeof p, "%s/log.csv", o->logdir);
      if (train_csv_open(csv, p, o->resume != NULL) == 0) return 0;
      snprintf(err, errlen, "%s: cannot write (%s)", p, strerror(errno));
    }
    for (int i = 0; i < opened; i++) {  /* nothing was logged into them */
      train_tfevents_close(&tb[i]);
      unlink(tb[i].path);
    }
    return -1;
  }
  return 0;
}

/* Rank 0: the train run's epoch scalars and, every --histogram-freq epochs, a histogram
   of each weight; the validation run's scalars. Keras's steps: the epoch from 0. */
static void tb_epoch(train_tfevents_t tb[TB_RUNS], const train_opts_t *o, nn_model_t *m,
                     int epoch, double loss, double acc, const eval_t *v, double lr,
                     double ips) {
  const double wall = train_wall_time();
  const char *train_tags[] = {"epoch_loss", "epoch_accuracy", "epoch_learning_rate",
                              "epoch_images_per_sec"};
  const double train_vals[] = {loss, acc, lr, ips};
  for (int i = 0; i < 4; i++)
    if (train_tfevents_scalar(&tb[TB_TRAIN], train_tags[i], (float)train_vals[i], epoch,
                              wall) != 0)
      die("%s: write failed (%s)", tb[TB_TRAIN].path, strerror(errno));
  train_tfevents_t *val = &tb[TB_VALIDATION];
  if (train_tfevents_scalar(val, "epoch_loss", (float)v->loss, epoch, wall) != 0 ||
      train_tfevents_scalar(val, "epoch_accuracy", (float)v->acc, epoch, wall) != 0)
    die("%s: write failed (%s)", tb[TB_VALIDATION].path, strerror(errno));
  if (o->histogram_freq <= 0 || epoch % o->histogram_freq != 0) return;
  /* The weights as a state_dict names them (the host mirror, refreshed this epoch). */
  const float *params = nn_model_params(m);
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (sl->kind != NN_SLICE_PARAM) continue;
    if (train_tfevents_histogram(&tb[TB_TRAIN], sl->name, params + sl->offset, sl->numel,
                                 epoch, wall) != 0)
      die("%s: write failed (%s)", tb[TB_TRAIN].path, strerror(errno));
  }
}

static void bcast(const char *name, void *buf, size_t count, hvd_dtype_t t) {
  if (count == 0) return;
  hvd_check(hvd_broadcast(name, buf, count, t, 0), name);
}

/* ---- which checkpoint to resume from ---- */

typedef struct {
  train_ckpt_file_t file;
  double epochs, steps;        /* its position: epochs done, then steps of the next */
} candidate_t;

/* The furthest along first; of two at the same position, the newer file. */
static int candidate_order(const void *pa, const void *pb) {
  const candidate_t *a = pa, *b = pb;
  if (a->epochs != b->epochs) return a->epochs > b->epochs ? -1 : 1;
  if (a->steps != b->steps) return a->steps > b->steps ? -1 : 1;
  if (a->file.mtime != b->file.mtime) return a->file.mtime > b->file.mtime ? -1 : 1;
  return strcmp(a->file.path, b->file.path);
}

/* The checkpoints of dir that read (magic, length, crc) with their positions, furthest
   along first; each one that does not read is said in a line. NULL with err on failure. */
static candidate_t *resume_candidates(const char *dir, int *count, int *had_files, char *err,
                                      size_t errlen) {
  train_ckpt_file_t *files;
  int n;
  if (train_ckpt_list(dir, &files, &n, err, errlen) != 0) return NULL;
  *had_files = n > 0;
  candidate_t *c = malloc((size_t)(n ? n : 1) * sizeof *c);
  if (!c) {
    free(files);
    snprintf(err, errlen, "out of memory listing %s", dir);
    return NULL;
  }
  int k = 0;
  for (int i = 0; i < n; i++) {
    train_ckpt_t ck;
    char why[8192];
    if (train_ckpt_read(files[i].path, &ck, why, sizeof why) != 0) {
      fprintf(stderr, "train: --resume auto: passing over %s\n", why);
      continue;
    }
    const train_ckpt_section_t *s = train_ckpt_find(&ck, "state");
    if (s && s->nbytes >= ST_COUNT_V1 * sizeof(double)) {
      double st[ST_COUNT];
      ckpt_state(&ck, st);
      c[k++] = (candidate_t){files[i], st[ST_EPOCHS_DONE], st[ST_STEPS_DONE]};
    } else {
      fprintf(stderr, "train: --resume auto: passing over %s: no training state in it\n",
              files[i].path);
    }
    train_ckpt_free(&ck);
  }
  free(files);
  qsort(c, (size_t)k, sizeof *c, candidate_order);
  *count = k;
  return c;
}

/* Rank 0: loads the checkpoint to resume from into r. --resume PATH: that file (an error
   when it does not load); --resume auto: the furthest along of --checkpoint-dir that
   loads, each one passed over said in a line. Returns 1 with its path in chosen, 0 when
   auto finds no checkpoint file (a fresh start), -1 with err (also when files are there
   but none loads). */
static int resume_load(run_t *r, char *chosen, size_t chosen_len, char *err, size_t errlen) {
  if (strcmp(r->o->resume, "auto") != 0) {
    if (load_checkpoint(r, r->o->resume, 1, err, errlen) != 0) return -1;
    snprintf(chosen, chosen_len, "%s", r->o->resume);
    return 1;
  }
  int n = 0;
  int had_files = 0;
  candidate_t *c = resume_candidates(r->o->checkpoint_dir, &n, &had_files, err, errlen);
  if (!c) return errno == ENOENT ? 0 : -1;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (load_checkpoint(r, c[i].file.path, 1, err, errlen) == 0) {
      snprintf(chosen, chosen_len, "%s", c[i].file.path);
      rc = 1;
    } else {
      fprintf(stderr, "train: --resume auto: passing over %s\n", err);
    }
  }
  free(c);
  /* Checkpoints that all fail to load are not "none": training from scratch would
     overwrite them (another --model given by mistake, say). */
  if (rc == 0 && had_files) {
    snprintf(err, errlen, "--resume auto: none of the checkpoints in %s loads (see above): "
             "remove them, or give --resume PATH", r->o->checkpoint_dir);
    rc = -1;
  }
  return rc;
}

/* The model and its optimizer, for batches of up to `batch` samples. */
static nn_model_t *make_model(const train_opts_t *o, const train_dataset_t *train, int batch) {
  nn_model_config_t cfg = {.batch = batch, .seed = o->seed, .num_classes = train->num_classes,
                           .in_channels = train->c, .in_height = train->h, .in_width = train->w};
  nn_model_t *model = NULL;
  if (nn_model_create(&model, o->model, &cfg) != NN_OK)
    die("--model %s with %s (%dx%dx%d): %s", o->model, o->dataset, train->c, train->h, train->w,
        nn_last_error());
  nn_optim_config_t ocfg = {.momentum = o->momentum, .nesterov = o->nesterov,
                            .weight_decay = o->weight_decay};
  ocfg.kind = strcmp(o->optimizer, "sgd") == 0 ? NN_OPTIM_SGD
              : strcmp(o->optimizer, "adam") == 0 ? NN_OPTIM_ADAM : NN_OPTIM_ADAMW;
  if (ocfg.kind != NN_OPTIM_SGD) ocfg.momentum = 0;
  nn_check(nn_model_optim_create(model, &ocfg), "optimizer");
  return model;
}

/* Resuming a checkpoint of another number of ranks (an elastic restart): the global batch
   stays, split over this run's ranks, and so does the lr (scaled as in the first run). When
   the global batch does not split evenly, the nearest per-rank batch is taken and the lr
   follows the global batch (linear scaling). Sets o->batch and r->lr_scale; rank 0 says
   what it did in one line. */
static void plan_resumed_batch(train_opts_t *o, run_t *r, int rank, int size) {
  long global = (long)r->ranks_in_file * r->batch_in_file;
  int batch = (int)((global + size / 2) / size);
  if (batch < 1) batch = 1;
  r->lr_scale = r->lr_scale_in_file * (double)((long)batch * size) / (double)global;
  if (rank == 0 && (batch != o->batch || r->ranks_in_file != size)) {
    if ((long)batch * size == global)
      printf("train: resuming on %d rank(s), the checkpoint's run had %d: batch %d per rank "
             "keeps the global batch %ld and the lr schedule (lr %.5g x %g)\n",
             size, r->ranks_in_file, batch, global, o->lr, r->lr_scale);
    else
      printf("train: resuming on %d rank(s), the checkpoint's run had %d: its global batch "
             "%ld does not split evenly; batch %d per rank, global batch %ld, lr %.5g x %g "
             "(was x %g)\n",
             size, r->ranks_in_file, global, batch, (long)batch * size, o->lr, r->lr_scale,
             r->lr_scale_in_file);
    fflush(stdout);
  }
  o->batch = batch;
}

/* A mid-epoch checkpoint (every rank takes part): the epoch's metrics so far summed over
   the ranks, every rank's batch-norm statistics (they are averaged only at epoch ends)
   gathered; rank 0 writes last.ckpt with their average as the buffers and all of them as
   rank.buffers, so that a resume on as many ranks goes on exactly. */
static void save_mid_epoch(run_t *r, int rank, int steps_done, int steps, const double sums[3],
                           double seconds) {
  nn_model_t *m = r->model;
  size_t nb = nn_model_num_buffers(m);
  nn_check_model(nn_model_sync_to_host(m), "copying the model to the host");
  double tot[3];
  hvd_check(hvd_allreduce("ckpt.metrics", sums, tot, 3, HVD_FLOAT64, HVD_SUM),
            "allreduce of metrics");
  float *all = NULL, *avg = NULL;
  if (nb > 0 && r->ranks > 1) {
    size_t got = 0;
    void *buf = NULL;
    hvd_check(hvd_allgather("ckpt.buffers", nn_model_buffers(m), nb, HVD_FLOAT32, &buf, &got),
              "allgather of buffers");
    all = buf;
    avg = calloc(nb, sizeof *avg);
    if (!avg) die("out of memory for a checkpoint");
    for (int k = 0; k < r->ranks; k++)
      for (size_t i = 0; i < nb; i++) avg[i] += all[(size_t)k * nb + i] / (float)r->ranks;
  }
  if (rank == 0) {
    r->st[ST_STEPS_DONE] = steps_done;
    r->st[ST_STEPS_PER_EPOCH] = steps;
    r->st[ST_EPOCH_LOSS_SUM] = tot[0];
    r->st[ST_EPOCH_CORRECT] = tot[1];
    r->st[ST_EPOCH_SAMPLES] = tot[2];
    r->st[ST_EPOCH_SECONDS] = seconds;
    char p[4200];
    snprintf(p, sizeof p, "%s/last.ckpt", r->o->checkpoint_dir);
    save_checkpoint(r, p, avg, all);
  }
  free(all);
  free(avg);
}


/* Every rank's shared settings and data set sizes, compared with rank 0's right after
   hvd_init: ranks started with other flags end at once with one line naming the flag
   and both values, instead of stalling in their first mismatched allreduce. */
static void check_ranks_agree(const train_opts_t *o, const train_agree_data_t *d, int size) {
  char mine[TRAIN_AGREE_LEN];
  train_agree_describe(o, d, mine);
  void *all = NULL;
  size_t got = 0;
  hvd_check(hvd_allgather("setup.agree", mine, sizeof mine, HVD_UINT8, &all, &got),
            "allgather of the settings");
  if (got != (size_t)size * sizeof mine) {
    free(all);
    die("allgather of the settings: %zu bytes, expected %d x %zu", got, size, sizeof mine);
  }
  char err[1024];
  int rc = train_agree_compare(all, size, err, sizeof err);
  free(all);
  if (rc != 0) die_usage("%s", err);
}

static int count_counters(nn_model_t *m) {
  int n = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++)
    if (nn_model_slice(m, i)->kind == NN_SLICE_COUNTER) n++;
  return n;
}

int main(int argc, char **argv) {
  g_rank = env_rank();
  /* Over a file-size limit a write fails with EFBIG and is reported like a full disk,
     instead of the signal killing the process without a word. */
  signal(SIGXFSZ, SIG_IGN);
  train_opts_t o;
  train_flags_defaults(&o);
  char err[8192];
  int pr = train_flags_parse(argc, argv, &o, err, sizeof err);
  if (pr == 1) {
    if (g_rank == 0) train_flags_help(stdout, argv[0]);
    return 0;
  }
  if (pr != 0) {
    if (g_rank == 0) fprintf(stderr, "train: %s\n", err);
    return 2;
  }
  if (o.threads > 0) nn_set_threads(o.threads);
  const int gpu = strcmp(o.device, "gpu") == 0;
  g_gpu = gpu;
  if (o.use_fp16 && o.use_bf16) die("--use-fp16 and --use-bf16 together: choose one precision");
  /* On the CPU nn computes in float32 only: stop before any data is loaded. */
  if (!gpu && (o.use_fp16 || o.use_bf16))
    die("%s: mixed precision needs --device gpu (on the CPU nn computes in float32; "
        "--fp16-allreduce compresses only the gradient allreduce)",
        o.use_fp16 ? "--use-fp16" : "--use-bf16");
  if (!gpu && o.channels_last)
    die("--channels-last needs --device gpu (on the CPU nn's layout is NCHW)");
  if (o.batches_per_allreduce > 1 && (o.use_fp16 || o.use_bf16 || o.channels_last))
    die_usage("--batches-per-allreduce %d: accumulating gradients needs float32 NCHW on the "
              "GPU (a %s model overwrites its gradients in backward); drop %s",
              o.batches_per_allreduce,
              o.use_fp16 ? "fp16" : o.use_bf16 ? "bf16" : "channels-last",
              o.use_fp16 ? "--use-fp16" : o.use_bf16 ? "--use-bf16" : "--channels-last");
  if (o.checkpoint_every_steps > 0 && !o.checkpoint_dir)
    die("--checkpoint-every-steps %d needs --checkpoint-dir (where last.ckpt goes)",
        o.checkpoint_every_steps);
  if (o.resume && strcmp(o.resume, "auto") == 0 && !o.checkpoint_dir)
    die("--resume auto needs --checkpoint-dir (the directory to resume from)");
  const nn_precision_t precision = o.use_fp16   ? NN_PRECISION_FP16
                                   : o.use_bf16 ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
  /* nn_cuda_available() only asks cudaGetDeviceCount (nothing without CUDA in the
     build): safe before MPI is up, and every rank fails the same way. */
  if (gpu && !nn_cuda_available())
    die("--device gpu: no usable GPU (%s); use --device cpu", nn_cuda_reason());

  /* Probe the model's input shape (synthetic data takes it; real data must match it). */
  nn_model_config_t probe_cfg = {.batch = 1, .seed = o.seed};
  nn_model_t *probe = NULL;
  if (nn_model_create(&probe, o.model, &probe_cfg) != NN_OK) die("--model: %s", nn_last_error());
  int mc, mh, mw;
  nn_model_input_shape(probe, &mc, &mh, &mw);
  nn_model_free(probe);

  /* Data before the runtime: a bad file ends every rank the same way, quickly. */
  train_dataset_t train, test, val;
  int synth_test = o.synthetic_samples / 4 > 16 ? o.synthetic_samples / 4 : 16;
  const int is_idx = strcmp(o.dataset, "idx") == 0;
  int loaded = is_idx ? train_load_idx_sets(o.train_images, o.train_labels, o.test_images,
                                            o.test_labels, &train, &test, err, sizeof err)
                      : train_load_dataset(o.dataset, o.data_dir, o.seed, mc, mh, mw,
                                           o.synthetic_samples, synth_test, &train, &test, err,
                                           sizeof err);
  if (loaded != 0) die("%s", err);
  /* Normalisation: the named sets' published constants; a user's IDX files carry none, so
     their training images' own mean and std (before --max-train: a property of the file). */
  float norm_mean[3], norm_std[3];
  if (is_idx) train_norm_from_data(&train, norm_mean, norm_std);
  else train_norm_constants(o.dataset, norm_mean, norm_std);
  train_truncate(&train, o.max_train);
  train_truncate(&test, o.max_test);
  int val_is_test = 0;
  int nval = (int)(train.n * (double)o.validation_split);
  if (nval > 0) {
    if (train_split_tail(&train, nval, &val, err, sizeof err) != 0) die("--validation-split: %s", err);
  } else {
    val = test;
    val_is_test = 1;
  }

  /* --init-weights: read and checked against the model on every rank before the runtime
     is up, so a wrong file ends every rank alike with nothing written; copied into the
     model below unless a checkpoint is resumed. */
  nn_model_t *init = NULL;
  if (o.init_weights) {
    nn_model_config_t icfg = {.batch = 1, .seed = o.seed, .num_classes = train.num_classes,
                              .in_channels = train.c, .in_height = train.h, .in_width = train.w};
    if (nn_model_create(&init, o.model, &icfg) != NN_OK)
      die("--model %s with %s (%dx%dx%d): %s", o.model, o.dataset, train.c, train.h, train.w,
          nn_last_error());
    if (nn_model_load_safetensors(init, o.init_weights) != NN_OK)
      die_usage("--init-weights: %s", nn_last_error());
  }

  /* The gradients already go in fixed buckets (--bucket-mb). Fusing ready buckets once
     more would make each element's summation order in the ring depend on timing (which
     buckets were ready together), so runs on 3 or more ranks would not repeat bit for
     bit, nor a resumed run follow the uninterrupted one. Unless the user chose a fusion
     threshold, train runs with the runtime's fusion off. */
  if (!getenv("HVD_FUSION_THRESHOLD") && !getenv("HOROVOD_FUSION_THRESHOLD") &&
      setenv("HVD_FUSION_THRESHOLD", "0", 1) != 0)
    die("setenv: %s", strerror(errno));
  hvd_check(hvd_init(), "hvd_init");
  g_hvd_up = 1;
  int rank = hvd_rank(), size = hvd_size();
  g_rank = rank;
  const train_agree_data_t sizes = {train.n, val_is_test ? 0 : val.n, test.n};
  check_ranks_agree(&o, &sizes, size);
  if (train.n < size) die("%d training samples cannot feed %d ranks", train.n, size);
#ifdef NN_WITH_CUDA
  /* A CUDA build on a machine without a usable GPU: say so once (the reason, and that
     it runs on the CPU). */
  if (rank == 0 && !o.quiet && !nn_cuda_available()) {
    printf("train: %s\n", nn_cuda_info());
    fflush(stdout);
  }
#endif
  if (gpu) {
    /* Before any other CUDA work of this process: local rank i drives GPU i. */
    nn_check_rank(nn_cuda_set_device(hvd_local_rank()), "selecting the GPU");
    if (rank == 0 && !o.quiet) {
      printf("train: %s; local rank i uses GPU i; precision %s\n", nn_cuda_info(),
             nn_precision_name(precision));
      fflush(stdout);
    }
  }

  nn_model_t *model = make_model(&o, &train, o.batch);
  size_t np = nn_model_param_len(model), nb = nn_model_num_buffers(model);
  int ncounters = count_counters(model);

  /* Linear scaling (Horovod): the global batch is batch x batches_per_allreduce x ranks. */
  run_t run = {.o = &o, .model = model, .ranks = size,
               .lr_scale = o.lr_scaling ? (double)size * o.batches_per_allreduce : 1.0};
  if (o.restore_best) {
    run.best_params = malloc(np * sizeof(float));
    run.best_buffers = malloc((nb ? nb : 1) * sizeof(float));
    if (!run.best_params || !run.best_buffers) die("out of memory for the best weights");
  }
  train_early_stopping_t es;
  train_early_stopping_init(&es, o.monitor, o.min_delta, o.es_patience);
  train_monitor_t ckmon;  /* ModelCheckpoint's own best: no min_delta, as Keras */
  train_monitor_init(&ckmon, o.monitor, 0.0);
  run.st[ST_ES_BEST] = es.mon.best;
  run.st[ST_ES_BEST_EPOCH] = -1;
  run.st[ST_CK_BEST] = ckmon.best;
  run.st[ST_CK_BEST_EPOCH] = -1;
  run.st[ST_BEST_VAL_ACC] = -1;
  run.st[ST_BEST_VAL_ACC_EPOCH] = -1;

  /* Temporary files of writes cut short (a kill in the middle of one): rank 0 removes
     them before anything else looks at the directory. */
  struct stat ckdir;
  if (rank == 0 && o.checkpoint_dir && stat(o.checkpoint_dir, &ckdir) == 0 &&
      S_ISDIR(ckdir.st_mode)) {  /* else open_outputs says what is wrong with it */
    int removed = 0;
    if (train_ckpt_remove_stale(o.checkpoint_dir, &removed, err, sizeof err) != 0)
      fprintf(stderr, "train: warning: --checkpoint-dir: %s\n", err);
    if (removed > 0)
      printf("train: removed %d stale temporary checkpoint file(s) from %s (writes cut short "
             "by an earlier run)\n", removed, o.checkpoint_dir);
  }

  /* Resume: rank 0 finds, reads and checks; every rank learns the verdict and the run the
     checkpoint came from, then the state. */
  int resumed = 0;
  char resumed_from[4400] = "";
  int32_t info[3] = {0, 0, 0}; /* verdict (-1, 0 none, 1), the file's ranks, batch */
  double file_lr_scale = 0;
  if (o.resume) {
    if (rank == 0) {
      info[0] = resume_load(&run, resumed_from, sizeof resumed_from, err, sizeof err);
      info[1] = run.ranks_in_file;
      info[2] = run.batch_in_file;
      file_lr_scale = run.lr_scale_in_file;
    }
    bcast("resume.status", info, 3, HVD_INT32);
    if (info[0] < 0) die("%s", err);
    resumed = info[0] == 1;
    if (!resumed && rank == 0 && init)
      printf("train: --resume auto: no checkpoint in %s, starting from --init-weights %s\n",
             o.checkpoint_dir, o.init_weights);
    else if (!resumed && rank == 0)
      printf("train: --resume auto: no checkpoint in %s, starting from scratch\n",
             o.checkpoint_dir);
  }
  if (resumed) {
    bcast("resume.lr_scale", &file_lr_scale, 1, HVD_FLOAT64);
    run.ranks_in_file = info[1];
    run.batch_in_file = info[2];
    run.lr_scale_in_file = file_lr_scale;
    int batch = o.batch;
    plan_resumed_batch(&o, &run, rank, size);
    if (o.batch != batch) {
      /* The model's activations are sized for its batch: make it anew, and load again. */
      nn_model_free(model);
      model = run.model = make_model(&o, &train, o.batch);
      int32_t ok = 1;
      if (rank == 0 && load_checkpoint(&run, resumed_from, 0, err, sizeof err) != 0) ok = 0;
      bcast("resume.reload", &ok, 1, HVD_INT32);
      if (!ok) die("%s", err);
    }
  }
  float *params = nn_model_params(model);   /* the host array (a mirror on a GPU) */
  size_t optn = 0;
  float *ostate = nn_model_optim_state(model, &optn);
  if (resumed) {
    bcast("resume.optim.state", ostate, optn, HVD_FLOAT32);
    bcast("resume.optim.step", nn_model_optim_step_count(model), 1, HVD_INT64);
    bcast("resume.state", run.st, ST_COUNT, HVD_FLOAT64);
    nn_model_set_dropout_step(model, (uint64_t)run.st[ST_DROPOUT_STEP]);
    if (run.best_params && run.st[ST_HAVE_BEST] != 0) {
      bcast("resume.best.params", run.best_params, np, HVD_FLOAT32);
      bcast("resume.best.buffers", run.best_buffers, nb, HVD_FLOAT32);
    }
    es.mon.best = run.st[ST_ES_BEST];
    es.mon.best_epoch = (int)run.st[ST_ES_BEST_EPOCH];
    es.wait = (int)run.st[ST_ES_WAIT];
    ckmon.best = run.st[ST_CK_BEST];
    ckmon.best_epoch = (int)run.st[ST_CK_BEST_EPOCH];
  }
  if (init && !resumed) {
    memcpy(params, nn_model_params(init), np * sizeof(float));
    memcpy(nn_model_buffers(model), nn_model_buffers(init), nb * sizeof(float));
    memcpy(nn_model_counters(model), nn_model_counters(init),
           (size_t)ncounters * sizeof(int64_t));
  } else if (init && rank == 0) {
    printf("train: resuming %s: its weights, not --init-weights %s\n", resumed_from,
           o.init_weights);
    fflush(stdout);
  }
  nn_model_free(init);
  init = NULL;
  /* Rank 0's weights and buffers everywhere (Horovod's broadcast_parameters). */
  bcast("init.params", params, np, HVD_FLOAT32);
  bcast("init.buffers", nn_model_buffers(model), nb, HVD_FLOAT32);
  bcast("init.counters", nn_model_counters(model), (size_t)ncounters, HVD_INT64);
  /* A mid-epoch checkpoint of as many ranks: each rank goes on with its own batch-norm
     statistics (otherwise all start from their average, in "buffers"). */
  if (resumed && nb > 0 && size > 1) {
    int32_t own = rank == 0 && run.rank_buffers && run.ranks_in_file == size;
    bcast("resume.own_buffers", &own, 1, HVD_INT32);
    if (own) {
      float *all = rank == 0 ? run.rank_buffers : malloc((size_t)size * nb * sizeof(float));
      if (!all) die("out of memory for the ranks' buffers");
      bcast("resume.rank.buffers", all, (size_t)size * nb, HVD_FLOAT32);
      memcpy(nn_model_buffers(model), all + (size_t)rank * nb, nb * sizeof(float));
      if (rank != 0) free(all);
    }
  }
  free(run.rank_buffers);
  run.rank_buffers = NULL;

  /* --device gpu: everything above went through the host arrays (rank 0's weights, or
     the checkpoint's weights and optimizer state); moving to the device takes them, the
     optimizer included, along. */
  if (gpu) {
    /* Mixed precision changes how the model is laid out on the device: before moving.
       Weights, gradients (what hvd averages) and the optimizer state stay float32, so
       broadcasts, buckets and checkpoints are the same in every precision. */
    nn_precision_config_t pc = {.precision = precision,  /* zeros: nn's defaults */
                                .channels_last = o.channels_last};
    nn_check(nn_model_set_precision(model, &pc), "setting the precision");
    nn_check_rank(nn_model_to_device(model, NN_DEVICE_CUDA), "moving the model to the GPU");
    /* A bucket's allreduce waits for the kernels queued on nn's stream (backward). */
    hvd_cuda_set_stream(nn_cuda_stream());
  }

  /* Gradient buckets: ranges of the flat gradient buffer that end at parameter boundaries,
     the same on all ranks. */
  size_t bucket_bytes = (size_t)(o.bucket_mb * 1048576.0);
  if (bucket_bytes < sizeof(float)) bucket_bytes = sizeof(float);
  size_t first_bytes = bucket_bytes < 1048576 ? bucket_bytes : 1048576;
  hvd_grad_buckets_t *buckets = NULL;
  hvd_check(hvd_grad_buckets_create(&buckets, nn_model_grads_home(model), np, bucket_bytes,
                                    first_bytes,
                                    o.fp16_allreduce ? HVD_COMPRESSION_FP16 : HVD_COMPRESSION_NONE,
                                    o.predivide != 1.0f ? HVD_SUM : HVD_AVERAGE),
            "gradient buckets");
  /* Buckets end at parameter boundaries, as PyTorch DDP's. */
  char bucket_err[512];
  if (train_buckets_at_params(buckets, model, bucket_err, sizeof bucket_err) != 0)
    die("%s", bucket_err);
  hvd_grad_buckets_set_overlap(buckets, !o.no_overlap);

  nn_lr_schedule_t sched = {.base_lr = o.lr * run.lr_scale, .warmup_epochs = o.warmup_epochs,
                            .warmup_start_lr = o.lr, .step_epochs = o.lr_step_epochs,
                            .gamma = o.lr_gamma, .total_epochs = (float)o.epochs,
                            .min_lr = o.min_lr};
  sched.kind = strcmp(o.lr_schedule, "step") == 0 ? NN_LR_STEP
               : strcmp(o.lr_schedule, "cosine") == 0 ? NN_LR_COSINE : NN_LR_CONSTANT;

  train_batch_opts_t bo = {.aug_pad = 0, .aug_flip = 0, .seed = o.seed};
  memcpy(bo.mean, norm_mean, sizeof bo.mean);
  memcpy(bo.std, norm_std, sizeof bo.std);
  if (o.augment) {
    bo.aug_pad = o.crop_pad >= 0 ? o.crop_pad : strcmp(o.dataset, "cifar10") == 0 ? 4 : 2;
    /* Digits and clothes have a handedness: flip only natural images. */
    bo.aug_flip = strcmp(o.dataset, "cifar10") == 0;
  }

  size_t per = (size_t)train.c * train.h * train.w;
  float *x = malloc(sizeof(float) * per * o.batch);
  int32_t *y = malloc(sizeof(int32_t) * o.batch);
  uint32_t *perm = malloc(sizeof(uint32_t) * train.n);
  uint32_t *idx = malloc(sizeof(uint32_t) * o.batch);
  if (!x || !y || !perm || !idx) die("out of memory for batches");

  /* Rank 0's outputs, opened or probed now; every rank learns the verdict, so a bad
     path ends the run before any training with rank 0's one line. */
  train_tfevents_t tb[TB_RUNS] = {{0}};
  train_csv_t csv = {0};
  int32_t outputs_ok = 1;
  if (rank == 0 && open_outputs(&o, tb, &csv, err, sizeof err) != 0) outputs_ok = 0;
  bcast("setup.outputs", &outputs_ok, 1, HVD_INT32);
  if (!outputs_ok) die("%s", err);

  train_progress_t prog;
  train_progress_init(&prog, rank == 0 && !o.quiet, g_launched);
  int steps = train_steps_per_epoch(train.n, size, o.batch);
  /* Gradient accumulation: the batches of an epoch form windows of K (the last one may be
     shorter), each one optimizer step. Windows restart every epoch. */
  const int accum = o.batches_per_allreduce;
  const int windows = (steps + accum - 1) / accum;
  long long kill_at = -1;  /* test knob: SIGKILL rank 0 at this global step */
  if (getenv("HVD_TRAIN_TEST_KILL_AT_STEP")) kill_at = atoll(getenv("HVD_TRAIN_TEST_KILL_AT_STEP"));

  int start_epoch = (int)run.st[ST_EPOCHS_DONE];
  /* A mid-epoch checkpoint: the step to go on from. With the same global batch (more or
     fewer ranks, the batch per rank scaled) it is the same step of the same batches; with
     another global batch, the same fraction of the epoch. */
  int start_step = (int)run.st[ST_STEPS_DONE], file_steps = (int)run.st[ST_STEPS_PER_EPOCH];
  if (start_step > 0 && file_steps != steps) {
    int mapped = (int)((double)start_step * steps / file_steps + 0.5);
    if (mapped >= steps) mapped = steps - 1;
    if (rank == 0)
      printf("train: step %d of %d of epoch %d goes on at step %d of %d of this run's global "
             "batches (samples of this epoch may repeat or be left out)\n",
             start_step, file_steps, start_epoch + 1, mapped, steps);
    start_step = mapped;
  }
  /* A window's gradients live only in memory: go on from the start of the window (a
     checkpoint of this run is always taken at a window's end). */
  if (start_step % accum != 0) {
    if (rank == 0)
      printf("train: step %d of epoch %d is inside an accumulation window of %d: going on from "
             "step %d\n", start_step, start_epoch + 1, accum, start_step - start_step % accum);
    start_step -= start_step % accum;
  }
  if (rank == 0 && !o.quiet) {
    char accum_note[128] = "";
    if (accum > 1)
      snprintf(accum_note, sizeof accum_note, " x %d batches per allreduce", accum);
    printf("train: %s on %s, %d rank(s), batch %d per rank%s (%d global), %d train / %d val / "
           "%d test samples, %zu parameters, lr %.5g x %g, %s, %d steps per epoch",
           o.model, o.dataset, size, o.batch, accum_note, o.batch * size * accum, train.n,
           val_is_test ? 0 : val.n, test.n, nn_model_num_params(model), o.lr, run.lr_scale,
           o.optimizer, steps);
    if (accum > 1) printf(" (%d optimizer steps)", windows);
    if (o.predivide != 1.0f) printf(", gradient predivide factor %g", (double)o.predivide);
    printf("%s\n", resumed ? ", resumed" : "");
    if (is_idx)
      printf("train: %s: %d classes, %dx%d images, normalised with mean %.4f, std %.4f (of the "
             "training images)\n", o.train_images, train.num_classes, train.h, train.w,
             (double)norm_mean[0], (double)norm_std[0]);
    if (resumed && start_step > 0)
      printf("train: resuming %s after epoch %d and step %d of epoch %d\n", resumed_from,
             start_epoch, start_step, start_epoch + 1);
    else if (resumed)
      printf("train: resuming %s after epoch %d\n", resumed_from, start_epoch);
    fflush(stdout);
  }

  train_step_t step = {.model = model, .buckets = buckets, .size = size,
                       .predivide = o.predivide};
  int stopped_early = 0;
  double last_lr = nn_lr_at(&sched, start_epoch);
  for (int epoch = start_epoch; epoch < o.epochs && !stopped_early; epoch++) {
    int first = epoch == start_epoch ? start_step : 0;
    /* Time and metrics of the steps a mid-epoch checkpoint already took (rank 0 holds the
       sums over all ranks). */
    double t0 = util_now_s() - (first > 0 ? run.st[ST_EPOCH_SECONDS] : 0);
    double sums[3] = {0, 0, 0}; /* loss * n, correct, n (this rank) */
    if (first > 0 && rank == 0) {
      sums[0] = run.st[ST_EPOCH_LOSS_SUM];
      sums[1] = run.st[ST_EPOCH_CORRECT];
      sums[2] = run.st[ST_EPOCH_SAMPLES];
    }
    train_epoch_permutation(perm, train.n, o.seed, epoch);
    bo.epoch = epoch;
    train_progress_begin(&prog, epoch, o.epochs, steps);
    int window_total = 0;  /* samples of the current window over all ranks */
    for (int s = first; s < steps; s++) {
      if (kill_at >= 0 && rank == 0 && (long long)epoch * steps + s == kill_at) raise(SIGKILL);
      const int window = s / accum, window_start = window * accum;
      const int window_end = window_start + accum < steps ? window_start + accum : steps;
      const int last_pass = s + 1 == window_end;
      if (s == window_start) {
        window_total = 0;
        for (int k = window_start; k < window_end; k++)
          window_total += train_step_total(train.n, size, o.batch, k);
      }
      int offset = 0;
      int n = train_step_slice(train.n, rank, size, o.batch, s, &offset);
      if (n > 0) train_make_batch(&train, perm + offset, n, &bo, x, y);
      last_lr = nn_lr_at(&sched, epoch + (double)window_start / steps);
      int flags = TRAIN_STEP_FETCH_LOSS | (last_pass ? 0 : TRAIN_STEP_ACCUMULATE);
      if (train_step_run(&step, x, y, n, window_total, (float)last_lr, flags) != 0) {
        if (step.hvd_status != HVD_OK) hvd_check(step.hvd_status, step.failed);
        nn_check_model(step.nn_status, step.failed);
      }
      if (n > 0) {
        sums[0] += (double)step.loss * n;
        sums[1] += step.correct;
        sums[2] += n;
      }
      if (prog.tty && sums[2] > 0) {
        double el = util_now_s() - t0;
        train_progress_step(&prog, s + 1, sums[0] / sums[2], sums[1] / sums[2],
                            el > 0 ? sums[2] * size / el : 0);
      }
      /* Keras's update_freq: the epoch's running loss and accuracy over all ranks, at
         the global batch count (Keras's step for batch_* scalars). */
      long long global_batch = (long long)epoch * steps + s + 1;
      if (o.logdir && o.tb_update_freq > 0 && global_batch % o.tb_update_freq == 0) {
        double run_sums[3];
        hvd_check(hvd_allreduce("tb.batch.metrics", sums, run_sums, 3, HVD_FLOAT64, HVD_SUM),
                  "allreduce of metrics");
        if (rank == 0 && run_sums[2] > 0) {
          const double wall = train_wall_time();
          const float batch_loss = (float)(run_sums[0] / run_sums[2]);
          const float batch_acc = (float)(run_sums[1] / run_sums[2]);
          if (train_tfevents_scalar(&tb[TB_TRAIN], "batch_loss", batch_loss, global_batch,
                                    wall) != 0 ||
              train_tfevents_scalar(&tb[TB_TRAIN], "batch_accuracy", batch_acc, global_batch,
                                    wall) != 0)
            die("%s: write failed (%s)", tb[TB_TRAIN].path, strerror(errno));
        }
      }
      /* Mid-epoch checkpoints at a window's end, counted in optimizer steps. */
      long long global_step = (long long)epoch * windows + window + 1;
      if (last_pass && o.checkpoint_every_steps > 0 && s + 1 < steps &&
          global_step % o.checkpoint_every_steps == 0)
        save_mid_epoch(&run, rank, s + 1, steps, sums, util_now_s() - t0);
    }
    for (int k = ST_STEPS_DONE; k <= ST_EPOCH_SECONDS; k++) run.st[k] = 0; /* an epoch end */
    double train_s = util_now_s() - t0;
    hvd_check(hvd_allreduce("train.metrics", sums, sums, 3, HVD_FLOAT64, HVD_SUM),
              "allreduce of metrics");
    double loss = sums[2] > 0 ? sums[0] / sums[2] : 0, acc = sums[2] > 0 ? sums[1] / sums[2] : 0;
    double ips = train_s > 0 ? sums[2] / train_s : 0; /* all ranks together */
    /* Refresh the host mirror (weights, buffers, optimizer state) that the buffer
       average, best weights and checkpoints below read (on the CPU: nothing to do). */
    nn_check_model(nn_model_sync_to_host(model), "copying the model to the host");
    /* Batch-norm statistics drift apart on each rank's shard: average them so every
       rank (and every checkpoint) holds the same model. */
    if (nb > 0)
      hvd_check(hvd_allreduce("epoch.buffers", nn_model_buffers(model), nn_model_buffers(model),
                              nb, HVD_FLOAT32, HVD_AVERAGE), "allreduce of buffers");
    if (nb > 0)
      nn_check_model(nn_model_sync_to_device(model), "copying the averaged buffers to the GPU");
    if (ncounters > 0)
      hvd_check(hvd_allreduce("epoch.counters", nn_model_counters(model),
                              nn_model_counters(model), (size_t)ncounters, HVD_INT64, HVD_MAX),
                "allreduce of counters");
    eval_t v = evaluate(model, &val, &bo, o.batch, rank, size, x, y, idx, "val.metrics");
    double seconds = util_now_s() - t0;
    run.st[ST_EPOCHS_DONE] = epoch + 1;
    run.st[ST_TRAIN_SECONDS] += train_s;
    run.st[ST_TRAIN_IMAGES] += sums[2];
    if (v.acc > run.st[ST_BEST_VAL_ACC]) {
      run.st[ST_BEST_VAL_ACC] = v.acc;
      run.st[ST_BEST_VAL_ACC_EPOCH] = epoch;
    }
    double monitored = strcmp(o.monitor, "val_accuracy") == 0 ? v.acc : v.loss;
    int improved = 0;
    stopped_early = train_early_stopping_update(&es, monitored, epoch, &improved);
    if (improved && run.best_params) {
      memcpy(run.best_params, params, np * sizeof(float));
      memcpy(run.best_buffers, nn_model_buffers(model), nb * sizeof(float));
      run.st[ST_HAVE_BEST] = 1;
    }
    int ck_improved = train_monitor_update(&ckmon, monitored, epoch);
    run.st[ST_ES_BEST] = es.mon.best;
    run.st[ST_ES_BEST_EPOCH] = es.mon.best_epoch;
    run.st[ST_ES_WAIT] = es.wait;
    run.st[ST_CK_BEST] = ckmon.best;
    run.st[ST_CK_BEST_EPOCH] = ckmon.best_epoch;

    char note[4400] = "";
    /* fp16 on the GPU: where dynamic loss scaling stands (one wait for the GPU). */
    if (precision == NN_PRECISION_FP16) {
      float scale = 1.0f;
      int64_t skipped = 0;
      nn_check_model(nn_model_loss_scale(model, &scale, &skipped), "reading the loss scale");
      note_add(note, sizeof note, "loss_scale %g (%lld skipped steps)", (double)scale,
               (long long)skipped);
    }
    if (rank == 0) {
      if (o.checkpoint_dir) {
        char p[4200];
        snprintf(p, sizeof p, "%s/last.ckpt", o.checkpoint_dir);
        save_checkpoint(&run, p, NULL, NULL);
        if (o.save_best_only) {
          if (ck_improved) {
            snprintf(p, sizeof p, "%s/best.ckpt", o.checkpoint_dir);
            save_checkpoint(&run, p, NULL, NULL);
            note_add(note, sizeof note, "saved %s", p);
          }
        } else {
          snprintf(p, sizeof p, "%s/epoch-%03d.ckpt", o.checkpoint_dir, epoch + 1);
          save_checkpoint(&run, p, NULL, NULL);
          note_add(note, sizeof note, "saved %s", p);
        }
      }
      if (stopped_early) {
        note_add(note, sizeof note, "early stopping: no improvement of %s in %d epochs",
                 o.monitor, o.es_patience);
      }
      train_progress_end(&prog, loss, acc, v.loss, v.acc, last_lr, ips, seconds, note);
      /* A failed write (a full disk, a file-size limit) stops the run: the checkpoints
         of this epoch are already complete. */
      if (tb[TB_TRAIN].f) tb_epoch(tb, &o, model, epoch, loss, acc, &v, last_lr, ips);
      if (csv.f && train_csv_row(&csv, epoch + 1, loss, acc, v.loss, v.acc, last_lr, ips,
                                 seconds) != 0)
        die("%s: write failed (%s)", csv.path, strerror(errno));
    }
  }
  for (int i = 0; i < TB_RUNS; i++)
    if (tb[i].f && train_tfevents_close(&tb[i]) != 0)
      die("%s: write failed (%s)", tb[i].path, strerror(errno));
  if (csv.f && train_csv_close(&csv) != 0) die("%s: write failed (%s)", csv.path, strerror(errno));

  int restored = 0;
  if (run.best_params && run.st[ST_HAVE_BEST] != 0 &&
      (int)run.st[ST_ES_BEST_EPOCH] != (int)run.st[ST_EPOCHS_DONE] - 1) {
    memcpy(params, run.best_params, np * sizeof(float));
    memcpy(nn_model_buffers(model), run.best_buffers, nb * sizeof(float));
    restored = 1;
    nn_check_model(nn_model_sync_to_device(model), "copying the best weights to the GPU");
  }
  eval_t t = evaluate(model, &test, &bo, o.batch, rank, size, x, y, idx, "test.metrics");
  if (rank == 0) {
    if (o.export_path) {
      nn_check_model(nn_model_sync_to_host(model), "copying the model to the host");
      export_model(model, &o, &train, norm_mean, norm_std);
    }
    double secs = run.st[ST_TRAIN_SECONDS];
    double total_ips = secs > 0 ? run.st[ST_TRAIN_IMAGES] / secs : 0; /* all ranks */
    printf("---------------------------------------------------------------\n");
    printf("model %s, data set %s, %d rank(s), %d epoch(s)%s\n", o.model, o.dataset, size,
           (int)run.st[ST_EPOCHS_DONE], stopped_early ? " (stopped early)" : "");
    if (run.st[ST_BEST_VAL_ACC_EPOCH] >= 0)
      printf("best val_accuracy: %.2f%% at epoch %d\n", 100.0 * run.st[ST_BEST_VAL_ACC],
             (int)run.st[ST_BEST_VAL_ACC_EPOCH] + 1);
    if (restored)
      printf("restored the best weights of epoch %d (%s)\n", (int)run.st[ST_ES_BEST_EPOCH] + 1,
             o.monitor);
    printf("training time: %.1f s, images/sec: %.1f per rank, %.1f total\n", secs,
           total_ips / size, total_ips);
    hvd_grad_buckets_stats_t bs;
    hvd_grad_buckets_stats(buckets, &bs);
    if (bs.steps > 0 && size > 1)
      printf("gradient allreduce: %zu bucket(s) at parameter boundaries, the largest %.3g "
             "MiB, %.1f s in flight, %.1f s of it waited for after backward (%.0f%% "
             "overlapped)\n", hvd_grad_buckets_num(buckets), largest_bucket_mib(buckets),
             bs.comm_s, bs.blocked_s,
             bs.comm_s > 0 ? 100.0 * (1.0 - bs.blocked_s / bs.comm_s) : 0.0);
    if (o.export_path) printf("exported weights to %s\n", o.export_path);
    printf("test loss: %.4f\n", t.loss);
    printf("test accuracy: %.2f%%\n", 100.0 * t.acc);
    if (fflush(stdout) != 0 || ferror(stdout))
      die("standard output: write failed (%s)", strerror(errno));
  }
  hvd_grad_buckets_free(buckets);
  nn_model_free(model);
  free(run.best_params);
  free(run.best_buffers);
  free(x);
  free(y);
  free(perm);
  free(idx);
  train_dataset_free(&train);
  train_dataset_free(&test);
  if (!val_is_test) train_dataset_free(&val);
  hvd_check(hvd_shutdown(), "hvd_shutdown");
  return 0;
}
