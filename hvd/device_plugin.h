/* hvd/device_plugin.h: the table between the shared libhvd and its CUDA backend.

   The installed shared libhvd (libhvd.so) links no CUDA or NCCL library, so a CPU
   program built against it needs none at link or run time. The device half of the
   runtime (hvd/device.c, device_cast.c, device_events.c, device_kernels.cu: CUDA, NCCL) is a
   library of its own, libhvd_cuda.so.0, installed next to libhvd.so; hvd/device_loader.c
   defines the hvd_device_* functions of hvd_internal.h in libhvd.so, loads the backend
   with dlopen once the process uses CUDA, and forwards through this table, which the
   backend hands out from its one exported function (HVD_DEVICE_PLUGIN_SYMBOL,
   hvd/device_plugin.c). The static libhvd.a links device.c directly and has neither.

   A field added here raises HVD_DEVICE_PLUGIN_ABI, so that a backend of another build
   is refused with a message instead of called through a wrong table. */
#ifndef HVD_DEVICE_PLUGIN_H
#define HVD_DEVICE_PLUGIN_H

#include "hvd/hvd_internal.h"

#include <stddef.h>

#define HVD_DEVICE_PLUGIN_ABI 2
#define HVD_DEVICE_PLUGIN_SONAME "libhvd_cuda.so.0"
#define HVD_DEVICE_PLUGIN_SYMBOL "hvd_device_plugin_v1"

typedef struct {
  int abi;                  /* HVD_DEVICE_PLUGIN_ABI of the backend's build */
  size_t size;              /* sizeof(hvd_device_plugin_t) there            */
  /* device.c */
  void (*thread_start)(void);
  int (*thread_device)(void);
  int (*is_device_ptr)(const void *p);
  int (*of_buffers)(const void *sendbuf, const void *recvbuf);
  void (*set_probe)(const hvd_cuda_probe_t *probe);
  void (*shutdown)(void);
  void (*set_stream)(void *stream);               /* hvd_cuda_set_stream */
  void *(*compute_stream)(void);
  const hvd_backend_ops_t *ops;                   /* device.c's hvd_device_ops */
  void (*submit)(struct hvd_request *r);          /* the submitting thread's event */
  void (*release_event)(void *event);
  size_t (*pending)(void);                        /* collectives in flight */
  hvd_status_t (*poll)(int *completed, char *msg, size_t len);
  int (*stream_wait)(void *stream, void *event);
  /* device_cast.c */
  int (*of_ptr)(const void *p);
  hvd_status_t (*buffer_alloc)(void **p, size_t bytes, int device);
  void (*buffer_free)(void *p);
} hvd_device_plugin_t;

/* What HVD_DEVICE_PLUGIN_SYMBOL is: returns the backend's table (never NULL). */
typedef const hvd_device_plugin_t *(*hvd_device_plugin_fn)(void);

#endif /* HVD_DEVICE_PLUGIN_H */
