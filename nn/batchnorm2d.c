/* nn/batchnorm2d.c: batch normalisation over N, H, W per channel (CPU reference).

   Training, per channel c over its M = n*h*w values:
     mean, var = biased variance (used to normalise), invstd = 1/sqrt(var + eps)
     y = (x - mean) * invstd * gamma + beta
     running_mean = (1-momentum) running_mean + momentum mean
     running_var  = (1-momentum) running_var  + momentum var * M/(M-1)   (unbiased)
   exactly as PyTorch. Backward with xhat = (x - mean) * invstd:
     dbeta += sum dy;  dgamma += sum dy xhat
     dx += gamma invstd / M * (M dy - sum dy - xhat sum(dy xhat))
   Channels are independent, so threads split the channels. Sums are accumulated in
   float within a plane and in double across planes: M reaches 64*32*32 = 65536 and one
   float sum over all of it would drift. */
#include "nn/nn.h"
#include "nn/backward_store_internal.h"
#include "nn/simd_internal.h"
#include "nn/threads_internal.h"

#include <math.h>

typedef struct {
  const nn_batchnorm2d_shape_t *s;
  const float *x, *gamma, *beta, *mean_in, *var_in, *invstd_in, *dy;
  float *running_mean, *running_var, *y, *save_mean, *save_invstd, *dx, *dgamma, *dbeta;
  int dx_add;   /* backward: dx += (else dx =) */
} bn_job_t;

static nn_status_t bn_check(const nn_batchnorm2d_shape_t *s, const char *what) {
  if (!s) return nn_set_error(NN_ERR_ARG, "%s: shape is NULL", what);
  if (s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1 || !(s->eps > 0))
    return nn_set_error(NN_ERR_ARG, "%s: bad shape n=%d c=%d h=%d w=%d eps=%g (need >= 1, eps > 0)",
                        what, s->n, s->c, s->h, s->w, (double)s->eps);
  return NN_OK;
}

/* Plane loops, 8 floats per step on SSE vectors (GCC does not vectorise float
   reductions at -O2). */
static float plane_sum(const float *x, size_t n) {
  nn_v4f a0 = nn_v4_set1(0), a1 = a0;
  size_t p = 0;
  for (; p + 8 <= n; p += 8) {
    a0 += nn_v4_load(x + p);
    a1 += nn_v4_load(x + p + 4);
  }
  float acc = nn_v4_sum(a0 + a1);
  for (; p < n; p++) acc += x[p];
  return acc;
}

static float plane_sqdev(const float *x, size_t n, float mean) {
  const nn_v4f m = nn_v4_set1(mean);
  nn_v4f a0 = nn_v4_set1(0), a1 = a0;
  size_t p = 0;
  for (; p + 8 <= n; p += 8) {
    nn_v4f d0 = nn_v4_load(x + p) - m, d1 = nn_v4_load(x + p + 4) - m;
    a0 += d0 * d0;
    a1 += d1 * d1;
  }
  float acc = nn_v4_sum(a0 + a1);
  for (; p < n; p++) acc += (x[p] - mean) * (x[p] - mean);
  return acc;
}

/* y = x * a + b over one plane. */
static void bn_affine_plane(const float *x, float *y, size_t n, float a, float b) {
  const nn_v4f va = nn_v4_set1(a), vb = nn_v4_set1(b);
  size_t p = 0;
  for (; p + 8 <= n; p += 8) {
    nn_v4_store(y + p, nn_v4_load(x + p) * va + vb);
    nn_v4_store(y + p + 4, nn_v4_load(x + p + 4) * va + vb);
  }
  for (; p < n; p++) y[p] = x[p] * a + b;
}

/* *sdy += sum dy, *sdyx += sum dy (x - mean). */
static void plane_backward_sums(const float *x, const float *dy, size_t n, float mean,
                                double *sdy, double *sdyx) {
  const nn_v4f m = nn_v4_set1(mean);
  nn_v4f a0 = nn_v4_set1(0), a1 = a0, b0 = a0, b1 = a0;
  size_t p = 0;
  for (; p + 8 <= n; p += 8) {
    nn_v4f d0 = nn_v4_load(dy + p), d1 = nn_v4_load(dy + p + 4);
    a0 += d0;
    a1 += d1;
    b0 += d0 * (nn_v4_load(x + p) - m);
    b1 += d1 * (nn_v4_load(x + p + 4) - m);
  }
  float s0 = nn_v4_sum(a0 + a1), s1 = nn_v4_sum(b0 + b1);
  for (; p < n; p++) {
    s0 += dy[p];
    s1 += dy[p] * (x[p] - mean);
  }
  *sdy += s0;
  *sdyx += s1;
}

/* dx += k dy + kx (x - mean) + k0, or (add 0) dx = the same without reading dx. */
static void plane_backward_dx(const float *x, const float *dy, float *dx, size_t n, float mean,
                              float k, float kx, float k0, int add) {
  const nn_v4f m = nn_v4_set1(mean), vk = nn_v4_set1(k), vkx = nn_v4_set1(kx),
               vk0 = nn_v4_set1(k0);
  size_t p = 0;
  if (add) {
    for (; p + 4 <= n; p += 4)
      nn_v4_store(dx + p, nn_v4_load(dx + p) + vk * nn_v4_load(dy + p) +
                              vkx * (nn_v4_load(x + p) - m) + vk0);
    for (; p < n; p++) dx[p] += k * dy[p] + kx * (x[p] - mean) + k0;
  } else {
    for (; p + 4 <= n; p += 4)
      nn_v4_store(dx + p, vk * nn_v4_load(dy + p) + vkx * (nn_v4_load(x + p) - m) + vk0);
    for (; p < n; p++) dx[p] = k * dy[p] + kx * (x[p] - mean) + k0;
  }
}

static void bn_train_channel(void *vjob, int c, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const double m = (double)s->n * (double)hw;
  double sum = 0;
  for (int i = 0; i < s->n; i++) sum += plane_sum(j->x + i * cs + c * hw, hw);
  const double mean = sum / m;
  const float meanf = (float)mean;
  double sq = 0;
  for (int i = 0; i < s->n; i++) sq += plane_sqdev(j->x + i * cs + c * hw, hw, meanf);
  const double var = sq / m;
  const double invstd = 1.0 / sqrt(var + (double)s->eps);
  const float g = j->gamma ? j->gamma[c] : 1.0f, b = j->beta ? j->beta[c] : 0.0f;
  const float a = (float)(g * invstd), sh = (float)(b - mean * g * invstd);
  for (int i = 0; i < s->n; i++)
    bn_affine_plane(j->x + i * cs + c * hw, j->y + i * cs + c * hw, hw, a, sh);
  if (j->save_mean) j->save_mean[c] = meanf;
  if (j->save_invstd) j->save_invstd[c] = (float)invstd;
  const double mom = s->momentum;
  if (j->running_mean)
    j->running_mean[c] = (float)((1 - mom) * j->running_mean[c] + mom * mean);
  if (j->running_var)
    j->running_var[c] = (float)((1 - mom) * j->running_var[c] + mom * var * m / (m - 1));
}

/* Channel tasks are cheap to hand out; one parallel_for splits them over the workers. */
static void bn_run(int channels, nn_task_fn fn, bn_job_t *job, size_t work) {
  if (work < (1u << 15)) {
    for (int c = 0; c < channels; c++) fn(job, c, 0);
  } else {
    nn_parallel_for(channels, fn, job);
  }
}

nn_status_t nn_batchnorm2d_forward_train(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var, float *y,
                                         float *save_mean, float *save_invstd) {
  nn_status_t st = bn_check(s, "nn_batchnorm2d_forward_train");
  if (st != NN_OK) return st;
  if (!x || !y) return nn_set_error(NN_ERR_ARG, "nn_batchnorm2d_forward_train: x or y is NULL");
  if ((size_t)s->n * s->h * s->w < 2)
    return nn_set_error(NN_ERR_ARG, "nn_batchnorm2d_forward_train: need more than 1 value per "
                        "channel in training (n*h*w = %d)", s->n * s->h * s->w);
  bn_job_t job = {.s = s, .x = x, .gamma = gamma, .beta = beta, .running_mean = running_mean,
                  .running_var = running_var, .y = y, .save_mean = save_mean,
                  .save_invstd = save_invstd};
  bn_run(s->c, bn_train_channel, &job, (size_t)s->n * s->c * s->h * s->w);
  return NN_OK;
}

static void bn_infer_channel(void *vjob, int c, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const double invstd = 1.0 / sqrt((double)j->var_in[c] + (double)s->eps);
  const float g = j->gamma ? j->gamma[c] : 1.0f, b = j->beta ? j->beta[c] : 0.0f;
  const float a = (float)(g * invstd), sh = (float)(b - j->mean_in[c] * g * invstd);
  for (int i = 0; i < s->n; i++)
    bn_affine_plane(j->x + i * cs + c * hw, j->y + i * cs + c * hw, hw, a, sh);
}

nn_status_t nn_batchnorm2d_forward_infer(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *running_mean,
                                         const float *running_var, float *y) {
  nn_status_t st = bn_check(s, "nn_batchnorm2d_forward_infer");
  if (st != NN_OK) return st;
  if (!x || !y || !running_mean || !running_var)
    return nn_set_error(NN_ERR_ARG, "nn_batchnorm2d_forward_infer: x, y or running stats NULL");
  bn_job_t job = {.s = s, .x = x, .gamma = gamma, .beta = beta, .mean_in = running_mean,
                  .var_in = running_var, .y = y};
  bn_run(s->c, bn_infer_channel, &job, (size_t)s->n * s->c * s->h * s->w);
  return NN_OK;
}

static void bn_backward_channel(void *vjob, int c, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const float mean = j->mean_in[c], invstd = j->invstd_in[c];
  double sdy = 0, sdyx = 0;  /* sum dy, sum dy (x - mean) */
  for (int i = 0; i < s->n; i++)
    plane_backward_sums(j->x + i * cs + c * hw, j->dy + i * cs + c * hw, hw, mean, &sdy, &sdyx);
  const double sdyxhat = sdyx * invstd;
  if (j->dbeta) j->dbeta[c] += (float)sdy;
  if (j->dgamma) j->dgamma[c] += (float)sdyxhat;
  if (!j->dx) return;
  const double m = (double)s->n * (double)hw;
  const float g = j->gamma ? j->gamma[c] : 1.0f;
  /* dx += k (dy - sdy/m - (x - mean) invstd^2 sdyx/m), k = gamma invstd. */
  const float k = g * invstd;
  const float kx = (float)(-(double)k * invstd * invstd * sdyx / m);
  const float k0 = (float)(-(double)k * sdy / m);
  for (int i = 0; i < s->n; i++)
    plane_backward_dx(j->x + i * cs + c * hw, j->dy + i * cs + c * hw, j->dx + i * cs + c * hw,
                      hw, mean, k, kx, k0, j->dx_add);
}

nn_status_t nn_batchnorm2d_backward(const nn_batchnorm2d_shape_t *s, const float *x,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *dy, float *dx,
                                    float *dgamma, float *dbeta) {
  return nn_batchnorm2d_backward_ex(s, x, gamma, save_mean, save_invstd, dy, dx, 1, dgamma,
                                    dbeta);
}

nn_status_t nn_batchnorm2d_backward_ex(const nn_batchnorm2d_shape_t *s, const float *x,
                                       const float *gamma, const float *save_mean,
                                       const float *save_invstd, const float *dy, float *dx,
                                       int dx_add, float *dgamma, float *dbeta) {
  nn_status_t st = bn_check(s, "nn_batchnorm2d_backward");
  if (st != NN_OK) return st;
  if (!x || !save_mean || !save_invstd || !dy)
    return nn_set_error(NN_ERR_ARG, "nn_batchnorm2d_backward: x, saved statistics or dy NULL");
  bn_job_t job = {.s = s, .x = x, .gamma = gamma, .mean_in = save_mean,
                  .invstd_in = save_invstd, .dy = dy, .dx = dx, .dgamma = dgamma, .dbeta = dbeta,
                  .dx_add = dx_add};
  bn_run(s->c, bn_backward_channel, &job, (size_t)s->n * s->c * s->h * s->w);
  return NN_OK;
}
