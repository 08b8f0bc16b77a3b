/* tests/fuzz/fuzz_image.c: data/'s image decoding on arbitrary bytes: the header check
   (data_image_info), the decode (TurboJPEG or libpng) as 3 and 1 channels at full size
   and at the smallest DCT scale that keeps 16 x 16, and a 24 x 24 resample of a random
   crop of the result. Seeds: tests/fuzz/corpus/fuzz_image (small JPEGs: RGB, grey,
   CMYK, progressive; PNGs: 8- and 16-bit, grey, palette, alpha, interlaced). */
#include "tests/fuzz/fuzz.h"

#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512];
  data_image_info_t info;
  if (data_image_info(data, size, &info, err, sizeof err) != 0) return 0;
  data_pixels_t px = {0};
  static const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
  float *out = malloc(sizeof(float) * 3 * 24 * 24);
  if (!out) abort();
  for (int k = 0; k < 4; k++) {
    int ch = k & 1 ? 1 : 3, min = k & 2 ? 16 : 0;
    if (data_image_decode(data, size, ch, min, min, &px, err, sizeof err) != 0) continue;
    data_rng_t r;
    data_rng_init(&r, size, (uint64_t)k);
    data_box_t b = data_random_resized_crop(px.width, px.height, 0.08, 1, 0.75, 4.0 / 3, &r);
    if (data_resample(&px, b, 24, 24, k & 1, mean, std, k >> 1, out) != 0) abort();
  }
  /* The region decoder (libjpeg's API) on a random crop of the stored image, then the
     resample of the crop from the region, as the pipeline does. */
  data_rng_t r;
  data_rng_init(&r, size, 9);
  data_box_t b = data_random_resized_crop(info.width, info.height, 0.08, 1, 0.75, 4.0 / 3, &r);
  if (data_image_decode_box(data, size, 3, b.x, b.y, b.w, b.h, 24, 24, &px, err, sizeof err) == 0) {
    double fx = (double)px.full_width / info.width, fy = (double)px.full_height / info.height;
    data_box_t rb = {b.x * fx - px.x0, b.y * fy - px.y0, b.w * fx, b.h * fy};
    if (data_resample(&px, rb, 24, 24, 0, mean, std, 0, out) != 0) abort();
  }
  free(out);
  data_pixels_free(&px);
  return 0;
}
