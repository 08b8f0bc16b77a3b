/* nn/model_io.c: a model's state_dict as a safetensors file, with PyTorch's names,
   shapes and dtypes (F32 tensors; num_batches_tracked as I64 scalars of shape []), in
   state_dict order, so `model.load_state_dict(load_file(path), strict=True)` works on
   the reference definitions, and files torch writes load here. Loading is strict and
   all-or-nothing: every check runs before the first float is copied. */
#include "nn/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nn_status_t nn_model_save_safetensors(const nn_model_t *m, const char *path) {
  return nn_model_save_safetensors_meta(m, path, NULL, 0);
}

nn_status_t nn_model_save_safetensors_meta(const nn_model_t *m, const char *path,
                                           const nn_st_meta_t *meta, int meta_count) {
  if (!m || !path)
    return nn_set_error(NN_ERR_ARG, "nn_model_save_safetensors: NULL argument");
  nn_st_tensor_t *ts = calloc((size_t)(m->num_slices ? m->num_slices : 1), sizeof *ts);
  if (!ts) return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_save_safetensors: out of memory");
  for (int i = 0; i < m->num_slices; i++) {
    const nn_slice_t *s = &m->slices[i];
    nn_st_tensor_t *t = &ts[i];
    snprintf(t->name, sizeof t->name, "%s", s->name);
    t->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++) t->shape[d] = s->shape[d];
    switch (s->kind) {
    case NN_SLICE_PARAM:
      t->dtype = NN_ST_F32;
      t->data = m->params + s->offset;
      t->nbytes = s->numel * sizeof(float);
      break;
    case NN_SLICE_BUFFER:
      t->dtype = NN_ST_F32;
      t->data = m->buffers + s->offset;
      t->nbytes = s->numel * sizeof(float);
      break;
    case NN_SLICE_COUNTER:
      t->dtype = NN_ST_I64;
      t->data = m->counters + s->offset;
      t->nbytes = sizeof(int64_t);
      break;
    }
  }
  nn_status_t st = nn_st_write_meta(path, ts, m->num_slices, meta, meta_count);
  free(ts);
  return st;
}

static const char *dtype_name(nn_st_dtype_t d) {
  static const char *const names[] = {"F32", "F64", "F16", "BF16", "I8", "U8", "I32", "I64"};
  return (unsigned)d < sizeof names / sizeof names[0] ? names[d] : "?";
}

static void shape_string(char *buf, size_t size, int ndim, const int64_t *shape) {
  size_t len = 0;
  buf[0] = 0;
  len += (size_t)snprintf(buf + len, size - len, "[");
  for (int d = 0; d < ndim && len < size; d++)
    len += (size_t)snprintf(buf + len, size - len, "%s%lld", d ? ", " : "",
                            (long long)shape[d]);
  if (len < size) snprintf(buf + len, size - len, "]");
}

/* Checks one model tensor against the file's entry. */
static nn_status_t check_tensor(const nn_model_t *m, const nn_slice_t *s,
                                const nn_st_tensor_t *t, const char *path) {
  if (!t)
    return nn_set_error(NN_ERR_FORMAT, "%s: tensor \"%s\" of model %s is missing (a file "
                        "of another model?)", path, s->name, m->name);
  nn_st_dtype_t want = s->kind == NN_SLICE_COUNTER ? NN_ST_I64 : NN_ST_F32;
  if (t->dtype != want)
    return nn_set_error(NN_ERR_FORMAT, "%s: tensor \"%s\" has dtype %s, expected %s", path,
                        s->name, dtype_name(t->dtype), dtype_name(want));
  int same = t->ndim == s->ndim;
  for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
  if (!same) {
    char got[128], exp[128];
    int64_t es[NN_MAX_DIMS];
    for (int d = 0; d < s->ndim; d++) es[d] = s->shape[d];
    shape_string(got, sizeof got, t->ndim, t->shape);
    shape_string(exp, sizeof exp, s->ndim, es);
    return nn_set_error(NN_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, model %s expects %s",
                        path, s->name, got, m->name, exp);
  }
  return NN_OK;
}

nn_status_t nn_model_load_safetensors(nn_model_t *m, const char *path) {
  if (!m || !path)
    return nn_set_error(NN_ERR_ARG, "nn_model_load_safetensors: NULL argument");
  nn_st_file_t f;
  nn_status_t st = nn_st_read(path, &f);
  if (st != NN_OK) return st;
  for (int i = 0; i < m->num_slices && st == NN_OK; i++)
    st = check_tensor(m, &m->slices[i], nn_st_find(&f, m->slices[i].name), path);
  /* Every model tensor is present; any other name in the file is an extra. */
  for (int k = 0; k < f.count && st == NN_OK; k++) {
    int known = 0;
    for (int i = 0; i < m->num_slices && !known; i++)
      known = strcmp(f.tensors[k].name, m->slices[i].name) == 0;
    if (!known)
      st = nn_set_error(NN_ERR_FORMAT, "%s: tensor \"%s\" is not part of model %s (a file "
                        "of another model?)", path, f.tensors[k].name, m->name);
  }
  if (st == NN_OK && f.count != m->num_slices)
    st = nn_set_error(NN_ERR_FORMAT, "%s: %d tensors, model %s has %d (a name appears "
                      "twice?)", path, f.count, m->name, m->num_slices);
  if (st == NN_OK) {
    for (int i = 0; i < m->num_slices; i++) {
      const nn_slice_t *s = &m->slices[i];
      const nn_st_tensor_t *t = nn_st_find(&f, s->name);
      void *dst = s->kind == NN_SLICE_PARAM    ? (void *)(m->params + s->offset)
                  : s->kind == NN_SLICE_BUFFER ? (void *)(m->buffers + s->offset)
                                               : (void *)(m->counters + s->offset);
      memcpy(dst, t->data, t->nbytes); /* memcpy: file data need not be aligned */
    }
  }
  nn_st_free(&f);
  return st;
}
