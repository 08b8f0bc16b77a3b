/* tests/test_coll_copy.c: coll_copy, the copy of tensor fusion and of the collectives'
   scratch buffers. Every pair of source and destination offsets modulo 64 (the loops
   align their stores, so each offset pair takes a different head and tail), at lengths
   around the loops' threshold and their steps (the longest at the offsets around the
   vector widths), through each of the three forms (memcpy,
   the SSE2 loop, and the AVX2 loop where the CPU has it) and through coll_copy's own
   choice. Each copy must equal the source byte for byte and leave every byte around the
   destination alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_internal.h"

#define CHECK_MAX_FAILURES 20
#include "tests/check.h"

#define GUARD 96
#define POISON 0xA5
#define MAXLEN (131072 + 95)
#define FORM_COLL_COPY 3 /* after coll_copy_form_t's three: coll_copy itself */

static unsigned char *src, *dst; /* MAXLEN + 128, MAXLEN + 64 + 2 GUARD bytes */

/* Copies n bytes from src offset so to dst offset dof (both modulo 64) with form. */
static void check_copy(int form, size_t n, int so, int dof) {
  unsigned char *s = (unsigned char *)(((uintptr_t)src + 63) & ~(uintptr_t)63) + so;
  unsigned char *base = (unsigned char *)(((uintptr_t)dst + 63) & ~(uintptr_t)63);
  unsigned char *d = base + GUARD / 2 + dof;
  memset(base, POISON, GUARD / 2 + 64 + n + GUARD / 2);
  if (form == FORM_COLL_COPY) coll_copy(d, s, n);
  else coll_copy_form(d, s, n, (coll_copy_form_t)form);
  size_t wrong = 0, first = 0;
  if (n && memcmp(d, s, n) != 0) /* (memcmp first: byte loops are slow under TSan) */
    for (size_t i = 0; i < n; i++)
      if (d[i] != s[i] && wrong++ == 0) first = i;
  CHECK(wrong == 0, "form %d n=%zu src+%d dst+%d: %zu bytes wrong, first at %zu", form, n, so,
        dof, wrong, first);
  size_t outside = 0;
  for (unsigned char *p = base; p < d; p++) outside += *p != POISON;
  for (unsigned char *p = d + n; p < d + n + GUARD / 2; p++) outside += *p != POISON;
  CHECK(outside == 0, "form %d n=%zu src+%d dst+%d: %zu bytes written outside the destination",
        form, n, so, dof, outside);
}

static int edge(int off) {
  return off == 0 || off == 1 || off == 15 || off == 16 || off == 31 || off == 32 ||
         off == 33 || off == 63;
}

int main(void) {
  const size_t lens[] = {0, 1, 31, 64, 511, 512, 513, 639, 640, 4096 + 37, MAXLEN};
  src = malloc(MAXLEN + 128);
  dst = malloc(MAXLEN + 64 + 2 * GUARD);
  if (!src || !dst) {
    fprintf(stderr, "test_coll_copy: out of memory\n");
    return 2;
  }
  /* A pattern with no period that divides 64, 128 or 4096: a byte taken from the wrong
     offset differs from the right one. */
  for (size_t i = 0; i < MAXLEN + 128; i++)
    src[i] = (unsigned char)((i * 131u + (i >> 8) * 7u) % 251u);
  for (int form = 0; form <= FORM_COLL_COPY; form++) {
    if (form == COLL_COPY_AVX2 && !coll_copy_avx2_supported()) continue;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
      for (int so = 0; so < 64; so++)
        for (int dof = 0; dof < 64; dof++)
          /* The longest length only at the offsets around the vector widths (it takes
             the same heads and tails as the 4133 bytes before it; under TSan every
             offset pair of it took two minutes). */
          if (lens[li] < MAXLEN || (edge(so) && edge(dof))) check_copy(form, lens[li], so, dof);
  }
  free(src);
  free(dst);
  printf("test_coll_copy: %d failed checks\n", failures);
  return failures ? 1 : 0;
}
