/* test_util_huge_pages: util/huge_pages.h, and the buffers that use it. From 2 MiB up
   util_huge_alloc's memory is aligned to 2 MiB and advised for transparent huge pages
   (the MPI library's single-copy transfers pin the sender's pages one by one, and huge
   pages make that cheap): the mapping that holds it carries the kernel's "hg" flag
   (MADV_HUGEPAGE) in /proc/self/smaps, checked where the kernel has transparent huge pages
   at all. Every byte asked for is zero and usable, and util_huge_free gives the mapping
   back (smaps no longer lists it). Then the users: an nn model's flat parameters and
   gradients (what a broadcast and every step's allreduce move) lie in such memory.
   Under AddressSanitizer the allocator takes calloc's path at every size (its redzones
   catch overruns), so only zeroing and usability are checked there. One process, no MPI. */
#include "util/huge_pages.h"
#include "nn/nn.h"
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

static void check_huge(const void *p, const char *what, int thp) {
  if (!UTIL_HUGE_PAGES_USED) return;
  CHECK((uintptr_t)p % UTIL_HUGE_PAGE_BYTES == 0, "%s at %p: not aligned to 2 MiB", what, p);
  if (!thp) return;
  int hg = advised_huge(p);
  CHECK(hg == 1, "%s at %p: the mapping is %s", what, p,
        hg == 0 ? "not advised for huge pages (no hg flag)" : "not found in smaps");
}

int main(void) {
  const size_t huge = UTIL_HUGE_PAGE_BYTES;
  const int thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
  const size_t sizes[] = {0, 1, 4096, huge - 1, huge, huge + 1, 3 * huge + 12345, 64 * huge};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    unsigned char *p = util_huge_alloc(n);
    CHECK(p != NULL, "util_huge_alloc(%zu) failed", n);
    if (!p) continue;
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += p[i] != 0;
    CHECK(nonzero == 0, "%zu bytes: %zu bytes not zero", n, nonzero);
    memset(p, 0x5a, n ? n : 1);
    CHECK(p[0] == 0x5a && (n == 0 || p[n - 1] == 0x5a), "%zu bytes: not usable", n);
    char what[64];
    snprintf(what, sizeof what, "%zu bytes", n);
    if (n >= huge) check_huge(p, what, thp);
    util_huge_free(p, n);
    /* The whole mapping goes, its last page (rounded up to 2 MiB) included. */
    if (n >= huge && UTIL_HUGE_PAGES_USED) {
      CHECK(advised_huge(p) == -1, "%zu bytes at %p: still mapped after util_huge_free", n,
            (void *)p);
      const unsigned char *last = p + util_huge_rounded(n) - 1;
      CHECK(advised_huge(last) == -1, "%zu bytes: the page at %p still mapped after "
            "util_huge_free", n, (const void *)last);
    }
  }
  util_huge_free(NULL, huge); /* nothing */

  /* lenet: 1.66 M parameters, 6.6 MB of gradients. */
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = 2, .seed = 1};
  nn_status_t s = nn_model_create(&m, "lenet", &cfg);
  CHECK(s == NN_OK, "nn_model_create(lenet): %s", nn_last_error());
  if (s == NN_OK) {
    CHECK(nn_model_param_len(m) * sizeof(float) >= huge, "lenet: %zu floats, expected 2 MiB "
          "or more for this check", nn_model_param_len(m));
    check_huge(nn_model_grads(m), "lenet's gradients", thp);
    check_huge(nn_model_params(m), "lenet's parameters", thp);
    nn_model_free(m);
  }
  printf("test_util_huge_pages: %d failed checks%s\n", failures,
         !UTIL_HUGE_PAGES_USED ? " (AddressSanitizer: calloc at every size, as meant)"
         : thp ? "" : " (no transparent huge pages here: the hg flag not checked)");
  return failures ? 1 : 0;
}
