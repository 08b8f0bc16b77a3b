/* nn_train_bench: single-process training throughput of an nn model, the counterpart of
   shared/tools/peers/torch_ddp_bench.py with NPROC=1: a fixed synthetic batch, SGD
   (lr 0.01, momentum 0.9), 3 warm-up steps, then STEPS timed steps of
   forward + loss + backward + update. Prints "total images/sec: X" like the peer;
   --profile adds the mean time per layer (forward, backward) and of the update. */
#include "nn/nn.h"
#include "util/clock.h"
#include "util/flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
  if (nn_blas_fix_misdetected_core(argv) != NN_OK)
    fprintf(stderr, "nn_train_bench: warning: %s\n", nn_last_error());
  const char *model = "lenet";
  int batch = 64, steps = 20, warmup = 3, threads = 0, profile = 0;
  const util_flag_t table[] = {
      {"model", UTIL_FLAG_CHOICE, &model, .choices = nn_model_names(), .metavar = "NAME",
       .help = "the network"},
      {"batch", UTIL_FLAG_INT, &batch, .min = 1, .max = 1000000, .help = "samples per step"},
      {"steps", UTIL_FLAG_INT, &steps, .min = 1, .max = 1000000, .help = "timed steps"},
      {"warmup", UTIL_FLAG_INT, &warmup, .min = 0, .max = 1000000, .help = "untimed steps first"},
      {"threads", UTIL_FLAG_INT, &threads, .min = 1, .max = 1000000, .def = "nn's default",
       .help = "CPU threads"},
      {"profile", UTIL_FLAG_BOOL, &profile,
       .help = "print the mean forward/backward time of every layer"},
  };
  const util_flags_spec_t spec = {.prog = "nn_train_bench", .usage = "nn_train_bench [flags]",
                                  .flags = table, .nflags = UTIL_FLAGS_COUNT(table)};
  char err[512];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    util_flags_usage(&spec, stdout);
    return 0;
  }
  if (rc != UTIL_FLAGS_OK) {
    fprintf(stderr, "nn_train_bench: %s\n", err);
    return 2;
  }
  if (threads) nn_set_threads(threads);

  nn_model_config_t cfg = {.batch = batch, .seed = 0};
  nn_model_t *m = NULL;
  if (nn_model_create(&m, model, &cfg) != NN_OK) {
    fprintf(stderr, "nn_train_bench: %s\n", nn_last_error());
    return 1;
  }
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  nn_optim_t *opt = NULL;
  if (nn_optim_create(&opt, &oc, nn_model_param_len(m)) != NN_OK) {
    fprintf(stderr, "nn_train_bench: %s\n", nn_last_error());
    return 1;
  }
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t in = (size_t)batch * c * h * w;
  float *x = malloc(in * sizeof(float));
  int32_t *labels = malloc((size_t)batch * sizeof(int32_t));
  int nl = nn_model_num_layers(m);
  double *tf = calloc((size_t)nl, sizeof(double)), *tb = calloc((size_t)nl, sizeof(double));
  if (!x || !labels || !tf || !tb) {
    fprintf(stderr, "nn_train_bench: out of memory\n");
    return 1;
  }
  uint64_t r = 88172645463325252ull;
  for (size_t i = 0; i < in; i++) { /* roughly N(0,1): sum of 4 uniforms, rescaled */
    double s = 0;
    for (int k = 0; k < 4; k++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      s += (double)(r >> 11) / 9007199254740992.0;
    }
    x[i] = (float)((s - 2.0) * 1.7320508);
  }
  int classes = nn_model_num_classes(m) < 10 ? nn_model_num_classes(m) : 10;
  for (int i = 0; i < batch; i++) labels[i] = (int32_t)((i * 7919) % classes);

  double t_update = 0, t_loss = 0;
  float loss = 0;
  double t0 = 0;
  for (int step = 0; step < warmup + steps; step++) {
    if (step == warmup) t0 = util_now_s();
    double a = util_now_s();
    if (nn_model_forward(m, x, batch, 1) != NN_OK ||
        nn_model_loss(m, labels, &loss, NULL) != NN_OK) {
      fprintf(stderr, "nn_train_bench: %s\n", nn_last_error());
      return 1;
    }
    double b = util_now_s();
    if (nn_model_backward(m, NULL, NULL) != NN_OK) {
      fprintf(stderr, "nn_train_bench: %s\n", nn_last_error());
      return 1;
    }
    double u = util_now_s();
    if (nn_optim_step(opt, nn_model_params(m), nn_model_grads(m), 0.01f) != NN_OK) {
      fprintf(stderr, "nn_train_bench: %s\n", nn_last_error());
      return 1;
    }
    double e = util_now_s();
    if (step >= warmup) {
      t_update += e - u;
      double sum_f = 0;
      for (int i = 0; i < nl; i++) {
        double f1, b1;
        nn_model_layer_times(m, i, &f1, &b1);
        tf[i] += f1;
        tb[i] += b1;
        sum_f += f1;
      }
      t_loss += (b - a) - sum_f; /* forward wall time not spent in layers: copy + loss */
    }
  }
  double el = util_now_s() - t0;
  if (profile) {
    double total_f = 0, total_b = 0;
    for (int i = 0; i < nl; i++) total_f += tf[i], total_b += tb[i];
    printf("model %s, batch %d, threads %d, %d steps: mean ms per step\n", model, batch,
           nn_threads(), steps);
    printf("%-28s %10s %10s %7s\n", "layer", "forward", "backward", "share");
    for (int i = 0; i < nl; i++)
      printf("%-28s %10.3f %10.3f %6.1f%%\n", nn_model_layer_name(m, i),
             1e3 * tf[i] / steps, 1e3 * tb[i] / steps,
             100.0 * (tf[i] + tb[i]) / (el > 0 ? el : 1));
    printf("%-28s %10.3f %10.3f\n", "all layers", 1e3 * total_f / steps,
           1e3 * total_b / steps);
    printf("%-28s %10.3f\n", "input copy + loss", 1e3 * t_loss / steps);
    printf("%-28s %10.3f\n", "sgd update", 1e3 * t_update / steps);
    printf("%-28s %10.3f   (final loss %.4f)\n", "step (wall)", 1e3 * el / steps,
           (double)loss);
  }
  printf("BLAS: %s\n", nn_blas_kernels());
  printf("total images/sec: %.2f\n", (double)batch * steps / el);
  free(x);
  free(labels);
  free(tf);
  free(tb);
  nn_optim_free(opt);
  nn_model_free(m);
  return 0;
}
