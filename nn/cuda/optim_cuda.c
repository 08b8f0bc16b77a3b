/* nn/cuda/optim_cuda.c: SGD, Adam and AdamW on device memory, one fused kernel per step
   over the flat parameter buffer. Same rules and checks as nn/optim.c (torch.optim); the
   bias corrections are computed on the host in double, as there. */
#include "nn/cuda/cuda_internal.h"

#include <math.h>
#include <stdlib.h>

struct nn_cuda_optim {
  nn_optim_config_t cfg;
  size_t count;
  float *state;           /* device: SGD momentum buffer; Adam m then v */
  size_t state_count;
  int64_t step;
};

nn_status_t nn_cuda_optim_create(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                                 size_t count) {
  if (!out || !cfg) return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_create: NULL argument");
  *out = NULL;
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
  if (s == NN_OK) s = nn_cuda_memset0(o->state, o->state_count * sizeof(float));
  if (s == NN_OK) s = nn_cuda_synchronize();
  if (s != NN_OK) {
    nn_cuda_free(o->state);
    free(o);
    return s;
  }
  *out = o;
  return NN_OK;
}

void nn_cuda_optim_free(nn_cuda_optim_t *o) {
  if (!o) return;
  nn_cuda_free(o->state);
  free(o);
}

nn_status_t nn_cuda_optim_step(nn_cuda_optim_t *o, float *params_dev,
                               const float *grads_dev, float lr) {
  if (!o || (o->count && (!params_dev || !grads_dev)))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_step: NULL argument");
  if (!isfinite(lr) || lr < 0.0f)
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_step: learning rate %g, expected a "
                        "finite value >= 0", (double)lr);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const nn_optim_config_t *k = &o->cfg;
  o->step++;
  if (k->kind == NN_OPTIM_SGD) {
    NN_CUDA_CHECK(nn_cuk_sgd(c->stream, o->count, params_dev, grads_dev, o->state, lr,
                             k->weight_decay, k->momentum, k->nesterov));
    return NN_OK;
  }
  double bc1 = 1.0 - pow((double)k->beta1, (double)o->step);
  double bc2 = 1.0 - pow((double)k->beta2, (double)o->step);
  const int decoupled = k->kind == NN_OPTIM_ADAMW;
  NN_CUDA_CHECK(nn_cuk_adam(c->stream, o->count, params_dev, grads_dev, o->state,
                            o->state + o->count, (float)((double)lr / bc1),
                            (float)sqrt(bc2), k->beta1, k->beta2, k->eps,
                            decoupled ? 1.0f - lr * k->weight_decay : 1.0f,
                            decoupled ? 0.0f : k->weight_decay));
  return NN_OK;
}

nn_status_t nn_cuda_optim_state_to_host(nn_cuda_optim_t *o, float *state, size_t count,
                                        int64_t *step) {
  if (!o || count != o->state_count || (count && !state))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_state_to_host: expected %zu floats",
                        o ? o->state_count : 0);
  if (step) *step = o->step;
  return nn_cuda_to_host(state, o->state, count * sizeof(float));
}

nn_status_t nn_cuda_optim_state_to_device(nn_cuda_optim_t *o, const float *state,
                                          size_t count, int64_t step) {
  if (!o || count != o->state_count || (count && !state))
    return nn_set_error(NN_ERR_ARG, "nn_cuda_optim_state_to_device: expected %zu floats",
                        o ? o->state_count : 0);
  o->step = step;
  return nn_cuda_to_device(o->state, state, count * sizeof(float));
}
