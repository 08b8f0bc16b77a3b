/* nn/dropout.c: inverted dropout with a counter-based random stream (CPU reference).
   Element i of (seed, step) keeps its value when a hash of (seed, step, i) falls at or
   above p: no generator state, so any step can be replayed, any range computed
   independently (threads, or a GPU backend drawing the same mask). */
#include "nn/nn.h"

/* splitmix64's finaliser: a strong 64-bit mix of a counter. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void nn_dropout_forward(size_t count, float p, uint64_t seed, uint64_t step, const float *x,
                        float *y, uint8_t *mask) {
  if (!(p > 0.0f)) {  /* p <= 0 (or NaN): keep everything */
    for (size_t i = 0; i < count; i++) {
      y[i] = x[i];
      mask[i] = 1;
    }
    return;
  }
  if (p >= 1.0f) {
    for (size_t i = 0; i < count; i++) {
      y[i] = 0.0f;
      mask[i] = 0;
    }
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  /* Keep when the top 24 bits, as a fraction of 2^24, are >= p. */
  const uint32_t threshold = (uint32_t)((double)p * 16777216.0);
  const uint64_t key = mix64(seed ^ mix64(step + 0x9e3779b97f4a7c15ULL));
  for (size_t i = 0; i < count; i++) {
    uint32_t r = (uint32_t)(mix64(key + i * 0x9e3779b97f4a7c15ULL) >> 40);
    uint8_t keep = r >= threshold;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

void nn_dropout_backward(size_t count, float p, const uint8_t *mask, const float *dy,
                         float *dx) {
  if (p >= 1.0f) return;  /* everything dropped: no gradient */
  const float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
  for (size_t i = 0; i < count; i++) dx[i] += mask[i] ? dy[i] * scale : 0.0f;
}
