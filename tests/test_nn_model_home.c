/* test_nn_model_home: the device-neutral model API on the CPU backend, the contract a
   training loop relies on to run unchanged on either device: the model's own optimizer
   (nn_model_optim_create/_step) steps exactly as nn_optim on the host arrays and exposes
   its state and step count; the home parameters and gradients are the host arrays;
   nn_model_scale_grads scales exactly the range asked; nn_model_zero_grads zeroes; the
   syncs are no-ops; the misuses fail with NN_ERR_ARG. */
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

int main(void) {
  nn_model_config_t cfg = {.batch = 4, .seed = 7};
  nn_model_t *m = NULL;
  CHECK(nn_model_create(&m, "lenet", &cfg) == NN_OK, "%s", nn_last_error());
  if (!m) return 1;
  const size_t np = nn_model_param_len(m);
  CHECK(nn_model_device(m) == NN_DEVICE_CPU, "a new model is on the CPU");
  CHECK(nn_model_params_home(m) == nn_model_params(m), "home params are the host array");
  CHECK(nn_model_grads_home(m) == nn_model_grads(m), "home grads are the host array");
  CHECK(nn_model_to_device(m, NN_DEVICE_CPU) == NN_OK, "to the CPU: nothing to do");
  CHECK(nn_model_optim_step(m, 0.1f) == NN_ERR_ARG, "a step without an optimizer");
  size_t count = 1;
  CHECK(nn_model_optim_state(m, &count) == NULL && count == 0, "no state before create");
  nn_optim_config_t bad = {.kind = NN_OPTIM_SGD, .momentum = -1.0f};
  CHECK(nn_model_optim_create(m, &bad) == NN_ERR_ARG, "negative momentum refused");

  /* One step through the model against nn_optim on copies of the same arrays. */
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t nx = (size_t)cfg.batch * c * h * w;
  float *x = malloc(nx * sizeof(float));
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  int32_t labels[4] = {1, 3, 5, 7};
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 1e-4f};
  CHECK(nn_model_optim_create(m, &oc) == NN_OK, "%s", nn_last_error());
  float loss = 0;
  CHECK(nn_model_forward(m, x, cfg.batch, 1) == NN_OK, "%s", nn_last_error());
  CHECK(nn_model_loss(m, labels, &loss, NULL) == NN_OK, "%s", nn_last_error());
  CHECK(nn_model_backward(m, NULL, NULL) == NN_OK, "%s", nn_last_error());
  float *p = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
  memcpy(p, nn_model_params(m), np * sizeof(float));
  memcpy(g, nn_model_grads(m), np * sizeof(float));
  nn_optim_t *o = NULL;
  CHECK(nn_optim_create(&o, &oc, np) == NN_OK, "%s", nn_last_error());
  CHECK(nn_optim_step(o, p, g, 0.05f) == NN_OK, "%s", nn_last_error());
  CHECK(nn_model_optim_step(m, 0.05f) == NN_OK, "%s", nn_last_error());
  CHECK(memcmp(p, nn_model_params(m), np * sizeof(float)) == 0,
        "the model's step equals nn_optim_step bit for bit");
  size_t on = 0;
  const float *os = nn_optim_state(o, &on);
  const float *ms = nn_model_optim_state(m, &count);
  CHECK(count == on && memcmp(os, ms, on * sizeof(float)) == 0,
        "optimizer state: %zu floats, want %zu, equal", count, on);
  CHECK(*nn_model_optim_step_count(m) == *nn_optim_step_count(o), "step count %lld",
        (long long)*nn_model_optim_step_count(m));
  CHECK(nn_model_sync_to_host(m) == NN_OK && nn_model_sync_to_device(m) == NN_OK,
        "syncs on the CPU do nothing");

  /* Scaling a range touches exactly that range; zeroing zeroes everything. */
  float *gr = nn_model_grads(m);
  for (size_t i = 0; i < np; i++) gr[i] = 1.0f + (float)(i % 7);
  memcpy(g, gr, np * sizeof(float));
  size_t from = np / 3, to = 2 * np / 3;
  CHECK(nn_model_scale_grads(m, from, to, 0.75f) == NN_OK, "%s", nn_last_error());
  int wrong = 0;
  for (size_t i = 0; i < np; i++)
    wrong += gr[i] != (i >= from && i < to ? g[i] * 0.75f : g[i]);
  CHECK(wrong == 0, "%d gradients scaled wrongly", wrong);
  CHECK(nn_model_scale_grads(m, to, from, 2.0f) == NN_ERR_ARG, "reversed range refused");
  CHECK(nn_model_scale_grads(m, 0, np + 1, 2.0f) == NN_ERR_ARG, "range past the end refused");
  CHECK(nn_model_zero_grads(m) == NN_OK, "%s", nn_last_error());
  wrong = 0;
  for (size_t i = 0; i < np; i++) wrong += gr[i] != 0.0f;
  CHECK(wrong == 0, "%d gradients not zeroed", wrong);

  float scale = 0;
  int64_t skipped = -1;
  CHECK(nn_model_loss_scale(m, &scale, &skipped) == NN_OK && scale == 1.0f && skipped == 0,
        "no loss scaling on the CPU: %g, %lld", (double)scale, (long long)skipped);
  nn_optim_free(o);
  nn_model_free(m);
  free(x);
  free(p);
  free(g);
  if (failures) {
    printf("test_nn_model_home: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_nn_model_home: ok\n");
  return 0;
}
