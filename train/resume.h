/* train/resume.h: the train program's run state and its checkpoints: what a checkpoint
   holds besides the model (the state section), writing one, reading one back only after
   checking every field against this run, and choosing which one to resume from.
   Rank 0's work: the caller broadcasts what it loaded (train/main.c). Nothing here prints;
   warnings (a setting that differs, a file passed over) go to the run's `warn` callback. */
#ifndef TRAIN_RESUME_H
#define TRAIN_RESUME_H

#include <stddef.h>

#include "nn/nn.h"
#include "train/flags.h"

/* The training state that checkpoints carry besides weights and optimizer. */
enum {
  ST_EPOCHS_DONE, ST_ES_BEST, ST_ES_BEST_EPOCH, ST_ES_WAIT, ST_CK_BEST, ST_CK_BEST_EPOCH,
  ST_BEST_VAL_ACC, ST_BEST_VAL_ACC_EPOCH, ST_TRAIN_SECONDS, ST_TRAIN_IMAGES, ST_HAVE_BEST,
  ST_DROPOUT_STEP, /* nn's dropout mask counter: a resumed run draws the same masks */
  ST_COUNT_V1,     /* the fields above are all that checkpoints before mid-epoch ones hold */
  /* Mid-epoch (--checkpoint-every-steps): steps of epoch epochs_done already taken (0 at
     an epoch end), of how many, and the epoch's metrics so far, summed over the ranks. */
  ST_STEPS_DONE = ST_COUNT_V1, ST_STEPS_PER_EPOCH, ST_EPOCH_LOSS_SUM, ST_EPOCH_CORRECT,
  ST_EPOCH_SAMPLES, ST_EPOCH_SECONDS,
  ST_COUNT
};

typedef struct {
  const train_opts_t *o;
  nn_model_t *model;          /* with its optimizer (nn_model_optim_create) */
  float *best_params;          /* restore-best-weights copy (NULL when off) */
  float *best_buffers;
  double st[ST_COUNT];
  int ranks;
  double lr_scale;             /* the lr is o->lr times this: the ranks of the global
                                  batch's first run (linear scaling) */
  /* Rank 0 after loading a mid-epoch checkpoint: every rank's batch-norm statistics
     (they are averaged only at epoch ends), ranks_in_file * buffers floats; else NULL. */
  float *rank_buffers;
  /* What the loaded checkpoint's run was: ranks, batch per rank, lr factor. */
  int ranks_in_file, batch_in_file;
  double lr_scale_in_file;
  /* Called with one line (no newline) for each warning; NULL: none said. */
  void (*warn)(const char *line);
} train_run_t;

/* Writes the run (model, optimizer, state, best weights) to path. buffers: the
   batch-norm statistics to store (NULL: the model's); rank_buffers: every rank's (a
   mid-epoch checkpoint of several ranks), NULL when none. 0, or -1 with err. */
int train_run_save(train_run_t *r, const char *path, const float *buffers,
                   const float *rank_buffers, char *err, size_t errlen);

/* Reads and checks a checkpoint against this run, then copies it in. warn: say which
   settings differ. 0, or -1 with err naming the file; on failure nothing of the run has
   changed. */
int train_run_load(train_run_t *r, const char *path, int warn, char *err, size_t errlen);

/* Loads the checkpoint to resume from: --resume PATH: that file (an error when it does
   not load); --resume auto: the furthest along of --checkpoint-dir that loads, each one
   passed over said through r->warn. 1 with its path in chosen, 0 when auto finds no
   checkpoint file (a fresh start), -1 with err (also when files are there but none
   loads). */
int train_resume_load(train_run_t *r, char *chosen, size_t chosen_len, char *err,
                      size_t errlen);

/* Resuming a checkpoint of another number of ranks (an elastic restart): the global batch
   stays, split over this run's `size` ranks, and so does the lr (scaled as in the first
   run). When the global batch does not split evenly, the nearest per-rank batch is taken
   and the lr follows the global batch (linear scaling). Sets o->batch and r->lr_scale;
   what it did, when it changed anything, in note (else note is empty). */
void train_resume_plan_batch(train_opts_t *o, train_run_t *r, int size, char *note,
                             size_t notelen);

#endif
