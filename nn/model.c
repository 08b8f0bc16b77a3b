/* nn/model.c: the layer graph of a model. Layers sit in an array in topological order,
   which is also PyTorch's state_dict order, so parameters are laid out in forward order
   and backward (the array in reverse, nn/model_walk.c) finalises gradients from the end
   of grads[] downwards. This file builds the graph, decides which layers are views of
   their input, initialises the weights and hands the model to the CPU backend
   (nn/model_cpu.c), which allocates its activations. */
#include "nn/model_internal.h"
#include "nn/backward_store_internal.h"
#include "util/huge_pages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

static uint64_t splitmix64(uint64_t *state) {
  *state += 0x9E3779B97F4A7C15ull;
  return nn_dropout_mix64(*state);
}

/* Uniform in [-bound, bound), from the top 24 bits (exact in float). */
static float uniform_pm(uint64_t *state, float bound) {
  double u = (double)(splitmix64(state) >> 40) * (1.0 / 16777216.0);
  return (float)((2.0 * u - 1.0) * bound);
}

static void *xcalloc(size_t count, size_t size) {
  if (count == 0) count = 1;
  return calloc(count, size);
}

/* ---- construction ---- */

nn_model_t *nn_model_begin(const char *name, const nn_model_config_t *cfg, int in_c,
                           int in_h, int in_w, int num_classes) {
  nn_model_t *m = calloc(1, sizeof *m);
  if (!m) {
    nn_set_error(NN_ERR_NO_MEMORY, "nn_model_create: out of memory");
    return NULL;
  }
  snprintf(m->name, sizeof m->name, "%s", name);
  m->cfg = *cfg;
  m->in_c = in_c;
  m->in_h = in_h;
  m->in_w = in_w;
  m->num_classes = num_classes;
  m->status = NN_OK;
  return m;
}

static int fail(nn_model_t *m, nn_status_t s, const char *what) {
  if (m->status == NN_OK) {
    m->status = s;
    nn_set_error(s, "nn_model_create(\"%s\"): %s", m->name, what);
  }
  return NN_LAYER_ERROR;
}

/* Appends a layer reading `in`; fills the input shape. NULL after an error. */
static nn_layer_t *push_layer(nn_model_t *m, nn_layer_kind_t kind, const char *name,
                              int in) {
  if (m->status != NN_OK) return NULL;
  if (in != NN_MODEL_INPUT && (in < 0 || in >= m->num_layers)) {
    fail(m, NN_ERR_ARG, "layer input index out of range (builder bug)");
    return NULL;
  }
  if (m->num_layers == m->cap_layers) {
    int cap = m->cap_layers ? 2 * m->cap_layers : 32;
    nn_layer_t *p = realloc(m->layers, (size_t)cap * sizeof *p);
    if (!p) {
      fail(m, NN_ERR_NO_MEMORY, "out of memory");
      return NULL;
    }
    m->layers = p;
    m->cap_layers = cap;
  }
  nn_layer_t *l = &m->layers[m->num_layers];
  memset(l, 0, sizeof *l);
  l->kind = kind;
  snprintf(l->name, sizeof l->name, "%s", name);
  l->in[0] = in;
  l->in[1] = NN_MODEL_INPUT;
  if (in == NN_MODEL_INPUT) {
    l->in_c = m->in_c;
    l->in_h = m->in_h;
    l->in_w = m->in_w;
  } else {
    nn_layer_t *src = &m->layers[in];
    l->in_c = src->c;
    l->in_h = src->h;
    l->in_w = src->w;
    src->consumers++;
  }
  l->c = l->in_c;
  l->h = l->in_h;
  l->w = l->in_w;
  l->w_off = l->b_off = l->rm_off = l->rv_off = SIZE_MAX;
  l->counter = -1;
  l->param_begin = l->param_end = m->param_len;
  return l;
}

static int layer_index(nn_model_t *m) { return m->num_layers++; }

/* Registers one state_dict entry; returns its offset. */
static size_t add_slice(nn_model_t *m, const char *layer, const char *suffix,
                        nn_slice_kind_t kind, int ndim, const int *shape) {
  if (m->status != NN_OK) return 0;
  if (m->num_slices == m->cap_slices) {
    int cap = m->cap_slices ? 2 * m->cap_slices : 64;
    nn_slice_t *p = realloc(m->slices, (size_t)cap * sizeof *p);
    if (!p) {
      fail(m, NN_ERR_NO_MEMORY, "out of memory");
      return 0;
    }
    m->slices = p;
    m->cap_slices = cap;
  }
  nn_slice_t *s = &m->slices[m->num_slices++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s.%s", layer, suffix);
  s->kind = kind;
  s->ndim = ndim;
  s->numel = 1;
  for (int d = 0; d < ndim; d++) {
    s->shape[d] = shape[d];
    s->numel *= (size_t)shape[d];
  }
  switch (kind) {
  case NN_SLICE_PARAM:
    /* Each parameter starts on a multiple of NN_PARAM_ALIGN elements (zeros between), so
       that its float32 and half-precision copies on the device are aligned as cuDNN and
       cuBLAS want them, whatever the sizes before it. */
    s->offset = (m->param_len + NN_PARAM_ALIGN - 1) / NN_PARAM_ALIGN * NN_PARAM_ALIGN;
    m->param_len = s->offset + s->numel;
    m->num_params += s->numel;
    break;
  case NN_SLICE_BUFFER: s->offset = m->num_buffers; m->num_buffers += s->numel; break;
  case NN_SLICE_COUNTER: s->offset = (size_t)m->num_counters++; s->numel = 1; break;
  }
  return s->offset;
}

int nn_model_add_conv2d(nn_model_t *m, const char *name, int in, int c_out, int k,
                        int stride, int pad, int bias) {
  nn_layer_t *l = push_layer(m, NN_LAYER_CONV2D, name, in);
  if (!l) return NN_LAYER_ERROR;
  l->kh = l->kw = k;
  l->stride = stride;
  l->pad = pad;
  l->has_bias = bias;
  nn_conv2d_shape_t s = {1, l->in_c, l->in_h, l->in_w, c_out, k, k, stride, stride,
                         pad, pad, 0, 0};
  if (c_out <= 0 || nn_conv2d_shape(&s) != NN_OK)
    return fail(m, NN_ERR_ARG, "convolution with an empty output (input too small?)");
  l->c = c_out;
  l->h = s.h_out;
  l->w = s.w_out;
  int ws[4] = {c_out, l->in_c, k, k};
  l->w_off = add_slice(m, name, "weight", NN_SLICE_PARAM, 4, ws);
  if (bias) l->b_off = add_slice(m, name, "bias", NN_SLICE_PARAM, 1, &c_out);
  l->param_end = m->param_len;
  return layer_index(m);
}

int nn_model_add_batchnorm2d(nn_model_t *m, const char *name, int in) {
  nn_layer_t *l = push_layer(m, NN_LAYER_BATCHNORM2D, name, in);
  if (!l) return NN_LAYER_ERROR;
  l->eps = 1e-5f;      /* PyTorch defaults */
  l->momentum = 0.1f;
  int c = l->c;
  l->w_off = add_slice(m, name, "weight", NN_SLICE_PARAM, 1, &c);
  l->b_off = add_slice(m, name, "bias", NN_SLICE_PARAM, 1, &c);
  l->rm_off = add_slice(m, name, "running_mean", NN_SLICE_BUFFER, 1, &c);
  l->rv_off = add_slice(m, name, "running_var", NN_SLICE_BUFFER, 1, &c);
  l->counter = (int)add_slice(m, name, "num_batches_tracked", NN_SLICE_COUNTER, 0, NULL);
  l->param_end = m->param_len;
  return layer_index(m);
}

int nn_model_add_relu(nn_model_t *m, const char *name, int in) {
  nn_layer_t *l = push_layer(m, NN_LAYER_RELU, name, in);
  if (!l) return NN_LAYER_ERROR;
  return layer_index(m);
}

static int add_pool(nn_model_t *m, nn_layer_kind_t kind, const char *name, int in, int k,
                    int stride, int pad) {
  nn_layer_t *l = push_layer(m, kind, name, in);
  if (!l) return NN_LAYER_ERROR;
  l->kh = l->kw = k;
  l->stride = stride;
  l->pad = pad;
  nn_pool2d_shape_t s = {1, l->in_c, l->in_h, l->in_w, k, k, stride, stride, pad, pad,
                         0, 0};
  if (nn_pool2d_shape(&s) != NN_OK)
    return fail(m, NN_ERR_ARG, "pooling with an empty output (input too small?)");
  l->h = s.h_out;
  l->w = s.w_out;
  return layer_index(m);
}

int nn_model_add_maxpool2d(nn_model_t *m, const char *name, int in, int k, int stride,
                           int pad) {
  return add_pool(m, NN_LAYER_MAXPOOL2D, name, in, k, stride, pad);
}

int nn_model_add_avgpool2d(nn_model_t *m, const char *name, int in, int k, int stride,
                           int pad) {
  return add_pool(m, NN_LAYER_AVGPOOL2D, name, in, k, stride, pad);
}

int nn_model_add_global_avgpool(nn_model_t *m, const char *name, int in) {
  nn_layer_t *l = push_layer(m, NN_LAYER_GLOBAL_AVGPOOL, name, in);
  if (!l) return NN_LAYER_ERROR;
  l->h = l->w = 1;
  return layer_index(m);
}

int nn_model_add_flatten(nn_model_t *m, const char *name, int in) {
  nn_layer_t *l = push_layer(m, NN_LAYER_FLATTEN, name, in);
  if (!l) return NN_LAYER_ERROR;
  l->c = l->in_c * l->in_h * l->in_w;
  l->h = l->w = 1;
  l->is_view = 1;
  return layer_index(m);
}

int nn_model_add_linear(nn_model_t *m, const char *name, int in, int out, int bias) {
  nn_layer_t *l = push_layer(m, NN_LAYER_LINEAR, name, in);
  if (!l) return NN_LAYER_ERROR;
  if (out <= 0) return fail(m, NN_ERR_ARG, "linear layer with no outputs");
  int in_features = l->in_c * l->in_h * l->in_w;
  l->c = out;
  l->h = l->w = 1;
  l->has_bias = bias;
  int ws[2] = {out, in_features};
  l->w_off = add_slice(m, name, "weight", NN_SLICE_PARAM, 2, ws);
  if (bias) l->b_off = add_slice(m, name, "bias", NN_SLICE_PARAM, 1, &out);
  l->param_end = m->param_len;
  return layer_index(m);
}

nn_status_t nn_model_set_precision(nn_model_t *m, const nn_precision_config_t *cfg) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_set_precision: NULL model");
  if (m->backend->device != NN_DEVICE_CPU)
    return nn_set_error(NN_ERR_ARG, "nn_model_set_precision: the model is already on the "
                        "device; set the precision before nn_model_to_device");
  nn_precision_config_t c = {NN_PRECISION_FP32, 0, 0, 0, 0, 0, 0};
  if (cfg) c = *cfg;
  if (c.precision != NN_PRECISION_FP32 && c.precision != NN_PRECISION_FP16 &&
      c.precision != NN_PRECISION_BF16)
    return nn_set_error(NN_ERR_ARG, "nn_model_set_precision: unknown precision %d",
                        (int)c.precision);
  c.channels_last = c.channels_last != 0;
  if (c.precision == NN_PRECISION_BF16 && c.init_scale == 0.0f && !c.static_scale)
    c.static_scale = 1;   /* bf16 has float32's range: no scaling unless asked */
  if (c.init_scale == 0.0f) c.init_scale = c.precision == NN_PRECISION_FP16 ? 65536.0f : 1.0f;
  if (c.growth_factor == 0.0f) c.growth_factor = 2.0f;
  if (c.backoff_factor == 0.0f) c.backoff_factor = 0.5f;
  if (c.growth_interval == 0) c.growth_interval = 2000;
  if (!isfinite(c.init_scale) || c.init_scale <= 0.0f || !isfinite(c.growth_factor) ||
      c.growth_factor < 1.0f || !(c.backoff_factor > 0.0f && c.backoff_factor < 1.0f) ||
      c.growth_interval < 1)
    return nn_set_error(NN_ERR_ARG, "nn_model_set_precision: bad loss scaling "
                        "(init_scale %g > 0, growth_factor %g >= 1, 0 < backoff_factor %g "
                        "< 1, growth_interval %d >= 1 expected)", (double)c.init_scale,
                        (double)c.growth_factor, (double)c.backoff_factor,
                        c.growth_interval);
  m->precision = c;
  return NN_OK;
}

nn_precision_t nn_model_precision(const nn_model_t *m) {
  return m ? m->precision.precision : NN_PRECISION_FP32;
}

uint64_t nn_model_dropout_step(const nn_model_t *m) { return m ? m->dropout_step : 0; }

void nn_model_set_dropout_step(nn_model_t *m, uint64_t step) {
  if (m) m->dropout_step = step;
}

int nn_model_add_dropout(nn_model_t *m, const char *name, int in, float p) {
  nn_layer_t *l = push_layer(m, NN_LAYER_DROPOUT, name, in);
  if (!l) return NN_LAYER_ERROR;
  if (!(p >= 0.0f && p < 1.0f)) return fail(m, NN_ERR_ARG, "dropout p outside [0, 1)");
  l->p = p;
  return layer_index(m);
}

int nn_model_add_add(nn_model_t *m, const char *name, int a, int b) {
  nn_layer_t *l = push_layer(m, NN_LAYER_ADD, name, a);
  if (!l) return NN_LAYER_ERROR;
  if (b < 0 || b >= m->num_layers) return fail(m, NN_ERR_ARG, "add: bad second input");
  const nn_layer_t *lb = &m->layers[b];
  if (lb->c != l->c || lb->h != l->h || lb->w != l->w)
    return fail(m, NN_ERR_ARG, "add: the two inputs differ in shape (builder bug)");
  l->in[1] = b;
  m->layers[b].consumers++;
  return layer_index(m);
}

/* The builders' helpers, for the graph kinds' builders (nn/model_graph_layers.c). */
nn_layer_t *nn_model_push_layer(nn_model_t *m, nn_layer_kind_t kind, const char *name,
                                int in) {
  return push_layer(m, kind, name, in);
}
size_t nn_model_add_slice(nn_model_t *m, const char *layer, const char *suffix,
                          nn_slice_kind_t kind, int ndim, const int *shape) {
  return add_slice(m, layer, suffix, kind, ndim, shape);
}
int nn_model_fail(nn_model_t *m, nn_status_t s, const char *what) { return fail(m, s, what); }
int nn_model_layer_done(nn_model_t *m) { return layer_index(m); }

/* ---- allocation and initialisation ---- */

/* PyTorch's default for Conv2d and Linear: kaiming_uniform_(a=sqrt(5)) for the weight,
   which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. */
static void init_weights(nn_model_t *m) {
  uint64_t rng = m->cfg.seed * 0x2545F4914F6CDD1Dull + 0x1234567ull;
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR) {
      size_t fan_in = (size_t)l->in_c * (l->kind == NN_LAYER_CONV2D
                                             ? (size_t)l->kh * l->kw
                                             : (size_t)l->in_h * l->in_w);
      float bound = (float)(1.0 / sqrt((double)fan_in));
      size_t nw = fan_in * (size_t)l->c;
      for (size_t j = 0; j < nw; j++) m->params[l->w_off + j] = uniform_pm(&rng, bound);
      if (l->has_bias)
        for (int j = 0; j < l->c; j++) m->params[l->b_off + j] = uniform_pm(&rng, bound);
    } else if (l->kind == NN_LAYER_BATCHNORM2D) {
      for (int j = 0; j < l->c; j++) {
        m->params[l->w_off + j] = 1.0f;
        m->params[l->b_off + j] = 0.0f;
        m->buffers[l->rm_off + j] = 0.0f;
        m->buffers[l->rv_off + j] = 1.0f;
      }
      m->counters[l->counter] = 0;
    }
  }
}

/* Relu may overwrite its input when nothing else reads that input. */
static int relu_can_run_in_place(const nn_model_t *m, const nn_layer_t *l) {
  if (l->in[0] == NN_MODEL_INPUT) return 0;
  const nn_layer_t *src = &m->layers[l->in[0]];
  /* A flatten reads the input copy or another layer's floats: never overwrite those. */
  return src->consumers == 1 && !src->is_view && src->kind != NN_LAYER_FLATTEN;
}

int nn_backward_store = 1;

/* The layer whose activations and gradient layer j's are (through the views of
   view[], one flag per layer), or NN_MODEL_INPUT. */
static int grad_owner(const nn_model_t *m, const char *view, int j) {
  while (j != NN_MODEL_INPUT && view[j]) j = m->layers[j].in[0];
  return j;
}

/* Whether layer i's backward writes a gradient for input k: views (an in-place relu
   masks the shared gradient, a flatten passes it on) write none, nor does a flatten of
   the model input, nor a convolution or linear layer whose input gradient nobody
   wants. A flatten that is not a view (one that permutes, on a backend) writes its
   input's gradient. */
static int writes_input_grad(const nn_model_t *m, const char *view, int i, int k) {
  const nn_layer_t *l = &m->layers[i];
  if (view[i]) return 0;
  if (k == 1) return nn_layer_kind_has_two_inputs(l->kind);
  if (l->kind == NN_LAYER_FLATTEN) return l->in[0] != NN_MODEL_INPUT;
  if ((l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR) &&
      !nn_layer_input_grad_wanted(m, l->in[0]))
    return 0;
  return 1;
}

void nn_model_plan_grad_writes(nn_model_t *m, const char *view, char *written) {
  /* written[0]: the input, [j + 1]: layer j's gradient. The pass starts by copying the
     loss gradient into the last layer's gradient: when that layer is a view (a flatten
     at the end), its owner's gradient is written then, and its other readers must add
     to it. */
  const int store = m->backward_store;
  memset(written, 0, (size_t)m->num_layers + 1u);
  written[grad_owner(m, view, m->num_layers - 1) + 1] = 1;
  for (int i = m->num_layers - 1; i >= 0; i--) {
    nn_layer_t *l = &m->layers[i];
    for (int k = 0; k < 2; k++) {
      l->dx_first[k] = 0;
      if (!writes_input_grad(m, view, i, k)) continue;
      char *w = &written[grad_owner(m, view, l->in[k]) + 1];
      l->dx_first[k] = store && !*w;
      *w = 1;
    }
  }
  for (int j = 0; j < m->num_layers; j++) {
    nn_layer_t *l = &m->layers[j];
    l->dout_unwritten = !view[j] && j != m->num_layers - 1 && (!written[j + 1] || !store);
  }
  m->dinput_unwritten = !written[0] || !store;
}

/* The plan of the model's own views (the CPU backend's); 0 when out of memory. */
static int plan_grad_writes(nn_model_t *m) {
  char *view = malloc((size_t)m->num_layers);
  char *written = malloc((size_t)m->num_layers + 1u);
  if (view && written) {
    for (int j = 0; j < m->num_layers; j++) view[j] = (char)(m->layers[j].is_view != 0);
    m->backward_store = nn_backward_store;
    nn_model_plan_grad_writes(m, view, written);
  }
  int ok = view && written;
  free(view);
  free(written);
  return ok;
}

nn_status_t nn_model_finish(nn_model_t *m) {
  if (m->status != NN_OK) {
    nn_status_t s = m->status;
    nn_model_free(m);
    return s;
  }
  if (m->num_layers == 0) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_ARG, "nn_model_create: a model without layers");
  }
  const nn_layer_t *last = &m->layers[m->num_layers - 1];
  if (nn_layer_sample_size(last) != (size_t)m->num_classes) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_ARG, "nn_model_create: last layer gives %zu outputs, "
                        "expected %d classes (builder bug)", nn_layer_sample_size(last),
                        m->num_classes);
  }
  /* The flat parameters and gradients in huge pages (util/huge_pages.h): the gradients
     are what an allreduce moves between processes every step, the parameters what a
     broadcast moves, and the optimizer streams through both. */
  if (m->param_len <= SIZE_MAX / sizeof(float)) {
    m->params = util_huge_alloc(m->param_len * sizeof(float));
    m->grads = util_huge_alloc(m->param_len * sizeof(float));
  }
  m->buffers = xcalloc(m->num_buffers, sizeof(float));
  m->counters = xcalloc((size_t)m->num_counters, sizeof(int64_t));
  if (!m->params || !m->grads || !m->buffers || !m->counters) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_create: out of memory allocating "
                        "the parameters of %zu floats", m->param_len);
  }
  /* Which layers alias their input's activations: a backend allocates the others. */
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (l->in[0] == NN_MODEL_INPUT && l->kind != NN_LAYER_CONV2D &&
        l->kind != NN_LAYER_LINEAR && l->kind != NN_LAYER_FLATTEN)
      m->need_dinput = 1;
    /* A flatten of the input reads the input copy: not a view of a layer. */
    if (l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT) l->is_view = 0;
    if (l->kind == NN_LAYER_RELU && relu_can_run_in_place(m, l)) l->is_view = 1;
  }
  if (!plan_grad_writes(m)) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_create: out of memory");
  }
  nn_status_t s = nn_cpu_backend_attach(m);
  if (s != NN_OK) {
    nn_model_free(m);
    return s;
  }
  init_weights(m);
  return NN_OK;
}

void nn_model_free(nn_model_t *m) {
  if (!m) return;
  if (m->backend) m->backend->release(m);
  nn_optim_free(m->optim);
  free(m->layers);
  free(m->slices);
  util_huge_free(m->params, m->param_len * sizeof(float));
  util_huge_free(m->grads, m->param_len * sizeof(float));
  free(m->buffers);
  free(m->counters);
  free(m);
}

/* ---- accessors ---- */

const char *nn_model_name(const nn_model_t *m) { return m->name; }

void nn_model_input_shape(const nn_model_t *m, int *c, int *h, int *w) {
  if (c) *c = m->in_c;
  if (h) *h = m->in_h;
  if (w) *w = m->in_w;
}

int nn_model_num_classes(const nn_model_t *m) { return m->num_classes; }
size_t nn_model_num_params(const nn_model_t *m) { return m->num_params; }
size_t nn_model_param_len(const nn_model_t *m) { return m->param_len; }
float *nn_model_params(nn_model_t *m) { return m->params; }
float *nn_model_grads(nn_model_t *m) { return m->grads; }
size_t nn_model_num_buffers(const nn_model_t *m) { return m->num_buffers; }
float *nn_model_buffers(nn_model_t *m) { return m->buffers; }
int nn_model_num_slices(const nn_model_t *m) { return m->num_slices; }
int64_t *nn_model_counters(nn_model_t *m) { return m->counters; }

const nn_slice_t *nn_model_slice(const nn_model_t *m, int i) {
  if (i < 0 || i >= m->num_slices) return NULL;
  return &m->slices[i];
}

size_t nn_model_param_starts(const nn_model_t *m, size_t *starts) {
  size_t n = 0;
  for (int i = 0; i < m->num_slices; i++) {
    /* An empty parameter has no range of its own (its start is the next one's). */
    if (m->slices[i].kind != NN_SLICE_PARAM || m->slices[i].numel == 0) continue;
    if (starts) starts[n] = m->slices[i].offset;
    n++;
  }
  /* Each slice is placed after the one before it (add_slice), so the starts of the
     non-empty ones ascend strictly, as the gradient buckets need. */
  return n;
}

int nn_model_num_layers(const nn_model_t *m) { return m->num_layers; }

const char *nn_model_layer_name(const nn_model_t *m, int i) {
  if (i < 0 || i >= m->num_layers) return "";
  return m->layers[i].name;
}

void nn_model_layer_times(const nn_model_t *m, int i, double *forward_s,
                          double *backward_s) {
  double f = 0, b = 0;
  if (i >= 0 && i < m->num_layers) {
    f = m->layers[i].forward_s;
    b = m->layers[i].backward_s;
  }
  if (forward_s) *forward_s = f;
  if (backward_s) *backward_s = b;
}
