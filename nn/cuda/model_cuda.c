/* nn/cuda/model_cuda.c: a model on the GPU. The layer graph is the one model.c built
   (same order, same parameter layout); this file gives every layer device memory and
   runs forward/backward through the _cuda kernels on nn's stream. Nothing inside a step
   waits for the GPU: the input (and labels) go up with one copy each, and the loss and
   correct count come back only when the caller asks for them.

   Relu runs in place on the device where it does on the CPU, except over a pooling
   output: cuDNN's pooling backward reads the forward output y, which an in-place relu
   would have changed (the CPU max pool keeps an argmax instead). */
#include "nn/cuda/model_cuda.h"
#include "nn/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  float *out, *dout;
  int own;                 /* out/dout allocated for this layer (else aliases)      */
  int own_out;             /* out allocated here (flatten of the input: dout only)  */
  int inplace_relu;
  float *save_mean, *save_invstd;
  uint8_t *mask;
} dlayer_t;

typedef struct {
  dlayer_t *L;
  float *params, *grads, *buffers;
  float *input, *dinput, *dlogits;
  int32_t *labels;
  float *loss;             /* device scalar */
  int *correct;            /* device scalar */
  float *h_logits;         /* host mirror for nn_model_logits */
} cuda_model_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t sample_size(const nn_layer_t *l) { return (size_t)l->c * l->h * l->w; }

static cuda_model_t *CM(const nn_model_t *m) { return (cuda_model_t *)m->cuda; }

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
      nn_cuda_free(l->mask);
    }
  free(d->L);
  nn_cuda_free(d->params);
  nn_cuda_free(d->grads);
  nn_cuda_free(d->buffers);
  nn_cuda_free(d->input);
  nn_cuda_free(d->dinput);
  nn_cuda_free(d->dlogits);
  nn_cuda_free(d->labels);
  nn_cuda_free(d->loss);
  nn_cuda_free(d->correct);
  free(d->h_logits);
  free(d);
}

void nn_cuda_model_free(nn_model_t *m) {
  if (!m || !m->cuda) return;
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
  nn_status_t s = NN_OK;
  size_t batch = (size_t)m->cfg.batch;
  size_t in_floats = batch * (size_t)m->in_c * m->in_h * m->in_w;
  cuda_model_t *d = calloc(1, sizeof *d);
  if (!d) return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_to_device: out of memory");
  d->L = calloc((size_t)m->num_layers, sizeof *d->L);
  d->h_logits = calloc(batch * (size_t)m->num_classes, sizeof(float));
  if (!d->L || !d->h_logits) {
    s = nn_set_error(NN_ERR_NO_MEMORY, "nn_model_to_device: out of memory");
    goto fail;
  }
  ALLOC(d->params, m->num_params * sizeof(float));
  ALLOC(d->grads, m->num_params * sizeof(float));
  ALLOC(d->buffers, m->num_buffers * sizeof(float));
  ALLOC(d->input, in_floats * sizeof(float));
  if (m->dinput) ALLOC(d->dinput, in_floats * sizeof(float));
  ALLOC(d->dlogits, batch * (size_t)m->num_classes * sizeof(float));
  ALLOC(d->labels, batch * sizeof(int32_t));
  ALLOC(d->loss, sizeof(float));
  ALLOC(d->correct, sizeof(int));
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    dlayer_t *dl = &d->L[i];
    size_t bytes = batch * sample_size(l) * sizeof(float);
    int view = l->is_view;
    if (l->kind == NN_LAYER_RELU && view) {
      nn_layer_kind_t sk = m->layers[l->in[0]].kind;
      if (sk == NN_LAYER_MAXPOOL2D || sk == NN_LAYER_AVGPOOL2D) view = 0;
      else dl->inplace_relu = 1;
    }
    if (view) {
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
  if ((s = nn_cuda_to_device(d->params, m->params, m->num_params * sizeof(float))) != NN_OK ||
      (s = nn_cuda_to_device(d->buffers, m->buffers, m->num_buffers * sizeof(float))) != NN_OK ||
      (s = nn_cuda_memset0(d->grads, m->num_params * sizeof(float))) != NN_OK)
    goto fail;
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
  return CM(m)->L[m->num_layers - 1].out;
}

nn_status_t nn_model_sync_to_host(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_host: NULL model");
  if (!m->cuda) return NN_OK;
  nn_status_t s = nn_cuda_to_host(m->params, CM(m)->params, m->num_params * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_host(m->buffers, CM(m)->buffers, m->num_buffers * sizeof(float));
  return s;
}

nn_status_t nn_model_sync_to_device(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_device: NULL model");
  if (!m->cuda) return NN_OK;
  nn_status_t s = nn_cuda_to_device(CM(m)->params, m->params, m->num_params * sizeof(float));
  if (s == NN_OK)
    s = nn_cuda_to_device(CM(m)->buffers, m->buffers, m->num_buffers * sizeof(float));
  return s;
}

const float *nn_cuda_model_logits_host(const nn_model_t *m) {
  cuda_model_t *d = CM(m);
  size_t n = (size_t)(m->last_n > 0 ? m->last_n : 0) * m->num_classes;
  if (n && nn_cuda_to_host(d->h_logits, d->L[m->num_layers - 1].out, n * sizeof(float)) !=
               NN_OK)
    return NULL;
  return d->h_logits;
}

/* ---- forward ---- */

static const float *in_out(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? CM(m)->input : CM(m)->L[in].out;
}

static float *in_grad(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? CM(m)->dinput : CM(m)->L[in].dout;
}

static int input_grad_wanted(const nn_model_t *m, int in) {
  if (in == NN_MODEL_INPUT) return 0;
  const nn_layer_t *l = &m->layers[in];
  return !(l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT);
}

static nn_conv2d_shape_t conv_shape(const nn_layer_t *l, int n) {
  nn_conv2d_shape_t s = {n, l->in_c, l->in_h, l->in_w, l->c, l->kh, l->kw,
                         l->stride, l->stride, l->pad, l->pad, l->h, l->w};
  return s;
}

static nn_pool2d_shape_t pool_shape(const nn_layer_t *l, int n) {
  nn_pool2d_shape_t s = {n, l->c, l->in_h, l->in_w, l->kh, l->kw, l->stride, l->stride,
                         l->pad, l->pad, l->h, l->w};
  return s;
}

static nn_batchnorm2d_shape_t bn_shape(const nn_layer_t *l, int n) {
  nn_batchnorm2d_shape_t s = {n, l->c, l->h, l->w, l->eps, l->momentum};
  return s;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static nn_status_t layer_forward(nn_model_t *m, int i, int n, int training) {
  const nn_layer_t *l = &m->layers[i];
  cuda_model_t *d = CM(m);
  dlayer_t *dl = &d->L[i];
  const float *x = in_out(m, l->in[0]);
  size_t count = (size_t)n * sample_size(l);
  float *P = d->params, *B = d->buffers;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = conv_shape(l, n);
    return nn_conv2d_forward_cuda(&s, x, P + l->w_off, l->has_bias ? P + l->b_off : NULL,
                                  dl->out);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = bn_shape(l, n);
    if (!training)
      return nn_batchnorm2d_forward_infer_cuda(&s, x, P + l->w_off, P + l->b_off,
                                               B + l->rm_off, B + l->rv_off, dl->out);
    m->counters[l->counter]++;
    return nn_batchnorm2d_forward_train_cuda(&s, x, P + l->w_off, P + l->b_off,
                                             B + l->rm_off, B + l->rv_off, dl->out,
                                             dl->save_mean, dl->save_invstd);
  }
  case NN_LAYER_RELU:
    return nn_relu_forward_cuda(count, dl->inplace_relu ? dl->out : x, dl->out);
  case NN_LAYER_MAXPOOL2D: {
    nn_pool2d_shape_t s = pool_shape(l, n);
    return nn_maxpool2d_forward_cuda(&s, x, dl->out);
  }
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = pool_shape(l, n);
    return nn_avgpool2d_forward_cuda(&s, x, dl->out);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    return nn_global_avgpool_forward_cuda(n, l->c, l->in_h * l->in_w, x, dl->out);
  case NN_LAYER_LINEAR:
    return nn_linear_forward_cuda(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off,
                                  l->has_bias ? P + l->b_off : NULL, dl->out);
  case NN_LAYER_DROPOUT:
    if (training && l->p > 0.0f) {
      /* The same seed derivation as model.c, so masks match the CPU model's. */
      uint64_t st = m->cfg.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
      return nn_dropout_forward_cuda(count, l->p, splitmix64(&st), m->dropout_step, x,
                                     dl->out, dl->mask);
    }
    return nn_dropout_forward_cuda(count, 0.0f, 0, 0, x, dl->out, dl->mask);
  case NN_LAYER_FLATTEN:
    return NN_OK;
  case NN_LAYER_ADD:
    return nn_add_forward_cuda(count, x, in_out(m, l->in[1]), dl->out);
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_forward (CUDA): unknown layer kind");
}

nn_status_t nn_cuda_model_forward(nn_model_t *m, const float *x, int n, int training) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  m->have_loss = 0;
  size_t bytes = (size_t)n * m->in_c * m->in_h * m->in_w * sizeof(float);
  NN_CUDA_CHECK(cudaMemcpyAsync(d->input, x, bytes,
                                nn_cuda_is_device_ptr(x) ? cudaMemcpyDeviceToDevice
                                                         : cudaMemcpyHostToDevice,
                                c->stream));
  for (int i = 0; i < m->num_layers; i++) {
    double t0 = now_s();   /* enqueue time only: kernels run asynchronously */
    s = layer_forward(m, i, n, training);
    m->layers[i].forward_s = now_s() - t0;
    if (s != NN_OK) {
      m->last_n = 0;
      return s;
    }
  }
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
    NN_CUDA_CHECK(cudaMemcpyAsync(d->labels, labels, (size_t)n * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
  }
  s = nn_softmax_cross_entropy_cuda(n, m->num_classes, d->L[m->num_layers - 1].out,
                                    d->labels, d->loss, d->correct, d->dlogits);
  if (s != NN_OK) return s;
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

static nn_status_t layer_backward(nn_model_t *m, int i, int n) {
  const nn_layer_t *l = &m->layers[i];
  cuda_model_t *d = CM(m);
  dlayer_t *dl = &d->L[i];
  const float *x = in_out(m, l->in[0]);
  float *dx = in_grad(m, l->in[0]);
  const float *dy = dl->dout;
  size_t count = (size_t)n * sample_size(l);
  float *P = d->params, *G = d->grads;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = conv_shape(l, n);
    if (!input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_conv2d_backward_cuda(&s, x, P + l->w_off, dy, dx, G + l->w_off,
                                   l->has_bias ? G + l->b_off : NULL);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = bn_shape(l, n);
    return nn_batchnorm2d_backward_cuda(&s, x, P + l->w_off, dl->save_mean,
                                        dl->save_invstd, dy, dx, G + l->w_off,
                                        G + l->b_off);
  }
  case NN_LAYER_RELU:
    if (dl->inplace_relu) return nn_relu_backward_cuda(count, dl->out, dl->dout, dl->dout);
    return nn_relu_backward_cuda(count, dl->out, dy, dx);
  case NN_LAYER_MAXPOOL2D: {
    nn_pool2d_shape_t s = pool_shape(l, n);
    return nn_maxpool2d_backward_cuda(&s, x, dl->out, dy, dx);
  }
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = pool_shape(l, n);
    return nn_avgpool2d_backward_cuda(&s, x, dl->out, dy, dx);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    return nn_global_avgpool_backward_cuda(n, l->c, l->in_h * l->in_w, dy, dx);
  case NN_LAYER_LINEAR:
    if (!input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_linear_backward_cuda(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off,
                                   dy, dx, G + l->w_off, l->has_bias ? G + l->b_off : NULL);
  case NN_LAYER_DROPOUT:
    return nn_dropout_backward_cuda(count, l->p, dl->mask, dy, dx);
  case NN_LAYER_FLATTEN:
    if (dl->own && l->in[0] != NN_MODEL_INPUT) return nn_accumulate_cuda(count, dy, dx);
    return NN_OK;
  case NN_LAYER_ADD:
    return nn_add_backward_cuda(count, dy, dx, in_grad(m, l->in[1]));
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_backward (CUDA): unknown layer kind");
}

nn_status_t nn_cuda_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx) {
  cuda_model_t *d = CM(m);
  nn_cuda_ctx_t *c;
  nn_status_t s = nn_cuda_ctx(&c);
  if (s != NN_OK) return s;
  int n = m->last_n;
  NN_CUDA_CHECK(cudaMemsetAsync(d->grads, 0, m->num_params * sizeof(float), c->stream));
  for (int i = 0; i < m->num_layers; i++)
    if (d->L[i].own)
      NN_CUDA_CHECK(cudaMemsetAsync(d->L[i].dout, 0,
                                    (size_t)n * sample_size(&m->layers[i]) * sizeof(float),
                                    c->stream));
  if (d->dinput)
    NN_CUDA_CHECK(cudaMemsetAsync(d->dinput, 0, (size_t)n * m->in_c * m->in_h * m->in_w *
                                  sizeof(float), c->stream));
  NN_CUDA_CHECK(cudaMemcpyAsync(d->L[m->num_layers - 1].dout, d->dlogits,
                                (size_t)n * m->num_classes * sizeof(float),
                                cudaMemcpyDeviceToDevice, c->stream));
  size_t ready = m->num_params;
  for (int i = m->num_layers - 1; i >= 0; i--) {
    nn_layer_t *l = &m->layers[i];
    double t0 = now_s();
    s = layer_backward(m, i, n);
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

/* Placeholder until mixed precision lands: fp32 only. */
nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  if (!m || !m->cuda) return nn_set_error(NN_ERR_ARG, "nn_model_optim_step_cuda: model not on the device");
  return nn_cuda_optim_step(o, CM(m)->params, CM(m)->grads, lr);
}

nn_status_t nn_model_loss_scale(nn_model_t *m, float *scale, int64_t *skipped_steps) {
  (void)m;
  if (scale) *scale = 1.0f;
  if (skipped_steps) *skipped_steps = 0;
  return NN_OK;
}
