/* tests/test_train_data.c: the train program's data loader and sharding.
   IDX files (gzip and plain) written into a temp dir: good, corrupt and truncated;
   CIFAR-10 batches good and truncated; shards of 1..4 ranks cover every index of an
   epoch exactly once; epochs differ, seeds reproduce; augmentation stays in bounds.
   The module is compiled into this test directly (it is part of build/train, not of a
   library). */
#include "train/data.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <math.h>
#include <unistd.h>

#include "tests/check.h"

static char tmpdir[256];

static void be(unsigned char *p, uint32_t v) {
  p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

/* Writes an IDX file (gz when gz) holding n items; dims==3: n x 28 x 28 of pattern. */
static void write_idx(const char *path, int dims, uint32_t n, int gz, int truncate_by,
                      uint8_t magic3) {
  size_t hdr = 4 + 4 * (size_t)dims;
  size_t per = dims == 3 ? 28 * 28 : 1;
  size_t len = hdr + per * n;
  unsigned char *buf = malloc(len);
  buf[0] = 0; buf[1] = 0; buf[2] = 8; buf[3] = magic3 ? magic3 : (uint8_t)dims;
  be(buf + 4, n);
  if (dims == 3) { be(buf + 8, 28); be(buf + 12, 28); }
  for (size_t i = 0; i < per * n; i++)
    buf[hdr + i] = dims == 3 ? (uint8_t)(i * 7) : (uint8_t)((i / per) % 10);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    gzwrite(f, buf, (unsigned)len);
    gzclose(f);
    if (truncate_by > 0) {
      struct stat st;
      stat(path, &st);
      if (truncate(path, st.st_size - truncate_by) != 0) perror("truncate");
    }
  } else {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, len - (truncate_by > 0 ? (size_t)truncate_by : 0), f);
    fclose(f);
  }
  free(buf);
}

static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

static void expect_error(int rc, const char *err, const char *must_contain, const char *what) {
  CHECK(rc != 0, "%s: loading succeeded, expected an error", what);
  CHECK(strstr(err, must_contain) != NULL, "%s: error '%s' does not name '%s'", what, err,
        must_contain);
  CHECK(strchr(err, '\n') == NULL, "%s: error is not one line: '%s'", what, err);
}

static void test_idx(void) {
  char img[512], lab[512], err[1024];
  train_dataset_t d;
  snprintf(img, sizeof img, "%s/img.gz", tmpdir);
  snprintf(lab, sizeof lab, "%s/lab.gz", tmpdir);
  write_idx(img, 3, 50, 1, 0, 0);
  write_idx(lab, 1, 50, 1, 0, 0);
  int rc = train_load_idx(img, lab, &d, err, sizeof err);
  CHECK(rc == 0, "good gz IDX failed: %s", err);
  if (rc == 0) {
    CHECK(d.n == 50 && d.c == 1 && d.h == 28 && d.w == 28, "shape %d %d %d %d", d.n, d.c, d.h,
          d.w);
    CHECK(d.images[5] == (uint8_t)35 && d.images[28 * 28 * 3 + 1] == (uint8_t)((28 * 28 * 3 + 1) * 7),
          "pixel values");
    CHECK(d.labels[13] == 3, "label 13 is %d", d.labels[13]);
    train_dataset_free(&d);
  }
  /* plain (uncompressed) files load the same way */
  snprintf(img, sizeof img, "%s/img.raw", tmpdir);
  write_idx(img, 3, 50, 0, 0, 0);
  rc = train_load_idx(img, lab, &d, err, sizeof err);
  CHECK(rc == 0, "plain IDX failed: %s", err);
  if (rc == 0) train_dataset_free(&d);

  /* a byte after the data (a file of more items than its header says) */
  snprintf(img, sizeof img, "%s/trailing.raw", tmpdir);
  write_idx(img, 3, 50, 0, 0, 0);
  FILE *tf = fopen(img, "ab");
  CHECK(tf != NULL, "cannot append to %s", img);
  if (tf) {
    fputc(7, tf);
    fclose(tf);
  }
  rc = train_load_idx(img, lab, &d, err, sizeof err);
  expect_error(rc, err, "bytes after the", "trailing byte");
  expect_error(rc, err, img, "trailing byte, the file");

  /* truncated gz */
  snprintf(img, sizeof img, "%s/trunc.gz", tmpdir);
  write_idx(img, 3, 50, 1, 100, 0);
  rc = train_load_idx(img, lab, &d, err, sizeof err);
  expect_error(rc, err, img, "truncated gz");
  /* truncated plain */
  snprintf(img, sizeof img, "%s/trunc.raw", tmpdir);
  write_idx(img, 3, 50, 0, 1, 0);
  rc = train_load_idx(img, lab, &d, err, sizeof err);
  expect_error(rc, err, img, "truncated plain");
  /* corrupt gz body (CRC or inflate error) */
  snprintf(img, sizeof img, "%s/corrupt.gz", tmpdir);
  write_idx(img, 3, 50, 1, 0, 0);
  struct stat st;
  stat(img, &st);
  flip_byte(img, st.st_size / 2);
  rc = train_load_idx(img, lab, &d, err, sizeof err);
  expect_error(rc, err, img, "corrupt gz");
  /* wrong magic: labels file given as images */
  rc = train_load_idx(lab, lab, &d, err, sizeof err);
  expect_error(rc, err, lab, "wrong magic");
  /* ... for the reason it is wrong, not some later symptom of reading it as images */
  expect_error(rc, err, "not an IDX file of unsigned bytes with 3 dimension(s)",
               "wrong magic, the reason");
  /* count mismatch */
  char lab2[512];
  snprintf(lab2, sizeof lab2, "%s/lab49.gz", tmpdir);
  write_idx(lab2, 1, 49, 1, 0, 0);
  snprintf(img, sizeof img, "%s/img.gz", tmpdir);
  rc = train_load_idx(img, lab2, &d, err, sizeof err);
  expect_error(rc, err, lab2, "count mismatch");
  /* missing file */
  rc = train_load_idx("/nonexistent/x.gz", lab, &d, err, sizeof err);
  expect_error(rc, err, "/nonexistent/x.gz", "missing file");
  /* a named data set directory with one corrupt file names that file */
  char dir[512], p[600];
  snprintf(dir, sizeof dir, "%s/fm", tmpdir);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir); write_idx(p, 3, 20, 1, 0, 0);
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir); write_idx(p, 1, 20, 1, 0, 0);
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir); write_idx(p, 3, 10, 1, 0, 0);
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir); write_idx(p, 1, 10, 1, 0, 0);
  train_dataset_t tr, te;
  rc = train_load_dataset("fashion-mnist", dir, 1, 0, 0, 0, 0, 0, &tr, &te, err, sizeof err);
  CHECK(rc == 0 && tr.n == 20 && te.n == 10, "named data set: %s", err);
  if (rc == 0) { train_dataset_free(&tr); train_dataset_free(&te); }
  write_idx(p, 1, 10, 1, 5, 0);
  rc = train_load_dataset("fashion-mnist", dir, 1, 0, 0, 0, 0, 0, &tr, &te, err, sizeof err);
  expect_error(rc, err, "t10k-labels-idx1-ubyte.gz", "named data set, truncated labels");
}

static void test_cifar(void) {
  char p[512], err[1024];
  snprintf(p, sizeof p, "%s/data.bin", tmpdir);
  FILE *f = fopen(p, "wb");
  for (int r = 0; r < 7; r++) {
    fputc(r % 10, f);
    for (int i = 0; i < 3072; i++) fputc((r + i) & 255, f);
  }
  fclose(f);
  train_dataset_t d;
  const char *paths[2] = {p, p};
  int rc = train_load_cifar(paths, 2, &d, err, sizeof err);
  CHECK(rc == 0, "cifar: %s", err);
  if (rc == 0) {
    CHECK(d.n == 14 && d.c == 3 && d.h == 32 && d.labels[9] == 2, "cifar shape/labels");
    CHECK(d.images[3072 * 3 + 5] == 8, "cifar pixel");
    train_dataset_free(&d);
  }
  if (truncate(p, 7 * 3073 - 10) != 0) perror("truncate");
  rc = train_load_cifar(paths, 1, &d, err, sizeof err);
  expect_error(rc, err, p, "truncated cifar");
}

static void test_sharding(void) {
  const int ns[] = {1, 7, 64, 100, 1001};
  for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
    int n = ns[t];
    uint32_t *perm = malloc(sizeof(uint32_t) * n);
    int *seen = calloc(n, sizeof(int));
    for (int size = 1; size <= 4; size++) {
      for (int batch = 1; batch <= 33; batch += 8) {
        memset(seen, 0, sizeof(int) * n);
        train_epoch_permutation(perm, n, 42, 3);
        int steps = train_steps_per_epoch(n, size, batch);
        CHECK(steps == (n + batch * size - 1) / (batch * size), "steps %d", steps);
        int covered = 0;
        for (int s = 0; s < steps; s++) {
          int total = train_step_total(n, size, batch, s), sum = 0;
          CHECK(total > 0 && total <= batch * size, "step %d total %d", s, total);
          for (int r = 0; r < size; r++) {
            int off = -1;
            int c = train_step_slice(n, r, size, batch, s, &off);
            CHECK(c >= 0 && c <= batch, "count %d", c);
            CHECK(c == train_step_count(n, r, size, batch, s), "count and slice disagree");
            /* rank r's slice lies inside global batch s, after rank r-1's */
            CHECK(off >= s * batch * size && off + c <= s * batch * size + total,
                  "n=%d size=%d batch=%d step %d rank %d: slice [%d, %d) outside its batch", n,
                  size, batch, s, r, off, off + c);
            for (int k = 0; k < c; k++) seen[perm[off + k]]++;
            sum += c;
          }
          CHECK(sum == total, "step %d: slices hold %d of %d", s, sum, total);
          covered += sum;
        }
        CHECK(covered == n, "n=%d size=%d: covered %d", n, size, covered);
        for (int i = 0; i < n; i++)
          CHECK(seen[i] == 1, "n=%d size=%d batch=%d: index %d seen %d times", n, size, batch, i,
                seen[i]);
      }
    }
    free(perm);
    free(seen);
  }
  /* The same global batch on 4 ranks x 16, 2 x 32 and 1 x 64 holds the same samples (an
     elastic restart on fewer ranks trains on the same batches). */
  enum { N = 1001 };
  static uint32_t perm[N];
  train_epoch_permutation(perm, N, 5, 1);
  for (int s = 0; s < train_steps_per_epoch(N, 4, 16); s++) {
    unsigned char in[3][N];
    memset(in, 0, sizeof in);
    const int sizes[3] = {4, 2, 1};
    for (int v = 0; v < 3; v++)
      for (int r = 0; r < sizes[v]; r++) {
        int off = 0, c = train_step_slice(N, r, sizes[v], 64 / sizes[v], s, &off);
        for (int k = 0; k < c; k++) in[v][perm[off + k]] = 1;
      }
    CHECK(memcmp(in[0], in[1], N) == 0 && memcmp(in[0], in[2], N) == 0,
          "global batch %d differs between 4x16, 2x32 and 1x64", s);
  }
  /* same seed and epoch: same order; another epoch or seed: another order */
  uint32_t a[500], b[500], c[500], d[500];
  train_epoch_permutation(a, 500, 7, 0);
  train_epoch_permutation(b, 500, 7, 0);
  train_epoch_permutation(c, 500, 7, 1);
  train_epoch_permutation(d, 500, 8, 0);
  CHECK(memcmp(a, b, sizeof a) == 0, "permutation not reproducible");
  CHECK(memcmp(a, c, sizeof a) != 0, "epochs 0 and 1 have the same order");
  CHECK(memcmp(a, d, sizeof a) != 0, "seeds 7 and 8 give the same order");
}

static void test_batch(void) {
  char err[256];
  train_dataset_t d;
  int rc = train_make_synthetic(20, 3, 8, 8, 10, 5, &d, err, sizeof err);
  CHECK(rc == 0, "synthetic: %s", err);
  if (rc) return;
  train_dataset_t d2;
  train_make_synthetic(20, 3, 8, 8, 10, 5, &d2, err, sizeof err);
  CHECK(memcmp(d.images, d2.images, 20 * 192) == 0, "synthetic not reproducible");
  train_dataset_free(&d2);
  uint32_t idx[4] = {3, 0, 19, 7};
  float x[4 * 192], xa[4 * 192];
  int32_t y[4];
  train_batch_opts_t o = {{0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}, 0, 0, 1, 0};
  train_make_batch(&d, idx, 4, &o, x, y);
  CHECK(y[2] == d.labels[19], "batch label");
  float want = (d.images[19 * 192 + 10] / 255.0f - 0.5f) / 0.25f;
  CHECK(fabsf(x[2 * 192 + 10] - want) < 1e-5f, "normalised %g vs %g", x[2 * 192 + 10], want);
  o.aug_pad = 2;
  o.aug_flip = 1;
  train_make_batch(&d, idx, 4, &o, xa, y);
  int differs = 0;
  for (int i = 0; i < 4 * 192; i++) {
    CHECK(xa[i] >= -2.0001f && xa[i] <= 2.0001f, "augmented value %g out of range", xa[i]);
    differs += xa[i] != x[i];
  }
  CHECK(differs > 0, "augmentation changed nothing");
  float xb[4 * 192];
  train_make_batch(&d, idx, 4, &o, xb, y);
  CHECK(memcmp(xa, xb, sizeof xa) == 0, "augmentation not reproducible");
  train_dataset_t val;
  rc = train_split_tail(&d, 5, &val, err, sizeof err);
  CHECK(rc == 0 && d.n == 15 && val.n == 5 && val.labels[0] == d.labels[15], "split tail");
  if (rc == 0) train_dataset_free(&val);
  train_dataset_free(&d);
}

/* Writes len bytes to path, gzip-compressed when gz. */
static void write_file(const char *path, const void *buf, size_t len, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f || gzwrite(f, buf, (unsigned)len) != (int)len || gzclose(f) != Z_OK)
      fprintf(stderr, "cannot write %s\n", path);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
      fprintf(stderr, "cannot write %s\n", path);
  }
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The gzip trailer (CRC-32 and length, the last 8 bytes) must be there and agree. The
   file is large enough that gzread hands the data straight to the caller's buffer: the
   case where zlib's gzread did not notice a missing trailer. */
static void test_idx_gzip_trailer(void) {
  const uint32_t n = 60000;
  size_t len = 8 + n;
  unsigned char *buf = malloc(len);
  buf[0] = 0; buf[1] = 0; buf[2] = 8; buf[3] = 1;
  be(buf + 4, n);
  for (uint32_t i = 0; i < n; i++) buf[8 + i] = (uint8_t)(i * 7 / 3 % 10);
  char good[512], p[512], err[1024];
  uint32_t dims[3];
  snprintf(good, sizeof good, "%s/trailer-good.gz", tmpdir);
  write_file(good, buf, len, 1);
  free(buf);
  uint8_t *d = train_idx_read(good, 1, dims, err, sizeof err);
  CHECK(d && dims[0] == n && d[7] == 7 * 7 / 3 % 10, "good gz labels: %s", d ? "bad data" : err);
  free(d);
  long size = file_size(good);
  const struct {
    const char *what;
    long keep;      /* bytes kept of the good file */
    long flip;      /* offset of a byte to flip (-1: none) */
  } cases[] = {
      {"gz without its 8-byte trailer (head -c -8)", size - 8, -1},
      {"gz without its last byte (head -c -1)", size - 1, -1},
      {"gz without its length (head -c -4)", size - 4, -1},
      {"gz with a flipped CRC byte", size, size - 8},
      {"gz with a flipped length byte", size, size - 1},
      {"gz cut in the middle", size / 2, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(p, sizeof p, "%s/trailer-%zu.gz", tmpdir, i);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "head -c %ld %s > %s", cases[i].keep, good, p);
    if (system(cmd) != 0) fprintf(stderr, "cannot run %s\n", cmd);
    if (cases[i].flip >= 0) flip_byte(p, cases[i].flip);
    err[0] = '\0';
    d = train_idx_read(p, 1, dims, err, sizeof err);
    expect_error(d ? 0 : -1, err, p, cases[i].what);
    free(d);
  }
}

/* Headers claiming more than the file can hold fail before any allocation of that size:
   a count that wraps size_t to 0 (256 x 2^28 x 2^28 = 2^64), one over the fixed limit,
   one over what a gzip file of that size can inflate to (1032:1), one over a plain
   file's size. */
static void test_idx_header_sizes(void) {
  const struct {
    const char *what;
    uint32_t dims[3];
    int gz;
    size_t data;     /* bytes of data after the header */
    const char *needle;
  } cases[] = {
      {"256 x 2^28 x 2^28 (wraps to 0), gz", {256, 1u << 28, 1u << 28}, 1, 0, "corrupt header"},
      {"256 x 2^28 x 2^28 (wraps to 0), plain", {256, 1u << 28, 1u << 28}, 0, 0, "corrupt header"},
      {"2^28 x 2^28 x 1 (over the limit)", {1u << 28, 1u << 28, 1}, 1, 0, "corrupt header"},
      {"2^28 x 8 x 8 in a tiny gz (16 GiB)", {1u << 28, 8, 8}, 1, 10, "1032"},
      {"1000 x 28 x 28 in a 26-byte plain file", {1000, 28, 28}, 0, 10, "corrupt header"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char buf[16 + 10] = {0, 0, 8, 3};
    for (int k = 0; k < 3; k++) be(buf + 4 + 4 * k, cases[i].dims[k]);
    char p[512], err[1024] = "";
    snprintf(p, sizeof p, "%s/huge-%zu%s", tmpdir, i, cases[i].gz ? ".gz" : "");
    write_file(p, buf, 16 + cases[i].data, cases[i].gz);
    uint32_t dims[3];
    uint8_t *d = train_idx_read(p, 3, dims, err, sizeof err);
    expect_error(d ? 0 : -1, err, p, cases[i].what);
    CHECK(d != NULL || strstr(err, cases[i].needle), "%s: '%s' does not say '%s'",
          cases[i].what, err, cases[i].needle);
    free(d);
  }
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_train_data.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_idx();
  test_idx_gzip_trailer();
  test_idx_header_sizes();
  test_cifar();
  test_sharding();
  test_batch();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("train data: all checks passed\n");
  return 0;
}
