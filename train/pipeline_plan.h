/* train/pipeline_plan.h: where a pipeline cuts the model (train/pipeline_plan.c). */
#ifndef TRAIN_PIPELINE_PLAN_H
#define TRAIN_PIPELINE_PLAN_H

#include "nn/nn.h"

/* Times every layer of m (forward and backward, training mode, micro_n samples of
   zeros; the best of a few passes), leaving the model's state as it was, into
   layer_s[num_layers]. 0, or -1 with err. */
int train_pipeline_time_layers(nn_model_t *m, int micro_n, double *layer_s, char *err,
                               size_t errlen);
/* The time per micro-batch of a stage of layers [first, last) as the plan counts it: its
   layers' times, plus its stash's bytes for micro_n samples times copy_s_per_byte when
   the stage stashes (stashes: 0 for 1F1B's last stage, whose backward follows its
   forward, and with one micro-batch). */
double train_pipeline_stage_time(nn_model_t *m, const double *layer_s, int first, int last,
                                 int micro_n, double copy_s_per_byte, int stashes);

/* Cuts m into S contiguous non-empty stages at allowed cuts (nn_model_range_cut_ok)
   minimising the slowest stage's time (train_pipeline_stage_time; the last stage
   stashes when last_stashes): cuts[0..S-1) ascending. 0, or -1 with err when the model
   has fewer allowed places than S - 1. */
int train_pipeline_balance(nn_model_t *m, const double *layer_s, int S, int micro_n,
                           double copy_s_per_byte, int last_stashes, int *cuts, char *err,
                           size_t errlen);

#endif /* TRAIN_PIPELINE_PLAN_H */
