/* tests/fuzz/fuzz_grpc_predict.c: serve's decoding of a gRPC PredictRequest
   (serve/grpc_calls.c: serve_grpc_predict_open, then serve_grpc_predict_batch) on
   arbitrary bytes: the protobuf-c decoding, the model_spec (name lenet, label stable=1),
   the input map and its TensorProto (dtype, shape, float_val or tensor_content) down to
   the normalised batch of a 28x28x1 model. A status is fine; a crash, a leak or an
   answer that breaks its own promises (a batch with no samples, or past max_instances) is
   not. */
#include "tests/fuzz/fuzz.h"

#include "serve/grpc_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static serve_labels_t labels;
  char err[600];
  if (labels.n == 0 && serve_labels_parse("stable=1", &labels, err, sizeof err) != 0) abort();
  serve_input_spec_t spec = {.c = 1, .h = 28, .w = 28, .max_instances = 64};
  if (serve_normalization("fashion-mnist", &spec) != 0) abort();
  serve_grpc_predict_t *p;
  long version;
  int code = serve_grpc_predict_open(data, size, "lenet", &labels, &p, &version, err, sizeof err);
  if (code != SERVE_GRPC_OK) {
    if (p != NULL || err[0] == '\0') abort();
    return 0;
  }
  serve_instances_t batch;
  code = serve_grpc_predict_batch(p, &spec, &batch, err, sizeof err);
  if (code == SERVE_GRPC_OK && (batch.n < 1 || batch.n > spec.max_instances || !batch.x)) abort();
  if (code != SERVE_GRPC_OK && (batch.x || err[0] == '\0')) abort();
  serve_instances_free(&batch);
  serve_grpc_predict_close(p);
  return 0;
}
