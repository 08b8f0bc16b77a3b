/* nn/model_freeze.c: frozen layers (nn.h, "frozen layers"). nn freezes the bottom of a
   model, as transfer learning does (a pretrained base under a new head): every frozen
   layer comes before every trainable one. Then the walk needs no per-layer test in
   backward (it stops at the lowest trainable layer: what lies below it leads only to
   frozen parameters, the graph being in topological order) and the trainable
   parameters are one range at the end of params[], which is all the optimizer holds and
   all a training loop allreduces. */
#include "nn/model_internal.h"

#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>

static int has_params(const nn_layer_t *l) { return l->param_end > l->param_begin; }

/* The layer that owns slice sl, or -1. */
static int layer_of_slice(const nn_model_t *m, const nn_slice_t *sl) {
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (sl->kind == NN_SLICE_PARAM && has_params(l) && sl->offset >= l->param_begin &&
        sl->offset < l->param_end)
      return i;
    if (sl->kind == NN_SLICE_BUFFER && (sl->offset == l->rm_off || sl->offset == l->rv_off))
      return i;
    if (sl->kind == NN_SLICE_COUNTER && (int)sl->offset == l->counter) return i;
  }
  return -1;
}

/* The optimizer over params[from, param_len): the state of what stays trainable kept,
   that of what becomes trainable zero, the step count kept. */
static nn_status_t resize_optim(nn_model_t *m, size_t from) {
  if (!m->optim || from == m->train_from) {
    m->train_from = from;
    return NN_OK;
  }
  const size_t old_from = m->train_from, old_n = m->param_len - old_from;
  const size_t new_n = m->param_len - from;
  size_t old_count = 0, new_count = 0;
  const float *old_state = nn_optim_state(m->optim, &old_count);
  const size_t blocks = old_n ? old_count / old_n : 0;  /* SGD 1 (or 0), Adam 2, ... */
  nn_optim_t *o = NULL;
  nn_status_t s = nn_optim_create(&o, &m->optim_cfg, new_n);
  if (s != NN_OK) return s;
  float *state = nn_optim_state(o, &new_count);
  if (new_count != blocks * new_n) {
    nn_optim_free(o);
    return nn_set_error(NN_ERR_ARG, "nn_model_set_frozen: the optimizer holds %zu floats "
                        "for %zu parameters, not a multiple", old_count, old_n);
  }
  for (size_t b = 0; b < blocks; b++)
    for (size_t i = 0; i < new_n; i++) {
      size_t g = from + i;  /* the parameter's offset in params[] */
      state[b * new_n + i] = g >= old_from ? old_state[b * old_n + (g - old_from)] : 0.0f;
    }
  *nn_optim_step_count(o) = *nn_optim_step_count(m->optim);
  nn_optim_t *old = m->optim;
  m->optim = o;
  m->train_from = from;
  if (m->backend->optim_attach && (s = m->backend->optim_attach(m)) != NN_OK) {
    m->optim = old;  /* the model keeps the optimizer and the frozen set it had */
    m->train_from = old_from;
    nn_optim_free(o);
    return s;
  }
  nn_optim_free(old);
  return NN_OK;
}

/* Freezes exactly the layers with want[i] set (layers without parameters never are). */
static nn_status_t apply(nn_model_t *m, const char *want) {
  int lowest = -1, any = 0;  /* the lowest trainable layer with parameters */
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (!has_params(l)) continue;
    if (!want[i] && lowest < 0) lowest = i;
    if (want[i] && lowest >= 0)
      return nn_set_error(NN_ERR_ARG, "nn_model_set_frozen: %s would be frozen but %s, "
                          "below it, trainable: nn freezes the bottom of a model (freeze "
                          "%s too, or leave %s trainable)", l->name, m->layers[lowest].name,
                          m->layers[lowest].name, l->name);
    any |= want[i];
  }
  if (lowest < 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_set_frozen: every layer of %s would be "
                        "frozen: nothing would train", m->name);
  size_t from = any ? m->layers[lowest].w_off : 0;
  nn_status_t s = resize_optim(m, from);
  if (s != NN_OK) return s;
  for (int i = 0; i < m->num_layers; i++)
    m->layers[i].frozen = has_params(&m->layers[i]) && want[i];
  m->train_layer = any ? lowest : 0;
  return NN_OK;
}

nn_status_t nn_model_set_frozen(nn_model_t *m, const char *const *patterns, int count) {
  if (!m || count < 0 || (count > 0 && !patterns))
    return nn_set_error(NN_ERR_ARG, "nn_model_set_frozen: NULL argument");
  char *want = calloc((size_t)m->num_layers + 1, 1);
  if (!want) return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_set_frozen: out of memory");
  for (int p = 0; p < count; p++) {
    int matched = 0;
    for (int k = 0; k < m->num_slices; k++) {
      if (fnmatch(patterns[p], m->slices[k].name, 0) != 0) continue;
      int i = layer_of_slice(m, &m->slices[k]);
      if (i >= 0) want[i] = 1;
      matched = 1;
    }
    if (!matched) {
      free(want);
      return nn_set_error(NN_ERR_ARG, "nn_model_set_frozen: \"%s\" matches no tensor of "
                          "%s (its first is \"%s\", its last \"%s\")", patterns[p], m->name,
                          m->slices[0].name, m->slices[m->num_slices - 1].name);
    }
  }
  nn_status_t s = apply(m, want);
  free(want);
  return s;
}

nn_status_t nn_model_set_trainable_from(nn_model_t *m, size_t from) {
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_set_trainable_from: NULL model");
  char *want = calloc((size_t)m->num_layers + 1, 1);
  if (!want) return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_set_trainable_from: out of memory");
  int starts = from == 0;
  for (int i = 0; i < m->num_layers; i++) {
    const nn_layer_t *l = &m->layers[i];
    if (!has_params(l)) continue;
    want[i] = l->w_off < from;
    starts |= l->w_off == from;
  }
  nn_status_t s = starts ? apply(m, want)
                         : nn_set_error(NN_ERR_ARG, "nn_model_set_trainable_from: %zu is not "
                                        "where a layer of %s begins", from, m->name);
  free(want);
  return s;
}

size_t nn_model_trainable_from(const nn_model_t *m) { return m ? m->train_from : 0; }

int nn_model_slice_frozen(const nn_model_t *m, int i) {
  if (!m || i < 0 || i >= m->num_slices) return 0;
  int l = layer_of_slice(m, &m->slices[i]);
  return l >= 0 && m->layers[l].frozen;
}
