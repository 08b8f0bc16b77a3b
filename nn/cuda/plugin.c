/* nn/cuda/plugin.c: the one function libnn_cuda.so exports (nn/cuda_plugin.h).

   libnn_cuda.so is the files of nn/cuda/ linked as a shared library for the installed shared libnn;
   the Makefile's version script makes every other symbol of it local, so its own calls
   (model_cuda.c -> nn_cuda_stream) stay inside it instead of binding to the loader's
   functions of the same names in libnn.so. Not part of the static libnn.a. */
#include "nn/cuda_plugin.h"

const nn_cuda_plugin_t *nn_cuda_plugin_v1(void);

const nn_cuda_plugin_t *nn_cuda_plugin_v1(void) {
  static const nn_cuda_plugin_t table = {
      .abi = NN_CUDA_PLUGIN_ABI,
      .size = sizeof(nn_cuda_plugin_t),
      .available = nn_cuda_available,
      .info = nn_cuda_info,
      .reason = nn_cuda_reason,
      .device_count = nn_cuda_device_count,
      .set_device = nn_cuda_set_device,
      .stream = nn_cuda_stream,
      .synchronize = nn_cuda_synchronize,
      .set_tf32 = nn_cuda_set_tf32,
      .malloc = nn_cuda_malloc,
      .free = nn_cuda_free,
      .to_device = nn_cuda_to_device,
      .to_host = nn_cuda_to_host,
      .memset0 = nn_cuda_memset0,
      .is_device_ptr = nn_cuda_is_device_ptr,
      .optim_create = nn_cuda_optim_create,
      .optim_free = nn_cuda_optim_free,
      .optim_step = nn_cuda_optim_step,
      .optim_state_to_host = nn_cuda_optim_state_to_host,
      .optim_state_to_device = nn_cuda_optim_state_to_device,
      .model_to_device = nn_model_to_device,
      .model_optim_step_cuda = nn_model_optim_step_cuda,
      .model_device_logits = nn_model_device_logits,
  };
  return &table;
}
