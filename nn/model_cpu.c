/* nn/model_cpu.c: the CPU backend of the model walk (the reference): activations,
   parameters, gradients and the optimizer in host memory, float32 NCHW, each layer
   through nn's CPU kernels.

   Memory is allocated once, for cfg.batch samples, when the model is built; forward
   and backward never allocate. A layer stores the input gradient that it writes first
   in the backward pass (dx_first: nn/backward_store_internal.h says why) and adds into
   the others; the kinds without a storing kernel clear that gradient just before they
   add into it. Relu runs in place over its input when the graph made it
   a view (no layer's backward needs the overwritten values: conv, batch norm and linear
   need their inputs, not their outputs), and flatten is a view. */
#include "nn/model_internal.h"
#include "nn/backward_store_internal.h"
#include "nn/graph_kernels_internal.h"

#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t count, size_t size) {
  if (count == 0) count = 1;
  return calloc(count, size);
}

/* Layer i's input gradient for a kernel that adds into it: cleared first when the layer
   writes it first (its kinds have no storing kernel). NULL when not wanted. */
static float *dx_to_add_into(nn_model_t *m, int i, int n) {
  const nn_layer_t *l = &m->layers[i];
  float *dx = nn_layer_dx(m, i);
  if (dx && l->dx_first[0])
    memset(dx, 0, sizeof(float) * (size_t)n * l->in_c * l->in_h * l->in_w);
  return dx;
}

/* What every layer function starts from. */
#define LAYER_VARS                                              \
  nn_layer_t *l = &m->layers[i];                                \
  const float *x = nn_layer_in(m, l->in[0]);                    \
  size_t count = (size_t)n * nn_layer_sample_size(l);           \
  float *P = m->params, *G = m->grads;                          \
  (void)x, (void)count, (void)P, (void)G

/* ---- the layers ---- */

static nn_status_t conv_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
  return nn_conv2d_forward(&s, x, P + l->w_off, l->has_bias ? P + l->b_off : NULL, l->out,
                           m->workspace);
}

static nn_status_t conv_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_conv2d_shape_t s = nn_layer_conv_shape(l, n);
  return nn_conv2d_backward_ex(&s, x, P + l->w_off, l->dout, nn_layer_dx(m, i),
                               !l->dx_first[0], G + l->w_off, l->has_bias ? G + l->b_off : NULL,
                               m->workspace);
}

static nn_status_t bn_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
  float *B = m->buffers;
  if (!training)
    return nn_batchnorm2d_forward_infer(&s, x, P + l->w_off, P + l->b_off, B + l->rm_off,
                                        B + l->rv_off, l->out);
  m->counters[l->counter]++;
  return nn_batchnorm2d_forward_train(&s, x, P + l->w_off, P + l->b_off, B + l->rm_off,
                                      B + l->rv_off, l->out, l->save_mean, l->save_invstd);
}

static nn_status_t bn_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_batchnorm2d_shape_t s = nn_layer_bn_shape(l, n);
  return nn_batchnorm2d_backward_ex(&s, x, P + l->w_off, l->save_mean, l->save_invstd,
                                    l->dout, nn_layer_dx(m, i), !l->dx_first[0], G + l->w_off,
                                    G + l->b_off);
}

static nn_status_t relu_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_relu_forward(count, l->is_view ? l->out : x, l->out);
  return NN_OK;
}

static nn_status_t relu_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  /* In place (a view), dy and dx are the same floats: mask them, which is storing. */
  if (l->is_view)
    nn_relu_backward_store(count, l->out, l->dout, l->dout);
  else if (l->dx_first[0])
    nn_relu_backward_store(count, l->out, l->dout, nn_layer_dx(m, i));
  else
    nn_relu_backward(count, l->out, l->dout, nn_layer_dx(m, i));
  return NN_OK;
}

static nn_status_t maxpool_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
  return nn_maxpool2d_forward(&s, x, l->out, l->argmax);
}

static nn_status_t maxpool_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
  return nn_maxpool2d_backward(&s, l->argmax, l->dout, dx_to_add_into(m, i, n));
}

static nn_status_t avgpool_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
  return nn_avgpool2d_forward(&s, x, l->out);
}

static nn_status_t avgpool_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_pool2d_shape_t s = nn_layer_pool_shape(l, n);
  return nn_avgpool2d_backward(&s, l->dout, dx_to_add_into(m, i, n));
}

static nn_status_t gap_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_global_avgpool_forward(n, l->c, l->in_h * l->in_w, x, l->out);
  return NN_OK;
}

static nn_status_t gap_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_global_avgpool_backward(n, l->c, l->in_h * l->in_w, l->dout, dx_to_add_into(m, i, n));
  return NN_OK;
}

static nn_status_t linear_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  return nn_linear_forward(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off,
                           l->has_bias ? P + l->b_off : NULL, l->out);
}

static nn_status_t linear_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  return nn_linear_backward(n, l->in_c * l->in_h * l->in_w, l->c, x, P + l->w_off, l->dout,
                            dx_to_add_into(m, i, n), G + l->w_off,
                            l->has_bias ? G + l->b_off : NULL);
}

static nn_status_t dropout_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  if (training && l->p > 0.0f) {
    nn_dropout_forward(count, l->p, nn_layer_dropout_seed(m, i), m->dropout_step, x, l->out,
                       l->mask);
  } else {
    memcpy(l->out, x, count * sizeof(float));
    memset(l->mask, 1, count);
  }
  return NN_OK;
}

static nn_status_t dropout_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_dropout_backward(count, l->p, l->mask, l->dout, dx_to_add_into(m, i, n));
  return NN_OK;
}

/* Flatten is a view of its input's floats (or of the input copy): nothing to compute,
   and its gradient is its input's gradient, or unwanted (flatten of the input). */
static nn_status_t flatten_forward(nn_model_t *m, int i, int n, int training) {
  (void)m, (void)i, (void)n, (void)training;
  return NN_OK;
}

static nn_status_t flatten_backward(nn_model_t *m, int i, int n) {
  (void)m, (void)i, (void)n;
  return NN_OK;
}

static nn_status_t add_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_add_forward(count, x, nn_layer_in(m, l->in[1]), l->out);
  return NN_OK;
}

static nn_status_t add_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_add_backward_ex(count, l->dout, nn_layer_dx(m, i), !l->dx_first[0],
                     nn_layer_in_grad(m, l->in[1]), !l->dx_first[1]);
  return NN_OK;
}

/* ---- the graph kinds (nn/graph_kernels.c) ----
   Their kernels add into gradients: a gradient this layer writes first is cleared
   first (both before either is added into: a * a reads one gradient twice). */

static float *dx1_to_add_into(nn_model_t *m, int i, int n) {
  const nn_layer_t *l = &m->layers[i], *b = &m->layers[l->in[1]];
  float *db = b->dout;
  if (l->dx_first[1]) memset(db, 0, sizeof(float) * (size_t)n * nn_layer_sample_size(b));
  return db;
}

static nn_status_t gconv_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_gconv_shape_t s = nn_layer_gconv_shape(l, n);
  nn_gconv_forward(&s, x, P + l->w_off, l->has_bias ? P + l->b_off : NULL, l->out);
  return NN_OK;
}

static nn_status_t gconv_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_gconv_shape_t s = nn_layer_gconv_shape(l, n);
  /* The gradient of the model input is wanted by nobody. */
  float *dx = l->in[0] == NN_MODEL_INPUT ? NULL : dx_to_add_into(m, i, n);
  nn_gconv_backward(&s, x, P + l->w_off, l->dout, dx, G + l->w_off,
                    l->has_bias ? G + l->b_off : NULL);
  return NN_OK;
}

static nn_status_t act_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  nn_act_forward(l->act, l->alpha, l->lo, l->hi, count, x, l->out);
  return NN_OK;
}

static nn_status_t act_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  nn_act_backward(l->act, l->alpha, l->lo, l->hi, count, x, l->dout,
                  dx_to_add_into(m, i, n));
  return NN_OK;
}

static nn_status_t mul_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  const nn_layer_t *b = &m->layers[l->in[1]];
  nn_mul_forward(n, l->c, l->h * l->w, b->h * b->w, x, b->out, l->out);
  return NN_OK;
}

static nn_status_t mul_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  const nn_layer_t *b = &m->layers[l->in[1]];
  float *da = dx_to_add_into(m, i, n), *db = dx1_to_add_into(m, i, n);
  nn_mul_backward(n, l->c, l->h * l->w, b->h * b->w, x, b->out, l->dout, da, db);
  return NN_OK;
}

static nn_status_t concat_forward(nn_model_t *m, int i, int n, int training) {
  LAYER_VARS;
  (void)training;
  const nn_layer_t *b = &m->layers[l->in[1]];
  nn_concat_forward(n, (size_t)l->in_c * l->in_h * l->in_w, nn_layer_sample_size(b), x,
                    b->out, l->out);
  return NN_OK;
}

static nn_status_t concat_backward(nn_model_t *m, int i, int n) {
  LAYER_VARS;
  const nn_layer_t *b = &m->layers[l->in[1]];
  float *da = dx_to_add_into(m, i, n), *db = dx1_to_add_into(m, i, n);
  nn_concat_backward(n, (size_t)l->in_c * l->in_h * l->in_w, nn_layer_sample_size(b),
                     l->dout, da, db);
  return NN_OK;
}

/* ---- the model ---- */

static nn_status_t cpu_zero(void *p, size_t bytes) {
  memset(p, 0, bytes);
  return NN_OK;
}

static nn_status_t cpu_copy(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return NN_OK;
}

static nn_status_t cpu_load_input(nn_model_t *m, const float *x, int n) {
  if (m->precision.precision != NN_PRECISION_FP32)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_forward: %s (mixed precision) needs "
                        "the model on the CUDA device; on the CPU nn computes in float32",
                        nn_precision_name(m->precision.precision));
  if (m->precision.channels_last)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_forward: channels_last (NHWC) needs "
                        "the model on the CUDA device; on the CPU activations are NCHW");
  memcpy(m->input, x, (size_t)n * nn_model_input_size(m) * sizeof(float));
  return NN_OK;
}

static nn_status_t cpu_loss(nn_model_t *m, const int32_t *labels, float *loss, int *correct) {
  for (int i = 0; i < m->last_n; i++)
    if (labels[i] < 0 || labels[i] >= m->num_classes)
      return nn_set_error(NN_ERR_ARG, "nn_model_loss: label %d of sample %d outside "
                          "[0, %d)", (int)labels[i], i, m->num_classes);
  float l = 0;
  int c = 0;
  nn_status_t s = nn_softmax_cross_entropy(m->last_n, m->num_classes,
                                           m->layers[m->num_layers - 1].out, labels, &l, &c,
                                           m->dlogits);
  if (s != NN_OK) return s;
  if (loss) *loss = l;
  if (correct) *correct = c;
  return NN_OK;
}

static const float *cpu_logits_host(const nn_model_t *m) {
  return m->layers[m->num_layers - 1].out;
}

static float *cpu_params_home(nn_model_t *m) { return m->params; }
static float *cpu_grads_home(nn_model_t *m) { return m->grads; }

static nn_status_t cpu_zero_grads(nn_model_t *m) {
  memset(m->grads, 0, m->param_len * sizeof(float));
  return NN_OK;
}

static nn_status_t cpu_scale_grads(nn_model_t *m, size_t from, size_t to, float factor) {
  for (size_t i = from; i < to; i++) m->grads[i] *= factor;
  return NN_OK;
}

static nn_status_t cpu_optim_step(nn_model_t *m, float lr) {
  /* The optimizer covers the trainable range (nn/model_freeze.c). */
  return nn_optim_step(m->optim, m->params + m->train_from, m->grads + m->train_from, lr);
}

static void cpu_release(nn_model_t *m) {
  nn_model_range_use_home(m);   /* the sets own theirs */
  nn_model_free_activations(m, free);
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    free(l->save_mean);
    free(l->save_invstd);
    free(l->argmax);
    free(l->mask);
    l->save_mean = l->save_invstd = NULL;
    l->argmax = NULL;
    l->mask = NULL;
  }
  free(m->workspace);
  m->workspace = NULL;
  m->workspace_floats = 0;
}

static const nn_backend_t cpu_backend = {
    .name = "CPU",
    .device = NN_DEVICE_CPU,
    .writes_first_dx = 1,
    .layer = {NN_LAYER_KIND_LIST(NN_LAYER_OPS_ENTRY)},
    .zero = cpu_zero,
    .copy = cpu_copy,
    .load_input = cpu_load_input,
    .loss = cpu_loss,
    .logits_host = cpu_logits_host,
    .params_home = cpu_params_home,
    .grads_home = cpu_grads_home,
    .zero_grads = cpu_zero_grads,
    .scale_grads = cpu_scale_grads,
    .optim_step = cpu_optim_step,
    .release = cpu_release,
};

/* Allocates one layer's activations and state for cfg.batch samples; 0 when out of
   memory. The graph chose the views (is_view): they alias their input's floats. */
static int alloc_layer(nn_model_t *m, nn_layer_t *l, size_t batch) {
  size_t elems = batch * nn_layer_sample_size(l);
  if (l->is_view) {
    const nn_layer_t *src = &m->layers[l->in[0]];
    l->out = src->out;
    l->dout = src->dout;
  } else if (l->kind == NN_LAYER_FLATTEN) {
    /* Flatten of the input: reads the input copy; its gradient is not wanted, but
       consumers write one, so it gets its own scratch. */
    l->out = m->input;
    l->own_dout = (l->dout = xcalloc(elems, sizeof(float))) != NULL;
    if (!l->own_dout) return 0;
  } else {
    l->own_out = (l->out = xcalloc(elems, sizeof(float))) != NULL;
    l->own_dout = (l->dout = xcalloc(elems, sizeof(float))) != NULL;
    if (!l->own_out || !l->own_dout) return 0;
  }
  if (l->kind == NN_LAYER_BATCHNORM2D) {
    l->save_mean = xcalloc((size_t)l->c, sizeof(float));
    l->save_invstd = xcalloc((size_t)l->c, sizeof(float));
    if (!l->save_mean || !l->save_invstd) return 0;
  }
  if (l->kind == NN_LAYER_MAXPOOL2D && !(l->argmax = xcalloc(elems, sizeof(int32_t))))
    return 0;
  if (l->kind == NN_LAYER_DROPOUT && !(l->mask = xcalloc(elems, 1))) return 0;
  if (l->kind == NN_LAYER_CONV2D) {
    nn_conv2d_shape_t s = nn_layer_conv_shape(l, (int)batch);
    size_t ws = nn_conv2d_workspace_floats(&s);
    if (ws > m->workspace_floats) m->workspace_floats = ws;
  }
  return 1;
}

nn_status_t nn_cpu_backend_attach(nn_model_t *m) {
  size_t batch = (size_t)m->cfg.batch;
  m->backend = &cpu_backend;
  m->act_size = sizeof(float);
  m->input = xcalloc(batch * nn_model_input_size(m), sizeof(float));
  m->dlogits = xcalloc(batch * (size_t)m->num_classes, sizeof(float));
  int ok = m->input && m->dlogits;
  for (int i = 0; ok && i < m->num_layers; i++) ok = alloc_layer(m, &m->layers[i], batch);
  if (ok && m->workspace_floats)
    ok = (m->workspace = xcalloc(m->workspace_floats, sizeof(float))) != NULL;
  if (ok && m->need_dinput)
    ok = (m->dinput = xcalloc(batch * nn_model_input_size(m), sizeof(float))) != NULL;
  if (!ok) {
    cpu_release(m);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_create: out of memory allocating "
                        "the model for batch %zu", batch);
  }
  return NN_OK;
}
