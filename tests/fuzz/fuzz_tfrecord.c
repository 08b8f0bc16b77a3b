/* tests/fuzz/fuzz_tfrecord.c: the TFRecord reader and the Example parser of data/ on
   arbitrary bytes: the input is one TFRecord file; it is indexed (every header's length
   and CRC checked against the file) and each record read (data CRC) and parsed as a
   tf.train.Example (protobuf-c) for image/encoded and image/class/label. Seeds:
   tests/fuzz/corpus/fuzz_tfrecord (scripts/make_image_dataset.py's records). A
   mismatched CRC stops most mutations at the check: bit 0 of the first byte asks the
   harness to repair every CRC first, so the fuzzer reaches the parser too. */
#include "tests/fuzz/fuzz.h"

#include "data/data.h"

static uint32_t le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the CRCs of every record whose length fits, in place. */
static void repair(uint8_t *b, size_t n) {
  size_t pos = 0;
  while (n - pos >= 12) {
    uint64_t len = (uint64_t)le32(b + pos) | (uint64_t)le32(b + pos + 4) << 32;
    put32(b + pos + 8, data_crc32c_masked(b + pos, 8));
    if (len > n - pos - 12 || n - pos - 12 - len < 4) return;
    put32(b + pos + 12 + len, data_crc32c_masked(b + pos + 12, (size_t)len));
    pos += 12 + (size_t)len + 4;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int fix = data[0] & 1;
  uint8_t *copy = malloc(size);
  if (!copy) abort();
  memcpy(copy, data + 1, size - 1);
  if (fix) repair(copy, size - 1);
  char path[32], err[512];
  int fd = fuzz_memfile(copy, size - 1, path);
  data_record_t *recs;
  size_t n;
  if (data_tfrecord_index(path, &recs, &n, err, sizeof err) == 0) {
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
      if (data_tfrecord_read(path, i, recs[i], &buf, &cap, err, sizeof err) != 0) continue;
      uint8_t *img;
      size_t len;
      int64_t label;
      if (data_example_parse(buf, (size_t)recs[i].length, &img, &len, &label, err, sizeof err) == 0)
        free(img);
    }
    free(buf);
    free(recs);
  }
  close(fd);
  free(copy);
  return 0;
}
