/* test_hvd_fusion_memory: the fusion buffer's memory (hvd_fusion_alloc). From 2 MiB up it
   is aligned to 2 MiB and advised for transparent huge pages (the MPI library's
   single-copy transfers pin the sender's pages one by one, and huge pages make that
   cheap): the mapping that holds it carries the kernel's "hg" flag (MADV_HUGEPAGE) in
   /proc/self/smaps, checked where the kernel has transparent huge pages at all. Every
   byte asked for is usable, and hvd_fusion_free gives the mapping back (smaps no longer
   lists it). One process, no MPI. */
#include "hvd/hvd_internal.h"
#include "tests/check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* 1 when the mapping holding p has VmFlags "hg", 0 when not, -1 when smaps says nothing. */
static int advised_huge(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0, found = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      found = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return found;
}

int main(void) {
  const size_t huge = (size_t)2 << 20;
  const int thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
  const size_t sizes[] = {1, 4096, huge - 1, huge, huge + 1, 3 * huge + 12345, 64 * huge};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    char *p = hvd_fusion_alloc(n);
    CHECK(p != NULL, "hvd_fusion_alloc(%zu) failed", n);
    if (!p) continue;
    memset(p, 0x5a, n);
    CHECK(p[0] == 0x5a && p[n - 1] == 0x5a, "%zu bytes: not usable", n);
    if (n >= huge) {
      CHECK((uintptr_t)p % huge == 0, "%zu bytes at %p: not aligned to 2 MiB", n, (void *)p);
      if (thp) {
        int hg = advised_huge(p);
        CHECK(hg == 1, "%zu bytes at %p: the mapping is %s", n, (void *)p,
              hg == 0 ? "not advised for huge pages (no hg flag)" : "not found in smaps");
      }
    }
    hvd_fusion_free(p, n);
    if (n >= huge)
      CHECK(advised_huge(p) == -1, "%zu bytes at %p: still mapped after hvd_fusion_free", n,
            (void *)p);
  }
  printf("test_hvd_fusion_memory: %d failed checks%s\n", failures,
         thp ? "" : " (no transparent huge pages here: the hg flag not checked)");
  return failures ? 1 : 0;
}
