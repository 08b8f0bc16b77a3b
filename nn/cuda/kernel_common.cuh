// nn/cuda/kernel_common.cuh: what nn's CUDA kernel files share (kernels.cu,
// graph_kernels.cu): the launch shape, the grid-stride loop, loads and stores in float
// whatever the storage type, offsets in NCHW or NHWC, warp sums over a channel's plane,
// and the dispatch of a template kernel on the precision. Internal linkage: each kernel file gets its own copy.
#ifndef NN_CUDA_KERNEL_COMMON_CUH
#define NN_CUDA_KERNEL_COMMON_CUH

#include "nn/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Loads and stores in float, whatever the storage type.
__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---- layouts: activations are NCHW, or NHWC (channels last) when nhwc ----

// Offset of (sample s, channel ch, position p) among n x c x hw elements.
__device__ __forceinline__ size_t at4(int nhwc, size_t s, int ch, size_t p, int c, int hw) {
  return nhwc ? (s * (size_t)hw + p) * (size_t)c + (size_t)ch
              : (s * (size_t)c + (size_t)ch) * (size_t)hw + p;
}

// Channel of flat offset i.
__device__ __forceinline__ int chan_of(int nhwc, size_t i, int c, int hw) {
  return (int)(nhwc ? i % (size_t)c : (i / (size_t)hw) % (size_t)c);
}

// ---- warp reductions ----

// This thread's warp among the grid's (warps of 32 threads, blockDim a multiple of 32).
__device__ __forceinline__ size_t warp_of_grid() {
  return (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
}

// The sum of v over the warp's 32 lanes, in lane 0 (the others hold partial sums).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// One warp per (sample, channel) plane of n x c x hw elements: the sum of term(k) over
// the plane's positions, k the element's offset (either layout), in lane 0.
template <typename Term>
__device__ __forceinline__ float plane_sum(size_t plane, int nhwc, int c, int hw, Term term) {
  const size_t smp = plane / (size_t)c;
  const int ch = (int)(plane % (size_t)c);
  float s = 0.0f;
  for (int j = threadIdx.x & 31; j < hw; j += 32) s += term(at4(nhwc, smp, ch, (size_t)j, c, hw));
  return warp_sum(s);
}

}  // namespace

// Launches KERNEL<T> with T the element type of precision P; pointer arguments are cast
// inside ARGS with the macro E (the element type).
#define DISPATCH(P, LAUNCH)                                                   \
  do {                                                                       \
    switch (P) {                                                             \
    case NN_PRECISION_FP16: { typedef __half E; LAUNCH; } break;             \
    case NN_PRECISION_BF16: { typedef __nv_bfloat16 E; LAUNCH; } break;      \
    default: { typedef float E; LAUNCH; } break;                             \
    }                                                                        \
  } while (0)

#endif  // NN_CUDA_KERNEL_COMMON_CUH
