/* tests/fuzz/fuzz_idx.c: the IDX loader of the train program (train/data.c
   train_load_idx: an images file of 3 dimensions and a labels file of 1, each plain or
   gzip) on arbitrary bytes. Input layout: byte 0 is a mode (bit 0: gzip the images
   file, bit 1: gzip the labels file, so the fuzzer can work on plain IDX bytes and still
   go through zlib), bytes 1-2 the length of the images file (little-endian, clipped to
   what is there), then the images file, then the labels file. A seed that is already
   gzip goes in with mode 0. */
#include "tests/fuzz/fuzz.h"

#include <zlib.h>

#include "train/data.h"

/* gzip data[0..size) into a new buffer (gzip header and trailer, as gzip(1) writes). */
static uint8_t *gzip_bytes(const uint8_t *data, size_t size, size_t *out_len) {
  z_stream z = {0};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  size_t cap = deflateBound(&z, (uLong)size) + 32;
  uint8_t *out = malloc(cap);
  if (!out) abort();
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)size;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
  *out_len = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

static int memfile_maybe_gzip(const uint8_t *data, size_t size, int gz, char path[32]) {
  if (!gz) return fuzz_memfile(data, size, path);
  size_t len;
  uint8_t *z = gzip_bytes(data, size, &len);
  int fd = fuzz_memfile(z, len, path);
  free(z);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  int mode = data[0];
  size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3;
  size -= 3;
  if (ilen > size) ilen = size;
  char ipath[32], lpath[32];
  int ifd = memfile_maybe_gzip(data, ilen, mode & 1, ipath);
  int lfd = memfile_maybe_gzip(data + ilen, size - ilen, mode & 2, lpath);
  train_dataset_t d;
  char err[512];
  if (train_load_idx(ipath, lpath, &d, err, sizeof err) == 0) {
    fuzz_touch(d.images, (size_t)d.n * (size_t)d.c * (size_t)d.h * (size_t)d.w);
    fuzz_touch(d.labels, (size_t)d.n * sizeof *d.labels);
    for (int i = 0; i < d.n; i++)
      if (d.labels[i] < 0 || d.labels[i] >= d.num_classes) abort();
    train_dataset_free(&d);
  }
  close(ifd);
  close(lfd);
  return 0;
}
