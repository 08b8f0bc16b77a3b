/* collectives/reduce.c: element-wise reductions for every dtype and op, and the
   float16/bfloat16 <-> float32 conversions.

   Why the loops look like this: the build is -O2 without -march=native. GCC's -O2
   vectoriser only takes loops whose trip count is a known multiple of the vector width,
   so every loop runs over fixed blocks of REDUCE_BLOCK elements (plus a scalar tail), and
   target_clones builds an AVX2 copy picked at load time on CPUs that have it. In-place
   and out-of-place get separate functions so every pointer can be restrict. Signed
   integers add and multiply through their unsigned type: wrap-around, not undefined
   behaviour. float16 uses the F16C instructions when present (they round to nearest
   even, as the software path does). */
#include <string.h>

#include "collectives/coll_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* HVD_NO_TARGET_CLONES (make SANITIZE=thread): target_clones is an ifunc, whose resolver
   runs before ThreadSanitizer's runtime is set up and crashes it. */
#ifdef HVD_NO_TARGET_CLONES
#define REDUCE_CLONES
#else
#define REDUCE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#define REDUCE_HAVE_F16C 1
#include <immintrin.h>
#else
#define REDUCE_CLONES
#define REDUCE_HAVE_F16C 0
#endif

#define REDUCE_BLOCK 32

/* ---- float16 / bfloat16 conversions (round to nearest even) ---- */

static inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t coll_float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf stays inf; NaN stays a (quiet) NaN */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (ax >= 0x38800000u) {                                  /* normal half */
    uint32_t h = (ax - 0x38000000u) >> 13;
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 (a tie) rounds to zero */
  /* subnormal half: value / 2^-24, rounded */
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - (ax >> 23);
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float coll_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113; /* subnormal: normalise */
    while (!(m & 0x400u)) {
      m <<= 1;
      e--;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t bf16_from_float(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

uint16_t coll_float_to_bfloat16(float f) { return bf16_from_float(f); }
float coll_bfloat16_to_float(uint16_t b) { return bf16_to_float(b); }

/* ---- native types ---- */

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))
#define OP_USUM(T, U) ((T)((U)(x) + (U)(y)))
#define OP_UPROD(T, U) ((T)((U)(x) * (U)(y)))

/* OUT[i] = EXPR(x = A[i], y = B[i]) over n elements, blocked so the compiler vectorises
   the inner loop. One body for the out-of-place and the in-place kernel (OUT == A). */
#define REDUCE_LOOP(T, EXPR, OUT, A, B, N)                                             \
  size_t i = 0;                                                                        \
  for (; i + REDUCE_BLOCK <= (N); i += REDUCE_BLOCK)                                   \
    for (size_t j = 0; j < REDUCE_BLOCK; j++) {                                        \
      T x = (A)[i + j], y = (B)[i + j];                                                \
      (OUT)[i + j] = (T)(EXPR);                                                        \
    }                                                                                  \
  for (; i < (N); i++) {                                                               \
    T x = (A)[i], y = (B)[i];                                                          \
    (OUT)[i] = (T)(EXPR);                                                              \
  }

/* Two kernels per op: restrict promises no aliasing, which the in-place call (out == a)
   would break, so it has its own signature rather than passing io twice. */
#define DEFINE_REDUCE(NAME, T, EXPR)                                                   \
  REDUCE_CLONES static void NAME##_oop(T *restrict out, const T *restrict a,           \
                                       const T *restrict b, size_t n) {                \
    REDUCE_LOOP(T, EXPR, out, a, b, n)                                                 \
  }                                                                                    \
  REDUCE_CLONES static void NAME##_inp(T *restrict io, const T *restrict b, size_t n) {\
    REDUCE_LOOP(T, EXPR, io, io, b, n)                                                 \
  }

#define DEFINE_FOUR(PFX, T, SUMX, PRODX)  \
  DEFINE_REDUCE(PFX##_sum, T, SUMX)       \
  DEFINE_REDUCE(PFX##_prod, T, PRODX)     \
  DEFINE_REDUCE(PFX##_min, T, OP_MIN(x, y)) \
  DEFINE_REDUCE(PFX##_max, T, OP_MAX(x, y))

DEFINE_FOUR(f32, float, OP_SUM(x, y), OP_PROD(x, y))
DEFINE_FOUR(f64, double, OP_SUM(x, y), OP_PROD(x, y))
DEFINE_FOUR(i8, int8_t, OP_USUM(int8_t, uint8_t), OP_UPROD(int8_t, uint8_t))
DEFINE_FOUR(u8, uint8_t, OP_SUM(x, y), OP_PROD(x, y))
DEFINE_FOUR(i32, int32_t, OP_USUM(int32_t, uint32_t), OP_UPROD(int32_t, uint32_t))
DEFINE_FOUR(i64, int64_t, OP_USUM(int64_t, uint64_t), OP_UPROD(int64_t, uint64_t))

/* ---- 16-bit floats: widen a block to float32, reduce, round back ---- */

static inline float op_float(float x, float y, coll_op_t op) {
  switch (op) {
    case COLL_SUM: return x + y;
    case COLL_PRODUCT: return x * y;
    case COLL_MIN: return OP_MIN(x, y);
    case COLL_MAX: return OP_MAX(x, y);
  }
  return x;
}

static void f32_block(float *restrict x, const float *restrict y, size_t n, coll_op_t op) {
  switch (op) {
    case COLL_SUM: f32_sum_inp(x, y, n); break;
    case COLL_PRODUCT: f32_prod_inp(x, y, n); break;
    case COLL_MIN: f32_min_inp(x, y, n); break;
    case COLL_MAX: f32_max_inp(x, y, n); break;
  }
}

#if REDUCE_HAVE_F16C
__attribute__((target("avx,f16c"))) static void half_reduce_f16c(
    uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, coll_op_t op) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
    __m256 r;
    switch (op) {
      case COLL_SUM: r = _mm256_add_ps(x, y); break;
      case COLL_PRODUCT: r = _mm256_mul_ps(x, y); break;
      case COLL_MIN: r = _mm256_min_ps(y, x); break; /* y < x ? y : x */
      default: r = _mm256_max_ps(y, x); break;
    }
    _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; i++)
    out[i] = coll_float_to_half(
        op_float(coll_half_to_float(a[i]), coll_half_to_float(b[i]), op));
}
#endif

static void half_reduce(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n,
                        coll_op_t op) {
#if REDUCE_HAVE_F16C
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
    half_reduce_f16c(out, a, b, n, op);
    return;
  }
#endif
  float x[REDUCE_BLOCK], y[REDUCE_BLOCK];
  for (size_t i = 0; i < n; i += REDUCE_BLOCK) {
    size_t m = n - i < REDUCE_BLOCK ? n - i : REDUCE_BLOCK;
    for (size_t j = 0; j < m; j++) {
      x[j] = coll_half_to_float(a[i + j]);
      y[j] = coll_half_to_float(b[i + j]);
    }
    f32_block(x, y, m, op);
    for (size_t j = 0; j < m; j++) out[i + j] = coll_float_to_half(x[j]);
  }
}

static void bf16_reduce(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n,
                        coll_op_t op) {
  float x[REDUCE_BLOCK], y[REDUCE_BLOCK];
  for (size_t i = 0; i < n; i += REDUCE_BLOCK) {
    size_t m = n - i < REDUCE_BLOCK ? n - i : REDUCE_BLOCK;
    for (size_t j = 0; j < m; j++) {
      x[j] = bf16_to_float(a[i + j]);
      y[j] = bf16_to_float(b[i + j]);
    }
    f32_block(x, y, m, op);
    for (size_t j = 0; j < m; j++) out[i + j] = bf16_from_float(x[j]);
  }
}

/* ---- dispatch ---- */

#define DISPATCH(PFX, T)                                                          \
  do {                                                                            \
    T *o = (T *)out;                                                              \
    const T *pa = (const T *)a, *pb = (const T *)b;                               \
    switch (op) {                                                                 \
      case COLL_SUM: inplace ? PFX##_sum_inp(o, pb, n) : PFX##_sum_oop(o, pa, pb, n); break;   \
      case COLL_PRODUCT: inplace ? PFX##_prod_inp(o, pb, n) : PFX##_prod_oop(o, pa, pb, n); break; \
      case COLL_MIN: inplace ? PFX##_min_inp(o, pb, n) : PFX##_min_oop(o, pa, pb, n); break;   \
      case COLL_MAX: inplace ? PFX##_max_inp(o, pb, n) : PFX##_max_oop(o, pa, pb, n); break;   \
    }                                                                             \
  } while (0)

void coll_reduce3(void *out, const void *a, const void *b, size_t n, coll_dtype_t dtype,
                  coll_op_t op) {
  int inplace = out == a;
  switch (dtype) {
    case COLL_FLOAT32: DISPATCH(f32, float); break;
    case COLL_FLOAT64: DISPATCH(f64, double); break;
    case COLL_INT8: DISPATCH(i8, int8_t); break;
    case COLL_UINT8: DISPATCH(u8, uint8_t); break;
    case COLL_INT32: DISPATCH(i32, int32_t); break;
    case COLL_INT64: DISPATCH(i64, int64_t); break;
    case COLL_FLOAT16: half_reduce(out, a, b, n, op); break;
    case COLL_BFLOAT16: bf16_reduce(out, a, b, n, op); break;
  }
}

void coll_reduce(void *inout, const void *in, size_t count, coll_dtype_t dtype,
                 coll_op_t op) {
  if (!inout || !in || count == 0) return;
  coll_reduce3(inout, inout, in, count, dtype, op);
}

/* ---- AVERAGE: divide after the SUM ---- */

#define DIVIDE_LOOP(T)                                          \
  do {                                                          \
    T *p = (T *)buf;                                            \
    for (size_t i = 0; i < count; i++) p[i] = (T)(p[i] / (T)divisor); \
  } while (0)

/* The float32 average's division, in blocks like the reductions (vectorised): a scalar
   divide costs several cycles per element, on every gradient of every step. */
REDUCE_CLONES static void f32_divide(float *restrict p, size_t count, float divisor) {
  size_t i = 0;
  for (; i + REDUCE_BLOCK <= count; i += REDUCE_BLOCK)
    for (size_t k = 0; k < REDUCE_BLOCK; k++) p[i + k] = p[i + k] / divisor;
  for (; i < count; i++) p[i] = p[i] / divisor;
}

void coll_divide(void *buf, size_t count, coll_dtype_t dtype, int divisor) {
  /* divisor 0 (or 1) leaves buf unchanged: there is no error channel here, and the
     runtime only divides by the world size. */
  if (!buf || divisor == 0 || divisor == 1) return;
  switch (dtype) {
    case COLL_FLOAT32: f32_divide(buf, count, (float)divisor); break;
    case COLL_FLOAT64: DIVIDE_LOOP(double); break;
    case COLL_INT32: {
      int32_t *p = buf;
      for (size_t i = 0; i < count; i++)
        p[i] = (divisor == -1) ? (int32_t)(0u - (uint32_t)p[i]) : p[i] / divisor;
      break;
    }
    case COLL_INT64: {
      int64_t *p = buf;
      for (size_t i = 0; i < count; i++)
        p[i] = (divisor == -1) ? (int64_t)(0u - (uint64_t)p[i]) : p[i] / divisor;
      break;
    }
    case COLL_INT8: {
      int8_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = (int8_t)(p[i] / divisor);
      break;
    }
    case COLL_UINT8: {
      /* C semantics: the uint8 value converts to int before dividing. */
      uint8_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / divisor);
      break;
    }
    case COLL_FLOAT16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++)
        p[i] = coll_float_to_half(coll_half_to_float(p[i]) / (float)divisor);
      break;
    }
    case COLL_BFLOAT16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++)
        p[i] = bf16_from_float(bf16_to_float(p[i]) / (float)divisor);
      break;
    }
  }
}
