/* hvd/device_kernels.cu: the float32 <-> float16 casts of gradient compression on the
   GPU (hvd_grad_buckets with HVD_COMPRESSION_FP16 on device gradients).

   NOT compiled into the library by the Makefile. hvd/gen_device_kernels_ptx.sh turns it
   into PTX (compute_75, the oldest target CUDA 13 has) and writes that into
   hvd/device_kernels_ptx.h, which hvd/device_cast.c compiles as a string and loads at
   run time with cudaLibraryLoadData (the driver JIT-compiles it once for the GPU at
   hand). That keeps hvd a set of plain C files that any C compiler builds against the
   CUDA runtime: the Makefile, and scripts/gpu_check.sh, which compiles hvd/*.c with cc
   only. tests/test_hvd_device_kernels.sh checks that the header is current (the hash of
   this file) and that its PTX assembles for sm_80 and sm_90.

   Both casts round as the host's (F16C / coll_float_to_half): to nearest, ties to even;
   float16 overflow gives infinity. The division of the cast back is IEEE (div.rn), so a
   device average equals the host's bit for bit. */
#include <cuda_fp16.h>

/* dst[i] = (half)src[i], i < n (grid-stride loop: any grid size covers any n). */
extern "C" __global__ void hvd_cast_f32_to_f16(unsigned short *dst, const float *src,
                                               unsigned long long n) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < n; i += stride)
    dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

/* dst[i] = (float)src[i] / div, i < n (div: the rank count of an average, else 1). */
extern "C" __global__ void hvd_cast_f16_to_f32(float *dst, const unsigned short *src,
                                               unsigned long long n, float div) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < n; i += stride)
    dst[i] = __fdiv_rn(__half2float(__ushort_as_half(src[i])), div);
}
