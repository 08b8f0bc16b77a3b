/* train/export_onnx.h: --export-onnx, the trained model as an ONNX inference graph. */
#ifndef TRAIN_EXPORT_ONNX_H
#define TRAIN_EXPORT_ONNX_H

#include <stddef.h>

#include "nn/nn.h"
#include "train/data.h"
#include "train/flags.h"

/* Writes the model (its host arrays) to o->export_onnx_path with metadata_props for a
   reader: model, dataset, input_shape "C,H,W", num_classes, norm_mean and norm_std (per
   input channel: x = (pixel/255 - mean) / std, what the graph expects). 0, or -1 with
   err. */
int train_export_onnx(const nn_model_t *model, const train_opts_t *o,
                      const train_dataset_t *d, const float mean[3], const float std[3],
                      char *err, size_t errlen);

#endif
