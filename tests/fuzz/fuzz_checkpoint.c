/* tests/fuzz/fuzz_checkpoint.c: the train program's checkpoint reader
   (train/checkpoint.c train_ckpt_read, then train_ckpt_find and
   train_ckpt_meta as train.c uses them) on arbitrary bytes. The file ends in a crc32 of
   everything before it, which random bytes never match: the harness writes the right
   crc32 into the input's last 4 bytes, so the fuzzer gets past the check to the
   structure (magic, length, metadata, sections). */
#include "tests/fuzz/fuzz.h"

#include <zlib.h>

#include "train/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  memcpy(copy, data, size);
  if (size >= 4) {
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, copy, (uInt)(size - 4));
    for (int i = 0; i < 4; i++) copy[size - 4 + i] = (uint8_t)(crc >> (8 * i));
  }
  char path[32];
  int fd = fuzz_memfile(copy, size, path);
  free(copy);
  train_ckpt_t c;
  char err[512];
  if (train_ckpt_read(path, &c, err, sizeof err) == 0) {
    for (int i = 0; i < c.count; i++) {
      fuzz_touch(c.sections[i].data, c.sections[i].nbytes);
      if (train_ckpt_find(&c, c.sections[i].name) == NULL) abort();
    }
    static const char *const keys[] = {"model", "dataset", "epoch", "settings", "", "=", NULL};
    char buf[256];
    for (int k = 0; keys[k]; k++) {
      const char *v = train_ckpt_meta(&c, keys[k], buf, sizeof buf);
      if (v) fuzz_touch(v, strlen(v));
    }
    train_ckpt_meta(&c, "model", buf, 1);
    train_ckpt_free(&c);
  }
  close(fd);
  return 0;
}
