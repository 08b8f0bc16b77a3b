/* train/pipeline_internal.h: the pipeline's state, shared by train/pipeline.c (set-up)
   and train/pipeline_step.c (the step). */
#ifndef TRAIN_PIPELINE_INTERNAL_H
#define TRAIN_PIPELINE_INTERNAL_H

#include <mpi.h>

#include "hvd/hvd.h"
#include "train/pipeline.h"

#define TAG_ACT 1000
#define TAG_GRAD 30000
#define MAX_STAGES 64

struct train_pipeline {
  nn_model_t *m;
  int S, M, schedule, stage, replica, R, rank, size;
  int bounds[MAX_STAGES + 1];
  double stage_s[MAX_STAGES];
  hvd_process_set_t sets[MAX_STAGES];
  size_t pbegin, pend;                 /* this stage's parameters */
  int micro_n;
  size_t in_floats, out_floats;        /* per sample: the stage's input and output */
  int wants_dx, next_sends_dx;         /* whether input gradients go back            */
  MPI_Comm comm;
  double stuck_s;                      /* a wait on a live peer gives up after this  */
  float **act_in, **act_out, **grad_in, **grad_out;   /* per micro-batch */
  MPI_Request *recv_act, *recv_grad, *send_act, *send_grad;
  void **stash;                        /* per micro-batch while in flight            */
  void **pool;                         /* stash buffers not in use                   */
  int npool, inflight, peak_inflight;
  size_t stash_bytes;
  train_pipeline_stats_t stats;
  train_pipeline_event_t *trace;       /* the last step's computations (2 M at most)  */
  int ntrace;
  double step_start_s;
};

/* Notes one computation of the step (kind 'F' or 'B', micro-batch k, from t0 to now). */
void train_pipeline_note(train_pipeline_t *p, char kind, int k, double t0);

/* Polls r until it completes (what: "activations", "gradients"); gives up when hvd's
   runtime stopped (a lost rank, named as collectives name it: hvd_check_health), or
   after stuck_s. 0, or -1 with err. */
int train_pipeline_wait_peer(train_pipeline_t *p, MPI_Request *r, int peer, const char *what,
                             char *err, size_t errlen);

#endif /* TRAIN_PIPELINE_INTERNAL_H */
