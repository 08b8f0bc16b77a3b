/* nn/lr_schedule.c: learning rate as a function of the fractional epoch.

   warm-up (warmup_epochs > 0, epoch < warmup_epochs): linear from warmup_start_lr at
     epoch 0 to base_lr at warmup_epochs (Horovod's LearningRateWarmupCallback: start at
     the single-rank lr, reach lr * ranks).
   then
     constant: base_lr
     step:     base_lr * gamma^floor(epoch / step_epochs), epochs counted from 0 (as
               Horovod's LearningRateScheduleCallback and torch's StepLR); step_epochs
               <= 0 means no decay
     cosine:   min_lr + (base_lr - min_lr) * (1 + cos(pi * t)) / 2 with
               t = (epoch - warmup_epochs) / (total_epochs - warmup_epochs) clamped to
               [0, 1], so the decay starts where the warm-up ends and stays at min_lr
               after total_epochs */
#include "nn/nn.h"

#include <math.h>

float nn_lr_at(const nn_lr_schedule_t *s, double epoch) {
  if (!s) return 0.0f;
  if (epoch < 0.0) epoch = 0.0;
  double base = s->base_lr, warm = s->warmup_epochs;
  if (warm > 0.0 && epoch < warm)
    return (float)(s->warmup_start_lr + (base - s->warmup_start_lr) * (epoch / warm));
  switch (s->kind) {
  case NN_LR_STEP:
    if (s->step_epochs <= 0.0f) return (float)base;
    return (float)(base * pow((double)s->gamma, floor(epoch / (double)s->step_epochs)));
  case NN_LR_COSINE: {
    double span = (double)s->total_epochs - (warm > 0.0 ? warm : 0.0);
    double t = span > 0.0 ? (epoch - (warm > 0.0 ? warm : 0.0)) / span : 1.0;
    if (t < 0.0) t = 0.0;
    if (t > 1.0) t = 1.0;
    return (float)(s->min_lr + (base - s->min_lr) * 0.5 * (1.0 + cos(M_PI * t)));
  }
  case NN_LR_CONSTANT:
  default:
    return (float)base;
  }
}
