/* tests/test_train_tfevents.c: the TensorBoard event writer of build/train.
   CRC-32C against its published check value; a file of scalars written here is read
   back by tests/tfevents_reader.py (an independent reader in Python: both CRCs of every
   record, the Event and Summary fields), and the values it prints must be the ones
   written. The module is compiled into this test directly. */
#include "train/tfevents.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <math.h>

int main(void) {
  int failures = 0;
  /* The check value of CRC-32C ("123456789") is 0xE3069283. */
  uint32_t c = train_crc32c("123456789", 9);
  if (c != 0xE3069283u) {
    fprintf(stderr, "FAIL crc32c = %08x, expected e3069283\n", c);
    failures++;
  }
  if (access("/usr/bin/python3", X_OK) != 0) {
    printf("skipped: /usr/bin/python3 not found (needed for the reader)\n");
    return failures ? 1 : 77;
  }
  char dir[] = "/tmp/test_train_tfevents.XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char sub[256], err[512];
  snprintf(sub, sizeof sub, "%s/logs/run1", dir);
  train_tfevents_t w;
  if (train_tfevents_open(&w, sub, err, sizeof err) != 0) {
    fprintf(stderr, "FAIL open: %s\n", err);
    return 1;
  }
  const char *tags[] = {"loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
                        "images_per_sec"};
  for (int step = 1; step <= 3; step++)
    for (int t = 0; t < 6; t++)
      if (train_tfevents_scalar(&w, tags[t], 0.25f * t + step * 1000.0f, step, 1.7e9 + step) != 0) {
        fprintf(stderr, "FAIL write\n");
        failures++;
      }
  if (train_tfevents_close(&w) != 0) {
    fprintf(stderr, "FAIL close of a good event file failed\n");
    failures++;
  }

  /* A full device: a scalar's write (its flush) fails and says so. */
  train_tfevents_t full = {.f = fopen("/dev/full", "wb")};
  if (!full.f || train_tfevents_scalar(&full, "loss", 1.0f, 1, 1.7e9) == 0) {
    fprintf(stderr, "FAIL a scalar written to /dev/full did not fail\n");
    failures++;
  }
  train_tfevents_close(&full);

  char cmd[8192], out[256];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 tests/tfevents_reader.py %s --steps 3 --expect loss --expect "
           "accuracy --expect val_loss --expect val_accuracy --expect learning_rate --expect "
           "images_per_sec > %s/out.txt",
           w.path, dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL reader rejected %s\n", w.path);
    failures++;
  }
  snprintf(out, sizeof out, "%s/out.txt", dir);
  FILE *f = fopen(out, "r");
  int lines = 0;
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    int step;
    char tag[64];
    float v;
    if (sscanf(line, "%d %63s %f", &step, tag, &v) != 3) continue;
    int t = lines % 6;
    float want = 0.25f * t + step * 1000.0f;
    if (strcmp(tag, tags[t]) != 0 || step != lines / 6 + 1 || fabsf(v - want) > 1e-3f) {
      fprintf(stderr, "FAIL line %d: '%s' expected step %d %s %g\n", lines, line,
              lines / 6 + 1, tags[t], want);
      failures++;
    }
    lines++;
  }
  if (f) fclose(f);
  if (lines != 18) {
    fprintf(stderr, "FAIL reader printed %d scalars, expected 18\n", lines);
    failures++;
  }
  /* A flipped byte must be caught by the CRC. */
  f = fopen(w.path, "r+b");
  fseek(f, 40, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, 40, SEEK_SET);
  fputc(ch ^ 1, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/tfevents_reader.py %s > /dev/null", w.path);
  if (system(cmd) == 0) {
    fprintf(stderr, "FAIL reader accepted a corrupted file\n");
    failures++;
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) return 1;
  printf("tfevents: all checks passed\n");
  return 0;
}
