/* train/transfer.h: transfer learning in the train program: --freeze (nn's frozen
   layers), --init-weights with --init-skip (a new head), and what the summary says about
   the frozen part. The phase switch of --unfreeze-at-epoch lives in main.c's epoch loop,
   which owns the replica; checkpoints keep the frozen set (train/resume.c). Nothing here
   prints or exits: -1 with err saying what was wrong and what to do. */
#ifndef TRAIN_TRANSFER_H
#define TRAIN_TRANSFER_H

#include <stddef.h>

#include "nn/nn.h"
#include "train/flags.h"

/* Freezes the layers of m that --freeze names (nothing when none). */
int train_freeze(nn_model_t *m, const train_opts_t *o, char *err, size_t errlen);

/* Loads the safetensors file path into m as --init-weights with --init-skip: every
   tensor of m not matching a skip pattern must be in the file with its dtype and shape;
   the ones matching keep m's values (the file may hold them in any shape, or not at
   all); the file may hold nothing else. On failure m is unchanged. */
int train_load_init_skip(nn_model_t *m, const char *path, const train_patterns_t *skip,
                         char *err, size_t errlen);

/* The frozen tensors (parameters and buffers of frozen layers) and parameters of m. */
void train_frozen_counts(const nn_model_t *m, int *tensors, size_t *params);

#endif /* TRAIN_TRANSFER_H */
