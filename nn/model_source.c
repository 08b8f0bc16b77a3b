/* nn/model_source.c: a model from what a user names, a built-in model or an ONNX file,
   for the programs' --model / --model-file (train, cnn_bench, serve): one call wherever
   a model is created, so checkpoints, resume and exports treat both alike. */
#include "nn/nn.h"

#include <string.h>
#include <strings.h>

int nn_model_source_is_onnx(const char *model) {
  size_t len = model ? strlen(model) : 0;
  return len > 5 && strcasecmp(model + len - 5, ".onnx") == 0;
}

nn_status_t nn_model_create_from(nn_model_t **out, const char *model,
                                 const nn_model_config_t *cfg) {
  if (nn_model_source_is_onnx(model)) return nn_model_from_onnx(out, model, cfg);
  return nn_model_create(out, model, cfg);
}
