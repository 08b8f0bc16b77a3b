/* nn/graph_kernels.c: CPU kernels of the graph kinds (grouped and dilated convolution,
   activations, elementwise product, channel concat); see nn/graph_kernels_internal.h.
   The grouped convolution is a direct loop: its use is the depthwise convolution of
   MobileNet-like graphs (one input channel per output channel), where im2col and a GEMM
   per group would spend more on copying than on arithmetic. A dense convolution
   (groups 1, no dilation, square strides and pads) goes to nn_conv2d_* instead. */
#include "nn/graph_kernels_internal.h"

#include <math.h>
#include <string.h>

int nn_gconv_shape(nn_gconv_shape_t *s) {
  if (s->n < 0 || s->c_in <= 0 || s->c_out <= 0 || s->kh <= 0 || s->kw <= 0 ||
      s->groups <= 0 || s->c_in % s->groups || s->c_out % s->groups || s->stride_h <= 0 ||
      s->stride_w <= 0 || s->pad_h < 0 || s->pad_w < 0 || s->dil_h <= 0 || s->dil_w <= 0)
    return 0;
  long eh = (long)s->dil_h * (s->kh - 1) + 1, ew = (long)s->dil_w * (s->kw - 1) + 1;
  long hh = (long)s->h_in + 2L * s->pad_h - eh, ww = (long)s->w_in + 2L * s->pad_w - ew;
  if (hh < 0 || ww < 0) return 0;
  s->h_out = (int)(hh / s->stride_h + 1);
  s->w_out = (int)(ww / s->stride_w + 1);
  return 1;
}

/* The loops over one output plane (o) of one sample, reading one input plane (ic of
   the group) through kernel tap (ki, kj): out-of-range input rows and columns are the
   zero padding, so they are skipped. */
#define GCONV_TAPS(BODY)                                                            \
  for (int oh = 0; oh < s->h_out; oh++) {                                           \
    int ih = oh * s->stride_h - s->pad_h + ki * s->dil_h;                           \
    if (ih < 0 || ih >= s->h_in) continue;                                          \
    for (int ow = 0; ow < s->w_out; ow++) {                                         \
      int iw = ow * s->stride_w - s->pad_w + kj * s->dil_w;                         \
      if (iw < 0 || iw >= s->w_in) continue;                                        \
      size_t xi = (size_t)ih * s->w_in + iw, yi = (size_t)oh * s->w_out + ow;       \
      BODY;                                                                         \
    }                                                                               \
  }

void nn_gconv_forward(const nn_gconv_shape_t *s, const float *x, const float *w,
                      const float *b, float *y) {
  const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
  const size_t in_plane = (size_t)s->h_in * s->w_in, out_plane = (size_t)s->h_out * s->w_out;
  for (int n = 0; n < s->n; n++)
    for (int o = 0; o < s->c_out; o++) {
      float *yp = y + ((size_t)n * s->c_out + o) * out_plane;
      for (size_t k = 0; k < out_plane; k++) yp[k] = b ? b[o] : 0.0f;
      const int g = o / cog;
      for (int ic = 0; ic < cig; ic++) {
        const float *xp = x + ((size_t)n * s->c_in + (size_t)g * cig + ic) * in_plane;
        const float *wp = w + ((size_t)o * cig + ic) * s->kh * s->kw;
        for (int ki = 0; ki < s->kh; ki++)
          for (int kj = 0; kj < s->kw; kj++) {
            const float wv = wp[ki * s->kw + kj];
            GCONV_TAPS(yp[yi] += wv * xp[xi])
          }
      }
    }
}

void nn_gconv_backward(const nn_gconv_shape_t *s, const float *x, const float *w,
                       const float *dy, float *dx, float *dw, float *db) {
  const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
  const size_t in_plane = (size_t)s->h_in * s->w_in, out_plane = (size_t)s->h_out * s->w_out;
  for (int n = 0; n < s->n; n++)
    for (int o = 0; o < s->c_out; o++) {
      const float *dyp = dy + ((size_t)n * s->c_out + o) * out_plane;
      if (db) {
        double sum = 0;
        for (size_t k = 0; k < out_plane; k++) sum += dyp[k];
        db[o] += (float)sum;
      }
      const int g = o / cog;
      for (int ic = 0; ic < cig; ic++) {
        size_t xoff = ((size_t)n * s->c_in + (size_t)g * cig + ic) * in_plane;
        const float *xp = x + xoff;
        float *dxp = dx ? dx + xoff : NULL;
        size_t woff = ((size_t)o * cig + ic) * s->kh * s->kw;
        for (int ki = 0; ki < s->kh; ki++)
          for (int kj = 0; kj < s->kw; kj++) {
            const float wv = w[woff + ki * s->kw + kj];
            double gw = 0;
            if (dxp) {
              GCONV_TAPS(gw += (double)dyp[yi] * xp[xi]; dxp[xi] += wv * dyp[yi])
            } else {
              GCONV_TAPS(gw += (double)dyp[yi] * xp[xi])
            }
            if (dw) dw[woff + ki * s->kw + kj] += (float)gw;
          }
      }
    }
}

const char *nn_act_name(int act) {
  switch (act) {
  case NN_ACT_LEAKY_RELU: return "LeakyRelu";
  case NN_ACT_SIGMOID: return "Sigmoid";
  case NN_ACT_TANH: return "Tanh";
  case NN_ACT_CLIP: return "Clip";
  }
  return "?";
}

void nn_act_forward(int act, float alpha, float lo, float hi, size_t count, const float *x,
                    float *y) {
  for (size_t i = 0; i < count; i++) {
    float v = x[i];
    switch (act) {
    case NN_ACT_LEAKY_RELU: y[i] = v > 0.0f ? v : alpha * v; break;
    case NN_ACT_SIGMOID: y[i] = 1.0f / (1.0f + expf(-v)); break;
    case NN_ACT_TANH: y[i] = tanhf(v); break;
    default: y[i] = v < lo ? lo : v > hi ? hi : v; break;
    }
  }
}

/* From the input alone: the output may have been overwritten by a relu running in
   place after this layer. Clip passes the gradient strictly inside (lo, hi), as
   PyTorch's hardtanh (ReLU6). */
void nn_act_backward(int act, float alpha, float lo, float hi, size_t count, const float *x,
                     const float *dy, float *dx) {
  for (size_t i = 0; i < count; i++) {
    float g = dy[i], y;
    switch (act) {
    case NN_ACT_LEAKY_RELU: dx[i] += x[i] > 0.0f ? g : alpha * g; break;
    case NN_ACT_SIGMOID: y = 1.0f / (1.0f + expf(-x[i])); dx[i] += g * y * (1.0f - y); break;
    case NN_ACT_TANH: y = tanhf(x[i]); dx[i] += g * (1.0f - y * y); break;
    default: dx[i] += (x[i] > lo && x[i] < hi) ? g : 0.0f; break;
    }
  }
}

void nn_mul_forward(int n, int c, int hw, int b_hw, const float *a, const float *b,
                    float *y) {
  for (size_t p = 0; p < (size_t)n * c; p++) {
    const float *ap = a + p * hw, *bp = b + p * b_hw;
    float *yp = y + p * hw;
    for (int k = 0; k < hw; k++) yp[k] = ap[k] * bp[b_hw == 1 ? 0 : k];
  }
}

void nn_mul_backward(int n, int c, int hw, int b_hw, const float *a, const float *b,
                     const float *dy, float *da, float *db) {
  for (size_t p = 0; p < (size_t)n * c; p++) {
    const float *ap = a + p * hw, *bp = b + p * b_hw, *dyp = dy + p * hw;
    if (da)
      for (int k = 0; k < hw; k++) da[p * hw + k] += dyp[k] * bp[b_hw == 1 ? 0 : k];
    if (!db) continue;
    if (b_hw == 1) {
      double sum = 0;
      for (int k = 0; k < hw; k++) sum += (double)dyp[k] * ap[k];
      db[p] += (float)sum;
    } else {
      for (int k = 0; k < hw; k++) db[p * hw + k] += dyp[k] * ap[k];
    }
  }
}

void nn_concat_forward(int n, size_t a_size, size_t b_size, const float *a, const float *b,
                       float *y) {
  for (size_t i = 0; i < (size_t)n; i++) {
    memcpy(y + i * (a_size + b_size), a + i * a_size, a_size * sizeof(float));
    memcpy(y + i * (a_size + b_size) + a_size, b + i * b_size, b_size * sizeof(float));
  }
}

void nn_concat_backward(int n, size_t a_size, size_t b_size, const float *dy, float *da,
                        float *db) {
  for (size_t i = 0; i < (size_t)n; i++) {
    const float *d = dy + i * (a_size + b_size);
    if (da)
      for (size_t k = 0; k < a_size; k++) da[i * a_size + k] += d[k];
    if (db)
      for (size_t k = 0; k < b_size; k++) db[i * b_size + k] += d[a_size + k];
  }
}
