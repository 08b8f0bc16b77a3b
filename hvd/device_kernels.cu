// hvd/device_kernels.cu: the float32 <-> float16 casts of gradient compression on the
// GPU (hvd_grad_buckets with HVD_COMPRESSION_FP16 on device gradients), compiled by
// nvcc into libhvd.a when the build has CUDA. hvd/device_cast.c calls the launchers.
//
// Both casts round as the host's (F16C / coll_float_to_half): to nearest, ties to even;
// float16 overflow gives infinity. The division of the cast back is IEEE (div.rn), so a
// device average equals the host's bit for bit.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;   // grid-stride loops cover the rest

unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b > kMaxBlocks ? kMaxBlocks : (b ? b : 1));
}

__global__ void cast_to_half(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

// dst[i] = (float)src[i] / div (div: the rank count of an average, else 1).
__global__ void cast_from_half(float *dst, const uint16_t *src, size_t n, float div) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __fdiv_rn(__half2float(__ushort_as_half(src[i])), div);
}

}  // namespace

extern "C" {

cudaError_t hvd_cuk_cast_to_half(void *stream, uint16_t *dst, const float *src, size_t n) {
  if (n) cast_to_half<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, src, n);
  return cudaGetLastError();
}

cudaError_t hvd_cuk_cast_from_half(void *stream, float *dst, const uint16_t *src, size_t n,
                                   float div) {
  if (n)
    cast_from_half<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, src, n, div);
  return cudaGetLastError();
}

}  // extern "C"
