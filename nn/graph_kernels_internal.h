/* nn/graph_kernels_internal.h: the CPU kernels of the layer kinds that imported graphs
   need beyond the built-in models (nn/model_internal.h, NN_LAYER_GRAPH_KIND_LIST), as
   nn.h's kernels: float32 NCHW, and backward ADDS into every gradient it produces.
   Written as plain loops from the definitions (they are the reference a faster or a
   device version is checked against). Not public. */
#ifndef NN_GRAPH_KERNELS_INTERNAL_H
#define NN_GRAPH_KERNELS_INTERNAL_H

#include <stddef.h>

/* A convolution with groups and dilations: x[n][c_in][h_in][w_in], weight
   [c_out][c_in/groups][kh][kw], output channel o reads the input channels of group
   o / (c_out/groups). Output size: floor((H + 2*pad - dil*(K-1) - 1) / stride) + 1. */
typedef struct {
  int n, c_in, h_in, w_in;
  int c_out, kh, kw, groups;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int h_out, w_out;
} nn_gconv_shape_t;

/* Fills h_out/w_out; 0 when the shape is invalid or the output empty. */
int nn_gconv_shape(nn_gconv_shape_t *s);
/* b may be NULL. */
void nn_gconv_forward(const nn_gconv_shape_t *s, const float *x, const float *w,
                      const float *b, float *y);
/* dx, dw, db may each be NULL (not wanted). */
void nn_gconv_backward(const nn_gconv_shape_t *s, const float *x, const float *w,
                       const float *dy, float *dx, float *dw, float *db);

/* Elementwise activations: y = f(x); backward from the input x alone (the output may
   have been overwritten in place): dx += f'(x) dy. */
typedef enum { NN_ACT_LEAKY_RELU, NN_ACT_SIGMOID, NN_ACT_TANH, NN_ACT_CLIP } nn_act_t;
const char *nn_act_name(int act);        /* "LeakyRelu", "Sigmoid", "Tanh", "Clip" */
void nn_act_forward(int act, float alpha, float lo, float hi, size_t count, const float *x,
                    float *y);
void nn_act_backward(int act, float alpha, float lo, float hi, size_t count, const float *x,
                     const float *dy, float *dx);

/* y = a * b over n samples of c channels of hw values; b has c*hw values per sample
   (b_hw = hw) or one per channel (b_hw = 1). Backward: da += dy * b, db += dy * a
   (summed over hw when b is per channel); either may be NULL. */
void nn_mul_forward(int n, int c, int hw, int b_hw, const float *a, const float *b,
                    float *y);
void nn_mul_backward(int n, int c, int hw, int b_hw, const float *a, const float *b,
                     const float *dy, float *da, float *db);

/* y[n] = a[n] then b[n] (a_size, b_size floats per sample); backward splits dy and
   adds each part into da, db (either may be NULL). */
void nn_concat_forward(int n, size_t a_size, size_t b_size, const float *a, const float *b,
                       float *y);
void nn_concat_backward(int n, size_t a_size, size_t b_size, const float *dy, float *da,
                        float *db);

#endif /* NN_GRAPH_KERNELS_INTERNAL_H */
