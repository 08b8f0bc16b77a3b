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

  /* One rank alone always agrees. */
  CHECK(compare(1, err, sizeof err) == 0, "one rank: %s", err);
  if (failures) return 1;
  printf("agree: all checks passed\n");
  return 0;
}
