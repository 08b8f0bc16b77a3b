/* hvd/device_plugin.c: the one function libhvd_cuda.so exports (hvd/device_plugin.h).

   libhvd_cuda.so is hvd/device.c, hvd/device_cast.c and hvd/device_kernels.cu linked as
   a shared library for the installed shared libhvd; the Makefile's version script makes
   every other symbol of it local, so its own calls (device_cast.c ->
   hvd_device_compute_stream) stay inside it instead of binding to the loader's
   functions of the same names in libhvd.so. Not part of the static libhvd.a. */
#include "hvd/device_plugin.h"

const hvd_device_plugin_t *hvd_device_plugin_v1(void);

const hvd_device_plugin_t *hvd_device_plugin_v1(void) {
  static const hvd_device_plugin_t table = {
      .abi = HVD_DEVICE_PLUGIN_ABI,
      .size = sizeof(hvd_device_plugin_t),
      .thread_start = hvd_device_thread_start,
      .thread_device = hvd_device_thread_device,
      .is_device_ptr = hvd_device_is_device_ptr,
      .of_buffers = hvd_device_of_buffers,
      .set_probe = hvd_device_set_probe,
      .shutdown = hvd_device_shutdown,
      .set_stream = hvd_cuda_set_stream,
      .compute_stream = hvd_device_compute_stream,
      .ops = &hvd_device_ops,
      .submit = hvd_device_submit,
      .release_event = hvd_device_release_event,
      .pending = hvd_device_pending,
      .poll = hvd_device_poll,
      .stream_wait = hvd_device_stream_wait,
      .of_ptr = hvd_device_of_ptr,
      .buffer_alloc = hvd_device_buffer_alloc,
      .buffer_free = hvd_device_buffer_free,
  };
  return &table;
}
