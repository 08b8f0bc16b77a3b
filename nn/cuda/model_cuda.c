/* nn/cuda/model_cuda.c: a model on the GPU. The layer graph is the one model.c built
   (same order, same parameter layout); this file gives every layer device memory and
   runs forward/backward through the typed _cuda kernels on nn's stream. Nothing inside a
   step waits for the GPU: the input and labels go up through pinned staging buffers,
   and the loss and correct count come back only when the caller asks for them.

   Precision (nn_model_set_precision before nn_model_to_device):
   - fp32: activations, weights and gradients in float32.
   - fp16/bf16 (mixed precision): activations, and the weights and weight gradients of
     convolutions and linear layers, in half precision (params_h/grads_h, the same flat
     layout); cuDNN and cuBLAS accumulate in float32. The float32 master weights are
     cast into params_h at the start of every forward, so whoever changes them (the
     optimizer, a broadcast, a loaded checkpoint) needs to do nothing more. Batch norm
     reads its float32 parameters and writes float32 gradients directly (cuDNN's rule
     for half data). Each convolution/linear layer's half gradients are cast into the
     float32 gradients as soon as backward has computed them, before the layer is
     announced ready, so hvd reduces float32 gradients as in fp32. The loss is scaled
     by the loss scale (nn_cuda_amp_t, device memory) in the softmax kernel;
     nn_model_optim_step_cuda unscales, checks, steps and adapts the scale.

   Layout (nn_precision_config_t.channels_last): NCHW, or NHWC (PyTorch's channels_last,
   what cuDNN's tensor-core convolutions and batch norm prefer). In NHWC the input batch
   is permuted as it is loaded, convolutions read their weights K x R x S x C from the
   compute copy (permuted from the master's K x C x R x S at each forward, and their
   gradients permuted back), and a flatten of a spatial map permutes into PyTorch's
   feature order, so linear layers, logits, checkpoints and the host mirror are the same
   in both layouts. Elementwise layers do not care.

   Relu runs in place on the device where it does on the CPU, except over a pooling
   output: cuDNN's pooling backward reads the forward output y, which an in-place relu
   would have changed (the CPU max pool keeps an argmax instead). */
#include "nn/cuda/model_cuda.h"
#include "nn/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  void *out, *dout;        /* activations in the model's precision                  */
  int own;                 /* out/dout allocated for this layer (else aliases)      */
  int own_out;             /* out allocated here (flatten of the input: dout only)  */
  int inplace_relu;
  int permute;             /* NHWC flatten of a spatial map: out is its NCHW copy   */
  float *save_mean, *save_invstd;
  nn_cuda_bn_reserve_t bn_reserve;   /* batch norm, forward to backward (NHWC)      */
  uint8_t *mask;
} dlayer_t;

/* A host buffer in pinned memory for uploads that do not wait for the GPU: the event
   marks when the last copy out of it has finished, so it may be overwritten. */
typedef struct {
  void *host;
  size_t bytes;
  cudaEvent_t copied;
  int have_event;
} staging_t;

typedef struct {
  nn_cuda_fmt_t fmt;       /* precision and layout of activations                   */
  size_t es;               /* bytes per activation element                          */
  dlayer_t *L;
  float *params, *grads, *buffers;   /* float32 master copies                       */
  /* The compute copy of the parameters and their gradients, for convolutions and
     linear layers, when it differs from the master (mixed precision: half; NHWC:
     conv weights K x R x S x C); NULL otherwise. */
  void *params_h, *grads_h;
  void *input, *dinput, *dlogits;    /* in the model's precision                    */
  float *input_f;          /* the float32 input before its cast/permutation         */
  float *logits_f;         /* mixed precision: float32 logits of the last forward   */
  int32_t *labels;
  float *loss;             /* device scalar */
  int *correct;            /* device scalar */
  nn_cuda_amp_t *amp;      /* mixed precision: loss-scaling state                   */
  staging_t in_stage, label_stage;
  float *h_logits;         /* host mirror for nn_model_logits */
} cuda_model_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t sample_size(const nn_layer_t *l) { return (size_t)l->c * l->h * l->w; }

static cuda_model_t *CM(const nn_model_t *m) { return (cuda_model_t *)m->cuda; }

static int mixed(const cuda_model_t *d) { return d->fmt.prec != NN_PRECISION_FP32; }

/* The input and the conv/linear parameters need a converted copy. */
static int converted(const cuda_model_t *d) { return mixed(d) || d->fmt.nhwc; }

/* Element off of a buffer of es-byte elements. */
static void *elem(void *base, size_t off, size_t es) { return (char *)base + off * es; }

static void staging_free(staging_t *s) {
  if (s->host) cudaFreeHost(s->host);
  if (s->have_event) cudaEventDestroy(s->copied);
  memset(s, 0, sizeof *s);
}

static nn_status_t staging_init(staging_t *s, size_t bytes) {
  NN_CUDA_CHECK(cudaMallocHost(&s->host, bytes ? bytes : 1));
  s->bytes = bytes;
  NN_CUDA_CHECK(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
  s->have_event = 1;
  return NN_OK;
}

/* Copies bytes of host memory to dst on the device, asynchronously on the stream. The
   only wait is for the previous upload through the same buffer, which finished early
   in the previous step. */
static nn_status_t upload(nn_cuda_ctx_t *c, staging_t *s, void *dst, const void *src,
                          size_t bytes) {
  if (bytes > s->bytes)
    return nn_set_error(NN_ERR_ARG, "nn_model (CUDA): upload of %zu bytes into a %zu-byte "
                        "staging buffer", bytes, s->bytes);
  NN_CUDA_CHECK(cudaEventSynchronize(s->copied));
  memcpy(s->host, src, bytes);
  NN_CUDA_CHECK(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, c->stream));
  NN_CUDA_CHECK(cudaEventRecord(s->copied, c->stream));
  return NN_OK;
}

static void cuda_model_release(nn_model_t *m, cuda_model_t *d) {
  if (!d) return;
  if (d->L)
    for (int i = 0; i < m->num_layers; i++) {
      dlayer_t *l = &d->L[i];
      if (l->own) {
        if (l->own_out) nn_cuda_free(l->out);
        nn_cuda_free(l->dout);
      }
      nn_cuda_free(l->save_mean);
      nn_cuda_free(l->save_invstd);
      nn_cuda_bn_reserve_free(&l->bn_reserve);
      nn_cuda_free(l->mask);
    }
  free(d->L);
  nn_cuda_free(d->params);
  nn_cuda_free(d->grads);
  nn_cuda_free(d->buffers);
  nn_cuda_free(d->params_h);
  nn_cuda_free(d->grads_h);
  nn_cuda_free(d->input);
  nn_cuda_free(d->input_f);
  nn_cuda_free(d->dinput);
  nn_cuda_free(d->dlogits);
  nn_cuda_free(d->logits_f);
  nn_cuda_free(d->labels);
  nn_cuda_free(d->loss);
  nn_cuda_free(d->correct);
  nn_cuda_free(d->amp);
  staging_free(&d->in_stage);
  staging_free(&d->label_stage);
  free(d->h_logits);
  free(d);
}

void nn_cuda_model_free(nn_model_t *m) {
  if (!m || !m->cuda) return;
  /* Kernels may still read the buffers (nothing in a step waits): let them finish. */
  (void)nn_cuda_synchronize();
  cuda_model_release(m, CM(m));
  m->cuda = NULL;
}

#define ALLOC(p, bytes)                                           \
  do {                                                            \
    if ((s = nn_cuda_malloc((void **)&(p), (bytes))) != NN_OK) goto fail; \
  } while (0)

nn_status_t nn_model_to_device(nn_model_t *m, nn_device_t device) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_to_device: NULL model");
  if (device == NN_DEVICE_CPU) {
    if (!m->cuda) return NN_OK;
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_to_device: moving a model back to "
                        "the CPU is not supported (nn_model_sync_to_host copies its state)");
  }
  if (device != NN_DEVICE_CUDA)
    return nn_set_error(NN_ERR_ARG, "nn_model_to_device: unknown device %d", (int)device);
  if (m->cuda) return NN_OK;
  if (!nn_cuda_available())
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_to_device: %s", nn_cuda_info());
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  size_t batch = (size_t)m->cfg.batch;
  size_t in_elems = batch * (size_t)m->in_c * m->in_h * m->in_w;
  size_t logit_elems = batch * (size_t)m->num_classes;
  cuda_model_t *d = calloc(1, sizeof *d);
  if (!d) return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_to_device: out of memory");
  d->fmt.prec = m->precision.precision;
  d->fmt.nhwc = m->precision.channels_last != 0;
  d->es = nn_cuda_elem_size(d->fmt.prec);
  const size_t es = d->es;
  d->L = calloc((size_t)m->num_layers, sizeof *d->L);
  d->h_logits = calloc(logit_elems, sizeof(float));
  if (!d->L || !d->h_logits) {
    s = nn_set_error(NN_ERR_NO_MEMORY, "nn_model_to_device: out of memory");
    goto fail;
  }
  ALLOC(d->params, m->param_len * sizeof(float));
  ALLOC(d->grads, m->param_len * sizeof(float));
  ALLOC(d->buffers, m->num_buffers * sizeof(float));
  ALLOC(d->input, in_elems * es);
  if (m->dinput) ALLOC(d->dinput, in_elems * es);
  ALLOC(d->dlogits, logit_elems * es);
  ALLOC(d->labels, batch * sizeof(int32_t));
  ALLOC(d->loss, sizeof(float));
  ALLOC(d->correct, sizeof(int));
  if (converted(d)) {
    ALLOC(d->params_h, m->param_len * es);
    ALLOC(d->grads_h, m->param_len * es);
    ALLOC(d->input_f, in_elems * sizeof(float));
  }
  if (mixed(d)) {
    ALLOC(d->logits_f, logit_elems * sizeof(float));
    ALLOC(d->amp, sizeof(nn_cuda_amp_t));
  }
  if ((s = staging_init(&d->in_stage, in_elems * sizeof(float))) != NN_OK ||
      (s = staging_init(&d->label_stage, batch * sizeof(int32_t))) != NN_OK)
    goto fail;
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    dlayer_t *dl = &d->L[i];
    size_t bytes = batch * sample_size(l) * es;
    int view = l->is_view;
    if (l->kind == NN_LAYER_RELU && view) {
      nn_layer_kind_t sk = m->layers[l->in[0]].kind;
      if (sk == NN_LAYER_MAXPOOL2D || sk == NN_LAYER_AVGPOOL2D) view = 0;
      else dl->inplace_relu = 1;
    }
    if (d->fmt.nhwc && l->kind == NN_LAYER_FLATTEN && l->in_c > 1 && l->in_h * l->in_w > 1) {
      dl->permute = dl->own = dl->own_out = 1;
      ALLOC(dl->out, bytes);
      ALLOC(dl->dout, bytes);
    } else if (view) {
      dl->out = d->L[l->in[0]].out;
      dl->dout = d->L[l->in[0]].dout;
    } else if (l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT) {
      dl->own = 1;
      dl->out = d->input;
      ALLOC(dl->dout, bytes);
    } else {
      dl->own = dl->own_out = 1;
      ALLOC(dl->out, bytes);
      ALLOC(dl->dout, bytes);
    }
    if (l->kind == NN_LAYER_BATCHNORM2D) {
      ALLOC(dl->save_mean, (size_t)l->c * sizeof(float));
      ALLOC(dl->save_invstd, (size_t)l->c * sizeof(float));
    }
    if (l->kind == NN_LAYER_DROPOUT) ALLOC(dl->mask, batch * sample_size(l));
  }
  if ((s = nn_cuda_to_device(d->params, m->params, m->param_len * sizeof(float))) != NN_OK ||
      (s = nn_cuda_to_device(d->buffers, m->buffers, m->num_buffers * sizeof(float))) != NN_OK ||
      (s = nn_cuda_memset0(d->grads, m->param_len * sizeof(float))) != NN_OK)
    goto fail;
  if (d->amp) {
    nn_cuda_amp_t a = {m->precision.init_scale, 0, 0, 0, 0};
    if ((s = nn_cuda_to_device(d->amp, &a, sizeof a)) != NN_OK) goto fail;
  }
  /* The host activations are no longer used: give their memory back (it can be many
     GiB for resnet50 at batch 256). Parameters, buffers and counters stay as the host
     mirror. */
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (!l->is_view) {
      if (l->kind != NN_LAYER_FLATTEN) free(l->out);
      free(l->dout);
    }
    l->out = l->dout = NULL;
    free(l->argmax);
    free(l->mask);
    l->argmax = NULL;
    l->mask = NULL;
  }
  free(m->workspace);
  m->workspace = NULL;
  m->workspace_floats = 0;
  free(m->input);
  m->input = NULL;
  m->cuda = d;
  m->last_n = 0;
  m->have_loss = 0;
  return NN_OK;
fail:
  (void)nn_cuda_synchronize();
  cuda_model_release(m, d);
  return s;
}

nn_device_t nn_model_device(const nn_model_t *m) {
  return m && m->cuda ? NN_DEVICE_CUDA : NN_DEVICE_CPU;
}

float *nn_model_device_params(nn_model_t *m) { return m && m->cuda ? CM(m)->params : NULL; }
float *nn_model_device_grads(nn_model_t *m) { return m && m->cuda ? CM(m)->grads : NULL; }

const float *nn_model_device_logits(const nn_model_t *m) {
  if (!m || !m->cuda) return NULL;
  if (mixed(CM(m))) return CM(m)->logits_f;
  return (const float *)CM(m)->L[m->num_layers - 1].out;
}

nn_status_t nn_model_sync_to_host(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_host: NULL model");
  if (!m->cuda) return NN_OK;
  nn_status_t s = nn_cuda_to_host(m->params, CM(m)->params, m->param_len * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_host(m->buffers, CM(m)->buffers, m->num_buffers * sizeof(float));
  return s;
}

nn_status_t nn_model_sync_to_device(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_device: NULL model");
  if (!m->cuda) return NN_OK;
  nn_status_t s = nn_cuda_to_device(CM(m)->params, m->params, m->param_len * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_device(CM(m)->buffers, m->buffers, m->num_buffers * sizeof(float));
  return s;
}

const float *nn_cuda_model_logits_host(const nn_model_t *m) {
  cuda_model_t *d = CM(m);
  size_t n = (size_t)(m->last_n > 0 ? m->last_n : 0) * m->num_classes;
  if (n && nn_cuda_to_host(d->h_logits, nn_model_device_logits(m), n * sizeof(float)) !=
               NN_OK)
    return NULL;
  return d->h_logits;
}

/* ---- forward ---- */

static const void *in_out(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? CM(m)->input : CM(m)->L[in].out;
}

static void *in_grad(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? CM(m)->dinput : CM(m)->L[in].dout;
}

/* Weights (and their gradients) of convolutions and linear layers: the compute copy
   when there is one (mixed precision, NHWC), the float32 master otherwise. */
static const void *gemm_param(const cuda_model_t *d, size_t off) {
  return d->params_h ? elem(d->params_h, off, d->es) : (const void *)(d->params + off);
}

static void *gemm_grad(const cuda_model_t *d, size_t off) {
  return d->grads_h ? elem(d->grads_h, off, d->es) : (void *)(d->grads + off);
}

/* The compute copy of the parameters from the master: cast (mixed precision), and conv
   weights permuted to K x R x S x C (NHWC). */
static nn_status_t refresh_compute_params(nn_model_t *m, nn_cuda_ctx_t *c) {
  cuda_model_t *d = CM(m);
  NN_CUDA_CHECK(nn_cuk_cast_from_float(c->stream, d->fmt.prec, m->param_len, d->params,
                                       d->params_h));
  if (d->fmt.nhwc)
    for (int i = 0; i < m->num_layers; i++) {
      const nn_layer_t *l = &m->layers[i];
      if (l->kind != NN_LAYER_CONV2D) continue;
      NN_CUDA_CHECK(nn_cuk_float_to_nhwc(c->stream, d->fmt.prec, l->c, l->in_c, l->kh * l->kw,
                                         d->params + l->w_off,
                                         elem(d->params_h, l->w_off, d->es)));
    }
  return NN_OK;
}

/* Layer l's gradients from the compute copy into the float32 master gradients (conv
   weights permuted back in NHWC), before the layer is announced ready. */
static nn_status_t gather_layer_grads(nn_model_t *m, nn_cuda_ctx_t *c, const nn_layer_t *l) {
  cuda_model_t *d = CM(m);
  if (l->param_end <= l->param_begin) return NN_OK;
  if (l->kind == NN_LAYER_CONV2D && d->fmt.nhwc) {
    NN_CUDA_CHECK(nn_cuk_nhwc_to_float(c->stream, d->fmt.prec, l->c, l->in_c, l->kh * l->kw,
                                       elem(d->grads_h, l->w_off, d->es),
                                       d->grads + l->w_off));
    if (l->has_bias)
      NN_CUDA_CHECK(nn_cuk_cast_to_float(c->stream, d->fmt.prec, (size_t)l->c,
                                         elem(d->grads_h, l->b_off, d->es),
                                         d->grads + l->b_off));
    return NN_OK;
  }
  NN_CUDA_CHECK(nn_cuk_cast_to_float(c->stream, d->fmt.prec, l->param_end - l->param_begin,
                                     elem(d->grads_h, l->param_begin, d->es),
                                     d->grads + l->param_begin));
  return NN_OK;
}

static nn_status_t layer_forward(nn_model_t *m, nn_cuda_ctx_t *c, int i, int n,
                                 int training) {
  const nn_layer_t *l = &m->layers[i];
  cuda_model_t *d = CM(m);
  dlayer_t *dl = &d->L[i];
  const nn_precision_t p = d->fmt.prec;
  const nn_cuda_fmt_t f = d->fmt;
  const void *x = in_out(m, l->in[0]);
  size_t count = (size_t)n * sample_size(l);
  float *P = d->params, *B = d->buffers;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
    return nn_conv2d_forward_cuda_p(f, &s, x, gemm_param(d, l->w_off),
                                    l->has_bias ? gemm_param(d, l->b_off) : NULL, dl->out);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
    if (!training)
      return nn_batchnorm2d_forward_infer_cuda_p(f, &s, x, P + l->w_off, P + l->b_off,
                                                 B + l->rm_off, B + l->rv_off, dl->out);
    m->counters[l->counter]++;
    return nn_batchnorm2d_forward_train_cuda_p(f, &s, x, P + l->w_off, P + l->b_off,
                                               B + l->rm_off, B + l->rv_off, dl->out,
                                               dl->save_mean, dl->save_invstd,
                                               &dl->bn_reserve);
  }
  case NN_LAYER_RELU:
    NN_CUDA_CHECK(nn_cuk_relu_forward(c->stream, p, count, dl->inplace_relu ? dl->out : x,
                                      dl->out));
    return NN_OK;
  case NN_LAYER_MAXPOOL2D:
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_pool2d_forward_cuda_p(f, l->kind == NN_LAYER_MAXPOOL2D, &s, x, dl->out);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    if (n < 1 || l->c < 1 || l->in_h * l->in_w < 1)
      return nn_set_error(NN_ERR_ARG, "global average pool (CUDA): bad shape");
    NN_CUDA_CHECK(nn_cuk_gap_forward(c->stream, p, f.nhwc, n, l->c, l->in_h * l->in_w, x,
                                     dl->out));
    return NN_OK;
  case NN_LAYER_LINEAR:
    return nn_linear_forward_cuda_p(p, n, l->in_c * l->in_h * l->in_w, l->c, x,
                                    gemm_param(d, l->w_off),
                                    l->has_bias ? gemm_param(d, l->b_off) : NULL, dl->out);
  case NN_LAYER_DROPOUT:
    if (training && l->p > 0.0f) {
      /* The CPU model's seed, so the masks match its masks. */
      NN_CUDA_CHECK(nn_cuk_dropout_forward(c->stream, p, count, l->p,
                                           nn_layer_dropout_seed(m, i), m->dropout_step, x,
                                           dl->out, dl->mask));
      return NN_OK;
    }
    NN_CUDA_CHECK(nn_cuk_dropout_forward(c->stream, p, count, 0.0f, 0, 0, x, dl->out,
                                         dl->mask));
    return NN_OK;
  case NN_LAYER_FLATTEN:
    if (dl->permute)
      NN_CUDA_CHECK(nn_cuk_nhwc_to_nchw(c->stream, p, n, l->in_c, l->in_h * l->in_w, x,
                                        dl->out));
    return NN_OK;
  case NN_LAYER_ADD:
    NN_CUDA_CHECK(nn_cuk_add_forward(c->stream, p, count, x, in_out(m, l->in[1]), dl->out));
    return NN_OK;
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_forward (CUDA): unknown layer kind");
}

/* The input batch into d->input, in the model's precision. */
static nn_status_t load_input(nn_model_t *m, nn_cuda_ctx_t *c, const float *x, int n) {
  cuda_model_t *d = CM(m);
  size_t elems = (size_t)n * m->in_c * m->in_h * m->in_w;
  const int on_device = nn_cuda_is_device_ptr(x);
  if (!converted(d)) {
    if (on_device) {
      NN_CUDA_CHECK(cudaMemcpyAsync(d->input, x, elems * sizeof(float),
                                    cudaMemcpyDeviceToDevice, c->stream));
      return NN_OK;
    }
    return upload(c, &d->in_stage, d->input, x, elems * sizeof(float));
  }
  if (!on_device) {
    nn_status_t s = upload(c, &d->in_stage, d->input_f, x, elems * sizeof(float));
    if (s != NN_OK) return s;
    x = d->input_f;
  }
  if (d->fmt.nhwc)
    NN_CUDA_CHECK(nn_cuk_float_to_nhwc(c->stream, d->fmt.prec, n, m->in_c,
                                       m->in_h * m->in_w, x, d->input));
  else
    NN_CUDA_CHECK(nn_cuk_cast_from_float(c->stream, d->fmt.prec, elems, x, d->input));
  return NN_OK;
}

nn_status_t nn_cuda_model_forward(nn_model_t *m, const float *x, int n, int training) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  m->have_loss = 0;
  m->last_n = 0;
  if ((s = load_input(m, c, x, n)) != NN_OK) return s;
  /* This forward's compute weights from the float32 master weights. */
  if (d->params_h && (s = refresh_compute_params(m, c)) != NN_OK) return s;
  for (int i = 0; i < m->num_layers; i++) {
    double t0 = now_s();   /* enqueue time only: kernels run asynchronously */
    s = layer_forward(m, c, i, n, training);
    m->layers[i].forward_s = now_s() - t0;
    if (s != NN_OK) return s;
  }
  if (mixed(d))
    NN_CUDA_CHECK(nn_cuk_cast_to_float(c->stream, d->fmt.prec, (size_t)n * m->num_classes,
                                       d->L[m->num_layers - 1].out, d->logits_f));
  if (training) m->dropout_step++;
  m->last_n = n;
  m->last_training = training;
  return NN_OK;
}

nn_status_t nn_cuda_model_loss(nn_model_t *m, const int32_t *labels, float *loss,
                               int *correct) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  if (m->last_n == 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_loss: no forward pass to take the loss of");
  int n = m->last_n;
  if (nn_cuda_is_device_ptr(labels)) {
    NN_CUDA_CHECK(cudaMemcpyAsync(d->labels, labels, (size_t)n * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, c->stream));
  } else {
    for (int i = 0; i < n; i++)
      if (labels[i] < 0 || labels[i] >= m->num_classes)
        return nn_set_error(NN_ERR_ARG, "nn_model_loss: label %d of sample %d outside "
                            "[0, %d)", (int)labels[i], i, m->num_classes);
    if ((s = upload(c, &d->label_stage, d->labels, labels, (size_t)n * sizeof(int32_t))) !=
        NN_OK)
      return s;
  }
  NN_CUDA_CHECK(nn_cuk_softmax_xent(c->stream, d->fmt.prec, n, m->num_classes,
                                    d->L[m->num_layers - 1].out, d->labels, d->loss,
                                    d->correct, d->dlogits, d->amp ? &d->amp->scale : NULL));
  if (loss || correct) {  /* the only wait of a step, and only when asked */
    float l = 0;
    int k = 0;
    NN_CUDA_CHECK(cudaMemcpyAsync(&l, d->loss, sizeof l, cudaMemcpyDeviceToHost, c->stream));
    NN_CUDA_CHECK(cudaMemcpyAsync(&k, d->correct, sizeof k, cudaMemcpyDeviceToHost,
                                  c->stream));
    NN_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (loss) *loss = l;
    if (correct) *correct = k;
  }
  m->have_loss = 1;
  return NN_OK;
}

/* ---- backward ---- */

static nn_status_t layer_backward(nn_model_t *m, nn_cuda_ctx_t *c, int i, int n) {
  const nn_layer_t *l = &m->layers[i];
  cuda_model_t *d = CM(m);
  dlayer_t *dl = &d->L[i];
  const nn_precision_t p = d->fmt.prec;
  const nn_cuda_fmt_t f = d->fmt;
  const void *x = in_out(m, l->in[0]);
  void *dx = in_grad(m, l->in[0]);
  const void *dy = dl->dout;
  size_t count = (size_t)n * sample_size(l);
  float *P = d->params, *G = d->grads;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
    if (!nn_layer_input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_conv2d_backward_cuda_p(f, &s, x, gemm_param(d, l->w_off), dy, dx,
                                     gemm_grad(d, l->w_off),
                                     l->has_bias ? gemm_grad(d, l->b_off) : NULL);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
    return nn_batchnorm2d_backward_cuda_p(f, &s, x, P + l->w_off, dl->save_mean,
                                          dl->save_invstd, dy, dx, G + l->w_off,
                                          G + l->b_off, &dl->bn_reserve);
  }
  case NN_LAYER_RELU:
    if (dl->inplace_relu)
      NN_CUDA_CHECK(nn_cuk_relu_backward(c->stream, p, count, dl->out, dl->dout, dl->dout));
    else
      NN_CUDA_CHECK(nn_cuk_relu_backward(c->stream, p, count, dl->out, dy, dx));
    return NN_OK;
  case NN_LAYER_MAXPOOL2D:
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_pool2d_backward_cuda_p(f, l->kind == NN_LAYER_MAXPOOL2D, &s, x, dl->out, dy,
                                     dx);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    NN_CUDA_CHECK(nn_cuk_gap_backward(c->stream, p, f.nhwc, n, l->c, l->in_h * l->in_w, dy,
                                      dx));
    return NN_OK;
  case NN_LAYER_LINEAR:
    if (!nn_layer_input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_linear_backward_cuda_p(p, n, l->in_c * l->in_h * l->in_w, l->c, x,
                                     gemm_param(d, l->w_off), dy, dx,
                                     gemm_grad(d, l->w_off),
                                     l->has_bias ? gemm_grad(d, l->b_off) : NULL);
  case NN_LAYER_DROPOUT:
    NN_CUDA_CHECK(nn_cuk_dropout_backward(c->stream, p, count, l->p, dl->mask, dy, dx));
    return NN_OK;
  case NN_LAYER_FLATTEN:
    if (l->in[0] == NN_MODEL_INPUT || !dl->own) return NN_OK;
    if (dl->permute)
      NN_CUDA_CHECK(nn_cuk_nchw_to_nhwc_acc(c->stream, p, n, l->in_c, l->in_h * l->in_w, dy,
                                            dx));
    else
      NN_CUDA_CHECK(nn_cuk_accumulate(c->stream, p, count, dy, dx));
    return NN_OK;
  case NN_LAYER_ADD:
    NN_CUDA_CHECK(nn_cuk_add_backward(c->stream, p, count, dy, dx, in_grad(m, l->in[1])));
    return NN_OK;
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_backward (CUDA): unknown layer kind");
}

nn_status_t nn_cuda_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const int n = m->last_n;
  const size_t es = d->es;
  NN_CUDA_CHECK(cudaMemsetAsync(d->grads, 0, m->param_len * sizeof(float), c->stream));
  if (d->grads_h)
    NN_CUDA_CHECK(cudaMemsetAsync(d->grads_h, 0, m->param_len * es, c->stream));
  for (int i = 0; i < m->num_layers; i++)
    if (d->L[i].own)
      NN_CUDA_CHECK(cudaMemsetAsync(d->L[i].dout, 0,
                                    (size_t)n * sample_size(&m->layers[i]) * es, c->stream));
  if (d->dinput)
    NN_CUDA_CHECK(cudaMemsetAsync(d->dinput, 0, (size_t)n * m->in_c * m->in_h * m->in_w * es,
                                  c->stream));
  NN_CUDA_CHECK(cudaMemcpyAsync(d->L[m->num_layers - 1].dout, d->dlogits,
                                (size_t)n * m->num_classes * es, cudaMemcpyDeviceToDevice,
                                c->stream));
  size_t ready = m->param_len;
  for (int i = m->num_layers - 1; i >= 0; i--) {
    nn_layer_t *l = &m->layers[i];
    double t0 = now_s();
    s = layer_backward(m, c, i, n);
    /* This layer's weight gradients from the compute copy into the float32 ones. */
    if (s == NN_OK && d->grads_h &&
        (l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR))
      s = gather_layer_grads(m, c, l);
    l->backward_s = now_s() - t0;
    if (s != NN_OK) return s;
    /* Enqueued, not finished: a consumer (hvd) orders itself after nn's stream. */
    if (l->param_end > l->param_begin && l->param_begin < ready) {
      ready = l->param_begin;
      if (on_ready) on_ready(ctx, ready);
    }
  }
  if (ready != 0 && on_ready) on_ready(ctx, 0);
  m->have_loss = 0;
  return NN_OK;
}

/* ---- the update ---- */

nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  if (!m || !o) return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: NULL argument");
  if (!m->cuda)
    return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: the model is not on the "
                        "device (nn_model_to_device)");
  cuda_model_t *d = CM(m);
  if (nn_cuda_optim_count(o) != m->param_len)
    return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: the optimizer was created "
                        "for %zu parameters, the model has %zu", nn_cuda_optim_count(o),
                        m->param_len);
  if (!mixed(d)) return nn_cuda_optim_step(o, d->params, d->grads, lr);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const nn_precision_config_t *k = &m->precision;
  NN_CUDA_CHECK(nn_cuk_amp_unscale(c->stream, m->param_len, d->grads, d->amp));
  s = nn_cuda_optim_step_skip(o, d->params, d->grads, lr, &d->amp->found_inf);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(nn_cuk_amp_update(c->stream, d->amp, k->growth_factor, k->backoff_factor,
                                  k->growth_interval, k->static_scale));
  return NN_OK;
}

nn_status_t nn_model_loss_scale(nn_model_t *m, float *scale, int64_t *skipped_steps) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_loss_scale: NULL model");
  nn_cuda_amp_t a = {1.0f, 0, 0, 0, 0};
  if (m->cuda && CM(m)->amp) {
    nn_status_t s = nn_cuda_to_host(&a, CM(m)->amp, sizeof a);
    if (s != NN_OK) return s;
  }
  if (scale) *scale = a.scale;
  if (skipped_steps) *skipped_steps = (int64_t)a.skipped;
  return NN_OK;
}
