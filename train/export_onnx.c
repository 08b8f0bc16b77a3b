/* train/export_onnx.c: --export-onnx (train/export_onnx.h). The graph itself is nn's
   (nn_model_save_onnx_meta); this adds what a reader needs to feed it, as --export's
   safetensors metadata does. */
#include "train/export_onnx.h"

#include <stdio.h>
#include <string.h>

int train_export_onnx(const nn_model_t *model, const train_opts_t *o,
                      const train_dataset_t *d, const float mean[3], const float std[3],
                      char *err, size_t errlen) {
  char shape[64], classes[16], means[256] = "", stds[256] = "";
  snprintf(shape, sizeof shape, "%d,%d,%d", d->c, d->h, d->w);
  snprintf(classes, sizeof classes, "%d", d->num_classes);
  for (int ch = 0; ch < d->c && ch < 16; ch++) {
    int k = ch < 3 ? ch : 2; /* train_make_batch's channel -> constant */
    size_t at = strlen(means);
    snprintf(means + at, sizeof means - at, "%s%.9g", ch ? "," : "", (double)mean[k]);
    at = strlen(stds);
    snprintf(stds + at, sizeof stds - at, "%s%.9g", ch ? "," : "", (double)std[k]);
  }
  const nn_st_meta_t meta[] = {{"model", o->model},         {"dataset", o->dataset},
                               {"input_shape", shape},      {"num_classes", classes},
                               {"norm_mean", means},        {"norm_std", stds}};
  if (nn_model_save_onnx_meta(model, o->export_onnx_path, meta,
                              (int)(sizeof meta / sizeof meta[0])) != NN_OK) {
    snprintf(err, errlen, "--export-onnx: %s", nn_last_error());
    return -1;
  }
  return 0;
}
