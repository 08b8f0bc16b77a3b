/* nn/cuda/gconv_cudnn.c: the grouped convolution of imported graphs (groups, dilations,
   strides and pads per axis: MobileNet's depthwise layers) through cuDNN, which has
   them all (cudnnSetConvolutionGroupCount, the dilations of
   cudnnSetConvolution2dDescriptor): nothing of our own to get wrong or slow.

   A layer keeps its plan (descriptors and the three algorithms) from its first call;
   the plan is made again only when the batch, the format or the TF32 setting changes.
   Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7): the first candidate
   that reports success, runs with the descriptor's math type (strict float32 is FMA
   math, as nn's other convolutions) and fits in NN_CUDNN_WORKSPACE_MB (default 1024).
   Backward adds into dw and db, and into dx or stores it (beta 0), as cudnn_ops.c's
   convolution. */
#include "nn/cuda/graph_cuda_internal.h"

#include <stdlib.h>
#include <string.h>

struct nn_cuda_gconv_plan {
  nn_gconv_shape_t shape;
  nn_cuda_fmt_t fmt;
  int tf32;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnMathType_t math;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t data;
  cudnnConvolutionBwdFilterAlgo_t filter;
  size_t ws_fwd, ws_data, ws_filter;
};

void nn_cuda_gconv_plan_free(nn_cuda_gconv_plan_t *p) {
  if (!p) return;
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  free(p);
}

static size_t ws_limit(void) {
  const char *e = getenv("NN_CUDNN_WORKSPACE_MB");
  long mb = e ? atol(e) : 1024;
  return mb < 0 ? 0 : (size_t)mb << 20;
}

/* A candidate runs as listed with this plan's math type: FMA math takes only the
   candidates measured without tensor cores. */
static int math_ok(const nn_cuda_gconv_plan_t *p, cudnnMathType_t m) {
  return p->math != CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH;
}

#define CANDS 16

/* The three algorithms: the first usable candidate of each, by cuDNN's ranking. */
static nn_status_t choose(nn_cuda_ctx_t *c, nn_cuda_gconv_plan_t *p) {
  const size_t limit = ws_limit();
  int got = 0, ok = 0;
  cudnnConvolutionFwdAlgoPerf_t f[CANDS];
  NN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, p->x, p->w, p->conv, p->y,
                                                        CANDS, &got, f));
  for (int i = 0; i < got && !ok; i++) {
    size_t need = 0;
    if (f[i].status != CUDNN_STATUS_SUCCESS || !math_ok(p, f[i].mathType) ||
        cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, p->x, p->w, p->conv, p->y,
                                                f[i].algo, &need) != CUDNN_STATUS_SUCCESS ||
        need > limit)
      continue;
    p->fwd = f[i].algo;
    p->ws_fwd = need;
    ok = 1;
  }
  if (!ok) goto none;
  cudnnConvolutionBwdDataAlgoPerf_t d[CANDS];
  NN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->cudnn, p->w, p->y, p->conv,
                                                             p->x, CANDS, &got, d));
  ok = 0;
  for (int i = 0; i < got && !ok; i++) {
    size_t need = 0;
    if (d[i].status != CUDNN_STATUS_SUCCESS || !math_ok(p, d[i].mathType) ||
        cudnnGetConvolutionBackwardDataWorkspaceSize(c->cudnn, p->w, p->y, p->conv, p->x,
                                                     d[i].algo, &need) !=
            CUDNN_STATUS_SUCCESS ||
        need > limit)
      continue;
    p->data = d[i].algo;
    p->ws_data = need;
    ok = 1;
  }
  if (!ok) goto none;
  cudnnConvolutionBwdFilterAlgoPerf_t w[CANDS];
  NN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->cudnn, p->x, p->y, p->conv,
                                                               p->w, CANDS, &got, w));
  ok = 0;
  for (int i = 0; i < got && !ok; i++) {
    size_t need = 0;
    if (w[i].status != CUDNN_STATUS_SUCCESS || !math_ok(p, w[i].mathType) ||
        cudnnGetConvolutionBackwardFilterWorkspaceSize(c->cudnn, p->x, p->y, p->conv, p->w,
                                                       w[i].algo, &need) !=
            CUDNN_STATUS_SUCCESS ||
        need > limit)
      continue;
    p->filter = w[i].algo;
    p->ws_filter = need;
    ok = 1;
  }
  if (ok) return NN_OK;
none:
  return nn_set_error(NN_ERR_BACKEND, "grouped convolution (CUDA): cuDNN has no algorithm "
                      "for %d groups, kernel %dx%d, dilations %dx%d within %zu MiB of "
                      "workspace (NN_CUDNN_WORKSPACE_MB)", p->shape.groups, p->shape.kh,
                      p->shape.kw, p->shape.dil_h, p->shape.dil_w, limit >> 20);
}

static nn_status_t build(nn_cuda_ctx_t *c, nn_cuda_gconv_plan_t *p) {
  const nn_gconv_shape_t *s = &p->shape;
  const cudnnDataType_t t = nn_cudnn_type(p->fmt.prec);
  const cudnnTensorFormat_t layout = p->fmt.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  NN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  NN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, layout, t, s->n, s->c_in, s->h_in, s->w_in));
  NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, layout, t, s->n, s->c_out, s->h_out,
                                            s->w_out));
  NN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, t, layout, s->c_out, s->c_in / s->groups,
                                            s->kh, s->kw));
  NN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, s->pad_h, s->pad_w, s->stride_h,
                                                 s->stride_w, s->dil_h, s->dil_w,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  NN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, s->groups));
  p->math = p->fmt.prec == NN_PRECISION_FP32 && !p->tf32 ? CUDNN_FMA_MATH
                                                         : CUDNN_TENSOR_OP_MATH;
  NN_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math));
  return choose(c, p);
}

/* The layer's plan for this shape and format, made (again) when they changed. */
static nn_status_t plan_for(nn_cuda_ctx_t *c, nn_cuda_fmt_t f, const nn_gconv_shape_t *s0,
                            nn_cuda_gconv_plan_t **slot, nn_cuda_gconv_plan_t **out) {
  nn_gconv_shape_t s = *s0;
  if (!nn_gconv_shape(&s))
    return nn_set_error(NN_ERR_ARG, "grouped convolution (CUDA): channels %d -> %d not "
                        "divisible by %d groups, or an empty output", s.c_in, s.c_out,
                        s.groups);
  const int tf32 = nn_cuda_tf32();
  nn_cuda_gconv_plan_t *p = *slot;
  if (p && p->tf32 == tf32 && p->fmt.prec == f.prec && p->fmt.nhwc == f.nhwc &&
      memcmp(&p->shape, &s, sizeof s) == 0) {
    *out = p;
    return NN_OK;
  }
  nn_cuda_gconv_plan_free(p);
  *slot = NULL;
  if (!(p = calloc(1, sizeof *p)))
    return nn_set_error(NN_ERR_NO_MEMORY, "grouped convolution (CUDA): out of memory");
  p->shape = s;
  p->fmt = f;
  p->tf32 = tf32;
  nn_status_t st = build(c, p);
  if (st != NN_OK) {
    nn_cuda_gconv_plan_free(p);
    return st;
  }
  *slot = *out = p;
  return NN_OK;
}

nn_status_t nn_gconv_forward_cuda_p(nn_cuda_fmt_t f, const nn_gconv_shape_t *s,
                                    const void *x, const void *w, const void *b, void *y,
                                    nn_cuda_gconv_plan_t **plan) {
  if (!s || !x || !w || !y || !plan)
    return nn_set_error(NN_ERR_ARG, "nn_gconv_forward_cuda: NULL argument");
  nn_cuda_ctx_t *c;
  nn_cuda_gconv_plan_t *p;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st == NN_OK) st = plan_for(c, f, s, plan, &p);
  if (st != NN_OK) return st;
  void *ws = NULL;
  if ((st = nn_cuda_workspace(c, p->ws_fwd, &ws)) != NN_OK) return st;
  const float one = 1.0f, zero = 0.0f;
  NN_CUDNN_CHECK(cudnnConvolutionForward(c->cudnn, &one, p->x, x, p->w, w, p->conv, p->fwd,
                                         ws, p->ws_fwd, &zero, p->y, y));
  if (b)
    NN_CUDA_CHECK(nn_cuk_channel_bias_add(c->stream, f.prec, f.nhwc, s->n, s->c_out,
                                          p->shape.h_out * p->shape.w_out, b, y));
  return NN_OK;
}

nn_status_t nn_gconv_backward_cuda_p(nn_cuda_fmt_t f, const nn_gconv_shape_t *s,
                                     const void *x, const void *w, const void *dy, void *dx,
                                     int dx_add, void *dw, void *db,
                                     nn_cuda_gconv_plan_t **plan) {
  if (!s || !x || !w || !dy || !plan)
    return nn_set_error(NN_ERR_ARG, "nn_gconv_backward_cuda: NULL argument");
  nn_cuda_ctx_t *c;
  nn_cuda_gconv_plan_t *p;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st == NN_OK) st = plan_for(c, f, s, plan, &p);
  if (st != NN_OK) return st;
  size_t need = dw ? p->ws_filter : 0;
  if (dx && p->ws_data > need) need = p->ws_data;
  void *ws = NULL;
  if ((st = nn_cuda_workspace(c, need, &ws)) != NN_OK) return st;
  const float one = 1.0f, dx_beta = dx_add ? 1.0f : 0.0f;
  if (db)
    NN_CUDA_CHECK(nn_cuk_channel_bias_grad(c->stream, f.prec, f.nhwc, s->n, s->c_out,
                                           p->shape.h_out * p->shape.w_out, dy, db));
  if (dw)
    NN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->cudnn, &one, p->x, x, p->y, dy, p->conv,
                                                  p->filter, ws, p->ws_filter, &one, p->w,
                                                  dw));
  if (dx)
    NN_CUDNN_CHECK(cudnnConvolutionBackwardData(c->cudnn, &one, p->w, w, p->y, dy, p->conv,
                                                p->data, ws, p->ws_data, &dx_beta, p->x, dx));
  return NN_OK;
}
