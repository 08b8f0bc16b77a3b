/* nn/simd_internal.h: 4-float vectors (GCC/Clang vector extensions) for the memory-bound
   loops: with the portable x86-64 baseline they compile to SSE2, and GCC does not
   auto-vectorise these loops at -O2 (float reductions, selects). Internal to nn. */
#ifndef NN_SIMD_INTERNAL_H
#define NN_SIMD_INTERNAL_H

#include <stdint.h>

typedef float nn_v4f __attribute__((vector_size(16)));
typedef int32_t nn_v4i __attribute__((vector_size(16)));

/* Unaligned load and store (memcpy of 16 bytes compiles to one movups). */
static inline nn_v4f nn_v4_load(const float *p) {
  nn_v4f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline void nn_v4_store(float *p, nn_v4f v) { __builtin_memcpy(p, &v, sizeof v); }
static inline nn_v4f nn_v4_set1(float x) { return (nn_v4f){x, x, x, x}; }
static inline float nn_v4_sum(nn_v4f v) { return (v[0] + v[2]) + (v[1] + v[3]); }
/* Keeps v where mask lanes are all ones, else +0.0f. */
static inline nn_v4f nn_v4_and(nn_v4f v, nn_v4i mask) { return (nn_v4f)((nn_v4i)v & mask); }

/* Even and odd lanes of the 8 floats a, b: {a0 a2 b0 b2}, {a1 a3 b1 b3}. */
#if defined(__clang__)
#define NN_V4_EVENS(a, b) __builtin_shufflevector((a), (b), 0, 2, 4, 6)
#define NN_V4_ODDS(a, b) __builtin_shufflevector((a), (b), 1, 3, 5, 7)
#else
#define NN_V4_EVENS(a, b) __builtin_shuffle((a), (b), (nn_v4i){0, 2, 4, 6})
#define NN_V4_ODDS(a, b) __builtin_shuffle((a), (b), (nn_v4i){1, 3, 5, 7})
#endif

/* Lanes of a where mask is all ones, else lanes of b. */
static inline nn_v4f nn_v4_select(nn_v4i mask, nn_v4f a, nn_v4f b) {
  return (nn_v4f)((mask & (nn_v4i)a) | (~mask & (nn_v4i)b));
}
static inline nn_v4i nn_v4i_select(nn_v4i mask, nn_v4i a, nn_v4i b) {
  return (mask & a) | (~mask & b);
}

/* Run-time choice of the wider kernels (nn/conv_direct.c): 3 AVX-512F + FMA, 2 AVX2 + FMA,
   0 neither, as the CPU allows but at most nn_simd_limit (default 3; tests lower it to
   reach the AVX2 and portable paths on an AVX-512 machine). */
extern int nn_simd_limit;
int nn_simd_level(void);
/* 1 on a CPU that runs each 512-bit instruction as two 256-bit halves (AMD Zen 4), where
   AVX-512 code gains width but not throughput over AVX2. */
int nn_cpu_avx512_half_width(void);

#endif
