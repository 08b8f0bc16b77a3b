/* nn/cuda/cudnn_ops.c: convolution, batch norm and pooling through cuDNN (NCHW or NHWC), in
   float32 or, for mixed precision, with float16/bfloat16 data and float32 accumulation
   (tensor cores; cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations).

   Convolutions: descriptors are made once per shape (precision, layout and TF32
   setting), and each op's algorithm when that op is first needed, with cuDNN's heuristics (cudnnGet*Algorithm_v7), or timed with
   cudnnFind* when NN_CUDNN_FIND=1: the first (best) algorithm that is supported and fits
   in NN_CUDNN_WORKSPACE_MB (default 1024); plans are kept in a small cache; the
   workspace is the context's, grown to the largest need. cuDNN lists an algorithm once
   per math type, so each op (forward, backward data, backward filter) runs with a
   descriptor of its own carrying the chosen result's math type (see run_math), and its
   workspace is asked of cudnnGet*WorkspaceSize for that descriptor (the larger of that
   and the listed size is used).
   Backward adds into dw (beta = 1, as the CPU reference does) and into dx, or stores dx
   (beta = 0, which cuDNN documents as not reading dx: the model walk's first writer of
   a gradient, nn_layer_t.dx_first, so that nobody zeroes it first). The bias
   (forward and db, also added) is nn's own per-channel kernel, the same for every data
   type.

   Batch norm: cudnnBatchNormalization* in SPATIAL mode, SPATIAL_PERSISTENT for NHWC
   training, or nn's kernels (see below).
   cuDNN updates the running statistics as running = (1 - f) * running + f * batch with
   the unbiased batch variance, which is PyTorch's rule with f = momentum; the saved mean
   and inverse standard deviation are the same quantities as the CPU kernel's
   save_mean/save_invstd. */
#include "nn/cuda/cuda_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_CACHE_MAX 256

/* The three operations of a convolution. */
typedef enum { OP_FWD, OP_BWD_DATA, OP_BWD_FILTER } conv_op_t;

typedef struct {
  nn_conv2d_shape_t shape;
  int tf32;
  nn_cuda_fmt_t fmt;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;            /* the search's                       */
  cudnnConvolutionDescriptor_t cfwd, cdata, cfilt; /* each op's, with its math type  */
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws_fwd, ws_bwd_data, ws_bwd_filter;
  int have[3];                                  /* [conv_op_t]: algorithm chosen     */
} conv_plan_t;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_plan_t *cache[CONV_CACHE_MAX];
static int cache_n;

static size_t ws_limit(void) {
  const char *e = getenv("NN_CUDNN_WORKSPACE_MB");
  long mb = e ? atol(e) : 1024;
  if (mb < 0) mb = 0;
  return (size_t)mb << 20;
}

/* NN_CUDNN_FIND=1: time the algorithms once per shape (cudnnFind*, as PyTorch's
   cudnn.benchmark) instead of trusting the heuristics. */
static int use_find(void) {
  const char *e = getenv("NN_CUDNN_FIND");
  return e && e[0] == '1';
}

static int same_shape(const nn_conv2d_shape_t *a, const nn_conv2d_shape_t *b) {
  return a->n == b->n && a->c_in == b->c_in && a->h_in == b->h_in && a->w_in == b->w_in &&
         a->c_out == b->c_out && a->kh == b->kh && a->kw == b->kw &&
         a->stride_h == b->stride_h && a->stride_w == b->stride_w && a->pad_h == b->pad_h &&
         a->pad_w == b->pad_w;
}

/* The math type a search result was measured with, as it may run here: cuDNN lists an
   algorithm once per math type, and runs it with the descriptor's (PyTorch's note
   "behavior of cudnnFind and cudnnGet"), so each op gets a descriptor of its own with
   the result's math type. Strict float32 always runs FMA math (DEFAULT math allows TF32
   on Ampere and later); float32 data is never down-converted to half. */
static cudnnMathType_t run_math(const conv_plan_t *p, cudnnMathType_t m) {
  if (p->fmt.prec == NN_PRECISION_FP32 && !p->tf32) return CUDNN_FMA_MATH;
  if (p->fmt.prec == NN_PRECISION_FP32 && m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
    return CUDNN_TENSOR_OP_MATH;
  return m;
}

static nn_status_t op_desc(const nn_conv2d_shape_t *s, cudnnMathType_t m,
                           cudnnConvolutionDescriptor_t *d) {
  NN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(d));
  NN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*d, s->pad_h, s->pad_w, s->stride_h,
                                                 s->stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  NN_CUDNN_CHECK(cudnnSetConvolutionMathType(*d, m));
  return NN_OK;
}

/* A search result of any of the three operations of a convolution (conv_op_t). */
static const char *const op_name[] = {"forward", "backward-data", "backward-filter"};

#define CAND_MAX 16
_Static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= CAND_MAX &&
               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= CAND_MAX &&
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= CAND_MAX,
               "a search returns at most CAND_MAX results");
typedef struct {
  cudnnStatus_t status;
  int algo;
  size_t memory;
  cudnnMathType_t math;
} cand_t;

#define COPY_CANDS(perf, got, out)                                                   \
  for (int i_ = 0; i_ < (got); i_++) {                                               \
    (out)[i_].status = (perf)[i_].status;                                            \
    (out)[i_].algo = (int)(perf)[i_].algo;                                           \
    (out)[i_].memory = (perf)[i_].memory;                                            \
    (out)[i_].math = (perf)[i_].mathType;                                            \
  }

/* cuDNN's candidates for op, best first: timed with cudnnFind* when NN_CUDNN_FIND=1,
   else its heuristics (cudnnGet*_v7), with the search descriptor p->conv. */
static nn_status_t search(nn_cuda_ctx_t *c, const conv_plan_t *p, conv_op_t op, cand_t *out,
                          int *got) {
  const int timed = use_find();
  *got = 0;
  if (op == OP_FWD) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    const int n = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    if (timed)
      NN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(c->cudnn, p->x, p->w, p->conv, p->y,
                                                          n, got, r));
    else
      NN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, p->x, p->w, p->conv,
                                                            p->y, n, got, r));
    COPY_CANDS(r, *got, out);
  } else if (op == OP_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    const int n = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    if (timed)
      NN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(c->cudnn, p->w, p->y, p->conv,
                                                               p->x, n, got, r));
    else
      NN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->cudnn, p->w, p->y,
                                                                 p->conv, p->x, n, got, r));
    COPY_CANDS(r, *got, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const int n = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    if (timed)
      NN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(c->cudnn, p->x, p->y,
                                                                 p->conv, p->w, n, got, r));
    else
      NN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->cudnn, p->x, p->y,
                                                                   p->conv, p->w, n, got, r));
    COPY_CANDS(r, *got, out);
  }
  return NN_OK;
}

/* The workspace algo of op needs when run with descriptor d. */
static cudnnStatus_t op_workspace(nn_cuda_ctx_t *c, const conv_plan_t *p, conv_op_t op,
                                  cudnnConvolutionDescriptor_t d, int algo, size_t *bytes) {
  switch (op) {
  case OP_FWD:
    return cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, p->x, p->w, d, p->y,
                                                   (cudnnConvolutionFwdAlgo_t)algo, bytes);
  case OP_BWD_DATA:
    return cudnnGetConvolutionBackwardDataWorkspaceSize(
        c->cudnn, p->w, p->y, d, p->x, (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  case OP_BWD_FILTER:
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(
        c->cudnn, p->x, p->y, d, p->w, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

/* The first (best) candidate of op that is supported and fits in NN_CUDNN_WORKSPACE_MB:
   its descriptor (with the candidate's math type), algorithm and workspace. */
static nn_status_t pick(nn_cuda_ctx_t *c, const nn_conv2d_shape_t *s, const conv_plan_t *p,
                        conv_op_t op, cudnnConvolutionDescriptor_t *desc, int *algo,
                        size_t *ws) {
  cand_t k[CAND_MAX];
  int got = 0;
  nn_status_t st = search(c, p, op, k, &got);
  if (st != NN_OK) return st;
  const size_t limit = ws_limit();
  for (int i = 0; i < got; i++) {
    if (k[i].status != CUDNN_STATUS_SUCCESS) continue;
    if ((st = op_desc(s, run_math(p, k[i].math), desc)) != NN_OK) return st;
    size_t need = 0;
    if (op_workspace(c, p, op, *desc, k[i].algo, &need) == CUDNN_STATUS_SUCCESS) {
      if (need < k[i].memory) need = k[i].memory;
      if (need <= limit) {
        *algo = k[i].algo;
        *ws = need;
        return NN_OK;
      }
    }
    cudnnDestroyConvolutionDescriptor(*desc);
    *desc = NULL;
  }
  return nn_set_error(NN_ERR_BACKEND, "%s:%d: cuDNN has no %s convolution algorithm for "
                      "this shape within %zu MiB of workspace", __FILE__, __LINE__,
                      op_name[op], limit >> 20);
}

static nn_status_t plan_build(const nn_conv2d_shape_t *s, conv_plan_t *p) {
  const cudnnDataType_t f = nn_cudnn_type(p->fmt.prec);
  /* NHWC: activations [n][h][w][c], filters K x R x S x C (PyTorch's channels_last). */
  const cudnnTensorFormat_t layout = p->fmt.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  NN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  NN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, layout, f, s->n, s->c_in, s->h_in,
                                            s->w_in));
  NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, layout, f, s->n, s->c_out, s->h_out,
                                            s->w_out));
  NN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, f, layout, s->c_out, s->c_in,
                                            s->kh, s->kw));
  NN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, s->pad_h, s->pad_w, s->stride_h,
                                                 s->stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  /* The convolution accumulates in float32 whatever the data type. FMA math is strict
     fp32; TENSOR_OP math lets cuDNN use tensor cores (TF32 for float data). */
  NN_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p->conv, p->tf32 || p->fmt.prec != NN_PRECISION_FP32 ? CUDNN_TENSOR_OP_MATH
                                                       : CUDNN_FMA_MATH));
  return NN_OK;   /* each op's algorithm is chosen when that op is first needed */
}

static atomic_int searches[3];   /* algorithm searches per op, for tests */
int nn_cuda_conv_searches(int op) { return op >= 0 && op < 3 ? atomic_load(&searches[op]) : -1; }

/* The algorithm of op, chosen at its first use: a shape with no backward-data algorithm
   within the workspace limit still runs forward, and the backward filter of the first
   convolution (whose dx nobody needs). */
static nn_status_t plan_op(nn_cuda_ctx_t *c, conv_plan_t *p, conv_op_t op) {
  pthread_mutex_lock(&cache_mu);
  nn_status_t st = NN_OK;
  int algo = 0;
  if (!p->have[op]) {
    atomic_fetch_add(&searches[op], 1);
    switch (op) {
    case OP_FWD:
      st = pick(c, &p->shape, p, op, &p->cfwd, &algo, &p->ws_fwd);
      p->fwd = (cudnnConvolutionFwdAlgo_t)algo;
      break;
    case OP_BWD_DATA:
      st = pick(c, &p->shape, p, op, &p->cdata, &algo, &p->ws_bwd_data);
      p->bwd_data = (cudnnConvolutionBwdDataAlgo_t)algo;
      break;
    case OP_BWD_FILTER:
      st = pick(c, &p->shape, p, op, &p->cfilt, &algo, &p->ws_bwd_filter);
      p->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)algo;
      break;
    }
    if (st == NN_OK) p->have[op] = 1;
  }
  pthread_mutex_unlock(&cache_mu);
  return st;
}

static void plan_free(conv_plan_t *p) {
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  if (p->cfwd) cudnnDestroyConvolutionDescriptor(p->cfwd);
  if (p->cdata) cudnnDestroyConvolutionDescriptor(p->cdata);
  if (p->cfilt) cudnnDestroyConvolutionDescriptor(p->cfilt);
  free(p);
}

static nn_status_t conv_plan(nn_cuda_fmt_t fmt,
                             const nn_conv2d_shape_t *s0, conv_plan_t **out) {
  nn_conv2d_shape_t s = *s0;
  if (nn_conv2d_shape(&s) != NN_OK) return NN_ERR_ARG;
  const int tf32 = nn_cuda_tf32();  /* once, under the context's lock */
  pthread_mutex_lock(&cache_mu);
  for (int i = 0; i < cache_n; i++)
    if (cache[i]->tf32 == tf32 && cache[i]->fmt.prec == fmt.prec &&
        cache[i]->fmt.nhwc == fmt.nhwc &&
        same_shape(&cache[i]->shape, &s)) {
      *out = cache[i];
      pthread_mutex_unlock(&cache_mu);
      return NN_OK;
    }
  conv_plan_t *p = calloc(1, sizeof *p);
  nn_status_t st = p ? NN_OK : nn_set_error(NN_ERR_NO_MEMORY, "conv plan: out of memory");
  if (p) {
    p->shape = s;
    p->tf32 = tf32;
    p->fmt = fmt;
    st = plan_build(&s, p);
  }
  if (st == NN_OK) {
    if (cache_n == CONV_CACHE_MAX) { /* full: drop the oldest */
      plan_free(cache[0]);
      memmove(cache, cache + 1, (CONV_CACHE_MAX - 1) * sizeof cache[0]);
      cache_n--;
    }
    cache[cache_n++] = p;
    *out = p;
  } else if (p) {
    plan_free(p);
  }
  pthread_mutex_unlock(&cache_mu);
  return st;
}

nn_status_t nn_conv2d_forward_cuda_p(nn_cuda_fmt_t fmt, const nn_conv2d_shape_t *s,
                                     const void *x, const void *w, const void *b, void *y) {
  if (!s || !x || !w || !y)
    return nn_set_error(NN_ERR_ARG, "nn_conv2d_forward_cuda: NULL argument");
  nn_cuda_ctx_t *c;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st != NN_OK) return st;
  conv_plan_t *p;
  if ((st = conv_plan(fmt, s, &p)) != NN_OK) {
    if (st == NN_ERR_ARG) return nn_set_error(st, "nn_conv2d_forward_cuda: empty output");
    return st;
  }
  if ((st = plan_op(c, p, OP_FWD)) != NN_OK) return st;
  void *ws = NULL;
  if ((st = nn_cuda_workspace(c, p->ws_fwd, &ws)) != NN_OK) return st;
  const float one = 1.0f, zero = 0.0f;
  NN_CUDNN_CHECK(cudnnConvolutionForward(c->cudnn, &one, p->x, x, p->w, w, p->cfwd, p->fwd,
                                         ws, p->ws_fwd, &zero, p->y, y));
  if (b)
    NN_CUDA_CHECK(nn_cuk_channel_bias_add(c->stream, fmt.prec, fmt.nhwc, s->n, s->c_out,
                                          p->shape.h_out * p->shape.w_out, b, y));
  return NN_OK;
}

nn_status_t nn_conv2d_forward_cuda(const nn_conv2d_shape_t *s, const float *x,
                                   const float *w, const float *b, float *y) {
  return nn_conv2d_forward_cuda_p(NN_CUDA_FMT_FP32_NCHW, s, x, w, b, y);
}

nn_status_t nn_conv2d_backward_cuda_p(nn_cuda_fmt_t fmt, const nn_conv2d_shape_t *s,
                                      const void *x, const void *w, const void *dy, void *dx,
                                      int dx_add, void *dw, void *db) {
  if (!s || !dy) return nn_set_error(NN_ERR_ARG, "nn_conv2d_backward_cuda: NULL argument");
  nn_cuda_ctx_t *c;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st != NN_OK) return st;
  conv_plan_t *p;
  if ((st = conv_plan(fmt, s, &p)) != NN_OK) {
    if (st == NN_ERR_ARG) return nn_set_error(st, "nn_conv2d_backward_cuda: empty output");
    return st;
  }
  if (dw && (st = plan_op(c, p, OP_BWD_FILTER)) != NN_OK) return st;
  if (dx && (st = plan_op(c, p, OP_BWD_DATA)) != NN_OK) return st;
  size_t need = 0;
  if (dw && p->ws_bwd_filter > need) need = p->ws_bwd_filter;
  if (dx && p->ws_bwd_data > need) need = p->ws_bwd_data;
  void *ws = NULL;
  if ((st = nn_cuda_workspace(c, need, &ws)) != NN_OK) return st;
  const float one = 1.0f, dx_beta = dx_add ? 1.0f : 0.0f;
  if (db)
    NN_CUDA_CHECK(nn_cuk_channel_bias_grad(c->stream, fmt.prec, fmt.nhwc, s->n, s->c_out,
                                           p->shape.h_out * p->shape.w_out, dy, db));
  if (dw) NN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->cudnn, &one, p->x, x, p->y, dy,
                                                        p->cfilt, p->bwd_filter, ws,
                                                        p->ws_bwd_filter, &one, p->w, dw));
  if (dx) NN_CUDNN_CHECK(cudnnConvolutionBackwardData(c->cudnn, &one, p->w, w, p->y, dy,
                                                      p->cdata, p->bwd_data, ws,
                                                      p->ws_bwd_data, &dx_beta, p->x, dx));
  return NN_OK;
}

nn_status_t nn_conv2d_backward_cuda(const nn_conv2d_shape_t *s, const float *x,
                                    const float *w, const float *dy, float *dx, float *dw,
                                    float *db) {
  return nn_conv2d_backward_cuda_p(NN_CUDA_FMT_FP32_NCHW, s, x, w, dy, dx, 1, dw, db);
}

/* ---- batch norm ----
   Three ways, fastest first:
   - training in NHWC (channels last): cuDNN's SPATIAL_PERSISTENT mode through
     cudnnBatchNormalizationForwardTrainingEx / BackwardEx, as PyTorch does for
     channels-last training. It needs a reserve space kept from a layer's forward to its
     backward (the caller's nn_cuda_bn_reserve_t) and a workspace (the context's);
   - cuDNN's SPATIAL mode through the plain calls: inference, NCHW, and where cuDNN
     refuses PERSISTENT for a type;
   - nn's own kernels (kernels.cu; in NHWC channel-vectorised, a warp over a run of
     channels, partials merged in a fixed order): with NN_CUDA_BN=native, or for a type
     or layout that cuDNN's plain batch norm refuses (it is not documented for bfloat16;
     PyTorch never sends bfloat16 batch norm to cuDNN).
   A refusal (a BAD_PARAM or NOT_SUPPORTED status, before cuDNN does any work) moves that
   precision and layout to the next way for the rest of the process, and is said once
   (nn_notice) with the precision, layout and cuDNN's status, so that a slow figure is
   never unexplained. The saved mean and inverse standard deviation mean the same in
   every way, so a backward can always run one way further down than its forward. */

static atomic_int bn_desc_sets, pool_desc_sets;   /* descriptor (re)settings, for tests */
int nn_cuda_desc_sets(int pool) { return atomic_load(pool ? &pool_desc_sets : &bn_desc_sets); }

static int bn_native_for[2][3];        /* [nhwc][nn_precision_t]: plain cuDNN refused */
static int bn_persistent_refused[3];   /* [nn_precision_t]: PERSISTENT refused (NHWC) */

static int bn_native(nn_cuda_fmt_t f) {
  const char *e = getenv("NN_CUDA_BN");
  if (e && strcmp(e, "native") == 0) return 1;
  return bn_native_for[f.nhwc][f.prec];
}

static int bn_use_persistent(nn_cuda_fmt_t f, const nn_cuda_bn_reserve_t *r) {
  return r != NULL && f.nhwc && !bn_persistent_refused[f.prec] && !bn_native(f);
}

const char *nn_cuda_bn_path(nn_cuda_fmt_t f, int training) {
  if (bn_native(f)) return "nn's kernels";
  if (training && f.nhwc && !bn_persistent_refused[f.prec])
    return "cuDNN SPATIAL_PERSISTENT (Ex)";
  return "cuDNN SPATIAL";
}

/* A generic BAD_PARAM or a NOT_SUPPORTED sub-code (3000-3999): cuDNN does not do this
   type or layout. BAD_PARAM sub-codes name our arguments (a null or misaligned pointer)
   and stay errors. */
static int bn_is_refusal(cudnnStatus_t e) {
  return e == CUDNN_STATUS_BAD_PARAM || (e >= CUDNN_STATUS_NOT_SUPPORTED && e < 4000);
}

static const char *fmt_text(nn_cuda_fmt_t f, char *buf, size_t len) {
  snprintf(buf, len, "%s %s", nn_precision_name(f.prec), f.nhwc ? "NHWC" : "NCHW");
  return buf;
}

/* A refusal of a half type or of NHWC by plain cuDNN: remember it and take nn's kernels
   (errors of float32 NCHW, which cuDNN has always done, are real errors). */
static int bn_refused(nn_cuda_fmt_t f, cudnnStatus_t e, const char *call) {
  if ((f.prec == NN_PRECISION_FP32 && !f.nhwc) || !bn_is_refusal(e)) return 0;
  if (!bn_native_for[f.nhwc][f.prec]) {
    char t[32];
    nn_notice("CUDA: cuDNN refused batch norm in %s (%s: %s): nn's own batch-norm "
              "kernels (%s) run it from now on: correct, slower",
              fmt_text(f, t, sizeof t), call, cudnnGetErrorString(e),
              f.nhwc ? "channel-vectorised in NHWC" : "one block per channel");
  }
  bn_native_for[f.nhwc][f.prec] = 1;
  return 1;
}

/* A refusal of SPATIAL_PERSISTENT: remember it and take SPATIAL. */
static int bn_persistent_refusal(nn_cuda_fmt_t f, cudnnStatus_t e, const char *call) {
  if (!bn_is_refusal(e)) return 0;
  if (!bn_persistent_refused[f.prec]) {
    char t[32];
    nn_notice("CUDA: cuDNN refused SPATIAL_PERSISTENT training batch norm in %s (%s: %s): "
              "SPATIAL through the plain calls from now on (slower in channels last)",
              fmt_text(f, t, sizeof t), call, cudnnGetErrorString(e));
  }
  bn_persistent_refused[f.prec] = 1;
  return 1;
}

void nn_cuda_bn_reserve_free(nn_cuda_bn_reserve_t *r) {
  if (!r) return;
  nn_cuda_free(r->p);
  if (r->x) cudnnDestroyTensorDescriptor(r->x);
  if (r->param) cudnnDestroyTensorDescriptor(r->param);
  memset(r, 0, sizeof *r);
}

static nn_status_t bn_check(const nn_batchnorm2d_shape_t *s) {
  if (!s || s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1)
    return nn_set_error(NN_ERR_ARG, "batchnorm2d (CUDA): bad shape");
  return NN_OK;
}

static nn_status_t bn_cudnn_eps(const nn_batchnorm2d_shape_t *s) {
  if (s->eps < CUDNN_BN_MIN_EPSILON)
    return nn_set_error(NN_ERR_ARG, "batchnorm2d (CUDA): eps %g below cuDNN's minimum %g",
                        (double)s->eps, (double)CUDNN_BN_MIN_EPSILON);
  return NN_OK;
}

typedef struct {
  cudnnTensorDescriptor_t x, param;
  int layer_owned;         /* the layer's (nn_cuda_bn_reserve_t): kept, not freed */
} bn_desc_t;

static void bn_free(bn_desc_t *d) {
  if (d->layer_owned) return;
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->param) cudnnDestroyTensorDescriptor(d->param);
}

static int bn_desc_is(const nn_cuda_bn_reserve_t *r, nn_cuda_fmt_t f,
                      const nn_batchnorm2d_shape_t *s) {
  return r->desc_ok && r->fmt.prec == f.prec && r->fmt.nhwc == f.nhwc && r->n == s->n &&
         r->c == s->c && r->h == s->h && r->w == s->w;
}

/* The descriptors of s in format f; a cuDNN status, so that a refusal of the data type
   can be told. With a layer's state r they are the layer's, made at its first call and
   set again only when the shape changes (a smaller last batch), so a step creates and
   destroys none; without, they are made for this call (bn_free destroys them). The
   parameter descriptor is derived for SPATIAL; PERSISTENT takes the same 1xCx1x1
   shape. */
static cudnnStatus_t bn_desc(nn_cuda_fmt_t f, const nn_batchnorm2d_shape_t *s,
                             nn_cuda_bn_reserve_t *r, bn_desc_t *d) {
  cudnnStatus_t e = CUDNN_STATUS_SUCCESS;
  d->x = d->param = NULL;
  d->layer_owned = r != NULL;
  if (r && bn_desc_is(r, f, s)) {
    d->x = r->x;
    d->param = r->param;
    return e;
  }
  if (r) {
    r->desc_ok = 0;
    if (!r->x) e = cudnnCreateTensorDescriptor(&r->x);
    if (e == CUDNN_STATUS_SUCCESS && !r->param) e = cudnnCreateTensorDescriptor(&r->param);
    d->x = r->x;
    d->param = r->param;
  } else {
    e = cudnnCreateTensorDescriptor(&d->x);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnCreateTensorDescriptor(&d->param);
  }
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnSetTensor4dDescriptor(d->x, f.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                   nn_cudnn_type(f.prec), s->n, s->c, s->h, s->w);
  /* float for float, half and bfloat16 data: statistics and parameters stay float32. */
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnDeriveBNTensorDescriptor(d->param, d->x, CUDNN_BATCHNORM_SPATIAL);
  if (r && e == CUDNN_STATUS_SUCCESS) {
    r->fmt = f;
    r->n = s->n, r->c = s->c, r->h = s->h, r->w = s->w;
    r->desc_ok = 1;
    atomic_fetch_add(&bn_desc_sets, 1);
  }
  return e;
}

/* Training forward in SPATIAL_PERSISTENT (r: the layer's reserve, grown here). 1: done;
   0: cuDNN refused it (take SPATIAL); -1: an error (nn_last_error says it). */
static int bn_train_persistent(nn_cuda_ctx_t *c, nn_cuda_fmt_t f,
                               const nn_batchnorm2d_shape_t *s, const bn_desc_t *d,
                               const void *x, const float *gamma, const float *beta,
                               float *running_mean, float *running_var, void *y,
                               float *save_mean, float *save_invstd,
                               nn_cuda_bn_reserve_t *r) {
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  size_t ws_bytes = 0, rs_bytes = 0;
  const char *call = "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize";
  cudnnStatus_t e = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      c->cudnn, mode, ops, d->x, d->x, d->x, d->param, NULL, &ws_bytes);   /* as PyTorch */
  if (e == CUDNN_STATUS_SUCCESS) {
    call = "cudnnGetBatchNormalizationTrainingExReserveSpaceSize";
    e = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(c->cudnn, mode, ops, NULL, d->x,
                                                             &rs_bytes);
  }
  if (e == CUDNN_STATUS_SUCCESS) {
    void *ws = NULL;
    if (nn_cuda_workspace(c, ws_bytes, &ws) != NN_OK) return -1;
    if (rs_bytes > r->bytes) {
      nn_cuda_bn_reserve_free(r);
      if (nn_cuda_malloc(&r->p, rs_bytes) != NN_OK) return -1;
      r->bytes = rs_bytes;
    }
    const float one = 1.0f, zero = 0.0f;
    call = "cudnnBatchNormalizationForwardTrainingEx";
    e = cudnnBatchNormalizationForwardTrainingEx(
        c->cudnn, mode, ops, &one, &zero, d->x, x, NULL, NULL, d->x, y, d->param, gamma,
        beta, (double)s->momentum, running_mean, running_var, (double)s->eps, save_mean,
        save_invstd, NULL, ws, ws_bytes, r->p, rs_bytes);
  }
  if (e == CUDNN_STATUS_SUCCESS) {
    r->persistent = 1;
    return 1;
  }
  if (bn_persistent_refusal(f, e, call)) return 0;
  nn_cuda_fail(__FILE__, __LINE__, call, cudnnGetErrorString(e));
  return -1;
}

/* Backward after a PERSISTENT forward (same codes as bn_train_persistent). */
static int bn_backward_persistent(nn_cuda_ctx_t *c, nn_cuda_fmt_t f,
                                  const nn_batchnorm2d_shape_t *s, const bn_desc_t *d,
                                  const void *x, const float *gamma, const float *save_mean,
                                  const float *save_invstd, const void *dy, void *dx,
                                  int dx_add, float *dgamma, float *dbeta,
                                  const nn_cuda_bn_reserve_t *r) {
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  size_t ws_bytes = 0;
  const char *call = "cudnnGetBatchNormalizationBackwardExWorkspaceSize";
  cudnnStatus_t e = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      c->cudnn, mode, ops, d->x, d->x, d->x, NULL, d->x, d->param, NULL, &ws_bytes);
  if (e == CUDNN_STATUS_SUCCESS) {
    void *ws = NULL;
    if (nn_cuda_workspace(c, ws_bytes, &ws) != NN_OK) return -1;
    const float one = 1.0f, dx_beta = dx_add ? 1.0f : 0.0f;
    call = "cudnnBatchNormalizationBackwardEx";
    /* dx: added into or stored; dgamma, dbeta: added into. y and z are
       needed only with a fused activation or addition (none here). */
    e = cudnnBatchNormalizationBackwardEx(
        c->cudnn, mode, ops, &one, &dx_beta, &one, &one, d->x, x, NULL, NULL, d->x, dy, NULL,
        NULL, d->x, dx, d->param, gamma, NULL, dgamma, dbeta, (double)s->eps, save_mean,
        save_invstd, NULL, ws, ws_bytes, r->p, r->bytes);
  }
  if (e == CUDNN_STATUS_SUCCESS) return 1;
  if (bn_persistent_refusal(f, e, call)) return 0;
  nn_cuda_fail(__FILE__, __LINE__, call, cudnnGetErrorString(e));
  return -1;
}

nn_status_t nn_batchnorm2d_forward_train_cuda_p(nn_cuda_fmt_t fmt,
                                                const nn_batchnorm2d_shape_t *s,
                                                const void *x, const float *gamma,
                                                const float *beta, float *running_mean,
                                                float *running_var, void *y,
                                                float *save_mean, float *save_invstd,
                                                nn_cuda_bn_reserve_t *reserve) {
  nn_cuda_ctx_t *c;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st != NN_OK || (st = bn_check(s)) != NN_OK) return st;
  if (reserve) reserve->persistent = 0;
  if (!bn_native(fmt)) {
    if ((st = bn_cudnn_eps(s)) != NN_OK) return st;
    bn_desc_t d;
    cudnnStatus_t e = bn_desc(fmt, s, reserve, &d);
    if (e == CUDNN_STATUS_SUCCESS && bn_use_persistent(fmt, reserve)) {
      int done = bn_train_persistent(c, fmt, s, &d, x, gamma, beta, running_mean,
                                     running_var, y, save_mean, save_invstd, reserve);
      if (done != 0) {
        bn_free(&d);
        return done > 0 ? NN_OK : NN_ERR_BACKEND;
      }
    }
    const float one = 1.0f, zero = 0.0f;
    if (e == CUDNN_STATUS_SUCCESS)
      e = cudnnBatchNormalizationForwardTraining(
          c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.param, gamma,
          beta, (double)s->momentum, running_mean, running_var, (double)s->eps, save_mean,
          save_invstd);
    bn_free(&d);
    if (e == CUDNN_STATUS_SUCCESS) return NN_OK;
    if (!bn_refused(fmt, e, "cudnnBatchNormalizationForwardTraining"))
      return nn_cuda_fail(__FILE__, __LINE__, "cudnnBatchNormalizationForwardTraining",
                          cudnnGetErrorString(e));
  }
  if (fmt.nhwc) {
    void *ws = NULL;
    if ((st = nn_cuda_workspace(c, nn_cuk_bn_nhwc_workspace(s->n, s->c, s->h * s->w), &ws)) !=
        NN_OK)
      return st;
    NN_CUDA_CHECK(nn_cuk_bn_nhwc_train(c->stream, fmt.prec, s->n, s->c, s->h * s->w, s->eps,
                                       s->momentum, x, gamma, beta, running_mean,
                                       running_var, y, save_mean, save_invstd, (float *)ws));
    return NN_OK;
  }
  NN_CUDA_CHECK(nn_cuk_bn_train(c->stream, fmt.prec, fmt.nhwc, s->n, s->c, s->h * s->w, s->eps,
                                s->momentum, x, gamma, beta, running_mean, running_var, y,
                                save_mean, save_invstd));
  return NN_OK;
}

nn_status_t nn_batchnorm2d_forward_infer_cuda_p(nn_cuda_fmt_t fmt,
                                                const nn_batchnorm2d_shape_t *s,
                                                const void *x, const float *gamma,
                                                const float *beta, const float *running_mean,
                                                const float *running_var, void *y,
                                                nn_cuda_bn_reserve_t *state) {
  nn_cuda_ctx_t *c;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st != NN_OK || (st = bn_check(s)) != NN_OK) return st;
  if (!bn_native(fmt)) {
    if ((st = bn_cudnn_eps(s)) != NN_OK) return st;
    bn_desc_t d;
    cudnnStatus_t e = bn_desc(fmt, s, state, &d);
    const float one = 1.0f, zero = 0.0f;
    if (e == CUDNN_STATUS_SUCCESS)
      e = cudnnBatchNormalizationForwardInference(
          c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.param, gamma,
          beta, running_mean, running_var, (double)s->eps);
    bn_free(&d);
    if (e == CUDNN_STATUS_SUCCESS) return NN_OK;
    if (!bn_refused(fmt, e, "cudnnBatchNormalizationForwardInference"))
      return nn_cuda_fail(__FILE__, __LINE__, "cudnnBatchNormalizationForwardInference",
                          cudnnGetErrorString(e));
  }
  NN_CUDA_CHECK(nn_cuk_bn_infer(c->stream, fmt.prec, fmt.nhwc, s->n, s->c, s->h * s->w,
                                s->eps, x, gamma, beta, running_mean, running_var, y));
  return NN_OK;
}

/* dx is added into (dx_add) or stored: batch norm after a convolution is its input
   gradient's only writer, and storing (cuDNN's beta 0 for data, as PyTorch passes) spares
   the zeroing and the read of that gradient. The parameter gradients are always added
   into (nn's convention: gradients accumulate over backward calls; C floats only). */
nn_status_t nn_batchnorm2d_backward_cuda_p(nn_cuda_fmt_t fmt,
                                           const nn_batchnorm2d_shape_t *s, const void *x,
                                           const float *gamma, const float *save_mean,
                                           const float *save_invstd, const void *dy,
                                           void *dx, int dx_add, float *dgamma, float *dbeta,
                                           nn_cuda_bn_reserve_t *reserve) {
  if (!dx || !dgamma || !dbeta)
    return nn_set_error(NN_ERR_ARG, "nn_batchnorm2d_backward_cuda: dx, dgamma and dbeta "
                        "are all required (they are computed together)");
  nn_cuda_ctx_t *c;
  nn_status_t st = nn_cuda_ctx(&c);
  if (st != NN_OK || (st = bn_check(s)) != NN_OK) return st;
  if (!bn_native(fmt)) {
    if ((st = bn_cudnn_eps(s)) != NN_OK) return st;
    bn_desc_t d;
    cudnnStatus_t e = bn_desc(fmt, s, reserve, &d);
    if (e == CUDNN_STATUS_SUCCESS && reserve && reserve->persistent) {
      int done = bn_backward_persistent(c, fmt, s, &d, x, gamma, save_mean, save_invstd, dy,
                                        dx, dx_add, dgamma, dbeta, reserve);
      if (done != 0) {
        bn_free(&d);
        return done > 0 ? NN_OK : NN_ERR_BACKEND;
      }
    }
    const float one = 1.0f, dx_beta = dx_add ? 1.0f : 0.0f;
    if (e == CUDNN_STATUS_SUCCESS)
      e = cudnnBatchNormalizationBackward(c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &dx_beta,
                                          &one, &one, d.x, x, d.x, dy, d.x, dx, d.param,
                                          gamma, dgamma, dbeta, (double)s->eps, save_mean,
                                          save_invstd);
    bn_free(&d);
    if (e == CUDNN_STATUS_SUCCESS) return NN_OK;
    if (!bn_refused(fmt, e, "cudnnBatchNormalizationBackward"))
      return nn_cuda_fail(__FILE__, __LINE__, "cudnnBatchNormalizationBackward",
                          cudnnGetErrorString(e));
  }
  if (fmt.nhwc) {
    void *ws = NULL;
    if ((st = nn_cuda_workspace(c, nn_cuk_bn_nhwc_workspace(s->n, s->c, s->h * s->w), &ws)) !=
        NN_OK)
      return st;
    NN_CUDA_CHECK(nn_cuk_bn_nhwc_backward(c->stream, fmt.prec, s->n, s->c, s->h * s->w, x,
                                          gamma, save_mean, save_invstd, dy, dx, dx_add,
                                          dgamma, dbeta, (float *)ws));
    return NN_OK;
  }
  NN_CUDA_CHECK(nn_cuk_bn_backward(c->stream, fmt.prec, fmt.nhwc, s->n, s->c, s->h * s->w,
                                   x, gamma, save_mean, save_invstd, dy, dx, dx_add, dgamma,
                                   dbeta));
  return NN_OK;
}

nn_status_t nn_batchnorm2d_forward_train_cuda(const nn_batchnorm2d_shape_t *s,
                                              const float *x, const float *gamma,
                                              const float *beta, float *running_mean,
                                              float *running_var, float *y,
                                              float *save_mean, float *save_invstd) {
  return nn_batchnorm2d_forward_train_cuda_p(NN_CUDA_FMT_FP32_NCHW, s, x, gamma, beta,
                                             running_mean, running_var, y, save_mean,
                                             save_invstd, NULL);
}

nn_status_t nn_batchnorm2d_forward_infer_cuda(const nn_batchnorm2d_shape_t *s,
                                              const float *x, const float *gamma,
                                              const float *beta, const float *running_mean,
                                              const float *running_var, float *y) {
  return nn_batchnorm2d_forward_infer_cuda_p(NN_CUDA_FMT_FP32_NCHW, s, x, gamma, beta,
                                             running_mean, running_var, y, NULL);
}

nn_status_t nn_batchnorm2d_backward_cuda(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, const float *dy,
                                         float *dx, float *dgamma, float *dbeta) {
  return nn_batchnorm2d_backward_cuda_p(NN_CUDA_FMT_FP32_NCHW, s, x, gamma, save_mean,
                                        save_invstd, dy, dx, 1, dgamma, dbeta, NULL);
}

/* ---- pooling ----
   cuDNN, or nn's kernels (kernels.cu: the CPU's rules) where cuDNN refuses a type or
   layout (a refusal moves that precision and layout to nn's kernels for the rest of the
   process and is said once, as batch norm's), or everywhere with NN_CUDA_POOL=native.
   A layer's descriptors are kept in its nn_cuda_pool_desc_t, made at its first call and
   set again only when its shape changes; without one (the public float functions) they
   are made for the call. */

static int pool_native_for[2][3];   /* [nhwc][nn_precision_t]: cuDNN refused */

static int pool_native(nn_cuda_fmt_t f) {
  const char *e = getenv("NN_CUDA_POOL");
  if (e && strcmp(e, "native") == 0) return 1;
  return pool_native_for[f.nhwc][f.prec];
}

const char *nn_cuda_pool_path(nn_cuda_fmt_t f) {
  return pool_native(f) ? "nn's kernels" : "cuDNN";
}

/* A refusal of a half type or of NHWC: remember it and take nn's kernels (float32 NCHW
   errors are real errors). */
static int pool_refused(nn_cuda_fmt_t f, cudnnStatus_t e, const char *call) {
  if ((f.prec == NN_PRECISION_FP32 && !f.nhwc) || !bn_is_refusal(e)) return 0;
  if (!pool_native_for[f.nhwc][f.prec]) {
    char t[32];
    nn_notice("CUDA: cuDNN refused pooling in %s (%s: %s): nn's own pooling kernels run "
              "it from now on: correct, slower", fmt_text(f, t, sizeof t), call,
              cudnnGetErrorString(e));
  }
  pool_native_for[f.nhwc][f.prec] = 1;
  return 1;
}

void nn_cuda_pool_desc_free(nn_cuda_pool_desc_t *d) {
  if (!d) return;
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->pool) cudnnDestroyPoolingDescriptor(d->pool);
  memset(d, 0, sizeof *d);
}

static int pool_desc_is(const nn_cuda_pool_desc_t *d, nn_cuda_fmt_t f, int mode,
                        const nn_pool2d_shape_t *s) {
  const nn_pool2d_shape_t *k = &d->shape;
  return d->ok && d->fmt.prec == f.prec && d->fmt.nhwc == f.nhwc && d->mode == mode &&
         k->n == s->n && k->c == s->c && k->h_in == s->h_in && k->w_in == s->w_in &&
         k->kh == s->kh && k->kw == s->kw && k->stride_h == s->stride_h &&
         k->stride_w == s->stride_w && k->pad_h == s->pad_h && k->pad_w == s->pad_w;
}

/* d's descriptors for s (filled by nn_pool2d_shape) in format fmt, made where d has none
   yet; a cuDNN status, so that a refusal of the type can be told. */
static cudnnStatus_t pool_desc(nn_cuda_fmt_t fmt, const nn_pool2d_shape_t *s,
                               cudnnPoolingMode_t mode, nn_cuda_pool_desc_t *d) {
  if (pool_desc_is(d, fmt, (int)mode, s)) return CUDNN_STATUS_SUCCESS;
  d->ok = 0;
  cudnnStatus_t e = CUDNN_STATUS_SUCCESS;
  if (!d->x) e = cudnnCreateTensorDescriptor(&d->x);
  if (e == CUDNN_STATUS_SUCCESS && !d->y) e = cudnnCreateTensorDescriptor(&d->y);
  if (e == CUDNN_STATUS_SUCCESS && !d->pool) e = cudnnCreatePoolingDescriptor(&d->pool);
  const cudnnDataType_t f = nn_cudnn_type(fmt.prec);
  const cudnnTensorFormat_t layout = fmt.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnSetTensor4dDescriptor(d->x, layout, f, s->n, s->c, s->h_in, s->w_in);
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnSetTensor4dDescriptor(d->y, layout, f, s->n, s->c, s->h_out, s->w_out);
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnSetPooling2dDescriptor(d->pool, mode, CUDNN_NOT_PROPAGATE_NAN, s->kh, s->kw,
                                    s->pad_h, s->pad_w, s->stride_h, s->stride_w);
  if (e != CUDNN_STATUS_SUCCESS) return e;
  d->fmt = fmt;
  d->mode = (int)mode;
  d->shape = *s;
  d->ok = 1;
  atomic_fetch_add(&pool_desc_sets, 1);
  return e;
}

static cudnnPoolingMode_t pool_mode(int max) {
  return max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
}

/* One pooling call through cuDNN (dy NULL: forward): NN_OK, an error, or a refusal
   (*refused set: nn's kernels are to run it). dx added into (dx_add) or stored (beta 0:
   cuDNN does not read dx). */
static nn_status_t pool_cudnn(nn_cuda_ctx_t *c, nn_cuda_fmt_t fmt, int max,
                              const nn_pool2d_shape_t *s, const void *x, const void *y,
                              void *y_out, const void *dy, void *dx, int dx_add,
                              nn_cuda_pool_desc_t *cache, int *refused) {
  nn_cuda_pool_desc_t tmp, *d = cache ? cache : &tmp;
  memset(&tmp, 0, sizeof tmp);
  const char *call = "cudnnSetPooling2dDescriptor";
  cudnnStatus_t e = pool_desc(fmt, s, pool_mode(max), d);
  const float one = 1.0f, zero = 0.0f, dx_beta = dx_add ? 1.0f : 0.0f;
  if (e == CUDNN_STATUS_SUCCESS && !dy) {
    call = "cudnnPoolingForward";
    e = cudnnPoolingForward(c->cudnn, d->pool, &one, d->x, x, &zero, d->y, y_out);
  } else if (e == CUDNN_STATUS_SUCCESS) {
    call = "cudnnPoolingBackward";
    e = cudnnPoolingBackward(c->cudnn, d->pool, &one, d->y, y, d->y, dy, d->x, x, &dx_beta,
                             d->x, dx);
  }
  nn_cuda_pool_desc_free(&tmp);
  *refused = 0;
  if (e == CUDNN_STATUS_SUCCESS) return NN_OK;
  if ((*refused = pool_refused(fmt, e, call)) != 0) return NN_OK;
  return nn_cuda_fail(__FILE__, __LINE__, call, cudnnGetErrorString(e));
}

/* The context and s filled in (output size). */
static nn_status_t pool_begin(const nn_pool2d_shape_t *s0, nn_pool2d_shape_t *s,
                              nn_cuda_ctx_t **c) {
  if (!s0) return nn_set_error(NN_ERR_ARG, "pool2d (CUDA): NULL shape");
  *s = *s0;
  if (nn_pool2d_shape(s) != NN_OK) return NN_ERR_ARG;
  return nn_cuda_ctx(c);
}

nn_status_t nn_pool2d_forward_cuda_p(nn_cuda_fmt_t f, int max, const nn_pool2d_shape_t *s0,
                                     const void *x, void *y, nn_cuda_pool_desc_t *cache) {
  nn_cuda_ctx_t *c;
  nn_pool2d_shape_t s;
  nn_status_t st = pool_begin(s0, &s, &c);
  if (st != NN_OK) return st;
  int refused = 1;
  if (!pool_native(f) &&
      (st = pool_cudnn(c, f, max, &s, x, NULL, y, NULL, NULL, 0, cache, &refused)) != NN_OK)
    return st;
  if (refused) NN_CUDA_CHECK(nn_cuk_pool_forward(c->stream, f.prec, f.nhwc, max, &s, x, y));
  return NN_OK;
}

nn_status_t nn_pool2d_backward_cuda_p(nn_cuda_fmt_t f, int max, const nn_pool2d_shape_t *s0,
                                      const void *x, const void *y, const void *dy,
                                      void *dx, int dx_add, nn_cuda_pool_desc_t *cache) {
  nn_cuda_ctx_t *c;
  nn_pool2d_shape_t s;
  nn_status_t st = pool_begin(s0, &s, &c);
  if (st != NN_OK) return st;
  int refused = 1;
  if (!pool_native(f) &&
      (st = pool_cudnn(c, f, max, &s, x, y, NULL, dy, dx, dx_add, cache, &refused)) != NN_OK)
    return st;
  if (refused)
    NN_CUDA_CHECK(nn_cuk_pool_backward(c->stream, f.prec, f.nhwc, max, &s, x, dy, dx,
                                       dx_add));
  return NN_OK;
}

nn_status_t nn_maxpool2d_forward_cuda(const nn_pool2d_shape_t *s, const float *x, float *y) {
  return nn_pool2d_forward_cuda_p(NN_CUDA_FMT_FP32_NCHW, 1, s, x, y, NULL);
}

nn_status_t nn_maxpool2d_backward_cuda(const nn_pool2d_shape_t *s, const float *x,
                                       const float *y, const float *dy, float *dx) {
  return nn_pool2d_backward_cuda_p(NN_CUDA_FMT_FP32_NCHW, 1, s, x, y, dy, dx, 1, NULL);
}

nn_status_t nn_avgpool2d_forward_cuda(const nn_pool2d_shape_t *s, const float *x, float *y) {
  return nn_pool2d_forward_cuda_p(NN_CUDA_FMT_FP32_NCHW, 0, s, x, y, NULL);
}

nn_status_t nn_avgpool2d_backward_cuda(const nn_pool2d_shape_t *s, const float *x,
                                       const float *y, const float *dy, float *dx) {
  return nn_pool2d_backward_cuda_p(NN_CUDA_FMT_FP32_NCHW, 0, s, x, y, dy, dx, 1, NULL);
}
