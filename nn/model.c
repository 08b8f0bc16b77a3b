/* nn/model.c: the layer graph of a model. Layers sit in an array in topological order,
   which is also PyTorch's state_dict order, so parameters are laid out in forward order
   and backward (the array in reverse) finalises gradients from the end of grads[]
   downwards: the grad-ready callback can report a shrinking "ready_from".

   Memory is allocated once in nn_model_finish for cfg.batch samples; forward and
   backward never allocate. Relu runs in place over its input when that input has no
   other reader (no layer's backward needs the overwritten values: conv, batch norm and
   linear need their inputs, not their outputs), and flatten is a view. */
#include "nn/model_internal.h"
#include "nn/simd_internal.h"
#ifdef HVD_WITH_CUDA
#include "nn/cuda/model_cuda.h"   /* models moved by nn_model_to_device */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-bound, bound), from the top 24 bits (exact in float). */
static float uniform_pm(uint64_t *state, float bound) {
  double u = (double)(splitmix64(state) >> 40) * (1.0 / 16777216.0);
  return (float)((2.0 * u - 1.0) * bound);
}

/* Backward of an in-place relu: y is its output, d the gradient shared with its input;
   keep d where y > 0. Vector selects, not branches: a data-dependent branch mispredicts
   on about half of the elements. (The forward runs nn_relu_forward with x == y, which is
   elementwise and so safe in place.) */
static void relu_mask_in_place(const float *y, float *d, size_t count) {
  const nn_v4f zero = nn_v4_set1(0.0f);
  size_t j = 0;
  for (; j + 4 <= count; j += 4)
    nn_v4_store(d + j, nn_v4_and(nn_v4_load(d + j), nn_v4_load(y + j) > zero));
  for (; j < count; j++) d[j] = y[j] > 0.0f ? d[j] : 0.0f;
}

/* Backward of a residual add: da += dy and db += dy in one pass over dy. */
static void add_backward(const float *dy, float *da, float *db, size_t count) {
  size_t j = 0;
  for (; j + 4 <= count; j += 4) {
    nn_v4f g = nn_v4_load(dy + j);
    nn_v4_store(da + j, nn_v4_load(da + j) + g);
    nn_v4_store(db + j, nn_v4_load(db + j) + g);
  }
  for (; j < count; j++) {
    da[j] += dy[j];
    db[j] += dy[j];
  }
}

static size_t sample_size(const nn_layer_t *l) { return (size_t)l->c * l->h * l->w; }

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

const char *nn_precision_name(nn_precision_t p) {
  switch (p) {
  case NN_PRECISION_FP32: return "fp32";
  case NN_PRECISION_FP16: return "fp16";
  case NN_PRECISION_BF16: return "bf16";
  }
  return "unknown";
}

nn_status_t nn_model_set_precision(nn_model_t *m, const nn_precision_config_t *cfg) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_set_precision: NULL model");
  if (m->cuda)
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
  if (sample_size(last) != (size_t)m->num_classes) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_ARG, "nn_model_create: last layer gives %zu outputs, "
                        "expected %d classes (builder bug)", sample_size(last),
                        m->num_classes);
  }
  size_t batch = (size_t)m->cfg.batch;
  m->params = xcalloc(m->param_len, sizeof(float));
  m->grads = xcalloc(m->param_len, sizeof(float));
  m->buffers = xcalloc(m->num_buffers, sizeof(float));
  m->counters = xcalloc((size_t)m->num_counters, sizeof(int64_t));
  m->input = xcalloc(batch * (size_t)m->in_c * m->in_h * m->in_w, sizeof(float));
  m->dlogits = xcalloc(batch * (size_t)m->num_classes, sizeof(float));
  int ok = m->params && m->grads && m->buffers && m->counters && m->input && m->dlogits;

  int need_dinput = 0;
  for (int i = 0; ok && i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (l->in[0] == NN_MODEL_INPUT && l->kind != NN_LAYER_CONV2D &&
        l->kind != NN_LAYER_LINEAR && l->kind != NN_LAYER_FLATTEN)
      need_dinput = 1;
    if (l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT) {
      /* A view of the input: reads the input copy; its gradient is not wanted, but
         consumers write one, so give it its own scratch. */
      l->is_view = 0;
    }
    if (l->kind == NN_LAYER_RELU && relu_can_run_in_place(m, l)) l->is_view = 1;
    if (l->is_view) {
      const nn_layer_t *src = &m->layers[l->in[0]];
      l->out = src->out;
      l->dout = src->dout;
    } else if (l->kind == NN_LAYER_FLATTEN) {
      l->out = m->input; /* flatten of the input: same floats */
      l->dout = xcalloc(batch * sample_size(l), sizeof(float));
      ok = l->dout != NULL;
    } else {
      l->out = xcalloc(batch * sample_size(l), sizeof(float));
      l->dout = xcalloc(batch * sample_size(l), sizeof(float));
      ok = l->out && l->dout;
    }
    if (ok && l->kind == NN_LAYER_BATCHNORM2D) {
      l->save_mean = xcalloc((size_t)l->c, sizeof(float));
      l->save_invstd = xcalloc((size_t)l->c, sizeof(float));
      ok = l->save_mean && l->save_invstd;
    }
    if (ok && l->kind == NN_LAYER_MAXPOOL2D) {
      l->argmax = xcalloc(batch * sample_size(l), sizeof(int32_t));
      ok = l->argmax != NULL;
    }
    if (ok && l->kind == NN_LAYER_DROPOUT) {
      l->mask = xcalloc(batch * sample_size(l), 1);
      ok = l->mask != NULL;
    }
    if (ok && l->kind == NN_LAYER_CONV2D) {
      nn_conv2d_shape_t s = {(int)batch, l->in_c, l->in_h, l->in_w, l->c, l->kh, l->kw,
                             l->stride, l->stride, l->pad, l->pad, 0, 0};
      if (nn_conv2d_shape(&s) == NN_OK) {
        size_t ws = nn_conv2d_workspace_floats(&s);
        if (ws > m->workspace_floats) m->workspace_floats = ws;
      }
    }
  }
  if (ok && m->workspace_floats) {
    m->workspace = xcalloc(m->workspace_floats, sizeof(float));
    ok = m->workspace != NULL;
  }
  if (ok && need_dinput) {
    m->dinput = xcalloc(batch * (size_t)m->in_c * m->in_h * m->in_w, sizeof(float));
    ok = m->dinput != NULL;
  }
  if (!ok) {
    nn_model_free(m);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_create: out of memory allocating "
                        "the model for batch %zu", batch);
  }
  init_weights(m);
  return NN_OK;
}

void nn_model_free(nn_model_t *m) {
  if (!m) return;
#ifdef HVD_WITH_CUDA
  nn_cuda_model_free(m);
#endif
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (!l->is_view) {
      if (l->kind != NN_LAYER_FLATTEN) free(l->out);
      free(l->dout);
    }
    free(l->save_mean);
    free(l->save_invstd);
    free(l->argmax);
    free(l->mask);
  }
  free(m->layers);
  free(m->slices);
  free(m->params);
  free(m->grads);
  free(m->buffers);
  free(m->counters);
  free(m->input);
  free(m->dinput);
  free(m->dlogits);
  free(m->workspace);
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

const float *nn_model_logits(const nn_model_t *m) {
#ifdef HVD_WITH_CUDA
  if (m->cuda) return nn_cuda_model_logits_host(m);
#endif
  return m->layers[m->num_layers - 1].out;
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

/* ---- forward ---- */

static const float *layer_input(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? m->input : m->layers[in].out;
}

static float *layer_input_grad(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? m->dinput : m->layers[in].dout;
}

int nn_layer_input_grad_wanted(const nn_model_t *m, int in) {
  if (in == NN_MODEL_INPUT) return 0;
  const nn_layer_t *l = &m->layers[in];
  return !(l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT);
}

nn_conv2d_shape_t nn_layer_conv_shape(const nn_layer_t *l, int n) {
  nn_conv2d_shape_t s = {n, l->in_c, l->in_h, l->in_w, l->c, l->kh, l->kw,
                         l->stride, l->stride, l->pad, l->pad, l->h, l->w};
  return s;
}

nn_pool2d_shape_t nn_layer_pool_shape(const nn_layer_t *l, int n) {
  nn_pool2d_shape_t s = {n, l->c, l->in_h, l->in_w, l->kh, l->kw, l->stride, l->stride,
                         l->pad, l->pad, l->h, l->w};
  return s;
}

nn_batchnorm2d_shape_t nn_layer_bn_shape(const nn_layer_t *l, int n) {
  nn_batchnorm2d_shape_t s = {n, l->c, l->h, l->w, l->eps, l->momentum};
  return s;
}

uint64_t nn_layer_dropout_seed(const nn_model_t *m, int i) {
  uint64_t st = m->cfg.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
  return splitmix64(&st);
}

static nn_status_t layer_forward(nn_model_t *m, int i, int n, int training) {
  nn_layer_t *l = &m->layers[i];
  const float *x = layer_input(m, l->in[0]);
  size_t count = (size_t)n * sample_size(l);
  float *P = m->params;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
    return nn_conv2d_forward(&s, x, P + l->w_off, l->has_bias ? P + l->b_off : NULL,
                             l->out, m->workspace);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
    if (!training)
      return nn_batchnorm2d_forward_infer(&s, x, P + l->w_off, P + l->b_off,
                                          m->buffers + l->rm_off, m->buffers + l->rv_off,
                                          l->out);
    m->counters[l->counter]++;
    return nn_batchnorm2d_forward_train(&s, x, P + l->w_off, P + l->b_off,
                                        m->buffers + l->rm_off, m->buffers + l->rv_off,
                                        l->out, l->save_mean, l->save_invstd);
  }
  case NN_LAYER_RELU:
    nn_relu_forward(count, l->is_view ? l->out : x, l->out);
    return NN_OK;
  case NN_LAYER_MAXPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_maxpool2d_forward(&s, x, l->out, l->argmax);
  }
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_avgpool2d_forward(&s, x, l->out);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    nn_global_avgpool_forward(n, l->c, l->in_h * l->in_w, x, l->out);
    return NN_OK;
  case NN_LAYER_LINEAR:
    return nn_linear_forward(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off,
                             l->has_bias ? P + l->b_off : NULL, l->out);
  case NN_LAYER_DROPOUT:
    if (training && l->p > 0.0f) {
      nn_dropout_forward(count, l->p, nn_layer_dropout_seed(m, i), m->dropout_step, x,
                         l->out, l->mask);
    } else {
      memcpy(l->out, x, count * sizeof(float));
      memset(l->mask, 1, count);
    }
    return NN_OK;
  case NN_LAYER_FLATTEN:
    return NN_OK;
  case NN_LAYER_ADD:
    nn_add_forward(count, x, layer_input(m, l->in[1]), l->out);
    return NN_OK;
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_forward: unknown layer kind");
}

nn_status_t nn_model_forward(nn_model_t *m, const float *x, int n, int training) {
  if (!m || !x) return nn_set_error(NN_ERR_ARG, "nn_model_forward: NULL argument");
  if (n <= 0 || n > m->cfg.batch)
    return nn_set_error(NN_ERR_ARG, "nn_model_forward: batch of %d samples, the model "
                        "was created for 1..%d", n, m->cfg.batch);
#ifdef HVD_WITH_CUDA
  if (m->cuda) return nn_cuda_model_forward(m, x, n, training);
#endif
  if (m->precision.precision != NN_PRECISION_FP32)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_forward: %s (mixed precision) needs "
                        "the model on the CUDA device; on the CPU nn computes in float32",
                        nn_precision_name(m->precision.precision));
  if (m->precision.channels_last)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_forward: channels_last (NHWC) needs "
                        "the model on the CUDA device; on the CPU activations are NCHW");
  m->have_loss = 0;
  memcpy(m->input, x, (size_t)n * m->in_c * m->in_h * m->in_w * sizeof(float));
  for (int i = 0; i < m->num_layers; i++) {
    double t0 = now_s();
    nn_status_t s = layer_forward(m, i, n, training);
    m->layers[i].forward_s = now_s() - t0;
    if (s != NN_OK) {
      m->last_n = 0;
      return s;
    }
    if (m->hook)
      m->hook(m->hook_ctx, m, NN_HOOK_FORWARD, i, m->layers[i].out,
              (size_t)n * sample_size(&m->layers[i]));
  }
  if (training) m->dropout_step++;
  m->last_n = n;
  m->last_training = training;
  return NN_OK;
}

nn_status_t nn_model_loss(nn_model_t *m, const int32_t *labels, float *loss,
                          int *correct) {
  if (!m || !labels) return nn_set_error(NN_ERR_ARG, "nn_model_loss: NULL argument");
#ifdef HVD_WITH_CUDA
  if (m->cuda) return nn_cuda_model_loss(m, labels, loss, correct);
#endif
  if (m->last_n == 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_loss: no forward pass to take the loss of");
  for (int i = 0; i < m->last_n; i++)
    if (labels[i] < 0 || labels[i] >= m->num_classes)
      return nn_set_error(NN_ERR_ARG, "nn_model_loss: label %d of sample %d outside "
                          "[0, %d)", (int)labels[i], i, m->num_classes);
  float l = 0;
  int c = 0;
  nn_status_t s = nn_softmax_cross_entropy(m->last_n, m->num_classes, nn_model_logits(m),
                                           labels, &l, &c, m->dlogits);
  if (s != NN_OK) return s;
  if (m->hook)
    m->hook(m->hook_ctx, m, NN_HOOK_LOSS, -1, m->dlogits,
            (size_t)m->last_n * m->num_classes);
  if (loss) *loss = l;
  if (correct) *correct = c;
  m->have_loss = 1;
  return NN_OK;
}

/* ---- backward ---- */

static nn_status_t layer_backward(nn_model_t *m, int i, int n) {
  nn_layer_t *l = &m->layers[i];
  const float *x = layer_input(m, l->in[0]);
  float *dx = layer_input_grad(m, l->in[0]);
  const float *dy = l->dout;
  size_t count = (size_t)n * sample_size(l);
  float *P = m->params, *G = m->grads;
  switch (l->kind) {
  case NN_LAYER_CONV2D: {
    nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
    if (!nn_layer_input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_conv2d_backward(&s, x, P + l->w_off, dy, dx, G + l->w_off,
                              l->has_bias ? G + l->b_off : NULL, m->workspace);
  }
  case NN_LAYER_BATCHNORM2D: {
    nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
    return nn_batchnorm2d_backward(&s, x, P + l->w_off, l->save_mean, l->save_invstd, dy,
                                   dx, G + l->w_off, G + l->b_off);
  }
  case NN_LAYER_RELU:
    if (l->is_view) {
      /* dy and dx are the same floats: mask in place rather than add. */
      relu_mask_in_place(l->out, l->dout, count);
    } else {
      nn_relu_backward(count, l->out, dy, dx);
    }
    return NN_OK;
  case NN_LAYER_MAXPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_maxpool2d_backward(&s, l->argmax, dy, dx);
  }
  case NN_LAYER_AVGPOOL2D: {
    nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
    return nn_avgpool2d_backward(&s, dy, dx);
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    nn_global_avgpool_backward(n, l->c, l->in_h * l->in_w, dy, dx);
    return NN_OK;
  case NN_LAYER_LINEAR:
    if (!nn_layer_input_grad_wanted(m, l->in[0])) dx = NULL;
    return nn_linear_backward(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off, dy,
                              dx, G + l->w_off, l->has_bias ? G + l->b_off : NULL);
  case NN_LAYER_DROPOUT:
    nn_dropout_backward(count, l->p, l->mask, dy, dx);
    return NN_OK;
  case NN_LAYER_FLATTEN:
    if (!l->is_view && l->in[0] != NN_MODEL_INPUT) /* never: flatten is a view */
      for (size_t j = 0; j < count; j++) dx[j] += dy[j];
    return NN_OK;
  case NN_LAYER_ADD: {
    add_backward(dy, dx, layer_input_grad(m, l->in[1]), count);
    return NN_OK;
  }
  }
  return nn_set_error(NN_ERR_ARG, "nn_model_backward: unknown layer kind");
}

/* The NN_HOOK_BACKWARD calls after layer i's backward: one per input gradient it
   added into, as layer_backward chose them. */
static void call_backward_hook(nn_model_t *m, int i, int n) {
  const nn_layer_t *l = &m->layers[i];
  size_t count = (size_t)n * l->in_c * l->in_h * l->in_w;
  float *dx = layer_input_grad(m, l->in[0]);
  if ((l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR) &&
      !nn_layer_input_grad_wanted(m, l->in[0]))
    dx = NULL;
  m->hook(m->hook_ctx, m, NN_HOOK_BACKWARD, i, dx, dx ? count : 0);
  if (l->kind == NN_LAYER_ADD)
    m->hook(m->hook_ctx, m, NN_HOOK_BACKWARD, i, layer_input_grad(m, l->in[1]), count);
}

nn_status_t nn_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_backward: NULL model");
  if (!m->have_loss)
    return nn_set_error(NN_ERR_ARG, "nn_model_backward: call nn_model_forward (training) "
                        "and nn_model_loss first");
  if (!m->last_training)
    return nn_set_error(NN_ERR_ARG, "nn_model_backward: the last forward was not in "
                        "training mode (batch norm saved no statistics)");
#ifdef HVD_WITH_CUDA
  if (m->cuda) return nn_cuda_model_backward(m, on_ready, ctx);
#endif
  int n = m->last_n;
  /* Kernels add into gradients: start from zero. */
  memset(m->grads, 0, m->param_len * sizeof(float));
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (!l->is_view) memset(l->dout, 0, (size_t)n * sample_size(l) * sizeof(float));
  }
  if (m->dinput)
    memset(m->dinput, 0, (size_t)n * m->in_c * m->in_h * m->in_w * sizeof(float));
  nn_layer_t *last = &m->layers[m->num_layers - 1];
  memcpy(last->dout, m->dlogits, (size_t)n * m->num_classes * sizeof(float));

  size_t ready = m->param_len;
  for (int i = m->num_layers - 1; i >= 0; i--) {
    nn_layer_t *l = &m->layers[i];
    double t0 = now_s();
    nn_status_t s = layer_backward(m, i, n);
    l->backward_s = now_s() - t0;
    if (s != NN_OK) return s;
    if (m->hook) call_backward_hook(m, i, n);
    if (l->param_end > l->param_begin && l->param_begin < ready) {
      ready = l->param_begin;
      if (on_ready) on_ready(ctx, ready);
    }
  }
  if (ready != 0) {
    ready = 0;
    if (on_ready) on_ready(ctx, 0);
  }
  m->have_loss = 0; /* the saved activations may be used again only after a forward */
  return NN_OK;
}
