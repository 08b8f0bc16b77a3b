/* test_train_pipeline_plan: where a pipeline cuts a model (train/pipeline_plan.h), on
   resnet20 with every layer taking the same time, micro-batches of 8. Without copy
   costs the 2-stage cut balances the layer times. With a copy cost per byte, the stages
   that stash (1F1B: the first; GPipe: both) pay for their activations: 1F1B's cut moves
   towards the input (the first layers' activations are the largest), the plan's slowest
   stage is no slower than the copy-blind cut's counted the same way, and with the copy
   cost GPipe's cut differs from 1F1B's. */
#include "nn/nn.h"
#include "train/pipeline_plan.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/check.h"

enum { MICRO = 8 };

/* The slowest of the 2 stages cut before layer `cut`, counted as the plan counts. */
static double slowest(nn_model_t *m, const double *layer_s, int cut, double copy, int last) {
  int L = nn_model_num_layers(m);
  double a = train_pipeline_stage_time(m, layer_s, 0, cut, MICRO, copy, 1);
  double b = train_pipeline_stage_time(m, layer_s, cut, L, MICRO, copy, last);
  return a > b ? a : b;
}

int main(void) {
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = MICRO, .seed = 1};
  CHECK(nn_model_create(&m, "resnet20", &cfg) == NN_OK, "create: %s", nn_last_error());
  int L = nn_model_num_layers(m);
  double *layer_s = malloc((size_t)L * sizeof(double));
  for (int i = 0; i < L; i++) layer_s[i] = 1e-3;
  char err[256];
  int blind = -1, f1b = -1, gpipe = -1;
  CHECK(train_pipeline_balance(m, layer_s, 2, MICRO, 0, 0, &blind, err, sizeof err) == 0,
        "%s", err);
  CHECK(blind > L / 2 - 8 && blind < L / 2 + 8, "equal layer times cut before layer %d of "
        "%d, not near the middle", blind, L);
  /* A copy of the whole batch's activations costs about as much as the layers. */
  double copy = 1e-3 * L / (double)nn_model_range_stash_bytes(m, 0, L, MICRO);
  CHECK(train_pipeline_balance(m, layer_s, 2, MICRO, copy, 0, &f1b, err, sizeof err) == 0,
        "%s", err);
  CHECK(train_pipeline_balance(m, layer_s, 2, MICRO, copy, 1, &gpipe, err, sizeof err) == 0,
        "%s", err);
  printf("resnet20, equal layer times: cut before layer %d without copies, %d with (1F1B), "
         "%d with (GPipe)\n", blind, f1b, gpipe);
  CHECK(f1b < blind, "1F1B's first stage copies its activations: its cut (layer %d) should "
        "come before the copy-blind one (%d)", f1b, blind);
  CHECK(slowest(m, layer_s, f1b, copy, 0) <= slowest(m, layer_s, blind, copy, 0),
        "the copy-aware cut's slowest stage %.3g s is slower than the copy-blind cut's %.3g s",
        slowest(m, layer_s, f1b, copy, 0), slowest(m, layer_s, blind, copy, 0));
  CHECK(gpipe != f1b, "GPipe's last stage stashes too: its cut should differ from 1F1B's "
        "(both before layer %d)", f1b);
  free(layer_s);
  nn_model_free(m);
  return failures ? 1 : 0;
}
