/* nn/model_walk.c: the one walk over a model's layer graph, whatever device it lives
   on: forward in array order, the loss, backward in reverse with the grad-ready
   callbacks, and the update. Each layer runs through the table of m->backend
   (model_cpu.c, cuda/model_cuda.c); this file holds the graph logic both share and
   never touches backend memory itself.

   Parameters are laid out in forward order and backward runs the array in reverse, so
   gradients become final from the end of grads[] downwards: the grad-ready callback
   reports a shrinking "ready_from". On a GPU "final" means enqueued on nn's stream: a
   consumer (hvd) orders itself after that stream. */
#include "nn/model_internal.h"
#include "nn/nn_cuda.h"   /* nn_model_device_params/_grads, defined here */
#include "util/clock.h"

#include <string.h>

/* The test hook reads what it is handed from the host: only on a host backend (a model
   moved to a GPU keeps the hook, which then stays silent). */
static int hook_on(const nn_model_t *m) {
  return m->hook != NULL && m->backend->device == NN_DEVICE_CPU;
}

/* ---- forward and loss ---- */

nn_status_t nn_model_forward(nn_model_t *m, const float *x, int n, int training) {
  if (!m || !x) return nn_set_error(NN_ERR_ARG, "nn_model_forward: NULL argument");
  if (m->acts_cur)
    return nn_set_error(NN_ERR_ARG, "nn_model_forward: a layer range's activation set is "
                        "in use: nn_model_range_use(m, first, last, NULL) first");
  if (n <= 0 || n > m->cfg.batch)
    return nn_set_error(NN_ERR_ARG, "nn_model_forward: batch of %d samples, the model "
                        "was created for 1..%d", n, m->cfg.batch);
  const nn_backend_t *b = m->backend;
  m->have_loss = 0;
  m->last_n = 0;
  nn_status_t s = b->load_input(m, x, n);
  if (s != NN_OK) return s;
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    double t0 = util_now_s();   /* on a GPU: enqueue time, kernels run asynchronously */
    /* A frozen layer runs as in inference (batch norm: its running statistics). */
    s = b->layer[l->kind].forward(m, i, n, training && !l->frozen);
    l->forward_s = util_now_s() - t0;
    if (s != NN_OK) return s;
    if (hook_on(m))
      m->hook(m->hook_ctx, m, NN_HOOK_FORWARD, i, l->out, (size_t)n * nn_layer_sample_size(l));
  }
  if (b->forward_done && (s = b->forward_done(m, n)) != NN_OK) return s;
  if (training) m->dropout_step++;
  m->last_n = n;
  m->last_training = training;
  return NN_OK;
}

nn_status_t nn_model_loss(nn_model_t *m, const int32_t *labels, float *loss,
                          int *correct) {
  if (!m || !labels) return nn_set_error(NN_ERR_ARG, "nn_model_loss: NULL argument");
  if (m->last_n == 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_loss: no forward pass to take the loss of");
  nn_status_t s = m->backend->loss(m, labels, loss, correct);
  if (s != NN_OK) return s;
  if (hook_on(m))
    m->hook(m->hook_ctx, m, NN_HOOK_LOSS, -1, m->dlogits, (size_t)m->last_n * m->num_classes);
  m->have_loss = 1;
  return NN_OK;
}

const float *nn_model_logits(const nn_model_t *m) { return m->backend->logits_host(m); }

/* ---- backward ---- */

/* The NN_HOOK_BACKWARD calls after layer i's backward: one per input gradient it
   added into. */
static void call_backward_hook(nn_model_t *m, int i, int n) {
  const nn_layer_t *l = &m->layers[i];
  size_t count = (size_t)n * l->in_c * l->in_h * l->in_w;
  void *dx = nn_layer_dx(m, i);
  m->hook(m->hook_ctx, m, NN_HOOK_BACKWARD, i, dx, dx ? count : 0);
  if (nn_layer_kind_has_two_inputs(l->kind))
    m->hook(m->hook_ctx, m, NN_HOOK_BACKWARD, i, nn_layer_in_grad(m, l->in[1]),
            (size_t)n * nn_layer_sample_size(&m->layers[l->in[1]]));
}

/* Backward kernels add into gradients: start every gradient the pass writes at zero
   (the parameter gradients too, unless they accumulate; on a backend whose layers store
   the activation gradients they write first, only those nobody writes), and the last
   layer's from the
   gradient of the loss. */
static nn_status_t begin_backward(nn_model_t *m, int n, int accumulate) {
  const nn_backend_t *b = m->backend;
  const size_t es = m->act_size;
  nn_status_t s = accumulate ? NN_OK : b->zero_grads(m);
  for (int i = 0; s == NN_OK && i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (l->own_dout && (!b->writes_first_dx || l->dout_unwritten))
      s = b->zero(l->dout, (size_t)n * nn_layer_sample_size(l) * es);
  }
  if (s == NN_OK && m->dinput && (!b->writes_first_dx || m->dinput_unwritten))
    s = b->zero(m->dinput, (size_t)n * nn_model_input_size(m) * es);
  if (s == NN_OK)
    s = b->copy(m->layers[m->num_layers - 1].dout, m->dlogits,
                (size_t)n * m->num_classes * es);
  return s;
}

static nn_status_t backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx,
                            int accumulate) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_backward: NULL model");
  if (!m->have_loss)
    return nn_set_error(NN_ERR_ARG, "nn_model_backward: call nn_model_forward (training) "
                        "and nn_model_loss first");
  if (!m->last_training)
    return nn_set_error(NN_ERR_ARG, "nn_model_backward: the last forward was not in "
                        "training mode (batch norm saved no statistics)");
  const int n = m->last_n;
  nn_status_t s = begin_backward(m, n, accumulate);
  if (s != NN_OK) return s;
  size_t ready = m->param_len;
  /* Below the lowest trainable layer only frozen parameters lie (nn/model_freeze.c). */
  for (int i = m->num_layers - 1; i >= m->train_layer; i--) {
    nn_layer_t *l = &m->layers[i];
    double t0 = util_now_s();
    s = m->backend->layer[l->kind].backward(m, i, n);
    l->backward_s = util_now_s() - t0;
    if (s != NN_OK) return s;
    if (hook_on(m)) call_backward_hook(m, i, n);
    if (l->param_end > l->param_begin && l->param_begin < ready) {
      ready = l->param_begin;
      if (on_ready) on_ready(ctx, ready);
    }
  }
  if (ready != 0 && on_ready) on_ready(ctx, 0);
  m->have_loss = 0; /* the saved activations may be used again only after a forward */
  return NN_OK;
}

nn_status_t nn_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx) {
  return backward(m, on_ready, ctx, 0);
}

nn_status_t nn_model_backward_accumulate(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx) {
  /* A converted CUDA model (half precision or NHWC) writes its parameter gradients
     instead of adding to them (model_internal.h, nn_layer_ops_t.backward). */
  if (m && m->backend->device != NN_DEVICE_CPU &&
      (m->precision.precision != NN_PRECISION_FP32 || m->precision.channels_last))
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_backward_accumulate: a %s%s model on "
                        "the GPU overwrites its gradients; accumulate in float32 NCHW",
                        nn_precision_name(m->precision.precision),
                        m->precision.channels_last ? " channels-last" : "");
  return backward(m, on_ready, ctx, 1);
}

/* ---- gradients, the optimizer and the host arrays, on any backend ---- */

nn_device_t nn_model_device(const nn_model_t *m) {
  return m ? m->backend->device : NN_DEVICE_CPU;
}

float *nn_model_params_home(nn_model_t *m) { return m ? m->backend->params_home(m) : NULL; }
float *nn_model_grads_home(nn_model_t *m) { return m ? m->backend->grads_home(m) : NULL; }

float *nn_model_device_params(nn_model_t *m) {
  return m && m->backend->device != NN_DEVICE_CPU ? m->backend->params_home(m) : NULL;
}
float *nn_model_device_grads(nn_model_t *m) {
  return m && m->backend->device != NN_DEVICE_CPU ? m->backend->grads_home(m) : NULL;
}

nn_status_t nn_model_zero_grads(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_zero_grads: NULL model");
  return m->backend->zero_grads(m);
}

nn_status_t nn_model_scale_grads(nn_model_t *m, size_t from, size_t to, float factor) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_scale_grads: NULL model");
  if (from > to || to > m->param_len)
    return nn_set_error(NN_ERR_ARG, "nn_model_scale_grads: range [%zu, %zu) outside the "
                        "%zu gradients", from, to, m->param_len);
  if (from == to || factor == 1.0f) return NN_OK;
  return m->backend->scale_grads(m, from, to, factor);
}

nn_status_t nn_model_optim_create(nn_model_t *m, const nn_optim_config_t *cfg) {
  if (!m || !cfg) return nn_set_error(NN_ERR_ARG, "nn_model_optim_create: NULL argument");
  nn_optim_t *o = NULL;
  nn_status_t s = nn_optim_create(&o, cfg, m->param_len - m->train_from);
  if (s != NN_OK) return s;
  nn_optim_t *old = m->optim;
  nn_optim_config_t old_cfg = m->optim_cfg;
  m->optim = o;
  m->optim_cfg = *cfg;
  if (m->backend->optim_attach && (s = m->backend->optim_attach(m)) != NN_OK) {
    m->optim = old;  /* the model keeps the optimizer it had */
    m->optim_cfg = old_cfg;
    nn_optim_free(o);
    return s;
  }
  nn_optim_free(old);
  return NN_OK;
}

nn_status_t nn_model_optim_step(nn_model_t *m, float lr) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_optim_step: NULL model");
  if (!m->optim)
    return nn_set_error(NN_ERR_ARG, "nn_model_optim_step: the model has no optimizer "
                        "(nn_model_optim_create)");
  return m->backend->optim_step(m, lr);
}

float *nn_model_optim_state(nn_model_t *m, size_t *count) {
  if (!m || !m->optim) {
    if (count) *count = 0;
    return NULL;
  }
  return nn_optim_state(m->optim, count);
}

int64_t *nn_model_optim_step_count(nn_model_t *m) {
  return m && m->optim ? nn_optim_step_count(m->optim) : NULL;
}

nn_status_t nn_model_sync_to_host(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_host: NULL model");
  return m->backend->sync_to_host ? m->backend->sync_to_host(m) : NN_OK;
}

nn_status_t nn_model_sync_to_device(nn_model_t *m) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_sync_to_device: NULL model");
  return m->backend->sync_to_device ? m->backend->sync_to_device(m) : NN_OK;
}

nn_status_t nn_model_loss_scale(nn_model_t *m, float *scale, int64_t *skipped_steps) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_loss_scale: NULL model");
  if (m->backend->loss_scale) return m->backend->loss_scale(m, scale, skipped_steps);
  if (scale) *scale = 1.0f;
  if (skipped_steps) *skipped_steps = 0;
  return NN_OK;
}

void nn_model_free_activations(nn_model_t *m, void (*free_fn)(void *)) {
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (l->own_out) free_fn(l->out);
    if (l->own_dout) free_fn(l->dout);
    l->out = l->dout = NULL;
    l->own_out = l->own_dout = 0;
  }
  free_fn(m->input);
  free_fn(m->dinput);
  free_fn(m->dlogits);
  m->input = m->dinput = m->dlogits = NULL;
}
