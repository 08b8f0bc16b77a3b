/* train/pipeline_run.h: the train program's glue to its pipeline (--pipeline-stages S,
   train/pipeline.h): the flag checks, the set-up with its printed plan, one step's
   metrics, the whole model gathered from the stages, and the report at the end. Nothing
   here exits: each returns -1 with a message for the program to report. */
#ifndef TRAIN_PIPELINE_RUN_H
#define TRAIN_PIPELINE_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "nn/nn.h"
#include "train/flags.h"
#include "train/pipeline.h"

/* Flag combinations a pipeline cannot run (gpu: --device gpu; ps: parameter servers):
   0, or -1 with err (a usage error). Before any data is loaded. */
int train_pipeline_run_check(const train_opts_t *o, int gpu, int ps, char *err,
                             size_t errlen);

/* The pipeline over m (the whole model every rank holds), o's stages, micro-batches and
   schedule; rank 0 prints the plan to out unless o->quiet. Collective. 0, or -1. */
int train_pipeline_run_create(train_pipeline_t **out, const train_opts_t *o, nn_model_t *m,
                              int rank, int replicas, FILE *plan_out, char *err,
                              size_t errlen);

/* One step on this replica's n samples at learning rate lr. Rank 0 alone adds the
   step's loss sum, correct count and total (every replica's) to sums, so that the
   epoch's allreduce of the sums counts them once. 0, or -1 with err. */
int train_pipeline_run_step(train_pipeline_t *p, int rank, const float *x, const int32_t *y,
                            int n, int total, float lr, double sums[3], char *err,
                            size_t errlen);

/* Every rank gets the whole model from the stages (checkpoints, evaluation, --export);
   at an epoch's end (epoch_end) the batch-norm statistics are averaged over the
   replicas first, as the ranks' are without a pipeline. Collective. 0, or -1. */
int train_pipeline_run_gather(train_pipeline_t *p, int epoch_end, char *err, size_t errlen);

/* Rank 0 prints (unless o->quiet) each stage's idle fraction (the bubble, beside its
   theory (S-1)/(M+S-1)) and peak activation stash, and the unsplit model's activations
   (m). Collective. 0, or -1 with err. */
int train_pipeline_run_report(const train_pipeline_t *p, const train_opts_t *o,
                              nn_model_t *m, int rank, FILE *out, char *err, size_t errlen);

#endif /* TRAIN_PIPELINE_RUN_H */
