/* tests/test_train_callbacks.c: Keras semantics of the train program's callbacks.
   EarlyStopping on val_loss and val_accuracy with min_delta and patience (the epoch it
   stops at, the best epoch), and the CSV log's header and append behaviour. The module
   is compiled into this test directly. */
#include "train/callbacks.h"
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/check.h"

/* Feeds values until the callback says stop; returns the epoch it stopped at or -1. */
static int run(const char *monitor, double min_delta, int patience, const double *v, int n,
               int *best_epoch) {
  train_early_stopping_t e;
  train_early_stopping_init(&e, monitor, min_delta, patience);
  for (int i = 0; i < n; i++) {
    int improved;
    if (train_early_stopping_update(&e, v[i], i, &improved)) {
      *best_epoch = e.mon.best_epoch;
      return i;
    }
  }
  *best_epoch = e.mon.best_epoch;
  return -1;
}

int main(void) {
  int best;
  const double loss[] = {1.0, 0.8, 0.79, 0.795, 0.7, 0.71, 0.72, 0.73};
  /* min_delta 0: 0.79 improves; patience 2 stops after 0.71, 0.72 (epoch 6), best 4 */
  CHECK(run("val_loss", 0.0, 2, loss, 8, &best) == 6 && best == 4, "val_loss p2 best %d", best);
  /* min_delta 0.05: 0.79 and 0.795 do not count; stops at epoch 3, best epoch 1 */
  CHECK(run("val_loss", 0.05, 2, loss, 8, &best) == 3 && best == 1, "val_loss md best %d", best);
  /* patience 0: never stops */
  CHECK(run("val_loss", 0.0, 0, loss, 8, &best) == -1 && best == 4, "patience 0");
  const double acc[] = {0.5, 0.6, 0.6, 0.65, 0.64, 0.63, 0.9};
  /* higher is better, equal is no improvement: with patience 3 the waits at epochs 4, 5
     (and 2) never reach 3 in a row, and 0.9 at epoch 6 is the best */
  CHECK(run("val_accuracy", 0.0, 3, acc, 7, &best) == -1 && best == 6, "acc best %d", best);
  CHECK(run("val_accuracy", 0.0, 2, acc, 7, &best) == 5 && best == 3, "acc p2 best %d", best);
  /* --monitor val_accuracy --min-delta 0.01: a gain must exceed 0.01 (Keras: current -
     min_delta > best). 0.505 and 0.509 are within it of 0.5, so patience 2 stops at epoch
     2 with the best at epoch 0; with the sign flipped (current + min_delta > best) every
     epoch would count as a gain and training would never stop. */
  const double acc_md[] = {0.5, 0.505, 0.509, 0.52, 0.525, 0.515};
  CHECK(run("val_accuracy", 0.01, 2, acc_md, 6, &best) == 2 && best == 0,
        "acc min_delta 0.01 p2: best %d", best);
  /* A gain of more than min_delta counts: 0.52 over 0.5 is the new best, 0.525 is not. */
  train_monitor_t mon;
  train_monitor_init(&mon, "val_accuracy", 0.01);
  int gains[4];
  const double acc_gain[] = {0.5, 0.52, 0.525, 0.531};
  for (int i = 0; i < 4; i++) gains[i] = train_monitor_update(&mon, acc_gain[i], i);
  CHECK(gains[0] && gains[1] && !gains[2] && gains[3] && mon.best_epoch == 3,
        "acc monitor min_delta 0.01: gains %d %d %d %d, best epoch %d", gains[0], gains[1],
        gains[2], gains[3], mon.best_epoch);

  char path[] = "/tmp/test_train_callbacks.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  train_csv_t c;
  CHECK(train_csv_open(&c, path, 0) == 0, "csv open");
  train_csv_row(&c, 1, 0.5, 0.8, 0.4, 0.85, 0.01, 1000, 2.5);
  train_csv_close(&c);
  CHECK(train_csv_open(&c, path, 1) == 0, "csv append");
  train_csv_row(&c, 2, 0.25, 0.9, 0.3, 0.875, 0.01, 1000, 2.5);
  train_csv_close(&c);
  FILE *f = fopen(path, "r");
  char line[256];
  int lines = 0, headers = 0;
  while (f && fgets(line, sizeof line, f)) {
    lines++;
    if (strncmp(line, "epoch,", 6) == 0) headers++;
    if (lines == 3) CHECK(strncmp(line, "2,0.250000,0.900000,0.300000,0.875000,", 38) == 0, "row '%s'", line);
  }
  if (f) fclose(f);
  CHECK(lines == 3 && headers == 1, "csv has %d lines, %d headers", lines, headers);
  unlink(path);

  /* A full device: the header's flush fails, and the open says so (nothing left open). */
  errno = 0;
  CHECK(train_csv_open(&c, "/dev/full", 0) != 0 && errno == ENOSPC && c.f == NULL,
        "csv open on /dev/full did not fail with ENOSPC (errno %d)", errno);
  /* A row that cannot be written fails too (log opened, then its stream swapped). */
  CHECK(train_csv_open(&c, "/dev/null", 0) == 0, "csv open /dev/null");
  fclose(c.f);
  c.f = fopen("/dev/full", "w");
  CHECK(c.f && train_csv_row(&c, 1, 0.5, 0.8, 0.4, 0.85, 0.01, 1000, 2.5) != 0,
        "csv row on /dev/full did not fail");
  train_csv_close(&c);
  if (failures) return 1;
  printf("callbacks: all checks passed\n");
  return 0;
}
