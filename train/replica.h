/* train/replica.h: one data-parallel replica, set up the same way by the train program and
   bench/cnn_bench, in Horovod's order: the model and its optimizer; rank 0's weights,
   buffers and counters broadcast to every rank (broadcast_parameters); the precision and
   layout, then the move to the GPU (the optimizer moves along); the gradient buckets over
   the model's gradients, ending at parameter boundaries as PyTorch DDP's.
   Two calls, so that train can put a resumed checkpoint into rank 0's model between them.
   Nothing here prints or exits: a failure returns -1 and says which stage failed, with
   nn's or hvd's status (the other is OK), for the program to report its own way. */
#ifndef TRAIN_REPLICA_H
#define TRAIN_REPLICA_H

#include <stddef.h>

#include "hvd/hvd.h"
#include "nn/nn.h"

typedef struct {
  const char *model;               /* nn's model name */
  nn_model_config_t cfg;
  int optimizer;                   /* create `optim` (0: inference only) */
  nn_optim_config_t optim;
  int broadcast;                   /* rank 0's weights, buffers, counters to every rank */
  /* After the broadcast: this rank's own batch-norm statistics instead of rank 0's (a
     mid-epoch checkpoint resumed on as many ranks); NULL: rank 0's. */
  const float *own_buffers;
  int gpu;                         /* precision and layout, then the move to the GPU */
  nn_precision_config_t precision;
  int tf32;                        /* nn_cuda_set_tf32 before the move; -1: left as is */
  int buckets;                     /* gradient buckets (0: no allreduce) */
  size_t bucket_bytes, first_bucket_bytes;
  hvd_compression_t compression;
  hvd_op_t op;                     /* HVD_AVERAGE, or HVD_SUM with a predivide factor */
  int overlap;                     /* start each bucket's allreduce during backward */
} train_replica_opts_t;

typedef enum {
  TRAIN_REPLICA_OK,
  TRAIN_REPLICA_CREATE,            /* nn_model_create */
  TRAIN_REPLICA_OPTIMIZER,
  TRAIN_REPLICA_BROADCAST,         /* `failed` names the tensor */
  TRAIN_REPLICA_PRECISION,
  TRAIN_REPLICA_DEVICE,
  TRAIN_REPLICA_BUCKETS,           /* hvd_grad_buckets_create */
  TRAIN_REPLICA_BUCKET_BOUNDS,     /* no bucket layout at parameter boundaries: err */
} train_replica_stage_t;

typedef struct {
  nn_model_t *model;
  hvd_grad_buckets_t *buckets;     /* NULL without buckets */
  /* util_now_s() around the broadcast of the weights (a timeline's clock anchor). */
  double broadcast_start, broadcast_end;
  /* After a failure. */
  train_replica_stage_t stage;
  const char *failed;              /* the tensor, for TRAIN_REPLICA_BROADCAST */
  nn_status_t nn_status;
  hvd_status_t hvd_status;
  char err[512];                   /* TRAIN_REPLICA_BUCKET_BOUNDS's message */
} train_replica_t;

/* The model (and its optimizer) on the host, with nn's initial weights. r zeroed by the
   caller, or freed before it is made anew. */
int train_replica_create(train_replica_t *r, const train_replica_opts_t *o);

/* Broadcast, precision, device, buckets (as o asks). */
int train_replica_start(train_replica_t *r, const train_replica_opts_t *o);

/* The gradient buckets (made anew) over the model's trainable gradients: from
   nn_model_trainable_from on (train --freeze), after a change of the frozen set. */
int train_replica_buckets(train_replica_t *r, const train_replica_opts_t *o);

void train_replica_free(train_replica_t *r);

/* How many counters (NN_SLICE_COUNTER: batch norm's num_batches_tracked, int64) m has. */
int train_model_counters(const nn_model_t *m);

#endif
