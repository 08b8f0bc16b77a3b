// nn/cuda/kernels.cu: nn's own CUDA kernels (everything cuDNN and cuBLAS do not do):
// relu, add, accumulation, global average pooling, bias, dropout (the CPU kernel's
// counter-based mask, bit for bit), softmax cross-entropy (one block, deterministic sum)
// and the fused SGD/Adam updates over the flat parameter buffer.
#include "nn/cuda/cuda_internal.h"

#include <math.h>

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535u * 32u) b = 65535u * 32u;  // grid-stride loops cover the rest
  return (unsigned)(b ? b : 1);
}

#define GRID_LOOP(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)

__global__ void relu_fwd(size_t n, const float *x, float *y) {
  GRID_LOOP(i, n) { float v = x[i]; y[i] = v > 0.0f ? v : 0.0f; }
}

// In place (dx == dy): mask; otherwise accumulate.
__global__ void relu_bwd(size_t n, const float *y, const float *dy, float *dx, int inplace) {
  GRID_LOOP(i, n) {
    float g = y[i] > 0.0f ? dy[i] : 0.0f;
    dx[i] = inplace ? g : dx[i] + g;
  }
}

__global__ void add_fwd(size_t n, const float *a, const float *b, float *y) {
  GRID_LOOP(i, n) y[i] = a[i] + b[i];
}

__global__ void add_bwd(size_t n, const float *dy, float *da, float *db) {
  GRID_LOOP(i, n) { float g = dy[i]; da[i] += g; db[i] += g; }
}

__global__ void accumulate(size_t n, const float *dy, float *dx) {
  GRID_LOOP(i, n) dx[i] += dy[i];
}

// One warp per (sample, channel) plane.
__global__ void gap_fwd(size_t planes, int hw, const float *x, float *y) {
  size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (warp >= planes) return;
  const float *p = x + warp * (size_t)hw;
  float s = 0.0f;
  for (int j = lane; j < hw; j += 32) s += p[j];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) y[warp] = s / (float)hw;
}

__global__ void gap_bwd(size_t n, int hw, const float *dy, float *dx) {
  GRID_LOOP(i, n) dx[i] += dy[i / (size_t)hw] / (float)hw;
}

__global__ void bias_add(size_t n, int out, const float *b, float *y) {
  GRID_LOOP(i, n) y[i] += b[i % (size_t)out];
}

__global__ void bias_grad(int n, int out, const float *dy, float *db) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= out) return;
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += dy[(size_t)i * out + j];
  db[j] += s;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void dropout_fwd(size_t n, uint32_t threshold, float scale, uint64_t key,
                            const float *x, float *y, uint8_t *mask) {
  GRID_LOOP(i, n) {
    uint32_t r = (uint32_t)(mix64(key + i * 0x9e3779b97f4a7c15ULL) >> 40);
    uint8_t keep = r >= threshold;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

__global__ void dropout_const(size_t n, int keep, const float *x, float *y, uint8_t *mask) {
  GRID_LOOP(i, n) { mask[i] = (uint8_t)keep; y[i] = keep ? x[i] : 0.0f; }
}

__global__ void dropout_bwd(size_t n, float scale, const uint8_t *mask, const float *dy,
                            float *dx) {
  GRID_LOOP(i, n) dx[i] += mask[i] ? dy[i] * scale : 0.0f;
}

// One block: each thread takes rows i = tid, tid + blockDim, ...; per-thread sums are
// combined in a fixed order, so the loss is the same from run to run.
__global__ void softmax_xent(int n, int k, const float *logits, const int32_t *labels,
                             float *loss, int *correct, float *dlogits) {
  __shared__ double part[kThreads];
  __shared__ int right[kThreads];
  double total = 0.0;
  int ok = 0;
  const float inv_n = 1.0f / (float)n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float *z = logits + (size_t)i * k;
    int lab = labels[i];
    if (lab < 0 || lab >= k) {
      total = nan("");
      continue;
    }
    int arg = 0;
    float mx = z[0];
    for (int j = 1; j < k; j++)
      if (z[j] > mx) { mx = z[j]; arg = j; }
    double sum = 0.0;
    for (int j = 0; j < k; j++) sum += exp((double)z[j] - mx);
    double lse = mx + log(sum);
    total += lse - z[lab];
    ok += arg == lab;
    if (dlogits) {
      float *d = dlogits + (size_t)i * k;
      for (int j = 0; j < k; j++) d[j] = (float)exp((double)z[j] - lse) * inv_n;
      d[lab] -= inv_n;
    }
  }
  part[threadIdx.x] = total;
  right[threadIdx.x] = ok;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    int r = 0;
    for (int j = 0; j < (int)blockDim.x; j++) { t += part[j]; r += right[j]; }
    if (loss) *loss = (float)(t / n);
    if (correct) *correct = r;
  }
}

__global__ void sgd(size_t n, float *p, const float *g, float *buf, float lr, float wd,
                    float mom, int nesterov) {
  GRID_LOOP(i, n) {
    float d = g[i] + wd * p[i];
    if (mom == 0.0f) {
      p[i] -= lr * d;
    } else {
      float b = mom * buf[i] + d;
      buf[i] = b;
      p[i] -= lr * (nesterov ? d + mom * b : b);
    }
  }
}

__global__ void adam(size_t n, float *p, const float *g, float *m, float *v,
                     float step_size, float bc2_sqrt, float b1, float b2, float eps,
                     float decay, float l2) {
  GRID_LOOP(i, n) {
    float pi = p[i] * decay;
    float d = g[i] + l2 * pi;
    float mi = b1 * m[i] + (1.0f - b1) * d;
    float vi = b2 * v[i] + (1.0f - b2) * d * d;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * mi / denom;
  }
}

}  // namespace

extern "C" {

cudaError_t nn_cuk_relu_forward(cudaStream_t st, size_t n, const float *x, float *y) {
  if (n) relu_fwd<<<blocks_for(n), kThreads, 0, st>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t nn_cuk_relu_backward(cudaStream_t st, size_t n, const float *y,
                                 const float *dy, float *dx) {
  if (n) relu_bwd<<<blocks_for(n), kThreads, 0, st>>>(n, y, dy, dx, dx == dy);
  return cudaGetLastError();
}

cudaError_t nn_cuk_add_forward(cudaStream_t st, size_t n, const float *a, const float *b,
                               float *y) {
  if (n) add_fwd<<<blocks_for(n), kThreads, 0, st>>>(n, a, b, y);
  return cudaGetLastError();
}

cudaError_t nn_cuk_add_backward(cudaStream_t st, size_t n, const float *dy, float *da,
                                float *db) {
  if (n) add_bwd<<<blocks_for(n), kThreads, 0, st>>>(n, dy, da, db);
  return cudaGetLastError();
}

cudaError_t nn_cuk_accumulate(cudaStream_t st, size_t n, const float *dy, float *dx) {
  if (n) accumulate<<<blocks_for(n), kThreads, 0, st>>>(n, dy, dx);
  return cudaGetLastError();
}

cudaError_t nn_cuk_gap_forward(cudaStream_t st, int n, int c, int hw, const float *x,
                               float *y) {
  size_t planes = (size_t)n * c;
  if (planes) gap_fwd<<<blocks_for(planes * 32), kThreads, 0, st>>>(planes, hw, x, y);
  return cudaGetLastError();
}

cudaError_t nn_cuk_gap_backward(cudaStream_t st, int n, int c, int hw, const float *dy,
                                float *dx) {
  size_t total = (size_t)n * c * hw;
  if (total) gap_bwd<<<blocks_for(total), kThreads, 0, st>>>(total, hw, dy, dx);
  return cudaGetLastError();
}

cudaError_t nn_cuk_bias_add(cudaStream_t st, int n, int out, const float *b, float *y) {
  size_t total = (size_t)n * out;
  if (total) bias_add<<<blocks_for(total), kThreads, 0, st>>>(total, out, b, y);
  return cudaGetLastError();
}

cudaError_t nn_cuk_bias_grad(cudaStream_t st, int n, int out, const float *dy, float *db) {
  if (out > 0) bias_grad<<<blocks_for((size_t)out), kThreads, 0, st>>>(n, out, dy, db);
  return cudaGetLastError();
}

cudaError_t nn_cuk_dropout_forward(cudaStream_t st, size_t n, float p, uint64_t seed,
                                   uint64_t step, const float *x, float *y, uint8_t *mask) {
  if (n == 0) return cudaGetLastError();
  if (!(p > 0.0f) || p >= 1.0f) {
    dropout_const<<<blocks_for(n), kThreads, 0, st>>>(n, !(p > 0.0f), x, y, mask);
    return cudaGetLastError();
  }
  // The same derivation as nn/dropout.c.
  uint64_t z = step + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z = z ^ (z >> 31);
  uint64_t key = seed ^ z;
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ULL;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebULL;
  key = key ^ (key >> 31);
  uint32_t threshold = (uint32_t)((double)p * 16777216.0);
  dropout_fwd<<<blocks_for(n), kThreads, 0, st>>>(n, threshold, 1.0f / (1.0f - p), key, x,
                                                  y, mask);
  return cudaGetLastError();
}

cudaError_t nn_cuk_dropout_backward(cudaStream_t st, size_t n, float p,
                                    const uint8_t *mask, const float *dy, float *dx) {
  if (n == 0 || p >= 1.0f) return cudaGetLastError();
  float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
  dropout_bwd<<<blocks_for(n), kThreads, 0, st>>>(n, scale, mask, dy, dx);
  return cudaGetLastError();
}

cudaError_t nn_cuk_softmax_xent(cudaStream_t st, int n, int k, const float *logits,
                                const int32_t *labels, float *loss, int *correct,
                                float *dlogits) {
  softmax_xent<<<1, kThreads, 0, st>>>(n, k, logits, labels, loss, correct, dlogits);
  return cudaGetLastError();
}

cudaError_t nn_cuk_sgd(cudaStream_t st, size_t n, float *p, const float *g, float *buf,
                       float lr, float wd, float mom, int nesterov) {
  if (n) sgd<<<blocks_for(n), kThreads, 0, st>>>(n, p, g, buf, lr, wd, mom, nesterov);
  return cudaGetLastError();
}

cudaError_t nn_cuk_adam(cudaStream_t st, size_t n, float *p, const float *g, float *m,
                        float *v, float step_size, float bc2_sqrt, float b1, float b2,
                        float eps, float decay, float l2) {
  if (n)
    adam<<<blocks_for(n), kThreads, 0, st>>>(n, p, g, m, v, step_size, bc2_sqrt, b1, b2,
                                             eps, decay, l2);
  return cudaGetLastError();
}

}  // extern "C"
