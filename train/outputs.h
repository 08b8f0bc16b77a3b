/* train/outputs.h: rank 0's outputs besides the console. --checkpoint-dir and --export are
   created or probed before any training, so a path that cannot be written ends the run
   before an epoch is spent; --logdir holds TensorBoard runs as Keras's TensorBoard
   callback lays them out (DIR/train and DIR/validation, one run each with the same tags,
   so TensorBoard draws both curves of a tag in one chart) and log.csv (CSVLogger);
   --export writes the weights with what a reader needs to feed them (docs/serve.md).
   Nothing here prints: each call returns 0, or -1 with one line in err naming the flag
   or the file. */
#ifndef TRAIN_OUTPUTS_H
#define TRAIN_OUTPUTS_H

#include <stddef.h>

#include "nn/nn.h"
#include "train/callbacks.h"
#include "train/data.h"
#include "train/flags.h"
#include "train/tfevents.h"

enum { TB_TRAIN, TB_VALIDATION, TB_RUNS };

typedef struct {
  train_tfevents_t tb[TB_RUNS];   /* open when --logdir was given */
  train_csv_t csv;
} train_outputs_t;

/* Creates and probes --checkpoint-dir, probes the directory of --export, opens the event
   files and log.csv of --logdir (appending with --resume). out zeroed by the caller. */
int train_outputs_open(const train_opts_t *o, train_outputs_t *out, char *err, size_t errlen);

/* An epoch's line in both runs and log.csv: the train run's scalars and, every
   --histogram-freq epochs, a histogram of each weight (m's host arrays); the validation
   run's scalars. Keras's steps: the epoch from 0. */
int train_outputs_epoch(train_outputs_t *out, const train_opts_t *o, nn_model_t *m, int epoch,
                        double loss, double acc, double val_loss, double val_acc, double lr,
                        double ips, double seconds, char *err, size_t errlen);

/* Keras's update_freq: the running loss and accuracy at global batch `step`. */
int train_outputs_batch(train_outputs_t *out, long long step, float loss, float acc, char *err,
                        size_t errlen);

int train_outputs_close(train_outputs_t *out, char *err, size_t errlen);

/* Writes the model's weights to --export with a safetensors "__metadata__" object (see
   train/outputs.c). */
int train_export(const nn_model_t *model, const train_opts_t *o, const train_dataset_t *d,
                 const float mean[3], const float std[3], char *err, size_t errlen);

#endif
