/* tests/fuzz/replay.c: main() of a fuzz harness in the normal build (no libFuzzer):
   runs each input file, or every file of each directory, through
   LLVMFuzzerTestOneInput once. A crash is the harness's crash (under a sanitizer build,
   the sanitizer's report); exit 0 means every input ran through. Used by
   tests/test_fuzz_regressions.sh on the saved crashes and the seed corpora.
   Usage: build/fuzz/fuzz_NAME FILE|DIR... */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fprintf(stderr, "replay: out of memory reading %s\n", path);
      fclose(f);
      return -1;
    }
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: error reading %s\n", path);
    free(buf);
    return -1;
  }
  /* libFuzzer hands over exactly size bytes: a copy of that size lets ASan see an
     overread of the input itself. */
  unsigned char *exact = malloc(len ? len : 1);
  if (!exact) abort();
  memcpy(exact, buf, len);
  free(buf);
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: cannot open directory %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "README") || strstr(e->d_name, ".md"))
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      names = realloc(names, cap * sizeof *names);
      if (!names) abort();
    }
    names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
    if (!names[n]) abort();
    sprintf(names[n], "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp_names);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && run_file(names[i]) != 0) rc = -1;
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: %s FILE|DIR...: runs each input (each file of a directory) through the "
            "fuzz harness once\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      rc = 1;
    } else if (S_ISDIR(st.st_mode)) {
      rc |= run_dir(argv[i]) != 0;
    } else {
      rc |= run_file(argv[i]) != 0;
    }
  }
  return rc;
}
