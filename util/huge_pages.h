/* util/huge_pages.h: zeroed memory in transparent huge pages, for the large buffers that
   collectives move between processes (hvd's fusion buffer, nn's flat gradients and
   parameters).

   Why: on one host the MPI library moves a large message with one copy out of the
   sender's memory (process_vm_readv), and the kernel pins the sender's pages for it a
   page at a time. With 4 KiB pages that pinning was a fifth of the profile of a 2 MiB
   ring allreduce; 2 MiB pages took the ring from 6.3 to 11.8 GB/s at 2 MiB (np=2, AMD
   EPYC Zen 3).

   Below one huge page: plain calloc. From one huge page up the memory is mapped for the
   buffer alone (mmap, 2 MiB aligned, MADV_HUGEPAGE), so the advice never outlives it on
   memory malloc hands out later. Where the kernel has no transparent huge pages the
   advice fails and small pages serve as well. Under AddressSanitizer: calloc (below).
   Header-only, as util/clock.h, so every module can use it without linking anything. */
#ifndef UTIL_HUGE_PAGES_H
#define UTIL_HUGE_PAGES_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define UTIL_HUGE_PAGE_BYTES ((size_t)2 << 20)

/* Under AddressSanitizer every size takes the calloc path: a mapping rounded up to 2 MiB
   would hide an overrun of the buffer in its slack, where calloc's redzones catch it. */
#if defined(__SANITIZE_ADDRESS__)
#define UTIL_HUGE_PAGES_USED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UTIL_HUGE_PAGES_USED 0
#endif
#endif
#ifndef UTIL_HUGE_PAGES_USED
#define UTIL_HUGE_PAGES_USED 1
#endif

static inline size_t util_huge_rounded(size_t bytes) {
  return (bytes + UTIL_HUGE_PAGE_BYTES - 1) & ~(UTIL_HUGE_PAGE_BYTES - 1);
}

/* bytes of zeroed memory (at least 1 byte is allocated for 0); NULL when out of memory.
   Give it back with util_huge_free and the same byte count. */
static inline void *util_huge_alloc(size_t bytes) {
  if (!UTIL_HUGE_PAGES_USED || bytes < UTIL_HUGE_PAGE_BYTES) return calloc(bytes ? bytes : 1, 1);
  if (bytes > SIZE_MAX - 2 * UTIL_HUGE_PAGE_BYTES) return NULL;
  const size_t rounded = util_huge_rounded(bytes), mapped = rounded + UTIL_HUGE_PAGE_BYTES;
  char *m = (char *)mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
  if (m == MAP_FAILED) return NULL;
  /* Keep the 2 MiB-aligned part; give back what lies before and after it. */
  char *p = (char *)(((uintptr_t)m + UTIL_HUGE_PAGE_BYTES - 1) &
                     ~(uintptr_t)(UTIL_HUGE_PAGE_BYTES - 1));
  size_t head = (size_t)(p - m), tail = mapped - head - rounded;
  if ((head && munmap(m, head) != 0) || (tail && munmap(p + rounded, tail) != 0)) {
    (void)munmap(m, mapped); /* cannot trim (never seen): drop the whole mapping */
    return NULL;
  }
  /* Ignored: without transparent huge pages (EINVAL) small pages serve as well. */
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

/* Frees what util_huge_alloc(bytes) returned (NULL: nothing). */
static inline void util_huge_free(void *p, size_t bytes) {
  if (!p) return;
  if (!UTIL_HUGE_PAGES_USED || bytes < UTIL_HUGE_PAGE_BYTES) free(p);
  else (void)munmap(p, util_huge_rounded(bytes)); /* EINVAL only for a pointer not ours */
}

#endif
