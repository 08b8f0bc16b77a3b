/* nn/conv_winograd.c: stride-1 3x3 and 5x5 convolutions by Winograd F(2x2, 3x3) and
   F(2x2, 5x5).

   Each 2x2 output tile is computed from an n x n input tile (n = r + 1 for an r x r
   kernel) with n*n multiplications per (input, output) channel pair instead of 4*r*r
   (16 instead of 36 for 3x3, 36 instead of 100 for 5x5): the input tiles are transformed
   (V = B^T d B), each of the n*n transformed positions e becomes one GEMM
   M_e[co][t] = U_e[co][ci] V_e[ci][t] over the tiles t of a group of samples, and the
   output tiles are transformed back (Y = A^T M A). The GEMMs are OpenBLAS; the
   transforms are SSE vectors over 4 tiles of a tile row.

   Used for conv2d forward; for conv2d's input gradient, which for a stride-1
   convolution is again one: dx = conv(dy, w flipped and transposed, pad r - 1 - pad);
   and for the weight gradient through the same transforms (nn_wino_dweight_run).
   Deterministic: no reduction depends on timing.
   Matrices: Toom-Cook at the points 0, 1, -1 (, 2, -2) and infinity (B^T and G checked
   to give A^T((G g) . (B^T d)) = the correlation of d and g). Accuracy: within a few
   float32 ulps of the direct sum for 3x3; for 5x5 about 3e-6 (y, dx) and 1e-5 (dw) of
   the largest value (tests/test_nn_conv_winograd.c compares with the im2col path, the
   model tests with PyTorch). */
#include "nn/conv2d_internal.h"
#include "nn/simd_internal.h"

#include <cblas.h>
#include <string.h>

#if defined(__clang__)
#define WINO_LO(a, b) __builtin_shufflevector((a), (b), 0, 4, 1, 5)
#define WINO_HI(a, b) __builtin_shufflevector((a), (b), 2, 6, 3, 7)
#else
#define WINO_LO(a, b) __builtin_shuffle((a), (b), (nn_v4i){0, 4, 1, 5})
#define WINO_HI(a, b) __builtin_shuffle((a), (b), (nn_v4i){2, 6, 3, 7})
#endif

/* Tiles per GEMM: a group of whole samples with about this many tiles. */
int nn_wino_group_tiles = 64;

void nn_wino_plan(nn_wino_t *p, int r, int n, int ci, int co, int h, int w, int ph, int pw) {
  p->r = r;
  p->n = n;
  p->ci = ci;
  p->co = co;
  p->h = h;
  p->w = w;
  p->ph = ph;
  p->pw = pw;
  p->ho = h + 2 * ph - (r - 1);
  p->wo = w + 2 * pw - (r - 1);
  p->th = (p->ho + 1) / 2;
  p->tw = (p->wo + 1) / 2;
  int g = nn_wino_group_tiles / (p->th * p->tw);
  if (g < 1) g = 1;
  if (g > n) g = n;
  p->g = g;
  p->tw4 = (p->tw + 3) & ~3;
  /* tile rows read plane rows up to 2*th + r - 2, and 4 tiles from column 2b read up to
     column 2b + r + 6 (two 4-float loads per pair of tile columns) */
  p->hp = 2 * p->th + r - 1;
  p->wp = 2 * p->tw4 + r - 1;
  /* The 8-tile input transform (wino_input8) splits the plane into even and odd column
     planes of wp / 2 columns each: 8 tiles from tile column b read up to b + 7 + r / 2. */
  int split = 2 * (((p->tw + 7) & ~7) + 3);
  if (split > p->wp) p->wp = split;
}

static size_t wino_tiles(const nn_wino_t *p) { return (size_t)p->g * p->th * p->tw; }

/* Floats from one transformed position e to the next in V[e][ci][t] and M[e][co][t]:
   the transforms write (read) all (r+1)^2 of them at once, and a distance of a multiple
   of 4 KB would put them all in one L1 set (16 KB apart for 32 channels x 128 tiles:
   2x slower transforms); 16 floats more shifts each to its own cache line set. */
static size_t wino_sv(const nn_wino_t *p) { return (size_t)p->ci * wino_tiles(p) + 16; }
static size_t wino_sm(const nn_wino_t *p) { return (size_t)p->co * wino_tiles(p) + 16; }

size_t nn_wino_slot_floats(const nn_wino_t *p) {
  size_t e = (size_t)(p->r + 1) * (p->r + 1);
  /* padded plane, V, M (+4: the output transform reads a partial vector past the end) */
  return (size_t)p->hp * p->wp + e * wino_sv(p) + e * wino_sm(p) + 4 + 16;
}

/* d[0, n) = s[0, n): rows of 8 to 32 floats, where a call to memcpy costs more. */
static inline void wino_copy(float *d, const float *s, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) nn_v4_store(d + i, nn_v4_load(s + i));
  for (; i < n; i++) d[i] = s[i];
}

/* G for F(2, 3) and F(2, 5) (n x r). */
static const double wino_g3[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double wino_g5[6][5] = {
    {0.25, 0, 0, 0, 0},
    {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
    {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
    {0, 0, 0, 0, 1}};

static double wino_gm(int r, int i, int k) { return r == 3 ? wino_g3[i][k] : wino_g5[i][k]; }

/* Floats from one transformed position to the next in U and dU (co*ci, and 16 more for
   the reason of wino_sv). */
static size_t wino_su(const nn_wino_t *p) { return (size_t)p->co * p->ci + 16; }

size_t nn_wino_u_floats(const nn_wino_t *p) { return (size_t)(p->r + 1) * (p->r + 1) * wino_su(p); }

/* U_e[co][ci] = (G g G^T)_e with g = w[co][ci] (flip = 0), or for the input gradient
   (flip = 1, the plan's ci/co being the conv's c_out/c_in) g[y][x] = w[ci][co][r-1-y][r-1-x]. */
/* G as float vectors: gv[a][y] = G[a][y] in every lane. */
static void wino_gv(int r, nn_v4f gv[6][5]) {
  for (int a = 0; a <= r; a++)
    for (int y = 0; y < r; y++) gv[a][y] = nn_v4_set1((float)wino_gm(r, a, y));
}

void nn_wino_filter(const nn_wino_t *p, const float *w, int flip, float *u) {
  const int r = p->r, n = r + 1, rr = r * r;
  const size_t su = wino_su(p);
  nn_v4f gv[6][5];
  wino_gv(r, gv);
  /* Four consecutive input channels i at a time: U's 16 floats per (e, o) row are then
     written as vectors. */
  for (int o = 0; o < p->co; o++) {
    for (int i0 = 0; i0 < p->ci; i0 += 4) {
      int nl = p->ci - i0 < 4 ? p->ci - i0 : 4;
      nn_v4f g[5][5], t[6][5];
      for (int y = 0; y < r; y++)
        for (int x = 0; x < r; x++) {
          float v[4] = {0, 0, 0, 0};
          for (int l = 0; l < nl; l++) {
            int i = i0 + l;
            v[l] = flip ? w[((size_t)i * p->co + o) * rr + (r - 1 - y) * r + (r - 1 - x)]
                        : w[((size_t)o * p->ci + i) * rr + y * r + x];
          }
          g[y][x] = nn_v4_load(v);
        }
      for (int a = 0; a < n; a++)
        for (int x = 0; x < r; x++) {
          nn_v4f acc = gv[a][0] * g[0][x];
          for (int y = 1; y < r; y++) acc += gv[a][y] * g[y][x];
          t[a][x] = acc;
        }
      float *uo = u + (size_t)o * p->ci + i0;
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
          nn_v4f acc = t[a][0] * gv[b][0];
          for (int x = 1; x < r; x++) acc += t[a][x] * gv[b][x];
          float *d = uo + (size_t)(a * n + b) * su;
          if (nl == 4) {
            nn_v4_store(d, acc);
          } else {
            for (int l = 0; l < nl; l++) d[l] = acc[l];
          }
        }
    }
  }
}

/* out[i*os] = (B^T in)[i] for in[j*is], j < n. */
static inline void wino_bt(int r, const nn_v4f *in, int is, nn_v4f *out, int os) {
  if (r == 3) {
    nn_v4f i0 = in[0], i1 = in[is], i2 = in[2 * is], i3 = in[3 * is];
    out[0] = i0 - i2;
    out[os] = i1 + i2;
    out[2 * os] = i2 - i1;
    out[3 * os] = i1 - i3;
  } else {
    nn_v4f i0 = in[0], i1 = in[is], i2 = in[2 * is], i3 = in[3 * is], i4 = in[4 * is],
           i5 = in[5 * is];
    const nn_v4f c2 = nn_v4_set1(2.0f), c4 = nn_v4_set1(4.0f), c5 = nn_v4_set1(5.0f);
    nn_v4f a = i4 - c4 * i2, b = i3 - c4 * i1, c = i4 - i2, d = c2 * (i3 - i1);
    out[0] = c4 * i0 - c5 * i2 + i4;
    out[os] = a + b;
    out[2 * os] = a - b;
    out[3 * os] = c + d;
    out[4 * os] = c - d;
    out[5 * os] = c4 * i1 - c5 * i3 + i5;
  }
}

/* (A^T in)[0] and [1] for in[j*is], j < n. */
/* out[b*os] = (A y)[b] = A^T[0][b] y0 + A^T[1][b] y1, b < n: the transpose of wino_at. */
static inline void wino_a(int r, nn_v4f y0, nn_v4f y1, nn_v4f *out, int os) {
  out[0] = y0;
  out[os] = y0 + y1;
  out[2 * os] = y0 - y1;
  if (r == 3) {
    out[3 * os] = -y1;
  } else {
    const nn_v4f c2 = nn_v4_set1(2.0f);
    out[3 * os] = y0 + c2 * y1;
    out[4 * os] = y0 - c2 * y1;
    out[5 * os] = y1;
  }
}

static inline void wino_at(int r, const nn_v4f *in, int is, nn_v4f *o0, nn_v4f *o1) {
  if (r == 3) {
    *o0 = in[0] + in[is] + in[2 * is];
    *o1 = in[is] - in[2 * is] - in[3 * is];
  } else {
    nn_v4f p1 = in[is] + in[2 * is], m1 = in[is] - in[2 * is];
    nn_v4f p2 = in[3 * is] + in[4 * is], m2 = in[3 * is] - in[4 * is];
    *o0 = in[0] + p1 + p2;
    *o1 = m1 + nn_v4_set1(2.0f) * m2 + in[5 * is];
  }
}

/* ---- The input transform 8 tiles at a time (AVX2 + FMA, chosen at run time) ---- */

typedef float wino_v8 __attribute__((vector_size(32)));
#define WINO_AVX2 __attribute__((target("avx2,fma")))

WINO_AVX2 static inline wino_v8 wino_v8_load(const float *p) {
  wino_v8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
WINO_AVX2 static inline wino_v8 wino_v8_set1(float x) { return (wino_v8){x, x, x, x, x, x, x, x}; }

/* wino_bt on 8 tiles. */
WINO_AVX2 static inline void wino_bt8(int r, const wino_v8 *in, int is, wino_v8 *out, int os) {
  if (r == 3) {
    wino_v8 i0 = in[0], i1 = in[is], i2 = in[2 * is], i3 = in[3 * is];
    out[0] = i0 - i2;
    out[os] = i1 + i2;
    out[2 * os] = i2 - i1;
    out[3 * os] = i1 - i3;
  } else {
    wino_v8 i0 = in[0], i1 = in[is], i2 = in[2 * is], i3 = in[3 * is], i4 = in[4 * is],
            i5 = in[5 * is];
    const wino_v8 c2 = wino_v8_set1(2.0f), c4 = wino_v8_set1(4.0f), c5 = wino_v8_set1(5.0f);
    wino_v8 a = i4 - c4 * i2, b = i3 - c4 * i1, c = i4 - i2, d = c2 * (i3 - i1);
    out[0] = c4 * i0 - c5 * i2 + i4;
    out[os] = a + b;
    out[2 * os] = a - b;
    out[3 * os] = c + d;
    out[4 * os] = c - d;
    out[5 * os] = c4 * i1 - c5 * i3 + i5;
  }
}

/* wino_input for rows of more than 4 tiles: the 4-tile version spends most of its time
   separating even and odd columns (two shuffles per tap and 4 tiles). Here each channel's
   plane is copied once into an even and an odd column plane (eo[0], eo[1]; wq columns
   each), where tap k of 8 consecutive tiles from tile column b is one contiguous load:
   padded column 2 (b + l) + k lies in plane k % 2 at b + l + k / 2. Channels are the
   outer loop, so a vector of fewer than 8 tiles may be stored whole: its extra lanes fall
   on tiles written later (the next tile row, sample or channel; past the last channel,
   the 16 floats of wino_sv's slack), and a masked store costs several times more. The
   same arithmetic, in the same order, as wino_input: bit-identical results. */
WINO_AVX2 static void wino_input8(const nn_wino_t *p, const float *x, float *plane, float *V,
                                  int gn) {
  const int r = p->r, n = r + 1;
  const int th = p->th, tw = p->tw, hp = p->hp, wq = p->wp / 2, H = p->h, W = p->w;
  const size_t T = (size_t)gn * th * tw, st = (size_t)th * tw, sv = wino_sv(p);
  float *eo[2] = {plane, plane + (size_t)hp * wq};
  memset(plane, 0, sizeof(float) * (size_t)2 * hp * wq);
  /* Input column j is padded column j + pw: even j go to plane pw % 2, odd ones to the
     other, each at (j + pw) / 2. */
  float *even_dst = eo[p->pw & 1] + (p->pw >> 1), *odd_dst = eo[(p->pw & 1) ^ 1] + ((p->pw + 1) >> 1);
  for (int c = 0; c < p->ci; c++) {
    for (int q = 0; q < gn; q++) {
      const float *xc = x + ((size_t)q * p->ci + c) * H * W;
      for (int i = 0; i < H; i++) {
        const float *src = xc + (size_t)i * W;
        const size_t row = (size_t)(i + p->ph) * wq;
        float *ev = even_dst + row, *od = odd_dst + row;
        int j = 0;
        for (; j + 1 < W; j += 2) {
          ev[j >> 1] = src[j];
          od[j >> 1] = src[j + 1];
        }
        if (j < W) ev[j >> 1] = src[j];
      }
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 8) {
          wino_v8 d[6][6], t[6][6], v[6][6];
          for (int i = 0; i < n; i++) {
            const size_t row = (size_t)(2 * a + i) * wq + (size_t)b;
            for (int k = 0; k < n; k++) d[i][k] = wino_v8_load(eo[k & 1] + row + (k >> 1));
          }
          for (int k = 0; k < n; k++) wino_bt8(r, &d[0][k], 6, &t[0][k], 6);
          for (int i = 0; i < n; i++) wino_bt8(r, &t[i][0], 1, &v[i][0], 1);
          float *dst = V + (size_t)c * T + (size_t)q * st + (size_t)a * tw + b;
          for (int i = 0; i < n; i++)
            for (int k = 0; k < n; k++)
              __builtin_memcpy(dst + (size_t)(i * n + k) * sv, &v[i][k], sizeof v[i][k]);
        }
      }
    }
  }
}

/* V[e][ci][t] = (B^T d B)_e for the input tiles t of samples [0, gn) of x. The padding
   of the plane stays zero: every channel copies its rows into the same interior. */
static void wino_input(const nn_wino_t *p, const float *x, float *plane, float *V, int gn) {
  if (p->tw > 4 && nn_simd_level() >= 2) {
    wino_input8(p, x, plane, V, gn);
    return;
  }
  const int r = p->r, n = r + 1;
  const int th = p->th, tw = p->tw, hp = p->hp, wp = p->wp, H = p->h, W = p->w;
  const size_t T = (size_t)gn * th * tw, st = (size_t)th * tw, sv = wino_sv(p);
  memset(plane, 0, sizeof(float) * (size_t)hp * wp);
  for (int q = 0; q < gn; q++) {
    for (int c = 0; c < p->ci; c++) {
      const float *xc = x + ((size_t)q * p->ci + c) * H * W;
      for (int i = 0; i < H; i++)
        wino_copy(plane + (size_t)(i + p->ph) * wp + p->pw, xc + (size_t)i * W, W);
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 4) {
          nn_v4f d[6][6], t[6][6], v[6][6];
          for (int i = 0; i < n; i++) {
            const float *row = plane + (size_t)(2 * a + i) * wp + 2 * b;
            for (int k = 0; k < n; k += 2) {
              nn_v4f l0 = nn_v4_load(row + k), l1 = nn_v4_load(row + k + 4);
              d[i][k] = NN_V4_EVENS(l0, l1);
              d[i][k + 1] = NN_V4_ODDS(l0, l1);
            }
          }
          for (int k = 0; k < n; k++) wino_bt(r, &d[0][k], 6, &t[0][k], 6);
          for (int i = 0; i < n; i++) wino_bt(r, &t[i][0], 1, &v[i][0], 1);
          size_t off = (size_t)q * st + (size_t)a * tw + b;
          int nv = tw - b < 4 ? tw - b : 4;
          for (int i = 0; i < n; i++) {
            for (int k = 0; k < n; k++) {
              float *dst = V + (size_t)(i * n + k) * sv + (size_t)c * T + off;
              if (nv == 4) {
                nn_v4_store(dst, v[i][k]);
              } else {
                for (int l = 0; l < nv; l++) dst[l] = v[i][k][l];
              }
            }
          }
        }
      }
    }
  }
}

/* Samples [i0, i0 + gn): transforms, n*n GEMMs, inverse transforms. */
static void wino_group(const nn_wino_t *p, const float *x, const float *u, const float *bias,
                       int accumulate, float *y, float *ws, int gn) {
  const int r = p->r, n = r + 1, ne = n * n;
  const int th = p->th, tw = p->tw, hp = p->hp, wp = p->wp;
  const size_t T = (size_t)gn * th * tw, st = (size_t)th * tw;
  float *plane = ws;
  float *V = plane + (size_t)hp * wp;
  const size_t sv = wino_sv(p), ms = wino_sm(p);
  float *M = V + (size_t)ne * sv;
  wino_input(p, x, plane, V, gn);
  /* The n*n GEMMs. */
  const size_t su = wino_su(p);
  for (int e = 0; e < ne; e++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->co, (int)T, p->ci, 1.0f,
                u + e * su, p->ci, V + (size_t)e * sv, (int)T, 0.0f, M + (size_t)e * ms, (int)T);
  /* Output transform. */
  for (int q = 0; q < gn; q++) {
    for (int o = 0; o < p->co; o++) {
      float *yo = y + ((size_t)q * p->co + o) * p->ho * p->wo;
      const nn_v4f bv = nn_v4_set1(bias ? bias[o] : 0.0f);
      const float *mo = M + (size_t)o * T + (size_t)q * st;
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 4) {
          const float *mp = mo + (size_t)a * tw + b;
          nn_v4f m[36], s0[6], s1[6];
          for (int e = 0; e < ne; e++) m[e] = nn_v4_load(mp + e * ms);
          for (int k = 0; k < n; k++) wino_at(r, &m[k], n, &s0[k], &s1[k]);
          nn_v4f o00, o01, o10, o11;
          wino_at(r, s0, 1, &o00, &o01);
          wino_at(r, s1, 1, &o10, &o11);
          int ncol = p->wo - 2 * b < 8 ? p->wo - 2 * b : 8;
          for (int i = 0; i < 2 && 2 * a + i < p->ho; i++) {
            nn_v4f e0 = (i ? o10 : o00) + bv, e1 = (i ? o11 : o01) + bv;
            nn_v4f lo = WINO_LO(e0, e1), hi = WINO_HI(e0, e1);
            float *yr = yo + (size_t)(2 * a + i) * p->wo + 2 * b;
            if (ncol == 8) {
              if (accumulate) {
                lo += nn_v4_load(yr);
                hi += nn_v4_load(yr + 4);
              }
              nn_v4_store(yr, lo);
              nn_v4_store(yr + 4, hi);
            } else {
              float tmp[8];
              nn_v4_store(tmp, lo);
              nn_v4_store(tmp + 4, hi);
              for (int l = 0; l < ncol; l++) yr[l] = accumulate ? yr[l] + tmp[l] : tmp[l];
            }
          }
        }
      }
    }
  }
}

void nn_wino_run(const nn_wino_t *p, const float *x, const float *u, const float *bias,
                 int accumulate, float *y, float *ws, int i0, int i1) {
  const size_t xs = (size_t)p->ci * p->h * p->w, ys = (size_t)p->co * p->ho * p->wo;
  for (int i = i0; i < i1; i += p->g) {
    int gn = i1 - i < p->g ? i1 - i : p->g;
    wino_group(p, x + (size_t)i * xs, u, bias, accumulate, y + (size_t)i * ys, ws, gn);
  }
}

size_t nn_wino_du_floats(const nn_wino_t *p) { return nn_wino_u_floats(p); }

/* Weight gradient: y = A^T (U . V) A per tile and U = G g G^T give
   dU_e = sum over tiles (A dy A^T)_e V_e and dg = G^T dU G. Samples [0, gn). */
static void wino_dweight_group(const nn_wino_t *p, const float *x, const float *dy, float *du,
                               float *ws, int gn) {
  const int r = p->r, n = r + 1, ne = n * n;
  const int th = p->th, tw = p->tw, wp = p->wp;
  const size_t T = (size_t)gn * th * tw, st = (size_t)th * tw;
  float *plane = ws;
  float *V = plane + (size_t)p->hp * wp;
  const size_t sv = wino_sv(p), sd = wino_sm(p);
  float *D = V + (size_t)ne * sv;
  wino_input(p, x, plane, V, gn);
  /* dy tiles (2x2, zero past the output's edge) to D[e][co][t] = (A dy A^T)_e. */
  memset(plane, 0, sizeof(float) * (size_t)p->hp * wp);
  for (int q = 0; q < gn; q++) {
    for (int o = 0; o < p->co; o++) {
      const float *dyo = dy + ((size_t)q * p->co + o) * p->ho * p->wo;
      for (int i = 0; i < p->ho; i++)
        wino_copy(plane + (size_t)i * wp, dyo + (size_t)i * p->wo, p->wo);
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 4) {
          nn_v4f z[2][6], v[6][6];
          for (int i = 0; i < 2; i++) {
            const float *row = plane + (size_t)(2 * a + i) * wp + 2 * b;
            nn_v4f l0 = nn_v4_load(row), l1 = nn_v4_load(row + 4);
            wino_a(r, NN_V4_EVENS(l0, l1), NN_V4_ODDS(l0, l1), z[i], 1);
          }
          for (int k = 0; k < n; k++) wino_a(r, z[0][k], z[1][k], &v[0][k], 6);
          size_t off = (size_t)q * st + (size_t)a * tw + b;
          int nv = tw - b < 4 ? tw - b : 4;
          for (int i = 0; i < n; i++) {
            for (int k = 0; k < n; k++) {
              float *dst = D + (size_t)(i * n + k) * sd + (size_t)o * T + off;
              if (nv == 4) {
                nn_v4_store(dst, v[i][k]);
              } else {
                for (int l = 0; l < nv; l++) dst[l] = v[i][k][l];
              }
            }
          }
        }
      }
    }
  }
  const size_t su = wino_su(p);
  for (int e = 0; e < ne; e++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->co, p->ci, (int)T, 1.0f,
                D + (size_t)e * sd, (int)T, V + (size_t)e * sv, (int)T, 1.0f,
                du + e * su, p->ci);
}

void nn_wino_dweight_run(const nn_wino_t *p, const float *x, const float *dy, float *du,
                         float *ws, int i0, int i1) {
  const size_t xs = (size_t)p->ci * p->h * p->w, ys = (size_t)p->co * p->ho * p->wo;
  memset(du, 0, sizeof(float) * nn_wino_du_floats(p));
  for (int i = i0; i < i1; i += p->g) {
    int gn = i1 - i < p->g ? i1 - i : p->g;
    wino_dweight_group(p, x + (size_t)i * xs, dy + (size_t)i * ys, du, ws, gn);
  }
}

void nn_wino_dweight_finish(const nn_wino_t *p, const float *du, float *dw) {
  const int r = p->r, n = r + 1, rr = r * r;
  const size_t cc = (size_t)p->co * p->ci, su = wino_su(p);
  nn_v4f gv[6][5];
  wino_gv(r, gv);
  /* Four consecutive (o, i) pairs at a time: dU's rows are read as vectors. */
  for (size_t oi = 0; oi < cc; oi += 4) {
    int nl = cc - oi < 4 ? (int)(cc - oi) : 4;
    nn_v4f m[36], t[6][5];
    for (int e = 0; e < n * n; e++) {
      const float *src = du + (size_t)e * su + oi;
      if (nl == 4) {
        m[e] = nn_v4_load(src);
      } else {
        float v[4] = {0, 0, 0, 0};
        for (int l = 0; l < nl; l++) v[l] = src[l];
        m[e] = nn_v4_load(v);
      }
    }
    for (int a = 0; a < n; a++)
      for (int x = 0; x < r; x++) {
        nn_v4f acc = m[a * n] * gv[0][x];
        for (int b = 1; b < n; b++) acc += m[a * n + b] * gv[b][x];
        t[a][x] = acc;
      }
    for (int y = 0; y < r; y++)
      for (int x = 0; x < r; x++) {
        nn_v4f acc = gv[0][y] * t[0][x];
        for (int a = 1; a < n; a++) acc += gv[a][y] * t[a][x];
        for (int l = 0; l < nl; l++) dw[(oi + l) * rr + y * r + x] += acc[l];
      }
  }
}
