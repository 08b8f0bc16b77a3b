/* data/decode.c: JPEG with libjpeg-turbo's TurboJPEG API and PNG with libpng, the
   maintained, SIMD-optimised and fuzzed decoders of the two formats (PIL and DALI's CPU
   path use the same libraries). A JPEG is decoded at the smallest of libjpeg's DCT
   scales (1/8, 1/4, 3/8, ... 1) that still covers what the caller needs, as PIL's draft
   mode does: the inverse DCT then produces fewer pixels, which is most of the cost.
   Sizes are checked from the header before anything is allocated; libjpeg's warnings
   (a truncated file fills with grey) count as errors, as in PIL. */
#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void data_pixels_free(data_pixels_t *p);

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

int data_image_decode_box(const uint8_t *buf, size_t len, int channels, double bx, double by,
                          double bw, double bh, int out_w, int out_h, data_pixels_t *out,
                          char *err, size_t errlen) {
  (void)channels, (void)bx, (void)by, (void)bw, (void)bh, (void)out_w, (void)out_h, (void)out;
  return data_image_info(buf, len, NULL, err, errlen);
}

void data_pixels_free(data_pixels_t *p) {
  free(p->scratch);
  free(p->pixels);
  memset(p, 0, sizeof *p);
}

#else

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


#include <jpeglib.h>
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
  o->width = o->full_width = sw;
  o->height = o->full_height = sh;
  o->x0 = o->y0 = 0;
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
  o->width = o->full_width = (int)w;
  o->height = o->full_height = (int)h;
  o->x0 = o->y0 = 0;
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

/* ---- region decoding (libjpeg's own API: TurboJPEG 2 has no partial decode) ---- */
typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
} jerr_t;

static void jerr_exit(j_common_ptr c) {
  jerr_t *e = (jerr_t *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jmp, 1);
}

/* A warning (corrupt data, a truncated file filled with grey) fails the image, as
   TurboJPEG's STOPONWARNING and PIL do. */
static void jerr_emit(j_common_ptr c, int level) {
  if (level < 0) jerr_exit(c);
}

/* TurboJPEG's LIMITSCANS: a progressive file of more than 500 scans is refused. */
static void jprogress(j_common_ptr c) {
  j_decompress_ptr d = (j_decompress_ptr)c;
  if (c->is_decompressor && d->input_scan_number > 500) {
    jerr_t *e = (jerr_t *)c->err;
    snprintf(e->msg, sizeof e->msg, "more than 500 scans");
    longjmp(e->jmp, 1);
  }
}

/* The part after setjmp: no local of the caller changes across the longjmp. */
static void region_rows(j_decompress_ptr ci, int channels, double bx, double by, double bw,
                        double bh, int out_w, int out_h, data_pixels_t *o, char *err,
                        size_t errlen, int *rc) {
  int w = (int)ci->image_width, h = (int)ci->image_height;
  /* libjpeg scales by num/8: the smallest of 1/8, 1/4, 1/2 and 1 that keeps the box
     out_w x out_h, as PIL's draft mode; libjpeg-turbo's SIMD inverse DCTs are those four
     (3/8, 5/8, ... run plain C kernels that cost more than decoding 1/1). */
  int num = 8;
  for (int n = 1; n < 8; n *= 2)
    if (bw * n / 8 >= out_w - 1e-6 && bh * n / 8 >= out_h - 1e-6) {
      num = n;
      break;
    }
  ci->scale_num = (unsigned)num;
  ci->scale_denom = 8;
  ci->dct_method = JDCT_ISLOW;
  int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
  int gray = channels == 1 && ci->jpeg_color_space == JCS_GRAYSCALE;
  ci->out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(ci);
  int fw = (int)ci->output_width, fh = (int)ci->output_height;
  double fx = (double)fw / w, fy = (double)fh / h;
  /* The box at this scale, widened by the resampling filter's reach (its support is the
     downscale factor, at least 1) and a pixel, within the image. */
  double mx = (bw * fx / out_w > 1 ? bw * fx / out_w : 1) + 1;
  double my = (bh * fy / out_h > 1 ? bh * fy / out_h : 1) + 1;
  int x0 = (int)floor(bx * fx - mx), x1 = (int)ceil((bx + bw) * fx + mx);
  int y0 = (int)floor(by * fy - my), y1 = (int)ceil((by + bh) * fy + my);
  x0 = x0 < 0 ? 0 : x0, y0 = y0 < 0 ? 0 : y0;
  x1 = x1 > fw ? fw : x1, y1 = y1 > fh ? fh : y1;
  JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
  if (x0 > 0 || x1 < fw) jpeg_crop_scanline(ci, &xoff, &cw);   /* widened to iMCUs */
  int comps = ci->output_components, rw = (int)ci->output_width;
  if (grow(o, (size_t)rw * (y1 - y0) * (comps < 3 ? 3 : comps), err, errlen) != 0) return;
  if (y0 > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)y0) != (JDIMENSION)y0) {
    snprintf(err, errlen, "bad JPEG data (cannot skip to row %d)", y0);
    return;
  }
  while ((int)ci->output_scanline < y1) {
    JSAMPROW row = o->pixels + (size_t)((int)ci->output_scanline - y0) * rw * comps;
    if (jpeg_read_scanlines(ci, &row, 1) != 1) {
      snprintf(err, errlen, "bad JPEG data (no row %u)", ci->output_scanline);
      return;
    }
  }
  size_t n = (size_t)rw * (y1 - y0);
  if (cmyk) cmyk_to_rgb(o->pixels, n);
  if (channels == 1 && !gray) rgb_to_gray(o->pixels, n);
  o->width = rw;
  o->height = y1 - y0;
  o->x0 = (int)xoff;
  o->y0 = y0;
  o->full_width = fw;
  o->full_height = fh;
  o->channels = channels;
  o->scale_num = num;
  o->scale_denom = 8;
  *rc = 0;
}

int data_image_decode_box(const uint8_t *buf, size_t len, int channels, double bx, double by,
                          double bw, double bh, int out_w, int out_h, data_pixels_t *o,
                          char *err, size_t errlen) {
  if (!is_jpeg(buf, len) || channels < 1 || channels > 3 || channels == 2)
    return data_image_decode(buf, len, channels, 0, 0, o, err, errlen);
  struct jpeg_decompress_struct ci;
  struct jpeg_progress_mgr progress = {.progress_monitor = jprogress};
  jerr_t je;
  volatile int rc = -1;
  ci.err = jpeg_std_error(&je.pub);
  je.pub.error_exit = jerr_exit;
  je.pub.emit_message = jerr_emit;
  je.msg[0] = 0;
  if (setjmp(je.jmp) == 0) {
    jpeg_create_decompress(&ci);
    ci.progress = &progress;
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    if (check_size((int)ci.image_width, (int)ci.image_height, err, errlen) == 0) {
      int r = -1;
      region_rows(&ci, channels, bx, by, bw, bh, out_w, out_h, o, err, errlen, &r);
      rc = r;
    }
  } else {
    snprintf(err, errlen, "bad JPEG data (%s)", je.msg);
  }
  jpeg_destroy_decompress(&ci);
  return rc;
}

void data_pixels_free(data_pixels_t *p) {
  if (p->tj) tjDestroy(p->tj);
  free(p->scratch);
  free(p->pixels);
  memset(p, 0, sizeof *p);
}

#endif
