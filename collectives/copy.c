/* collectives/copy.c: coll_copy, a memcpy whose speed does not depend on how the two
   buffers lie against each other.

   Why not memcpy: glibc 2.36's memcpy copies large blocks with `rep movsb`, which on the
   AMD EPYC (Zen 3) machines we measure on runs at 2.1-2.9 GB/s instead of 24-36 GB/s
   whenever the destination sits 1-31 bytes past the source modulo 64 (copies of 128 KiB
   in cache, every offset pair tried). Tensor fusion copies a tensor into the fusion
   buffer and back out at whatever offsets the tensors have, so one of the two copies
   nearly always fell into that window. A plain loop of unaligned vector loads and
   stores, its stores aligned, runs at full speed for every offset pair. */
#include <stdint.h>
#include <string.h>

#include "collectives/coll_internal.h"

/* Below this memcpy is as good and the loop's set-up is not worth it. */
#define COPY_LOOP_MIN 512

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Copies the head with memcpy so that every store of the loop is 32-byte aligned (a
   store that splits a cache line costs twice); loads stay unaligned. */
__attribute__((target("avx2"))) static void copy_avx2(char *restrict d, const char *restrict s,
                                                      size_t n) {
  size_t head = (32u - ((uintptr_t)d & 31u)) & 31u;
  if (head > n) head = n;
  memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
    _mm256_store_si256((__m256i *)(d + i), a);
    _mm256_store_si256((__m256i *)(d + i + 32), b);
    _mm256_store_si256((__m256i *)(d + i + 64), c);
    _mm256_store_si256((__m256i *)(d + i + 96), e);
  }
  memcpy(d + i, s + i, n - i);
}

/* x86-64's baseline (SSE2), for CPUs without AVX2. */
static void copy_sse2(char *restrict d, const char *restrict s, size_t n) {
  size_t head = (16u - ((uintptr_t)d & 15u)) & 15u;
  if (head > n) head = n;
  memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_store_si128((__m128i *)(d + i), a);
    _mm_store_si128((__m128i *)(d + i + 16), b);
    _mm_store_si128((__m128i *)(d + i + 32), c);
    _mm_store_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i);
}
#endif

int coll_copy_avx2_supported(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

void coll_copy_form(void *dst, const void *src, size_t bytes, coll_copy_form_t form) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (form == COLL_COPY_AVX2) {
    copy_avx2(dst, src, bytes);
    return;
  }
  if (form == COLL_COPY_SSE2) {
    copy_sse2(dst, src, bytes);
    return;
  }
#endif
  (void)form;
  if (bytes) memcpy(dst, src, bytes);
}

void coll_copy(void *dst, const void *src, size_t bytes) {
  coll_copy_form_t form = COLL_COPY_MEMCPY;
#if defined(__x86_64__) && defined(__GNUC__)
  if (bytes >= COPY_LOOP_MIN) form = coll_copy_avx2_supported() ? COLL_COPY_AVX2 : COLL_COPY_SSE2;
#endif
  coll_copy_form(dst, src, bytes, form);
}
