/* tests/fuzz/fuzz_safetensors.c: nn/safetensors_file.c (nn_st_read: header length, the
   JSON header, dtypes, shapes against byte ranges, overlaps) and nn/model_io.c (strict
   loading into a model: names, dtypes, shapes, the I64 counters) on arbitrary bytes.
   The model is a tiny one with every kind of state_dict entry (conv weight and bias,
   batchnorm weight, bias, running statistics and num_batches_tracked, linear), built
   once; tests/fuzz/make_seeds.c saves it as a seed. */
#include "tests/fuzz/fuzz.h"

#include "nn/model_internal.h"
#include "nn/nn.h"

/* The model of the seeds: 1x2x2 input, conv 1x1 to 2 channels, batchnorm, linear to 2. */
nn_model_t *fuzz_tiny_model(void);
nn_model_t *fuzz_tiny_model(void) {
  nn_model_config_t cfg = {.batch = 1, .seed = 1};
  nn_model_t *m = nn_model_begin("fuzz_tiny", &cfg, 1, 2, 2, 2);
  if (!m) return NULL;
  int x = nn_model_add_conv2d(m, "conv", NN_MODEL_INPUT, 2, 1, 1, 0, 1);
  x = nn_model_add_batchnorm2d(m, "bn", x);
  x = nn_model_add_flatten(m, "flatten", x);
  nn_model_add_linear(m, "fc", x, 2, 1);
  return nn_model_finish(m) == NN_OK ? m : NULL;
}

#ifndef FUZZ_NO_HARNESS
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static nn_model_t *model;
  if (!model && !(model = fuzz_tiny_model())) {
    fprintf(stderr, "fuzz_safetensors: cannot build the model: %s\n", nn_last_error());
    abort();
  }
  char path[32];
  int fd = fuzz_memfile(data, size, path);
  nn_st_file_t f;
  if (nn_st_read(path, &f) == NN_OK) {
    /* Every tensor the reader accepted must lie inside what it read. */
    for (int i = 0; i < f.count; i++) {
      const nn_st_tensor_t *t = &f.tensors[i];
      fuzz_touch(t->data, t->nbytes);
      if (nn_st_find(&f, t->name) == NULL) abort();
    }
    nn_st_free(&f);
  }
  nn_model_load_safetensors(model, path);
  close(fd);
  return 0;
}
#endif
