/* train/data.c: loading, sharding and batching of the train program's data. */
#include "train/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

void train_dataset_free(train_dataset_t *d) {
  if (!d) return;
  free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}

/* ---- IDX ----
   An IDX file is read through zlib's inflate directly rather than gzread: gzread does
   not report a gzip stream that ends early when the end of the file is already in its
   input buffer (`head -c -8` of a .gz, trailer gone, reads "successfully"). Here the
   data is good only when inflate reached Z_STREAM_END, which is after it checked the
   CRC and length trailer. A file that does not start with the gzip magic is read as it
   is (MNIST downloads come both ways). */

/* The most a deflate stream can expand: 258 bytes out per 2 bits in (RFC 1951's longest
   match from the shortest code), so 1032 bytes out per byte in. */
#define DEFLATE_MAX_RATIO 1032u

typedef struct {
  FILE *f;
  const char *path;
  int gz;                 /* 1: gzip members, inflated; 0: the bytes as they are */
  int zinit;              /* zs holds inflate state */
  int member_ended;       /* the current gzip member's trailer was read and checked */
  z_stream zs;            /* next_in/avail_in also serve the plain mode */
  uint64_t file_size;     /* bytes on disk; 0 when not a regular file */
  unsigned char in[1 << 16];
} idx_reader_t;

/* Refills the input buffer when it is empty; returns the bytes available, 0 at the end
   of the file, -1 on a read error (err set). */
static int rd_fill(idx_reader_t *r, char *err, size_t errlen) {
  if (r->zs.avail_in > 0) return (int)r->zs.avail_in;
  size_t got = fread(r->in, 1, sizeof r->in, r->f);
  if (got == 0 && ferror(r->f)) {
    snprintf(err, errlen, "%s: read error (%s)", r->path, strerror(errno));
    return -1;
  }
  r->zs.next_in = r->in;
  r->zs.avail_in = (uInt)got;
  return (int)got;
}

static int rd_open(idx_reader_t *r, const char *path, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->f = fopen(path, "rb");
  if (!r->f) {
    snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(r->f), &st) == 0 && S_ISREG(st.st_mode)) r->file_size = (uint64_t)st.st_size;
  if (rd_fill(r, err, errlen) < 0) return -1;
  if (r->zs.avail_in >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) {
    r->gz = 1;
    /* next_in/avail_in already hold the first bytes: inflateInit2 keeps them. */
    if (inflateInit2(&r->zs, 16 + MAX_WBITS) != Z_OK) {
      snprintf(err, errlen, "%s: cannot start zlib (%s)", path,
               r->zs.msg ? r->zs.msg : "out of memory");
      return -1;
    }
    r->zinit = 1;
  }
  return 0;
}

static void rd_close(idx_reader_t *r) {
  if (r->zinit) inflateEnd(&r->zs);
  if (r->f) fclose(r->f);
  r->zinit = 0;
  r->f = NULL;
}

/* Inflates up to len bytes into buf (buf NULL: a scratch buffer, to look for bytes that
   should not be there). Returns the bytes produced, 0 at the clean end of the input
   (every member ended and checked), -1 with err set on a corrupt or truncated stream. */
static long rd_inflate(idx_reader_t *r, unsigned char *buf, size_t len, const char *what,
                       char *err, size_t errlen) {
  for (;;) {
    int avail = rd_fill(r, err, errlen);
    if (avail < 0) return -1;
    if (r->member_ended) {
      if (avail == 0) return 0;
      /* More bytes after a member: another member (gzip allows concatenation), or
         garbage, which inflate's header check reports. */
      inflateReset(&r->zs);
      r->member_ended = 0;
    }
    if (avail == 0) {
      snprintf(err, errlen,
               "%s: truncated file (the gzip stream stops before its end and CRC trailer, "
               "reading %s)", r->path, what);
      return -1;
    }
    unsigned char scratch[256];
    uInt want = len > (1u << 30) ? (1u << 30) : (uInt)len;
    r->zs.next_out = buf ? buf : scratch;
    r->zs.avail_out = buf ? want : (uInt)sizeof scratch;
    uInt before = r->zs.avail_out, in_before = r->zs.avail_in;
    int ret = inflate(&r->zs, Z_NO_FLUSH);
    long produced = (long)(before - r->zs.avail_out);
    if (ret == Z_BUF_ERROR && produced == 0 && r->zs.avail_in == in_before) {
      snprintf(err, errlen, "%s: corrupt file (reading %s: inflate made no progress)", r->path,
               what);
      return -1;
    }
    if (ret == Z_STREAM_END) {
      r->member_ended = 1;
    } else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
      snprintf(err, errlen, "%s: corrupt file (reading %s: %s)", r->path, what,
               r->zs.msg ? r->zs.msg : "invalid gzip data");
      return -1;
    } else if (ret == Z_MEM_ERROR) {
      snprintf(err, errlen, "%s: out of memory inflating", r->path);
      return -1;
    }
    if (produced > 0) return produced;
  }
}

/* Reads exactly len bytes; running out first means the file is truncated. */
static int rd_read_exact(idx_reader_t *r, void *buf, size_t len, const char *what, char *err,
                         size_t errlen) {
  unsigned char *p = buf;
  while (len > 0) {
    long got;
    if (r->gz) {
      got = rd_inflate(r, p, len, what, err, errlen);
      if (got < 0) return -1;
    } else {
      int avail = rd_fill(r, err, errlen);
      if (avail < 0) return -1;
      got = (long)(len < (size_t)avail ? len : (size_t)avail);
      memcpy(p, r->zs.next_in, (size_t)got);
      r->zs.next_in += got;
      r->zs.avail_in -= (uInt)got;
    }
    if (got == 0) {
      snprintf(err, errlen, "%s: truncated file (reading %s: %zu bytes missing)", r->path,
               what, len);
      return -1;
    }
    p += got;
    len -= (size_t)got;
  }
  return 0;
}

/* After the data: nothing may follow, and a gzip stream must end with a good trailer. */
static int rd_finish(idx_reader_t *r, size_t total, char *err, size_t errlen) {
  long got;
  if (r->gz) {
    got = rd_inflate(r, NULL, 0, "what follows the data", err, errlen);
    if (got < 0) return -1;
  } else {
    int avail = rd_fill(r, err, errlen);
    if (avail < 0) return -1;
    got = avail;
  }
  if (got > 0) {
    snprintf(err, errlen, "%s: corrupt file (bytes after the %zu bytes of data)", r->path,
             total);
    return -1;
  }
  return 0;
}

static uint32_t be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Above this an IDX header is taken as corrupt whatever the file: 16 GiB of pixels is
   more than any data set this program trains on fits in memory. */
#define IDX_MAX_BYTES ((size_t)1 << 34)

/* Reads one IDX file of unsigned bytes with the expected number of dimensions; returns
   the data (malloc) and its dims. The size the header claims is checked before anything
   is allocated: against overflow, against IDX_MAX_BYTES, and against what the file can
   hold (a plain file: its size; a gzip file: its size times DEFLATE_MAX_RATIO). */
uint8_t *train_idx_read(const char *path, int want_dims, uint32_t dims[3], char *err,
                        size_t errlen) {
  idx_reader_t *r = malloc(sizeof *r);
  if (!r) {
    snprintf(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  uint8_t *data = NULL;
  if (rd_open(r, path, err, errlen) != 0) goto fail;
  unsigned char hdr[4 + 12];
  if (rd_read_exact(r, hdr, 4, "header", err, errlen) != 0) goto fail;
  if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] != want_dims) {
    snprintf(err, errlen,
             "%s: not an IDX file of unsigned bytes with %d dimension(s) (magic %02x%02x%02x%02x, "
             "expected 000008%02x)",
             path, want_dims, hdr[0], hdr[1], hdr[2], hdr[3], want_dims);
    goto fail;
  }
  size_t hlen = 4 + 4 * (size_t)want_dims;
  if (rd_read_exact(r, hdr + 4, hlen - 4, "header", err, errlen) != 0) goto fail;
  size_t total = 1;
  int overflow = 0;
  char shape[64] = "";
  for (int i = 0; i < want_dims; i++) {
    dims[i] = be32(hdr + 4 + 4 * i);
    size_t l = strlen(shape);
    snprintf(shape + l, sizeof shape - l, "%s%u", i ? " x " : "", dims[i]);
    if (dims[i] == 0 || dims[i] > (1u << 28)) {  /* counts fit an int */
      snprintf(err, errlen, "%s: corrupt header (dimension %d is %u, expected 1..2^28)", path,
               i, dims[i]);
      goto fail;
    }
    if (total > SIZE_MAX / dims[i]) overflow = 1;
    else total *= dims[i];
  }
  if (overflow || total > IDX_MAX_BYTES) {
    snprintf(err, errlen,
             "%s: corrupt header (%s bytes of data claimed, over the limit of %zu bytes)", path,
             shape, IDX_MAX_BYTES);
    goto fail;
  }
  if (r->file_size > 0) {
    uint64_t room;
    if (r->gz) {
      room = r->file_size * DEFLATE_MAX_RATIO;
      if (hlen + total > room) {
        snprintf(err, errlen,
                 "%s: corrupt header (%s = %zu bytes of data claimed; a %llu-byte gzip file "
                 "holds at most %llu, deflate's maximum ratio being %u:1)",
                 path, shape, total, (unsigned long long)r->file_size,
                 (unsigned long long)room, DEFLATE_MAX_RATIO);
        goto fail;
      }
    } else if (hlen + total > r->file_size) {
      snprintf(err, errlen,
               "%s: truncated file or corrupt header (%s = %zu bytes of data claimed, the "
               "file has %llu after the header)",
               path, shape, total, (unsigned long long)(r->file_size - hlen));
      goto fail;
    }
  }
  data = malloc(total);
  if (!data) {
    snprintf(err, errlen, "%s: out of memory for %zu bytes", path, total);
    goto fail;
  }
  if (rd_read_exact(r, data, total, "data", err, errlen) != 0) goto fail;
  if (rd_finish(r, total, err, errlen) != 0) goto fail;
  rd_close(r);
  free(r);
  return data;
fail:
  rd_close(r);
  free(r);
  free(data);
  return NULL;
}

/* An IDX pair whose labels lie in [0, max_label]; num_classes = max_label + 1 (the
   caller may narrow it to the labels seen). */
static int load_idx_pair(const char *images_path, const char *labels_path, int max_label,
                         train_dataset_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  uint32_t idims[3], ldims[3];
  uint8_t *img = train_idx_read(images_path, 3, idims, err, errlen);
  if (!img) return -1;
  uint8_t *lab = train_idx_read(labels_path, 1, ldims, err, errlen);
  if (!lab) {
    free(img);
    return -1;
  }
  if (ldims[0] != idims[0]) {
    snprintf(err, errlen, "%s: %u labels, but %s holds %u images", labels_path, ldims[0],
             images_path, idims[0]);
    goto fail;
  }
  out->labels = malloc(sizeof(int32_t) * ldims[0]);
  if (!out->labels) {
    snprintf(err, errlen, "%s: out of memory", labels_path);
    goto fail;
  }
  for (uint32_t i = 0; i < ldims[0]; i++) {
    if (lab[i] > max_label) {
      snprintf(err, errlen, "%s: corrupt file (label %u of sample %u, expected 0..%d)",
               labels_path, lab[i], i, max_label);
      goto fail;
    }
    out->labels[i] = lab[i];
  }
  free(lab);
  out->images = img;
  out->n = (int)idims[0];
  out->c = 1;
  out->h = (int)idims[1];
  out->w = (int)idims[2];
  out->num_classes = max_label + 1;
  return 0;
fail:
  free(img);
  free(lab);
  free(out->labels);
  memset(out, 0, sizeof *out);
  return -1;
}

int train_load_idx(const char *images_path, const char *labels_path, train_dataset_t *out,
                   char *err, size_t errlen) {
  return load_idx_pair(images_path, labels_path, 9, out, err, errlen);
}

int train_load_idx_sets(const char *train_images, const char *train_labels,
                        const char *test_images, const char *test_labels,
                        train_dataset_t *train, train_dataset_t *test, char *err,
                        size_t errlen) {
  memset(test, 0, sizeof *test);
  if (load_idx_pair(train_images, train_labels, 255, train, err, errlen) != 0) return -1;
  if (load_idx_pair(test_images, test_labels, 255, test, err, errlen) != 0) {
    train_dataset_free(train);
    return -1;
  }
  if (test->h != train->h || test->w != train->w) {
    snprintf(err, errlen, "%s: test images are %dx%d, but %s holds %dx%d images (train and "
             "test must have one shape)", test_images, test->h, test->w, train_images,
             train->h, train->w);
    goto fail;
  }
  /* The classes: 0 .. the largest label of either set (EMNIST letters: 1..26 make 27,
     class 0 unused, as the files number them). */
  int top = 0;
  for (int i = 0; i < train->n; i++) top = train->labels[i] > top ? train->labels[i] : top;
  for (int i = 0; i < test->n; i++) top = test->labels[i] > top ? test->labels[i] : top;
  if (top < 1) {
    snprintf(err, errlen, "%s: every label is 0: a classifier needs at least two classes",
             train_labels);
    goto fail;
  }
  train->num_classes = test->num_classes = top + 1;
  return 0;
fail:
  train_dataset_free(train);
  train_dataset_free(test);
  return -1;
}

void train_norm_from_data(const train_dataset_t *d, float mean[3], float std[3]) {
  size_t per = (size_t)d->h * d->w;
  for (int ch = 0; ch < 3; ch++) {
    int c = ch < d->c ? ch : d->c - 1;  /* fewer channels: repeat the last */
    double s = 0, s2 = 0;
    size_t count = 0;
    for (int i = 0; d->images && c >= 0 && i < d->n; i++) {
      const uint8_t *p = d->images + ((size_t)i * d->c + c) * per;
      for (size_t k = 0; k < per; k++) {
        double v = p[k] / 255.0;
        s += v;
        s2 += v * v;
      }
      count += per;
    }
    double m = count ? s / count : 0.5;
    double var = count ? s2 / count - m * m : 0.0625;
    /* A constant image set would divide by zero: keep it as it is (std 1). */
    mean[ch] = (float)m;
    std[ch] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
  }
}

/* ---- CIFAR-10 ---- */

#define CIFAR_RECORD (1 + 3 * 32 * 32)

int train_load_cifar(const char *const *paths, int count, train_dataset_t *out, char *err,
                     size_t errlen) {
  memset(out, 0, sizeof *out);
  size_t total = 0;
  for (int i = 0; i < count; i++) {
    struct stat st;
    if (stat(paths[i], &st) != 0) {
      snprintf(err, errlen, "%s: cannot open (%s)", paths[i], strerror(errno));
      return -1;
    }
    if (st.st_size == 0 || st.st_size % CIFAR_RECORD != 0) {
      snprintf(err, errlen,
               "%s: truncated or corrupt CIFAR-10 batch (%lld bytes, not a multiple of %d)",
               paths[i], (long long)st.st_size, CIFAR_RECORD);
      return -1;
    }
    total += (size_t)st.st_size / CIFAR_RECORD;
  }
  out->images = malloc(total * (CIFAR_RECORD - 1));
  out->labels = malloc(total * sizeof(int32_t));
  unsigned char *rec = malloc(CIFAR_RECORD);
  if (!out->images || !out->labels || !rec) {
    snprintf(err, errlen, "out of memory for %zu CIFAR-10 images", total);
    goto fail;
  }
  size_t k = 0;
  for (int i = 0; i < count; i++) {
    FILE *f = fopen(paths[i], "rb");
    if (!f) {
      snprintf(err, errlen, "%s: cannot open (%s)", paths[i], strerror(errno));
      goto fail;
    }
    size_t r = 0;
    while (fread(rec, 1, CIFAR_RECORD, f) == CIFAR_RECORD) {
      if (rec[0] > 9) {
        snprintf(err, errlen, "%s: corrupt file (label %u in record %zu, expected 0..9)",
                 paths[i], rec[0], r);
        fclose(f);
        goto fail;
      }
      out->labels[k] = rec[0];
      memcpy(out->images + k * (CIFAR_RECORD - 1), rec + 1, CIFAR_RECORD - 1);
      k++;
      r++;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
      snprintf(err, errlen, "%s: read error", paths[i]);
      goto fail;
    }
  }
  if (k != total) {
    snprintf(err, errlen, "CIFAR-10 files changed while reading (%zu of %zu records)", k, total);
    goto fail;
  }
  free(rec);
  out->n = (int)total;
  out->c = 3;
  out->h = 32;
  out->w = 32;
  out->num_classes = 10;
  return 0;
fail:
  free(rec);
  train_dataset_free(out);
  return -1;
}

/* ---- synthetic ---- */

uint64_t train_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int train_make_synthetic(int n, int c, int h, int w, int num_classes, uint64_t seed,
                         train_dataset_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || num_classes <= 1) {
    snprintf(err, errlen, "synthetic data: bad shape %dx%dx%dx%d, %d classes", n, c, h, w,
             num_classes);
    return -1;
  }
  size_t per = (size_t)c * h * w;
  uint8_t *tmpl = malloc(per * num_classes);
  out->images = malloc(per * n);
  out->labels = malloc(sizeof(int32_t) * n);
  if (!tmpl || !out->images || !out->labels) {
    free(tmpl);
    train_dataset_free(out);
    snprintf(err, errlen, "synthetic data: out of memory");
    return -1;
  }
  for (size_t i = 0; i < per * num_classes; i++)
    tmpl[i] = (uint8_t)(train_mix64(seed * 0x100000001b3ull + i) % 40);
  for (int s = 0; s < n; s++) {
    uint64_t r = train_mix64(seed ^ (0xabcdef12345ull + (uint64_t)s));
    int label = (int)(r % (uint64_t)num_classes);
    out->labels[s] = label;
    for (size_t i = 0; i < per; i++) {
      uint64_t noise = train_mix64(r + i) % 216;
      out->images[(size_t)s * per + i] = (uint8_t)(tmpl[(size_t)label * per + i] + noise);
    }
  }
  free(tmpl);
  out->n = n;
  out->c = c;
  out->h = h;
  out->w = w;
  out->num_classes = num_classes;
  return 0;
}

/* ---- named data sets ---- */

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* dir/base.gz if it exists, else dir/base (MNIST downloads come both ways). */
static void idx_path(char *buf, size_t len, const char *dir, const char *base) {
  snprintf(buf, len, "%s/%s.gz", dir, base);
  if (!file_exists(buf)) snprintf(buf, len, "%s/%s", dir, base);
  if (!file_exists(buf)) snprintf(buf, len, "%s/%s.gz", dir, base); /* names the .gz */
}

int train_load_dataset(const char *name, const char *dir, uint64_t seed,
                       int synth_c, int synth_h, int synth_w, int synth_train,
                       int synth_test, train_dataset_t *train, train_dataset_t *test,
                       char *err, size_t errlen) {
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  if (strcmp(name, "fashion-mnist") == 0 || strcmp(name, "mnist") == 0) {
    if (!dir) dir = strcmp(name, "mnist") == 0 ? "/usr/share/datasets/mnist"
                                               : "/usr/share/datasets/fashion-mnist";
    char a[4096], b[4096];
    idx_path(a, sizeof a, dir, "train-images-idx3-ubyte");
    idx_path(b, sizeof b, dir, "train-labels-idx1-ubyte");
    if (train_load_idx(a, b, train, err, errlen) != 0) return -1;
    idx_path(a, sizeof a, dir, "t10k-images-idx3-ubyte");
    idx_path(b, sizeof b, dir, "t10k-labels-idx1-ubyte");
    if (train_load_idx(a, b, test, err, errlen) != 0) {
      train_dataset_free(train);
      return -1;
    }
    if (test->h != train->h || test->w != train->w) {
      snprintf(err, errlen, "%s: test images are %dx%d, train images %dx%d", a, test->h,
               test->w, train->h, train->w);
      train_dataset_free(train);
      train_dataset_free(test);
      return -1;
    }
    return 0;
  }
  if (strcmp(name, "cifar10") == 0) {
    if (!dir) dir = "cifar-10-batches-bin";
    char sub[4096];
    /* Accept the directory of the tarball or the one that contains it. */
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin/data_batch_1.bin", dir);
    char base[4096];
    if (file_exists(sub)) snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    else snprintf(base, sizeof base, "%s", dir);
    char names[6][4200];
    const char *ptrs[5];
    for (int i = 0; i < 5; i++) {
      snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", base, i + 1);
      ptrs[i] = names[i];
    }
    snprintf(names[5], sizeof names[5], "%s/test_batch.bin", base);
    if (train_load_cifar(ptrs, 5, train, err, errlen) != 0) return -1;
    const char *tp = names[5];
    if (train_load_cifar(&tp, 1, test, err, errlen) != 0) {
      train_dataset_free(train);
      return -1;
    }
    return 0;
  }
  if (strcmp(name, "synthetic") == 0) {
    if (train_make_synthetic(synth_train, synth_c, synth_h, synth_w, 10, seed, train, err,
                             errlen) != 0)
      return -1;
    /* The test set shares the class templates (same seed) but not the samples. */
    train_dataset_t big;
    if (train_make_synthetic(synth_train + synth_test, synth_c, synth_h, synth_w, 10, seed,
                             &big, err, errlen) != 0) {
      train_dataset_free(train);
      return -1;
    }
    if (train_split_tail(&big, synth_test, test, err, errlen) != 0) {
      train_dataset_free(train);
      train_dataset_free(&big);
      return -1;
    }
    train_dataset_free(&big);
    return 0;
  }
  snprintf(err, errlen, "--dataset: unknown data set '%s' (fashion-mnist, mnist, cifar10, "
           "synthetic; idx through train_load_idx_sets)", name);
  return -1;
}

int train_split_tail(train_dataset_t *d, int count, train_dataset_t *val, char *err,
                     size_t errlen) {
  memset(val, 0, sizeof *val);
  if (count <= 0 || count >= d->n) {
    snprintf(err, errlen, "validation split of %d samples out of %d", count, d->n);
    return -1;
  }
  size_t per = (size_t)d->c * d->h * d->w;
  int keep = d->n - count;
  *val = *d;
  val->n = count;
  val->images = malloc(per * count);
  val->labels = malloc(sizeof(int32_t) * count);
  if (!val->images || !val->labels) {
    free(val->images);
    free(val->labels);
    memset(val, 0, sizeof *val);
    snprintf(err, errlen, "validation split: out of memory");
    return -1;
  }
  memcpy(val->images, d->images + per * keep, per * count);
  memcpy(val->labels, d->labels + keep, sizeof(int32_t) * count);
  d->n = keep;
  return 0;
}

void train_truncate(train_dataset_t *d, int count) {
  if (count > 0 && count < d->n) d->n = count;
}

void train_norm_constants(const char *dataset, float mean[3], float std[3]) {
  /* The usual published constants; synthetic data spans about [0, 1]. */
  if (strcmp(dataset, "fashion-mnist") == 0) {
    mean[0] = mean[1] = mean[2] = 0.2860f;
    std[0] = std[1] = std[2] = 0.3530f;
  } else if (strcmp(dataset, "mnist") == 0) {
    mean[0] = mean[1] = mean[2] = 0.1307f;
    std[0] = std[1] = std[2] = 0.3081f;
  } else if (strcmp(dataset, "cifar10") == 0) {
    mean[0] = 0.4914f; mean[1] = 0.4822f; mean[2] = 0.4465f;
    std[0] = 0.2470f;  std[1] = 0.2435f;  std[2] = 0.2616f;
  } else {
    mean[0] = mean[1] = mean[2] = 0.5f;
    std[0] = std[1] = std[2] = 0.25f;
  }
}

/* ---- sharding ---- */

void train_epoch_permutation(uint32_t *perm, int n, uint64_t seed, int epoch) {
  for (int i = 0; i < n; i++) perm[i] = (uint32_t)i;
  /* Fisher-Yates with a counter-based generator: the same on every rank, and any
     epoch's order can be recomputed on resume without stored state. */
  uint64_t base = train_mix64(seed ^ train_mix64(0x5eed0000ull + (uint64_t)epoch));
  for (int i = n - 1; i > 0; i--) {
    uint64_t r = train_mix64(base + (uint64_t)i);
    int j = (int)(r % (uint64_t)(i + 1));
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

void train_shard_range(int n, int rank, int size, int *begin, int *end) {
  *begin = (int)((int64_t)n * rank / size);
  *end = (int)((int64_t)n * (rank + 1) / size);
}

int train_steps_per_epoch(int n, int size, int batch) {
  int64_t global = (int64_t)batch * size;
  return (int)(((int64_t)n + global - 1) / global);
}

int train_step_total(int n, int size, int batch, int step) {
  int64_t global = (int64_t)batch * size, left = (int64_t)n - (int64_t)step * global;
  if (left <= 0) return 0;
  return (int)(left < global ? left : global);
}

int train_step_slice(int n, int rank, int size, int batch, int step, int *offset) {
  int64_t start = (int64_t)step * batch * size;
  int total = train_step_total(n, size, batch, step);
  int64_t b, e;
  if (total == (int64_t)batch * size) {
    b = (int64_t)rank * batch;
    e = b + batch;
  } else {   /* the last, shorter global batch: an even share each */
    b = (int64_t)total * rank / size;
    e = (int64_t)total * (rank + 1) / size;
  }
  if (offset) *offset = (int)(start + b);
  return (int)(e - b);
}

int train_step_count(int n, int rank, int size, int batch, int step) {
  return train_step_slice(n, rank, size, batch, step, NULL);
}

/* ---- batches ---- */

void train_make_batch(const train_dataset_t *d, const uint32_t *idx, int count,
                      const train_batch_opts_t *o, float *x, int32_t *y) {
  int c = d->c, h = d->h, w = d->w;
  size_t per = (size_t)c * h * w;
  float scale[3], shift[3];
  for (int ch = 0; ch < 3; ch++) {
    scale[ch] = 1.0f / (255.0f * o->std[ch]);
    shift[ch] = o->mean[ch] / o->std[ch];
  }
  for (int s = 0; s < count; s++) {
    const uint8_t *src = d->images + per * idx[s];
    float *dst = x + per * s;
    y[s] = d->labels[idx[s]];
    int dy = 0, dx = 0, flip = 0;
    if (o->aug_pad > 0 || o->aug_flip) {
      uint64_t r = train_mix64(o->seed ^ train_mix64(((uint64_t)o->epoch << 32) + idx[s] +
                                                     0xa5a5000000000000ull));
      int span = 2 * o->aug_pad + 1;
      if (o->aug_pad > 0) {
        dy = (int)(r % (uint64_t)span) - o->aug_pad;
        dx = (int)((r >> 16) % (uint64_t)span) - o->aug_pad;
      }
      if (o->aug_flip) flip = (int)((r >> 40) & 1);
    }
    for (int ch = 0; ch < c; ch++) {
      int k = ch < 3 ? ch : 2;
      const float zero = -shift[k]; /* a padded pixel is a black pixel, normalised */
      for (int i = 0; i < h; i++) {
        int si = i + dy;
        for (int j = 0; j < w; j++) {
          int sj = (flip ? w - 1 - j : j) + dx;
          float v = zero;
          if (si >= 0 && si < h && sj >= 0 && sj < w)
            v = src[((size_t)ch * h + si) * w + sj] * scale[k] - shift[k];
          dst[((size_t)ch * h + i) * w + j] = v;
        }
      }
    }
  }
}
