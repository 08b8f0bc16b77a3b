/* serve/image_input.c: JPEG/PNG bytes -> a normalised model input (see image_input.h). */
#include "serve/image_input.h"

#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

/* serve_fail's twin: instances.c calls this file, so this file does not call it back. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* JPEG or PNG -> pixels[h][w][c] (c 1: grey, 3: RGB) at full size, with data/'s decoder
   (train's and cnn_bench's: TurboJPEG and libpng, grey/CMYK/palette/alpha/16-bit
   converted, progressive JPEGs of more than 500 scans refused, a damaged JPEG refused as
   PIL would). The header's size is checked first against serve's own, lower limit. */
static int decode(const uint8_t *b, size_t len, int c, data_pixels_t *px, char *err,
                  size_t errlen) {
  data_image_info_t info;
  if (data_image_info(b, len, &info, err, errlen) != 0) return -1;
  if ((size_t)info.width * (size_t)info.height > SERVE_IMAGE_MAX_PIXELS)
    return fail(err, errlen, "a %s image of %dx%d: at most %u pixels",
                info.is_jpeg ? "JPEG" : "PNG", info.width, info.height, SERVE_IMAGE_MAX_PIXELS);
  return data_image_decode(b, len, c, 0, 0, px, err, errlen);
}

/* Pixel (x, y) of channel ch, as a value 0..255 on the model's grid: the image's own
   pixel when the sizes agree, else bilinear between the four nearest (centres aligned). */
static double sample(const uint8_t *px, int w, int h, int c, int ch, int x, int y, int ow, int oh) {
  if (w == ow && h == oh) return px[((size_t)y * w + x) * c + ch];
  double fx = (x + 0.5) * w / ow - 0.5, fy = (y + 0.5) * h / oh - 0.5;
  if (fx < 0) fx = 0;
  if (fy < 0) fy = 0;
  int x0 = (int)fx, y0 = (int)fy;
  int x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
  double ax = fx - x0, ay = fy - y0;
#define P(xx, yy) ((double)px[((size_t)(yy) * w + (xx)) * c + ch])
  return (1 - ay) * ((1 - ax) * P(x0, y0) + ax * P(x1, y0)) +
         ay * ((1 - ax) * P(x0, y1) + ax * P(x1, y1));
#undef P
}

int serve_image_decode(const uint8_t *bytes, size_t len, const serve_input_spec_t *spec,
                       float *x, char *err, size_t errlen) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  int c = spec->c;
  if (c != 1 && c != 3)
    return fail(err, errlen, "the model takes %d channels: images give 1 or 3", c);
  if (!(len >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) &&
      !(len >= 8 && memcmp(bytes, png_sig, 8) == 0))
    return fail(err, errlen, "%zu bytes that are neither JPEG nor PNG", len);
  data_pixels_t pix;
  memset(&pix, 0, sizeof pix);
  if (decode(bytes, len, c, &pix, err, errlen) != 0) {
    data_pixels_free(&pix);
    return -1;
  }
  const uint8_t *px = pix.pixels;
  int w = pix.width, h = pix.height;
  size_t hw = (size_t)spec->h * spec->w;
  for (int ch = 0; ch < c; ch++) {
    int k = ch < 3 ? ch : 2;
    float scale = 1.0f / (255.0f * spec->std[k]), shift = spec->mean[k] / spec->std[k];
    for (int y = 0; y < spec->h; y++)
      for (int xx = 0; xx < spec->w; xx++) {
        double v = sample(px, w, h, c, ch, xx, y, spec->w, spec->h) / 255.0;
        x[(size_t)ch * hw + (size_t)y * spec->w + xx] =
            spec->identity ? (float)v : (float)(v * 255.0) * scale - shift;
      }
  }
  data_pixels_free(&pix);
  return 0;
}

int serve_base64_decode(const char *in, size_t len, uint8_t **out, size_t *outlen) {
  while (len > 0 && in[len - 1] == '=') len--;
  if (len % 4 == 1) return -1;
  uint8_t *o = malloc(len / 4 * 3 + 3);
  if (!o) return -1;
  size_t n = 0;
  uint32_t acc = 0;
  for (size_t i = 0; i < len; i++) {
    char ch = in[i];
    int v = ch >= 'A' && ch <= 'Z' ? ch - 'A' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26
            : ch >= '0' && ch <= '9' ? ch - '0' + 52 : ch == '+' || ch == '-' ? 62
            : ch == '/' || ch == '_' ? 63 : -1;
    if (v < 0) {
      free(o);
      return -1;
    }
    acc = acc << 6 | (uint32_t)v;
    if (i % 4 == 3) {
      o[n++] = (uint8_t)(acc >> 16), o[n++] = (uint8_t)(acc >> 8), o[n++] = (uint8_t)acc;
      acc = 0;
    }
  }
  if (len % 4 == 2) o[n++] = (uint8_t)(acc >> 4);
  if (len % 4 == 3) o[n++] = (uint8_t)(acc >> 10), o[n++] = (uint8_t)(acc >> 2);
  *out = o;
  *outlen = n;
  return 0;
}
