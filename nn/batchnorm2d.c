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
   float sum over all of it would drift.
   Memory order: a task takes a block of channels and runs each pass sample by sample
   over the block's planes, which lie side by side in NCHW: a run of block x h x w
   floats per sample that the prefetchers follow, where one channel at a time reads one
   plane (often a single 4 KiB page) every c*h*w floats, each a cold start. That beats
   keeping a channel's values in L2 between its passes: blocks sized to fit L2 (512 KiB
   of the batch) left resnet20's batch norms at 10 ms forward and 14 ms backward a step,
   blocks of all channels (one per thread) took them to 6 and 8. Every channel's sums
   still add its planes in sample order: the results are those of one channel at a
   time, bit for bit. */
#include "nn/nn.h"
#include "nn/backward_store_internal.h"
#include "nn/simd_internal.h"
#include "nn/threads_internal.h"

#include <math.h>

/* At most this many channels a block: its per-channel sums live on the stack. */
#define BN_BLOCK_MAX 64

typedef struct {
  const nn_batchnorm2d_shape_t *s;
  const float *x, *gamma, *beta, *mean_in, *var_in, *invstd_in, *dy;
  float *running_mean, *running_var, *y, *save_mean, *save_invstd, *dx, *dgamma, *dbeta;
  int dx_add;   /* backward: dx += (else dx =) */
  int block;    /* channels per task */
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

static void bn_train_block(void *vjob, int t, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const double m = (double)s->n * (double)hw;
  const int c0 = t * j->block, c1 = c0 + j->block < s->c ? c0 + j->block : s->c;
  double sum[BN_BLOCK_MAX] = {0}, sq[BN_BLOCK_MAX] = {0};
  float meanf[BN_BLOCK_MAX], a[BN_BLOCK_MAX], sh[BN_BLOCK_MAX];
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++) sum[c - c0] += plane_sum(j->x + i * cs + c * hw, hw);
  for (int c = c0; c < c1; c++) meanf[c - c0] = (float)(sum[c - c0] / m);
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++)
      sq[c - c0] += plane_sqdev(j->x + i * cs + c * hw, hw, meanf[c - c0]);
  for (int c = c0; c < c1; c++) {
    const double mean = sum[c - c0] / m, var = sq[c - c0] / m;
    const double invstd = 1.0 / sqrt(var + (double)s->eps);
    const float g = j->gamma ? j->gamma[c] : 1.0f, b = j->beta ? j->beta[c] : 0.0f;
    a[c - c0] = (float)(g * invstd);
    sh[c - c0] = (float)(b - mean * g * invstd);
    if (j->save_mean) j->save_mean[c] = meanf[c - c0];
    if (j->save_invstd) j->save_invstd[c] = (float)invstd;
    const double mom = s->momentum;
    if (j->running_mean)
      j->running_mean[c] = (float)((1 - mom) * j->running_mean[c] + mom * mean);
    if (j->running_var)
      j->running_var[c] = (float)((1 - mom) * j->running_var[c] + mom * var * m / (m - 1));
  }
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++)
      bn_affine_plane(j->x + i * cs + c * hw, j->y + i * cs + c * hw, hw, a[c - c0], sh[c - c0]);
}

/* Runs fn over the channel blocks (job->block set here: as many blocks as threads, of
   at most BN_BLOCK_MAX channels); one parallel_for splits them over the workers, small
   layers run inline. */
static void bn_run(nn_task_fn fn, bn_job_t *job) {
  const nn_batchnorm2d_shape_t *s = job->s;
  const int small = (size_t)s->n * s->c * s->h * s->w < (1u << 15);
  const int threads = small ? 1 : nn_threads();
  int block = (s->c + threads - 1) / threads;
  if (block > BN_BLOCK_MAX) block = BN_BLOCK_MAX;
  job->block = block;
  const int tasks = (s->c + block - 1) / block;
  if (tasks == 1 || threads == 1) {
    for (int t = 0; t < tasks; t++) fn(job, t, 0);
  } else {
    nn_parallel_for(tasks, fn, job);
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
  bn_run(bn_train_block, &job);
  return NN_OK;
}

static void bn_infer_block(void *vjob, int t, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const int c0 = t * j->block, c1 = c0 + j->block < s->c ? c0 + j->block : s->c;
  float a[BN_BLOCK_MAX], sh[BN_BLOCK_MAX];
  for (int c = c0; c < c1; c++) {
    const double invstd = 1.0 / sqrt((double)j->var_in[c] + (double)s->eps);
    const float g = j->gamma ? j->gamma[c] : 1.0f, b = j->beta ? j->beta[c] : 0.0f;
    a[c - c0] = (float)(g * invstd);
    sh[c - c0] = (float)(b - j->mean_in[c] * g * invstd);
  }
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++)
      bn_affine_plane(j->x + i * cs + c * hw, j->y + i * cs + c * hw, hw, a[c - c0], sh[c - c0]);
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
  bn_run(bn_infer_block, &job);
  return NN_OK;
}

static void bn_backward_block(void *vjob, int t, int worker) {
  (void)worker;
  const bn_job_t *j = vjob;
  const nn_batchnorm2d_shape_t *s = j->s;
  const size_t hw = (size_t)s->h * s->w, cs = (size_t)s->c * hw;
  const int c0 = t * j->block, c1 = c0 + j->block < s->c ? c0 + j->block : s->c;
  double sdy[BN_BLOCK_MAX] = {0}, sdyx[BN_BLOCK_MAX] = {0}; /* sum dy, sum dy (x - mean) */
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++)
      plane_backward_sums(j->x + i * cs + c * hw, j->dy + i * cs + c * hw, hw, j->mean_in[c],
                          &sdy[c - c0], &sdyx[c - c0]);
  float k[BN_BLOCK_MAX], kx[BN_BLOCK_MAX], k0[BN_BLOCK_MAX];
  const double m = (double)s->n * (double)hw;
  for (int c = c0; c < c1; c++) {
    const float invstd = j->invstd_in[c];
    const double sdyxhat = sdyx[c - c0] * invstd;
    if (j->dbeta) j->dbeta[c] += (float)sdy[c - c0];
    if (j->dgamma) j->dgamma[c] += (float)sdyxhat;
    /* dx += k (dy - sdy/m - (x - mean) invstd^2 sdyx/m), k = gamma invstd. */
    const float g = j->gamma ? j->gamma[c] : 1.0f;
    k[c - c0] = g * invstd;
    kx[c - c0] = (float)(-(double)k[c - c0] * invstd * invstd * sdyx[c - c0] / m);
    k0[c - c0] = (float)(-(double)k[c - c0] * sdy[c - c0] / m);
  }
  if (!j->dx) return;
  for (int i = 0; i < s->n; i++)
    for (int c = c0; c < c1; c++)
      plane_backward_dx(j->x + i * cs + c * hw, j->dy + i * cs + c * hw, j->dx + i * cs + c * hw,
                        hw, j->mean_in[c], k[c - c0], kx[c - c0], k0[c - c0], j->dx_add);
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
  bn_run(bn_backward_block, &job);
  return NN_OK;
}
