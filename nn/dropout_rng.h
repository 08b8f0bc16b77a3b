/* nn/dropout_rng.h: dropout's counter-based random stream, the one definition that the
   CPU kernel (nn/dropout.c) and the CUDA kernel (nn/cuda/kernels.cu) both compile, so
   that a model draws the same masks on either device for the same (seed, step).
   Element i of (seed, step) is kept when the top 24 bits of a hash of (key, i), as a
   fraction of 2^24, are at or above p: no generator state, so any step can be replayed
   and any range computed independently (threads, GPU blocks). */
#ifndef NN_DROPOUT_RNG_H
#define NN_DROPOUT_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NN_HOST_DEVICE __host__ __device__
#else
#define NN_HOST_DEVICE
#endif

/* splitmix64's finaliser: a strong 64-bit mix of a counter. */
static inline NN_HOST_DEVICE uint64_t nn_dropout_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The key of one step's mask: computed once per launch, not per element. */
static inline NN_HOST_DEVICE uint64_t nn_dropout_key(uint64_t seed, uint64_t step) {
  return nn_dropout_mix64(seed ^ nn_dropout_mix64(step + 0x9e3779b97f4a7c15ULL));
}

/* p in (0, 1) as a 24-bit threshold (exact for the p a float can hold near 0 and 1). */
static inline NN_HOST_DEVICE uint32_t nn_dropout_threshold(float p) {
  return (uint32_t)((double)p * 16777216.0);
}

/* Whether element i of the mask with this key is kept. */
static inline NN_HOST_DEVICE int nn_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold) {
  return (uint32_t)(nn_dropout_mix64(key + i * 0x9e3779b97f4a7c15ULL) >> 40) >= threshold;
}

#endif /* NN_DROPOUT_RNG_H */
