/* tests/test_data_images.c: the data module (data/) on images and TFRecords it writes
   itself into a temp folder: CRC32C's check value; JPEG (RGB, grey, CMYK) and PNG (8- and
   16-bit, grey) decoding and DCT scaling; every bad input (truncated JPEG, a non-image,
   an empty file, 60000x60000 headers, a corrupt TFRecord length and data CRC) gives an
   error naming the file (and record) or, skipped, is counted; 1x1 images work; the
   pipeline's batches are the same for 1 and 3 threads and any prefetch, and the ranks'
   slices make up the global batch.
   With arguments it is the C half of tests/test_data_torch.sh:
     test_data_images decode FILE CHANNELS OUT   full-size pixels to OUT, "W H C" printed
     test_data_images crops W H N SEED           N RandomResizedCrop boxes, "x y w h"
     test_data_images eval DIR SIZE OUT [full]   the folder's samples in order, evaluation
                                                 transform, float32 NCHW to OUT (full: no
                                                 DCT scaling) */
#include "data/data.h"

#ifdef HVD_NO_IMAGES
#include <stdio.h>
int main(void) {
  fprintf(stderr, "test_data_images: this build has no libjpeg-turbo or libpng (IMAGES=none): "
                  "nothing to test; build with IMAGES=system\n");
  return 1;
}
#else

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "tensorflow/core/example/example.pb-c.h"
#include "tests/check.h"

static char dir[256];

static void write_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(b, 1, n, f) == n, "cannot write %s", path);
  if (f) fclose(f);
}

/* A smooth test pattern: channel c of pixel (x, y). */
static uint8_t pattern(int x, int y, int c, int w, int h) {
  return (uint8_t)(c == 0 ? 255 * x / (w > 1 ? w - 1 : 1)
                   : c == 1 ? 255 * y / (h > 1 ? h - 1 : 1) : 128 + (x - y) / 4);
}

/* A JPEG of w x h with pixel format pf (TJPF_RGB, TJPF_GRAY, TJPF_CMYK); malloc'd. */
static unsigned char *make_jpeg(int w, int h, int pf, unsigned long *len) {
  int ps = tjPixelSize[pf];
  unsigned char *px = malloc((size_t)w * h * ps);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ps; c++) px[((size_t)y * w + x) * ps + c] = pattern(x, y, c % 3, w, h);
  tjhandle t = tjInitCompress();
  unsigned char *out = NULL;
  *len = 0;
  int sub = pf == TJPF_GRAY ? TJSAMP_GRAY : TJSAMP_420;
  CHECK(tjCompress2(t, px, w, 0, h, pf, &out, len, sub, 95, 0) == 0, "tjCompress2: %s",
        tjGetErrorStr2(t));
  tjDestroy(t);
  free(px);
  return out;
}

static void write_jpeg(const char *path, int w, int h, int pf) {
  unsigned long len;
  unsigned char *j = make_jpeg(w, h, pf, &len);
  write_file(path, j, len);
  tjFree(j);
}

static void write_png(const char *path, int w, int h, int format) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w;
  img.height = (png_uint_32)h;
  img.format = (png_uint_32)format;
  int comps = PNG_IMAGE_SAMPLE_CHANNELS(format), bytes = PNG_IMAGE_SAMPLE_COMPONENT_SIZE(format);
  uint8_t *px = malloc((size_t)w * h * comps * bytes);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < comps; c++) {
        size_t i = ((size_t)y * w + x) * comps + c;
        if (bytes == 2) ((uint16_t *)px)[i] = (uint16_t)(pattern(x, y, c, w, h) * 257);
        else px[i] = pattern(x, y, c, w, h);
      }
  CHECK(png_image_write_to_file(&img, path, 0, px, 0, NULL), "png write %s: %s", path,
        img.message);
  free(px);
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
  *len = fread(b, 1, (size_t)n, f);
  fclose(f);
  return b;
}

static void test_crc(void) {
  CHECK(data_crc32c(0, "123456789", 9) == 0xe3069283u, "crc32c check value %08x",
        data_crc32c(0, "123456789", 9));
}

static double mean_abs_pattern(const data_pixels_t *p) {
  double s = 0;
  for (int y = 0; y < p->height; y++)
    for (int x = 0; x < p->width; x++)
      for (int c = 0; c < p->channels; c++)
        s += abs(p->pixels[((size_t)y * p->width + x) * p->channels + c] -
                 pattern(x, y, c, p->width, p->height));
  return s / ((double)p->width * p->height * p->channels);
}

static void test_decode(void) {
  char path[512], err[512];
  data_pixels_t px = {0};
  size_t len;
  snprintf(path, sizeof path, "%s/rgb.jpg", dir);
  write_jpeg(path, 97, 61, TJPF_RGB);
  uint8_t *b = slurp(path, &len);
  CHECK(data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) == 0, "%s", err);
  CHECK(px.width == 97 && px.height == 61 && px.channels == 3 && px.scale_denom == 1,
        "rgb.jpg decoded %dx%dx%d at 1/%d", px.width, px.height, px.channels, px.scale_denom);
  CHECK(mean_abs_pattern(&px) < 3.0, "rgb.jpg differs from its pattern by %.2f", mean_abs_pattern(&px));
  /* Half the size is enough: DCT scaling decodes at 1/2 (49x31). */
  CHECK(data_image_decode(b, len, 3, 40, 30, &px, err, sizeof err) == 0, "%s", err);
  CHECK(px.width == 49 && px.height == 31 && px.scale_num * 2 == px.scale_denom,
        "scaled decode %dx%d at %d/%d, expected 49x31 at 1/2", px.width, px.height,
        px.scale_num, px.scale_denom);
  CHECK(data_image_decode(b, len, 1, 0, 0, &px, err, sizeof err) == 0 && px.channels == 1,
        "rgb.jpg as grey: %s", err);
  free(b);
  snprintf(path, sizeof path, "%s/cmyk.jpg", dir);
  write_jpeg(path, 40, 30, TJPF_CMYK);
  b = slurp(path, &len);
  CHECK(data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) == 0 && px.channels == 3,
        "cmyk.jpg: %s", err);
  free(b);
  snprintf(path, sizeof path, "%s/gray.jpg", dir);
  write_jpeg(path, 33, 20, TJPF_GRAY);
  b = slurp(path, &len);
  CHECK(data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) == 0, "gray.jpg: %s", err);
  CHECK(px.pixels[3 * 5] == px.pixels[3 * 5 + 1] && px.pixels[3 * 5] == px.pixels[3 * 5 + 2],
        "grey JPEG to RGB: channels differ");
  free(b);
  snprintf(path, sizeof path, "%s/rgb16.png", dir);
  write_png(path, 21, 13, PNG_FORMAT_RGB | PNG_FORMAT_FLAG_LINEAR);
  b = slurp(path, &len);
  CHECK(data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) == 0, "rgb16.png: %s", err);
  free(b);
  snprintf(path, sizeof path, "%s/rgb.png", dir);
  write_png(path, 21, 13, PNG_FORMAT_RGB);
  b = slurp(path, &len);
  CHECK(data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) == 0 &&
            mean_abs_pattern(&px) == 0.0, "rgb.png: not its exact pixels (%s)", err);
  CHECK(data_image_decode(b, len, 1, 0, 0, &px, err, sizeof err) == 0 && px.channels == 1,
        "rgb.png as grey: %s", err);
  free(b);
  data_pixels_free(&px);
}

/* Decoding only the region a crop reads gives the crop the same pixels as decoding the
   whole image at the same scale. */
static void test_region(void) {
  unsigned long jl;
  unsigned char *j = make_jpeg(301, 203, TJPF_RGB, &jl);
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  float a[3 * 24 * 24], b[3 * 24 * 24];
  char err[512];
  const double boxes[][4] = {{37, 21, 150, 120}, {0, 0, 301, 203}, {250, 150, 51, 53}, {3, 90, 40, 30}};
  for (int k = 0; k < 4; k++) {
    const double *bx = boxes[k];
    data_pixels_t r = {0}, f = {0};
    CHECK(data_image_decode_box(j, jl, 3, bx[0], bx[1], bx[2], bx[3], 24, 24, &r, err, sizeof err) == 0,
          "region: %s", err);
    CHECK(data_image_decode(j, jl, 3, r.full_width, r.full_height, &f, err, sizeof err) == 0 &&
              f.width == r.full_width, "whole at the region's scale: %s", err);
    double fx = (double)r.full_width / 301, fy = (double)r.full_height / 203;
    data_box_t rb = {bx[0] * fx - r.x0, bx[1] * fy - r.y0, bx[2] * fx, bx[3] * fy};
    data_box_t fb = {bx[0] * fx, bx[1] * fy, bx[2] * fx, bx[3] * fy};
    data_resample(&r, rb, 24, 24, 0, mean, std, 0, a);
    data_resample(&f, fb, 24, 24, 0, mean, std, 0, b);
    double worst = 0;
    for (int i = 0; i < 3 * 24 * 24; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    CHECK(worst < 1.0 / 255, "box %d (scale %d/8, region %dx%d at %d,%d): differs from the whole "
          "decode by %g", k, r.scale_num, r.width, r.height, r.x0, r.y0, worst * 255);
    if (k == 0)
      CHECK(r.width < r.full_width && r.height < r.full_height, "box 0 decoded whole (%dx%d)",
            r.width, r.height);
    data_pixels_free(&r);
    data_pixels_free(&f);
  }
  tjFree(j);
}

/* Bad inputs: each fails with a message naming the problem; nothing crashes. */
static void expect_bad(const uint8_t *b, size_t len, const char *what, const char *needle) {
  char err[512] = "";
  data_pixels_t px = {0};
  int rc = data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err);
  CHECK(rc != 0, "%s decoded", what);
  CHECK(strstr(err, needle), "%s: message '%s' lacks '%s'", what, err, needle);
  data_pixels_free(&px);
}

static void test_bad_images(void) {
  unsigned long jl;
  unsigned char *j = make_jpeg(256, 192, TJPF_RGB, &jl);
  expect_bad(j, jl * 6 / 10, "a truncated JPEG", "bad JPEG data");
  expect_bad((const uint8_t *)"hello, world\n", 13, "a text file", "not a JPEG or PNG");
  expect_bad((const uint8_t *)"", 0, "an empty file", "not a JPEG or PNG");
  /* 60000x60000 in the frame header (SOF0: FF C0, length, precision, height, width). */
  unsigned char *big = malloc(jl);
  memcpy(big, j, jl);
  for (unsigned long i = 0; i + 9 < jl; i++)
    if (big[i] == 0xff && big[i + 1] == 0xc0) {
      big[i + 5] = 60000 >> 8, big[i + 6] = 60000 & 0xff;
      big[i + 7] = 60000 >> 8, big[i + 8] = 60000 & 0xff;
      break;
    }
  expect_bad(big, jl, "a 60000x60000 JPEG header", "60000x60000");
  {   /* the region decoder checks the size too */
    char err[512] = "";
    data_pixels_t px = {0};
    CHECK(data_image_decode_box(big, jl, 3, 0, 0, 100, 100, 16, 16, &px, err, sizeof err) != 0 &&
              strstr(err, "60000x60000"), "60000x60000 JPEG, region decode: '%s'", err);
    data_pixels_free(&px);
  }
  free(big);
  tjFree(j);
  char path[512];
  size_t len;
  snprintf(path, sizeof path, "%s/big.png", dir);
  write_png(path, 4, 4, PNG_FORMAT_RGB);
  uint8_t *p = slurp(path, &len);
  p[16] = 0, p[17] = 0, p[18] = 60000 >> 8, p[19] = 60000 & 0xff;
  p[20] = 0, p[21] = 0, p[22] = 60000 >> 8, p[23] = 60000 & 0xff;
  expect_bad(p, len, "a 60000x60000 PNG header", "60000x60000");
  free(p);
  snprintf(path, sizeof path, "%s/rgb.png", dir);
  p = slurp(path, &len);
  expect_bad(p, len - 30, "a truncated PNG", "bad PNG");
  free(p);
}

/* A folder of 2 classes: 12 good images of assorted sizes (1x1 included) and, with
   bad, a truncated JPEG and a text file named .jpg. */
static void make_folder(const char *root, int bad) {
  char d[600], p[700];
  snprintf(d, sizeof d, "mkdir -p %s/a %s/b", root, root);
  CHECK(system(d) == 0, "%s", d);
  for (int i = 0; i < 12; i++) {
    snprintf(p, sizeof p, "%s/%s/%02d.%s", root, i % 2 ? "b" : "a", i, i % 3 == 2 ? "png" : "jpg");
    int w = i == 0 ? 1 : 20 + 7 * i, h = i == 0 ? 1 : 50 - 2 * i;
    if (i % 3 == 2) write_png(p, w, h, i % 2 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB);
    else write_jpeg(p, w, h, i % 4 == 1 ? TJPF_GRAY : TJPF_RGB);
  }
  if (!bad) return;
  unsigned long jl;
  unsigned char *j = make_jpeg(256, 192, TJPF_RGB, &jl);
  snprintf(p, sizeof p, "%s/a/zz_truncated.jpg", root);
  write_file(p, j, jl * 6 / 10);
  tjFree(j);
  snprintf(p, sizeof p, "%s/b/zz_text.jpg", root);
  write_file(p, "not an image\n", 13);
}

/* Every batch of one epoch, concatenated: x into *xs, labels into *ys. */
static int run_epoch(const data_source_t *s, data_pipeline_opts_t o, int epoch, float **xs,
                     int32_t **ys, int *n, uint64_t *skipped, char *err, size_t errlen) {
  data_pipeline_t *p = data_pipeline_start(s, &o, epoch, 0, err, errlen);
  if (!p) return -1;
  size_t per = (size_t)o.channels * o.image_size * o.image_size;
  *xs = malloc(sizeof(float) * per * s->n);
  *ys = malloc(sizeof(int32_t) * s->n);
  *n = 0;
  data_batch_t b;
  int rc;
  while ((rc = data_pipeline_next(p, &b, err, errlen)) == 1) {
    memcpy(*xs + per * *n, b.x, sizeof(float) * per * b.count);
    memcpy(*ys + *n, b.y, sizeof(int32_t) * b.count);
    *n += b.count;
  }
  if (skipped) *skipped = data_pipeline_skipped(p);
  data_pipeline_stop(p);
  return rc;
}

static void test_pipeline(void) {
  char root[400], err[4800];
  snprintf(root, sizeof root, "%s/folder", dir);
  make_folder(root, 0);
  data_source_t s;
  CHECK(data_source_imagefolder(root, &s, err, sizeof err) == 0, "%s", err);
  CHECK(s.n == 12 && s.num_classes == 2, "folder: %zu samples, %d classes", s.n, s.num_classes);
  data_pipeline_opts_t o;
  data_pipeline_defaults(&o);
  o.image_size = 16;
  o.augment = 1;
  o.batch = 5;
  o.seed = 7;
  float *x1, *x2;
  int32_t *y1, *y2;
  int n1, n2;
  o.threads = 1, o.prefetch = 1;
  CHECK(run_epoch(&s, o, 3, &x1, &y1, &n1, NULL, err, sizeof err) == 0, "%s", err);
  o.threads = 3, o.prefetch = 4;
  CHECK(run_epoch(&s, o, 3, &x2, &y2, &n2, NULL, err, sizeof err) == 0, "%s", err);
  size_t per = 3 * 16 * 16;
  CHECK(n1 == 12 && n2 == 12, "samples %d and %d, expected 12", n1, n2);
  CHECK(memcmp(x1, x2, sizeof(float) * per * 12) == 0 && memcmp(y1, y2, 4 * 12) == 0,
        "1 thread and 3 threads give different batches");
  free(x2), free(y2);
  /* NHWC: the same values, transposed. */
  o.nhwc = 1;
  CHECK(run_epoch(&s, o, 3, &x2, &y2, &n2, NULL, err, sizeof err) == 0, "%s", err);
  int transposed = n2 == 12;
  for (int i = 0; i < 12 && transposed; i++)
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < 256; p++)
        if (x1[per * i + (size_t)c * 256 + p] != x2[per * i + (size_t)p * 3 + c]) transposed = 0;
  CHECK(transposed, "NHWC output is not NCHW's transposed");
  o.nhwc = 0;
  free(x2), free(y2);
  /* Another epoch: another order and other crops. */
  CHECK(run_epoch(&s, o, 4, &x2, &y2, &n2, NULL, err, sizeof err) == 0, "%s", err);
  CHECK(memcmp(x1, x2, sizeof(float) * per * 12) != 0, "epochs 3 and 4 gave the same batches");
  free(x2), free(y2);
  /* Two ranks of batch 3 = one rank of batch 6, slice by slice. */
  o.batch = 6;
  o.size = 1;
  CHECK(run_epoch(&s, o, 3, &x2, &y2, &n2, NULL, err, sizeof err) == 0, "%s", err);
  for (int r = 0; r < 2; r++) {
    float *xr;
    int32_t *yr;
    int nr;
    data_pipeline_opts_t q = o;
    q.batch = 3, q.size = 2, q.rank = r;
    CHECK(run_epoch(&s, q, 3, &xr, &yr, &nr, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(nr == 6, "rank %d took %d samples, expected 6", r, nr);
    for (int k = 0; k < 2 && nr == 6; k++)
      CHECK(memcmp(xr + per * 3 * k, x2 + per * (6 * k + 3 * r), sizeof(float) * per * 3) == 0,
            "rank %d's slice of global batch %d differs from the one-rank run", r, k);
    free(xr), free(yr);
  }
  free(x1), free(y1), free(x2), free(y2);
  data_source_free(&s);
}

/* The stream runs epoch after epoch in one pipeline (data_pipeline_restart keeps its
   buffers): its batches, topped up across the epochs' ends, are the epochs' own in turn;
   a thread count that differs from the epochs' makes no difference either. */
static void test_stream(void) {
  char root[400], err[4800];
  snprintf(root, sizeof root, "%s/folder", dir);   /* test_pipeline's 12 images */
  data_source_t s;
  CHECK(data_source_imagefolder(root, &s, err, sizeof err) == 0, "%s", err);
  data_pipeline_opts_t o;
  data_pipeline_defaults(&o);
  o.image_size = 8, o.batch = 5, o.threads = 1, o.prefetch = 2, o.augment = 1, o.seed = 9;
  const size_t per = 3 * 8 * 8;
  float *want = malloc(sizeof(float) * per * 36), *x = malloc(sizeof(float) * per * 5);
  int32_t *wy = malloc(sizeof(int32_t) * 36), y[5];
  CHECK(want && wy && x, "out of memory");
  for (int e = 0; e < 3; e++) {
    float *xe;
    int32_t *ye;
    int n;
    CHECK(run_epoch(&s, o, e, &xe, &ye, &n, NULL, err, sizeof err) == 0 && n == 12,
          "epoch %d: %s (%d samples)", e, err, n);
    memcpy(want + per * 12 * e, xe, sizeof(float) * per * 12);
    memcpy(wy + 12 * e, ye, sizeof(int32_t) * 12);
    free(xe), free(ye);
  }
  o.threads = 3;
  data_stream_t *st = data_stream_open(&s, &o, err, sizeof err);
  CHECK(st, "%s", err);
  for (int b = 0; b < 7; b++) {   /* 35 samples: into the third epoch */
    CHECK(data_stream_next(st, x, y, err, sizeof err) == 0, "stream batch %d: %s", b, err);
    CHECK(memcmp(x, want + per * 5 * b, sizeof(float) * per * 5) == 0 &&
              memcmp(y, wy + 5 * b, sizeof y) == 0,
          "stream batch %d differs from the epochs' samples %d..%d", b, 5 * b, 5 * b + 4);
  }
  CHECK(data_stream_skipped(st) == 0, "stream: %llu skipped",
        (unsigned long long)data_stream_skipped(st));
  data_stream_close(st);
  free(want), free(wy), free(x);
  data_source_free(&s);
}

static void test_pipeline_bad(void) {
  char root[400], err[4800];
  snprintf(root, sizeof root, "%s/badfolder", dir);
  make_folder(root, 1);
  data_source_t s;
  CHECK(data_source_imagefolder(root, &s, err, sizeof err) == 0, "%s", err);
  data_pipeline_opts_t o;
  data_pipeline_defaults(&o);
  o.image_size = 8, o.batch = 4, o.threads = 2, o.shuffle = 0;
  float *x;
  int32_t *y;
  int n;
  uint64_t skipped = 0;
  CHECK(run_epoch(&s, o, 0, &x, &y, &n, NULL, err, sizeof err) == -1, "bad images passed");
  CHECK(strstr(err, "zz_truncated.jpg") && strstr(err, "bad JPEG data"),
        "the error does not name the truncated file: %s", err);
  free(x), free(y);
  o.skip_bad = 1;
  CHECK(run_epoch(&s, o, 0, &x, &y, &n, &skipped, err, sizeof err) == 0, "%s", err);
  CHECK(n == 12 && skipped == 2, "skip-bad: %d samples, %llu skipped; expected 12 and 2", n,
        (unsigned long long)skipped);
  free(x), free(y);
  data_source_free(&s);
}

/* One Example as tf_cnn_benchmarks' ImageNet records. */
static size_t pack_example(const uint8_t *img, size_t len, int64_t label, uint8_t **out) {
  Tensorflow__BytesList bl = TENSORFLOW__BYTES_LIST__INIT;
  ProtobufCBinaryData bd = {len, (uint8_t *)img};
  bl.n_value = 1, bl.value = &bd;
  Tensorflow__Int64List il = TENSORFLOW__INT64_LIST__INIT;
  il.n_value = 1, il.value = &label;
  Tensorflow__Feature fi = TENSORFLOW__FEATURE__INIT, fl = TENSORFLOW__FEATURE__INIT;
  fi.kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST, fi.bytes_list = &bl;
  fl.kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST, fl.int64_list = &il;
  Tensorflow__Features__FeatureEntry e1 = TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
                                     e2 = TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT;
  e1.key = "image/encoded", e1.value = &fi;
  e2.key = "image/class/label", e2.value = &fl;
  Tensorflow__Features__FeatureEntry *es[2] = {&e1, &e2};
  Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
  fs.n_feature = 2, fs.feature = es;
  Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
  ex.features = &fs;
  size_t n = tensorflow__example__get_packed_size(&ex);
  *out = malloc(n);
  tensorflow__example__pack(&ex, *out);
  return n;
}

/* shard with 3 records; corrupt: 0 none, 1 record 1's length, 2 record 1's data. */
static void write_shard(const char *path, int corrupt) {
  FILE *f = fopen(path, "wb");
  long at[3];
  for (int i = 0; i < 3; i++) {
    unsigned long jl;
    unsigned char *j = make_jpeg(30 + i, 20, TJPF_RGB, &jl);
    uint8_t *ex;
    size_t n = pack_example(j, jl, i + 1, &ex);
    at[i] = ftell(f);
    CHECK(data_tfrecord_write(f, ex, n) == 0, "tfrecord write");
    free(ex);
    tjFree(j);
  }
  fclose(f);
  if (!corrupt) return;
  uint8_t *b;
  size_t len;
  b = slurp(path, &len);
  if (corrupt == 1) b[at[1] + 1] ^= 0x40;     /* the length: its CRC no longer matches */
  else b[at[1] + 12 + 40] ^= 0x01;            /* a byte of the data */
  write_file(path, b, len);
  free(b);
}

static void test_tfrecord(void) {
  char d[400], p[600], err[4800];
  snprintf(d, sizeof d, "%s/tfr", dir);
  snprintf(p, sizeof p, "mkdir -p %s", d);
  CHECK(system(p) == 0, "%s", p);
  snprintf(p, sizeof p, "%s/train-00000-of-00002", d);
  write_shard(p, 0);
  snprintf(p, sizeof p, "%s/train-00001-of-00002", d);
  write_shard(p, 0);
  data_source_t s;
  CHECK(data_source_tfrecord(d, "train-", &s, err, sizeof err) == 0, "%s", err);
  CHECK(s.n == 6, "%zu records, expected 6", s.n);
  data_pipeline_opts_t o;
  data_pipeline_defaults(&o);
  o.image_size = 8, o.batch = 6, o.shuffle = 0;
  float *x;
  int32_t *y;
  int n;
  CHECK(run_epoch(&s, o, 0, &x, &y, &n, NULL, err, sizeof err) == 0, "%s", err);
  CHECK(n == 6 && y[0] == 0 && y[1] == 1 && y[2] == 2 && y[5] == 2,
        "labels %d %d %d .. %d, expected 0 1 2 .. 2 (1-based in the records)", y[0], y[1], y[2], y[5]);
  free(x), free(y);
  data_source_free(&s);
  /* A corrupt length: the index fails, naming the file and the record. */
  snprintf(p, sizeof p, "%s/train-00001-of-00002", d);
  write_shard(p, 1);
  CHECK(data_source_tfrecord(d, "train-", &s, err, sizeof err) != 0, "a corrupt length passed");
  CHECK(strstr(err, "train-00001-of-00002, record 1") && strstr(err, "corrupt length"),
        "corrupt length: '%s'", err);
  /* A corrupt data byte: the read fails naming the record; skipped, it is counted. */
  write_shard(p, 2);
  CHECK(data_source_tfrecord(d, "train-", &s, err, sizeof err) == 0, "%s", err);
  CHECK(run_epoch(&s, o, 0, &x, &y, &n, NULL, err, sizeof err) == -1, "a corrupt CRC passed");
  CHECK(strstr(err, "train-00001-of-00002, record 1") && strstr(err, "corrupt data"),
        "corrupt data: '%s'", err);
  free(x), free(y);
  uint64_t skipped;
  o.skip_bad = 1;
  CHECK(run_epoch(&s, o, 0, &x, &y, &n, &skipped, err, sizeof err) == 0 && n == 5 && skipped == 1,
        "skip-bad over a corrupt record: %d samples, %llu skipped (%s)", n,
        (unsigned long long)skipped, err);
  free(x), free(y);
  data_source_free(&s);
}

/* A list file: relative paths from its folder, labels as given; a bad line is named. */
static void test_filelist(void) {
  char p[600], err[4800];
  snprintf(p, sizeof p, "%s/folder/list.txt", dir);
  FILE *f = fopen(p, "w");
  fprintf(f, "# comment\na/00.jpg 4\n\nb/01.jpg 2\n");
  fclose(f);
  data_source_t s;
  CHECK(data_source_filelist(p, &s, err, sizeof err) == 0, "%s", err);
  CHECK(s.n == 2 && s.num_classes == 5 && s.labels[0] == 4 && strstr(s.paths[1], "folder/b/01.jpg"),
        "list: %zu samples, %d classes", s.n, s.num_classes);
  if (s.n == 2) {
    data_pipeline_opts_t o;
    data_pipeline_defaults(&o);
    o.image_size = 8, o.batch = 2, o.shuffle = 0;
    float *x;
    int32_t *y;
    int n;
    CHECK(run_epoch(&s, o, 0, &x, &y, &n, NULL, err, sizeof err) == 0 && n == 2 && y[0] == 4,
          "list epoch: %s", err);
    free(x), free(y);
  }
  data_source_free(&s);
  f = fopen(p, "w");
  fprintf(f, "a/00.jpg 1\na/02.png cat\n");
  fclose(f);
  CHECK(data_source_filelist(p, &s, err, sizeof err) != 0 && strstr(err, "line 2"),
        "a bad line: '%s'", err);
}

static void test_crops(void) {
  data_rng_t r;
  data_rng_init(&r, 1, 2);
  for (int i = 0; i < 2000; i++) {
    int w = 1 + i % 300, h = 1 + (i * 7) % 200;
    data_box_t b = data_random_resized_crop(w, h, 0.08, 1, 0.75, 4.0 / 3, &r);
    CHECK(b.w >= 1 && b.h >= 1 && b.x >= 0 && b.y >= 0 && b.x + b.w <= w && b.y + b.h <= h,
          "crop %g %g %g %g outside %dx%d", b.x, b.y, b.w, b.h, w, h);
  }
}

static int tool(int argc, char **argv) {
  char err[4800];
  if (argc == 5 && strcmp(argv[1], "decode") == 0) {
    size_t len;
    uint8_t *b = slurp(argv[2], &len);
    data_pixels_t px = {0};
    if (!b || data_image_decode(b, len, atoi(argv[3]), 0, 0, &px, err, sizeof err) != 0) {
      fprintf(stderr, "%s: %s\n", argv[2], b ? err : "cannot read");
      return 1;
    }
    write_file(argv[4], px.pixels, (size_t)px.width * px.height * px.channels);
    printf("%d %d %d\n", px.width, px.height, px.channels);
    free(b);
    data_pixels_free(&px);
    return 0;
  }
  if (argc == 6 && strcmp(argv[1], "crops") == 0) {
    int w = atoi(argv[2]), h = atoi(argv[3]), n = atoi(argv[4]);
    data_rng_t r;
    data_rng_init(&r, strtoull(argv[5], NULL, 10), 0);
    for (int i = 0; i < n; i++) {
      data_box_t b = data_random_resized_crop(w, h, 0.08, 1, 0.75, 4.0 / 3, &r);
      printf("%g %g %g %g\n", b.x, b.y, b.w, b.h);
    }
    return 0;
  }
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "eval") == 0) {
    data_source_t s;
    if (data_source_imagefolder(argv[2], &s, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    data_pipeline_opts_t o;
    data_pipeline_defaults(&o);
    o.image_size = atoi(argv[3]), o.shuffle = 0, o.batch = 8, o.threads = 2;
    o.full_decode = argc == 6 && strcmp(argv[5], "full") == 0;
    float *x;
    int32_t *y;
    int n;
    if (run_epoch(&s, o, 0, &x, &y, &n, NULL, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    write_file(argv[4], x, sizeof(float) * n * 3 * o.image_size * o.image_size);
    printf("%d\n", n);
    free(x), free(y);
    data_source_free(&s);
    return 0;
  }
  fprintf(stderr, "usage: see tests/test_data_images.c\n");
  return 2;
}

/* The resample's flip and layouts: a flipped output is the unflipped one mirrored, and
   NHWC is NCHW transposed, exactly, for RGB and grey, with filter taps that reach past
   the box (a downscale) and an upscale. */
static void test_resample_flip(void) {
  const float mean[3] = {0.4f, 0.5f, 0.6f}, std[3] = {0.2f, 0.25f, 0.3f};
  for (int C = 1; C <= 3; C += 2)
    for (int up = 0; up < 2; up++) {
      data_pixels_t px = {0};
      px.width = 37, px.height = 29, px.channels = C;
      px.pixels = malloc((size_t)37 * 29 * C);
      for (int i = 0; px.pixels && i < 37 * 29 * C; i++) px.pixels[i] = (uint8_t)(i * 7919 % 251);
      const int W = up ? 50 : 13, H = up ? 40 : 11;
      size_t n = (size_t)C * W * H;
      float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
      float *t = malloc(sizeof(float) * n);
      data_box_t box = {3.5, 2.25, 30, 20};
      CHECK(px.pixels && a && b && t && data_resample(&px, box, W, H, 0, mean, std, 0, a) == 0 &&
            data_resample(&px, box, W, H, 1, mean, std, 0, b) == 0 &&
            data_resample(&px, box, W, H, 0, mean, std, 1, t) == 0, "resample failed");
      int mirrored = 1, transposed = 1;
      for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
          for (int x = 0; x < W; x++) {
            float v = a[((size_t)c * H + y) * W + x];
            if (v != b[((size_t)c * H + y) * W + (W - 1 - x)]) mirrored = 0;
            if (v != t[((size_t)y * W + x) * C + c]) transposed = 0;
          }
      CHECK(mirrored, "%d channel(s), %s: the flipped output is not the mirror image", C,
            up ? "upscale" : "downscale");
      CHECK(transposed, "%d channel(s), %s: NHWC is not NCHW transposed", C,
            up ? "upscale" : "downscale");
      free(a), free(b), free(t);
      data_pixels_free(&px);
    }
}

int main(int argc, char **argv) {
  if (argc > 1) return tool(argc, argv);
  snprintf(dir, sizeof dir, "/tmp/test_data_images.XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_crc();
  test_resample_flip();
  test_decode();
  test_region();
  test_bad_images();
  test_crops();
  test_pipeline();
  test_stream();
  test_filelist();
  test_pipeline_bad();
  test_tfrecord();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (!failures) printf("test_data_images: all checks passed\n");
  return failures ? 1 : 0;
}

#endif /* HVD_NO_IMAGES */
