/* nn/activation.c: elementwise relu and residual add (CPU reference).
   Large arrays are split across threads in cache-friendly contiguous chunks; small ones
   run inline (waking workers costs more than the work). */
#include "nn/nn.h"
#include "nn/threads_internal.h"

#define ELEMWISE_PARALLEL_MIN (1u << 17)  /* floats below which one thread does it all */
#define ELEMWISE_CHUNK (1u << 14)

typedef struct {
  size_t count;
  const float *a, *b;
  float *y;
  int op;
} elem_job_t;

enum { OP_RELU, OP_RELU_BACKWARD, OP_ADD };

static void elem_range(const elem_job_t *j, size_t i0, size_t i1) {
  const float *a = j->a, *b = j->b;
  float *y = j->y;
  switch (j->op) {
    case OP_RELU:
      for (size_t i = i0; i < i1; i++) y[i] = a[i] > 0.0f ? a[i] : 0.0f;
      break;
    case OP_RELU_BACKWARD:  /* a: forward output, b: dy, y: dx (added into) */
      for (size_t i = i0; i < i1; i++) y[i] += a[i] > 0.0f ? b[i] : 0.0f;
      break;
    case OP_ADD:
      for (size_t i = i0; i < i1; i++) y[i] = a[i] + b[i];
      break;
  }
}

static void elem_task(void *vj, int t, int worker) {
  (void)worker;
  const elem_job_t *j = vj;
  size_t i0 = (size_t)t * ELEMWISE_CHUNK, i1 = i0 + ELEMWISE_CHUNK;
  if (i1 > j->count) i1 = j->count;
  elem_range(j, i0, i1);
}

static void elem_run(elem_job_t *j) {
  if (j->count < ELEMWISE_PARALLEL_MIN || nn_parallel_workers(2) < 2) {
    elem_range(j, 0, j->count);
    return;
  }
  nn_parallel_for((int)((j->count + ELEMWISE_CHUNK - 1) / ELEMWISE_CHUNK), elem_task, j);
}

void nn_relu_forward(size_t count, const float *x, float *y) {
  elem_job_t j = {count, x, NULL, y, OP_RELU};
  elem_run(&j);
}

void nn_relu_backward(size_t count, const float *y, const float *dy, float *dx) {
  elem_job_t j = {count, y, dy, dx, OP_RELU_BACKWARD};
  elem_run(&j);
}

void nn_add_forward(size_t count, const float *a, const float *b, float *y) {
  elem_job_t j = {count, a, b, y, OP_ADD};
  elem_run(&j);
}
