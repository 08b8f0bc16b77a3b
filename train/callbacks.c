/* train/callbacks.c: monitor, EarlyStopping and CSV log (see the header). */
#include "train/callbacks.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

void train_monitor_init(train_monitor_t *m, const char *monitor, double min_delta) {
  m->higher_is_better = strstr(monitor, "acc") != NULL;
  m->min_delta = fabs(min_delta);
  m->best = m->higher_is_better ? -INFINITY : INFINITY;
  m->best_epoch = -1;
}

int train_monitor_update(train_monitor_t *m, double value, int epoch) {
  int better = m->higher_is_better ? value - m->min_delta > m->best
                                   : value + m->min_delta < m->best;
  if (better) {
    m->best = value;
    m->best_epoch = epoch;
  }
  return better;
}

void train_early_stopping_init(train_early_stopping_t *e, const char *monitor,
                               double min_delta, int patience) {
  train_monitor_init(&e->mon, monitor, min_delta);
  e->patience = patience;
  e->wait = 0;
  e->stopped_epoch = -1;
}

int train_early_stopping_update(train_early_stopping_t *e, double value, int epoch,
                                int *improved) {
  *improved = train_monitor_update(&e->mon, value, epoch);
  if (*improved) {
    e->wait = 0;
    return 0;
  }
  e->wait++;
  if (e->patience > 0 && e->wait >= e->patience) {
    e->stopped_epoch = epoch;
    return 1;
  }
  return 0;
}

int train_csv_open(train_csv_t *c, const char *path, int append) {
  memset(c, 0, sizeof *c);
  snprintf(c->path, sizeof c->path, "%s", path);
  struct stat st;
  int had_rows = append && stat(path, &st) == 0 && st.st_size > 0;
  c->f = fopen(path, append ? "a" : "w");
  if (!c->f) return -1;
  if ((!had_rows && fprintf(c->f, "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,"
                                  "images_per_sec,seconds\n") < 0) ||
      fflush(c->f) != 0) {
    int e = errno;
    fclose(c->f);
    c->f = NULL;
    errno = e;
    return -1;
  }
  return 0;
}

int train_csv_row(train_csv_t *c, int epoch, double loss, double acc, double val_loss,
                  double val_acc, double lr, double images_per_sec, double seconds) {
  if (!c->f) return 0;
  if (fprintf(c->f, "%d,%.6f,%.6f,%.6f,%.6f,%.8g,%.2f,%.3f\n", epoch, loss, acc, val_loss,
              val_acc, lr, images_per_sec, seconds) < 0 ||
      fflush(c->f) != 0)
    return -1;
  return 0;
}

int train_csv_close(train_csv_t *c) {
  if (!c->f) return 0;
  int bad = ferror(c->f);
  int rc = fclose(c->f);
  c->f = NULL;
  if (bad && rc == 0) errno = EIO;
  return bad || rc != 0 ? -1 : 0;
}
