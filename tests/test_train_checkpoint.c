/* tests/test_train_checkpoint.c: the train program's checkpoint file format.
   A written checkpoint reads back with the same metadata and sections; a flipped byte,
   a truncated file, a file with trailing bytes and a file of another kind are each
   rejected with one line naming the file; a write that fails part-way (a full disk,
   simulated with a file-size limit) leaves the old file byte-identical.
   The module is compiled into this test directly. */
#include "train/checkpoint.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static void copy_file(const char *from, const char *to, long truncate_to, int append) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  int c;
  long n = 0;
  while ((c = fgetc(a)) != EOF && (truncate_to < 0 || n < truncate_to)) {
    fputc(c, b);
    n++;
  }
  if (append) fputc(0, b);
  fclose(a);
  fclose(b);
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      unsigned char *nb = realloc(b, cap);
      if (!nb) break;
      b = nb;
    }
    size_t got = fread(b + n, 1, cap - n, f);
    if (got == 0) break;
    n += got;
  }
  fclose(f);
  *len = n;
  return b;
}

static void expect_reject(const char *path, const char *what) {
  train_ckpt_t c;
  char err[1024] = "";
  int rc = train_ckpt_read(path, &c, err, sizeof err);
  CHECK(rc != 0, "%s: accepted", what);
  CHECK(strstr(err, path) != NULL && strchr(err, '\n') == NULL, "%s: message '%s'", what, err);
  if (rc == 0) train_ckpt_free(&c);
}

int main(void) {
  char dir[] = "/tmp/test_train_checkpoint.XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[256], bad[256], err[1024];
  snprintf(path, sizeof path, "%s/a.ckpt", dir);
  float w[1000];
  int64_t step = 123456789012345ll;
  for (int i = 0; i < 1000; i++) w[i] = i * 0.5f - 3.0f;
  train_ckpt_section_t s[3] = {{"params", w, sizeof w}, {"step", &step, sizeof step},
                               {"empty", NULL, 0}};
  int rc = train_ckpt_write(path, "model=lenet\nepoch=3\nseed=\n", s, 3, err, sizeof err);
  CHECK(rc == 0, "write: %s", err);
  train_ckpt_t c;
  rc = train_ckpt_read(path, &c, err, sizeof err);
  CHECK(rc == 0, "read: %s", err);
  if (rc == 0) {
    char v[64];
    CHECK(train_ckpt_meta(&c, "model", v, sizeof v) && strcmp(v, "lenet") == 0, "model meta");
    CHECK(train_ckpt_meta(&c, "epoch", v, sizeof v) && strcmp(v, "3") == 0, "epoch meta");
    CHECK(train_ckpt_meta(&c, "seed", v, sizeof v) && strcmp(v, "") == 0, "empty meta");
    CHECK(train_ckpt_meta(&c, "mode", v, sizeof v) == NULL, "prefix of a key matched");
    const train_ckpt_section_t *p = train_ckpt_find(&c, "params");
    CHECK(p && p->nbytes == sizeof w && memcmp(p->data, w, sizeof w) == 0, "params section");
    p = train_ckpt_find(&c, "step");
    CHECK(p && p->nbytes == 8 && memcmp(p->data, &step, 8) == 0, "step section");
    p = train_ckpt_find(&c, "empty");
    CHECK(p && p->nbytes == 0, "empty section");
    CHECK(train_ckpt_find(&c, "nothing") == NULL, "found a missing section");
    train_ckpt_free(&c);
  }
  /* every single-byte corruption is caught */
  snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
  struct stat st;
  stat(path, &st);
  for (long off = 0; off < st.st_size; off += 97) {
    copy_file(path, bad, -1, 0);
    FILE *f = fopen(bad, "r+b");
    fseek(f, off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
    expect_reject(bad, "flipped byte");
  }
  copy_file(path, bad, st.st_size - 1, 0);
  expect_reject(bad, "truncated by one byte");
  copy_file(path, bad, 10, 0);
  expect_reject(bad, "truncated to 10 bytes");
  copy_file(path, bad, -1, 1);
  expect_reject(bad, "trailing byte");
  FILE *f = fopen(bad, "wb");
  fputs("{\"not\": \"a checkpoint\"}\n", f);
  fclose(f);
  expect_reject(bad, "another kind of file");
  expect_reject("/nonexistent/dir/x.ckpt", "missing file");

  /* A write that cannot happen leaves the existing file as it was. */
  char ro[256];
  snprintf(ro, sizeof ro, "%s/nodir/x.ckpt", dir);
  rc = train_ckpt_write(ro, "model=x\n", s, 1, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "nodir") != NULL, "write into a missing directory: '%s'", err);

  /* A write that fails part-way (the disk fills up: here a file-size limit of 2 KiB in a
     child process, so the 4 KiB checkpoint cannot be written) over an existing
     checkpoint fails with a message naming the file, and leaves the old checkpoint
     byte-identical and no temporary file behind. */
  size_t old_len = 0;
  unsigned char *old = read_all(path, &old_len);
  CHECK(old != NULL && old_len > 2048, "reading %s back", path);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);   /* the failing write returns EFBIG instead */
    struct rlimit lim = {2048, 2048};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
    float w2[1000];
    for (int i = 0; i < 1000; i++) w2[i] = -w[i];
    train_ckpt_section_t s2[1] = {{"params", w2, sizeof w2}};
    char e2[1024] = "";
    int r2 = train_ckpt_write(path, "model=lenet\nepoch=4\n", s2, 1, e2, sizeof e2);
    printf("write with the disk full: rc %d: %s\n", r2, e2);
    fflush(stdout);
    _exit(r2 != 0 && strstr(e2, "a.ckpt") != NULL ? 0 : 4);
  }
  int wst = 0;
  CHECK(pid > 0 && waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "a write over a full disk did not fail with a message naming the file (child "
        "status %d)", wst);
  size_t now_len = 0;
  unsigned char *now = read_all(path, &now_len);
  CHECK(now != NULL && old != NULL && now_len == old_len && memcmp(now, old, old_len) == 0,
        "the old checkpoint changed after a failed write (%zu bytes, was %zu)",
        now ? now_len : 0, old_len);
  rc = train_ckpt_read(path, &c, err, sizeof err);
  CHECK(rc == 0, "the old checkpoint no longer reads after a failed write: %s", err);
  if (rc == 0) train_ckpt_free(&c);
  DIR *dh = opendir(dir);
  struct dirent *de;
  while (dh && (de = readdir(dh)) != NULL)
    CHECK(strstr(de->d_name, ".tmp.") == NULL, "temporary file %s left behind", de->d_name);
  if (dh) closedir(dh);
  free(old);
  free(now);

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) return 1;
  printf("checkpoint: all checks passed\n");
  return 0;
}
