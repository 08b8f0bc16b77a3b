/* test_nn_freeze: frozen layers (nn_model_set_frozen). On lenet with conv1 and conv2
   frozen, three SGD steps (momentum, weight decay): the frozen parameters stay bit for
   bit, the others change; the gradients of the trainable ones equal an unfrozen model's
   on the same batch bit for bit, those of the frozen ones are zero, and backward never
   visits a layer below fc1 (its timing stays 0); the optimizer holds state for the
   trainable range only. Unfreezing keeps that state at its place and starts the newly
   trainable part at zero, with the step count; nn_model_set_trainable_from gives the same
   set back. On resnet20 with the stem and layer1 frozen, training forwards leave the
   frozen batch norms' running statistics and counters as they are (inference mode)
   while the trainable ones move. Refused, with the model unchanged: a frozen layer above
   a trainable one, a pattern that matches nothing, everything frozen. */
#include "nn/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

enum { BATCH = 4 };

static nn_model_t *make(const char *name, int freeze, const char *const *pats, int npats) {
  nn_model_config_t cfg = {.batch = BATCH, .seed = 7};
  nn_model_t *m = NULL;
  CHECK(nn_model_create(&m, name, &cfg) == NN_OK, "create %s: %s", name, nn_last_error());
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 1e-3f};
  CHECK(nn_model_optim_create(m, &oc) == NN_OK, "optimizer: %s", nn_last_error());
  if (freeze)
    CHECK(nn_model_set_frozen(m, pats, npats) == NN_OK, "freeze: %s", nn_last_error());
  return m;
}

static void batch(const nn_model_t *m, float *x, int32_t *y, int step) {
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t n = (size_t)BATCH * c * h * w;
  for (size_t i = 0; i < n; i++) x[i] = (float)(((i * 2654435761u + step * 97u) >> 7) % 255) / 255.0f - 0.5f;
  for (int i = 0; i < BATCH; i++) y[i] = (i + step) % 10;
}

static void step(nn_model_t *m, float *x, int32_t *y, int k, int update) {
  batch(m, x, y, k);
  float loss;
  CHECK(nn_model_forward(m, x, BATCH, 1) == NN_OK, "forward: %s", nn_last_error());
  CHECK(nn_model_loss(m, y, &loss, NULL) == NN_OK, "loss: %s", nn_last_error());
  CHECK(nn_model_backward(m, NULL, NULL) == NN_OK, "backward: %s", nn_last_error());
  if (update) CHECK(nn_model_optim_step(m, 0.05f) == NN_OK, "step: %s", nn_last_error());
}

static void check_lenet(void) {
  const char *pats[] = {"conv1.*", "conv2.*"};
  nn_model_t *m = make("lenet", 1, pats, 2), *ref = make("lenet", 0, NULL, 0);
  const size_t len = nn_model_param_len(m), from = nn_model_trainable_from(m);
  CHECK(from > 0 && from < len, "trainable_from %zu of %zu", from, len);
  size_t count = 0;
  nn_model_optim_state(m, &count);
  CHECK(count == len - from, "optimizer state of %zu floats, expected %zu (trainable only)",
        count, len - from);
  float *before = malloc(len * sizeof(float)), *x = malloc(BATCH * 28 * 28 * sizeof(float));
  int32_t y[BATCH];
  memcpy(before, nn_model_params(m), len * sizeof(float));
  /* Gradients on the same batch, frozen and not. */
  step(m, x, y, 0, 0);
  step(ref, x, y, 0, 0);
  const float *g = nn_model_grads(m), *gr = nn_model_grads(ref);
  size_t nonzero_below = 0, differ_above = 0;
  for (size_t i = 0; i < len; i++) {
    if (i < from && g[i] != 0.0f) nonzero_below++;
    if (i >= from && g[i] != gr[i]) differ_above++;
  }
  CHECK(nonzero_below == 0, "%zu gradients of frozen parameters are not zero", nonzero_below);
  CHECK(differ_above == 0, "%zu trainable gradients differ from the unfrozen model's",
        differ_above);
  for (int i = 0; i < nn_model_num_layers(m); i++) {
    double f, b;
    nn_model_layer_times(m, i, &f, &b);
    const char *name = nn_model_layer_name(m, i);
    int below = strcmp(name, "fc1") != 0 && strncmp(name, "fc", 2) != 0 &&
                strcmp(name, "relu3") != 0;
    if (below) CHECK(b == 0.0, "backward visited %s below the lowest trainable layer", name);
  }
  for (int k = 1; k <= 3; k++) step(m, x, y, k, 1);
  const float *p = nn_model_params(m);
  size_t moved_below = 0, still_above = 0, above = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (sl->kind != NN_SLICE_PARAM) continue;
    int frozen = nn_model_slice_frozen(m, i);
    CHECK(frozen == (sl->offset < from), "%s: frozen %d", sl->name, frozen);
    int same = memcmp(p + sl->offset, before + sl->offset, sl->numel * sizeof(float)) == 0;
    if (frozen && !same) moved_below++;
    if (!frozen) above++, still_above += same;
  }
  CHECK(moved_below == 0, "%zu frozen tensors changed", moved_below);
  CHECK(above == 4 && still_above == 0, "%zu of %zu trainable tensors unchanged", still_above,
        above);
  /* Unfreeze: the state moves to its place in the full range; the new part is zero. */
  float *st = nn_model_optim_state(m, &count);
  float *kept = malloc(count * sizeof(float));
  memcpy(kept, st, count * sizeof(float));
  int64_t steps = *nn_model_optim_step_count(m);
  CHECK(nn_model_set_frozen(m, NULL, 0) == NN_OK, "unfreeze: %s", nn_last_error());
  size_t full = 0;
  st = nn_model_optim_state(m, &full);
  CHECK(full == len && nn_model_trainable_from(m) == 0, "unfrozen: state %zu, from %zu", full,
        nn_model_trainable_from(m));
  size_t bad = 0;
  for (size_t i = 0; i < len; i++)
    bad += i < from ? st[i] != 0.0f : st[i] != kept[i - from];
  CHECK(bad == 0, "%zu optimizer state values wrong after unfreezing", bad);
  CHECK(*nn_model_optim_step_count(m) == steps, "step count changed by unfreezing");
  CHECK(nn_model_set_trainable_from(m, from) == NN_OK && nn_model_trainable_from(m) == from,
        "set_trainable_from(%zu): %s", from, nn_last_error());
  CHECK(nn_model_slice_frozen(m, 0) && !nn_model_slice_frozen(m, nn_model_num_slices(m) - 1),
        "set_trainable_from did not give the frozen set back");
  /* Refusals leave the model as it is. */
  const char *above_trainable[] = {"fc1.*"}, *nothing[] = {"features.*"};
  const char *all[] = {"*"};
  CHECK(nn_model_set_frozen(m, above_trainable, 1) == NN_ERR_ARG &&
            strstr(nn_last_error(), "fc1") && strstr(nn_last_error(), "conv1"),
        "fc1 frozen above a trainable conv1 accepted: %s", nn_last_error());
  CHECK(nn_model_set_frozen(m, nothing, 1) == NN_ERR_ARG && strstr(nn_last_error(), "features.*"),
        "a pattern matching nothing accepted: %s", nn_last_error());
  CHECK(nn_model_set_frozen(m, all, 1) == NN_ERR_ARG, "everything frozen accepted");
  CHECK(nn_model_set_trainable_from(m, from + 1) == NN_ERR_ARG, "an offset inside a layer accepted");
  CHECK(nn_model_trainable_from(m) == from, "a refusal changed the frozen set");
  free(kept);
  free(before);
  free(x);
  nn_model_free(m);
  nn_model_free(ref);
}

/* Frozen batch norm: inference mode in training forwards. */
static void check_resnet20_bn(void) {
  const char *pats[] = {"conv1.*", "bn1.*", "layer1.*"};
  nn_model_t *m = make("resnet20", 1, pats, 3);
  const size_t nb = nn_model_num_buffers(m);
  float *before = malloc(nb * sizeof(float)), *x = malloc(BATCH * 3 * 32 * 32 * sizeof(float));
  memcpy(before, nn_model_buffers(m), nb * sizeof(float));
  int32_t y[BATCH];
  for (int k = 0; k < 2; k++) step(m, x, y, k, 1);
  int frozen_moved = 0, trainable_still = 0, frozen_seen = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (sl->kind == NN_SLICE_COUNTER) {
      int64_t c = nn_model_counters(m)[sl->offset];
      CHECK(c == (nn_model_slice_frozen(m, i) ? 0 : 2), "%s = %lld", sl->name, (long long)c);
      continue;
    }
    if (sl->kind != NN_SLICE_BUFFER) continue;
    int same = memcmp(nn_model_buffers(m) + sl->offset, before + sl->offset,
                      sl->numel * sizeof(float)) == 0;
    if (nn_model_slice_frozen(m, i)) frozen_seen++, frozen_moved += !same;
    else trainable_still += same;
  }
  CHECK(frozen_seen == 2 * 7, "%d frozen running statistics (expected bn1 and layer1's 6)",
        frozen_seen);
  CHECK(frozen_moved == 0, "%d running statistics of frozen batch norms moved", frozen_moved);
  CHECK(trainable_still == 0, "%d running statistics of trainable batch norms did not move",
        trainable_still);
  free(before);
  free(x);
  nn_model_free(m);
}

int main(void) {
  nn_set_threads(1);
  check_lenet();
  check_resnet20_bn();
  if (!failures) printf("test_nn_freeze: frozen layers keep their weights and statistics\n");
  return failures ? 1 : 0;
}
