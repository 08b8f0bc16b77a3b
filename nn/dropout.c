/* nn/dropout.c: inverted dropout (CPU reference) over the counter-based random stream
   of nn/dropout_rng.h, which the CUDA kernel shares, so both draw the same masks. */
#include "nn/dropout_rng.h"   /* the stream, shared with the CUDA kernel */
#include "nn/nn.h"

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
  const uint32_t threshold = nn_dropout_threshold(p);
  const uint64_t key = nn_dropout_key(seed, step);
  for (size_t i = 0; i < count; i++) {
    uint8_t keep = (uint8_t)nn_dropout_keep(key, i, threshold);
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
