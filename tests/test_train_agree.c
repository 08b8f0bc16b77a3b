/* tests/test_train_agree.c: the settings train compares across ranks at start
   (train/agree.h): equal descriptions pass; a flag that differs on any rank gives one line
   naming the flag, rank 0's value and the lowest other rank's value, written as the user
   would write it; flags that may differ (--threads, --quiet, --export) pass; the data
   sets' sizes are compared too. */
#include "train/agree.h"

#include <string.h>

#include "tests/check.h"

static char all[4 * TRAIN_AGREE_LEN];
static const train_agree_data_t data = {54000, 6000, 10000};

/* Describes o on rank r of the gathered buffer. */
static void put(int r, const train_opts_t *o, const train_agree_data_t *d) {
  train_agree_describe(o, d, all + (size_t)r * TRAIN_AGREE_LEN);
}

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Compares n ranks; the message in err (empty when they agree). */
static int compare(int n, char *err, size_t len) {
  err[0] = '\0';
  return train_agree_compare(all, n, err, len);
}

/* How to give a flag another value: a yes/no flag is flipped (1 -> 2 would still read
   "yes"), a number changed, a name or path replaced. */
typedef enum { KIND_INT, KIND_BOOL, KIND_FLOAT, KIND_U64, KIND_NAME, KIND_PTR } kind_t;

typedef struct {
  const char *flag;
  kind_t kind;
  size_t offset;
} flag_t;

#define F(flag, kind, field) {flag, kind, offsetof(train_opts_t, field)}
static const flag_t FLAGS[] = {
    F("--model", KIND_NAME, model),
    F("--dataset", KIND_NAME, dataset),
    F("--epochs", KIND_INT, epochs),
    F("--batch-size", KIND_INT, batch),
    F("--batches-per-allreduce", KIND_INT, batches_per_allreduce),
    F("--seed", KIND_U64, seed),
    F("--validation-split", KIND_FLOAT, validation_split),
    F("--max-train", KIND_INT, max_train),
    F("--max-test", KIND_INT, max_test),
    F("--synthetic-samples", KIND_INT, synthetic_samples),
    F("--augment", KIND_BOOL, augment),
    F("--crop-pad", KIND_INT, crop_pad),
    F("--image-size", KIND_INT, image_size),
    F("--channels", KIND_INT, channels),
    F("--skip-bad-images", KIND_BOOL, skip_bad_images),
    F("--optimizer", KIND_NAME, optimizer),
    F("--lr", KIND_FLOAT, lr),
    F("--lr-scaling", KIND_BOOL, lr_scaling),
    F("--momentum", KIND_FLOAT, momentum),
    F("--nesterov", KIND_BOOL, nesterov),
    F("--weight-decay", KIND_FLOAT, weight_decay),
    F("--warmup-epochs", KIND_FLOAT, warmup_epochs),
    F("--lr-schedule", KIND_NAME, lr_schedule),
    F("--lr-step-epochs", KIND_FLOAT, lr_step_epochs),
    F("--lr-gamma", KIND_FLOAT, lr_gamma),
    F("--min-lr", KIND_FLOAT, min_lr),
    F("--bucket-mb", KIND_FLOAT, bucket_mb),
    F("--fp16-allreduce", KIND_BOOL, fp16_allreduce),
    F("--gradient-predivide-factor", KIND_FLOAT, predivide),
    F("--device", KIND_NAME, device),
    F("--use-fp16", KIND_BOOL, use_fp16),
    F("--use-bf16", KIND_BOOL, use_bf16),
    F("--channels-last", KIND_BOOL, channels_last),
    F("--early-stopping-patience", KIND_INT, es_patience),
    F("--min-delta", KIND_FLOAT, min_delta),
    F("--monitor", KIND_NAME, monitor),
    F("--restore-best-weights", KIND_BOOL, restore_best),
    F("--checkpoint-every-steps", KIND_INT, checkpoint_every_steps),
    F("--tensorboard-update-freq", KIND_INT, tb_update_freq),
    F("--histogram-freq", KIND_INT, histogram_freq),
    F("--resume", KIND_PTR, resume),
};
#undef F
#define NFLAGS (sizeof FLAGS / sizeof FLAGS[0])

/* o with f given another value than it has. */
static void change(train_opts_t *o, const flag_t *f) {
  char *p = (char *)o + f->offset;
  switch (f->kind) {
    case KIND_INT: *(int *)p += 1; break;
    case KIND_BOOL: *(int *)p = !*(int *)p; break;
    case KIND_FLOAT: *(float *)p = *(float *)p * 2.0f + 0.5f; break;
    case KIND_U64: *(uint64_t *)p += 1; break;
    case KIND_NAME: strcpy(p, strcmp(p, "other") != 0 ? "other" : "another"); break;
    case KIND_PTR: *(const char **)p = *(const char **)p ? NULL : "auto"; break;
  }
}

/* Each flag of the table, alone different on rank 1 of 2: reported, naming it. */
static void check_every_flag(const train_opts_t *a) {
  char err[1024];
  for (size_t i = 0; i < NFLAGS; i++) {
    train_opts_t b = *a;
    change(&b, &FLAGS[i]);
    put(0, a, &data);
    put(1, &b, &data);
    char want[96];
    snprintf(want, sizeof want, "%s differs between the ranks: ", FLAGS[i].flag);
    CHECK(compare(2, err, sizeof err) == -1 && starts(err, want),
          "ranks differing only in %s: '%s' (is it still in train_agree_describe?)",
          FLAGS[i].flag, err);
  }
}

/* Every setting the description names is a flag of the table or a data set's size. */
static void check_table_covers_description(const train_opts_t *a) {
  char buf[TRAIN_AGREE_LEN];
  train_agree_describe(a, &data, buf);
  size_t lines = 0;
  for (const char *p = buf; *p;) {
    const char *tab = strchr(p, '\t'), *nl = strchr(p, '\n');
    if (!tab || !nl || tab > nl) {
      CHECK(0, "a description line without NAME<TAB>VALUE: '%.40s'", p);
      return;
    }
    size_t n = (size_t)(tab - p), found = 0;
    for (size_t i = 0; i < NFLAGS; i++)
      if (strlen(FLAGS[i].flag) == n && strncmp(FLAGS[i].flag, p, n) == 0) found = 1;
    CHECK(found || strncmp(p, "the ", 4) == 0,
          "the description compares %.*s, which the table of this test lacks: add it",
          (int)n, p);
    lines++;
    p = nl + 1;
  }
  CHECK(lines == NFLAGS + 3, "the description has %zu lines, the table %zu flags + 3 sizes",
        lines, NFLAGS);
}

int main(void) {
  train_opts_t a, b;
  train_flags_defaults(&a);
  a.lr = 0.01f;
  char err[1024];

  /* Alike on 4 ranks, also with the per-host and rank-0-only flags set differently. */
  b = a;
  b.threads = 3;
  b.quiet = 1;
  b.export_path = "/tmp/w.safetensors";
  b.data_dir = "/elsewhere";
  for (int r = 0; r < 4; r++) put(r, r == 2 ? &b : &a, &data);
  CHECK(compare(4, err, sizeof err) == 0, "ranks alike but for --threads etc.: %s", err);

  /* The MPMD case: --batch-size 16 on rank 0, 1500 on rank 1. */
  b = a;
  a.batch = 16;
  b.batch = 1500;
  put(0, &a, &data);
  put(1, &b, &data);
  CHECK(compare(2, err, sizeof err) == -1 &&
            strcmp(err, "--batch-size differs between the ranks: 16 on rank 0, 1500 on rank 1 "
                        "(every rank must be started with the same training flags and data)") == 0,
        "batch 16 vs 1500: '%s'", err);
  a.batch = b.batch = 64;

  /* The lowest rank that differs is named; a float as written (0.02, not 0.0199999996). */
  b = a;
  b.lr = 0.02f;
  put(0, &a, &data);
  put(1, &a, &data);
  put(2, &b, &data);
  put(3, &b, &data);
  CHECK(compare(4, err, sizeof err) == -1 &&
            starts(err, "--lr differs between the ranks: 0.01 on rank 0, 0.02 on rank 2 "),
        "lr on ranks 2 and 3: '%s'", err);

  /* The first setting that differs, in the description's order. */
  b = a;
  strcpy(b.optimizer, "adam");
  b.nesterov = 1;
  put(1, &b, &data);
  CHECK(compare(2, err, sizeof err) == -1 &&
            starts(err, "--optimizer differs between the ranks: sgd on rank 0, adam on rank 1"),
        "optimizer: '%s'", err);
  b = a;
  b.nesterov = 1;
  put(1, &b, &data);
  CHECK(compare(2, err, sizeof err) == -1 &&
            starts(err, "--nesterov differs between the ranks: no on rank 0, yes on rank 1"),
        "nesterov: '%s'", err);
  b = a;
  b.resume = "auto";
  put(1, &b, &data);
  CHECK(compare(2, err, sizeof err) == -1 &&
            starts(err, "--resume differs between the ranks: not given on rank 0, given on rank 1"),
        "resume: '%s'", err);

  /* Same flags, another data set on one host's disk. */
  train_agree_data_t other = data;
  other.train = 50000;
  put(1, &a, &other);
  CHECK(compare(2, err, sizeof err) == -1 &&
            starts(err, "the training set's size differs between the ranks: 54000 samples on "
                        "rank 0, 50000 samples on rank 1"),
        "training set size: '%s'", err);

  check_every_flag(&a);
  check_table_covers_description(&a);

  /* One rank alone always agrees. */
  CHECK(compare(1, err, sizeof err) == 0, "one rank: %s", err);
  if (failures) return 1;
  printf("agree: all checks passed\n");
  return 0;
}
