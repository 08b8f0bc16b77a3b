/* nn/optim.c: SGD, Adam, AdamW and RMSprop with the update rules of torch.optim (PyTorch
   1.13, single-tensor path, dampening 0, no amsgrad, RMSprop not centred), over one flat
   float array:

   SGD:   g = grad + wd * p;  buf = momentum * buf + g  (buf starts at 0, so the first
          step gives buf = g as in PyTorch);  nesterov: g = g + momentum * buf, else
          g = buf (when momentum > 0);  p -= lr * g
   Adam:  t += 1;  g = grad + wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
   AdamW: p *= 1 - lr * wd first (decoupled), then Adam without the L2 term.
   RMSprop: g = grad + wd * p;  s = alpha s + (1 - alpha) g^2  (alpha in cfg.beta2);
          d = g / (sqrt(s) + eps);  momentum > 0: buf = momentum * buf + d, p -= lr * buf;
          else p -= lr * d

   The per-element arithmetic is float; the bias corrections are computed in double as
   PyTorch computes them in Python floats. */
#include "nn/nn.h"

#include <math.h>
#include <stdlib.h>

struct nn_optim {
  nn_optim_config_t cfg;
  size_t count;
  float *state;        /* SGD: momentum buffer; Adam: m then v (2 * count); RMSprop: the
                          mean square then the momentum buffer (2 * count) */
  size_t state_count;
  int64_t step;
};

nn_status_t nn_optim_create(nn_optim_t **out, const nn_optim_config_t *cfg, size_t count) {
  if (!out || !cfg) return nn_set_error(NN_ERR_ARG, "nn_optim_create: NULL argument");
  *out = NULL;
  nn_optim_config_t c = *cfg;
  if (c.kind != NN_OPTIM_SGD && c.kind != NN_OPTIM_ADAM && c.kind != NN_OPTIM_ADAMW &&
      c.kind != NN_OPTIM_RMSPROP)
    return nn_set_error(NN_ERR_ARG, "nn_optim_create: unknown optimizer kind %d",
                        (int)c.kind);
  if (c.kind == NN_OPTIM_SGD) {
    if (c.momentum < 0.0f)
      return nn_set_error(NN_ERR_ARG, "nn_optim_create: SGD momentum %g < 0",
                          (double)c.momentum);
    if (c.nesterov && c.momentum <= 0.0f)
      return nn_set_error(NN_ERR_ARG, "nn_optim_create: nesterov needs momentum > 0 "
                          "(as torch.optim.SGD)");
  } else if (c.kind == NN_OPTIM_RMSPROP) {
    if (c.beta2 == 0.0f) c.beta2 = 0.99f;
    if (c.eps == 0.0f) c.eps = 1e-8f;
    if (!(c.beta2 > 0.0f && c.beta2 < 1.0f) || !(c.eps > 0.0f) || !(c.momentum >= 0.0f))
      return nn_set_error(NN_ERR_ARG, "nn_optim_create: RMSprop alpha %g must be in (0, 1), "
                          "eps %g > 0 and momentum %g >= 0", (double)c.beta2, (double)c.eps,
                          (double)c.momentum);
  } else {
    if (c.beta1 == 0.0f) c.beta1 = 0.9f;
    if (c.beta2 == 0.0f) c.beta2 = 0.999f;
    if (c.eps == 0.0f) c.eps = 1e-8f;
    if (!(c.beta1 > 0.0f && c.beta1 < 1.0f) || !(c.beta2 > 0.0f && c.beta2 < 1.0f) ||
        !(c.eps > 0.0f))
      return nn_set_error(NN_ERR_ARG, "nn_optim_create: Adam betas (%g, %g) must be in "
                          "(0, 1) and eps %g > 0", (double)c.beta1, (double)c.beta2,
                          (double)c.eps);
  }
  if (c.weight_decay < 0.0f)
    return nn_set_error(NN_ERR_ARG, "nn_optim_create: weight decay %g < 0",
                        (double)c.weight_decay);
  nn_optim_t *o = calloc(1, sizeof *o);
  if (!o) return nn_set_error(NN_ERR_NO_MEMORY, "nn_optim_create: out of memory");
  o->cfg = c;
  o->count = count;
  /* RMSprop keeps its momentum buffer even without momentum (zeros then), so that its
     state has one layout for checkpoints. */
  o->state_count = c.kind == NN_OPTIM_SGD ? count : 2 * count;
  o->state = calloc(o->state_count ? o->state_count : 1, sizeof(float));
  if (!o->state) {
    size_t want = o->state_count;
    free(o);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_optim_create: out of memory for %zu "
                        "floats of optimizer state", want);
  }
  *out = o;
  return NN_OK;
}

void nn_optim_free(nn_optim_t *o) {
  if (!o) return;
  free(o->state);
  free(o);
}

static void sgd_step(nn_optim_t *o, float *p, const float *g, float lr) {
  const float wd = o->cfg.weight_decay, mom = o->cfg.momentum;
  float *buf = o->state;
  size_t n = o->count;
  if (mom == 0.0f) {
    for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (o->cfg.nesterov) {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      buf[i] = mom * buf[i] + d;
      p[i] -= lr * (d + mom * buf[i]);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      buf[i] = mom * buf[i] + d;
      p[i] -= lr * buf[i];
    }
  }
}

static void adam_step(nn_optim_t *o, float *p, const float *g, float lr) {
  const float b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps;
  const float wd = o->cfg.weight_decay;
  const int decoupled = o->cfg.kind == NN_OPTIM_ADAMW;
  float *mv = o->state, *vv = o->state + o->count;
  o->step++;
  double bc1 = 1.0 - pow((double)b1, (double)o->step);
  double bc2 = 1.0 - pow((double)b2, (double)o->step);
  const float step_size = (float)((double)lr / bc1);
  const float bc2_sqrt = (float)sqrt(bc2);
  const float decay = decoupled ? 1.0f - lr * wd : 1.0f;
  const float l2 = decoupled ? 0.0f : wd;
  for (size_t i = 0; i < o->count; i++) {
    float pi = p[i] * decay;
    float d = g[i] + l2 * pi;
    mv[i] = b1 * mv[i] + (1.0f - b1) * d;
    vv[i] = b2 * vv[i] + (1.0f - b2) * d * d;
    float denom = sqrtf(vv[i]) / bc2_sqrt + eps;
    p[i] = pi - step_size * mv[i] / denom;
  }
}

static void rmsprop_step(nn_optim_t *o, float *p, const float *g, float lr) {
  const float alpha = o->cfg.beta2, eps = o->cfg.eps, wd = o->cfg.weight_decay;
  const float mom = o->cfg.momentum;
  float *sq = o->state, *buf = o->state + o->count;
  for (size_t i = 0; i < o->count; i++) {
    float d = g[i] + wd * p[i];
    sq[i] = alpha * sq[i] + (1.0f - alpha) * d * d;
    float step = d / (sqrtf(sq[i]) + eps);
    if (mom > 0.0f) {
      buf[i] = mom * buf[i] + step;
      step = buf[i];
    }
    p[i] -= lr * step;
  }
}

nn_status_t nn_optim_step(nn_optim_t *o, float *params, const float *grads, float lr) {
  if (!o || (o->count && (!params || !grads)))
    return nn_set_error(NN_ERR_ARG, "nn_optim_step: NULL argument");
  if (!isfinite(lr) || lr < 0.0f)
    return nn_set_error(NN_ERR_ARG, "nn_optim_step: learning rate %g, expected a finite "
                        "value >= 0", (double)lr);
  if (o->cfg.kind == NN_OPTIM_SGD) {
    o->step++;
    sgd_step(o, params, grads, lr);
  } else if (o->cfg.kind == NN_OPTIM_RMSPROP) {
    o->step++;
    rmsprop_step(o, params, grads, lr);
  } else {
    adam_step(o, params, grads, lr);
  }
  return NN_OK;
}

float *nn_optim_state(nn_optim_t *o, size_t *count) {
  if (count) *count = o ? o->state_count : 0;
  return o ? o->state : NULL;
}

int64_t *nn_optim_step_count(nn_optim_t *o) { return o ? &o->step : NULL; }
