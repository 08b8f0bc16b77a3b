/* data/transform.c: torchvision's ImageNet transforms on decoded pixels:
   RandomResizedCrop's sampling (its get_params, draw for draw), Resize + CenterCrop as
   one box, and PIL's bilinear resampling of a box (Pillow's Resample.c: a triangle
   filter whose support grows with the downscale factor), with flip and normalisation
   fused into the write of the output tensor. */
#include "data/data.h"

#include <math.h>
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
    c->lo[i] = lo;
    c->n[i] = n;
  }
  return 0;
}

static void coeffs_free(coeffs_t *c) {
  free(c->lo);
  free(c->k);
}

/* The horizontal pass for C channels (3 and 1 spelled out, so the compiler keeps the
   sums in registers). */
static void pass_h(const uint8_t *row, const coeffs_t *cx, int out_w, int C, float *t) {
  for (int x = 0; x < out_w; x++) {
    const float *k = cx->k + (size_t)x * cx->ksize;
    const uint8_t *p = row + (size_t)cx->lo[x] * C;
    const int n = cx->n[x];
    if (C == 3) {
      float s0 = 0, s1 = 0, s2 = 0;
      for (int j = 0; j < n; j++) {
        s0 += k[j] * p[3 * j];
        s1 += k[j] * p[3 * j + 1];
        s2 += k[j] * p[3 * j + 2];
      }
      t[3 * x] = s0, t[3 * x + 1] = s1, t[3 * x + 2] = s2;
    } else {
      for (int c = 0; c < C; c++) {
        float s = 0;
        for (int j = 0; j < n; j++) s += k[j] * p[j * C + c];
        t[x * C + c] = s;
      }
    }
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
  /* The horizontal pass over the rows the vertical pass reads, into the scratch kept
     with the pixels (a thread's buffers are reused image after image), then the vertical
     pass a whole output row at a time (contiguous: it vectorises). */
  int r0 = cy.lo[0], r1 = cy.lo[0] + cy.n[0];
  for (int i = 0; i < out_h; i++) {
    if (cy.lo[i] < r0) r0 = cy.lo[i];
    if (cy.lo[i] + cy.n[i] > r1) r1 = cy.lo[i] + cy.n[i];
  }
  const size_t row_f = (size_t)out_w * C;
  const size_t need = (size_t)(r1 - r0 + 1) * row_f;
  if (src->scratch_cap < need) {
    float *g = realloc(src->scratch, sizeof(float) * need);
    if (!g) goto done;
    src->scratch = g;
    src->scratch_cap = need;
  }
  float *tmp = src->scratch, *acc = tmp + (size_t)(r1 - r0) * row_f;
  for (int y = r0; y < r1; y++)
    pass_h(src->pixels + (size_t)y * W * C, &cx, out_w, C, tmp + (size_t)(y - r0) * row_f);
  float scale[3], shift[3];
  for (int c = 0; c < C; c++) {
    scale[c] = 1.0f / (255.0f * std[c]);
    shift[c] = mean[c] / std[c];
  }
  for (int y = 0; y < out_h; y++) {
    const float *k = cy.k + (size_t)y * cy.ksize;
    const float *base = tmp + (size_t)(cy.lo[y] - r0) * row_f;
    for (size_t i = 0; i < row_f; i++) acc[i] = k[0] * base[i];
    for (int j = 1; j < cy.n[y]; j++) {
      const float *r = base + (size_t)j * row_f, kj = k[j];
      for (size_t i = 0; i < row_f; i++) acc[i] += kj * r[i];
    }
    for (int x = 0; x < out_w; x++) {
      int ox = flip ? out_w - 1 - x : x;
      for (int c = 0; c < C; c++) {
        float v = acc[x * C + c];
        /* Pillow rounds each pass to 8 bits; clamping here keeps the range it has. */
        v = v < 0 ? 0 : v > 255 ? 255 : v;
        size_t o = nhwc ? ((size_t)y * out_w + ox) * C + c
                        : ((size_t)c * out_h + y) * out_w + ox;
        out[o] = v * scale[c] - shift[c];
      }
    }
  }
  rc = 0;
done:
  coeffs_free(&cx);
  coeffs_free(&cy);
  return rc;
}
