/* train/pipeline.h: pipeline model parallelism (GPipe, PipeDream's 1F1B) combined with
   data parallelism, for the train program and its tests.

   The world's ranks form np/S replicas of an S-stage pipeline: rank r is stage r % S of
   replica r / S. Every rank holds the whole model (nn) but runs only its stage's
   contiguous range of layers (nn_model_forward_range / _backward_range), cut where the
   measured time per stage is balanced. A replica's batch is cut into M micro-batches;
   activations go forward and their gradients backward point-to-point between the
   neighbouring stages of a replica (non-blocking MPI, posted at the start of the step,
   so transfers overlap the compute); a stage keeps the micro-batches it has run forward
   and not yet backward in their own activation sets (nn_model_range_use switches the
   model's layers between them, no copy). After the last backward each stage
   averages its parameters' gradients over the replicas in its own hvd process set
   (stage s: ranks s, s + S, ...), then every rank takes the optimizer step.

   Point-to-point goes straight to MPI (on its own duplicate of MPI_COMM_WORLD) because
   hvd has collectives only; MPI must then be initialised with MPI_THREAD_MULTIPLE (the
   hvd background thread calls MPI too): train_pipeline_mpi_init before hvd_init. Every
   wait polls, and asks hvd's runtime about its peers meanwhile (hvd_check_health): a
   lost stage, found by the heartbeats within HVD_PEER_TIMEOUT_SECONDS, ends every
   survivor with the rank and host every collective would name, whichever stage each
   survivor waited for.

   Batch norm inside a pipeline normalises per micro-batch (as PyTorch's Pipe does), and
   its running statistics and num_batches_tracked advance once per micro-batch. */
#ifndef TRAIN_PIPELINE_H
#define TRAIN_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"

typedef enum { TRAIN_PIPE_GPIPE = 0, TRAIN_PIPE_1F1B = 1 } train_pipe_schedule_t;

typedef struct {
  int stages;                        /* S >= 1; the world size must divide by it       */
  int micro_batches;                 /* M >= 1                                        */
  train_pipe_schedule_t schedule;
  const int *cuts;                   /* S - 1 ascending cut points (layer indices), or
                                        NULL: balanced by measured time               */
} train_pipeline_opts_t;

typedef struct train_pipeline train_pipeline_t;

/* Per stage, over the steps since creation: wall time of the steps' pipeline phase (from
   the first micro-batch to the last backward), the part spent computing, the part of
   that spent copying activations (switching a micro-batch's activation set, copying an
   output or input gradient for its send), and the largest stash in
   bytes (activations of the micro-batches in flight). */
typedef struct {
  double wall_s, busy_s, copy_s;
  size_t peak_stash_bytes;
  uint64_t steps;
} train_pipeline_stats_t;

/* MPI_Init_thread(MPI_THREAD_MULTIPLE); 0, or -1 with err. Before hvd_init. */
int train_pipeline_mpi_init(char *err, size_t errlen);

/* MPI_Finalize, after hvd_shutdown (MPI is then the program's, not hvd's). */
void train_pipeline_mpi_finalize(void);

/* Collective over the world (hvd initialised): measures m's layers on micro-batches of
   micro_n samples (m must take that many: created with batch >= micro_n) unless
   o->cuts, agrees on rank 0's cuts, adds the stage process sets. m has its optimizer.
   0, or -1 with err. */
int train_pipeline_create(train_pipeline_t **out, nn_model_t *m,
                          const train_pipeline_opts_t *o, int micro_n, char *err,
                          size_t errlen);
void train_pipeline_free(train_pipeline_t *p);

int train_pipeline_stage(const train_pipeline_t *p);
int train_pipeline_replicas(const train_pipeline_t *p);
/* Layers [*first, *last) of stage s. */
void train_pipeline_stage_layers(const train_pipeline_t *p, int s, int *first, int *last);
/* Several lines: layers, parameters and measured time per stage. */
void train_pipeline_describe(const train_pipeline_t *p, char *buf, size_t len);

/* One step on this replica's n samples (x: n inputs, y: n labels), learning rate lr.
   Only stage 0's x, y and n count: it sends n and the labels to the replica's other
   stages, which pass anything (NULL, NULL, 0): they need not read the data set. *loss_sum and *correct (if not NULL) receive the sums over every replica's samples
   (every rank gets them). 0, or -1 with err; a failed step leaves no transfer posted
   (hvd calls and train_pipeline_free may follow) and the pipeline refuses later steps. */
int train_pipeline_step(train_pipeline_t *p, const float *x, const int32_t *y, int n,
                        float lr, double *loss_sum, long long *correct, char *err,
                        size_t errlen);

/* Every rank gets every stage's parameters (from replica 0): the whole model, for
   checkpoints, evaluation and --export; the batch-norm statistics and counters too,
   except that a stage's ranks keep their own. Collective over the world. */
int train_pipeline_gather(train_pipeline_t *p, char *err, size_t errlen);

/* Each stage's batch-norm running statistics averaged over its replicas (counters: the
   largest), in the stage's process set, as data parallelism averages them at an epoch's
   end; before train_pipeline_gather. Collective over the world. 0, or -1 with err. */
int train_pipeline_average_stats(train_pipeline_t *p, char *err, size_t errlen);

void train_pipeline_stats(const train_pipeline_t *p, train_pipeline_stats_t *s);

/* One computation of the last step on this stage: 'F' (forward) or 'B' (backward) of
   micro-batch `micro`, in seconds from the step's start: the schedule as it ran. */
typedef struct {
  char kind;
  int micro;
  double start_s, end_s;
} train_pipeline_event_t;

/* The last step's computations, in the order they ran; returns how many (at most 2 M). */
int train_pipeline_trace(const train_pipeline_t *p, const train_pipeline_event_t **events);

#endif /* TRAIN_PIPELINE_H */
