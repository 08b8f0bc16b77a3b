/* nn/cuda/model_cuda.h: the hooks nn/model.c calls for a model on the device
   (m->cuda != NULL). Only with HVD_WITH_CUDA. */
#ifndef NN_MODEL_CUDA_H
#define NN_MODEL_CUDA_H

#include "nn/model_internal.h"

nn_status_t nn_cuda_model_forward(nn_model_t *m, const float *x, int n, int training);
nn_status_t nn_cuda_model_loss(nn_model_t *m, const int32_t *labels, float *loss,
                               int *correct);
nn_status_t nn_cuda_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx);
/* Copies the logits of the last forward into a host mirror and returns it. */
const float *nn_cuda_model_logits_host(const nn_model_t *m);
void nn_cuda_model_free(nn_model_t *m);

#endif /* NN_MODEL_CUDA_H */
