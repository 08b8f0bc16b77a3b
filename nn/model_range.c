/* nn/model_range.c: forward and backward over a contiguous range of a model's layers,
   so that a pipeline stage runs the same model code as the whole model (nn.h, "layer
   ranges").

   A range [first, last) reads the output of layer first - 1 (the model input when first
   is 0) and produces the output of layer last - 1; its backward takes the gradient of
   that output (the loss's when last is the number of layers) and leaves the gradient of
   its input in layer first - 1's gradient buffer. Parameter gradients are added to, as
   nn_model_backward_accumulate does: a pipeline zeroes them once per step and sums its
   micro-batches. The walk is model_walk.c's, limited to the range, frozen layers
   included (inference-mode forward; no backward below the lowest trainable layer, so
   a range wholly below it leaves its input's gradient unwritten: nothing needs it);
   the CPU backend only (its buffers are host memory the caller reads and writes).

   A stage keeps several micro-batches in flight, but a model has one set of activation
   buffers: nn_model_range_stash saves what the range's backward reads (its input, every
   output it owns, the batch-norm statistics, the pooling and dropout masks, and the
   gradient of the loss) and nn_model_range_unstash puts it back (PipeDream's activation
   stashing). Its size is the activation memory one micro-batch holds on that stage.
   Activation sets do the same without copying: each micro-batch in flight runs in its
   own set of those buffers, and nn_model_range_use points the model's layers at the
   set of the micro-batch that runs next. */
#include "nn/model_internal.h"
#include "util/clock.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static nn_status_t check_range(const nn_model_t *m, int first, int last, const char *what) {
  if (!m) return nn_set_error(NN_ERR_ARG, "%s: NULL model", what);
  if (first < 0 || last > m->num_layers || first >= last)
    return nn_set_error(NN_ERR_ARG, "%s: layer range [%d, %d) is not a non-empty part of "
                        "the model's %d layers", what, first, last, m->num_layers);
  if (m->backend->device != NN_DEVICE_CPU)
    return nn_set_error(NN_ERR_UNSUPPORTED, "%s: layer ranges run on the CPU only (the "
                        "model is on %s)", what, m->backend->name);
  return NN_OK;
}

int nn_model_range_cut_ok(const nn_model_t *m, int k) {
  if (!m || k <= 0 || k >= m->num_layers) return 0;
  /* Every layer from k on reads only layers from k - 1 on: nothing else crosses. */
  for (int j = k; j < m->num_layers; j++)
    for (int t = 0; t < 2; t++) {
      int in = m->layers[j].in[t];
      if (t == 1 && !nn_layer_kind_has_two_inputs(m->layers[j].kind)) continue;
      if (in < k - 1) return 0;   /* NN_MODEL_INPUT (-1) included */
    }
  return 1;
}

size_t nn_model_layer_out_size(const nn_model_t *m, int i) {
  return m && i >= 0 && i < m->num_layers ? nn_layer_sample_size(&m->layers[i]) : 0;
}

float *nn_model_layer_out(nn_model_t *m, int i) {
  return m && i >= 0 && i < m->num_layers && m->backend->device == NN_DEVICE_CPU
             ? m->layers[i].out : NULL;
}

float *nn_model_range_input_grad(nn_model_t *m, int first) {
  if (!m || first <= 0 || first >= m->num_layers || m->backend->device != NN_DEVICE_CPU)
    return NULL;
  return nn_layer_dx(m, first);
}

void nn_model_range_params(const nn_model_t *m, int first, int last, size_t *begin,
                           size_t *end) {
  size_t b = SIZE_MAX, e = 0;
  for (int i = first; m && i < last && i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (l->param_end <= l->param_begin) continue;
    if (l->param_begin < b) b = l->param_begin;
    if (l->param_end > e) e = l->param_end;
  }
  *begin = b == SIZE_MAX ? 0 : b;
  *end = b == SIZE_MAX ? 0 : e;
}

void nn_model_range_buffers(const nn_model_t *m, int first, int last, size_t *begin,
                            size_t *end, int *cbegin, int *cend) {
  size_t b = SIZE_MAX, e = 0;
  int cb = INT_MAX, ce = 0;
  for (int i = first; m && i < last && i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (l->rm_off == SIZE_MAX || l->counter < 0) continue;
    size_t lo = l->rm_off < l->rv_off ? l->rm_off : l->rv_off;
    size_t hi = (l->rm_off > l->rv_off ? l->rm_off : l->rv_off) + (size_t)l->c;
    if (lo < b) b = lo;
    if (hi > e) e = hi;
    if (l->counter < cb) cb = l->counter;
    if (l->counter + 1 > ce) ce = l->counter + 1;
  }
  *begin = b == SIZE_MAX ? 0 : b;
  *end = b == SIZE_MAX ? 0 : e;
  *cbegin = cb == INT_MAX ? 0 : cb;
  *cend = cb == INT_MAX ? 0 : ce;
}

static int acts_cap(const nn_range_acts_t *a);

nn_status_t nn_model_forward_range(nn_model_t *m, int first, int last, const float *x, int n,
                                   int training) {
  const char *what = "nn_model_forward_range";
  nn_status_t s = check_range(m, first, last, what);
  if (s != NN_OK) return s;
  if (!x) return nn_set_error(NN_ERR_ARG, "%s: NULL input", what);
  int cap = m->acts_cur ? acts_cap(m->acts_cur) : m->cfg.batch;
  if (n <= 0 || n > cap)
    return nn_set_error(NN_ERR_ARG, "%s: batch of %d samples, the %s holds 1..%d", what, n,
                        m->acts_cur ? "activation set in use" : "model", cap);
  const nn_backend_t *b = m->backend;
  m->have_loss = 0;
  m->last_n = 0;
  if (first == 0) s = b->load_input(m, x, n);
  else if (m->layers[first - 1].out != x)
    s = b->copy(m->layers[first - 1].out, x,
                (size_t)n * nn_layer_sample_size(&m->layers[first - 1]) * sizeof(float));
  for (int i = first; s == NN_OK && i < last; i++) {
    nn_layer_t *l = &m->layers[i];
    double t0 = util_now_s();
    /* A frozen layer runs as in inference, as in model_walk.c. */
    s = b->layer[l->kind].forward(m, i, n, training && !l->frozen);
    l->forward_s = util_now_s() - t0;
  }
  if (s != NN_OK) return s;
  if (training) m->dropout_step++;
  m->last_n = n;
  m->last_training = training;
  return NN_OK;
}

nn_status_t nn_model_backward_range(nn_model_t *m, int first, int last, const float *dy,
                                    nn_grad_ready_fn on_ready, void *ctx) {
  const char *what = "nn_model_backward_range";
  nn_status_t s = check_range(m, first, last, what);
  if (s != NN_OK) return s;
  if (m->last_n == 0 || !m->last_training)
    return nn_set_error(NN_ERR_ARG, "%s: no training-mode forward of the range (or its "
                        "unstash) to go back through", what);
  if (!dy && !(last == m->num_layers && m->have_loss))
    return nn_set_error(NN_ERR_ARG, "%s: NULL output gradient: only the range that ends "
                        "with the last layer, after nn_model_loss, starts from the loss",
                        what);
  const nn_backend_t *b = m->backend;
  const int n = m->last_n;
  /* As begin_backward in model_walk.c, for this range: the gradients nobody in it
     stores first start at zero; the top layer's is the given one. */
  for (int i = first; s == NN_OK && i < last; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (l->own_dout && (!b->writes_first_dx || l->dout_unwritten))
      s = b->zero(l->dout, (size_t)n * nn_layer_sample_size(l) * sizeof(float));
  }
  if (s == NN_OK && first == 0 && m->dinput && (!b->writes_first_dx || m->dinput_unwritten))
    s = b->zero(m->dinput, (size_t)n * nn_model_input_size(m) * sizeof(float));
  const nn_layer_t *top = &m->layers[last - 1];
  if (s == NN_OK)
    s = b->copy(top->dout, dy ? dy : m->dlogits,
                (size_t)n * nn_layer_sample_size(top) * sizeof(float));
  size_t ready = SIZE_MAX;
  /* Below the lowest trainable layer only frozen parameters lie (nn/model_freeze.c). */
  for (int i = last - 1; s == NN_OK && i >= first && i >= m->train_layer; i--) {
    nn_layer_t *l = &m->layers[i];
    double t0 = util_now_s();
    s = b->layer[l->kind].backward(m, i, n);
    l->backward_s = util_now_s() - t0;
    if (s == NN_OK && l->param_end > l->param_begin && l->param_begin < ready) {
      ready = l->param_begin;
      if (on_ready) on_ready(ctx, ready);
    }
  }
  if (s == NN_OK) m->have_loss = 0;
  return s;
}

/* ---- stashing one micro-batch's activations ---- */

typedef struct {
  void **p;
  size_t *bytes;
  int n, cap;
} regions_t;

static void regions_free(regions_t *r) {
  free(r->p);
  free(r->bytes);
  r->p = NULL;
  r->bytes = NULL;
}

static void add_region(regions_t *r, void *p, size_t bytes) {
  if (!p || bytes == 0) return;
  for (int i = 0; i < r->n; i++)
    if (r->p[i] == p) {   /* a view's alias: the larger extent */
      if (bytes > r->bytes[i]) r->bytes[i] = bytes;
      return;
    }
  r->p[r->n] = p;   /* cap: every buffer of every layer (collect) */
  r->bytes[r->n++] = bytes;
}

/* What the range's backward reads, for n samples. */
static nn_status_t collect(nn_model_t *m, int first, int last, int n, regions_t *r,
                           const char *what) {
  r->p = NULL;
  r->bytes = NULL;
  nn_status_t s = check_range(m, first, last, what);
  if (s != NN_OK) return s;
  r->n = 0;
  r->cap = 5 * (last - first) + 2;
  r->p = malloc((size_t)r->cap * sizeof(*r->p));
  r->bytes = malloc((size_t)r->cap * sizeof(*r->bytes));
  if (!r->p || !r->bytes) {
    regions_free(r);
    return nn_set_error(NN_ERR_NO_MEMORY, "%s: out of memory", what);
  }
  if (first == 0) add_region(r, m->input, (size_t)n * nn_model_input_size(m) * 4);
  else add_region(r, m->layers[first - 1].out,
                  (size_t)n * nn_layer_sample_size(&m->layers[first - 1]) * 4);
  for (int i = first; i < last; i++) {
    nn_layer_t *l = &m->layers[i];
    size_t elems = (size_t)n * nn_layer_sample_size(l);
    add_region(r, l->out, elems * 4);
    add_region(r, l->save_mean, (size_t)l->c * 4);
    add_region(r, l->save_invstd, (size_t)l->c * 4);
    add_region(r, l->argmax, elems * sizeof(int32_t));
    add_region(r, l->mask, elems);
  }
  if (last == m->num_layers) add_region(r, m->dlogits, (size_t)n * m->num_classes * 4);
  return NN_OK;
}

size_t nn_model_range_stash_bytes(nn_model_t *m, int first, int last, int n) {
  regions_t r;
  if (collect(m, first, last, n, &r, "nn_model_range_stash_bytes") != NN_OK) return 0;
  size_t total = sizeof(int32_t) * 2;
  for (int i = 0; i < r.n; i++) total += r.bytes[i];
  regions_free(&r);
  return total;
}

nn_status_t nn_model_range_stash(nn_model_t *m, int first, int last, void *buf) {
  regions_t r;
  int n = m ? m->last_n : 0;
  if (n == 0) return nn_set_error(NN_ERR_ARG, "nn_model_range_stash: no forward to stash");
  nn_status_t s = collect(m, first, last, n, &r, "nn_model_range_stash");
  if (s != NN_OK) return s;
  char *p = buf;
  int32_t head[2] = {n, m->have_loss};
  memcpy(p, head, sizeof(head));
  p += sizeof(head);
  for (int i = 0; i < r.n; i++) {
    memcpy(p, r.p[i], r.bytes[i]);
    p += r.bytes[i];
  }
  regions_free(&r);
  return NN_OK;
}

nn_status_t nn_model_range_unstash(nn_model_t *m, int first, int last, const void *buf) {
  if (!m || !buf) return nn_set_error(NN_ERR_ARG, "nn_model_range_unstash: NULL argument");
  const char *p = buf;
  int32_t head[2];
  memcpy(head, p, sizeof(head));
  p += sizeof(head);
  if (head[0] <= 0 || head[0] > m->cfg.batch)
    return nn_set_error(NN_ERR_ARG, "nn_model_range_unstash: the stash holds %d samples, "
                        "the model takes 1..%d", (int)head[0], m->cfg.batch);
  regions_t r;
  nn_status_t s = collect(m, first, last, head[0], &r, "nn_model_range_unstash");
  if (s != NN_OK) return s;
  for (int i = 0; i < r.n; i++) {
    memcpy(r.p[i], p, r.bytes[i]);
    p += r.bytes[i];
  }
  regions_free(&r);
  m->last_n = head[0];
  m->last_training = 1;
  m->have_loss = head[1];
  return NN_OK;
}

/* ---- activation sets: stashing by switching buffers ---- */

struct nn_range_acts {
  const nn_model_t *m;
  int first, last, cap;   /* cap: samples the buffers hold (the home set: cfg.batch) */
  regions_t r;            /* in collect's order; a set owns them, the home set not    */
  int n, training, have_loss;   /* the state of the micro-batch they hold (n 0: none) */
};

/* Every pointer of the model to old (aliases included: views, a flatten of the input)
   now points to new. */
static void replace_ptr(nn_model_t *m, void *old, void *new) {
  if ((void *)m->input == old) m->input = new;
  if (m->dlogits == old) m->dlogits = new;
  for (int i = 0; i < m->num_layers; i++) {
    nn_layer_t *l = &m->layers[i];
    if (l->out == old) l->out = new;
    if ((void *)l->save_mean == old) l->save_mean = new;
    if ((void *)l->save_invstd == old) l->save_invstd = new;
    if ((void *)l->argmax == old) l->argmax = new;
    if ((void *)l->mask == old) l->mask = new;
  }
}

static int acts_cap(const nn_range_acts_t *a) { return a->cap; }

void nn_range_acts_free(nn_range_acts_t *a) {
  if (!a) return;
  for (int i = 0; a->r.p && i < a->r.n; i++) free(a->r.p[i]);
  regions_free(&a->r);
  free(a);
}

nn_status_t nn_range_acts_create(nn_model_t *m, int first, int last, int n,
                                 nn_range_acts_t **out) {
  const char *what = "nn_range_acts_create";
  if (!out) return nn_set_error(NN_ERR_ARG, "%s: NULL result pointer", what);
  *out = NULL;
  nn_status_t s = check_range(m, first, last, what);
  if (s != NN_OK) return s;
  if (n <= 0 || n > m->cfg.batch)
    return nn_set_error(NN_ERR_ARG, "%s: a set for %d samples, the model was created for "
                        "1..%d", what, n, m->cfg.batch);
  nn_range_acts_t *a = calloc(1, sizeof(*a));
  if (!a) return nn_set_error(NN_ERR_NO_MEMORY, "%s: out of memory", what);
  if ((s = collect(m, first, last, n, &a->r, what)) != NN_OK) {
    free(a);
    return s;
  }
  int ok = 1;
  for (int i = 0; i < a->r.n; i++)
    if (!(a->r.p[i] = ok ? calloc(a->r.bytes[i], 1) : NULL)) ok = 0;
  *a = (nn_range_acts_t){.m = m, .first = first, .last = last, .cap = n, .r = a->r};
  if (!ok) {
    nn_range_acts_free(a);
    return nn_set_error(NN_ERR_NO_MEMORY, "%s: out of memory for a set of %zu bytes", what,
                        nn_model_range_stash_bytes(m, first, last, n));
  }
  *out = a;
  return NN_OK;
}

/* The model's own buffers, recorded when a set first replaces them. */
static nn_status_t record_home(nn_model_t *m, int first, int last, const char *what) {
  nn_range_acts_t *h = calloc(1, sizeof(*h));
  if (!h) return nn_set_error(NN_ERR_NO_MEMORY, "%s: out of memory", what);
  nn_status_t s = collect(m, first, last, m->cfg.batch, &h->r, what);
  if (s != NN_OK) {
    free(h);
    return s;
  }
  h->m = m;
  h->first = first;
  h->last = last;
  h->cap = m->cfg.batch;
  m->acts_home = h;
  return NN_OK;
}

nn_status_t nn_model_range_use(nn_model_t *m, int first, int last, nn_range_acts_t *a) {
  const char *what = "nn_model_range_use";
  nn_status_t s = check_range(m, first, last, what);
  if (s != NN_OK) return s;
  if (a && (a->m != m || a->first != first || a->last != last))
    return nn_set_error(NN_ERR_ARG, "%s: the set was made for %s range [%d, %d), not this "
                        "model's [%d, %d)", what, a->m != m ? "another model's" : "the",
                        a->first, a->last, first, last);
  nn_range_acts_t *cur = m->acts_cur;
  if (cur == a) return NN_OK;
  /* A set of another range: the model's own buffers first (that set keeps its own). */
  if (cur && (cur->first != first || cur->last != last)) {
    if ((s = nn_model_range_use(m, cur->first, cur->last, NULL)) != NN_OK) return s;
    if (!a) return NN_OK;
    cur = NULL;
  }
  if (!cur && (s = record_home(m, first, last, what)) != NN_OK) return s;
  nn_range_acts_t *from = cur ? cur : m->acts_home, *to = a ? a : m->acts_home;
  from->n = m->last_n;
  from->training = m->last_training;
  from->have_loss = m->have_loss;
  for (int i = 0; i < from->r.n; i++) replace_ptr(m, from->r.p[i], to->r.p[i]);
  m->last_n = to->n;
  m->last_training = to->training;
  m->have_loss = to->have_loss;
  m->acts_cur = a;
  if (!a) {
    regions_free(&m->acts_home->r);
    free(m->acts_home);
    m->acts_home = NULL;
  }
  return NN_OK;
}

void nn_model_range_use_home(nn_model_t *m) {
  if (m && m->acts_cur) nn_model_range_use(m, m->acts_cur->first, m->acts_cur->last, NULL);
}
