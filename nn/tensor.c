/* nn/tensor.c: owned and viewing float32 tensors (contiguous, row-major NCHW). */
#include "nn/nn.h"

#include <stdlib.h>

/* Fills shape and contiguous strides; 0 when the shape is invalid. */
static int tensor_set_shape(nn_tensor_t *t, int ndim, const int *shape) {
  if (ndim < 0 || ndim > NN_MAX_DIMS || (ndim > 0 && !shape)) return 0;
  t->ndim = ndim;
  size_t stride = 1;
  for (int i = NN_MAX_DIMS - 1; i >= 0; i--) {
    if (i >= ndim) {
      t->shape[i] = 1;
      t->stride[i] = 1;
      continue;
    }
    if (shape[i] < 0) return 0;
    t->shape[i] = shape[i];
    t->stride[i] = stride;
    stride *= (size_t)shape[i];
  }
  return 1;
}

nn_status_t nn_tensor_create(nn_tensor_t *t, int ndim, const int *shape) {
  if (!t) return nn_set_error(NN_ERR_ARG, "nn_tensor_create: tensor pointer is NULL");
  nn_tensor_t z = {0};
  *t = z;
  if (!tensor_set_shape(t, ndim, shape))
    return nn_set_error(NN_ERR_ARG,
                        "nn_tensor_create: bad shape (ndim %d, expected 0..%d, sizes >= 0)",
                        ndim, NN_MAX_DIMS);
  size_t n = nn_tensor_numel(t);
  t->data = calloc(n ? n : 1, sizeof(float));
  if (!t->data) {
    *t = z;
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_tensor_create: cannot allocate %zu floats", n);
  }
  t->device = NN_DEVICE_CPU;
  t->owns_data = 1;
  return NN_OK;
}

nn_tensor_t nn_tensor_view(float *data, int ndim, const int *shape) {
  nn_tensor_t t = {0};
  if (!tensor_set_shape(&t, ndim, shape)) {
    nn_tensor_t z = {0};
    return z;
  }
  t.data = data;
  t.device = NN_DEVICE_CPU;
  t.owns_data = 0;
  return t;
}

void nn_tensor_free(nn_tensor_t *t) {
  if (!t) return;
  if (t->owns_data) free(t->data);
  nn_tensor_t z = {0};
  *t = z;
}

size_t nn_tensor_numel(const nn_tensor_t *t) {
  if (!t) return 0;
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}
