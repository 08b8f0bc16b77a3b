/* scripts/gpu_check/train_bench.c: the FALLBACK of the GPU check's throughput step.
   scripts/gpu_check.sh times the real bench/cnn_bench (through hvd); when a cnn_bench
   run fails, this bare loop without hvd says whether nn itself runs: forward, loss,
   backward, SGD (momentum 0.9) on synthetic data already in device memory (as the
   PyTorch side does), after warm-up steps; prints
   "RESULT hvd <model> <precision> <batch> <images/sec>". LAYOUT (default NCHW) is the
   activations' layout, NHWC as cnn_bench --data_format NHWC: the fallback measures the
   layout the check reports.
   Usage: train_bench MODEL BATCH STEPS fp32|tf32|fp16|bf16 [NCHW|NHWC] */
#include "nn/nn.h"
#include "nn/nn_cuda.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(expr)                                                                   \
  do {                                                                             \
    nn_status_t s_ = (expr);                                                       \
    if (s_ != NN_OK) {                                                             \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, nn_last_error()); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s MODEL BATCH STEPS fp32|tf32|fp16|bf16 [NCHW|NHWC]\n", argv[0]);
    return 2;
  }
  const char *name = argv[1], *prec = argv[4];
  nn_precision_config_t pc = {0};
  if (!strcmp(prec, "fp16")) pc.precision = NN_PRECISION_FP16;
  else if (!strcmp(prec, "bf16")) pc.precision = NN_PRECISION_BF16;
  else if (strcmp(prec, "fp32") != 0 && strcmp(prec, "tf32") != 0) {
    fprintf(stderr, "%s: unknown precision '%s': expected fp32, tf32, fp16 or bf16\n",
            argv[0], prec);
    return 2;
  }
  const char *layout = argc == 6 ? argv[5] : "NCHW";
  if (strcmp(layout, "NCHW") != 0 && strcmp(layout, "NHWC") != 0) {
    fprintf(stderr, "%s: unknown layout '%s': expected NCHW or NHWC\n", argv[0], layout);
    return 2;
  }
  pc.channels_last = strcmp(layout, "NHWC") == 0;
  int batch = atoi(argv[2]), steps = atoi(argv[3]);
  printf("%s\n", nn_cuda_info());
  if (!nn_cuda_available()) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  OK(nn_cuda_set_tf32(strcmp(prec, "tf32") == 0));
  nn_model_config_t cfg = {batch, 1, 0, 0, 0, 0};
  nn_model_t *m;
  OK(nn_model_create(&m, name, &cfg));
  OK(nn_model_set_precision(m, &pc));
  OK(nn_model_to_device(m, NN_DEVICE_CUDA));
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t nx = (size_t)batch * c * h * w;
  float *hx = malloc(nx * sizeof(float));
  int32_t *hl = malloc((size_t)batch * sizeof(int32_t));
  if (!hx || !hl) return 1;
  for (size_t i = 0; i < nx; i++) hx[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  for (int i = 0; i < batch; i++) hl[i] = i % nn_model_num_classes(m);
  float *dx;
  int32_t *dl;
  OK(nn_cuda_malloc((void **)&dx, nx * sizeof(float)));
  OK(nn_cuda_malloc((void **)&dl, (size_t)batch * sizeof(int32_t)));
  OK(nn_cuda_to_device(dx, hx, nx * sizeof(float)));
  OK(nn_cuda_to_device(dl, hl, (size_t)batch * sizeof(int32_t)));
  nn_optim_config_t oc = {NN_OPTIM_SGD, 0.9f, 0, 1e-4f, 0, 0, 0};
  OK(nn_model_optim_create(m, &oc));   /* on the device with the model */
  int warm = 5;
  double t0 = 0;
  float loss = 0;
  for (int s = 0; s < warm + steps; s++) {
    if (s == warm) {
      OK(nn_cuda_synchronize());
      t0 = util_now_s();
    }
    OK(nn_model_forward(m, dx, batch, 1));
    OK(nn_model_loss(m, dl, NULL, NULL));  /* no host round trip */
    OK(nn_model_backward(m, NULL, NULL));
    OK(nn_model_optim_step(m, 0.01f));
  }
  OK(nn_cuda_synchronize());
  double t = util_now_s() - t0;
  OK(nn_model_loss(m, dl, &loss, NULL));
  printf("loss after %d steps: %.4f\n", warm + steps, (double)loss);
  float scale;
  int64_t skipped;
  OK(nn_model_loss_scale(m, &scale, &skipped));
  printf("loss scale: %g (%lld of %d steps skipped)\n", (double)scale, (long long)skipped,
         warm + steps);
  printf("layout: %s\n", layout);
  printf("RESULT hvd %s %s %d %.1f\n", name, prec, batch, (double)batch * steps / t);
  nn_cuda_free(dx);
  nn_cuda_free(dl);
  nn_model_free(m);
  free(hx);
  free(hl);
  return 0;
}
