/* train/progress.h: the per-epoch progress display of rank 0: a redrawn bar
   (steps, loss, accuracy, images/sec, ETA) when stdout is a terminal, else one plain
   line per epoch. */
#ifndef TRAIN_PROGRESS_H
#define TRAIN_PROGRESS_H

typedef struct {
  int tty;
  int enabled;
  int epoch, epochs, steps;
  double start, last_draw;
} train_progress_t;

/* launched: the process was started by mpirun/hvdrun (known before MPI_Init, which may
   set launcher variables even in a process started alone). */
void train_progress_init(train_progress_t *p, int enabled, int launched);
void train_progress_begin(train_progress_t *p, int epoch, int epochs, int steps);
/* After step (1-based) with running means so far; images_per_sec of all ranks. */
void train_progress_step(train_progress_t *p, int step, double loss, double acc,
                         double images_per_sec);
/* Ends the epoch with its full line. */
void train_progress_end(train_progress_t *p, double loss, double acc, double val_loss,
                        double val_acc, double lr, double images_per_sec, double seconds,
                        const char *note);
#endif /* TRAIN_PROGRESS_H */
