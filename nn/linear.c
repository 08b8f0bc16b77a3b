/* nn/linear.c: fully connected layer y = x W^T + b (CPU reference), three GEMMs:
     forward   y[n][out]   = x[n][in] W[out][in]^T (+ b)
     backward  dx[n][in]  += dy[n][out] W[out][in]
               dW[out][in] += dy^T x;   db += column sums of dy
   With several threads each GEMM is cut into column blocks of its output, one per
   worker, each a single-threaded OpenBLAS call: measured faster than OpenBLAS's own
   threading on this project's small shapes (see conv2d.c), and deterministic. */
#include "nn/nn.h"
#include "nn/threads_internal.h"

#include <cblas.h>

/* Below this many multiply-adds a GEMM runs on one thread. */
#define LINEAR_PARALLEL_MIN (1u << 20)

typedef struct {
  int n, in, out, tasks;
  const float *x, *w, *dy;
  float *y, *dx, *dw;
  float beta;
} linear_job_t;

static void block(int total, int tasks, int t, int *b0, int *b1) {
  *b0 = (int)((long)total * t / tasks);
  *b1 = (int)((long)total * (t + 1) / tasks);
}

static void forward_task(void *vj, int t, int worker) {
  (void)worker;
  const linear_job_t *j = vj;
  int o0, o1;
  block(j->out, j->tasks, t, &o0, &o1);
  if (o1 > o0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, o1 - o0, j->in, 1.0f, j->x,
                j->in, j->w + (size_t)o0 * j->in, j->in, j->beta, j->y + o0, j->out);
}

static void backward_dx_task(void *vj, int t, int worker) {
  (void)worker;
  const linear_job_t *j = vj;
  int i0, i1;
  block(j->in, j->tasks, t, &i0, &i1);
  if (i1 > i0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->n, i1 - i0, j->out, 1.0f, j->dy,
                j->out, j->w + i0, j->in, 1.0f, j->dx + i0, j->in);
}

static void backward_dw_task(void *vj, int t, int worker) {
  (void)worker;
  const linear_job_t *j = vj;
  int o0, o1;
  block(j->out, j->tasks, t, &o0, &o1);
  if (o1 > o0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, j->in, j->n, 1.0f,
                j->dy + o0, j->out, j->x, j->in, 1.0f, j->dw + (size_t)o0 * j->in, j->in);
}

static void linear_run(linear_job_t *j, nn_task_fn fn, int split) {
  size_t macs = (size_t)j->n * j->in * j->out;
  j->tasks = macs < LINEAR_PARALLEL_MIN ? 1 : nn_parallel_workers(split);
  if (j->tasks > 1) {
    nn_blas_single_begin();
    nn_parallel_for(j->tasks, fn, j);
    nn_blas_single_end();
  } else {
    fn(j, 0, 0);
  }
}

static nn_status_t linear_check(int n, int in, int out, const char *what) {
  if (n < 1 || in < 1 || out < 1)
    return nn_set_error(NN_ERR_ARG, "%s: bad shape n=%d in=%d out=%d (all must be >= 1)", what,
                        n, in, out);
  return NN_OK;
}

nn_status_t nn_linear_forward(int n, int in, int out, const float *x, const float *w,
                              const float *b, float *y) {
  nn_status_t st = linear_check(n, in, out, "nn_linear_forward");
  if (st != NN_OK) return st;
  if (!x || !w || !y) return nn_set_error(NN_ERR_ARG, "nn_linear_forward: x, w or y is NULL");
  linear_job_t j = {n, in, out, 1, x, w, NULL, y, NULL, NULL, 0.0f};
  if (b) {
    for (int i = 0; i < n; i++) {
      float *yr = y + (size_t)i * out;
      for (int o = 0; o < out; o++) yr[o] = b[o];
    }
    j.beta = 1.0f;
  }
  linear_run(&j, forward_task, out);
  return NN_OK;
}

nn_status_t nn_linear_backward(int n, int in, int out, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db) {
  nn_status_t st = linear_check(n, in, out, "nn_linear_backward");
  if (st != NN_OK) return st;
  if (!dy || (dx && !w) || (dw && !x))
    return nn_set_error(NN_ERR_ARG, "nn_linear_backward: dy, w (for dx) or x (for dw) is NULL");
  linear_job_t j = {n, in, out, 1, x, w, dy, NULL, dx, dw, 1.0f};
  if (dx) linear_run(&j, backward_dx_task, in);
  if (dw) linear_run(&j, backward_dw_task, out);
  if (db) {
    for (int i = 0; i < n; i++) {
      const float *dr = dy + (size_t)i * out;
      for (int o = 0; o < out; o++) db[o] += dr[o];
    }
  }
  return NN_OK;
}
