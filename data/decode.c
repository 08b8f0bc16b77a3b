/* data/decode.c: JPEG with libjpeg-turbo's TurboJPEG API and PNG with libpng, the
   maintained, SIMD-optimised and fuzzed decoders of the two formats (PIL and DALI's CPU
   path use the same libraries). A JPEG is decoded at the smallest of libjpeg's DCT
   scales (1/8, 1/4, 3/8, ... 1) that still covers what the caller needs, as PIL's draft
   mode does: the inverse DCT then produces fewer pixels, which is most of the cost.
   Sizes are checked from the header before anything is allocated; libjpeg's warnings
   (a truncated file fills with grey) count as errors, as in PIL. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void data_pixels_free(data_pixels_t *p);

static int check_size(int w, int h, char *err, size_t errlen) {
  if (w <= 0 || h <= 0 || w > DATA_MAX_SIDE || h > DATA_MAX_SIDE ||
      (uint64_t)w * (uint64_t)h > DATA_MAX_PIXELS) {
    snprintf(err, errlen, "image of %dx%d pixels: more than this reader takes (at most %d per "
             "side and %u in all) or empty", w, h, DATA_MAX_SIDE, DATA_MAX_PIXELS);
    return -1;
  }
  return 0;
}

static int is_png(const uint8_t *b, size_t len) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return len >= 8 && memcmp(b, sig, 8) == 0;
}

static int is_jpeg(const uint8_t *b, size_t len) {
  return len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

static uint32_t be32(const uint8_t *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* PIL's luma (ITU-R 601-2, its fixed-point rounding), so grey output matches
   Image.convert("L"). */
static uint8_t luma(const uint8_t *rgb) {
  return (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

static void rgb_to_gray(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = luma(p + 3 * i);
}

static int grow(data_pixels_t *o, size_t need, char *err, size_t errlen) {
  if (o->cap >= need) return 0;
  uint8_t *g = realloc(o->pixels, need);
  if (!g) {
    snprintf(err, errlen, "out of memory (%zu bytes of pixels)", need);
    return -1;
  }
  o->pixels = g;
  o->cap = need;
  return 0;
}

#ifdef HVD_NO_IMAGES

int data_image_info(const uint8_t *buf, size_t len, data_image_info_t *info, char *err,
                    size_t errlen) {
  (void)buf, (void)len, (void)info;
  snprintf(err, errlen, "image input: this build has no libjpeg-turbo or libpng (built with "
           "IMAGES=none); rebuild with them (scripts/install-deps.sh) to read JPEG and PNG");
  return -1;
}

int data_image_decode(const uint8_t *buf, size_t len, int channels, int min_w, int min_h,
                      data_pixels_t *out, char *err, size_t errlen) {
  (void)channels, (void)min_w, (void)min_h, (void)out;
  return data_image_info(buf, len, NULL, err, errlen);
}

void data_pixels_free(data_pixels_t *p) {
  free(p->scratch);
  free(p->pixels);
  memset(p, 0, sizeof *p);
}

#else

#include <png.h>
#include <setjmp.h>
#include <turbojpeg.h>

int data_image_info(const uint8_t *buf, size_t len, data_image_info_t *info, char *err,
                    size_t errlen) {
  memset(info, 0, sizeof *info);
  if (is_png(buf, len)) {
    /* The first chunk must be IHDR: 8 signature, 4 length, 4 type, then width, height. */
    if (len < 24 || memcmp(buf + 12, "IHDR", 4) != 0) {
      snprintf(err, errlen, "PNG without its IHDR header (%zu bytes)", len);
      return -1;
    }
    uint32_t w = be32(buf + 16), h = be32(buf + 20);
    if (w > DATA_MAX_SIDE || h > DATA_MAX_SIDE) {
      snprintf(err, errlen, "image of %ux%u pixels: more than this reader takes (at most %d "
               "per side)", w, h, DATA_MAX_SIDE);
      return -1;
    }
    info->width = (int)w;
    info->height = (int)h;
    return check_size(info->width, info->height, err, errlen);
  }
  if (!is_jpeg(buf, len) || len > (size_t)0x7fffffff) {
    snprintf(err, errlen, "not a JPEG or PNG file (%zu bytes, starting %02x %02x)", len,
             len > 0 ? buf[0] : 0, len > 1 ? buf[1] : 0);
    return -1;
  }
  tjhandle h = tjInitDecompress();
  if (!h) {
    snprintf(err, errlen, "cannot start TurboJPEG (%s)", tjGetErrorStr2(NULL));
    return -1;
  }
  int w = 0, ht = 0, sub = 0, cs = 0;
  int rc = tjDecompressHeader3(h, buf, (unsigned long)len, &w, &ht, &sub, &cs);
  if (rc != 0) snprintf(err, errlen, "bad JPEG header (%s)", tjGetErrorStr2(h));
  tjDestroy(h);
  if (rc != 0) return -1;
  info->width = w;
  info->height = ht;
  info->is_jpeg = 1;
  return check_size(w, ht, err, errlen);
}

/* CMYK as libjpeg returns an Adobe JPEG's (inverted: 255 means no ink) to RGB with
   PIL's formula, in place (4 bytes per pixel in, 3 out). */
static void cmyk_to_rgb(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned k = p[4 * i + 3];
    for (int c = 0; c < 3; c++) {
      unsigned t = p[4 * i + c] * k + 128;
      p[3 * i + c] = (uint8_t)(((t >> 8) + t) >> 8);
    }
  }
}

static int decode_jpeg(const uint8_t *buf, size_t len, int channels, int min_w, int min_h,
                       data_pixels_t *o, char *err, size_t errlen) {
  if (!o->tj && !(o->tj = tjInitDecompress())) {
    snprintf(err, errlen, "cannot start TurboJPEG (%s)", tjGetErrorStr2(NULL));
    return -1;
  }
  int w, h, sub, cs;
  if (tjDecompressHeader3(o->tj, buf, (unsigned long)len, &w, &h, &sub, &cs) != 0) {
    snprintf(err, errlen, "bad JPEG header (%s)", tjGetErrorStr2(o->tj));
    return -1;
  }
  if (check_size(w, h, err, errlen) != 0) return -1;
  if (min_w <= 0 && min_h <= 0) min_w = w, min_h = h;
  int nf = 0;
  tjscalingfactor *sf = tjGetScalingFactors(&nf), best = {1, 1};
  for (int i = 0; sf && i < nf; i++) {
    if (sf[i].num > sf[i].denom) continue;
    if (TJSCALED(w, sf[i]) < min_w || TJSCALED(h, sf[i]) < min_h) continue;
    if ((double)sf[i].num / sf[i].denom < (double)best.num / best.denom) best = sf[i];
  }
  int sw = TJSCALED(w, best), sh = TJSCALED(h, best);
  int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  /* Grey from a colour JPEG goes through RGB, as PIL's convert("L"): libjpeg's own grey
     output is the Y plane, which differs where RGB clips. */
  int via_rgb = channels == 1 && cs != TJCS_GRAY && !cmyk;
  int pf = cmyk ? TJPF_CMYK : channels == 1 && !via_rgb ? TJPF_GRAY : TJPF_RGB;
  if (grow(o, (size_t)sw * sh * tjPixelSize[pf], err, errlen) != 0) return -1;
  /* LIMITSCANS: a progressive JPEG with thousands of scans is refused, not decoded for
     minutes. Any warning (a truncated file, corrupt data) fails the image. */
  if (tjDecompress2(o->tj, buf, (unsigned long)len, o->pixels, sw, 0, sh, pf,
                    TJFLAG_LIMITSCANS | TJFLAG_STOPONWARNING) != 0) {
    snprintf(err, errlen, "bad JPEG data (%s)", tjGetErrorStr2(o->tj));
    return -1;
  }
  if (cmyk) cmyk_to_rgb(o->pixels, (size_t)sw * sh);
  if ((cmyk || via_rgb) && channels == 1) rgb_to_gray(o->pixels, (size_t)sw * sh);
  o->width = sw;
  o->height = sh;
  o->channels = channels;
  o->scale_num = best.num;
  o->scale_denom = best.denom;
  return 0;
}

typedef struct {
  const uint8_t *buf;
  size_t len, pos;
  char msg[200];
  jmp_buf jmp;
} png_src_t;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  png_src_t *s = png_get_io_ptr(png);
  if (n > s->len - s->pos) png_error(png, "truncated file");
  memcpy(out, s->buf + s->pos, n);
  s->pos += n;
}

static void png_fail(png_structp png, png_const_charp msg) {
  png_src_t *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", msg);
  longjmp(s->jmp, 1);
}

static void png_warn(png_structp png, png_const_charp msg) {
  (void)png, (void)msg;   /* e.g. a bad ancillary chunk: the pixels are still good */
}

/* The part after setjmp, kept apart so that no local changes across the longjmp. */
static void png_decode_rows(png_structp png, png_infop info, int channels, data_pixels_t *o,
                            png_bytep *rows, char *err, size_t errlen, int *rc) {
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  png_set_strip_16(png);   /* the high byte, as PIL */
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_expand_gray_1_2_4_to_8(png);
  png_set_strip_alpha(png);   /* as Image.convert("RGB"): alpha is dropped */
  int gray = !(color & PNG_COLOR_MASK_COLOR) && color != PNG_COLOR_TYPE_PALETTE;
  if (channels == 3 && gray) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int got = png_get_channels(png, info);
  if (got != 1 && got != 3) {
    snprintf(err, errlen, "PNG with %d channels after conversion", got);
    return;
  }
  if (grow(o, (size_t)w * h * 3, err, errlen) != 0) return;
  for (png_uint_32 y = 0; y < h; y++) rows[y] = o->pixels + (size_t)y * w * got;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  if (channels == 1 && got == 3) rgb_to_gray(o->pixels, (size_t)w * h);
  o->width = (int)w;
  o->height = (int)h;
  o->channels = channels;
  o->scale_num = o->scale_denom = 1;
  *rc = 0;
}

static int decode_png(const uint8_t *buf, size_t len, int channels, data_pixels_t *o,
                      char *err, size_t errlen) {
  data_image_info_t info;
  if (data_image_info(buf, len, &info, err, errlen) != 0) return -1;
  png_src_t src = {.buf = buf, .len = len};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
  png_infop pinfo = png ? png_create_info_struct(png) : NULL;
  png_bytep *rows = malloc(sizeof *rows * (size_t)info.height);
  volatile int rc = -1;
  if (!png || !pinfo || !rows) {
    snprintf(err, errlen, "cannot start libpng (out of memory)");
  } else if (setjmp(src.jmp) == 0) {
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, DATA_MAX_SIDE, DATA_MAX_SIDE);
    png_read_info(png, pinfo);
    if ((int)png_get_image_width(png, pinfo) != info.width ||
        (int)png_get_image_height(png, pinfo) != info.height)
      png_error(png, "size differs from the IHDR read first");
    int r = -1;
    png_decode_rows(png, pinfo, channels, o, rows, err, errlen, &r);
    rc = r;
  } else {
    snprintf(err, errlen, "bad PNG (%s)", src.msg);
  }
  png_destroy_read_struct(png ? &png : NULL, pinfo ? &pinfo : NULL, NULL);
  free(rows);
  return rc;
}

int data_image_decode(const uint8_t *buf, size_t len, int channels, int min_w, int min_h,
                      data_pixels_t *out, char *err, size_t errlen) {
  if (channels != 1 && channels != 3) {
    snprintf(err, errlen, "%d channels asked for (1 or 3)", channels);
    return -1;
  }
  if (is_png(buf, len)) return decode_png(buf, len, channels, out, err, errlen);
  if (is_jpeg(buf, len) && len <= (size_t)0x7fffffff)
    return decode_jpeg(buf, len, channels, min_w, min_h, out, err, errlen);
  snprintf(err, errlen, "not a JPEG or PNG file (%zu bytes, starting %02x %02x)", len,
           len > 0 ? buf[0] : 0, len > 1 ? buf[1] : 0);
  return -1;
}

void data_pixels_free(data_pixels_t *p) {
  if (p->tj) tjDestroy(p->tj);
  free(p->scratch);
  free(p->pixels);
  memset(p, 0, sizeof *p);
}

#endif
