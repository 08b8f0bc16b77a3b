/* nn/cuda_loader.c: the device API of nn/nn_cuda.h in the shared libnn of a CUDA build,
   which links no CUDA library: the first call that needs the device loads nn's CUDA
   backend, libnn_cuda.so.0 (the files of nn/cuda/ as a library of its own), with dlopen and forwards
   to it through its table (nn/cuda_plugin.h). A CPU program never loads it, so it
   needs no CUDA library at link or run time; where the backend or a library it needs
   (cuDNN, cuBLAS, the CUDA runtime) is missing, the device is "not available" with a
   message naming the library, as without a GPU. Only in libnn.so (the Makefile's
   shared libraries): the static libnn.a links nn/cuda directly.

   Which calls load it: those that ask about the device or put something on it
   (nn_cuda_available, nn_cuda_info, nn_cuda_set_device, nn_cuda_malloc,
   nn_model_to_device to the GPU, ...). Those that only release or inspect what the
   device holds (nn_cuda_free, nn_cuda_is_device_ptr, nn_cuda_optim_free,
   nn_model_device_logits) do nothing before it is loaded: nothing can be on a device
   then. nn_cuda_set_tf32 is remembered and handed over when it loads. */
#ifdef NN_WITH_CUDA
#include "nn/cuda_plugin.h"
#include "nn/model_internal.h"
#include "util/plugin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const nn_cuda_plugin_t *_Atomic backend;   /* NULL: not (yet) loaded */
static char no_reason[1400];      /* why it is not loaded, as nn_cuda_reason words it */
static char no_info[1450];        /* the same with "; running on CPU" (nn_cuda_info)  */

/* nn_cuda_set_tf32 before the load: -1 none. Held with the publication of backend
   under tf32_mu, so a call racing the load is neither lost nor applied twice. */
static pthread_mutex_t tf32_mu = PTHREAD_MUTEX_INITIALIZER;
static int tf32_wanted = -1;

/* Words why the backend is not loaded as nn_cuda_reason and nn_cuda_info say it. */
static void set_reason(const char *why) {
  snprintf(no_reason, sizeof no_reason, "CUDA: nn's CUDA backend %s could not be loaded (%s)",
           NN_CUDA_PLUGIN_SONAME, why);
  snprintf(no_info, sizeof no_info, "%s; running on CPU", no_reason);
}

static const void *call_entry(void *sym) {
  return ((nn_cuda_plugin_fn)sym)();   /* POSIX: dlsym's object is the function */
}

/* Loads the backend (next to this libnn.so, make install puts it there, else wherever
   the dynamic loader finds it) and publishes it, or says why not in no_reason. */
static void load(void) {
  const util_plugin_spec_t spec = {
      .anchor = &load_once,
      .soname = NN_CUDA_PLUGIN_SONAME,
      .symbol = NN_CUDA_PLUGIN_SYMBOL,
      .call_entry = call_entry,
      .library = "nn",
      .abi = NN_CUDA_PLUGIN_ABI,
      .size = sizeof(nn_cuda_plugin_t),
  };
  char why[1200];
  const nn_cuda_plugin_t *t = util_plugin_load(&spec, why, sizeof why);
  if (t == NULL) {
    set_reason(why);
    return;
  }
  pthread_mutex_lock(&tf32_mu);
  atomic_store(&backend, t);
  /* No context yet (it is made through this backend): only remembered, cannot fail. */
  if (tf32_wanted >= 0) (void)t->set_tf32(tf32_wanted);
  pthread_mutex_unlock(&tf32_mu);
}

/* The backend, loaded now if not yet; NULL when it cannot be (no_reason says why). */
static const nn_cuda_plugin_t *need(void) {
  pthread_once(&load_once, load);
  return atomic_load(&backend);
}

/* The backend if it is loaded; never loads it. */
static const nn_cuda_plugin_t *loaded(void) { return atomic_load(&backend); }

static nn_status_t unavailable(const char *fn) {
  return nn_set_error(NN_ERR_UNSUPPORTED, "%s: %s", fn, no_reason);
}

/* ---- runtime ---- */
int nn_cuda_available(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->available() : 0;
}
const char *nn_cuda_info(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->info() : no_info;
}
const char *nn_cuda_reason(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->reason() : no_reason;
}
int nn_cuda_device_count(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->device_count() : 0;
}
nn_status_t nn_cuda_set_device(int device) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->set_device(device) : unavailable("nn_cuda_set_device");
}
void *nn_cuda_stream(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->stream() : NULL;
}
nn_status_t nn_cuda_synchronize(void) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->synchronize() : unavailable("nn_cuda_synchronize");
}
nn_status_t nn_cuda_set_tf32(int on) {
  nn_status_t s = NN_OK;
  pthread_mutex_lock(&tf32_mu);
  const nn_cuda_plugin_t *b = loaded();
  if (b) s = b->set_tf32(on);
  else tf32_wanted = on != 0;
  pthread_mutex_unlock(&tf32_mu);
  return s;
}

/* ---- memory ---- */
nn_status_t nn_cuda_malloc(void **p, size_t bytes) {
  const nn_cuda_plugin_t *b = need();
  if (b) return b->malloc(p, bytes);
  if (p) *p = NULL;
  return unavailable("nn_cuda_malloc");
}
void nn_cuda_free(void *p) {
  const nn_cuda_plugin_t *b = loaded();
  if (b) b->free(p);
}
nn_status_t nn_cuda_to_device(void *dst, const void *src, size_t bytes) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->to_device(dst, src, bytes) : unavailable("nn_cuda_to_device");
}
nn_status_t nn_cuda_to_host(void *dst, const void *src, size_t bytes) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->to_host(dst, src, bytes) : unavailable("nn_cuda_to_host");
}
nn_status_t nn_cuda_memset0(void *p, size_t bytes) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->memset0(p, bytes) : unavailable("nn_cuda_memset0");
}
int nn_cuda_is_device_ptr(const void *p) {
  const nn_cuda_plugin_t *b = loaded();
  return b ? b->is_device_ptr(p) : 0;
}

/* ---- optimizer on the device ---- */
nn_status_t nn_cuda_optim_create(nn_cuda_optim_t **out, const nn_optim_config_t *cfg,
                                 size_t count) {
  const nn_cuda_plugin_t *b = need();
  if (b) return b->optim_create(out, cfg, count);
  if (out) *out = NULL;
  return unavailable("nn_cuda_optim_create");
}
void nn_cuda_optim_free(nn_cuda_optim_t *o) {
  const nn_cuda_plugin_t *b = loaded();
  if (b) b->optim_free(o);
}
nn_status_t nn_cuda_optim_step(nn_cuda_optim_t *o, float *params_dev,
                               const float *grads_dev, float lr) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->optim_step(o, params_dev, grads_dev, lr) : unavailable("nn_cuda_optim_step");
}
nn_status_t nn_cuda_optim_state_to_host(nn_cuda_optim_t *o, float *state, size_t count,
                                        int64_t *step) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->optim_state_to_host(o, state, count, step)
           : unavailable("nn_cuda_optim_state_to_host");
}
nn_status_t nn_cuda_optim_state_to_device(nn_cuda_optim_t *o, const float *state,
                                          size_t count, int64_t step) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->optim_state_to_device(o, state, count, step)
           : unavailable("nn_cuda_optim_state_to_device");
}

/* ---- models ---- */
nn_status_t nn_model_to_device(nn_model_t *m, nn_device_t device) {
  int done;
  nn_status_t s = nn_model_to_device_args(m, device, &done);
  if (s != NN_OK || done) return s;   /* to where it is already: no backend needed */
  const nn_cuda_plugin_t *b = need();
  return b ? b->model_to_device(m, device) : unavailable("nn_model_to_device");
}
nn_status_t nn_model_optim_step_cuda(nn_model_t *m, nn_cuda_optim_t *o, float lr) {
  const nn_cuda_plugin_t *b = need();
  return b ? b->model_optim_step_cuda(m, o, lr) : unavailable("nn_model_optim_step_cuda");
}
const float *nn_model_device_logits(const nn_model_t *m) {
  const nn_cuda_plugin_t *b = loaded();
  return b ? b->model_device_logits(m) : NULL;
}
#else
/* ISO C forbids an empty translation unit; without CUDA nn/device_stub.c stands in. */
typedef int nn_cuda_loader_unused_t;
#endif
