/* nn/conv_direct.c: stride-1 and stride-2 convolutions with few channels as a direct,
   register-blocked sum over taps (AVX-512, or AVX2 + FMA where a caller asks for it;
   chosen at run time). Stride 2 (forward only) reads the padded input split into even
   and odd column planes (direct_fill_phases), so its loads too are contiguous vectors.

   For resnet20's 16-channel 32x32 layers im2col + GEMM spends much of its time writing
   and reading a 9x larger column buffer, and OpenBLAS runs GEMMs with M = 16 well below
   its peak. Here one sample's input is copied once into a zero-padded plane
   xp[c][hp][wp], and a block of CB output channels x NR output rows x NV vectors of V
   output columns is summed in CB*NR*NV registers:

       acc[b][r][v] += w[co0 + b][c][i][j] * xp[c][oh + r + i][ow0 + v*V + j ...]

   over c, i, j: per tap NR*NV unaligned loads and CB broadcasts feed CB*NR*NV FMAs. The
   padded plane's width is a whole number of vectors plus kw - 1, so every load stays
   inside it and no tap needs a bounds test; the last vector of a row is stored under a
   mask.

   The input gradient of a stride-1 convolution is again one (dx = conv(dy, w flipped and
   transposed, pad k - 1 - pad), accumulated into dx), so the same kernel serves both; the
   weight gradient of 3x3 kernels has its own (below). Every output element is summed in a
   fixed order whatever the batch split: y and dx depend neither on timing nor on the
   thread count, dw (per-chunk sums added in chunk order) only on the thread count. */
#include "nn/conv2d_internal.h"
#include "nn/simd_internal.h"

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

int nn_simd_limit = 3;

int nn_simd_level(void) {
  int level = 0;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) level = 2;
  if (level == 2 && __builtin_cpu_supports("avx512f")) level = 3;
  return level < nn_simd_limit ? level : nn_simd_limit;
}

static int cpu_avx512_half_width(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  const int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* AuthenticAMD */
  if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned family = ((a >> 8) & 0xfu) + ((a >> 20) & 0xffu);
  __builtin_cpu_init();
  return family == 0x19 && __builtin_cpu_supports("avx512f"); /* Zen 4, not Zen 3 */
}

/* Asked once: cpuid traps to the hypervisor in a virtual machine (microseconds), and
   every convolution asks several times (3.9% of resnet20's step when it was not kept). */
int nn_cpu_avx512_half_width(void) {
  static int known = -1;
  int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (v < 0) {
    v = cpu_avx512_half_width();
    __atomic_store_n(&known, v, __ATOMIC_RELAXED);
  }
  return v;
}

int nn_conv_direct_vec(void) {
  int level = nn_simd_level();
  return level >= 3 ? 16 : level == 2 ? 8 : 0;
}

void nn_conv_direct_plan(nn_conv_direct_t *d, int ci, int co, int h, int w, int kh, int kw,
                         int ph, int pw, int stride) {
  d->stride = stride;
  d->ci = ci;
  d->co = co;
  d->h = h;
  d->w = w;
  d->kh = kh;
  d->kw = kw;
  d->ph = ph;
  d->pw = pw;
  d->ho = (h + 2 * ph - kh) / stride + 1;
  d->wo = (w + 2 * pw - kw) / stride + 1;
  d->vec = nn_conv_direct_vec();
  int v = d->vec ? d->vec : 1;
  d->nvec = (d->wo + v - 1) / v;
  d->hp = (d->ho - 1) * stride + kh;
  d->wp = d->nvec * v + (kw - 1) / stride;
  d->phase = (size_t)d->hp * d->wp;
}

/* Sized for 16-float vectors whatever the CPU: the workspace then does not depend on
   the level chosen (nn_simd_limit may change between sizing and use). */
size_t nn_conv_direct_plane_floats(const nn_conv_direct_t *d) {
  size_t wp = (size_t)(d->wo + 15) / 16 * 16 + (d->kw - 1) / d->stride;
  return (size_t)d->ci * d->stride * d->hp * wp;
}

void nn_conv_direct_flip(const float *w, int co, int ci, int kh, int kw, float *wt) {
  const int kk = kh * kw;
  for (int o = 0; o < co; o++)
    for (int i = 0; i < ci; i++)
      for (int k = 0; k < kk; k++)
        wt[((size_t)i * co + o) * kk + (kk - 1 - k)] = w[((size_t)o * ci + i) * kk + k];
}

/* Stride 2: padded column q of channel c lies in column plane q % 2 at q / 2, i.e. at
   xp[c][q % 2][row][q / 2]. A tap j of output column ow then reads plane j % 2 at
   ow + j / 2: consecutive output columns read consecutive floats, so the kernel's
   vector loads work unchanged on stride-2 convolutions. */
static void direct_fill_phases(const nn_conv_direct_t *d, const float *x, float *xp) {
  const int wq = d->wp, pw = d->pw, w = d->w;
  for (int c = 0; c < d->ci; c++) {
    const float *xc = x + (size_t)c * d->h * w;
    for (int p = 0; p < 2; p++) {
      float *pp = xp + ((size_t)c * 2 + p) * d->phase;
      for (int r = 0; r < d->hp; r++) {
        float *row = pp + (size_t)r * wq;
        int ih = r - d->ph;
        if (ih < 0 || ih >= d->h) {
          memset(row, 0, sizeof(float) * (size_t)wq);
          continue;
        }
        const float *xr = xc + (size_t)ih * w;
        for (int k = 0; k < wq; k++) {
          int iw = 2 * k + p - pw;
          row[k] = iw >= 0 && iw < w ? xr[iw] : 0.0f;
        }
      }
    }
  }
}

/* The padded plane of one sample: the interior rows of x, the rest zero. The whole plane
   is zeroed with one memset (it lies in L1 or L2) and the rows are copied in line: one
   call per row for the copy and two for the margins cost more than the copying (rows of
   8 to 32 floats). The margins are rewritten every time, so one plane serves any sample
   and any earlier use of the scratch. */
static void direct_fill_plane(const nn_conv_direct_t *d, const float *x, float *xp) {
  if (d->stride == 2) {
    direct_fill_phases(d, x, xp);
    return;
  }
  const size_t plane = (size_t)d->hp * d->wp;
  memset(xp, 0, sizeof(float) * plane * (size_t)d->ci);
  for (int c = 0; c < d->ci; c++) {
    const float *xc = x + (size_t)c * d->h * d->w;
    float *pc = xp + (size_t)c * plane + (size_t)d->ph * d->wp + d->pw;
    for (int r = 0; r < d->h; r++) {
      const float *src = xc + (size_t)r * d->w;
      float *dst = pc + (size_t)r * d->wp;
      int k = 0;
      for (; k + 4 <= d->w; k += 4) nn_v4_store(dst + k, nn_v4_load(src + k));
      for (; k < d->w; k++) dst[k] = src[k];
    }
  }
}

/* ---- AVX-512: V = 16; a block is CB output channels x NR output rows x NV vectors ---- */

/* One block: output channels [co0, co0 + CB), rows [oh, oh + NR), vectors from column
   ow0; last: the lanes of a row's final vector that lie inside the row. Per tap the block
   loads NR*NV input vectors and CB weights for CB*NR*NV FMAs. */
#define D512_BLOCK(CB, NR, NV)                                                             \
  __attribute__((target("avx512f,fma"))) static void direct512_##CB##x##NR##x##NV(         \
      const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,       \
      int accumulate, float *y, int co0, int oh, int ow0, __mmask16 last, int kk) {        \
    __m512 acc[CB][NR][NV];                                                                \
    _Pragma("GCC unroll 8") for (int b = 0; b < (CB); b++)                                 \
    _Pragma("GCC unroll 4") for (int r = 0; r < (NR); r++)                                 \
    _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++) {                               \
      float *yp = y + ((size_t)(co0 + b) * d->ho + oh + r) * d->wo + ow0 + v * 16;         \
      __mmask16 m = v == (NV)-1 ? last : (__mmask16)0xffff;                                \
      acc[b][r][v] = accumulate ? _mm512_maskz_loadu_ps(m, yp)                             \
                                : _mm512_set1_ps(bias ? bias[co0 + b] : 0.0f);             \
    }                                                                                      \
    const int st = d->stride, sm = st - 1;                                                 \
    const size_t rs = (size_t)st * d->wp; /* floats between output rows */                \
    for (int c = 0; c < d->ci; c++) {                                                      \
      const float *xr = xp + (size_t)c * st * d->phase + (size_t)oh * rs + ow0;            \
      const float *wc = w + ((size_t)co0 * d->ci + c) * kk;                                \
      for (int i = 0; i < d->kh; i++)                                                      \
        for (int j = 0; j < d->kw; j++) {                                                  \
          /* stride 1: column j; stride 2: plane j % 2, column j / 2 */                    \
          const float *xt = xr + (size_t)i * d->wp + (size_t)(j & sm) * d->phase + (j >> sm); \
          __m512 xv[NR][NV];                                                               \
          _Pragma("GCC unroll 4") for (int r = 0; r < (NR); r++)                           \
          _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++)                           \
            xv[r][v] = _mm512_loadu_ps(xt + r * rs + v * 16);                              \
          _Pragma("GCC unroll 8") for (int b = 0; b < (CB); b++) {                         \
            __m512 wv = _mm512_set1_ps(wc[(size_t)b * d->ci * kk + i * d->kw + j]);        \
            _Pragma("GCC unroll 4") for (int r = 0; r < (NR); r++)                         \
            _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++)                         \
              acc[b][r][v] = _mm512_fmadd_ps(wv, xv[r][v], acc[b][r][v]);                  \
          }                                                                                \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 8") for (int b = 0; b < (CB); b++)                                 \
    _Pragma("GCC unroll 4") for (int r = 0; r < (NR); r++)                                 \
    _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++) {                               \
      float *yp = y + ((size_t)(co0 + b) * d->ho + oh + r) * d->wo + ow0 + v * 16;         \
      __mmask16 m = v == (NV)-1 ? last : (__mmask16)0xffff;                                \
      _mm512_mask_storeu_ps(yp, m, acc[b][r][v]);                                          \
    }                                                                                      \
  }

D512_BLOCK(8, 1, 2)
D512_BLOCK(8, 1, 1)
D512_BLOCK(8, 2, 1)
D512_BLOCK(8, 3, 1)
D512_BLOCK(4, 1, 2)
D512_BLOCK(4, 2, 2)
D512_BLOCK(4, 3, 2)
D512_BLOCK(1, 1, 2)
D512_BLOCK(1, 1, 1)

typedef void (*direct512_fn)(const nn_conv_direct_t *, const float *, const float *,
                             const float *, int, float *, int, int, int, __mmask16, int);

/* Rows of one vector (16 columns or fewer) go as 8 channels x 3 rows, rows of two (17 to
   32 columns) as 4 channels x 3 rows x 2 vectors: 24 accumulators, per tap 11 or 10
   loads for 24 FMAs, where 8 x 1 x 2 needs 10 for 16. The last rows of a plane take 2- or
   1-row blocks; wider rows 8 channels x 2 vectors (and one) a row at a time; the last
   channels one at a time. */
__attribute__((target("avx512f,fma"))) static void direct512_sample(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y) {
  const int kk = d->kh * d->kw, tail = d->wo - (d->nvec - 1) * 16;
  const __mmask16 full = 0xffff, last = (__mmask16)((1u << tail) - 1u);
  const int cb_big = d->nvec == 2 ? 4 : 8;
  static const direct512_fn rows8[4] = {NULL, direct512_8x1x1, direct512_8x2x1,
                                        direct512_8x3x1};
  static const direct512_fn rows4[4] = {NULL, direct512_4x1x2, direct512_4x2x2,
                                        direct512_4x3x2};
  for (int co0 = 0; co0 < d->co;) {
    int cb = d->co - co0 >= cb_big ? cb_big : 1;
    for (int oh = 0; oh < d->ho;) {
      int nr = cb > 1 && d->nvec <= 2 ? (d->ho - oh < 3 ? d->ho - oh : 3) : 1;
      for (int v0 = 0; v0 < d->nvec;) {
        int nv = d->nvec - v0 >= 2 ? 2 : 1;
        __mmask16 m = v0 + nv == d->nvec ? last : full;
        direct512_fn fn;
        if (cb == 1)
          fn = nv == 2 ? direct512_1x1x2 : direct512_1x1x1;
        else if (cb == 4)
          fn = rows4[nr];
        else if (d->nvec == 1)
          fn = rows8[nr];
        else
          fn = nv == 2 ? direct512_8x1x2 : direct512_8x1x1;
        fn(d, xp, w, bias, accumulate, y, co0, oh, v0 * 16, m, kk);
        v0 += nv;
      }
      oh += nr;
    }
    co0 += cb;
  }
}

/* ---- AVX2: V = 8, up to 4 output channels x 2 vectors (8 of the 16 registers) ---- */

#define D256_BODY(CB, NV)                                                                  \
  do {                                                                                     \
    __m256 acc[CB][NV];                                                                    \
    _Pragma("GCC unroll 8")                                                                \
    for (int b = 0; b < (CB); b++)                                                         \
      _Pragma("GCC unroll 2")                                                              \
      for (int v = 0; v < (NV); v++) {                                                     \
        float *yp = y + ((size_t)(co0 + b) * d->ho + oh) * d->wo + ow0 + v * 8;            \
        __m256i m = v == (NV)-1 ? last : full;                                             \
        __m256 init = _mm256_set1_ps(bias ? bias[co0 + b] : 0.0f);                         \
        acc[b][v] = accumulate ? _mm256_maskload_ps(yp, m) : init;                         \
      }                                                                                    \
    const int st = d->stride, sm = st - 1;                                                 \
    for (int c = 0; c < d->ci; c++) {                                                      \
      const float *xr = xp + (size_t)c * st * d->phase + (size_t)oh * st * d->wp + ow0;    \
      const float *wc = w + ((size_t)co0 * d->ci + c) * kk;                                \
      for (int i = 0; i < d->kh; i++)                                                      \
        for (int j = 0; j < d->kw; j++) {                                                  \
          const float *xt = xr + (size_t)i * d->wp + (size_t)(j & sm) * d->phase + (j >> sm); \
          __m256 xv[NV];                                                                   \
          _Pragma("GCC unroll 2")                                                          \
          for (int v = 0; v < (NV); v++) xv[v] = _mm256_loadu_ps(xt + v * 8);              \
          _Pragma("GCC unroll 8")                                                          \
          for (int b = 0; b < (CB); b++) {                                                 \
            __m256 wv = _mm256_broadcast_ss(wc + (size_t)b * d->ci * kk + i * d->kw + j);  \
            _Pragma("GCC unroll 2")                                                        \
            for (int v = 0; v < (NV); v++) acc[b][v] = _mm256_fmadd_ps(wv, xv[v], acc[b][v]);\
          }                                                                                \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 8")                                                                \
    for (int b = 0; b < (CB); b++)                                                         \
      _Pragma("GCC unroll 2")                                                              \
      for (int v = 0; v < (NV); v++) {                                                     \
        float *yp = y + ((size_t)(co0 + b) * d->ho + oh) * d->wo + ow0 + v * 8;            \
        __m256i m = v == (NV)-1 ? last : full;                                             \
        _mm256_maskstore_ps(yp, m, acc[b][v]);                                             \
      }                                                                                    \
  } while (0)

__attribute__((target("avx2,fma"))) static void direct256_block4x2(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y, int co0, int oh, int ow0, __m256i last, int kk) {
  const __m256i full = _mm256_set1_epi32(-1);
  D256_BODY(4, 2);
}
__attribute__((target("avx2,fma"))) static void direct256_block4x1(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y, int co0, int oh, int ow0, __m256i last, int kk) {
  const __m256i full = _mm256_set1_epi32(-1);
  D256_BODY(4, 1);
}
__attribute__((target("avx2,fma"))) static void direct256_block1x2(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y, int co0, int oh, int ow0, __m256i last, int kk) {
  const __m256i full = _mm256_set1_epi32(-1);
  D256_BODY(1, 2);
}
__attribute__((target("avx2,fma"))) static void direct256_block1x1(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y, int co0, int oh, int ow0, __m256i last, int kk) {
  const __m256i full = _mm256_set1_epi32(-1);
  D256_BODY(1, 1);
}

/* 3x3, stride 1: the taps unrolled, and up to 6 output channels x 2 vectors (12
   accumulators, enough in flight for the FMA latency; 15 of the 16 registers). */
#define D256_K3_BODY(CB, NV)                                                               \
  do {                                                                                     \
    __m256 acc[CB][NV];                                                                    \
    _Pragma("GCC unroll 8")                                                                \
    for (int b = 0; b < (CB); b++)                                                         \
      _Pragma("GCC unroll 2")                                                              \
      for (int v = 0; v < (NV); v++) {                                                     \
        float *yp = y + ((size_t)(co0 + b) * d->ho + oh) * d->wo + ow0 + v * 8;            \
        __m256i m = v == (NV)-1 ? last : full;                                             \
        __m256 init = _mm256_set1_ps(bias ? bias[co0 + b] : 0.0f);                         \
        acc[b][v] = accumulate ? _mm256_maskload_ps(yp, m) : init;                         \
      }                                                                                    \
    for (int c = 0; c < d->ci; c++) {                                                      \
      const float *xr = xp + (size_t)c * d->phase + (size_t)oh * d->wp + ow0;              \
      const float *wc = w + ((size_t)co0 * d->ci + c) * 9;                                 \
      _Pragma("GCC unroll 3")                                                              \
      for (int i = 0; i < 3; i++)                                                          \
        _Pragma("GCC unroll 3")                                                            \
        for (int j = 0; j < 3; j++) {                                                      \
          const float *xt = xr + (size_t)i * d->wp + j;                                    \
          __m256 xv[NV];                                                                   \
          _Pragma("GCC unroll 2")                                                          \
          for (int v = 0; v < (NV); v++) xv[v] = _mm256_loadu_ps(xt + v * 8);              \
          _Pragma("GCC unroll 8")                                                          \
          for (int b = 0; b < (CB); b++) {                                                 \
            __m256 wv = _mm256_broadcast_ss(wc + (size_t)b * d->ci * 9 + i * 3 + j);       \
            _Pragma("GCC unroll 2")                                                        \
            for (int v = 0; v < (NV); v++) acc[b][v] = _mm256_fmadd_ps(wv, xv[v], acc[b][v]);\
          }                                                                                \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 8")                                                                \
    for (int b = 0; b < (CB); b++)                                                         \
      _Pragma("GCC unroll 2")                                                              \
      for (int v = 0; v < (NV); v++) {                                                     \
        float *yp = y + ((size_t)(co0 + b) * d->ho + oh) * d->wo + ow0 + v * 8;            \
        __m256i m = v == (NV)-1 ? last : full;                                             \
        _mm256_maskstore_ps(yp, m, acc[b][v]);                                             \
      }                                                                                    \
  } while (0)

#define D256_K3_BLOCK(CB, NV)                                                              \
  __attribute__((target("avx2,fma"))) static void direct256_k3_##CB##x##NV(                 \
      const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,       \
      int accumulate, float *y, int co0, int oh, int ow0, __m256i last) {                  \
    const __m256i full = _mm256_set1_epi32(-1);                                            \
    D256_K3_BODY(CB, NV);                                                                  \
  }
D256_K3_BLOCK(6, 2)
D256_K3_BLOCK(6, 1)
D256_K3_BLOCK(4, 2)
D256_K3_BLOCK(4, 1)
D256_K3_BLOCK(2, 2)
D256_K3_BLOCK(2, 1)
D256_K3_BLOCK(1, 2)
D256_K3_BLOCK(1, 1)

__attribute__((target("avx2,fma"))) static void direct256_k3_sample(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y, __m256i last_lanes) {
  for (int co0 = 0; co0 < d->co;) {
    const int left = d->co - co0;
    const int cb = left >= 6 && left != 8 ? 6 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    for (int oh = 0; oh < d->ho; oh++) {
      for (int v0 = 0; v0 < d->nvec;) {
        const int nv = d->nvec - v0 >= 2 ? 2 : 1;
        const __m256i m = v0 + nv == d->nvec ? last_lanes : _mm256_set1_epi32(-1);
        const int ow0 = v0 * 8;
#define D256_K3_CALL(CB)                                                                   \
  (nv == 2 ? direct256_k3_##CB##x2(d, xp, w, bias, accumulate, y, co0, oh, ow0, m)         \
           : direct256_k3_##CB##x1(d, xp, w, bias, accumulate, y, co0, oh, ow0, m))
        if (cb == 6) D256_K3_CALL(6);
        else if (cb == 4) D256_K3_CALL(4);
        else if (cb == 2) D256_K3_CALL(2);
        else D256_K3_CALL(1);
#undef D256_K3_CALL
        v0 += nv;
      }
    }
    co0 += cb;
  }
}

__attribute__((target("avx2,fma"))) static void direct256_sample(
    const nn_conv_direct_t *d, const float *xp, const float *w, const float *bias,
    int accumulate, float *y) {
  const int kk = d->kh * d->kw, tail = d->wo - (d->nvec - 1) * 8;
  int lanes[8];
  for (int l = 0; l < 8; l++) lanes[l] = l < tail ? -1 : 0;
  const __m256i full = _mm256_set1_epi32(-1);
  const __m256i last = _mm256_loadu_si256((const __m256i *)lanes);
  if (d->kh == 3 && d->kw == 3 && d->stride == 1) {
    direct256_k3_sample(d, xp, w, bias, accumulate, y, last);
    return;
  }
  for (int co0 = 0; co0 < d->co;) {
    int cb = d->co - co0 >= 4 ? 4 : 1;
    for (int oh = 0; oh < d->ho; oh++) {
      for (int v0 = 0; v0 < d->nvec;) {
        int nv = d->nvec - v0 >= 2 ? 2 : 1;
        __m256i m = v0 + nv == d->nvec ? last : full;
        if (cb == 4 && nv == 2)
          direct256_block4x2(d, xp, w, bias, accumulate, y, co0, oh, v0 * 8, m, kk);
        else if (cb == 4)
          direct256_block4x1(d, xp, w, bias, accumulate, y, co0, oh, v0 * 8, m, kk);
        else if (nv == 2)
          direct256_block1x2(d, xp, w, bias, accumulate, y, co0, oh, v0 * 8, m, kk);
        else
          direct256_block1x1(d, xp, w, bias, accumulate, y, co0, oh, v0 * 8, m, kk);
        v0 += nv;
      }
    }
    co0 += cb;
  }
}

/* ---- Weight gradient, AVX-512, 3x3 kernels, stride 1 or 2 ----
   dw[co][c][i][j] = sum over samples and output pixels p = (oh, ow) of
   dy[co][p] * xpad[c][oh * s + i][ow * s + j]. Vectors run over 16 output channels: per
   pixel a block loads NB vectors of dy (from dy transposed to pixel-major, dyT[p][co])
   and multiplies each by the 9 x NC input values it meets, broadcast from memory inside
   the FMA, into NB x NC x 9 accumulators that stay in registers for the whole sample.
   Each FMA thus needs one 4-byte broadcast and no cache-line-crossing vector load, and
   a weight's sum needs no reduction across lanes; any stride reads the same way. The
   16-lane kernel it replaced (vectors over output columns, 9 shifted input loads per
   vector) reached 70-85 GFLOP/s on resnet20's 16->16 and 32->32 layers (1 thread,
   batch 64, AMD Zen 5); this one 155-160, transposes and padding included (in-process
   alternation, fastest of 30). Fixed order throughout: deterministic.

   A thread's scratch (nn_conv_direct_dweight_floats): the sums acc[c][9][co] over its
   samples, then dyT (ho*wo x co), then the sample's zero-padded input planes
   (ci x hd x wd, hd = (ho-1)*s + 3, wd = (wo-1)*s + 3). */

static int dw_plane_rows(const nn_conv_direct_t *d) { return (d->ho - 1) * d->stride + 3; }
static int dw_plane_cols(const nn_conv_direct_t *d) { return (d->wo - 1) * d->stride + 3; }

int nn_conv_direct_dweight_ok(const nn_conv_direct_t *d) {
  return (d->vec == 16 || d->vec == 8) && d->kh == 3 && d->kw == 3 &&
         (d->stride == 1 || d->stride == 2) && d->co % d->vec == 0 && d->ph < 3 &&
         d->pw < 3;
}

size_t nn_conv_direct_dweight_floats(const nn_conv_direct_t *d) {
  size_t acc = (size_t)d->ci * 9 * d->co, dyt = (size_t)d->ho * d->wo * d->co;
  size_t plane = (size_t)d->ci * dw_plane_rows(d) * dw_plane_cols(d);
  return (acc + 15) / 16 * 16 + (dyt + 15) / 16 * 16 + plane;
}

/* The zero-padded input planes of one sample, hd x wd each (rows past the input zero). */
static void dw_fill_plane(const nn_conv_direct_t *d, const float *x, float *xp) {
  const int hd = dw_plane_rows(d), wd = dw_plane_cols(d);
  memset(xp, 0, sizeof(float) * (size_t)d->ci * hd * wd);
  const int rows = d->h < hd - d->ph ? d->h : hd - d->ph;    /* rows that are read    */
  const int cols = d->w < wd - d->pw ? d->w : wd - d->pw;
  for (int c = 0; c < d->ci; c++) {
    const float *xc = x + (size_t)c * d->h * d->w;
    float *pc = xp + ((size_t)c * hd + d->ph) * wd + d->pw;
    for (int r = 0; r < rows; r++) {
      const float *src = xc + (size_t)r * d->w;
      float *dst = pc + (size_t)r * wd;
      int k = 0;
      for (; k + 4 <= cols; k += 4) nn_v4_store(dst + k, nn_v4_load(src + k));
      for (; k < cols; k++) dst[k] = src[k];
    }
  }
}

/* out[k][c] = in[c][k] for a 16 x 16 block (rows of in `is` floats apart, of out `os`). */
__attribute__((target("avx512f"))) static void dw_transpose16(const float *in, size_t is,
                                                               float *out, size_t os) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(in + i * is);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
  for (int i = 0; i < 16; i++) _mm512_storeu_ps(out + i * os, r[i]);
}

/* One block: output channels [co0, co0 + 16 NB) x input channels [c0, c0 + NC), all 9
   taps, over one sample's pixels; adds its sums into acc[c][9][co]. */
#define DW512_BLOCK(NB, NC)                                                                \
  __attribute__((target("avx512f,fma"))) static void direct512_dw_##NB##x##NC(             \
      const nn_conv_direct_t *d, const float *xp, const float *dyt, float *acc, int co0,   \
      int c0) {                                                                            \
    __m512 a[NC][9][NB];                                                                   \
    _Pragma("GCC unroll 4") for (int c = 0; c < (NC); c++)                                 \
    _Pragma("GCC unroll 9") for (int k = 0; k < 9; k++)                                    \
    _Pragma("GCC unroll 4") for (int b = 0; b < (NB); b++) a[c][k][b] = _mm512_setzero_ps(); \
    const int wd = dw_plane_cols(d), st = d->stride;                                       \
    const size_t cs = (size_t)dw_plane_rows(d) * wd;                                       \
    const float *g = dyt + co0;                                                            \
    for (int oh = 0; oh < d->ho; oh++) {                                                   \
      const float *xr = xp + (size_t)c0 * cs + (size_t)oh * st * wd;                       \
      for (int ow = 0; ow < d->wo; ow++, g += d->co) {                                     \
        const float *xo = xr + (size_t)ow * st;                                            \
        __m512 gv[NB];                                                                     \
        _Pragma("GCC unroll 4") for (int b = 0; b < (NB); b++)                             \
          gv[b] = _mm512_loadu_ps(g + 16 * b);                                             \
        _Pragma("GCC unroll 4") for (int c = 0; c < (NC); c++)                             \
        _Pragma("GCC unroll 3") for (int i = 0; i < 3; i++)                                \
        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++) {                              \
          __m512 xv = _mm512_set1_ps(xo[c * cs + (size_t)i * wd + j]);                     \
          _Pragma("GCC unroll 4") for (int b = 0; b < (NB); b++)                           \
            a[c][i * 3 + j][b] = _mm512_fmadd_ps(xv, gv[b], a[c][i * 3 + j][b]);           \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int c = 0; c < (NC); c++)                                 \
    _Pragma("GCC unroll 9") for (int k = 0; k < 9; k++)                                    \
    _Pragma("GCC unroll 4") for (int b = 0; b < (NB); b++) {                               \
      float *o = acc + ((size_t)(c0 + c) * 9 + k) * d->co + co0 + 16 * b;                  \
      _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[c][k][b]));                  \
    }                                                                                      \
  }

/* 18 or 27 accumulators of the 32 registers: two dy vectors x 1 input channel where the
   output channels come in 32s (11 loads per 18 FMAs), else one x 3 (28 per 27). */
DW512_BLOCK(2, 1)
DW512_BLOCK(1, 3)
DW512_BLOCK(1, 2)
DW512_BLOCK(1, 1)

__attribute__((target("avx512f,fma"))) static void direct512_dw_sample(
    const nn_conv_direct_t *d, const float *xp, const float *dyt, float *acc) {
  for (int co0 = 0; co0 < d->co;) {
    if (d->co - co0 >= 32) {
      for (int c = 0; c < d->ci; c++) direct512_dw_2x1(d, xp, dyt, acc, co0, c);
      co0 += 32;
      continue;
    }
    int c = 0;
    for (; c + 3 <= d->ci; c += 3) direct512_dw_1x3(d, xp, dyt, acc, co0, c);
    for (; c + 2 <= d->ci; c += 2) direct512_dw_1x2(d, xp, dyt, acc, co0, c);
    for (; c < d->ci; c++) direct512_dw_1x1(d, xp, dyt, acc, co0, c);
    co0 += 16;
  }
}

/* ---- Weight gradient, AVX2 + FMA: the same sums with vectors over 8 output channels ----
   16 registers hold the accumulators, NB dy vectors and one broadcast, so a block takes
   a part of the 9 taps: where the output channels come in 16s, rows 0-1 of one input
   channel (12 accumulators) and row 2 of two (12), 8 loads per 12 FMAs either way; a
   last block of 8 output channels takes all 9 taps of one input channel. */

/* out[k][c] = in[c][k] for an 8 x 8 block (rows of in `is` floats apart, of out `os`). */
__attribute__((target("avx2"))) static void dw_transpose8(const float *in, size_t is,
                                                          float *out, size_t os) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(in + i * is);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(out + i * os, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * os, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

/* dyT[p][co] = dy[co][p] for one sample, in v x v blocks (v = 16: AVX-512, 8: AVX2; co a
   multiple of v), the last pixels one at a time. */
static void dw_transpose(const float *dy, int co, int np, int v, float *dyt) {
  int p0 = 0;
  for (; p0 + v <= np; p0 += v)
    for (int c = 0; c < co; c += v) {
      const float *in = dy + (size_t)c * np + p0;
      float *out = dyt + (size_t)p0 * co + c;
      if (v == 16)
        dw_transpose16(in, (size_t)np, out, (size_t)co);
      else
        dw_transpose8(in, (size_t)np, out, (size_t)co);
    }
  for (; p0 < np; p0++)
    for (int c = 0; c < co; c++) dyt[(size_t)p0 * co + c] = dy[(size_t)c * np + p0];
}

/* One block: output channels [co0, co0 + 8 NB) x input channels [c0, c0 + NC) x the taps
   of kernel rows [R0, R0 + NR), over one sample's pixels; adds its sums into
   acc[c][9][co]. */
#define DW256_BLOCK(NB, NC, R0, NR)                                                        \
  __attribute__((target("avx2,fma"))) static void direct256_dw_##NB##_##NC##_##R0##_##NR( \
      const nn_conv_direct_t *d, const float *xp, const float *dyt, float *acc, int co0,   \
      int c0) {                                                                            \
    __m256 a[NC][NR][3][NB];                                                               \
    _Pragma("GCC unroll 2") for (int c = 0; c < (NC); c++)                                 \
    _Pragma("GCC unroll 3") for (int i = 0; i < (NR); i++)                                 \
    _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                                    \
    _Pragma("GCC unroll 2") for (int b = 0; b < (NB); b++)                                 \
      a[c][i][j][b] = _mm256_setzero_ps();                                                 \
    const int wd = dw_plane_cols(d), st = d->stride;                                       \
    const size_t cs = (size_t)dw_plane_rows(d) * wd;                                       \
    const float *g = dyt + co0;                                                            \
    for (int oh = 0; oh < d->ho; oh++) {                                                   \
      const float *xr = xp + (size_t)c0 * cs + ((size_t)oh * st + (R0)) * wd;              \
      for (int ow = 0; ow < d->wo; ow++, g += d->co) {                                     \
        const float *xo = xr + (size_t)ow * st;                                            \
        __m256 gv[NB];                                                                     \
        _Pragma("GCC unroll 2") for (int b = 0; b < (NB); b++)                             \
          gv[b] = _mm256_loadu_ps(g + 8 * b);                                              \
        _Pragma("GCC unroll 2") for (int c = 0; c < (NC); c++)                             \
        _Pragma("GCC unroll 3") for (int i = 0; i < (NR); i++)                             \
        _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++) {                              \
          __m256 xv = _mm256_broadcast_ss(xo + c * cs + (size_t)i * wd + j);               \
          _Pragma("GCC unroll 2") for (int b = 0; b < (NB); b++)                           \
            a[c][i][j][b] = _mm256_fmadd_ps(xv, gv[b], a[c][i][j][b]);                     \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
    _Pragma("GCC unroll 2") for (int c = 0; c < (NC); c++)                                 \
    _Pragma("GCC unroll 3") for (int i = 0; i < (NR); i++)                                 \
    _Pragma("GCC unroll 3") for (int j = 0; j < 3; j++)                                    \
    _Pragma("GCC unroll 2") for (int b = 0; b < (NB); b++) {                               \
      float *o = acc + ((size_t)(c0 + c) * 9 + ((R0) + i) * 3 + j) * d->co + co0 + 8 * b;  \
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), a[c][i][j][b]));               \
    }                                                                                      \
  }

/* 16 output channels: rows 0-1 of one input channel, then row 2 of two (12 accumulators
   each, enough in flight for the FMA latency), or of the last one alone; 8: all 9 taps
   of one input channel. */
DW256_BLOCK(2, 1, 0, 2)
DW256_BLOCK(2, 2, 2, 1)
DW256_BLOCK(2, 1, 2, 1)
DW256_BLOCK(1, 1, 0, 3)

__attribute__((target("avx2,fma"))) static void direct256_dw_sample(
    const nn_conv_direct_t *d, const float *xp, const float *dyt, float *acc) {
  for (int co0 = 0; co0 < d->co;) {
    if (d->co - co0 >= 16) {
      int c = 0;
      for (; c + 2 <= d->ci; c += 2) {
        direct256_dw_2_1_0_2(d, xp, dyt, acc, co0, c);
        direct256_dw_2_1_0_2(d, xp, dyt, acc, co0, c + 1);
        direct256_dw_2_2_2_1(d, xp, dyt, acc, co0, c);
      }
      for (; c < d->ci; c++) {
        direct256_dw_2_1_0_2(d, xp, dyt, acc, co0, c);
        direct256_dw_2_1_2_1(d, xp, dyt, acc, co0, c);
      }
      co0 += 16;
      continue;
    }
    for (int c = 0; c < d->ci; c++) direct256_dw_1_1_0_3(d, xp, dyt, acc, co0, c);
    co0 += 8;
  }
}

void nn_conv_direct_dweight_run(const nn_conv_direct_t *d, const float *x, const float *dy,
                                float *scratch, int i0, int i1) {
  const size_t xs = (size_t)d->ci * d->h * d->w, ys = (size_t)d->co * d->ho * d->wo;
  const size_t acc_n = (size_t)d->ci * 9 * d->co;
  float *acc = scratch, *dyt = scratch + (acc_n + 15) / 16 * 16;
  float *xp = dyt + ((size_t)d->ho * d->wo * d->co + 15) / 16 * 16;
  memset(acc, 0, sizeof(float) * acc_n);
  for (int i = i0; i < i1; i++) {
    dw_fill_plane(d, x + (size_t)i * xs, xp);
    dw_transpose(dy + (size_t)i * ys, d->co, d->ho * d->wo, d->vec, dyt);
    if (d->vec == 16)
      direct512_dw_sample(d, xp, dyt, acc);
    else
      direct256_dw_sample(d, xp, dyt, acc);
  }
}

void nn_conv_direct_dweight_finish(const nn_conv_direct_t *d, const float *scratch,
                                   float *dw) {
  for (int o = 0; o < d->co; o++)
    for (int c = 0; c < d->ci; c++)
      for (int k = 0; k < 9; k++)
        dw[((size_t)o * d->ci + c) * 9 + k] += scratch[((size_t)c * 9 + k) * d->co + o];
}

void nn_conv_direct_run(const nn_conv_direct_t *d, const float *x, const float *w,
                        const float *bias, int accumulate, float *y, float *plane, int i0,
                        int i1) {
  const size_t xs = (size_t)d->ci * d->h * d->w, ys = (size_t)d->co * d->ho * d->wo;
  for (int i = i0; i < i1; i++) {
    direct_fill_plane(d, x + (size_t)i * xs, plane);
    if (d->vec == 16)
      direct512_sample(d, plane, w, bias, accumulate, y + (size_t)i * ys);
    else
      direct256_sample(d, plane, w, bias, accumulate, y + (size_t)i * ys);
  }
}
