/* data/transform.c: torchvision's ImageNet transforms on decoded pixels:
   RandomResizedCrop's sampling (its get_params, draw for draw), Resize + CenterCrop as
   one box, and PIL's bilinear resampling of a box (Pillow's Resample.c: a triangle
   filter whose support grows with the downscale factor), with flip and normalisation
   fused into the write of the output tensor. The resample is separable and runs row by
   row: precomputed weights, loops of one length (weights padded with zeros), the 8-bit
   vertical pass vectorised by the compiler (built with -O3), the horizontal one on RGB
   pixels loaded as four-float vectors straight from the vertical pass's row. */
#include "data/data.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

uint64_t data_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void data_rng_init(data_rng_t *r, uint64_t seed, uint64_t stream) {
  r->state = data_mix64(seed ^ data_mix64(stream + 0x6a09e667f3bcc909ull));
}

double data_rng_uniform(data_rng_t *r) {
  r->state += 0x9e3779b97f4a7c15ull;
  return (double)(data_mix64(r->state) >> 11) * 0x1.0p-53;
}

/* torch.randint(0, n): uniform in [0, n). */
static int rng_below(data_rng_t *r, int n) {
  int v = (int)(data_rng_uniform(r) * n);
  return v < n ? v : n - 1;
}

data_box_t data_random_resized_crop(int width, int height, double scale_min, double scale_max,
                                    double ratio_min, double ratio_max, data_rng_t *rng) {
  double area = (double)width * height;
  double lr0 = log(ratio_min), lr1 = log(ratio_max);
  for (int t = 0; t < 10; t++) {
    double target = area * (scale_min + (scale_max - scale_min) * data_rng_uniform(rng));
    double ar = exp(lr0 + (lr1 - lr0) * data_rng_uniform(rng));
    /* Python's round(): half to even, which nearbyint does in the default mode. */
    int w = (int)nearbyint(sqrt(target * ar)), h = (int)nearbyint(sqrt(target / ar));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      int i = rng_below(rng, height - h + 1);
      int j = rng_below(rng, width - w + 1);
      return (data_box_t){j, i, w, h};
    }
  }
  double in_ratio = (double)width / height;
  int w = width, h = height;
  if (in_ratio < ratio_min) h = (int)nearbyint(w / ratio_min);
  else if (in_ratio > ratio_max) w = (int)nearbyint(h * ratio_max);
  return (data_box_t){(width - w) / 2, (height - h) / 2, w, h};
}

data_box_t data_center_crop_box(int width, int height, int resize, int size) {
  /* torchvision's Resize(int): the shorter side to resize, the longer int(resize * long /
     short); CenterCrop: top = int(round((h - size) / 2.0)). */
  int rw, rh;
  if (width <= height) {
    rw = resize;
    rh = (int)((double)resize * height / width);
  } else {
    rh = resize;
    rw = (int)((double)resize * width / height);
  }
  double top = nearbyint((rh - size) / 2.0), left = nearbyint((rw - size) / 2.0);
  double sx = (double)width / rw, sy = (double)height / rh;
  return (data_box_t){left * sx, top * sy, size * sx, size * sy};
}

/* Pillow's precompute_coeffs for the bilinear filter: for output i, inputs
   [lo[i], lo[i] + n[i]) with weights k[i * ksize ...]. */
typedef struct {
  int ksize;
  int *lo, *n;
  float *k;
} coeffs_t;

static int coeffs_make(coeffs_t *c, int in_size, double in0, double in1, int out_size) {
  double scale = (in1 - in0) / out_size, fscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * fscale;
  c->ksize = (int)ceil(support) * 2 + 1;
  c->lo = malloc(sizeof(int) * out_size * 2);
  c->k = malloc(sizeof(float) * (size_t)out_size * c->ksize);
  if (!c->lo || !c->k) return -1;
  c->n = c->lo + out_size;
  for (int i = 0; i < out_size; i++) {
    double center = in0 + (i + 0.5) * scale, ww = 0, ss = 1.0 / fscale;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
    if (lo < 0) lo = 0;
    if (hi > in_size) hi = in_size;
    int n = hi - lo;
    if (n > c->ksize) n = c->ksize;
    if (n < 1) {   /* a box outside the image (cannot happen for in-range boxes) */
      lo = lo >= in_size ? in_size - 1 : lo;
      n = 1;
    }
    float *k = c->k + (size_t)i * c->ksize;
    for (int x = 0; x < n; x++) {
      double t = fabs((x + lo - center + 0.5) * ss);
      k[x] = (float)(t < 1.0 ? 1.0 - t : 0.0);
      ww += k[x];
    }
    for (int x = 0; x < n; x++) k[x] = ww != 0 ? (float)(k[x] / ww) : (x == 0);
    for (int x = n; x < c->ksize; x++) k[x] = 0;   /* every output reads ksize inputs */
    c->lo[i] = lo;
    c->n[i] = n;
  }
  return 0;
}

static void coeffs_free(coeffs_t *c) {
  free(c->lo);
  free(c->k);
}

/* The vertical pass of output row y over columns [c0, c1) of src (uint8, C channels
   interleaved) into acc (floats): contiguous loops over the row, which the compiler
   vectorises (this file is built with -O3). */
static void pass_v(const uint8_t *src, size_t stride, const float *k, int n, size_t len,
                   float *restrict acc) {
  const float k0 = k[0];
  for (size_t i = 0; i < len; i++) acc[i] = k0 * src[i];
  int j = 1;
  for (; j + 1 < n; j += 2) {   /* two taps per sweep: half the loads and stores of acc */
    const uint8_t *restrict a = src + (size_t)j * stride, *restrict b = a + stride;
    const float ka = k[j], kb = k[j + 1];
    for (size_t i = 0; i < len; i++) acc[i] += ka * a[i] + kb * b[i];
  }
  for (; j < n; j++) {
    const uint8_t *restrict a = src + (size_t)j * stride;
    const float ka = k[j];
    for (size_t i = 0; i < len; i++) acc[i] += ka * a[i];
  }
}

/* Where the output goes: pixel x of row y, channel c at row + x * px + c * ch (NCHW:
   px 1, ch a plane; NHWC: px C, ch 1); a flipped row starts at its end. */
typedef struct {
  int C, out_w, flip;
  ptrdiff_t px, ch;
  float scale[3], shift[3];
} out_map_t;

/* Pillow's passes keep 0..255; then (v / 255 - mean) / std. Compiles to maxss, minss. */
static inline float finish(float v, float scale, float shift) {
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return v * scale - shift;
}

/* Four floats as one SSE/NEON register (GCC's and Clang's vector extension): an RGB
   pixel's three floats (and the next one's first) loaded at once, summed in one
   multiply-add per tap, clamped and normalised in one register too. Aligned as a float:
   the loads are unaligned, at any pixel. */
typedef float v4f __attribute__((vector_size(16), aligned(4)));
typedef int v4i __attribute__((vector_size(16)));

/* finish() on the four lanes: compares give all-ones masks, so each clamp is an and
   (and an or for the upper bound), no branch. */
static inline v4f finish4(v4f v, v4f scale, v4f shift) {
  const v4f zero = {0, 0, 0, 0}, top = {255.0f, 255.0f, 255.0f, 255.0f};
  v = (v4f)((v4i)v & (v > zero));
  v4i below = v < top;
  v = (v4f)(((v4i)v & below) | ((v4i)top & ~below));
  return v * scale - shift;
}

/* The horizontal pass of one RGB row (the vertical pass's floats from column c0 on,
   interleaved, padded with zero pixels and one float more, so every 4-float load stays
   inside), every output reading cx->ksize inputs (the weights past n[x] are 0: one loop
   length, no branch), finished and written. The fourth lane carries the next pixel's
   red and is never stored. */
static inline void pass_h_rgb_k(const float *row, const coeffs_t *cx, int c0,
                                 const out_map_t *m, float *dst, const int K) {
  const int W = m->out_w;
  ptrdiff_t step = m->flip ? -m->px : m->px, ch = m->ch;
  float *o = dst + (m->flip ? (ptrdiff_t)(W - 1) * m->px : 0);
  const v4f scale = {m->scale[0], m->scale[1], m->scale[2], 0};
  const v4f shift = {m->shift[0], m->shift[1], m->shift[2], 0};
  for (int x = 0; x < W; x++, o += step) {
    const float *k = cx->k + (size_t)x * K;
    const float *p = row + 3 * (size_t)(cx->lo[x] - c0);
    v4f s = {0, 0, 0, 0};
    for (int j = 0; j < K; j++) s += k[j] * *(const v4f *)(p + 3 * j);
    s = finish4(s, scale, shift);
    o[0] = s[0];
    o[ch] = s[1];
    o[2 * ch] = s[2];
  }
}

/* The common filter lengths (upscaling: 3; downscaling up to 2x: 5; up to 3x: 7) with
   the tap count known, so the compiler unrolls the tap loop. */
static void pass_h_rgb(const float *row, const coeffs_t *cx, int c0, const out_map_t *m,
                       float *dst) {
  switch (cx->ksize) {
  case 3: pass_h_rgb_k(row, cx, c0, m, dst, 3); break;
  case 5: pass_h_rgb_k(row, cx, c0, m, dst, 5); break;
  case 7: pass_h_rgb_k(row, cx, c0, m, dst, 7); break;
  default: pass_h_rgb_k(row, cx, c0, m, dst, cx->ksize);
  }
}

/* The same for grey rows (one float per pixel). */
static void pass_h_grey(const float *row, const coeffs_t *cx, int c0, const out_map_t *m,
                        float *dst) {
  const int K = cx->ksize, W = m->out_w;
  ptrdiff_t step = m->flip ? -m->px : m->px;
  float *o = dst + (m->flip ? (ptrdiff_t)(W - 1) * m->px : 0);
  for (int x = 0; x < W; x++, o += step) {
    const float *k = cx->k + (size_t)x * K, *p = row + (cx->lo[x] - c0);
    float s = 0;
    for (int j = 0; j < K; j++) s += k[j] * p[j];
    o[0] = finish(s, m->scale[0], m->shift[0]);
  }
}

int data_resample(data_pixels_t *src, data_box_t box, int out_w, int out_h, int flip,
                  const float mean[3], const float std[3], int nhwc, float *out) {
  const int C = src->channels, W = src->width;
  coeffs_t cx = {0}, cy = {0};
  int rc = -1;
  if (coeffs_make(&cx, src->width, box.x, box.x + box.w, out_w) != 0 ||
      coeffs_make(&cy, src->height, box.y, box.y + box.h, out_h) != 0)
    goto done;
  /* Separable: the vertical pass first, straight from the 8-bit rows and only over the
     columns the horizontal pass reads, then the horizontal pass of that one row into the
     output. The two passes are linear, so their order does not change the result (Pillow
     runs them the other way round); this way the costly pass runs over out_h rows, not
     the crop's height, and no intermediate image is stored. */
  int c0 = cx.lo[0], c1 = cx.lo[0] + cx.n[0];
  for (int i = 0; i < out_w; i++) {
    if (cx.lo[i] < c0) c0 = cx.lo[i];
    if (cx.lo[i] + cx.n[i] > c1) c1 = cx.lo[i] + cx.n[i];
  }
  const size_t npx = (size_t)(c1 - c0) + (size_t)cx.ksize, len = (size_t)(c1 - c0) * C;
  /* The vertical pass's row (len floats), padded with npx - (c1 - c0) zero pixels, which
     the padded taps read, and a float for the last pixel's 4-float load. */
  const size_t need = npx * C + 4;
  if (src->scratch_cap < need) {
    float *g = realloc(src->scratch, sizeof(float) * need);
    if (!g) goto done;
    src->scratch = g;
    src->scratch_cap = need;
  }
  float *row = src->scratch;
  for (size_t i = len; i < need; i++) row[i] = 0;
  out_map_t m = {.C = C, .out_w = out_w, .flip = flip,
                 .px = nhwc ? C : 1, .ch = nhwc ? 1 : (ptrdiff_t)out_w * out_h};
  for (int c = 0; c < C; c++) {
    m.scale[c] = 1.0f / (255.0f * std[c]);
    m.shift[c] = mean[c] / std[c];
  }
  const size_t stride = (size_t)W * C;
  for (int y = 0; y < out_h; y++) {
    pass_v(src->pixels + (size_t)cy.lo[y] * stride + (size_t)c0 * C, stride,
           cy.k + (size_t)y * cy.ksize, cy.n[y], len, row);
    float *dst = out + (nhwc ? (size_t)y * out_w * C : (size_t)y * out_w);
    if (C == 3) {
      pass_h_rgb(row, &cx, c0, &m, dst);
    } else {
      pass_h_grey(row, &cx, c0, &m, dst);
    }
  }
  rc = 0;
done:
  coeffs_free(&cx);
  coeffs_free(&cy);
  return rc;
}
