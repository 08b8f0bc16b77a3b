/* train/pipeline_plan.h: where a pipeline cuts the model (train/pipeline_plan.c). */
#ifndef TRAIN_PIPELINE_PLAN_H
#define TRAIN_PIPELINE_PLAN_H

#include "nn/nn.h"

/* Times every layer of m (forward and backward, training mode, micro_n samples of
   zeros; the best of a few passes), leaving the model's state as it was, into
   layer_s[num_layers]. 0, or -1 with err. */
int train_pipeline_time_layers(nn_model_t *m, int micro_n, double *layer_s, char *err,
                               size_t errlen);
/* Cuts m into S contiguous non-empty stages at allowed cuts (nn_model_range_cut_ok)
   minimising the slowest stage's time: cuts[0..S-1) ascending. 0, or -1 with err when
   the model has fewer allowed places than S - 1. */
int train_pipeline_balance(const nn_model_t *m, const double *layer_s, int S, int *cuts,
                           char *err, size_t errlen);

#endif /* TRAIN_PIPELINE_PLAN_H */
