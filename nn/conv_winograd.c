/* nn/conv_winograd.c: 3x3 stride-1 convolution by Winograd F(2x2, 3x3).

   Each 2x2 output tile is computed from a 4x4 input tile with 16 multiplications per
   (input, output) channel pair instead of 36: the input tiles are transformed
   (V = B^T d B), each of the 16 transformed positions e becomes one GEMM
   M_e[co][t] = U_e[co][ci] V_e[ci][t] over the tiles t of a group of samples, and the
   output tiles are transformed back (Y = A^T M A). The GEMMs are OpenBLAS, so the
   2.25x fewer multiplications turn into about that much less GEMM time; the transforms
   are SSE vectors over 4 tiles of a tile row.

   Used for conv2d forward and for conv2d's input gradient, which for a 3x3 stride-1
   convolution is again one: dx = conv(dy, w flipped and transposed, pad 2 - pad).
   Accuracy: the transforms only add, subtract and halve, so results stay within a few
   float32 ulps of the direct sum (the tests compare with PyTorch at 1e-4). */
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
int nn_wino_group_tiles = 128;

void nn_wino_plan(nn_wino_t *p, int n, int ci, int co, int h, int w, int ph, int pw) {
  p->n = n;
  p->ci = ci;
  p->co = co;
  p->h = h;
  p->w = w;
  p->ph = ph;
  p->pw = pw;
  p->ho = h + 2 * ph - 2;
  p->wo = w + 2 * pw - 2;
  p->th = (p->ho + 1) / 2;
  p->tw = (p->wo + 1) / 2;
  int g = nn_wino_group_tiles / (p->th * p->tw);
  if (g < 1) g = 1;
  if (g > n) g = n;
  p->g = g;
  p->tw4 = (p->tw + 3) & ~3;
  p->hp = 2 * p->th + 2;
  p->wp = 2 * p->tw4 + 2;
}

static size_t wino_tiles(const nn_wino_t *p) { return (size_t)p->g * p->th * p->tw; }

size_t nn_wino_slot_floats(const nn_wino_t *p) {
  size_t t = wino_tiles(p);
  /* padded plane, V, M (+4: the output transform reads a partial vector past the end) */
  return (size_t)p->hp * p->wp + 16 * (size_t)p->ci * t + 16 * (size_t)p->co * t + 4 + 16;
}

/* U_e[co][ci] = (G g G^T)_e with g = w[co][ci] (flip = 0), or for the input gradient
   (flip = 1, the plan's ci/co being the conv's c_out/c_in) g[r][c] = w[ci][co][2-r][2-c]. */
void nn_wino_filter(const nn_wino_t *p, const float *w, int flip, float *u) {
  const size_t cc = (size_t)p->co * p->ci;
  for (int o = 0; o < p->co; o++) {
    for (int i = 0; i < p->ci; i++) {
      float g[3][3];
      const float *src = flip ? w + ((size_t)i * p->co + o) * 9 : w + ((size_t)o * p->ci + i) * 9;
      for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) g[r][c] = flip ? src[(2 - r) * 3 + (2 - c)] : src[r * 3 + c];
      float t[4][3]; /* G g */
      for (int c = 0; c < 3; c++) {
        t[0][c] = g[0][c];
        t[1][c] = 0.5f * (g[0][c] + g[1][c] + g[2][c]);
        t[2][c] = 0.5f * (g[0][c] - g[1][c] + g[2][c]);
        t[3][c] = g[2][c];
      }
      for (int r = 0; r < 4; r++) {
        float v[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]),
                      0.5f * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
        for (int c = 0; c < 4; c++) u[(size_t)(r * 4 + c) * cc + (size_t)o * p->ci + i] = v[c];
      }
    }
  }
}

/* Samples [i0, i0 + gn): transforms, 16 GEMMs, inverse transforms. */
static void wino_group(const nn_wino_t *p, const float *x, const float *u, const float *bias,
                       int accumulate, float *y, float *ws, int gn) {
  const int th = p->th, tw = p->tw, hp = p->hp, wp = p->wp, H = p->h, W = p->w;
  const size_t T = (size_t)gn * th * tw, st = (size_t)th * tw;
  float *plane = ws;
  float *V = plane + (size_t)hp * wp;
  float *M = V + 16 * (size_t)p->ci * T;
  /* Input transform. */
  memset(plane, 0, sizeof(float) * (size_t)hp * wp);
  for (int q = 0; q < gn; q++) {
    for (int c = 0; c < p->ci; c++) {
      const float *xc = x + ((size_t)q * p->ci + c) * H * W;
      for (int r = 0; r < H; r++) memcpy(plane + (size_t)(r + p->ph) * wp + p->pw, xc + (size_t)r * W, sizeof(float) * W);
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 4) {
          nn_v4f d[4][4];
          for (int r = 0; r < 4; r++) {
            const float *row = plane + (size_t)(2 * a + r) * wp + 2 * b;
            nn_v4f l0 = nn_v4_load(row), l1 = nn_v4_load(row + 4);
            nn_v4f m0 = nn_v4_load(row + 2), m1 = nn_v4_load(row + 6);
            d[r][0] = NN_V4_EVENS(l0, l1);
            d[r][1] = NN_V4_ODDS(l0, l1);
            d[r][2] = NN_V4_EVENS(m0, m1);
            d[r][3] = NN_V4_ODDS(m0, m1);
          }
          nn_v4f t[4][4];
          for (int k = 0; k < 4; k++) {
            t[0][k] = d[0][k] - d[2][k];
            t[1][k] = d[1][k] + d[2][k];
            t[2][k] = d[2][k] - d[1][k];
            t[3][k] = d[1][k] - d[3][k];
          }
          size_t off = (size_t)q * st + (size_t)a * tw + b;
          int nv = tw - b < 4 ? tw - b : 4;
          for (int r = 0; r < 4; r++) {
            nn_v4f v[4] = {t[r][0] - t[r][2], t[r][1] + t[r][2], t[r][2] - t[r][1],
                           t[r][1] - t[r][3]};
            for (int k = 0; k < 4; k++) {
              float *dst = V + ((size_t)(r * 4 + k) * p->ci + c) * T + off;
              if (nv == 4) {
                nn_v4_store(dst, v[k]);
              } else {
                for (int l = 0; l < nv; l++) dst[l] = v[k][l];
              }
            }
          }
        }
      }
    }
    /* the rows copied above are overwritten by the next plane; the padding stays zero */
  }
  /* The 16 GEMMs. */
  const size_t cc = (size_t)p->co * p->ci;
  for (int e = 0; e < 16; e++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->co, (int)T, p->ci, 1.0f,
                u + e * cc, p->ci, V + (size_t)e * p->ci * T, (int)T, 0.0f,
                M + (size_t)e * p->co * T, (int)T);
  /* Output transform. */
  const size_t ms = (size_t)p->co * T;
  for (int q = 0; q < gn; q++) {
    for (int o = 0; o < p->co; o++) {
      float *yo = y + ((size_t)q * p->co + o) * p->ho * p->wo;
      const nn_v4f bv = nn_v4_set1(bias ? bias[o] : 0.0f);
      const float *mo = M + (size_t)o * T + (size_t)q * st;
      for (int a = 0; a < th; a++) {
        for (int b = 0; b < tw; b += 4) {
          const float *mp = mo + (size_t)a * tw + b;
          nn_v4f m[16];
          for (int e = 0; e < 16; e++) m[e] = nn_v4_load(mp + e * ms);
          nn_v4f s0[4], s1[4];
          for (int k = 0; k < 4; k++) {
            s0[k] = m[k] + m[4 + k] + m[8 + k];
            s1[k] = m[4 + k] - m[8 + k] - m[12 + k];
          }
          nn_v4f o00 = s0[0] + s0[1] + s0[2] + bv, o01 = s0[1] - s0[2] - s0[3] + bv;
          nn_v4f o10 = s1[0] + s1[1] + s1[2] + bv, o11 = s1[1] - s1[2] - s1[3] + bv;
          int ncol = p->wo - 2 * b < 8 ? p->wo - 2 * b : 8;
          for (int i = 0; i < 2 && 2 * a + i < p->ho; i++) {
            nn_v4f e0 = i ? o10 : o00, e1 = i ? o11 : o01;
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
