/* hvd/device_loader.c: the device functions of hvd_internal.h (hvd_device_*, the
   hvd_device_ops table, hvd_cuda_set_stream) in the shared libhvd of a CUDA build, which
   links no CUDA or NCCL library. The device half of the runtime is libhvd_cuda.so.0
   (hvd/device_plugin.h); this file loads it with dlopen when the process uses CUDA and
   forwards to it. Only in libhvd.so (the Makefile's shared libraries): the static
   libhvd.a links hvd/device.c directly.

   When to load: device memory exists only in a process that has loaded the CUDA driver
   (libcuda.so.1, which every CUDA runtime loads before it allocates anything). Until
   the driver is in the process every buffer is host memory and nothing is loaded, so a
   CPU program needs no CUDA library; from the first buffer hvd meets after it (or at
   hvd_init, when it is there already) the backend is loaded, once. Where that fails
   (the backend, NCCL or the CUDA runtime missing) hvd logs a warning naming the library
   and takes every buffer for host memory, as a build without CUDA does.

   The background thread: device.c's rule is that it selects its GPU before any other
   CUDA call (hvd_device_thread_start). A backend loaded after the thread started is
   started on that thread (catch_up) before the thread makes its first call into it. */
#ifdef HVD_WITH_CUDA
#include "hvd/device_plugin.h"
#include "util/plugin.h"

#include <link.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static const hvd_device_plugin_t *_Atomic backend;   /* NULL: not (yet) loaded    */
static atomic_int load_failed;                      /* tried once, and it failed  */
static char load_error[1200];                       /* why (written before failed) */
static void *user_stream;                           /* hvd_cuda_set_stream, under load_mu */

static _Thread_local int on_hvd_thread;     /* hvd_device_thread_start ran here     */
static _Thread_local int started_here;      /* and the backend's thread_start too    */

/* Asked for every buffer hvd meets until the backend is loaded, so it must cost next
   to nothing: dlopen(RTLD_NOLOAD) would search the library path on disk each time
   (about 100 us). Instead the loaded objects are walked in memory for the driver's
   file name, and only when objects were loaded since the last walk (dlpi_adds counts
   every load of the process). */
static _Atomic unsigned long long driver_absent_at;   /* dlpi_adds of the last walk */

typedef struct {
  unsigned long long absent_at;   /* in: what the last walk saw                     */
  unsigned long long adds;        /* out: loads so far                              */
  int counted, found;
} driver_search_t;

static int find_driver(struct dl_phdr_info *info, size_t size, void *arg) {
  driver_search_t *s = arg;
  if (!s->counted) {
    s->counted = 1;
    if (size < offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
      s->adds = 0;   /* too old a C library to count: walk every time */
    } else {
      s->adds = info->dlpi_adds;
      if (s->adds != 0 && s->adds == s->absent_at) return 1;   /* nothing new loaded */
    }
  }
  const char *slash = strrchr(info->dlpi_name, '/');
  const char *base = slash ? slash + 1 : info->dlpi_name;
  if (strncmp(base, "libcuda.so", strlen("libcuda.so")) == 0) {   /* not libcudart */
    s->found = 1;
    return 1;
  }
  return 0;
}

/* 1 when the CUDA driver is loaded in this process (then device memory may exist). */
static int cuda_in_process(void) {
  driver_search_t s = {.absent_at = atomic_load(&driver_absent_at)};
  (void)dl_iterate_phdr(find_driver, &s);   /* returns what find_driver returned last */
  if (!s.found) atomic_store(&driver_absent_at, s.adds);
  return s.found;
}

/* The operations this file's hvd_device_ops forwards (allreduce and broadcast, as
   device.c's table has them): a backend whose table differs is of another build. */
static int same_operations(const void *table) {
  const hvd_backend_ops_t *o = ((const hvd_device_plugin_t *)table)->ops;
  return o != NULL && o->allreduce != NULL && o->broadcast != NULL && o->allgather == NULL &&
         o->barrier == NULL && o->alltoall == NULL && o->reducescatter == NULL;
}

static const void *call_entry(void *sym) {
  return ((hvd_device_plugin_fn)sym)();   /* POSIX: dlsym's object is the function */
}

/* Opens the backend (next to this libhvd.so, make install puts it there, else wherever
   the dynamic loader finds it) and checks its table; NULL with load_error filled. */
static const hvd_device_plugin_t *open_backend(void) {
  const util_plugin_spec_t spec = {
      .anchor = &load_mu,
      .soname = HVD_DEVICE_PLUGIN_SONAME,
      .symbol = HVD_DEVICE_PLUGIN_SYMBOL,
      .call_entry = call_entry,
      .library = "hvd",
      .abi = HVD_DEVICE_PLUGIN_ABI,
      .size = sizeof(hvd_device_plugin_t),
      .accept = same_operations,
      .accept_what = "other device operations",
  };
  return util_plugin_load(&spec, load_error, sizeof load_error);
}

/* Loads the backend once (force: even without the driver in the process, for the test
   hook hvd_device_set_probe). NULL when it is not loaded. */
static const hvd_device_plugin_t *load(int force) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL || atomic_load(&load_failed)) return b;
  if (!force && !cuda_in_process()) return NULL;
  pthread_mutex_lock(&load_mu);
  b = atomic_load(&backend);
  if (b == NULL && !atomic_load(&load_failed)) {
    b = open_backend();
    if (b == NULL) {
      atomic_store(&load_failed, 1);
      hvd_log(HVD_LOG_WARNING, "CUDA is in use in this process, but hvd's CUDA backend "
              HVD_DEVICE_PLUGIN_SONAME " could not be loaded (%s): hvd takes every buffer "
              "for host memory; install it next to libhvd.so (make install from a CUDA "
              "build)", load_error);
    } else {
      b->set_stream(user_stream);   /* what was set before it was loaded */
      atomic_store(&backend, b);
    }
  }
  pthread_mutex_unlock(&load_mu);
  return b;
}

/* b, started on this thread first when this is hvd's background thread (see the top). */
static const hvd_device_plugin_t *catch_up(const hvd_device_plugin_t *b) {
  if (b != NULL && on_hvd_thread && !started_here) {
    started_here = 1;
    b->thread_start();
  }
  return b;
}

/* The loaded backend, never loading it (for what only exists once it is loaded). */
static const hvd_device_plugin_t *loaded(void) { return catch_up(atomic_load(&backend)); }

static hvd_status_t not_loaded(char *msg, size_t len) {
  snprintf(msg, len, "rank %d: device memory, but hvd's CUDA backend "
           HVD_DEVICE_PLUGIN_SONAME " is not loaded%s%s%s", hvd_g.rank,
           atomic_load(&load_failed) ? " (" : "", atomic_load(&load_failed) ? load_error : "",
           atomic_load(&load_failed) ? ")" : "");
  return HVD_ERR_BACKEND;
}

static hvd_status_t not_loaded_error(const char *what) {
  char msg[HVD_ERROR_MAX];
  (void)not_loaded(msg, sizeof msg);
  return hvd_set_error(HVD_ERR_BACKEND, "%s: %s", what, msg);
}

/* ---- device.c's functions ---- */
void hvd_device_set_probe(const hvd_cuda_probe_t *p) {
  const hvd_device_plugin_t *b = load(1);
  if (b != NULL) b->set_probe(p);
}

void hvd_device_thread_start(void) {
  on_hvd_thread = 1;
  started_here = 0;
  (void)catch_up(load(0));
}

int hvd_device_thread_device(void) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  return b != NULL ? b->thread_device() : -1;
}

/* Without the backend every buffer is host memory as long as the CUDA driver is not in
   the process (or the backend could not be loaded); with it, only a background thread
   that chose no GPU says so, and whether it has started the backend on its thread is
   not known here: no. */
int hvd_device_host_only(void) {
  if (atomic_load(&backend) != NULL) return 0;
  return atomic_load(&load_failed) || !cuda_in_process();
}

int hvd_device_is_device_ptr(const void *p) {
  if (p == NULL) return 0;
  const hvd_device_plugin_t *b = catch_up(load(0));
  return b != NULL ? b->is_device_ptr(p) : 0;
}

int hvd_device_of_buffers(const void *sendbuf, const void *recvbuf) {
  const hvd_device_plugin_t *b = catch_up(load(0));
  return b != NULL ? b->of_buffers(sendbuf, recvbuf) : -1;
}

void hvd_cuda_set_stream(void *stream) {
  pthread_mutex_lock(&load_mu);
  user_stream = stream;
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) b->set_stream(stream);
  pthread_mutex_unlock(&load_mu);
}

void *hvd_device_compute_stream(void) {
  pthread_mutex_lock(&load_mu);
  void *s = user_stream;
  pthread_mutex_unlock(&load_mu);
  return s;
}

/* The background thread as it ends. Not caught up: the backend releases only what a
   device collective set up, and those ran on this thread, started. */
void hvd_device_shutdown(void) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) b->shutdown();
}

/* The submitting thread: nothing to record before the backend is loaded (no device
   memory yet), and loading it is left to the buffer checks. */
void hvd_device_submit(struct hvd_request *r) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) b->submit(r);
}

void hvd_device_release_event(void *event) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) b->release_event(event);
}

int hvd_device_stream_wait(void *stream, void *event) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  return b != NULL ? b->stream_wait(stream, event) : -1;
}

size_t hvd_device_pending(void) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  return b != NULL ? b->pending() : 0;
}

hvd_status_t hvd_device_poll(int *completed, char *msg, size_t len) {
  const hvd_device_plugin_t *b = loaded();
  *completed = 0;
  return b != NULL ? b->poll(completed, msg, len) : HVD_OK;
}

static hvd_status_t forward_allreduce(struct hvd_request **reqs, const hvd_response_t *resp,
                                      int n, char *msg, size_t len) {
  const hvd_device_plugin_t *b = loaded();
  return b != NULL ? b->ops->allreduce(reqs, resp, n, msg, len) : not_loaded(msg, len);
}

static hvd_status_t forward_broadcast(struct hvd_request *r, const hvd_response_t *resp,
                                      char *msg, size_t len) {
  const hvd_device_plugin_t *b = loaded();
  return b != NULL ? b->ops->broadcast(r, resp, msg, len) : not_loaded(msg, len);
}

/* device.c's table sets allreduce and broadcast; same_operations() refuses a backend
   whose table sets others. Change the two together. */
const hvd_backend_ops_t hvd_device_ops = {
    .name = "device memory",
    .allreduce = forward_allreduce,
    .broadcast = forward_broadcast,
};

/* ---- device_cast.c's functions (the user thread, for hvd_grad_buckets) ---- */
int hvd_device_of_ptr(const void *p) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  return b != NULL ? b->of_ptr(p) : -1;
}

hvd_status_t hvd_device_buffer_alloc(void **p, size_t bytes, int device) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) return b->buffer_alloc(p, bytes, device);
  *p = NULL;
  return not_loaded_error("hvd_grad_buckets_create");
}

void hvd_device_buffer_free(void *p) {
  const hvd_device_plugin_t *b = atomic_load(&backend);
  if (b != NULL) b->buffer_free(p);
}

#else
/* ISO C forbids an empty translation unit; without CUDA hvd/device.c has no device. */
typedef int hvd_device_loader_unused_t;
#endif
