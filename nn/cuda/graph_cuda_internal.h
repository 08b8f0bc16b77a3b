/* nn/cuda/graph_cuda_internal.h: the CUDA side of the layer kinds that imported graphs
   need beyond the built-in models (nn/model_internal.h, NN_LAYER_GRAPH_KIND_LIST): the
   grouped/dilated convolution through cuDNN (gconv_cudnn.c) and nn's own kernels for the
   activations, the elementwise product and the channel concat (graph_kernels.cu). The
   CPU kernels of nn/graph_kernels.c are the reference (tests/test_cuda_graph_layers.c).
   Activations in any precision and layout of nn_cuda_fmt_t; backward stores the input
   gradient when its add argument is 0 (the model walk's first writer) and adds into it
   otherwise; parameter gradients are always added into. Compiled only when
   NN_WITH_CUDA=1. */
#ifndef NN_CUDA_GRAPH_CUDA_INTERNAL_H
#define NN_CUDA_GRAPH_CUDA_INTERNAL_H

#include "nn/cuda/cuda_internal.h"
#include "nn/graph_kernels_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A grouped convolution's cuDNN descriptors and algorithms, made at a layer's first
   call and again only when its shape or format changes. Zero-initialise (or NULL),
   pass the same one to all of the layer's calls, free with nn_cuda_gconv_plan_free. */
typedef struct nn_cuda_gconv_plan nn_cuda_gconv_plan_t;
void nn_cuda_gconv_plan_free(nn_cuda_gconv_plan_t *p);

/* s: filled by nn_gconv_shape. Weights [c_out][c_in/groups][kh][kw] (NHWC: [c_out][kh]
   [kw][c_in/groups]) in the activations' type, as a convolution's compute copy; b, dx,
   dw, db may be NULL. */
nn_status_t nn_gconv_forward_cuda_p(nn_cuda_fmt_t f, const nn_gconv_shape_t *s,
                                    const void *x, const void *w, const void *b, void *y,
                                    nn_cuda_gconv_plan_t **plan);
nn_status_t nn_gconv_backward_cuda_p(nn_cuda_fmt_t f, const nn_gconv_shape_t *s,
                                     const void *x, const void *w, const void *dy, void *dx,
                                     int dx_add, void *dw, void *db,
                                     nn_cuda_gconv_plan_t **plan);

/* Activations (nn_act_t), elementwise: backward from the input x, as on the CPU. */
cudaError_t nn_cuk_act_forward(cudaStream_t st, nn_precision_t p, size_t n, int act,
                               float alpha, float lo, float hi, const void *x, void *y);
cudaError_t nn_cuk_act_backward(cudaStream_t st, nn_precision_t p, size_t n, int act,
                                float alpha, float lo, float hi, const void *x,
                                const void *dy, void *dx, int add);
/* y = a * b over n samples of c channels of hw positions; b of a's shape (b_hw = hw) or
   one value per channel ([n][c], b_hw = 1). Backward in two launches, the product's
   first input then its second (they may be the same buffer): da = dy * b, and db = dy * a
   (summed over the positions, one warp per (sample, channel), when b_hw = 1). */
cudaError_t nn_cuk_mul_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, int b_hw, const void *a, const void *b, void *y);
cudaError_t nn_cuk_mul_backward_a(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                  int hw, int b_hw, const void *b, const void *dy, void *da,
                                  int add);
cudaError_t nn_cuk_mul_backward_b(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                  int hw, int b_hw, const void *a, const void *dy, void *db,
                                  int add);
/* y = a's ca channels then b's cb channels, hw positions each. Backward: the gradient of
   one part (part 0: a, 1: b) from dy; one launch per part, so the two may be one buffer. */
cudaError_t nn_cuk_concat_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int ca,
                                  int cb, int hw, const void *a, const void *b, void *y);
cudaError_t nn_cuk_concat_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n,
                                   int ca, int cb, int hw, int part, const void *dy,
                                   void *dx, int add);

#ifdef __cplusplus
}
#endif

#endif /* NN_CUDA_GRAPH_CUDA_INTERNAL_H */
