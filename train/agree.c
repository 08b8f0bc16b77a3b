/* train/agree.c: the settings every rank must share (see the header). */
#include "train/agree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *buf;
  size_t len;
} out_t;

static void line(out_t *out, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void line(out_t *out, const char *name, const char *fmt, ...) {
  if (out->len >= TRAIN_AGREE_LEN - 1) return;
  int k = snprintf(out->buf + out->len, TRAIN_AGREE_LEN - out->len, "%s\t", name);
  if (k < 0) return;
  out->len += (size_t)k;
  if (out->len >= TRAIN_AGREE_LEN - 1) return;
  va_list ap;
  va_start(ap, fmt);
  k = vsnprintf(out->buf + out->len, TRAIN_AGREE_LEN - out->len, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  out->len += (size_t)k;
  if (out->len < TRAIN_AGREE_LEN - 1) out->buf[out->len++] = '\n';
}

static const char *yes_no(int v) { return v ? "yes" : "no"; }

/* A float flag as the user would write it: the shortest decimal that reads back as f
   (0.02f is "0.02", not "0.0199999996"). */
static void line_float(out_t *out, const char *name, float f) {
  char v[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(v, sizeof v, "%.*g", p, (double)f);
    if (strtof(v, NULL) == f) break;
  }
  line(out, name, "%s", v);
}

void train_agree_describe(const train_opts_t *o, const train_agree_data_t *d,
                          char buf[TRAIN_AGREE_LEN]) {
  memset(buf, 0, TRAIN_AGREE_LEN);
  out_t out = {buf, 0};
  /* What the model, the data order and the steps per epoch depend on. */
  line(&out, "--model", "%s", o->model);
  line(&out, "--dataset", "%s", o->dataset);
  line(&out, "--epochs", "%d", o->epochs);
  line(&out, "--batch-size", "%d", o->batch);
  line(&out, "--batches-per-allreduce", "%d", o->batches_per_allreduce);
  line(&out, "--seed", "%llu", (unsigned long long)o->seed);
  line_float(&out, "--validation-split", o->validation_split);
  line(&out, "--max-train", "%d", o->max_train);
  line(&out, "--max-test", "%d", o->max_test);
  line(&out, "--synthetic-samples", "%d", o->synthetic_samples);
  line(&out, "--augment", "%s", yes_no(o->augment));
  line(&out, "--crop-pad", "%d", o->crop_pad);
  /* Image files: what a batch holds. Not --data-threads or --prefetch (only speed: the
     batches are the same for any value, and hosts may have other numbers of cores), nor
     --data-dir (each host may hold its copy elsewhere; the sets' sizes are compared). */
  line(&out, "--image-size", "%d", o->image_size);
  line(&out, "--channels", "%d", o->channels);
  line(&out, "--skip-bad-images", "%s", yes_no(o->skip_bad_images));
  /* The optimizer and its schedule: every rank takes the same step. */
  line(&out, "--optimizer", "%s", o->optimizer);
  line_float(&out, "--lr", o->lr);
  line(&out, "--lr-scaling", "%s", yes_no(o->lr_scaling));
  line_float(&out, "--momentum", o->momentum);
  line(&out, "--nesterov", "%s", yes_no(o->nesterov));
  line_float(&out, "--weight-decay", o->weight_decay);
  line_float(&out, "--warmup-epochs", o->warmup_epochs);
  line(&out, "--lr-schedule", "%s", o->lr_schedule);
  line_float(&out, "--lr-step-epochs", o->lr_step_epochs);
  line_float(&out, "--lr-gamma", o->lr_gamma);
  line_float(&out, "--min-lr", o->min_lr);
  /* The gradient allreduces: the same buckets, compression and division everywhere. */
  line_float(&out, "--bucket-mb", o->bucket_mb);
  line(&out, "--fp16-allreduce", "%s", yes_no(o->fp16_allreduce));
  line_float(&out, "--gradient-predivide-factor", o->predivide);
  line(&out, "--device", "%s", o->device);
  line(&out, "--use-fp16", "%s", yes_no(o->use_fp16));
  line(&out, "--use-bf16", "%s", yes_no(o->use_bf16));
  line(&out, "--channels-last", "%s", yes_no(o->channels_last));
  /* Callbacks every rank follows (early stopping ends the loop on all of them), and the
     collectives that only some flags bring (mid-epoch checkpoints, batch scalars, the
     resume broadcast). */
  line(&out, "--early-stopping-patience", "%d", o->es_patience);
  line_float(&out, "--min-delta", o->min_delta);
  line(&out, "--monitor", "%s", o->monitor);
  line(&out, "--restore-best-weights", "%s", yes_no(o->restore_best));
  line(&out, "--checkpoint-every-steps", "%d", o->checkpoint_every_steps);
  line(&out, "--tensorboard-update-freq", "%d", o->tb_update_freq);
  line(&out, "--histogram-freq", "%d", o->histogram_freq);
  line(&out, "--resume", "%s", o->resume ? "given" : "not given");
  /* What each rank loaded from its own disk. */
  line(&out, "the training set's size", "%d samples", d->train);
  line(&out, "the validation set's size", "%d samples", d->val);
  line(&out, "the test set's size", "%d samples", d->test);
}

/* The next "NAME\tVALUE" line at *p (advanced past it): 1, or 0 at the end. */
static int next_line(const char **p, const char *end, const char **name, size_t *name_len,
                     const char **value, size_t *value_len) {
  if (*p >= end || **p == '\0') return 0;
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (!nl) nl = *p + strnlen(*p, (size_t)(end - *p));
  const char *tab = memchr(*p, '\t', (size_t)(nl - *p));
  *name = *p;
  *name_len = tab ? (size_t)(tab - *p) : (size_t)(nl - *p);
  *value = tab ? tab + 1 : nl;
  *value_len = (size_t)(nl - *value);
  *p = nl < end && *nl == '\n' ? nl + 1 : nl;
  return 1;
}

int train_agree_compare(const char *all, int nranks, char *err, size_t errlen) {
  for (int r = 1; r < nranks; r++) {
    const char *mine = all + (size_t)r * TRAIN_AGREE_LEN;
    if (memcmp(all, mine, TRAIN_AGREE_LEN) == 0) continue;
    const char *p0 = all, *pr = mine;
    const char *e0 = all + TRAIN_AGREE_LEN, *er = mine + TRAIN_AGREE_LEN;
    const char *n0, *v0, *nr, *vr;
    size_t nl0, vl0, nlr, vlr;
    for (;;) {
      int more0 = next_line(&p0, e0, &n0, &nl0, &v0, &vl0);
      int morer = next_line(&pr, er, &nr, &nlr, &vr, &vlr);
      if (!more0 && !morer) break;
      if (!more0 || !morer || nl0 != nlr || memcmp(n0, nr, nl0) != 0) {
        /* Another list of settings: not the same train program on every rank. */
        snprintf(err, errlen, "the ranks run different train programs (rank 0 and rank %d "
                 "compare different settings): start every rank with the same build", r);
        return -1;
      }
      if (vl0 != vlr || memcmp(v0, vr, vl0) != 0) {
        snprintf(err, errlen, "%.*s differs between the ranks: %.*s on rank 0, %.*s on rank "
                 "%d (every rank must be started with the same training flags and data)",
                 (int)nl0, n0, (int)vl0, v0, (int)vlr, vr, r);
        return -1;
      }
    }
  }
  return 0;
}
