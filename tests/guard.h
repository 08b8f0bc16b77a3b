/* tests/guard.h: buffers with guard bytes on both sides, for tests of code that writes
   into caller buffers. guard_alloc(bytes) returns a pointer p to `bytes` usable bytes;
   GUARD_BYTES bytes before p and after p + bytes hold a known pattern, and
   guard_damage(p) counts the guard bytes that no longer hold it, so a write one element
   before or past the buffer fails the test instead of landing in spare, unchecked memory
   (malloc rounds sizes up). The pattern 0xA5 read as any dtype is a small or negative
   number, not NaN, so a sum that reads a guard and writes it back changes it.
   Header-only: nothing is linked into other tests. */
#ifndef TESTS_GUARD_H
#define TESTS_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTES 64   /* a multiple of 16: p keeps malloc's alignment */
#define GUARD_BYTE 0xA5

/* [size_t bytes][pad to 16][GUARD_BYTES front guard][bytes][GUARD_BYTES back guard] */
#define GUARD_HEAD 16

static inline void *guard_alloc(size_t bytes) {
  unsigned char *base = malloc(GUARD_HEAD + 2 * GUARD_BYTES + bytes);
  if (!base) return NULL;
  memcpy(base, &bytes, sizeof bytes);
  memset(base + GUARD_HEAD, GUARD_BYTE, GUARD_BYTES);
  memset(base + GUARD_HEAD + GUARD_BYTES + bytes, GUARD_BYTE, GUARD_BYTES);
  return base + GUARD_HEAD + GUARD_BYTES;
}

/* Guard bytes of p (from guard_alloc) that changed: before the buffer in *before, after
   it in *after (either may be NULL); returns the total. */
static inline size_t guard_damage2(const void *p, size_t *before, size_t *after) {
  const unsigned char *u = p, *base = u - GUARD_BYTES - GUARD_HEAD;
  size_t bytes, b = 0, a = 0;
  memcpy(&bytes, base, sizeof bytes);
  for (size_t i = 0; i < GUARD_BYTES; i++) {
    b += u[-(ptrdiff_t)GUARD_BYTES + (ptrdiff_t)i] != GUARD_BYTE;
    a += u[bytes + i] != GUARD_BYTE;
  }
  if (before) *before = b;
  if (after) *after = a;
  return a + b;
}

static inline size_t guard_damage(const void *p) { return guard_damage2(p, NULL, NULL); }

static inline void guard_free(void *p) {
  if (p) free((unsigned char *)p - GUARD_BYTES - GUARD_HEAD);
}

#endif /* TESTS_GUARD_H */
