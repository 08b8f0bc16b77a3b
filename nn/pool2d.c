/* nn/pool2d.c: max, average and global average pooling (CPU reference).

   Max pooling treats padding as -infinity and records, per output, the index inside its
   input plane (ih*w_in + iw) of the first maximum, as PyTorch, for backward. Average
   pooling divides by kh*kw whatever the padding (count_include_pad=True, ceil_mode=False:
   every window then lies inside the padded input). Planes (n*c of them) are independent:
   threads split them. */
#include "nn/nn.h"
#include "nn/simd_internal.h"
#include "nn/threads_internal.h"

#include <math.h>
#include <string.h>

nn_status_t nn_pool2d_shape(nn_pool2d_shape_t *s) {
  if (!s) return nn_set_error(NN_ERR_ARG, "nn_pool2d_shape: shape is NULL");
  if (s->n < 1 || s->c < 1 || s->h_in < 1 || s->w_in < 1 || s->kh < 1 || s->kw < 1 ||
      s->stride_h < 1 || s->stride_w < 1 || s->pad_h < 0 || s->pad_w < 0)
    return nn_set_error(NN_ERR_ARG,
                        "pool2d: bad shape n=%d c=%d h_in=%d w_in=%d kernel=%dx%d stride=%dx%d "
                        "pad=%dx%d (sizes and strides must be >= 1, pads >= 0)",
                        s->n, s->c, s->h_in, s->w_in, s->kh, s->kw, s->stride_h, s->stride_w,
                        s->pad_h, s->pad_w);
  if (2 * s->pad_h > s->kh || 2 * s->pad_w > s->kw)
    return nn_set_error(NN_ERR_ARG, "pool2d: padding %dx%d must be at most half the kernel %dx%d",
                        s->pad_h, s->pad_w, s->kh, s->kw);
  if (s->h_in + 2 * s->pad_h < s->kh || s->w_in + 2 * s->pad_w < s->kw)
    return nn_set_error(NN_ERR_ARG, "pool2d: kernel %dx%d larger than the padded input %dx%d",
                        s->kh, s->kw, s->h_in + 2 * s->pad_h, s->w_in + 2 * s->pad_w);
  s->h_out = (s->h_in + 2 * s->pad_h - s->kh) / s->stride_h + 1;
  s->w_out = (s->w_in + 2 * s->pad_w - s->kw) / s->stride_w + 1;
  return NN_OK;
}

static nn_status_t pool_check(const nn_pool2d_shape_t *s, const char *what) {
  if (!s) return nn_set_error(NN_ERR_ARG, "%s: shape is NULL", what);
  nn_pool2d_shape_t t = *s;
  nn_status_t st = nn_pool2d_shape(&t);
  if (st != NN_OK) return st;
  if (t.h_out != s->h_out || t.w_out != s->w_out)
    return nn_set_error(NN_ERR_ARG, "%s: h_out/w_out %dx%d do not match the shape (%dx%d); "
                        "call nn_pool2d_shape first", what, s->h_out, s->w_out, t.h_out, t.w_out);
  return NN_OK;
}

typedef struct {
  const nn_pool2d_shape_t *s;
  const float *x, *dy;
  float *y, *dx;
  int32_t *argmax;
  const int32_t *argmax_in;
  int planes_per_task, planes;
} pool_job_t;

/* Splits the planes into tasks of a few planes each and runs them. */
static void pool_run(pool_job_t *j, nn_task_fn fn) {
  const size_t per_plane = (size_t)j->s->h_in * j->s->w_in;
  j->planes = j->s->n * j->s->c;
  size_t total = per_plane * (size_t)j->planes;
  int tasks = total < (1u << 15) ? 1 : nn_parallel_workers(j->planes) * 4;
  if (tasks > j->planes) tasks = j->planes;
  j->planes_per_task = (j->planes + tasks - 1) / tasks;
  tasks = (j->planes + j->planes_per_task - 1) / j->planes_per_task;
  nn_parallel_for(tasks, fn, j);
}

static void maxpool_forward_task(void *vj, int t, int worker) {
  (void)worker;
  const pool_job_t *j = vj;
  const nn_pool2d_shape_t *s = j->s;
  const int H = s->h_in, W = s->w_in, Ho = s->h_out, Wo = s->w_out;
  int p0 = t * j->planes_per_task, p1 = p0 + j->planes_per_task;
  if (p1 > j->planes) p1 = j->planes;
  for (int pl = p0; pl < p1; pl++) {
    const float *x = j->x + (size_t)pl * H * W;
    float *y = j->y + (size_t)pl * Ho * Wo;
    int32_t *am = j->argmax + (size_t)pl * Ho * Wo;
    if (s->kh == 2 && s->kw == 2 && s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 &&
        s->pad_w == 0) {
      /* The common 2x2/2 case: no bounds checks; same rule (first max, NaN wins). */
      for (int oh = 0; oh < Ho; oh++) {
        const float *r0 = x + (size_t)(2 * oh) * W, *r1 = r0 + W;
        float *yr = y + (size_t)oh * Wo;
        int32_t *ar = am + (size_t)oh * Wo;
        const int base = 2 * oh * W;
        int ow = 0;
        /* Four outputs at a time, branch-free (random data would mispredict branches):
           candidates in scan order r0[2ow], r0[2ow+1], r1[2ow], r1[2ow+1]; a later one
           wins when greater or NaN. */
        for (; ow + 4 <= Wo; ow += 4) {
          const int c0 = 2 * ow;
          nn_v4f a0 = nn_v4_load(r0 + c0), a1 = nn_v4_load(r0 + c0 + 4);
          nn_v4f b0 = nn_v4_load(r1 + c0), b1 = nn_v4_load(r1 + c0 + 4);
          nn_v4f best = NN_V4_EVENS(a0, a1);
          nn_v4i idx = (nn_v4i){base + c0, base + c0 + 2, base + c0 + 4, base + c0 + 6};
          nn_v4i bi = idx;
          nn_v4f v = NN_V4_ODDS(a0, a1);
          nn_v4i take = (v > best) | (v != v);
          best = nn_v4_select(take, v, best);
          bi = nn_v4i_select(take, idx + 1, bi);
          v = NN_V4_EVENS(b0, b1);
          take = (v > best) | (v != v);
          best = nn_v4_select(take, v, best);
          bi = nn_v4i_select(take, idx + W, bi);
          v = NN_V4_ODDS(b0, b1);
          take = (v > best) | (v != v);
          best = nn_v4_select(take, v, best);
          bi = nn_v4i_select(take, idx + W + 1, bi);
          nn_v4_store(yr + ow, best);
          __builtin_memcpy(ar + ow, &bi, sizeof bi);
        }
        for (; ow < Wo; ow++) {
          const int c0 = 2 * ow, i0 = base + c0;
          float best = r0[c0], v;
          int bi = i0;
          v = r0[c0 + 1];
          if (v > best || v != v) { best = v; bi = i0 + 1; }
          v = r1[c0];
          if (v > best || v != v) { best = v; bi = i0 + W; }
          v = r1[c0 + 1];
          if (v > best || v != v) { best = v; bi = i0 + W + 1; }
          yr[ow] = best;
          ar[ow] = bi;
        }
      }
      continue;
    }
    /* The 3x3/2 pool with padding 1 (the ResNet stem's): in rows whose window lies
       inside the input, four outputs at a time, branch-free, as the 2x2/2 case above;
       the border goes through the loop below. On random data a branch per candidate
       mispredicts about every other time (resnet50's pool at batch 16: 95 ms). */
    const int k3s2 = s->kh == 3 && s->kw == 3 && s->stride_h == 2 && s->stride_w == 2 &&
                     s->pad_h == 1 && s->pad_w == 1;
    for (int oh = 0; oh < Ho; oh++) {
      int h0 = oh * s->stride_h - s->pad_h, h1 = h0 + s->kh;
      if (h0 < 0) h0 = 0;
      if (h1 > H) h1 = H;
      const int inner_row = k3s2 && h1 - h0 == 3;
      for (int ow = 0; ow < Wo; ow++) {
        if (inner_row && ow >= 1 && 2 * ow + 7 <= W - 1) {
          /* outputs ow..ow+3: columns 2ow-1 (L), 2ow (C), 2ow+1 (R) of rows h0..h0+2 */
          nn_v4f best = {0}, v;
          nn_v4i bi = {0}, take;
          for (int r = 0; r < 3; r++) {
            const float *xr = x + (size_t)(h0 + r) * W + 2 * ow;
            const nn_v4f a0 = nn_v4_load(xr), a1 = nn_v4_load(xr + 4);
            const nn_v4f b0 = nn_v4_load(xr - 1), b1 = nn_v4_load(xr + 3);
            const int c = (h0 + r) * W + 2 * ow;
            const nn_v4i ic = (nn_v4i){c, c + 2, c + 4, c + 6};
            v = NN_V4_EVENS(b0, b1);
            if (r == 0) {
              best = v;
              bi = ic - 1;
            } else {
              take = (v > best) | (v != v);
              best = nn_v4_select(take, v, best);
              bi = nn_v4i_select(take, ic - 1, bi);
            }
            v = NN_V4_EVENS(a0, a1);
            take = (v > best) | (v != v);
            best = nn_v4_select(take, v, best);
            bi = nn_v4i_select(take, ic, bi);
            v = NN_V4_ODDS(a0, a1);
            take = (v > best) | (v != v);
            best = nn_v4_select(take, v, best);
            bi = nn_v4i_select(take, ic + 1, bi);
          }
          nn_v4_store(y + (size_t)oh * Wo + ow, best);
          __builtin_memcpy(am + (size_t)oh * Wo + ow, &bi, sizeof bi);
          ow += 3;
          continue;
        }
        int w0 = ow * s->stride_w - s->pad_w, w1 = w0 + s->kw;
        if (w0 < 0) w0 = 0;
        if (w1 > W) w1 = W;
        float best = -INFINITY;
        int bi = h0 * W + w0;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) {
            float v = x[ih * W + iw];
            if (v > best || v != v) {  /* as PyTorch: a NaN wins */
              best = v;
              bi = ih * W + iw;
            }
          }
        y[oh * Wo + ow] = best;
        am[oh * Wo + ow] = bi;
      }
    }
  }
}

nn_status_t nn_maxpool2d_forward(const nn_pool2d_shape_t *s, const float *x, float *y,
                                 int32_t *argmax) {
  nn_status_t st = pool_check(s, "nn_maxpool2d_forward");
  if (st != NN_OK) return st;
  if (!x || !y || !argmax)
    return nn_set_error(NN_ERR_ARG, "nn_maxpool2d_forward: x, y or argmax is NULL");
  pool_job_t j = {s, x, NULL, y, NULL, argmax, NULL, 0, 0};
  pool_run(&j, maxpool_forward_task);
  return NN_OK;
}

static void maxpool_backward_task(void *vj, int t, int worker) {
  (void)worker;
  const pool_job_t *j = vj;
  const nn_pool2d_shape_t *s = j->s;
  const size_t in = (size_t)s->h_in * s->w_in, out = (size_t)s->h_out * s->w_out;
  int p0 = t * j->planes_per_task, p1 = p0 + j->planes_per_task;
  if (p1 > j->planes) p1 = j->planes;
  for (int pl = p0; pl < p1; pl++) {
    float *dx = j->dx + (size_t)pl * in;
    const float *dy = j->dy + (size_t)pl * out;
    const int32_t *am = j->argmax_in + (size_t)pl * out;
    for (size_t o = 0; o < out; o++) dx[am[o]] += dy[o];
  }
}

nn_status_t nn_maxpool2d_backward(const nn_pool2d_shape_t *s, const int32_t *argmax,
                                  const float *dy, float *dx) {
  nn_status_t st = pool_check(s, "nn_maxpool2d_backward");
  if (st != NN_OK) return st;
  if (!argmax || !dy || !dx)
    return nn_set_error(NN_ERR_ARG, "nn_maxpool2d_backward: argmax, dy or dx is NULL");
  pool_job_t j = {s, NULL, dy, NULL, dx, NULL, argmax, 0, 0};
  pool_run(&j, maxpool_backward_task);
  return NN_OK;
}

/* Average pooling over one task's planes, each window clipped to the input (padded
   cells count as zeros): forward y = window sum / window size, or backward
   dx += dy / window size over the window. */
static void avgpool_planes(const pool_job_t *j, int t, int backward) {
  const nn_pool2d_shape_t *s = j->s;
  const int H = s->h_in, W = s->w_in, Ho = s->h_out, Wo = s->w_out;
  const float inv = 1.0f / (float)(s->kh * s->kw);
  int p0 = t * j->planes_per_task, p1 = p0 + j->planes_per_task;
  if (p1 > j->planes) p1 = j->planes;
  for (int pl = p0; pl < p1; pl++) {
    const size_t in_off = (size_t)pl * H * W, out_off = (size_t)pl * Ho * Wo;
    for (int oh = 0; oh < Ho; oh++) {
      int h0 = oh * s->stride_h - s->pad_h, h1 = h0 + s->kh;
      if (h0 < 0) h0 = 0;
      if (h1 > H) h1 = H;
      for (int ow = 0; ow < Wo; ow++) {
        int w0 = ow * s->stride_w - s->pad_w, w1 = w0 + s->kw;
        if (w0 < 0) w0 = 0;
        if (w1 > W) w1 = W;
        if (backward) {
          float *dx = j->dx + in_off;
          float g = j->dy[out_off + (size_t)oh * Wo + ow] * inv;
          for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) dx[ih * W + iw] += g;
        } else {
          const float *x = j->x + in_off;
          float acc = 0;
          for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) acc += x[ih * W + iw];
          j->y[out_off + (size_t)oh * Wo + ow] = acc * inv;
        }
      }
    }
  }
}

static void avgpool_forward_task(void *vj, int t, int worker) {
  (void)worker;
  avgpool_planes(vj, t, 0);
}

static void avgpool_backward_task(void *vj, int t, int worker) {
  (void)worker;
  avgpool_planes(vj, t, 1);
}

nn_status_t nn_avgpool2d_forward(const nn_pool2d_shape_t *s, const float *x, float *y) {
  nn_status_t st = pool_check(s, "nn_avgpool2d_forward");
  if (st != NN_OK) return st;
  if (!x || !y) return nn_set_error(NN_ERR_ARG, "nn_avgpool2d_forward: x or y is NULL");
  pool_job_t j = {s, x, NULL, y, NULL, NULL, NULL, 0, 0};
  pool_run(&j, avgpool_forward_task);
  return NN_OK;
}

nn_status_t nn_avgpool2d_backward(const nn_pool2d_shape_t *s, const float *dy, float *dx) {
  nn_status_t st = pool_check(s, "nn_avgpool2d_backward");
  if (st != NN_OK) return st;
  if (!dy || !dx) return nn_set_error(NN_ERR_ARG, "nn_avgpool2d_backward: dy or dx is NULL");
  pool_job_t j = {s, NULL, dy, NULL, dx, NULL, NULL, 0, 0};
  pool_run(&j, avgpool_backward_task);
  return NN_OK;
}

void nn_global_avgpool_forward(int n, int c, int hw, const float *x, float *y) {
  const float inv = 1.0f / (float)hw;
  for (size_t pl = 0; pl < (size_t)n * c; pl++) {
    const float *xp = x + pl * hw;
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int p = 0;
    for (; p + 4 <= hw; p += 4) {
      a0 += xp[p];
      a1 += xp[p + 1];
      a2 += xp[p + 2];
      a3 += xp[p + 3];
    }
    for (; p < hw; p++) a0 += xp[p];
    y[pl] = ((a0 + a1) + (a2 + a3)) * inv;
  }
}

void nn_global_avgpool_backward(int n, int c, int hw, const float *dy, float *dx) {
  const float inv = 1.0f / (float)hw;
  for (size_t pl = 0; pl < (size_t)n * c; pl++) {
    float g = dy[pl] * inv;
    float *dp = dx + pl * hw;
    for (int p = 0; p < hw; p++) dp[p] += g;
  }
}
