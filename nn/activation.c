/* nn/activation.c: elementwise relu and residual add (CPU reference).
   Loops run 8 floats at a time on SSE vectors (branch-free: relu's select is a mask, not
   a branch that mispredicts on random signs). Large arrays are split across threads in
   contiguous chunks; small ones run inline (waking workers costs more than the work). */
#include "nn/nn.h"
#include "nn/backward_store_internal.h"
#include "nn/simd_internal.h"
#include "nn/threads_internal.h"

#define ELEMWISE_PARALLEL_MIN (1u << 18)  /* floats below which one thread does it all */

typedef struct {
  size_t count;
  const float *a, *b;
  float *y;
  int op, tasks;
} elem_job_t;

enum { OP_RELU, OP_RELU_BACKWARD, OP_RELU_BACKWARD_STORE, OP_ADD };

static void relu_range(const float *x, float *y, size_t i, size_t end) {
  const nn_v4f zero = nn_v4_set1(0.0f);
  for (; i + 8 <= end; i += 8) {
    nn_v4f a = nn_v4_load(x + i), b = nn_v4_load(x + i + 4);
    nn_v4_store(y + i, nn_v4_and(a, a > zero));
    nn_v4_store(y + i + 4, nn_v4_and(b, b > zero));
  }
  for (; i < end; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* dx += dy where the forward output y > 0. */
static void relu_backward_range(const float *y, const float *dy, float *dx, size_t i,
                                size_t end) {
  const nn_v4f zero = nn_v4_set1(0.0f);
  for (; i + 8 <= end; i += 8) {
    nn_v4f y0 = nn_v4_load(y + i), y1 = nn_v4_load(y + i + 4);
    nn_v4f d0 = nn_v4_and(nn_v4_load(dy + i), y0 > zero);
    nn_v4f d1 = nn_v4_and(nn_v4_load(dy + i + 4), y1 > zero);
    nn_v4_store(dx + i, nn_v4_load(dx + i) + d0);
    nn_v4_store(dx + i + 4, nn_v4_load(dx + i + 4) + d1);
  }
  for (; i < end; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
}

/* dx = dy where the forward output y > 0, else 0. */
static void relu_backward_store_range(const float *y, const float *dy, float *dx, size_t i,
                                      size_t end) {
  const nn_v4f zero = nn_v4_set1(0.0f);
  for (; i + 8 <= end; i += 8) {
    nn_v4_store(dx + i, nn_v4_and(nn_v4_load(dy + i), nn_v4_load(y + i) > zero));
    nn_v4_store(dx + i + 4, nn_v4_and(nn_v4_load(dy + i + 4), nn_v4_load(y + i + 4) > zero));
  }
  for (; i < end; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void add_range(const float *a, const float *b, float *y, size_t i, size_t end) {
  for (; i + 8 <= end; i += 8) {
    nn_v4_store(y + i, nn_v4_load(a + i) + nn_v4_load(b + i));
    nn_v4_store(y + i + 4, nn_v4_load(a + i + 4) + nn_v4_load(b + i + 4));
  }
  for (; i < end; i++) y[i] = a[i] + b[i];
}

static void elem_range(const elem_job_t *j, size_t i0, size_t i1) {
  switch (j->op) {
    case OP_RELU: relu_range(j->a, j->y, i0, i1); break;
    case OP_RELU_BACKWARD: relu_backward_range(j->a, j->b, j->y, i0, i1); break;
    case OP_RELU_BACKWARD_STORE: relu_backward_store_range(j->a, j->b, j->y, i0, i1); break;
    case OP_ADD: add_range(j->a, j->b, j->y, i0, i1); break;
  }
}

static void elem_task(void *vj, int t, int worker) {
  (void)worker;
  const elem_job_t *j = vj;
  /* Contiguous shares, cut at multiples of 16 floats (64-byte lines). */
  size_t i0 = j->count * t / j->tasks & ~(size_t)15;
  size_t i1 = t + 1 == j->tasks ? j->count : j->count * (t + 1) / j->tasks & ~(size_t)15;
  elem_range(j, i0, i1);
}

static void elem_run(elem_job_t *j) {
  j->tasks = j->count < ELEMWISE_PARALLEL_MIN ? 1 : nn_parallel_workers(NN_MAX_THREADS);
  if (j->tasks < 2) {
    elem_range(j, 0, j->count);
    return;
  }
  nn_parallel_for(j->tasks, elem_task, j);
}

void nn_relu_forward(size_t count, const float *x, float *y) {
  elem_job_t j = {count, x, NULL, y, OP_RELU, 1};
  elem_run(&j);
}

/* y is the forward output: y > 0 exactly where x > 0. */
void nn_relu_backward(size_t count, const float *y, const float *dy, float *dx) {
  elem_job_t j = {count, y, dy, dx, OP_RELU_BACKWARD, 1};
  elem_run(&j);
}

void nn_relu_backward_store(size_t count, const float *y, const float *dy, float *dx) {
  elem_job_t j = {count, y, dy, dx, OP_RELU_BACKWARD_STORE, 1};
  elem_run(&j);
}

void nn_add_backward_ex(size_t count, const float *dy, float *da, int a_add, float *db,
                        int b_add) {
  const nn_v4f none = nn_v4_set1(0.0f);
  size_t j = 0;
  for (; j + 4 <= count; j += 4) {
    nn_v4f g = nn_v4_load(dy + j);
    nn_v4_store(da + j, (a_add ? nn_v4_load(da + j) : none) + g);
    nn_v4_store(db + j, (b_add ? nn_v4_load(db + j) : none) + g);
  }
  for (; j < count; j++) {
    da[j] = (a_add ? da[j] : 0.0f) + dy[j];
    db[j] = (b_add ? db[j] : 0.0f) + dy[j];
  }
}

void nn_add_forward(size_t count, const float *a, const float *b, float *y) {
  elem_job_t j = {count, a, b, y, OP_ADD, 1};
  elem_run(&j);
}
