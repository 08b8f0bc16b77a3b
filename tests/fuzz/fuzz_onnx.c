/* tests/fuzz/fuzz_onnx.c: nn/onnx_import.c (nn_model_from_onnx: protobuf-c's reading of
   ONNX's messages, then the graph: values by name, attributes, initializers against the
   dims they claim, shapes) on arbitrary bytes. A model it accepts is run forward once
   on zeros when its activations are small, and written back (nn_model_save_onnx) and
   read again: every accepted graph must also be one nn can export and re-import.
   Seeds (tests/fuzz/corpus/fuzz_onnx/): small graphs written with Python's onnx.helper:
   a valid CNN using most of the supported ops, an unsupported op, a rank-2 input. */
#include "tests/fuzz/fuzz.h"

#include "nn/model_internal.h"
#include "nn/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[32];
  int fd = fuzz_memfile(data, size, path);
  nn_model_config_t cfg = {.batch = 1, .seed = 1};
  nn_model_t *m = NULL;
  if (nn_model_from_onnx(&m, path, &cfg) == NN_OK) {
    size_t floats = nn_model_input_size(m);
    for (int i = 0; i < m->num_layers; i++) floats += nn_layer_sample_size(&m->layers[i]);
    if (floats < ((size_t)1 << 20)) {
      float *x = calloc(nn_model_input_size(m), sizeof *x);
      if (!x || nn_model_forward(m, x, 1, 0) != NN_OK) abort();
      free(x);
    }
    char out[] = "/tmp/fuzz_onnx.XXXXXX";
    int ofd = mkstemp(out);
    if (ofd < 0) abort();
    close(ofd);
    nn_model_t *again = NULL;
    if (nn_model_save_onnx(m, out) != NN_OK || nn_model_from_onnx(&again, out, &cfg) != NN_OK ||
        nn_model_num_params(again) != nn_model_num_params(m)) {
      fprintf(stderr, "fuzz_onnx: an accepted graph does not export and re-import: %s\n",
              nn_last_error());
      abort();
    }
    nn_model_free(again);
    unlink(out);
    nn_model_free(m);
  }
  close(fd);
  return 0;
}
