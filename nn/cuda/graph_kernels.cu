// nn/cuda/graph_kernels.cu: nn's kernels for the layer kinds of imported graphs
// (nn/cuda/graph_cuda_internal.h): LeakyRelu, Sigmoid, Tanh and Clip; the elementwise
// product (same shape, or a per-channel scale as in squeeze-and-excitation); the channel
// concat. The formulas of nn/graph_kernels.c, the CPU reference, with float arithmetic
// whatever the storage type; NCHW or NHWC through at4.
#include "nn/cuda/graph_cuda_internal.h"
#include "nn/cuda/kernel_common.cuh"

#include <math.h>

namespace {

__device__ __forceinline__ float act_f(int act, float alpha, float lo, float hi, float v) {
  switch (act) {
  case NN_ACT_LEAKY_RELU: return v > 0.0f ? v : alpha * v;
  case NN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
  case NN_ACT_TANH: return tanhf(v);
  default: return v < lo ? lo : v > hi ? hi : v;
  }
}

// f'(x) g. Clip passes the gradient strictly inside (lo, hi), as PyTorch's hardtanh.
__device__ __forceinline__ float act_grad(int act, float alpha, float lo, float hi, float v,
                                          float g) {
  float y;
  switch (act) {
  case NN_ACT_LEAKY_RELU: return v > 0.0f ? g : alpha * g;
  case NN_ACT_SIGMOID: y = 1.0f / (1.0f + expf(-v)); return g * y * (1.0f - y);
  case NN_ACT_TANH: y = tanhf(v); return g * (1.0f - y * y);
  default: return v > lo && v < hi ? g : 0.0f;
  }
}

template <typename T>
__global__ void act_fwd(size_t n, int act, float alpha, float lo, float hi, const T *x, T *y) {
  GRID_LOOP(i, n) y[i] = st<T>(act_f(act, alpha, lo, hi, ld(x[i])));
}

template <typename T>
__global__ void act_bwd(size_t n, int act, float alpha, float lo, float hi, const T *x,
                        const T *dy, T *dx, int add) {
  GRID_LOOP(i, n) {
    float g = act_grad(act, alpha, lo, hi, ld(x[i]), ld(dy[i]));
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

// Index of b's value for element i of a (n x c x hw): the same element, or its
// (sample, channel) when b holds one value per channel.
__device__ __forceinline__ size_t mul_b_index(int nhwc, size_t i, int c, int hw, int b_hw) {
  if (b_hw != 1 || hw == 1) return i;
  return i / ((size_t)c * hw) * (size_t)c + (size_t)chan_of(nhwc, i, c, hw);
}

template <typename T>
__global__ void mul_fwd(size_t total, int nhwc, int c, int hw, int b_hw, const T *a,
                        const T *b, T *y) {
  GRID_LOOP(i, total) y[i] = st<T>(ld(a[i]) * ld(b[mul_b_index(nhwc, i, c, hw, b_hw)]));
}

template <typename T>
__global__ void mul_bwd_a(size_t total, int nhwc, int c, int hw, int b_hw, const T *b,
                          const T *dy, T *da, int add) {
  GRID_LOOP(i, total) {
    float g = ld(dy[i]) * ld(b[mul_b_index(nhwc, i, c, hw, b_hw)]);
    da[i] = st<T>(add ? ld(da[i]) + g : g);
  }
}

// db of a b of a's shape: elementwise.
template <typename T>
__global__ void mul_bwd_b_full(size_t total, const T *a, const T *dy, T *db, int add) {
  GRID_LOOP(i, total) {
    float g = ld(dy[i]) * ld(a[i]);
    db[i] = st<T>(add ? ld(db[i]) + g : g);
  }
}

// db of a per-channel b: one warp per (sample, channel) sums dy * a over the positions.
template <typename T>
__global__ void mul_bwd_b_channel(size_t planes, int nhwc, int c, int hw, const T *a,
                                  const T *dy, T *db, int add) {
  const size_t plane = warp_of_grid();
  if (plane >= planes) return;
  float s = plane_sum(plane, nhwc, c, hw, [=](size_t k) { return ld(dy[k]) * ld(a[k]); });
  if ((threadIdx.x & 31) == 0) db[plane] = st<T>(add ? ld(db[plane]) + s : s);
}

// Element i of y (n x (ca + cb) x hw) from a or b.
template <typename T>
__global__ void concat_fwd(size_t total, int nhwc, int ca, int cb, int hw, const T *a,
                           const T *b, T *y) {
  const int c = ca + cb;
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)c * hw);
    int ch = chan_of(nhwc, i, c, hw);
    size_t pos = nhwc ? i % ((size_t)c * hw) / (size_t)c : i % (size_t)hw;
    y[i] = ch < ca ? a[at4(nhwc, smp, ch, pos, ca, hw)]
                   : b[at4(nhwc, smp, ch - ca, pos, cb, hw)];
  }
}

// Element i of one part (cp channels, starting at channel c0 of y's c) from dy.
template <typename T>
__global__ void concat_bwd(size_t total, int nhwc, int c, int c0, int cp, int hw, const T *dy,
                           T *dx, int add) {
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)cp * hw);
    int ch = chan_of(nhwc, i, cp, hw);
    size_t pos = nhwc ? i % ((size_t)cp * hw) / (size_t)cp : i % (size_t)hw;
    float g = ld(dy[at4(nhwc, smp, c0 + ch, pos, c, hw)]);
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

}  // namespace

extern "C" {

cudaError_t nn_cuk_act_forward(cudaStream_t st, nn_precision_t p, size_t n, int act,
                               float alpha, float lo, float hi, const void *x, void *y) {
  if (n)
    DISPATCH(p, (act_fwd<E><<<blocks_for(n), kThreads, 0, st>>>(n, act, alpha, lo, hi,
                                                                 (const E *)x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_act_backward(cudaStream_t st, nn_precision_t p, size_t n, int act,
                                float alpha, float lo, float hi, const void *x,
                                const void *dy, void *dx, int add) {
  if (n)
    DISPATCH(p, (act_bwd<E><<<blocks_for(n), kThreads, 0, st>>>(
                    n, act, alpha, lo, hi, (const E *)x, (const E *)dy, (E *)dx, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_mul_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, int b_hw, const void *a, const void *b, void *y) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (mul_fwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, nhwc, c, hw, b_hw, (const E *)a, (const E *)b, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_mul_backward_a(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                  int hw, int b_hw, const void *b, const void *dy, void *da,
                                  int add) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (mul_bwd_a<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, nhwc, c, hw, b_hw, (const E *)b, (const E *)dy, (E *)da, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_mul_backward_b(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                  int hw, int b_hw, const void *a, const void *dy, void *db,
                                  int add) {
  size_t total = (size_t)n * c * hw, planes = (size_t)n * c;
  if (!total) return cudaGetLastError();
  if (b_hw != 1 || hw == 1)
    DISPATCH(p, (mul_bwd_b_full<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, (const E *)a, (const E *)dy, (E *)db, add)));
  else
    DISPATCH(p, (mul_bwd_b_channel<E><<<blocks_for(planes * 32), kThreads, 0, st>>>(
                    planes, nhwc, c, hw, (const E *)a, (const E *)dy, (E *)db, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_concat_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int ca,
                                  int cb, int hw, const void *a, const void *b, void *y) {
  size_t total = (size_t)n * (ca + cb) * hw;
  if (total)
    DISPATCH(p, (concat_fwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, nhwc, ca, cb, hw, (const E *)a, (const E *)b, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_concat_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n,
                                   int ca, int cb, int hw, int part, const void *dy,
                                   void *dx, int add) {
  const int cp = part ? cb : ca, c0 = part ? ca : 0;
  size_t total = (size_t)n * cp * hw;
  if (total)
    DISPATCH(p, (concat_bwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, nhwc, ca + cb, c0, cp, hw, (const E *)dy, (E *)dx, add)));
  return cudaGetLastError();
}

}  // extern "C"
