// nn/cuda/kernels.cu: nn's own CUDA kernels (everything cuDNN and cuBLAS do not do):
// relu, add, accumulation, global average pooling, bias, dropout (the CPU kernel's
// counter-based mask, bit for bit), softmax cross-entropy (one block, deterministic sum),
// the fused SGD/Adam updates over the flat parameter buffer, and the mixed-precision
// helpers (casts, gradient unscaling with an inf/NaN check, the loss-scale update).
//
// Activation kernels are templates over the element type: float, __half or
// __nv_bfloat16 (NN_PRECISION_FP32/FP16/BF16). Arithmetic is done in float whatever
// the storage type, so a half kernel rounds once per stored value.
#include "nn/cuda/cuda_internal.h"
#include "nn/cuda/kernel_common.cuh"
#include "nn/dropout_rng.h"

#include <math.h>

namespace {

template <typename T> __global__ void relu_fwd(size_t n, const T *x, T *y) {
  GRID_LOOP(i, n) { float v = ld(x[i]); y[i] = st<T>(v > 0.0f ? v : 0.0f); }
}

// Backward kernels add into dx when add is set and store otherwise (the first writer of
// a gradient in the model walk stores: it need not be zeroed, nor read back).
// Relu in place (dx == dy) masks, which is storing.
template <typename T>
__global__ void relu_bwd(size_t n, const T *y, const T *dy, T *dx, int add) {
  GRID_LOOP(i, n) {
    float g = ld(y[i]) > 0.0f ? ld(dy[i]) : 0.0f;
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

template <typename T> __global__ void add_fwd(size_t n, const T *a, const T *b, T *y) {
  GRID_LOOP(i, n) y[i] = st<T>(ld(a[i]) + ld(b[i]));
}

// da may be db (y = x + x): da is written before db is read, by the same thread.
template <typename T>
__global__ void add_bwd(size_t n, const T *dy, T *da, int a_add, T *db, int b_add) {
  GRID_LOOP(i, n) {
    float g = ld(dy[i]);
    da[i] = st<T>(a_add ? ld(da[i]) + g : g);
    db[i] = st<T>(b_add ? ld(db[i]) + g : g);
  }
}

template <typename T> __global__ void accumulate(size_t n, const T *dy, T *dx, int add) {
  GRID_LOOP(i, n) dx[i] = add ? st<T>(ld(dx[i]) + ld(dy[i])) : dy[i];
}

// One warp per (sample, channel): y[s][ch] = mean over positions (same in both layouts).
template <typename T>
__global__ void gap_fwd(size_t planes, int c, int hw, int nhwc, const T *x, T *y) {
  const size_t plane = warp_of_grid();
  if (plane >= planes) return;
  float s = plane_sum(plane, nhwc, c, hw, [=](size_t k) { return ld(x[k]); });
  if ((threadIdx.x & 31) == 0) y[plane] = st<T>(s / (float)hw);
}

template <typename T>
__global__ void gap_bwd(size_t n, int c, int hw, int nhwc, const T *dy, T *dx, int add) {
  GRID_LOOP(i, n) {
    size_t smp = i / ((size_t)c * hw);
    int ch = chan_of(nhwc, i, c, hw);
    float g = ld(dy[smp * (size_t)c + (size_t)ch]) / (float)hw;
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

// y (NHWC, type T) = x (NCHW, float): the input batch, and conv weights K x C x R x S
// into K x R x S x C (the same permutation with n = K, hw = R * S).
template <typename T>
__global__ void float_to_nhwc(size_t total, int c, int hw, const float *x, T *y) {
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)c * hw), r = i % ((size_t)c * hw);
    size_t p = r / (size_t)c;
    int ch = (int)(r % (size_t)c);
    y[i] = st<T>(x[at4(0, smp, ch, p, c, hw)]);
  }
}

// y (NCHW, float) = x (NHWC, type T): conv weight gradients back to K x C x R x S.
template <typename T>
__global__ void nhwc_to_float(size_t total, int c, int hw, const T *x, float *y) {
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)c * hw), p = i % (size_t)hw;
    int ch = (int)((i / (size_t)hw) % (size_t)c);
    y[i] = ld(x[at4(1, smp, ch, p, c, hw)]);
  }
}

// Flatten of NHWC activations into PyTorch's (NCHW) feature order: y = x permuted, and
// backward dx (NHWC) += dy (NCHW) permuted back (or dx = ..., add 0).
template <typename T>
__global__ void nhwc_to_nchw(size_t total, int c, int hw, const T *x, T *y) {
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)c * hw), p = i % (size_t)hw;
    int ch = (int)((i / (size_t)hw) % (size_t)c);
    y[i] = x[at4(1, smp, ch, p, c, hw)];
  }
}

template <typename T>
__global__ void nchw_to_nhwc_acc(size_t total, int c, int hw, const T *dy, T *dx, int add) {
  GRID_LOOP(i, total) {
    size_t smp = i / ((size_t)c * hw), r = i % ((size_t)c * hw);
    size_t p = r / (size_t)c;
    int ch = (int)(r % (size_t)c);
    const T g = dy[at4(0, smp, ch, p, c, hw)];
    dx[i] = add ? st<T>(ld(dx[i]) + ld(g)) : g;
  }
}

template <typename T> __global__ void bias_add(size_t n, int out, const T *b, T *y) {
  GRID_LOOP(i, n) y[i] = st<T>(ld(y[i]) + ld(b[i % (size_t)out]));
}

template <typename T> __global__ void bias_grad(int n, int out, const T *dy, T *db) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= out) return;
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += ld(dy[(size_t)i * out + j]);
  db[j] = st<T>(ld(db[j]) + s);
}

// Convolution bias: y[s][ch][p] += b[ch].
template <typename T>
__global__ void channel_bias_add(size_t n, int c, int hw, int nhwc, const T *b, T *y) {
  GRID_LOOP(i, n) y[i] = st<T>(ld(y[i]) + ld(b[chan_of(nhwc, i, c, hw)]));
}

// One block per channel: db[c] += sum over samples and positions of dy[s][c][p], summed
// in float in a fixed order (deterministic).
template <typename T>
__global__ void channel_bias_grad(int n, int c, int hw, int nhwc, const T *dy, T *db) {
  __shared__ float part[kThreads];
  const int ch = blockIdx.x;
  const size_t total = (size_t)n * hw;
  float s = 0.0f;
  for (size_t j = threadIdx.x; j < total; j += blockDim.x) {
    s += ld(dy[at4(nhwc, j / (size_t)hw, ch, j % (size_t)hw, c, hw)]);
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[ch] = st<T>(ld(db[ch]) + part[0]);
}

// ---- batch norm (NCHW or NHWC), nn's own kernels: used where cuDNN refuses a data type (its
// legacy batch norm and bfloat16), or everywhere with NN_CUDA_BN=native. One block per
// channel reduces in float32 with a fixed order (deterministic) and then applies, so
// the channel's data is read twice (three times in training). Formulas as the CPU's
// (nn/batchnorm2d.c). ----

// Sum of v over the block; every thread gets it. part: blockDim.x / 32 floats.
__device__ float block_sum(float v, float *part) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();   // part may still be read by the previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += part[w];
  return t;
}

// Element j of channel ch over (n, hw): sample j / hw, position j % hw.
__device__ __forceinline__ size_t bn_index(int nhwc, size_t j, int ch, int c, int hw) {
  return at4(nhwc, j / (size_t)hw, ch, j % (size_t)hw, c, hw);
}

template <typename T>
__global__ void bn_train(int n, int c, int hw, int nhwc, float eps, float momentum, const T *x,
                         const float *gamma, const float *beta, float *running_mean,
                         float *running_var, T *y, float *save_mean, float *save_invstd) {
  __shared__ float part[kThreads / 32];
  const int ch = blockIdx.x;
  const size_t m = (size_t)n * hw;
  float s = 0.0f;
  for (size_t j = threadIdx.x; j < m; j += blockDim.x) s += ld(x[bn_index(nhwc, j, ch, c, hw)]);
  const float mean = block_sum(s, part) / (float)m;
  float q = 0.0f;
  for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
    float d = ld(x[bn_index(nhwc, j, ch, c, hw)]) - mean;
    q += d * d;
  }
  const float var = block_sum(q, part) / (float)m;
  const float invstd = 1.0f / sqrtf(var + eps);
  const float a = gamma[ch] * invstd, b = beta[ch] - mean * a;
  for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
    size_t i = bn_index(nhwc, j, ch, c, hw);
    y[i] = st<T>(ld(x[i]) * a + b);
  }
  if (threadIdx.x == 0) {
    save_mean[ch] = mean;
    save_invstd[ch] = invstd;
    running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * mean;
    const float unbiased = m > 1 ? var * (float)m / (float)(m - 1) : var;
    running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * unbiased;
  }
}

template <typename T>
__global__ void bn_infer(size_t total, int c, int hw, int nhwc, float eps, const T *x,
                         const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, T *y) {
  GRID_LOOP(i, total) {
    const int ch = chan_of(nhwc, i, c, hw);
    const float a = gamma[ch] / sqrtf(running_var[ch] + eps);
    y[i] = st<T>((ld(x[i]) - running_mean[ch]) * a + beta[ch]);
  }
}

// dgamma += sum(dy xhat), dbeta += sum(dy),
// dx += gamma invstd (dy - sum(dy) / m - xhat sum(dy xhat) / m) (dx = ..., add 0).
template <typename T>
__global__ void bn_backward(int n, int c, int hw, int nhwc, const T *x, const float *gamma,
                            const float *save_mean, const float *save_invstd, const T *dy,
                            T *dx, int add, float *dgamma, float *dbeta) {
  __shared__ float part[kThreads / 32];
  const int ch = blockIdx.x;
  const size_t m = (size_t)n * hw;
  const float mean = save_mean[ch], invstd = save_invstd[ch];
  float sdy = 0.0f, sdyx = 0.0f;
  for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
    size_t i = bn_index(nhwc, j, ch, c, hw);
    float g = ld(dy[i]);
    sdy += g;
    sdyx += g * (ld(x[i]) - mean) * invstd;
  }
  sdy = block_sum(sdy, part);
  sdyx = block_sum(sdyx, part);
  const float k = gamma[ch] * invstd, inv_m = 1.0f / (float)m;
  for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
    size_t i = bn_index(nhwc, j, ch, c, hw);
    float xhat = (ld(x[i]) - mean) * invstd;
    const float g = k * (ld(dy[i]) - sdy * inv_m - xhat * sdyx * inv_m);
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
  if (threadIdx.x == 0) {
    dgamma[ch] += sdyx;
    dbeta[ch] += sdy;
  }
}


// ---- batch norm over NHWC, channel-vectorised (nn's kernels in channels last) ----
// NHWC is rows of c channels (m = n * hw rows). A block covers kBnCols consecutive
// channels (one per lane: a warp reads a contiguous run of a row) and a chunk of rows
// (kBnRows threads down the rows); each (channel tile, chunk) block writes a partial per
// channel, and a per-channel pass merges the chunks' partials in a fixed order, so the
// result is the same from run to run. Training statistics: Welford per thread, merged
// with Chan's rule (as accurate as the two-pass NCHW kernel, one read of x).
constexpr int kBnCols = 32, kBnRows = 8;

struct Welford { float n, mean, m2; };
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  const float n = a.n + b.n, d = b.mean - a.mean;
  return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
}

// Rows [r0, r1) of chunk blockIdx.y; part: [chunks][c] means and m2s.
template <typename T>
__global__ void bn_nhwc_stats(size_t m, int c, size_t rows_per_chunk, const T *x,
                              float *part_mean, float *part_m2) {
  __shared__ Welford sh[kBnRows][kBnCols];
  const int ch = blockIdx.x * kBnCols + threadIdx.x;
  const size_t r0 = blockIdx.y * rows_per_chunk;
  const size_t r1 = r0 + rows_per_chunk < m ? r0 + rows_per_chunk : m;
  Welford w = {0.0f, 0.0f, 0.0f};
  if (ch < c)
    for (size_t r = r0 + threadIdx.y; r < r1; r += kBnRows) {
      const float v = ld(x[r * (size_t)c + (size_t)ch]);
      w.n += 1.0f;
      const float d = v - w.mean;
      w.mean += d / w.n;
      w.m2 += d * (v - w.mean);
    }
  sh[threadIdx.y][threadIdx.x] = w;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < kBnRows; k++) w = welford_merge(w, sh[k][threadIdx.x]);
    part_mean[blockIdx.y * (size_t)c + (size_t)ch] = w.mean;
    part_m2[blockIdx.y * (size_t)c + (size_t)ch] = w.m2;
  }
}

// One thread per channel: the chunks' partials merged in order; the saved and running
// statistics as bn_train's.
__global__ void bn_nhwc_finish_stats(size_t m, int c, int chunks, size_t rows_per_chunk,
                                     float eps, float momentum, const float *part_mean,
                                     const float *part_m2, float *running_mean,
                                     float *running_var, float *save_mean,
                                     float *save_invstd) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  Welford w = {0.0f, 0.0f, 0.0f};
  for (int k = 0; k < chunks; k++) {
    const size_t r0 = (size_t)k * rows_per_chunk;
    const size_t rows = r0 + rows_per_chunk < m ? rows_per_chunk : m - r0;
    w = welford_merge(w, {(float)rows, part_mean[(size_t)k * c + ch], part_m2[(size_t)k * c + ch]});
  }
  const float var = w.m2 / (float)m;
  save_mean[ch] = w.mean;
  save_invstd[ch] = 1.0f / sqrtf(var + eps);
  running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * w.mean;
  const float unbiased = m > 1 ? var * (float)m / (float)(m - 1) : var;
  running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * unbiased;
}

// y = (x - mean) invstd gamma + beta, elementwise over NHWC.
template <typename T>
__global__ void bn_nhwc_apply(size_t total, int c, const T *x, const float *gamma,
                              const float *beta, const float *mean, const float *invstd,
                              T *y) {
  GRID_LOOP(i, total) {
    const int ch = (int)(i % (size_t)c);
    const float a = gamma[ch] * invstd[ch];
    y[i] = st<T>((ld(x[i]) - mean[ch]) * a + beta[ch]);
  }
}

// Partial sums of dy and dy xhat per (chunk, channel), as bn_nhwc_stats.
template <typename T>
__global__ void bn_nhwc_grad_sums(size_t m, int c, size_t rows_per_chunk, const T *x,
                                  const T *dy, const float *mean, const float *invstd,
                                  float *part_dy, float *part_dyx) {
  __shared__ float sh[2][kBnRows][kBnCols];
  const int ch = blockIdx.x * kBnCols + threadIdx.x;
  const size_t r0 = blockIdx.y * rows_per_chunk;
  const size_t r1 = r0 + rows_per_chunk < m ? r0 + rows_per_chunk : m;
  float sdy = 0.0f, sdyx = 0.0f;
  if (ch < c) {
    const float mu = mean[ch], is = invstd[ch];
    for (size_t r = r0 + threadIdx.y; r < r1; r += kBnRows) {
      const size_t i = r * (size_t)c + (size_t)ch;
      const float g = ld(dy[i]);
      sdy += g;
      sdyx += g * (ld(x[i]) - mu) * is;
    }
  }
  sh[0][threadIdx.y][threadIdx.x] = sdy;
  sh[1][threadIdx.y][threadIdx.x] = sdyx;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < kBnRows; k++) {
      sdy += sh[0][k][threadIdx.x];
      sdyx += sh[1][k][threadIdx.x];
    }
    part_dy[blockIdx.y * (size_t)c + (size_t)ch] = sdy;
    part_dyx[blockIdx.y * (size_t)c + (size_t)ch] = sdyx;
  }
}

// One thread per channel: the chunks' sums in order into sums[0][c] (dy) and
// sums[1][c] (dy xhat); dgamma += sum(dy xhat), dbeta += sum(dy).
__global__ void bn_nhwc_finish_grads(int c, int chunks, const float *part_dy,
                                     const float *part_dyx, float *sums, float *dgamma,
                                     float *dbeta) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sdy = 0.0f, sdyx = 0.0f;
  for (int k = 0; k < chunks; k++) {
    sdy += part_dy[(size_t)k * c + ch];
    sdyx += part_dyx[(size_t)k * c + ch];
  }
  sums[ch] = sdy;
  sums[c + ch] = sdyx;
  dgamma[ch] += sdyx;
  dbeta[ch] += sdy;
}

// dx (+)= gamma invstd (dy - sum(dy) / m - xhat sum(dy xhat) / m), elementwise.
template <typename T>
__global__ void bn_nhwc_dx(size_t total, int c, float inv_m, const T *x, const T *dy,
                           const float *gamma, const float *mean, const float *invstd,
                           const float *sums, T *dx, int add) {
  GRID_LOOP(i, total) {
    const int ch = (int)(i % (size_t)c);
    const float is = invstd[ch], xhat = (ld(x[i]) - mean[ch]) * is;
    const float g = gamma[ch] * is *
                    (ld(dy[i]) - sums[ch] * inv_m - xhat * sums[c + ch] * inv_m);
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

// ---- pooling, nn's kernels (where cuDNN refuses a type), NCHW or NHWC ----
// Max: the first maximum of the window in scan order (rows, then columns), a later NaN
// winning, the CPU's rule (nn/pool2d.c); padding is never chosen. Average counts the
// padded cells (count_include_pad). Backward gathers: each input element sums dy over
// the windows that chose it (max: found again from x), no atomics.
struct PoolShape {
  int n, c, h, w, kh, kw, sh, sw, ph, pw, ho, wo;
};

// The input position (row * w + col) window (oh, ow) of plane (s, ch) chooses, or -1.
template <typename T>
__device__ int pool_argmax(const PoolShape &p, int nhwc, const T *x, size_t s, int ch, int oh,
                           int ow) {
  int best_i = -1;
  float best = 0.0f;
  for (int a = 0; a < p.kh; a++) {
    const int r = oh * p.sh - p.ph + a;
    if (r < 0 || r >= p.h) continue;
    for (int b = 0; b < p.kw; b++) {
      const int q = ow * p.sw - p.pw + b;
      if (q < 0 || q >= p.w) continue;
      const float v = ld(x[at4(nhwc, s, ch, (size_t)r * p.w + q, p.c, p.h * p.w)]);
      if (best_i < 0 || v > best || v != v) {
        best = v;
        best_i = r * p.w + q;
      }
    }
  }
  return best_i;
}

template <typename T>
__global__ void pool_fwd(size_t total, PoolShape p, int nhwc, int max, const T *x, T *y) {
  const int hwo = p.ho * p.wo, hwi = p.h * p.w;
  GRID_LOOP(i, total) {
    const size_t s = i / ((size_t)p.c * hwo);
    const int ch = chan_of(nhwc, i, p.c, hwo);
    const int pos = (int)(nhwc ? (i / (size_t)p.c) % (size_t)hwo : i % (size_t)hwo);
    const int oh = pos / p.wo, ow = pos % p.wo;
    float v = 0.0f;
    if (max) {
      const int a = pool_argmax(p, nhwc, x, s, ch, oh, ow);
      v = a < 0 ? 0.0f : ld(x[at4(nhwc, s, ch, (size_t)a, p.c, hwi)]);
    } else {
      for (int a = 0; a < p.kh; a++) {
        const int r = oh * p.sh - p.ph + a;
        if (r < 0 || r >= p.h) continue;
        for (int b = 0; b < p.kw; b++) {
          const int q = ow * p.sw - p.pw + b;
          if (q >= 0 && q < p.w) v += ld(x[at4(nhwc, s, ch, (size_t)r * p.w + q, p.c, hwi)]);
        }
      }
      v /= (float)(p.kh * p.kw);
    }
    y[i] = st<T>(v);
  }
}

// Output rows (or columns) whose window holds input row r: [lo, hi].
__device__ __forceinline__ void pool_cover(int r, int k, int stride, int pad, int out, int *lo,
                                           int *hi) {
  const int top = r + pad - k + 1;
  *lo = top <= 0 ? 0 : (top + stride - 1) / stride;
  const int h = (r + pad) / stride;
  *hi = h < out - 1 ? h : out - 1;
}

template <typename T>
__global__ void pool_bwd(size_t total, PoolShape p, int nhwc, int max, const T *x,
                         const T *dy, T *dx, int add) {
  const int hwo = p.ho * p.wo, hwi = p.h * p.w;
  GRID_LOOP(i, total) {
    const size_t s = i / ((size_t)p.c * hwi);
    const int ch = chan_of(nhwc, i, p.c, hwi);
    const int pos = (int)(nhwc ? (i / (size_t)p.c) % (size_t)hwi : i % (size_t)hwi);
    const int r = pos / p.w, q = pos % p.w;
    int oh0, oh1, ow0, ow1;
    pool_cover(r, p.kh, p.sh, p.ph, p.ho, &oh0, &oh1);
    pool_cover(q, p.kw, p.sw, p.pw, p.wo, &ow0, &ow1);
    float g = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        if (max && pool_argmax(p, nhwc, x, s, ch, oh, ow) != pos) continue;
        g += ld(dy[at4(nhwc, s, ch, (size_t)oh * p.wo + ow, p.c, hwo)]);
      }
    if (!max) g /= (float)(p.kh * p.kw);
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

template <typename T>
__global__ void dropout_fwd(size_t n, uint32_t threshold, float scale, uint64_t key,
                            const T *x, T *y, uint8_t *mask) {
  GRID_LOOP(i, n) {
    uint8_t keep = (uint8_t)nn_dropout_keep(key, i, threshold);
    mask[i] = keep;
    y[i] = st<T>(keep ? ld(x[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void dropout_const(size_t n, int keep, const T *x, T *y, uint8_t *mask) {
  GRID_LOOP(i, n) { mask[i] = (uint8_t)keep; y[i] = st<T>(keep ? ld(x[i]) : 0.0f); }
}

template <typename T>
__global__ void dropout_bwd(size_t n, float scale, const uint8_t *mask, const T *dy, T *dx,
                            int add) {
  GRID_LOOP(i, n) {
    float g = mask[i] ? ld(dy[i]) * scale : 0.0f;
    dx[i] = st<T>(add ? ld(dx[i]) + g : g);
  }
}

// One block: each thread takes rows i = tid, tid + blockDim, ...; per-thread sums are
// combined in a fixed order, so the loss is the same from run to run. dlogits is the
// gradient of the mean loss times the loss scale (*scale, 1 when scale is NULL).
template <typename T>
__global__ void softmax_xent(int n, int k, const T *logits, const int32_t *labels,
                             float *loss, int *correct, T *dlogits, const float *scale) {
  __shared__ double part[kThreads];
  __shared__ int right[kThreads];
  double total = 0.0;
  int ok = 0;
  const float g = (scale ? *scale : 1.0f) / (float)n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const T *z = logits + (size_t)i * k;
    int lab = labels[i];
    if (lab < 0 || lab >= k) {
      total = nan("");
      continue;
    }
    int arg = 0;
    float mx = ld(z[0]);
    for (int j = 1; j < k; j++)
      if (ld(z[j]) > mx) { mx = ld(z[j]); arg = j; }
    double sum = 0.0;
    for (int j = 0; j < k; j++) sum += exp((double)ld(z[j]) - mx);
    double lse = mx + log(sum);
    total += lse - ld(z[lab]);
    ok += arg == lab;
    if (dlogits) {
      // p * g, less g for the label: the CPU kernel's float operations in its order (and,
      // with scale NULL, this kernel's float32 result from before loss scaling).
      T *d = dlogits + (size_t)i * k;
      for (int j = 0; j < k; j++) {
        float v = (float)exp((double)ld(z[j]) - lse) * g;
        if (j == lab) v -= g;
        d[j] = st<T>(v);
      }
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

template <typename T> __global__ void cast_from_float(size_t n, const float *x, T *y) {
  GRID_LOOP(i, n) y[i] = st<T>(x[i]);
}

template <typename T> __global__ void cast_to_float(size_t n, const T *x, float *y) {
  GRID_LOOP(i, n) y[i] = ld(x[i]);
}

// ---- optimizers: the step's scalars are computed on the device (optim_prepare), so a
// step skipped for inf/NaN gradients leaves the step count, and Adam's bias
// corrections, as they were, without the host ever waiting for the flag. ----

// One thread. skip may be NULL (never skip).
__global__ void optim_prepare(nn_cuda_optim_dev_t *d, const int *skip, int adam, double b1,
                              double b2, float lr) {
  if (skip && *skip) {
    d->skip = 1;
    return;
  }
  d->skip = 0;
  d->step += 1;
  if (adam) {
    double bc1 = 1.0 - pow(b1, (double)d->step);
    double bc2 = 1.0 - pow(b2, (double)d->step);
    d->step_size = (float)((double)lr / bc1);
    d->bc2_sqrt = (float)sqrt(bc2);
  }
}

__global__ void sgd(size_t n, float *p, const float *g, float *buf, float lr, float wd,
                    float mom, int nesterov, const nn_cuda_optim_dev_t *od) {
  if (od->skip) return;
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

__global__ void adam(size_t n, float *p, const float *g, float *m, float *v, float b1,
                     float b2, float eps, float decay, float l2,
                     const nn_cuda_optim_dev_t *od) {
  if (od->skip) return;
  const float step_size = od->step_size, bc2_sqrt = od->bc2_sqrt;
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

// ---- loss scaling (PyTorch's GradScaler rules) ----

// g *= 1 / scale; any non-finite value sets found_inf (every writer writes 1: the race
// is benign).
__global__ void amp_unscale(size_t n, float *g, nn_cuda_amp_t *a) {
  const float inv = 1.0f / a->scale;
  int bad = 0;
  GRID_LOOP(i, n) {
    float v = g[i] * inv;
    g[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) a->found_inf = 1;
}

// x *= factor over float32 values (the gradients of an uneven last batch).
__global__ void scale_floats(size_t n, float *x, float factor) {
  GRID_LOOP(i, n) x[i] *= factor;
}

// One thread, after the optimizer read found_inf: adapt the scale, clear the flag.
__global__ void amp_update(nn_cuda_amp_t *a, float growth, float backoff, int interval,
                           int static_scale) {
  nn_amp_update_rule(a, growth, backoff, interval, static_scale);
}

}  // namespace

extern "C" {

cudaError_t nn_cuk_relu_forward(cudaStream_t st, nn_precision_t p, size_t n, const void *x,
                                void *y) {
  if (n)
    DISPATCH(p, (relu_fwd<E><<<blocks_for(n), kThreads, 0, st>>>(n, (const E *)x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_relu_backward(cudaStream_t st, nn_precision_t p, size_t n, const void *y,
                                 const void *dy, void *dx, int add) {
  if (n)
    DISPATCH(p, (relu_bwd<E><<<blocks_for(n), kThreads, 0, st>>>(
                    n, (const E *)y, (const E *)dy, (E *)dx, add && dx != dy)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_add_forward(cudaStream_t st, nn_precision_t p, size_t n, const void *a,
                               const void *b, void *y) {
  if (n)
    DISPATCH(p, (add_fwd<E><<<blocks_for(n), kThreads, 0, st>>>(n, (const E *)a,
                                                                 (const E *)b, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_add_backward(cudaStream_t st, nn_precision_t p, size_t n, const void *dy,
                                void *da, int a_add, void *db, int b_add) {
  if (n)
    DISPATCH(p, (add_bwd<E><<<blocks_for(n), kThreads, 0, st>>>(n, (const E *)dy, (E *)da,
                                                                 a_add, (E *)db, b_add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_accumulate(cudaStream_t st, nn_precision_t p, size_t n, const void *dy,
                              void *dx, int add) {
  if (n)
    DISPATCH(p, (accumulate<E><<<blocks_for(n), kThreads, 0, st>>>(n, (const E *)dy,
                                                                    (E *)dx, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_gap_forward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, const void *x, void *y) {
  size_t planes = (size_t)n * c;
  if (planes)
    DISPATCH(p, (gap_fwd<E><<<blocks_for(planes * 32), kThreads, 0, st>>>(
                    planes, c, hw, nhwc, (const E *)x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_gap_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                int hw, const void *dy, void *dx, int add) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (gap_bwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, c, hw, nhwc, (const E *)dy, (E *)dx, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bias_add(cudaStream_t st, nn_precision_t p, int n, int out, const void *b,
                            void *y) {
  size_t total = (size_t)n * out;
  if (total)
    DISPATCH(p, (bias_add<E><<<blocks_for(total), kThreads, 0, st>>>(total, out,
                                                                      (const E *)b, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bias_grad(cudaStream_t st, nn_precision_t p, int n, int out,
                             const void *dy, void *db) {
  if (out > 0)
    DISPATCH(p, (bias_grad<E><<<blocks_for((size_t)out), kThreads, 0, st>>>(
                    n, out, (const E *)dy, (E *)db)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_channel_bias_add(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                                    int hw, const void *b, void *y) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (channel_bias_add<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, c, hw, nhwc, (const E *)b, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_channel_bias_grad(cudaStream_t st, nn_precision_t p, int nhwc, int n,
                                     int c, int hw, const void *dy, void *db) {
  if (n > 0 && c > 0 && hw > 0)
    DISPATCH(p, (channel_bias_grad<E><<<(unsigned)c, kThreads, 0, st>>>(
                    n, c, hw, nhwc, (const E *)dy, (E *)db)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bn_train(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c, int hw,
                            float eps, float momentum, const void *x, const float *gamma,
                            const float *beta, float *running_mean, float *running_var,
                            void *y, float *save_mean, float *save_invstd) {
  DISPATCH(p, (bn_train<E><<<(unsigned)c, kThreads, 0, st>>>(
                  n, c, hw, nhwc, eps, momentum, (const E *)x, gamma, beta, running_mean,
                  running_var, (E *)y, save_mean, save_invstd)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bn_infer(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c, int hw,
                            float eps, const void *x, const float *gamma, const float *beta,
                            const float *running_mean, const float *running_var, void *y) {
  size_t total = (size_t)n * c * hw;
  DISPATCH(p, (bn_infer<E><<<blocks_for(total), kThreads, 0, st>>>(
                  total, c, hw, nhwc, eps, (const E *)x, gamma, beta, running_mean, running_var,
                  (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bn_backward(cudaStream_t st, nn_precision_t p, int nhwc, int n, int c,
                               int hw, const void *x, const float *gamma,
                               const float *save_mean, const float *save_invstd,
                               const void *dy, void *dx, int add, float *dgamma,
                               float *dbeta) {
  DISPATCH(p, (bn_backward<E><<<(unsigned)c, kThreads, 0, st>>>(
                  n, c, hw, nhwc, (const E *)x, gamma, save_mean, save_invstd, (const E *)dy,
                  (E *)dx, add, dgamma, dbeta)));
  return cudaGetLastError();
}

// The chunks of m rows for the channel-vectorised NHWC batch norm: enough blocks to fill
// the GPU (about 1024 with the channel tiles), each chunk at least 64 rows.
static void bn_nhwc_chunks(size_t m, int c, int *chunks, size_t *rows) {
  const size_t tiles = ((size_t)c + kBnCols - 1) / kBnCols;
  size_t k = 1024 / tiles;
  const size_t most = (m + 63) / 64;
  if (k > most) k = most;
  if (k < 1) k = 1;
  *rows = (m + k - 1) / k;
  *chunks = (int)((m + *rows - 1) / *rows);
}

size_t nn_cuk_bn_nhwc_workspace(int n, int c, int hw) {
  int chunks;
  size_t rows;
  bn_nhwc_chunks((size_t)n * hw, c, &chunks, &rows);
  return (2 * (size_t)chunks + 2) * (size_t)c * sizeof(float);
}

cudaError_t nn_cuk_bn_nhwc_train(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 float eps, float momentum, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var,
                                 void *y, float *save_mean, float *save_invstd, float *ws) {
  const size_t m = (size_t)n * hw;
  int chunks;
  size_t rows;
  bn_nhwc_chunks(m, c, &chunks, &rows);
  float *pm = ws, *pv = ws + (size_t)chunks * c;
  const dim3 grid((unsigned)((c + kBnCols - 1) / kBnCols), (unsigned)chunks);
  const dim3 block(kBnCols, kBnRows);
  DISPATCH(p, (bn_nhwc_stats<E><<<grid, block, 0, st>>>(m, c, rows, (const E *)x, pm, pv)));
  bn_nhwc_finish_stats<<<(unsigned)((c + kThreads - 1) / kThreads), kThreads, 0, st>>>(
      m, c, chunks, rows, eps, momentum, pm, pv, running_mean, running_var, save_mean,
      save_invstd);
  const size_t total = m * (size_t)c;
  DISPATCH(p, (bn_nhwc_apply<E><<<blocks_for(total), kThreads, 0, st>>>(
                  total, c, (const E *)x, gamma, beta, save_mean, save_invstd, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_bn_nhwc_backward(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                    const void *x, const float *gamma, const float *save_mean,
                                    const float *save_invstd, const void *dy, void *dx,
                                    int add, float *dgamma, float *dbeta, float *ws) {
  const size_t m = (size_t)n * hw;
  int chunks;
  size_t rows;
  bn_nhwc_chunks(m, c, &chunks, &rows);
  float *pdy = ws, *pdyx = ws + (size_t)chunks * c, *sums = ws + 2 * (size_t)chunks * c;
  const dim3 grid((unsigned)((c + kBnCols - 1) / kBnCols), (unsigned)chunks);
  const dim3 block(kBnCols, kBnRows);
  DISPATCH(p, (bn_nhwc_grad_sums<E><<<grid, block, 0, st>>>(
                  m, c, rows, (const E *)x, (const E *)dy, save_mean, save_invstd, pdy, pdyx)));
  bn_nhwc_finish_grads<<<(unsigned)((c + kThreads - 1) / kThreads), kThreads, 0, st>>>(
      c, chunks, pdy, pdyx, sums, dgamma, dbeta);
  const size_t total = m * (size_t)c;
  DISPATCH(p, (bn_nhwc_dx<E><<<blocks_for(total), kThreads, 0, st>>>(
                  total, c, 1.0f / (float)m, (const E *)x, (const E *)dy, gamma, save_mean,
                  save_invstd, sums, (E *)dx, add)));
  return cudaGetLastError();
}

static PoolShape pool_shape(const nn_pool2d_shape_t *s) {
  return {s->n, s->c, s->h_in, s->w_in, s->kh, s->kw, s->stride_h, s->stride_w,
          s->pad_h, s->pad_w, s->h_out, s->w_out};
}

cudaError_t nn_cuk_pool_forward(cudaStream_t st, nn_precision_t p, int nhwc, int max,
                                const nn_pool2d_shape_t *s, const void *x, void *y) {
  const size_t total = (size_t)s->n * s->c * s->h_out * s->w_out;
  if (total)
    DISPATCH(p, (pool_fwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, pool_shape(s), nhwc, max, (const E *)x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_pool_backward(cudaStream_t st, nn_precision_t p, int nhwc, int max,
                                 const nn_pool2d_shape_t *s, const void *x, const void *dy,
                                 void *dx, int add) {
  const size_t total = (size_t)s->n * s->c * s->h_in * s->w_in;
  if (total)
    DISPATCH(p, (pool_bwd<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, pool_shape(s), nhwc, max, (const E *)x, (const E *)dy, (E *)dx,
                    add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_float_to_nhwc(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 const float *x, void *y) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (float_to_nhwc<E><<<blocks_for(total), kThreads, 0, st>>>(total, c, hw, x,
                                                                            (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_nhwc_to_float(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                 const void *x, float *y) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (nhwc_to_float<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, c, hw, (const E *)x, y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_nhwc_to_nchw(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                const void *x, void *y) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (nhwc_to_nchw<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, c, hw, (const E *)x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_nchw_to_nhwc_acc(cudaStream_t st, nn_precision_t p, int n, int c, int hw,
                                    const void *dy, void *dx, int add) {
  size_t total = (size_t)n * c * hw;
  if (total)
    DISPATCH(p, (nchw_to_nhwc_acc<E><<<blocks_for(total), kThreads, 0, st>>>(
                    total, c, hw, (const E *)dy, (E *)dx, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_dropout_forward(cudaStream_t st, nn_precision_t prec, size_t n, float p,
                                   uint64_t seed, uint64_t step, const void *x, void *y,
                                   uint8_t *mask) {
  if (n == 0) return cudaGetLastError();
  if (!(p > 0.0f) || p >= 1.0f) {
    DISPATCH(prec, (dropout_const<E><<<blocks_for(n), kThreads, 0, st>>>(
                       n, !(p > 0.0f), (const E *)x, (E *)y, mask)));
    return cudaGetLastError();
  }
  // nn/dropout_rng.h: the stream the CPU kernel draws from.
  const uint64_t key = nn_dropout_key(seed, step);
  const uint32_t threshold = nn_dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  DISPATCH(prec, (dropout_fwd<E><<<blocks_for(n), kThreads, 0, st>>>(
                     n, threshold, scale, key, (const E *)x, (E *)y, mask)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_dropout_backward(cudaStream_t st, nn_precision_t prec, size_t n, float p,
                                    const uint8_t *mask, const void *dy, void *dx, int add) {
  if (n == 0) return cudaGetLastError();
  if (p >= 1.0f) {  // nothing kept: dx += 0, or dx = 0
    if (!add) return cudaMemsetAsync(dx, 0, n * nn_cuda_elem_size(prec), st);
    return cudaGetLastError();
  }
  float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
  DISPATCH(prec, (dropout_bwd<E><<<blocks_for(n), kThreads, 0, st>>>(
                     n, scale, mask, (const E *)dy, (E *)dx, add)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_softmax_xent(cudaStream_t st, nn_precision_t p, int n, int k,
                                const void *logits, const int32_t *labels, float *loss,
                                int *correct, void *dlogits, const float *scale) {
  DISPATCH(p, (softmax_xent<E><<<1, kThreads, 0, st>>>(n, k, (const E *)logits, labels, loss,
                                                      correct, (E *)dlogits, scale)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_cast_from_float(cudaStream_t st, nn_precision_t p, size_t n,
                                   const float *x, void *y) {
  if (n)
    DISPATCH(p, (cast_from_float<E><<<blocks_for(n), kThreads, 0, st>>>(n, x, (E *)y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_cast_to_float(cudaStream_t st, nn_precision_t p, size_t n, const void *x,
                                 float *y) {
  if (n)
    DISPATCH(p, (cast_to_float<E><<<blocks_for(n), kThreads, 0, st>>>(n, (const E *)x, y)));
  return cudaGetLastError();
}

cudaError_t nn_cuk_optim_prepare(cudaStream_t st, nn_cuda_optim_dev_t *d, const int *skip,
                                 int adam, double b1, double b2, float lr) {
  optim_prepare<<<1, 1, 0, st>>>(d, skip, adam, b1, b2, lr);
  return cudaGetLastError();
}

cudaError_t nn_cuk_sgd(cudaStream_t st, size_t n, float *p, const float *g, float *buf,
                       float lr, float wd, float mom, int nesterov,
                       const nn_cuda_optim_dev_t *od) {
  if (n) sgd<<<blocks_for(n), kThreads, 0, st>>>(n, p, g, buf, lr, wd, mom, nesterov, od);
  return cudaGetLastError();
}

cudaError_t nn_cuk_adam(cudaStream_t st, size_t n, float *p, const float *g, float *m,
                        float *v, float b1, float b2, float eps, float decay, float l2,
                        const nn_cuda_optim_dev_t *od) {
  if (n)
    adam<<<blocks_for(n), kThreads, 0, st>>>(n, p, g, m, v, b1, b2, eps, decay, l2, od);
  return cudaGetLastError();
}

cudaError_t nn_cuk_amp_unscale(cudaStream_t st, size_t n, float *g, nn_cuda_amp_t *a) {
  if (n) amp_unscale<<<blocks_for(n), kThreads, 0, st>>>(n, g, a);
  return cudaGetLastError();
}

cudaError_t nn_cuk_scale(cudaStream_t st, size_t n, float *x, float factor) {
  if (n) scale_floats<<<blocks_for(n), kThreads, 0, st>>>(n, x, factor);
  return cudaGetLastError();
}

cudaError_t nn_cuk_amp_update(cudaStream_t st, nn_cuda_amp_t *a, float growth, float backoff,
                              int interval, int static_scale) {
  amp_update<<<1, 1, 0, st>>>(a, growth, backoff, interval, static_scale);
  return cudaGetLastError();
}

}  // extern "C"
