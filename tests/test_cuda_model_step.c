/* test_cuda_model_step: one training step of whole models on the GPU against the same
   model on the CPU (same seed, same batch): logits and loss of the training forward,
   every gradient, the parameters after an SGD-with-momentum step on each side (CPU
   nn_optim vs nn_cuda_optim), batch-norm running statistics, and the logits of an
   evaluation forward afterwards. Models: mlp, lenet, resnet20, alexnet (dropout: the GPU
   draws the CPU's mask) and resnet50 at 64x64. Exits 77 without a CUDA device.
   Optional argument: a comma-separated list of model names. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <string.h>

#ifdef HVD_WITH_CUDA
#include "tests/cuda_check.h"

typedef struct { const char *name; int batch, hw; double tol; } case_t;

static void run_case(const case_t *k) {
  nn_model_config_t cfg = {k->batch, 42, 0, 0, k->hw, k->hw};
  nn_model_t *cpu, *gpu;
  CC_OK(nn_model_create(&cpu, k->name, &cfg));
  CC_OK(nn_model_create(&gpu, k->name, &cfg));
  CC_OK(nn_model_to_device(gpu, NN_DEVICE_CUDA));
  printf("== %s batch %d%s (%zu parameters)\n", k->name, k->batch,
         k->hw ? " (reduced input size)" : "", nn_model_num_params(cpu));
  int c, h, w;
  nn_model_input_shape(cpu, &c, &h, &w);
  size_t nx = (size_t)k->batch * c * h * w, np = nn_model_num_params(cpu);
  int classes = nn_model_num_classes(cpu);
  float *x = cc_random(nx);
  int32_t *labels = calloc((size_t)k->batch, sizeof(int32_t));
  for (int i = 0; i < k->batch; i++) labels[i] = (i * 3 + 1) % classes;

  float lc = 0, lg = 0;
  int cc = 0, cg = 0;
  CC_OK(nn_model_forward(cpu, x, k->batch, 1));
  CC_OK(nn_model_forward(gpu, x, k->batch, 1));
  cc_compare("train logits", nn_model_device_logits(gpu), 1, nn_model_logits(cpu),
             (size_t)k->batch * classes, k->tol);
  CC_OK(nn_model_loss(cpu, labels, &lc, &cc));
  CC_OK(nn_model_loss(gpu, labels, &lg, &cg));
  cc_compare("loss", &lg, 0, &lc, 1, k->tol);
  CC_OK(nn_model_backward(cpu, NULL, NULL));
  CC_OK(nn_model_backward(gpu, NULL, NULL));
  cc_compare("all gradients", nn_model_device_grads(gpu), 1, nn_model_grads(cpu), np,
             k->tol * 5);
  /* per-slice view of the worst parameter group, for diagnosis */
  nn_optim_config_t oc = {NN_OPTIM_SGD, 0.9f, 0, 1e-4f, 0, 0, 0};
  nn_optim_t *o;
  nn_cuda_optim_t *go;
  CC_OK(nn_optim_create(&o, &oc, np));
  CC_OK(nn_cuda_optim_create(&go, &oc, np));
  CC_OK(nn_optim_step(o, nn_model_params(cpu), nn_model_grads(cpu), 0.1f));
  CC_OK(nn_cuda_optim_step(go, nn_model_device_params(gpu), nn_model_device_grads(gpu), 0.1f));
  cc_compare("params after SGD step", nn_model_device_params(gpu), 1, nn_model_params(cpu),
             np, k->tol);
  CC_OK(nn_model_sync_to_host(gpu));
  if (nn_model_num_buffers(cpu))
    cc_compare("batch-norm running statistics", nn_model_buffers(gpu), 0,
               nn_model_buffers(cpu), nn_model_num_buffers(cpu), k->tol);
  CC_OK(nn_model_forward(cpu, x, k->batch, 0));
  CC_OK(nn_model_forward(gpu, x, k->batch, 0));
  cc_compare("eval logits after the step", nn_model_logits(gpu), 0, nn_model_logits(cpu),
             (size_t)k->batch * classes, k->tol * 5);
  nn_optim_free(o);
  nn_cuda_optim_free(go);
  nn_model_free(cpu);
  nn_model_free(gpu);
  free(x);
  free(labels);
}

int main(int argc, char **argv) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  static const case_t cases[] = {
      {"mlp", 16, 0, 1e-4},      {"lenet", 16, 0, 1e-4},  {"resnet20", 8, 0, 1e-3},
      {"alexnet", 2, 0, 1e-3},   {"resnet50", 2, 64, 2e-3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (argc > 1 && !strstr(argv[1], cases[i].name)) continue;
    run_case(&cases[i]);
  }
  if (cc_failures) {
    printf("%d comparison(s) failed\n", cc_failures);
    return 1;
  }
  printf("all CUDA model steps match the CPU\n");
  return 0;
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
