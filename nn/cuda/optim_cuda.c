/* nn/cuda/optim_cuda.c: SGD, Adam and AdamW on device memory (not RMSprop), one fused
   kernel per step over the flat parameter buffer. Same rules and checks as nn/optim.c
   (torch.optim).
   The step count and Adam's bias corrections (in double, as there) live on the device
   and are computed there by a one-thread kernel before the update, so that a step can
   be skipped on a device flag (mixed precision: inf/NaN gradients) without the host
   waiting to read it. */
#include "nn/cuda/cuda_internal.h"

#include <math.h>
#include <stdlib.h>

struct nn_cuda_optim {
  nn_optim_config_t cfg;
  size_t count;
  float *state;           /* device: SGD momentum buffer; Adam m then v */
  size_t state_count;
  nn_cuda_optim_dev_t *dev;  /* device: step count and this step's scalars */
};

nn_status_t nn_cuda_optim_create(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                                 size_t count) {
  if (!out || !cfg) return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_create: NULL argument");
  *out = NULL;
  /* RMSprop has no device kernel (yet): refuse it rather than let the Adam kernel below
     run with its state. */
  if (cfg->kind == NN_OPTIM_RMSPROP)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_cuda_optim_create: RMSprop runs on the "
                        "CPU only (the GPU has SGD, Adam and AdamW kernels)");
  /* Validate and fill defaults exactly as the CPU optimizer does. */
  nn_optim_t *probe = NULL;
  nn_status_t s = nn_optim_create(&probe, cfg, 0);
  if (s != NN_OK) return s;
  nn_optim_free(probe);
  nn_cuda_optim_t *o = calloc(1, sizeof *o);
  if (!o) return nn_set_error(NN_ERR_NO_MEMORY, "nn_cuda_optim_create: out of memory");
  o->cfg = *cfg;
  if (o->cfg.kind != NN_OPTIM_SGD) {
    if (o->cfg.beta1 == 0.0f) o->cfg.beta1 = 0.9f;
    if (o->cfg.beta2 == 0.0f) o->cfg.beta2 = 0.999f;
    if (o->cfg.eps == 0.0f) o->cfg.eps = 1e-8f;
  }
  o->count = count;
  o->state_count = o->cfg.kind == NN_OPTIM_SGD ? count : 2 * count;
  s = nn_cuda_malloc((void **)&o->state, o->state_count * sizeof(float));
  if (s == NN_OK) s = nn_cuda_malloc((void **)&o->dev, sizeof *o->dev);
  if (s == NN_OK) s = nn_cuda_memset0(o->state, o->state_count * sizeof(float));
  if (s == NN_OK) s = nn_cuda_memset0(o->dev, sizeof *o->dev);
  if (s == NN_OK) s = nn_cuda_synchronize();
  if (s != NN_OK) {
    nn_cuda_free(o->state);
    nn_cuda_free(o->dev);
    free(o);
    return s;
  }
  *out = o;
  return NN_OK;
}

size_t nn_cuda_optim_count(const nn_cuda_optim_t *o) { return o ? o->count : 0; }

void nn_cuda_optim_free(nn_cuda_optim_t *o) {
  if (!o) return;
  nn_cuda_free(o->state);
  nn_cuda_free(o->dev);
  free(o);
}

nn_status_t nn_cuda_optim_step_skip(nn_cuda_optim_t *o, float *params_dev,
                                    const float *grads_dev, float lr, const int *skip_dev) {
  if (!o || (o->count && (!params_dev || !grads_dev)))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_step: NULL argument");
  if (!isfinite(lr) || lr < 0.0f)
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_step: learning rate %g, expected a "
                        "finite value >= 0", (double)lr);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const nn_optim_config_t *k = &o->cfg;
  const int adam = k->kind != NN_OPTIM_SGD;
  NN_CUDA_CHECK(nn_cuk_optim_prepare(c->stream, o->dev, skip_dev, adam, (double)k->beta1,
                                     (double)k->beta2, lr));
  if (!adam) {
    NN_CUDA_CHECK(nn_cuk_sgd(c->stream, o->count, params_dev, grads_dev, o->state, lr,
                             k->weight_decay, k->momentum, k->nesterov, o->dev));
    return NN_OK;
  }
  const int decoupled = k->kind == NN_OPTIM_ADAMW;
  NN_CUDA_CHECK(nn_cuk_adam(c->stream, o->count, params_dev, grads_dev, o->state,
                            o->state + o->count, k->beta1, k->beta2, k->eps,
                            decoupled ? 1.0f - lr * k->weight_decay : 1.0f,
                            decoupled ? 0.0f : k->weight_decay, o->dev));
  return NN_OK;
}

nn_status_t nn_cuda_optim_step(nn_cuda_optim_t *o, float *params_dev,
                               const float *grads_dev, float lr) {
  return nn_cuda_optim_step_skip(o, params_dev, grads_dev, lr, NULL);
}

nn_status_t nn_cuda_optim_state_to_host(nn_cuda_optim_t *o, float *state, size_t count,
                                        int64_t *step) {
  if (!o || count != o->state_count || (count && !state))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_state_to_host: expected %zu floats",
                        o ? o->state_count : 0);
  nn_cuda_optim_dev_t d;
  nn_status_t s = nn_cuda_to_host(&d, o->dev, sizeof d);  /* waits for pending steps */
  if (s == NN_OK) s = nn_cuda_to_host(state, o->state, count * sizeof(float));
  if (s == NN_OK && step) *step = (int64_t)d.step;
  return s;
}

nn_status_t nn_cuda_optim_state_to_device(nn_cuda_optim_t *o, const float *state,
                                          size_t count, int64_t step) {
  if (!o || count != o->state_count || (count && !state))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_state_to_device: expected %zu floats",
                        o ? o->state_count : 0);
  if (step < 0)
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_state_to_device: step %lld < 0",
                        (long long)step);
  nn_cuda_optim_dev_t d = {(long long)step, 0.0f, 0.0f, 0};
  nn_status_t s = nn_cuda_to_device(o->dev, &d, sizeof d);
  if (s == NN_OK) s = nn_cuda_to_device(o->state, state, count * sizeof(float));
  return s;
}
