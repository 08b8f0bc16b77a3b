/* nn/linear.c: fully connected layer y = x W^T + b (CPU reference), three GEMMs:
     forward   y[n][out]   = x[n][in] W[out][in]^T (+ b)
     backward  dx[n][in]  += dy[n][out] W[out][in]
               dW[out][in] += dy^T x;   db += column sums of dy
   OpenBLAS threads these GEMMs itself (nn_threads() threads). */
#include "nn/nn.h"

#include <cblas.h>

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
  float beta = 0;
  if (b) {
    for (int i = 0; i < n; i++) {
      float *yr = y + (size_t)i * out;
      for (int o = 0; o < out; o++) yr[o] = b[o];
    }
    beta = 1;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, beta, y,
              out);
  return NN_OK;
}

nn_status_t nn_linear_backward(int n, int in, int out, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db) {
  nn_status_t st = linear_check(n, in, out, "nn_linear_backward");
  if (st != NN_OK) return st;
  if (!dy || (dx && !w) || (dw && !x))
    return nn_set_error(NN_ERR_ARG, "nn_linear_backward: dy, w (for dx) or x (for dw) is NULL");
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                1.0f, dx, in);
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f,
                dw, in);
  if (db) {
    for (int i = 0; i < n; i++) {
      const float *dr = dy + (size_t)i * out;
      for (int o = 0; o < out; o++) db[o] += dr[o];
    }
  }
  return NN_OK;
}
