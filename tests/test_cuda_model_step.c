/* test_cuda_model_step: one training step of whole models on the GPU against the same
   model on the CPU (same seed, same batch): logits and loss of the training forward,
   every gradient, the parameters and the optimizer state after an SGD-with-momentum step
   (the model's own optimizer, nn_model_optim_step, against nn_optim applied to the
   GPU's own gradients: float rounding only), batch-norm running
   statistics, and the logits of an evaluation forward after a step on each side. Models:
   mlp, lenet, resnet20, alexnet (dropout: the GPU draws the CPU's mask) and resnet50 at
   64x64. Exits 77 without a CUDA device. Optional argument: a comma-separated list of
   model names. */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>
#include <string.h>

#ifdef NN_WITH_CUDA
#include "tests/cuda_check.h"

/* tol: logits, loss, running statistics. gtol: gradients. etol: evaluation logits
   after the step. The GPU sums in another order than the CPU (differences near 1e-7 of
   a value), and in a deep network at initialisation that is enough to flip the sign of
   the odd relu input near 0, which switches a gradient path: one flip in resnet20 moved
   the gradients by 6e-3 of the largest, and resnet50 (batch norm over few values) sees
   tens of flips. Emulated on the CPU (every stored value rounded at 2^-21 and 2^-22, 8
   inputs each), the worst gradient errors were mlp 5.9e-7, lenet 1.4e-3, resnet20
   6.4e-3, alexnet 1.3e-2, resnet50 7.9e-2, and evaluation logits after the step (lr
   0.01) at most 3.4e-4 but resnet50 3.3e-2; gtol and etol are about 3x those. */
typedef struct { const char *name; int batch, hw; double tol, gtol, etol; } case_t;

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
  size_t nx = (size_t)k->batch * c * h * w, np = nn_model_param_len(cpu);
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
             k->gtol);
  const float lr = 0.01f;
  float *g = cc_host(np), *expect_p = cc_host(np);
  CC_OK(nn_cuda_to_host(g, nn_model_device_grads(gpu), np * sizeof(float)));
  memcpy(expect_p, nn_model_params(cpu), np * sizeof(float));
  nn_optim_config_t oc = {NN_OPTIM_SGD, 0.9f, 0, 1e-4f, 0, 0, 0};
  nn_optim_t *own;
  /* Each model's own optimizer, where its parameters live (the train program's way). */
  CC_OK(nn_model_optim_create(cpu, &oc));
  CC_OK(nn_model_optim_create(gpu, &oc));
  CC_OK(nn_optim_create(&own, &oc, np));
  CC_OK(nn_model_optim_step(cpu, lr));
  CC_OK(nn_optim_step(own, expect_p, g, lr));
  CC_OK(nn_model_optim_step(gpu, lr));
  cc_compare("params = SGD on the GPU's gradients", nn_model_device_params(gpu), 1, expect_p,
             np, 1e-5);
  CC_OK(nn_model_sync_to_host(gpu));   /* params, buffers and the optimizer state */
  size_t sn = 0, on = 0;
  const float *gs = nn_model_optim_state(gpu, &sn), *os = nn_optim_state(own, &on);
  if (sn != on) {
    printf("FAIL optimizer state: %zu floats on the host mirror, want %zu\n", sn, on);
    cc_failures++;
  } else {
    cc_compare("optimizer state (host mirror) = SGD's momentum", gs, 0, os, on, 1e-5);
  }
  if (nn_model_num_buffers(cpu))
    cc_compare("batch-norm running statistics", nn_model_buffers(gpu), 0,
               nn_model_buffers(cpu), nn_model_num_buffers(cpu), k->tol);
  CC_OK(nn_model_forward(cpu, x, k->batch, 0));
  CC_OK(nn_model_forward(gpu, x, k->batch, 0));
  cc_compare("eval logits after the step", nn_model_logits(gpu), 0, nn_model_logits(cpu),
             (size_t)k->batch * classes, k->etol);
  nn_optim_free(own);
  free(g);
  free(expect_p);
  nn_model_free(cpu);
  nn_model_free(gpu);
  free(x);
  free(labels);
}

int main(int argc, char **argv) {
  cc_require_device();
  nn_cuda_set_tf32(0);
  static const case_t cases[] = {
      {"mlp", 16, 0, 1e-4, 5e-4, 5e-4},      {"lenet", 16, 0, 1e-4, 5e-3, 5e-4},
      {"resnet20", 8, 0, 1e-3, 2e-2, 5e-3},  {"alexnet", 2, 0, 1e-3, 4e-2, 5e-3},
      {"resnet50", 2, 64, 2e-3, 0.25, 0.1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (argc > 1 && !strstr(argv[1], cases[i].name)) continue;
    run_case(&cases[i]);
  }
  return cc_finish("all CUDA model steps match the CPU");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
