/* train/pipeline_internal.h: the pipeline's state, shared by train/pipeline.c (set-up)
   and train/pipeline_step.c (the step). */
#ifndef TRAIN_PIPELINE_INTERNAL_H
#define TRAIN_PIPELINE_INTERNAL_H

#include <mpi.h>

#include "hvd/hvd.h"
#include "train/pipeline.h"

#define TAG_BATCH 900
#define TAG_ACT 1000
#define TAG_GRAD 30000
#define MAX_STAGES 64

struct train_pipeline {
  nn_model_t *m;
  int S, M, schedule, stage, replica, R, rank, size;
  int bounds[MAX_STAGES + 1];
  double stage_s[MAX_STAGES], stage_copy_s[MAX_STAGES];  /* per micro-batch, planned */
  hvd_process_set_t sets[MAX_STAGES];
  size_t pbegin, pend;                 /* this stage's parameters */
  int micro_n;
  size_t in_floats, out_floats;        /* per sample: the stage's input and output */
  int wants_dx, next_sends_dx;         /* whether input gradients go back            */
  MPI_Comm comm;
  double stuck_s;                      /* a wait on a live peer gives up after this  */
  float **act_in, **act_out, **grad_in, **grad_out;   /* per micro-batch */
  MPI_Request *recv_act, *recv_grad, *send_act, *send_grad;
  int32_t *batch;                      /* the replica's sample count and labels, from its
                                          stage 0 (1 + M micro_n)                     */
  MPI_Request batch_req[MAX_STAGES];   /* stage 0: sends to the others; else 1 receive */
  nn_range_acts_t **stash;             /* per micro-batch in flight: its activations  */
  nn_range_acts_t **pool;              /* activation sets not in use                  */
  int npool, inflight, peak_inflight;
  long long steps_begun;
  long long failed_step;               /* a step that failed (-1: none): later steps
                                          are refused, a stale message could match them */
  long long fail_step;                 /* test knob: this step fails (-1: none)       */
  int gather_nomem;                    /* test knob: this rank's gather scratch fails */
  size_t stash_bytes;
  train_pipeline_stats_t stats;
  train_pipeline_event_t *trace;       /* the last step's computations (2 M at most)  */
  int ntrace;
  double step_start_s;
};

/* Completes or cancels every request a step left posted (a failed step), and gives
   its stashes back: the next step, the gather or hvd_shutdown sees none of them. */
void train_pipeline_drop_requests(train_pipeline_t *p);

/* Notes one computation of the step (kind 'F' or 'B', micro-batch k, from t0 to now). */
void train_pipeline_note(train_pipeline_t *p, char kind, int k, double t0);

/* Polls r until it completes (what: "activations", "gradients"); gives up when hvd's
   runtime stopped (a lost rank, named as collectives name it: hvd_check_health), or
   after stuck_s. 0, or -1 with err. */
int train_pipeline_wait_peer(train_pipeline_t *p, MPI_Request *r, int peer, const char *what,
                             char *err, size_t errlen);

#endif /* TRAIN_PIPELINE_INTERNAL_H */
