/* train/resume.c: the run's checkpoints: writing one, believing one only after checking
   every field against this run, and choosing which one to resume from (train/resume.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"
#include "train/replica.h"
#include "train/resume.h"

/* One warning line through the run's callback. */
static void say(const train_run_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const train_run_t *r, const char *fmt, ...) {
  if (!r->warn) return;
  char line[12288];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  r->warn(line);
}

static void checkpoint_meta(const train_run_t *r, char *buf, size_t len) {
  char settings[4096];
  train_flags_describe(r->o, r->ranks, settings, sizeof settings);
  snprintf(buf, len,
           "format=%s%d\n%sglobal_batch=%d\nlr_scale=%.17g\nepochs_done=%d\n"
           "steps_done=%d\nmodel_params=%zu\nmodel_buffers=%zu\ntrainable_from=%zu\n"
           "rng=stateless splitmix64 of (seed, epoch, sample)\n",
           TRAIN_CKPT_FORMAT_PREFIX, TRAIN_CKPT_FORMAT, settings, r->o->batch * r->ranks,
           r->lr_scale, (int)r->st[ST_EPOCHS_DONE], (int)r->st[ST_STEPS_DONE],
           nn_model_num_params(r->model),
           nn_model_num_buffers(r->model), nn_model_trainable_from(r->model));
}

int train_run_save(train_run_t *r, const char *path, const float *buffers,
                   const float *rank_buffers, char *err, size_t errlen) {
  r->st[ST_DROPOUT_STEP] = (double)nn_model_dropout_step(r->model);
  size_t optn = 0;
  float *opt = nn_model_optim_state(r->model, &optn);
  int ncounters = train_model_counters(r->model);
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
  char meta[8192];
  checkpoint_meta(r, meta, sizeof meta);
  return train_ckpt_write(path, meta, s, n, err, errlen) != 0 ? -1 : 0;
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

static int check_checkpoint(const train_run_t *r, const train_ckpt_t *c, const char *path, char *err,
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

int train_run_load(train_run_t *r, const char *path, int warn, char *err, size_t errlen) {
  const size_t own_from = nn_model_trainable_from(r->model); /* put back on failure */
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
  /* The frozen layers of the checkpoint's run (train --freeze, --unfreeze-at-epoch; none
     before this field): they size the optimizer state, and the run goes on with them. */
  const char *tf = train_ckpt_meta(&c, "trainable_from", v, sizeof v);
  size_t file_from = tf ? (size_t)strtoull(tf, NULL, 10) : 0;
  if (file_from != own_from) {
    if (nn_model_set_trainable_from(r->model, file_from) != NN_OK) {
      snprintf(err, errlen, "%s: its frozen layers: %s", path, nn_last_error());
      goto fail;
    }
    if (warn && !(file_from == 0 && r->o->unfreeze_at_epoch > 0)) /* else: phase two */
      say(r, "%s: resuming with the checkpoint's frozen layers (%s), not this run's "
          "--freeze", path, file_from ? "parameters below the first trainable layer" : "none");
  }
  size_t optn = 0;
  float *ostate = nn_model_optim_state(r->model, &optn);
  size_t np = nn_model_param_len(r->model), nb = nn_model_num_buffers(r->model);
  int ncounters = train_model_counters(r->model);
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
      say(r, "warning: %s has %s=%s, this run %s: the continuation is not exact", path,
          keys[i], va, vb);
  }
  train_ckpt_free(&c);
  return 0;
fail:
  train_ckpt_free(&c);
  if (nn_model_trainable_from(r->model) != own_from)
    (void)nn_model_set_trainable_from(r->model, own_from); /* a set it had: cannot fail */
  return -1;
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
static candidate_t *resume_candidates(const train_run_t *r, const char *dir, int *count,
                                      int *had_files, char *err, size_t errlen) {
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
      say(r, "--resume auto: passing over %s", why);
      continue;
    }
    const train_ckpt_section_t *s = train_ckpt_find(&ck, "state");
    if (s && s->nbytes >= ST_COUNT_V1 * sizeof(double)) {
      double st[ST_COUNT];
      ckpt_state(&ck, st);
      c[k++] = (candidate_t){files[i], st[ST_EPOCHS_DONE], st[ST_STEPS_DONE]};
    } else {
      say(r, "--resume auto: passing over %s: no training state in it", files[i].path);
    }
    train_ckpt_free(&ck);
  }
  free(files);
  qsort(c, (size_t)k, sizeof *c, candidate_order);
  *count = k;
  return c;
}

int train_resume_load(train_run_t *r, char *chosen, size_t chosen_len, char *err,
                      size_t errlen) {
  if (strcmp(r->o->resume, "auto") != 0) {
    if (train_run_load(r, r->o->resume, 1, err, errlen) != 0) return -1;
    snprintf(chosen, chosen_len, "%s", r->o->resume);
    return 1;
  }
  int n = 0;
  int had_files = 0;
  candidate_t *c = resume_candidates(r, r->o->checkpoint_dir, &n, &had_files, err, errlen);
  if (!c) return errno == ENOENT ? 0 : -1;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (train_run_load(r, c[i].file.path, 1, err, errlen) == 0) {
      snprintf(chosen, chosen_len, "%s", c[i].file.path);
      rc = 1;
    } else {
      say(r, "--resume auto: passing over %s", err);
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

void train_resume_plan_batch(train_opts_t *o, train_run_t *r, int size, char *note,
                             size_t notelen) {
  long global = (long)r->ranks_in_file * r->batch_in_file;
  int batch = (int)((global + size / 2) / size);
  if (batch < 1) batch = 1;
  r->lr_scale = r->lr_scale_in_file * (double)((long)batch * size) / (double)global;
  note[0] = '\0';
  if (batch != o->batch || r->ranks_in_file != size) {
    if ((long)batch * size == global)
      snprintf(note, notelen, "resuming on %d rank(s), the checkpoint's run had %d: batch %d per rank "
             "keeps the global batch %ld and the lr schedule (lr %.5g x %g)",
             size, r->ranks_in_file, batch, global, o->lr, r->lr_scale);
    else
      snprintf(note, notelen, "resuming on %d rank(s), the checkpoint's run had %d: its global batch "
             "%ld does not split evenly; batch %d per rank, global batch %ld, lr %.5g x %g "
             "(was x %g)",
             size, r->ranks_in_file, global, batch, (long)batch * size, o->lr, r->lr_scale,
             r->lr_scale_in_file);
  }
  o->batch = batch;
}
