/* train/progress.c: progress bar (terminal) or plain lines (pipes, logs). */
#include "train/progress.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under mpirun a rank's stdout is often a pseudo-terminal of the launcher even when the
   launcher's own output goes to a pipe or file; then the parent's stdout decides. */
static int stdout_is_terminal(int launched) {
  if (!isatty(STDOUT_FILENO)) return 0;
  if (!launched) return 1;
  char link[64], target[256];
  snprintf(link, sizeof link, "/proc/%d/fd/1", (int)getppid());
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return 1;
  target[n] = '\0';
  return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
}

void train_progress_init(train_progress_t *p, int enabled, int launched) {
  p->enabled = enabled;
  p->tty = enabled && stdout_is_terminal(launched);
}

void train_progress_begin(train_progress_t *p, int epoch, int epochs, int steps) {
  p->epoch = epoch;
  p->epochs = epochs;
  p->steps = steps;
  p->start = util_now_s();
  p->last_draw = 0;
}

void train_progress_step(train_progress_t *p, int step, double loss, double acc,
                         double images_per_sec) {
  if (!p->tty) return;
  double now = util_now_s();
  /* Redraw at most 10 times a second: a terminal is slow next to a training step. */
  if (step < p->steps && now - p->last_draw < 0.1) return;
  p->last_draw = now;
  const int width = 30;
  int fill = p->steps > 0 ? (int)((long long)width * step / p->steps) : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : '.');
  bar[width] = '\0';
  double elapsed = now - p->start;
  double eta = step > 0 ? elapsed / step * (p->steps - step) : 0;
  printf("\rEpoch %d/%d [%s] %d/%d - loss %.4f - acc %.4f - %.0f img/s - ETA %.0fs \033[K",
         p->epoch + 1, p->epochs, bar, step, p->steps, loss, acc, images_per_sec, eta);
  fflush(stdout);
}

void train_progress_end(train_progress_t *p, double loss, double acc, double val_loss,
                        double val_acc, double lr, double images_per_sec, double seconds,
                        const char *note) {
  if (!p->enabled) return;
  if (p->tty) printf("\r\033[K");
  printf("Epoch %d/%d: %d steps, %.1fs - loss %.4f - accuracy %.4f - val_loss %.4f - "
         "val_accuracy %.4f - lr %.5g - %.0f img/s%s%s\n",
         p->epoch + 1, p->epochs, p->steps, seconds, loss, acc, val_loss, val_acc, lr,
         images_per_sec, note && *note ? " - " : "", note ? note : "");
  fflush(stdout);
}
