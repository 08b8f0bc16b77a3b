/* train/transfer.c: --freeze, --init-weights with --init-skip, frozen counts
   (train/transfer.h). */
#include "train/transfer.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

int train_freeze(nn_model_t *m, const train_opts_t *o, char *err, size_t errlen) {
  if (o->freeze.count == 0) return 0;
  if (nn_model_set_frozen(m, o->freeze.items, o->freeze.count) == NN_OK) return 0;
  snprintf(err, errlen, "--freeze: %s; tensor names as python/hvd_models.py's "
           "get_model('%s').state_dict() lists them", nn_last_error(), o->model);
  return -1;
}

static int skipped(const char *name, const train_patterns_t *skip) {
  for (int k = 0; k < skip->count; k++)
    if (fnmatch(skip->items[k], name, 0) == 0) return 1;
  return 0;
}

/* Where slice s of m lives and what dtype a file must hold it in. */
static void *slice_data(nn_model_t *m, const nn_slice_t *s) {
  if (s->kind == NN_SLICE_PARAM) return nn_model_params(m) + s->offset;
  if (s->kind == NN_SLICE_BUFFER) return nn_model_buffers(m) + s->offset;
  return nn_model_counters(m) + s->offset;
}

/* The file's tensor t against slice s: 0, or -1 with err. */
static int check_one(const nn_slice_t *s, const nn_st_tensor_t *t, const char *path,
                     const char *model, char *err, size_t errlen) {
  if (!t) {
    snprintf(err, errlen, "--init-weights %s: tensor \"%s\" of model %s is missing (skip it "
             "with --init-skip to keep its fresh initialisation)", path, s->name, model);
    return -1;
  }
  nn_st_dtype_t want = s->kind == NN_SLICE_COUNTER ? NN_ST_I64 : NN_ST_F32;
  int same = t->dtype == want && t->ndim == s->ndim;
  for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
  if (!same) {
    snprintf(err, errlen, "--init-weights %s: tensor \"%s\" differs from model %s's in dtype "
             "or shape (%d dimensions in the file, %d in the model; a new head: --init-skip "
             "'%.*s*')", path, s->name, model, t->ndim, s->ndim,
             (int)(strrchr(s->name, '.') ? strrchr(s->name, '.') - s->name + 1 : 0), s->name);
    return -1;
  }
  return 0;
}

int train_load_init_skip(nn_model_t *m, const char *path, const train_patterns_t *skip,
                         char *err, size_t errlen) {
  nn_st_file_t f;
  if (nn_st_read(path, &f) != NN_OK) {
    snprintf(err, errlen, "--init-weights: %s", nn_last_error());
    return -1;
  }
  const char *model = nn_model_name(m);
  int rc = 0, ns = nn_model_num_slices(m), matched = 0;
  for (int i = 0; i < ns && rc == 0; i++) {
    const nn_slice_t *s = nn_model_slice(m, i);
    if (skipped(s->name, skip)) matched++;
    else rc = check_one(s, nn_st_find(&f, s->name), path, model, err, errlen);
  }
  /* The file's other tensors: only those the patterns skip (an old head). */
  for (int k = 0; k < f.count && rc == 0; k++) {
    int known = skipped(f.tensors[k].name, skip);
    for (int i = 0; i < ns && !known; i++) known = strcmp(f.tensors[k].name, nn_model_slice(m, i)->name) == 0;
    if (!known) {
      snprintf(err, errlen, "--init-weights %s: tensor \"%s\" is not part of model %s (a file "
               "of another model?)", path, f.tensors[k].name, model);
      rc = -1;
    }
  }
  if (rc == 0 && matched == 0) {
    snprintf(err, errlen, "--init-skip: no tensor of model %s matches %s%s", model,
             skip->items[0], skip->count > 1 ? " or the other patterns" : "");
    rc = -1;
  }
  for (int i = 0; i < ns && rc == 0; i++) {
    const nn_slice_t *s = nn_model_slice(m, i);
    if (skipped(s->name, skip)) continue;
    const nn_st_tensor_t *t = nn_st_find(&f, s->name);
    memcpy(slice_data(m, s), t->data, t->nbytes); /* the file's data need not be aligned */
  }
  nn_st_free(&f);
  return rc;
}

void train_frozen_counts(const nn_model_t *m, int *tensors, size_t *params) {
  *tensors = 0;
  *params = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    if (!nn_model_slice_frozen(m, i)) continue;
    const nn_slice_t *s = nn_model_slice(m, i);
    (*tensors)++;
    if (s->kind == NN_SLICE_PARAM) *params += s->numel;
  }
}
