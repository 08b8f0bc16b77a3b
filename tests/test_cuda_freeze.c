/* test_cuda_freeze: frozen layers on the GPU (nn_model_set_frozen; the CPU side is
   test_nn_freeze). resnet20 at batch 8 with conv1, bn1 and layer1 frozen, on the CPU and
   on the GPU, three SGD steps (momentum, weight decay) on the same batches: on the GPU
   every frozen parameter and every frozen batch norm's running statistics stay bit for
   bit (inference mode), the trainable parameters follow the CPU's, the optimizer holds
   the trainable range only. Then both unfreeze (the GPU from its host mirror) and take
   one more step: conv1 moves on the GPU as on the CPU. Exits 77 without a CUDA device. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"
#include "tests/cuda_check.h"

#include <stdio.h>
#include <string.h>

enum { BATCH = 8, STEPS = 3 };

static nn_model_t *make(int gpu) {
  nn_model_config_t cfg = {.batch = BATCH, .seed = 42};
  nn_model_t *m;
  CC_OK(nn_model_create(&m, "resnet20", &cfg));
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 1e-3f};
  CC_OK(nn_model_optim_create(m, &oc));
  const char *pats[] = {"conv1.*", "bn1.*", "layer1.*"};
  CC_OK(nn_model_set_frozen(m, pats, 3));
  if (gpu) CC_OK(nn_model_to_device(m, NN_DEVICE_CUDA));
  return m;
}

static void step(nn_model_t *m, const float *x, const int32_t *y) {
  CC_OK(nn_model_forward(m, x, BATCH, 1));
  CC_OK(nn_model_loss(m, y, NULL, NULL));
  CC_OK(nn_model_backward(m, NULL, NULL));
  CC_OK(nn_model_optim_step(m, 0.05f));
}

/* Whether the frozen part of the GPU's host mirror equals the start bit for bit. */
static void check_frozen_kept(nn_model_t *g, const float *p0, const float *b0) {
  int bad = 0;
  for (int i = 0; i < nn_model_num_slices(g); i++) {
    const nn_slice_t *s = nn_model_slice(g, i);
    if (!nn_model_slice_frozen(g, i) || s->kind == NN_SLICE_COUNTER) continue;
    const float *now = (s->kind == NN_SLICE_PARAM ? nn_model_params(g) : nn_model_buffers(g)) +
                       s->offset;
    const float *then = (s->kind == NN_SLICE_PARAM ? p0 : b0) + s->offset;
    if (memcmp(now, then, s->numel * sizeof(float)) != 0) {
      printf("FAIL %s changed on the GPU while frozen\n", s->name);
      bad = 1;
    }
  }
  printf("%-4s frozen parameters and running statistics kept on the GPU\n", bad ? "FAIL" : "ok");
  cc_failures += bad;
}

int main(void) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  nn_model_t *c = make(0), *g = make(1);
  const size_t np = nn_model_param_len(c), nb = nn_model_num_buffers(c);
  const size_t from = nn_model_trainable_from(g);
  float *p0 = cc_host(np), *b0 = cc_host(nb);
  memcpy(p0, nn_model_params(c), np * sizeof(float));
  memcpy(b0, nn_model_buffers(c), nb * sizeof(float));
  size_t count = 0;
  nn_model_optim_state(g, &count);
  if (count != np - from) {
    printf("FAIL the GPU's optimizer holds %zu floats, the trainable range %zu\n", count, np - from);
    cc_failures++;
  }
  float *x = cc_random((size_t)BATCH * 3 * 32 * 32);
  int32_t y[BATCH];
  for (int i = 0; i < BATCH; i++) y[i] = (i * 3 + 1) % 10;
  for (int k = 0; k < STEPS; k++) {
    step(c, x, y);
    step(g, x, y);
  }
  CC_OK(nn_model_sync_to_host(g));
  check_frozen_kept(g, p0, b0);
  cc_compare("trainable parameters after 3 steps", nn_model_params(g) + from, 0,
             nn_model_params(c) + from, np - from, 1e-3);
  /* Unfreeze: the GPU's optimizer is made anew from the host mirror's state. */
  CC_OK(nn_model_set_frozen(c, NULL, 0));
  CC_OK(nn_model_set_frozen(g, NULL, 0));
  step(c, x, y);
  step(g, x, y);
  CC_OK(nn_model_sync_to_host(g));
  if (memcmp(nn_model_params(g), p0, 16 * sizeof(float)) == 0) {
    printf("FAIL conv1 did not move on the GPU after unfreezing\n");
    cc_failures++;
  }
  cc_compare("every parameter after unfreezing and a step", nn_model_params(g), 0,
             nn_model_params(c), np, 1e-3);
  nn_model_free(c);
  nn_model_free(g);
  free(p0);
  free(b0);
  free(x);
  return cc_finish("frozen layers on the GPU: kept, and trainable again after unfreezing");
}
