/* tests/fuzz/make_seeds.c: writes the binary seed files of the fuzz corpora
   (tests/fuzz/corpus/NAME/) with the project's own writers, so the seeds are valid files
   the fuzzer starts from: safetensors (nn_model_save_safetensors of fuzz_safetensors.c's
   tiny model, nn_st_write of tensors of every dtype), checkpoints (train_ckpt_write),
   IDX pairs (plain, gzip). The text seeds (flags, hostfiles) are kept by hand.
   Run by `make fuzz-seeds`. Usage: make_seeds CORPUS_DIR */
#define FUZZ_NO_HARNESS
#include "tests/fuzz/fuzz_safetensors.c"

#include <zlib.h>

#include "train/checkpoint.h"

static char dir[512];

static void die(const char *what) {
  fprintf(stderr, "make_seeds: %s\n", what);
  exit(1);
}

static void write_file(const char *name, const void *data, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) die(path);
}

/* The fuzz_idx input: mode, images length (16-bit little-endian), images, labels. */
static void write_idx_seed(const char *name, int mode, const uint8_t *img, size_t ilen,
                           const uint8_t *lab, size_t llen) {
  uint8_t buf[4096];
  if (3 + ilen + llen > sizeof buf) die("idx seed too large");
  buf[0] = (uint8_t)mode;
  buf[1] = (uint8_t)ilen;
  buf[2] = (uint8_t)(ilen >> 8);
  memcpy(buf + 3, img, ilen);
  memcpy(buf + 3 + ilen, lab, llen);
  write_file(name, buf, 3 + ilen + llen);
}

static size_t gzip_to(uint8_t *out, size_t cap, const uint8_t *in, size_t len) {
  z_stream z = {0};
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) die("zlib");
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) die("zlib");
  size_t n = cap - z.avail_out;
  deflateEnd(&z);
  return n;
}

static void idx_seeds(void) {
  /* 3 images of 2x3, 3 labels */
  uint8_t img[16 + 18] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 3};
  for (int i = 0; i < 18; i++) img[16 + i] = (uint8_t)(i * 14);
  uint8_t lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9};
  write_idx_seed("plain-3x2x3", 0, img, sizeof img, lab, sizeof lab);
  write_idx_seed("gzip-by-harness-3x2x3", 3, img, sizeof img, lab, sizeof lab);
  uint8_t gi[256], gl[256];
  size_t ni = gzip_to(gi, sizeof gi, img, sizeof img), nl = gzip_to(gl, sizeof gl, lab, sizeof lab);
  write_idx_seed("gz-files-3x2x3", 0, gi, ni, gl, nl);
  /* one 1x1 image */
  uint8_t img1[17] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 255};
  uint8_t lab1[9] = {0, 0, 8, 1, 0, 0, 0, 1, 5};
  write_idx_seed("plain-1x1x1", 0, img1, sizeof img1, lab1, sizeof lab1);
}

static void checkpoint_seeds(void) {
  char path[1024];
  char err[512];
  float params[6] = {0.5f, -1, 2, 3, 4, 5};
  int64_t step = 42;
  train_ckpt_section_t s[3] = {{"params", params, sizeof params},
                               {"optim.step", &step, sizeof step},
                               {"empty", params, 0}};
  snprintf(path, sizeof path, "%s/three-sections", dir);
  if (train_ckpt_write(path, "model=lenet\ndataset=synthetic\nepoch=3\nlr=0.01\n", s, 3,
                       err, sizeof err) != 0)
    die(err);
  snprintf(path, sizeof path, "%s/no-sections", dir);
  if (train_ckpt_write(path, "", s, 0, err, sizeof err) != 0) die(err);
}

static void safetensors_seeds(void) {
  char path[1024];
  nn_model_t *m = fuzz_tiny_model();
  if (!m) die(nn_last_error());
  snprintf(path, sizeof path, "%s/tiny-model", dir);
  if (nn_model_save_safetensors(m, path) != NN_OK) die(nn_last_error());
  nn_model_free(m);
  /* one tensor of every dtype, a scalar and an empty one */
  static uint8_t bytes[64];
  for (int i = 0; i < 64; i++) bytes[i] = (uint8_t)(i * 3);
  nn_st_tensor_t t[8] = {
      {"f32", NN_ST_F32, 2, {2, 2}, 16, bytes},  {"f64", NN_ST_F64, 1, {1}, 8, bytes},
      {"f16", NN_ST_F16, 1, {3}, 6, bytes},      {"bf16", NN_ST_BF16, 1, {2}, 4, bytes},
      {"i8", NN_ST_I8, 3, {1, 2, 1}, 2, bytes},  {"u8", NN_ST_U8, 1, {0}, 0, bytes},
      {"i32", NN_ST_I32, 1, {1}, 4, bytes},      {"i64", NN_ST_I64, 0, {0}, 8, bytes}};
  snprintf(path, sizeof path, "%s/every-dtype", dir);
  if (nn_st_write(path, t, 8) != NN_OK) die(nn_last_error());
  /* as other writers lay it out: __metadata__ first, padded header */
  const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\","
                    "\"shape\":[2],\"data_offsets\":[0,8]}}        ";
  uint8_t buf[256];
  size_t hl = strlen(hdr);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, hdr, hl);
  memset(buf + 8 + hl, 0x3f, 8);
  write_file("metadata", buf, 8 + hl + 8);
}

int main(int argc, char **argv) {
  if (argc != 2) die("usage: make_seeds CORPUS_DIR");
  snprintf(dir, sizeof dir, "%s/fuzz_idx", argv[1]);
  idx_seeds();
  snprintf(dir, sizeof dir, "%s/fuzz_checkpoint", argv[1]);
  checkpoint_seeds();
  snprintf(dir, sizeof dir, "%s/fuzz_safetensors", argv[1]);
  safetensors_seeds();
  return 0;
}
