/* train/callbacks.h: Keras-style callbacks of the train program, as plain
   state machines the loop calls at epoch ends: a monitor of the best value (shared by
   EarlyStopping and ModelCheckpoint's save_best_only), EarlyStopping, and a CSV log. */
#ifndef TRAIN_CALLBACKS_H
#define TRAIN_CALLBACKS_H

#include <stdio.h>

/* Best value of val_loss (lower is better) or val_accuracy (higher is better). */
typedef struct {
  int higher_is_better;
  double min_delta;
  double best;                 /* +-inf before the first epoch */
  int best_epoch;              /* 0-based; -1 before the first epoch */
} train_monitor_t;

void train_monitor_init(train_monitor_t *m, const char *monitor, double min_delta);
/* Records the value of epoch; returns 1 when it improved on the best by more than
   min_delta (Keras: current - min_delta > best, or current + min_delta < best). */
int train_monitor_update(train_monitor_t *m, double value, int epoch);

/* EarlyStopping(monitor, min_delta, patience): stop once `patience` epochs in a row
   brought no improvement. */
typedef struct {
  train_monitor_t mon;
  int patience;                /* 0: never stop */
  int wait;
  int stopped_epoch;           /* -1 while training goes on */
} train_early_stopping_t;

void train_early_stopping_init(train_early_stopping_t *e, const char *monitor,
                               double min_delta, int patience);
/* Returns 1 when training should stop after this epoch; *improved tells whether the
   epoch is the new best. */
int train_early_stopping_update(train_early_stopping_t *e, double value, int epoch,
                                int *improved);

/* CSVLogger: epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,images_per_sec,
   seconds. append keeps the rows of an earlier (resumed) run.
   Every call returns 0, or -1 with errno set (a failed write, flush or close: a full
   disk must not pass unnoticed); after a failed open nothing is left open. */
typedef struct {
  FILE *f;
  char path[4200];
} train_csv_t;
int train_csv_open(train_csv_t *c, const char *path, int append);
/* Writes and flushes one row (a no-op returning 0 when the log is not open). */
int train_csv_row(train_csv_t *c, int epoch, double loss, double acc, double val_loss,
                  double val_acc, double lr, double images_per_sec, double seconds);
int train_csv_close(train_csv_t *c);

#endif /* TRAIN_CALLBACKS_H */
