/* tests/fuzz/fuzz.h: what the fuzz harnesses share. Each harness defines
   LLVMFuzzerTestOneInput; `make fuzz` links it with libFuzzer (clang), the normal build
   with tests/fuzz/replay.c, which runs saved inputs through it (make test:
   tests/test_fuzz_regressions.sh). The readers under test take paths, so an input is
   handed to them as an in-memory file (memfd) named /proc/self/fd/N: no disk, nothing to
   clean up but the descriptor. */
#ifndef HVD_FUZZ_H
#define HVD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An in-memory file holding data[0..size); its path goes into path[32]. Returns the
   descriptor (close it when done), or -1 (the harness then aborts: the machine is
   broken, not the code under test). */
static inline int fuzz_memfile(const void *data, size_t size, char path[32]) {
  int fd = memfd_create("fuzz", 0);
  if (fd < 0) {
    perror("memfd_create");
    abort();
  }
  const char *p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) {
      perror("write to memfd");
      abort();
    }
    p += n;
    size -= (size_t)n;
  }
  snprintf(path, 32, "/proc/self/fd/%d", fd);
  return fd;
}

/* Splits data at '\n' into a NULL-terminated argv whose argv[0] is prog: one argument a
   line, so arguments may hold spaces, '=' and anything but a newline (a last newline
   ends the last line, as in a text file). A NUL byte ends the input. Free with
   fuzz_argv_free. */
typedef struct {
  int argc;
  char **argv;
  char *text;
} fuzz_argv_t;

static inline void fuzz_argv_make(fuzz_argv_t *a, const char *prog, const uint8_t *data,
                                  size_t size) {
  a->text = malloc(size + 1);
  if (!a->text) abort();
  memcpy(a->text, data, size);
  a->text[size] = '\0';
  size = strlen(a->text);
  if (size > 0 && a->text[size - 1] == '\n') a->text[--size] = '\0';  /* a file's last newline */
  size_t lines = 1;
  for (size_t i = 0; i < size; i++) lines += a->text[i] == '\n';
  a->argv = calloc(lines + 2, sizeof *a->argv);
  if (!a->argv) abort();
  a->argc = 0;
  a->argv[a->argc++] = (char *)prog;
  if (size == 0) return;
  char *s = a->text;
  for (;;) {
    char *nl = strchr(s, '\n');
    if (nl) *nl = '\0';
    a->argv[a->argc++] = s;
    if (!nl) break;
    s = nl + 1;
  }
  a->argv[a->argc] = NULL;
}

static inline void fuzz_argv_free(fuzz_argv_t *a) {
  free(a->argv);
  free(a->text);
}

/* Touches every byte of a buffer the code under test handed back, so that a pointer or
   length past the end of its allocation shows up under ASan. */
static inline unsigned fuzz_touch(const void *p, size_t n) {
  const volatile unsigned char *b = p;
  unsigned sum = 0;
  for (size_t i = 0; i < n; i++) sum += b[i];
  return sum;
}

#endif /* HVD_FUZZ_H */
