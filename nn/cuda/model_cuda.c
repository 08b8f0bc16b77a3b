/* nn/cuda/model_cuda.c: the CUDA backend of the model walk (nn/model_walk.c). The
   layer graph is the one model.c built (same order, same parameter layout); this file
   gives every layer device memory (nn_cuda_model_attach) and runs each layer kind
   through the typed _cuda kernels on nn's stream, and owns the device optimizer.
   Nothing inside a step waits for the GPU: the input and labels go up through pinned
   staging buffers, and the loss and correct count come back only when the caller asks
   for them.

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
     by the loss scale (nn_cuda_amp_t, device memory) in the softmax kernel; the
     optimizer step (optim_step_amp) unscales, checks, steps and adapts the scale.

   Layout (nn_precision_config_t.channels_last): NCHW, or NHWC (PyTorch's channels_last,
   what cuDNN's tensor-core convolutions and batch norm prefer). In NHWC the input batch
   is permuted as it is loaded, convolutions read their weights K x R x S x C from the
   compute copy (permuted from the master's K x C x R x S at each forward, and their
   gradients permuted back), and a flatten of a spatial map permutes into PyTorch's
   feature order, so linear layers, logits, checkpoints and the host mirror are the same
   in both layouts. Elementwise layers do not care.

   Relu runs in place on the device where it does on the CPU, except over a pooling
   output: cuDNN's pooling backward reads the forward output y, which an in-place relu
   would have changed (the CPU max pool keeps an argmax instead).

   Backward follows the CPU's first-writer rule (nn_layer_t.dx_first): the layer that
   writes an activation gradient first in the pass stores it (cuDNN and cuBLAS with
   beta 0, nn's kernels with add 0) and the later ones add, so the walk zeroes only the
   gradients nobody writes and no kernel reads back a gradient of zeros. The rule is
   planned again for this backend's views when the model moves here (a relu over a
   pooling output and an NHWC flatten own their gradient here, unlike on the CPU). */
#include "nn/model_internal.h"
#include "nn/cuda/cuda_internal.h"
#include "nn/cuda/graph_cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* A layer's device state besides its activations (which live in nn_layer_t once the
   model is on the device; out/dout here only until nn_cuda_model_attach commits). */
typedef struct {
  void *out, *dout;        /* staged activations in the model's precision           */
  int own_out, own_dout;
  int inplace_relu;
  int permute;             /* NHWC flatten of a spatial map: out is its NCHW copy   */
  float *save_mean, *save_invstd;
  nn_cuda_bn_reserve_t bn_reserve;   /* batch norm: descriptors, reserve (NHWC)     */
  nn_cuda_pool_desc_t pool_desc;     /* pooling: descriptors                        */
  nn_cuda_gconv_plan_t *gconv;       /* grouped convolution: descriptors, algorithms */
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
  void *input, *dinput, *dlogits;    /* staged until commit (then m->input, ...)    */
  float *input_f;          /* the float32 input before its cast/permutation         */
  float *logits_f;         /* mixed precision: float32 logits of the last forward   */
  int32_t *labels;
  float *loss;             /* device scalar */
  int *correct;            /* device scalar */
  nn_cuda_amp_t *amp;      /* mixed precision: loss-scaling state                   */
  staging_t in_stage, label_stage;
  float *h_logits;         /* host mirror for nn_model_logits */
  nn_cuda_optim_t *optim;  /* the model's optimizer (nn_model_optim_create)         */
} cuda_model_t;

static const nn_backend_t cuda_backend;

static cuda_model_t *CM(const nn_model_t *m) { return (cuda_model_t *)m->backend_state; }

/* The device state of m, or NULL when m is not on this backend. */
static cuda_model_t *on_device(const nn_model_t *m) {
  return m && m->backend == &cuda_backend ? CM(m) : NULL;
}

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

/* Frees d and what it still owns (staged activations only before a commit). */
static void cuda_model_release(const nn_model_t *m, cuda_model_t *d) {
  if (!d) return;
  if (d->L)
    for (int i = 0; i < m->num_layers; i++) {
      dlayer_t *l = &d->L[i];
      if (l->own_out) nn_cuda_free(l->out);
      if (l->own_dout) nn_cuda_free(l->dout);
      nn_cuda_free(l->save_mean);
      nn_cuda_free(l->save_invstd);
      nn_cuda_bn_reserve_free(&l->bn_reserve);
      nn_cuda_pool_desc_free(&l->pool_desc);
      nn_cuda_gconv_plan_free(l->gconv);
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
  nn_cuda_optim_free(d->optim);
  staging_free(&d->in_stage);
  staging_free(&d->label_stage);
  free(d->h_logits);
  free(d);
}

static void cuda_release(nn_model_t *m) {
  if (!m->backend_state) return;
  /* Kernels may still read the buffers (nothing in a step waits): let them finish. */
  (void)nn_cuda_synchronize();
  nn_model_free_activations(m, nn_cuda_free);
  cuda_model_release(m, CM(m));
  m->backend_state = NULL;
}

/* ---- the optimizer ---- */

/* A device optimizer from m's optimizer configuration and host state. */
static nn_status_t make_optim(const nn_model_t *m, nn_cuda_optim_t **out) {
  nn_cuda_optim_t *o = NULL;
  size_t count = 0;
  float *state = nn_optim_state(m->optim, &count);
  /* Over the trainable range params[train_from, param_len) (nn/model_freeze.c). */
  nn_status_t s = nn_cuda_optim_create(&o, &m->optim_cfg, m->param_len - m->train_from);
  if (s == NN_OK)
    s = nn_cuda_optim_state_to_device(o, state, count, *nn_optim_step_count(m->optim));
  if (s != NN_OK) {
    nn_cuda_optim_free(o);
    return s;
  }
  *out = o;
  return NN_OK;
}

static nn_status_t cuda_optim_attach(nn_model_t *m) {
  nn_cuda_optim_t *o = NULL;
  nn_status_t s = make_optim(m, &o);
  if (s != NN_OK) return s;
  nn_cuda_optim_free(CM(m)->optim);
  CM(m)->optim = o;
  return NN_OK;
}

/* One update of m with o. fp32: the optimizer on the master weights. Mixed precision:
   unscale the gradients (flagging inf/NaN on the device), step unless flagged, adapt
   the loss scale: all enqueued, nothing waits. */
static nn_status_t optim_step_amp(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  cuda_model_t *d = CM(m);
  /* Frozen layers (nn/model_freeze.c): the optimizer covers params[from, param_len). */
  const size_t from = m->train_from, count = m->param_len - from;
  if (nn_cuda_optim_count(o) != count)
    return nn_set_error(NN_ERR_ARG, "nn_model_optim_step (CUDA): the optimizer was created "
                        "for %zu parameters, the model trains %zu", nn_cuda_optim_count(o),
                        count);
  if (!mixed(d)) return nn_cuda_optim_step(o, d->params + from, d->grads + from, lr);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  const nn_precision_config_t *k = &m->precision;
  NN_CUDA_CHECK(nn_cuk_amp_unscale(c->stream, count, d->grads + from, d->amp));
  s = nn_cuda_optim_step_skip(o, d->params + from, d->grads + from, lr, &d->amp->found_inf);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(nn_cuk_amp_update(c->stream, d->amp, k->growth_factor, k->backoff_factor,
                                  k->growth_interval, k->static_scale));
  return NN_OK;
}

static nn_status_t cuda_optim_step(nn_model_t *m, float lr) {
  return optim_step_amp(m, CM(m)->optim, lr);
}

nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  if (!m || !o) return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: NULL argument");
  if (!on_device(m))
    return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: the model is not on the "
                        "device (nn_model_to_device)");
  return optim_step_amp(m, o, lr);
}

/* ---- moving a model to the device ---- */

#define ALLOC(p, bytes)                                           \
  do {                                                            \
    if ((s = nn_cuda_malloc((void **)&(p), (bytes))) != NN_OK) goto fail; \
  } while (0)

/* Hands the staged device activations to the model's layers, after the host ones are
   gone: the walk reads them from there, and plans the first writers of the gradients
   for this backend's views (view, written: num_layers and num_layers + 1 bytes). */
static void commit(nn_model_t *m, cuda_model_t *d, char *view, char *written) {
  for (int i = 0; i < m->num_layers; i++) view[i] = (char)!d->L[i].own_dout;
  nn_model_plan_grad_writes(m, view, written);
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    dlayer_t *dl = &d->L[i];
    l->out = dl->out;
    l->dout = dl->dout;
    l->own_out = dl->own_out;
    l->own_dout = dl->own_dout;
    dl->out = dl->dout = NULL;
    dl->own_out = dl->own_dout = 0;
  }
  m->input = d->input;
  m->dinput = d->dinput;
  m->dlogits = d->dlogits;
  d->input = d->dinput = d->dlogits = NULL;
  m->act_size = d->es;
  m->backend = &cuda_backend;
  m->backend_state = d;
}

/* Gives every layer of m (on the CPU) device memory, copies the parameters, buffers
   and optimizer up, frees the host activations and makes the CUDA backend m's. On
   failure m stays on the CPU, unchanged. nn reaches this backend only through here (the
   caller's nn_model_to_device) and the table it installs: nothing in nn/ names nn/cuda. */
nn_status_t nn_model_to_device(nn_model_t *m, nn_device_t device) {
  int done;
  nn_status_t st = nn_model_to_device_args(m, device, &done);
  if (st != NN_OK || done) return st;
  if (!nn_cuda_available())
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_to_device: %s", nn_cuda_info());
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  size_t batch = (size_t)m->cfg.batch;
  size_t in_elems = batch * nn_model_input_size(m);
  size_t logit_elems = batch * (size_t)m->num_classes;
  char *view = NULL, *written = NULL;   /* the gradient plan's scratch (commit) */
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
  if (m->need_dinput) ALLOC(d->dinput, in_elems * es);
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
    size_t bytes = batch * nn_layer_sample_size(l) * es;
    int view = l->is_view;
    if (l->kind == NN_LAYER_RELU && view) {
      nn_layer_kind_t sk = m->layers[l->in[0]].kind;
      if (sk == NN_LAYER_MAXPOOL2D || sk == NN_LAYER_AVGPOOL2D) view = 0;
      else dl->inplace_relu = 1;
    }
    if (d->fmt.nhwc && l->kind == NN_LAYER_FLATTEN && l->in_c > 1 && l->in_h * l->in_w > 1) {
      dl->permute = dl->own_out = dl->own_dout = 1;
      ALLOC(dl->out, bytes);
      ALLOC(dl->dout, bytes);
    } else if (view) {
      dl->out = d->L[l->in[0]].out;
      dl->dout = d->L[l->in[0]].dout;
    } else if (l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT) {
      dl->own_dout = 1;
      dl->out = d->input;
      ALLOC(dl->dout, bytes);
    } else {
      dl->own_out = dl->own_dout = 1;
      ALLOC(dl->out, bytes);
      ALLOC(dl->dout, bytes);
    }
    if (l->kind == NN_LAYER_BATCHNORM2D) {
      ALLOC(dl->save_mean, (size_t)l->c * sizeof(float));
      ALLOC(dl->save_invstd, (size_t)l->c * sizeof(float));
    }
    if (l->kind == NN_LAYER_DROPOUT) ALLOC(dl->mask, batch * nn_layer_sample_size(l));
  }
  if ((s = nn_cuda_to_device(d->params, m->params, m->param_len * sizeof(float))) != NN_OK ||
      (s = nn_cuda_to_device(d->buffers, m->buffers, m->num_buffers * sizeof(float))) != NN_OK ||
      (s = nn_cuda_memset0(d->grads, m->param_len * sizeof(float))) != NN_OK)
    goto fail;
  if (d->amp) {
    nn_cuda_amp_t a = {m->precision.init_scale, 0, 0, 0, 0};
    if ((s = nn_cuda_to_device(d->amp, &a, sizeof a)) != NN_OK) goto fail;
  }
  /* The optimizer moves along, with its state (a resumed run's). */
  if (m->optim && (s = make_optim(m, &d->optim)) != NN_OK) goto fail;
  /* The host activations are no longer used: give their memory back (it can be many
     GiB for resnet50 at batch 256). Parameters, buffers, counters and the optimizer
     state stay as the host mirror. */
  view = malloc((size_t)m->num_layers);
  written = malloc((size_t)m->num_layers + 1u);
  if (!view || !written) {
    s = nn_set_error(NN_ERR_NO_MEMORY, "nn_model_to_device: out of memory");
    goto fail;
  }
  m->backend->release(m);
  commit(m, d, view, written);
  free(view);
  free(written);
  m->last_n = 0;
  m->have_loss = 0;
  return NN_OK;
fail:
  free(view);
  free(written);
  (void)nn_cuda_synchronize();
  cuda_model_release(m, d);
  return s;
}

/* ---- host arrays ---- */

static nn_status_t cuda_sync_to_host(nn_model_t *m) {
  cuda_model_t *d = CM(m);
  nn_status_t s = nn_cuda_to_host(m->params, d->params, m->param_len * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_host(m->buffers, d->buffers, m->num_buffers * sizeof(float));
  if (s == NN_OK && d->optim) {
    size_t count = 0;
    float *state = nn_optim_state(m->optim, &count);
    s = nn_cuda_optim_state_to_host(d->optim, state, count, nn_optim_step_count(m->optim));
  }
  return s;
}

static nn_status_t cuda_sync_to_device(nn_model_t *m) {
  cuda_model_t *d = CM(m);
  nn_status_t s = nn_cuda_to_device(d->params, m->params, m->param_len * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_device(d->buffers, m->buffers, m->num_buffers * sizeof(float));
  if (s == NN_OK && d->optim) {
    size_t count = 0;
    float *state = nn_optim_state(m->optim, &count);
    s = nn_cuda_optim_state_to_device(d->optim, state, count, *nn_optim_step_count(m->optim));
  }
  return s;
}

static float *cuda_params_home(nn_model_t *m) { return CM(m)->params; }
static float *cuda_grads_home(nn_model_t *m) { return CM(m)->grads; }

const float *nn_model_device_logits(const nn_model_t *m) {
  const cuda_model_t *d = on_device(m);
  if (!d) return NULL;
  if (mixed(d)) return d->logits_f;
  return (const float *)m->layers[m->num_layers - 1].out;
}

static const float *cuda_logits_host(const nn_model_t *m) {
  cuda_model_t *d = CM(m);
  size_t n = (size_t)(m->last_n > 0 ? m->last_n : 0) * m->num_classes;
  if (n && nn_cuda_to_host(d->h_logits, nn_model_device_logits(m), n * sizeof(float)) !=
               NN_OK)
    return NULL;
  return d->h_logits;
}

static nn_status_t cuda_loss_scale(nn_model_t *m, float *scale, int64_t *skipped_steps) {
  nn_cuda_amp_t a = {1.0f, 0, 0, 0, 0};
  if (CM(m)->amp) {
    nn_status_t s = nn_cuda_to_host(&a, CM(m)->amp, sizeof a);
    if (s != NN_OK) return s;
  }
  if (scale) *scale = a.scale;
  if (skipped_steps) *skipped_steps = (int64_t)a.skipped;
  return NN_OK;
}

/* ---- memory and gradients on nn's stream ---- */

static nn_status_t cuda_zero(void *p, size_t bytes) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
  return NN_OK;
}

static nn_status_t cuda_copy(void *dst, const void *src, size_t bytes) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
  return NN_OK;
}

/* The float32 gradients and their compute copy, which backward adds into. */
static nn_status_t cuda_zero_grads(nn_model_t *m) {
  cuda_model_t *d = CM(m);
  nn_status_t s = cuda_zero(d->grads, m->param_len * sizeof(float));
  if (s == NN_OK && d->grads_h) s = cuda_zero(d->grads_h, m->param_len * d->es);
  return s;
}

static nn_status_t cuda_scale_grads(nn_model_t *m, size_t from, size_t to, float factor) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(nn_cuk_scale(c->stream, to - from, CM(m)->grads + from, factor));
  return NN_OK;
}

/* ---- forward ---- */

/* Input channels of one filter of a convolution (grouped: of its group). */
static int conv_in_c(const nn_layer_t *l) {
  return l->kind == NN_LAYER_GCONV ? l->in_c / l->groups : l->in_c;
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
      if (l->kind != NN_LAYER_CONV2D && l->kind != NN_LAYER_GCONV) continue;
      NN_CUDA_CHECK(nn_cuk_float_to_nhwc(c->stream, d->fmt.prec, l->c, conv_in_c(l),
                                         l->kh * l->kw, d->params + l->w_off,
                                         elem(d->params_h, l->w_off, d->es)));
    }
  return NN_OK;
}

/* Layer l's gradients from the compute copy into the float32 master gradients (conv
   weights permuted back in NHWC), before the layer is announced ready. */
static nn_status_t gather_layer_grads(nn_model_t *m, nn_cuda_ctx_t *c, const nn_layer_t *l) {
  cuda_model_t *d = CM(m);
  if (!d->grads_h || l->param_end <= l->param_begin) return NN_OK;
  if ((l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_GCONV) && d->fmt.nhwc) {
    NN_CUDA_CHECK(nn_cuk_nhwc_to_float(c->stream, d->fmt.prec, l->c, conv_in_c(l), l->kh * l->kw,
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

/* The input batch into m->input, in the model's precision. */
static nn_status_t load_input(nn_model_t *m, nn_cuda_ctx_t *c, const float *x, int n) {
  cuda_model_t *d = CM(m);
  size_t elems = (size_t)n * nn_model_input_size(m);
  const int on_dev = nn_cuda_is_device_ptr(x);
  if (!converted(d)) {
    if (on_dev) {
      NN_CUDA_CHECK(cudaMemcpyAsync(m->input, x, elems * sizeof(float),
                                    cudaMemcpyDeviceToDevice, c->stream));
      return NN_OK;
    }
    return upload(c, &d->in_stage, m->input, x, elems * sizeof(float));
  }
  if (!on_dev) {
    nn_status_t s = upload(c, &d->in_stage, d->input_f, x, elems * sizeof(float));
    if (s != NN_OK) return s;
    x = d->input_f;
  }
  if (d->fmt.nhwc)
    NN_CUDA_CHECK(nn_cuk_float_to_nhwc(c->stream, d->fmt.prec, n, m->in_c,
                                       m->in_h * m->in_w, x, m->input));
  else
    NN_CUDA_CHECK(nn_cuk_cast_from_float(c->stream, d->fmt.prec, elems, x, m->input));
  return NN_OK;
}

static nn_status_t cuda_load_input(nn_model_t *m, const float *x, int n) {
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  if ((s = load_input(m, c, x, n)) != NN_OK) return s;
  /* This forward's compute weights from the float32 master weights. */
  if (CM(m)->params_h) return refresh_compute_params(m, c);
  return NN_OK;
}

static nn_status_t cuda_forward_done(nn_model_t *m, int n) {
  cuda_model_t *d = CM(m);
  if (!mixed(d)) return NN_OK;
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  NN_CUDA_CHECK(nn_cuk_cast_to_float(c->stream, d->fmt.prec, (size_t)n * m->num_classes,
                                     m->layers[m->num_layers - 1].out, d->logits_f));
  return NN_OK;
}

static nn_status_t cuda_loss(nn_model_t *m, const int32_t *labels, float *loss,
                             int *correct) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
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
                                    m->layers[m->num_layers - 1].out, d->labels, d->loss,
                                    d->correct, m->dlogits, d->amp ? &d->amp->scale : NULL));
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
  return NN_OK;
}

/* ---- the layers ---- */

/* What every layer function starts from. */
#define LAYER_VARS                                              \
  const nn_layer_t *l = &m->layers[i];                          \
  cuda_model_t *d = CM(m);                                      \
  dlayer_t *dl = &d->L[i];                                      \
  const nn_precision_t p = d->fmt.prec;                         \
  const nn_cuda_fmt_t f = d->fmt;                               \
  const void *x = nn_layer_in(m, l->in[0]);                     \
  size_t count = (size_t)n * nn_layer_sample_size(l);           \
  float *P = d->params, *G = d->grads;                          \
  nn_cuda_ctx_t *c;                                             \
  nn_status_t s = nn_cuda_ctx(&c);                              \
  if (s != NN_OK) return s;                                     \
  (void)dl, (void)p, (void)f, (void)x, (void)count, (void)P, (void)G

static nn_status_t conv_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_conv2d_shape_t sh = nn_layer_conv_shape(l, n);
  return nn_conv2d_forward_cuda_p(f, &sh, x, gemm_param(d, l->w_off),
                                  l->has_bias ? gemm_param(d, l->b_off) : NULL, l->out);
}

static nn_status_t conv_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_conv2d_shape_t sh = nn_layer_conv_shape(l, n);
  s = nn_conv2d_backward_cuda_p(f, &sh, x, gemm_param(d, l->w_off), l->dout,
                                nn_layer_dx(m, i), !l->dx_first[0], gemm_grad(d, l->w_off),
                                l->has_bias ? gemm_grad(d, l->b_off) : NULL);
  /* This layer's weight gradients from the compute copy into the float32 ones. */
  return s == NN_OK ? gather_layer_grads(m, c, l) : s;
}

static nn_status_t bn_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  nn_batchnorm2d_shape_t sh = nn_layer_bn_shape(l, n);
  float *B = d->buffers;
  if (!training)
    return nn_batchnorm2d_forward_infer_cuda_p(f, &sh, x, P + l->w_off, P + l->b_off,
                                               B + l->rm_off, B + l->rv_off, l->out,
                                               &dl->bn_reserve);
  m->counters[l->counter]++;
  return nn_batchnorm2d_forward_train_cuda_p(f, &sh, x, P + l->w_off, P + l->b_off,
                                             B + l->rm_off, B + l->rv_off, l->out,
                                             dl->save_mean, dl->save_invstd,
                                             &dl->bn_reserve);
}

static nn_status_t bn_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_batchnorm2d_shape_t sh = nn_layer_bn_shape(l, n);
  return nn_batchnorm2d_backward_cuda_p(f, &sh, x, P + l->w_off, dl->save_mean,
                                        dl->save_invstd, l->dout, nn_layer_dx(m, i),
                                        !l->dx_first[0], G + l->w_off, G + l->b_off,
                                        &dl->bn_reserve);
}

static nn_status_t relu_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  NN_CUDA_CHECK(nn_cuk_relu_forward(c->stream, p, count, dl->inplace_relu ? l->out : x,
                                    l->out));
  return NN_OK;
}

static nn_status_t relu_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  /* In place, dy and dx are the same values: mask them, which is storing. */
  if (dl->inplace_relu)
    NN_CUDA_CHECK(nn_cuk_relu_backward(c->stream, p, count, l->out, l->dout, l->dout, 0));
  else
    NN_CUDA_CHECK(nn_cuk_relu_backward(c->stream, p, count, l->out, l->dout,
                                       nn_layer_dx(m, i), !l->dx_first[0]));
  return NN_OK;
}

/* cuDNN pools both ways; its backward reads x and y (no argmax). */
static nn_status_t pool_forward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_pool2d_shape_t sh = nn_layer_pool_shape(l, n);
  return nn_pool2d_forward_cuda_p(f, l->kind == NN_LAYER_MAXPOOL2D, &sh, x, l->out,
                                  &dl->pool_desc);
}

static nn_status_t pool_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_pool2d_shape_t sh = nn_layer_pool_shape(l, n);
  return nn_pool2d_backward_cuda_p(f, l->kind == NN_LAYER_MAXPOOL2D, &sh, x, l->out, l->dout,
                                   nn_layer_dx(m, i), !l->dx_first[0], &dl->pool_desc);
}

static nn_status_t maxpool_forward(nn_model_t *m, int i, int n, int training) {
  (void)training;
  return pool_forward(m, i, n);
}
static nn_status_t maxpool_backward(nn_model_t *m, int i, int n) {
  return pool_backward(m, i, n);
}
static nn_status_t avgpool_forward(nn_model_t *m, int i, int n, int training) {
  (void)training;
  return pool_forward(m, i, n);
}
static nn_status_t avgpool_backward(nn_model_t *m, int i, int n) {
  return pool_backward(m, i, n);
}

static nn_status_t gap_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  if (n < 1 || l->c < 1 || l->in_h * l->in_w < 1)
    return nn_set_error(NN_ERR_ARG, "global average pool (CUDA): bad shape");
  NN_CUDA_CHECK(nn_cuk_gap_forward(c->stream, p, f.nhwc, n, l->c, l->in_h * l->in_w, x,
                                   l->out));
  return NN_OK;
}

static nn_status_t gap_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  NN_CUDA_CHECK(nn_cuk_gap_backward(c->stream, p, f.nhwc, n, l->c, l->in_h * l->in_w,
                                    l->dout, nn_layer_dx(m, i), !l->dx_first[0]));
  return NN_OK;
}

static nn_status_t linear_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  return nn_linear_forward_cuda_p(p, n, l->in_c * l->in_h * l->in_w, l->c, x,
                                  gemm_param(d, l->w_off),
                                  l->has_bias ? gemm_param(d, l->b_off) : NULL, l->out);
}

static nn_status_t linear_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  s = nn_linear_backward_cuda_p(p, n, l->in_c * l->in_h * l->in_w, l->c, x,
                                gemm_param(d, l->w_off), l->dout, nn_layer_dx(m, i),
                                !l->dx_first[0], gemm_grad(d, l->w_off),
                                l->has_bias ? gemm_grad(d, l->b_off) : NULL);
  return s == NN_OK ? gather_layer_grads(m, c, l) : s;
}

static nn_status_t dropout_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  if (training && l->p > 0.0f) {
    /* The CPU model's seed, so the masks match its masks. */
    NN_CUDA_CHECK(nn_cuk_dropout_forward(c->stream, p, count, l->p,
                                         nn_layer_dropout_seed(m, i), m->dropout_step, x,
                                         l->out, dl->mask));
    return NN_OK;
  }
  NN_CUDA_CHECK(nn_cuk_dropout_forward(c->stream, p, count, 0.0f, 0, 0, x, l->out, dl->mask));
  return NN_OK;
}

static nn_status_t dropout_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  NN_CUDA_CHECK(nn_cuk_dropout_backward(c->stream, p, count, l->p, dl->mask, l->dout,
                                        nn_layer_dx(m, i), !l->dx_first[0]));
  return NN_OK;
}

static nn_status_t flatten_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  if (dl->permute)
    NN_CUDA_CHECK(nn_cuk_nhwc_to_nchw(c->stream, p, n, l->in_c, l->in_h * l->in_w, x,
                                      l->out));
  return NN_OK;
}

static nn_status_t flatten_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  if (l->in[0] == NN_MODEL_INPUT || !l->own_dout) return NN_OK;
  void *dx = nn_layer_dx(m, i);
  if (dl->permute)
    NN_CUDA_CHECK(nn_cuk_nchw_to_nhwc_acc(c->stream, p, n, l->in_c, l->in_h * l->in_w,
                                          l->dout, dx, !l->dx_first[0]));
  else
    NN_CUDA_CHECK(nn_cuk_accumulate(c->stream, p, count, l->dout, dx, !l->dx_first[0]));
  return NN_OK;
}

static nn_status_t add_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  NN_CUDA_CHECK(nn_cuk_add_forward(c->stream, p, count, x, nn_layer_in(m, l->in[1]),
                                   l->out));
  return NN_OK;
}

static nn_status_t add_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  NN_CUDA_CHECK(nn_cuk_add_backward(c->stream, p, count, l->dout, nn_layer_dx(m, i),
                                    !l->dx_first[0], nn_layer_in_grad(m, l->in[1]),
                                    !l->dx_first[1]));
  return NN_OK;
}

/* ---- the graph kinds (nn/model_internal.h, NN_LAYER_GRAPH_KIND_LIST) ----
   nn/cuda/gconv_cudnn.c and graph_kernels.cu; the grouped convolution's weights are a
   convolution's (compute copy, gathered gradients). */
static nn_status_t gconv_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_gconv_shape_t sh = nn_layer_gconv_shape(l, n);
  return nn_gconv_forward_cuda_p(f, &sh, x, gemm_param(d, l->w_off),
                                 l->has_bias ? gemm_param(d, l->b_off) : NULL, l->out,
                                 &dl->gconv);
}

static nn_status_t gconv_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_gconv_shape_t sh = nn_layer_gconv_shape(l, n);
  /* The gradient of the model input is wanted by nobody. */
  void *dx = nn_layer_input_grad_wanted(m, l->in[0]) ? nn_layer_dx(m, i) : NULL;
  s = nn_gconv_backward_cuda_p(f, &sh, x, gemm_param(d, l->w_off), l->dout, dx,
                               !l->dx_first[0], gemm_grad(d, l->w_off),
                               l->has_bias ? gemm_grad(d, l->b_off) : NULL, &dl->gconv);
  return s == NN_OK ? gather_layer_grads(m, c, l) : s;
}

static nn_status_t act_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  NN_CUDA_CHECK(nn_cuk_act_forward(c->stream, p, count, l->act, l->alpha, l->lo, l->hi, x,
                                   l->out));
  return NN_OK;
}

static nn_status_t act_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  NN_CUDA_CHECK(nn_cuk_act_backward(c->stream, p, count, l->act, l->alpha, l->lo, l->hi, x,
                                    l->dout, nn_layer_dx(m, i), !l->dx_first[0]));
  return NN_OK;
}

static nn_status_t mul_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  const nn_layer_t *b = &m->layers[l->in[1]];
  NN_CUDA_CHECK(nn_cuk_mul_forward(c->stream, p, f.nhwc, n, l->c, l->h * l->w, b->h * b->w,
                                   x, nn_layer_in(m, l->in[1]), l->out));
  return NN_OK;
}

/* The two inputs' gradients one after the other: they may be one buffer (x * x). */
static nn_status_t mul_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  const nn_layer_t *b = &m->layers[l->in[1]];
  const int hw = l->h * l->w, b_hw = b->h * b->w;
  NN_CUDA_CHECK(nn_cuk_mul_backward_a(c->stream, p, f.nhwc, n, l->c, hw, b_hw,
                                      nn_layer_in(m, l->in[1]), l->dout, nn_layer_dx(m, i),
                                      !l->dx_first[0]));
  NN_CUDA_CHECK(nn_cuk_mul_backward_b(c->stream, p, f.nhwc, n, l->c, hw, b_hw, x, l->dout,
                                      nn_layer_in_grad(m, l->in[1]), !l->dx_first[1]));
  return NN_OK;
}

static nn_status_t concat_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  NN_CUDA_CHECK(nn_cuk_concat_forward(c->stream, p, f.nhwc, n, l->in_c, l->c - l->in_c,
                                      l->h * l->w, x, nn_layer_in(m, l->in[1]), l->out));
  return NN_OK;
}

static nn_status_t concat_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  const int ca = l->in_c, cb = l->c - l->in_c, hw = l->h * l->w;
  NN_CUDA_CHECK(nn_cuk_concat_backward(c->stream, p, f.nhwc, n, ca, cb, hw, 0, l->dout,
                                       nn_layer_dx(m, i), !l->dx_first[0]));
  NN_CUDA_CHECK(nn_cuk_concat_backward(c->stream, p, f.nhwc, n, ca, cb, hw, 1, l->dout,
                                       nn_layer_in_grad(m, l->in[1]), !l->dx_first[1]));
  return NN_OK;
}

static const nn_backend_t cuda_backend = {
    .name = "CUDA",
    .device = NN_DEVICE_CUDA,
    .writes_first_dx = 1,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .load_input = cuda_load_input,
    .forward_done = cuda_forward_done,
    .loss = cuda_loss,
    .logits_host = cuda_logits_host,
    .params_home = cuda_params_home,
    .grads_home = cuda_grads_home,
    .zero_grads = cuda_zero_grads,
    .scale_grads = cuda_scale_grads,
    .optim_attach = cuda_optim_attach,
    .optim_step = cuda_optim_step,
    .sync_to_host = cuda_sync_to_host,
    .sync_to_device = cuda_sync_to_device,
    .loss_scale = cuda_loss_scale,
    .release = cuda_release,
    .layer = {NN_LAYER_KIND_LIST(NN_LAYER_OPS_ENTRY)},
};
