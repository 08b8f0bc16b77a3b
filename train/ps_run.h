/* train/ps_run.h: the train program's parameter-server phases (--variable-update ps-sync
   | ps-async), over train/ps_update.h: the flags' checks, who trains on the data, the
   servers' start over the replica, each epoch's end (every rank takes the first worker's
   weights; the shards' optimizer state for a checkpoint), and the end (the servers'
   traffic and staleness, summed over the ranks). Nothing here prints or exits: a
   failure returns -1 and fills a train_ps_run_err_t for the program to report. */
#ifndef TRAIN_PS_RUN_H
#define TRAIN_PS_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "hvd/hvd.h"
#include "nn/nn.h"
#include "train/flags.h"
#include "train/ps_update.h"
#include "train/tfevents.h"

typedef struct {
  int status;           /* the exit status the program should end with (2: a usage mistake) */
  hvd_status_t hvd;     /* a runtime call failed: this, what names it (err unused) */
  const char *what;
  char err[8192];       /* else the message */
} train_ps_run_err_t;

/* Whether o asks for parameter servers (--variable-update other than horovod). */
int train_ps_run_enabled(const train_opts_t *o);

/* Flag combinations the servers cannot run, found before any data is loaded. */
int train_ps_run_check_flags(const train_opts_t *o, train_ps_run_err_t *e);

/* Who trains on the data: with parameter servers the workers (ranks num_ps..size-1: data
   rank rank - num_ps of size - num_ps; -1 on a dedicated server, which takes no samples),
   else every rank (rank of size). */
int train_ps_run_data_ranks(const train_opts_t *o, int rank, int size, int *data_rank,
                            int *data_size, train_ps_run_err_t *e);

/* Where the run stands when the servers start (a resumed one included). */
typedef struct {
  nn_optim_config_t optim;
  nn_lr_schedule_t sched;
  int steps, accum, windows;         /* per epoch */
  int start_epoch, start_step;
} train_ps_run_start_t;

/* Collective: the servers over m as every rank holds it now; *out NULL without them. */
int train_ps_run_start(train_ps_t **out, const train_opts_t *o, nn_model_t *m,
                       const train_ps_run_start_t *at, train_ps_run_err_t *e);

/* Collective, at an epoch's end: every rank takes the first worker's weights and buffers
   (a dedicated server has none of its own; async workers differ), and, when
   gather_state, the shards' optimizer state (for a checkpoint). */
int train_ps_run_epoch_end(train_ps_t *ps, nn_model_t *m, int gather_state, int rank,
                           train_ps_run_err_t *e);

/* The servers' figures over every rank. */
typedef struct {
  int64_t staleness[HVD_PS_STALENESS_BINS];  /* pushes by staleness */
  int64_t pushes, most;                      /* the largest staleness */
  int64_t bytes_in, bytes_out;               /* through the servers' links */
  int64_t busiest;                           /* the busiest server's in + out */
} train_ps_run_report_t;

/* Collective, after the last epoch: finishes and frees ps, sums the figures. */
int train_ps_run_end(train_ps_t *ps, const train_opts_t *o, int rank,
                     train_ps_run_report_t *r, train_ps_run_err_t *e);

/* The report's line ("parameter servers (ps-sync, colocated): N pushes, ..."), no
   newline. */
void train_ps_run_format(const train_ps_run_report_t *r, const train_opts_t *o, char *line,
                         size_t len);

/* --logdir: the staleness as a histogram of the train run (tag ps_staleness) at step,
   one value per push (at most a million, in proportion beyond). */
int train_ps_run_staleness_to_tensorboard(train_tfevents_t *tb, const char *logdir,
                                          const train_ps_run_report_t *r, int64_t step,
                                          double wall_time, train_ps_run_err_t *e);

#endif
