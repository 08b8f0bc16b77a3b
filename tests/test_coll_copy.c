/* tests/test_coll_copy.c: coll_copy, the copy of tensor fusion and of the collectives'
   scratch buffers. Every pair of source and destination offsets modulo 64 (the loop
   aligns its stores, so each offset pair takes a different head and tail), at lengths
   around the loops' threshold and their steps, through each of the three forms (memcpy,
   the SSE2 loop, and the AVX2 loop where the CPU has it) and through coll_copy's own
   choice. Each copy must equal
   the source byte for byte and leave every byte around the destination alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

#define CHECK_MAX_FAILURES 20
#include "tests/check.h"

#define GUARD 96
#define POISON 0xA5

int main(void) {
  const size_t lens[] = {0, 1, 31, 64, 511, 512, 513, 639, 640, 4096 + 37, 131072 + 95};
  const size_t maxlen = 131072 + 95;
  unsigned char *src = malloc(maxlen + 128), *dst = malloc(maxlen + 64 + 2 * GUARD);
  if (!src || !dst) {
    fprintf(stderr, "test_coll_copy: out of memory\n");
    return 2;
  }
  /* A pattern with no period that divides 64, 128 or 4096: a byte taken from the wrong
     offset differs from the right one. */
  for (size_t i = 0; i < maxlen + 128; i++) src[i] = (unsigned char)((i * 131u + (i >> 8) * 7u) % 251u);
  const int forms = coll_copy_avx2_supported() ? 4 : 3;
  for (int form = 0; form < forms; form++)
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    size_t n = lens[li];
    for (int so = 0; so < 64; so++)
      for (int dof = 0; dof < 64; dof++) {
        /* Buffers start 64-aligned from malloc's 16 at worst: align to 64 first. */
        unsigned char *s = (unsigned char *)(((uintptr_t)src + 63) & ~(uintptr_t)63) + so;
        unsigned char *base = (unsigned char *)(((uintptr_t)dst + 63) & ~(uintptr_t)63);
        unsigned char *d = base + GUARD / 2 + dof;
        memset(base, POISON, GUARD / 2 + 64 + n + GUARD / 2);
        if (form == 3) coll_copy(d, s, n);
        else coll_copy_form(d, s, n, (coll_copy_form_t)form);
        size_t wrong = 0, first = 0;
        for (size_t i = 0; i < n; i++)
          if (d[i] != s[i] && wrong++ == 0) first = i;
        CHECK(wrong == 0, "form %d n=%zu src+%d dst+%d: %zu bytes wrong, first at %zu", form, n,
              so, dof, wrong, first);
        size_t outside = 0;
        for (unsigned char *p = base; p < d; p++) outside += *p != POISON;
        for (unsigned char *p = d + n; p < d + n + GUARD / 2; p++) outside += *p != POISON;
        CHECK(outside == 0, "form %d n=%zu src+%d dst+%d: %zu bytes written outside the "
              "destination", form, n, so, dof, outside);
      }
  }
  free(src);
  free(dst);
  printf("test_coll_copy: %d failed checks\n", failures);
  return failures ? 1 : 0;
}
