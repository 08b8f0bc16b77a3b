/* serve/versions.c: loading versions of the model and swapping in newer ones. */
#include "serve/versions.h"

#include "nn/nn.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct serve_models {
  serve_models_config_t cfg;
  int c, h, w, classes;
  pthread_mutex_t mu;
  serve_version_t *served;      /* the newest version (a list of one: "latest" policy) */
  long failed_number;           /* the newest folder that failed to load, said once    */
  serve_batcher_stats_t unloaded; /* stats of versions already unloaded                */
};

static void lock(serve_models_t *m) {
  int rc = pthread_mutex_lock(&m->mu);
  if (rc != 0) { fprintf(stderr, "serve: pthread_mutex_lock: %s\n", strerror(rc)); abort(); }
}
static void unlock(serve_models_t *m) {
  int rc = pthread_mutex_unlock(&m->mu);
  if (rc != 0) { fprintf(stderr, "serve: pthread_mutex_unlock: %s\n", strerror(rc)); abort(); }
}

/* Builds the model, loads path into it, starts its batcher. */
static int load_version(serve_models_t *m, long number, const char *path, serve_version_t **out,
                        char *err, size_t errlen) {
  nn_model_config_t mc = {.batch = m->cfg.batching.max_batch};
  nn_model_t *model = NULL;
  if (nn_model_create(&model, m->cfg.arch, &mc) != NN_OK) {
    snprintf(err, errlen, "model %s: %s", m->cfg.arch, nn_last_error());
    return -1;
  }
  if (nn_model_load_safetensors(model, path) != NN_OK) {
    snprintf(err, errlen, "%s: %s", path, nn_last_error());
    nn_model_free(model);
    return -1;
  }
  if (m->cfg.gpu && nn_model_to_device(model, NN_DEVICE_CUDA) != NN_OK) {
    snprintf(err, errlen, "moving %s to the GPU: %s", m->cfg.arch, nn_last_error());
    nn_model_free(model);
    return -1;
  }
  serve_version_t *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "out of memory");
    nn_model_free(model);
    return -1;
  }
  if (serve_batcher_start(&v->batcher, model, &m->cfg.batching, err, errlen) != 0) {
    nn_model_free(model);
    free(v);
    return -1;
  }
  v->number = number;
  v->refs = 1;
  *out = v;
  return 0;
}

static void unload(serve_models_t *m, serve_version_t *v) {
  serve_batcher_stats_t st;
  serve_batcher_stats(v->batcher, &st);
  serve_batcher_stop(v->batcher);
  lock(m);
  m->unloaded.forwards += st.forwards;
  m->unloaded.samples += st.samples;
  m->unloaded.jobs += st.jobs;
  unlock(m);
  free(v);
}

/* The largest all-digit folder name under base (0: none), and its path. */
static long newest_folder(const char *base, char *path, size_t len) {
  DIR *d = opendir(base);
  if (!d) return -1;
  long best = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n == 0 || n > 15) continue;
    int digits = 1;
    for (size_t i = 0; i < n; i++) digits &= isdigit((unsigned char)e->d_name[i]) != 0;
    if (!digits) continue;
    long num = strtol(e->d_name, NULL, 10);
    if (num > best) best = num;
  }
  closedir(d);
  if (best > 0) snprintf(path, len, "%s/%ld/model.safetensors", base, best);
  return best;
}

int serve_models_poll(serve_models_t *m, char *msg, size_t msglen) {
  if (!m->cfg.base_path) return 0;
  char path[PATH_MAX + 64];
  long num = newest_folder(m->cfg.base_path, path, sizeof path);
  if (num < 0) {
    if (m->failed_number == -1) return 0;
    m->failed_number = -1;
    snprintf(msg, msglen, "model base path %s: %s", m->cfg.base_path, strerror(errno));
    return -1;
  }
  lock(m);
  long current = m->served ? m->served->number : 0;
  unlock(m);
  if (num <= current) return 0;
  serve_version_t *v = NULL;
  char err[512];
  if (load_version(m, num, path, &v, err, sizeof err) != 0) {
    if (m->failed_number == num) return 0;
    m->failed_number = num;
    snprintf(msg, msglen, "version %ld not loaded (retried at every poll): %s", num, err);
    return -1;
  }
  lock(m);
  serve_version_t *old = m->served;
  m->served = v;
  int idle = old && --old->refs == 0;
  unlock(m);
  if (idle) unload(m, old);
  snprintf(msg, msglen, "version %ld loaded from %s and served%s", num, path,
           old ? (idle ? "; the previous one unloaded" : "; the previous one unloads when idle")
               : "");
  return 1;
}

int serve_models_open(serve_models_t **out, const serve_models_config_t *cfg, char *err,
                      size_t errlen) {
  *out = NULL;
  if (!cfg->weights == !cfg->base_path) {
    snprintf(err, errlen, "give either a weights file or a model base path");
    return -1;
  }
  serve_models_t *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  m->cfg = *cfg;
  int rc = pthread_mutex_init(&m->mu, NULL);
  if (rc != 0) {
    snprintf(err, errlen, "pthread_mutex_init: %s", strerror(rc));
    free(m);
    return -1;
  }
  nn_model_t *probe = NULL; /* the shape, without weights */
  nn_model_config_t mc = {.batch = 1};
  if (nn_model_create(&probe, cfg->arch, &mc) != NN_OK) {
    snprintf(err, errlen, "%s", nn_last_error());
    serve_models_close(m);
    return -1;
  }
  nn_model_input_shape(probe, &m->c, &m->h, &m->w);
  m->classes = nn_model_num_classes(probe);
  nn_model_free(probe);
  if (cfg->weights) {
    if (load_version(m, 1, cfg->weights, &m->served, err, errlen) != 0) {
      serve_models_close(m);
      return -1;
    }
  } else {
    char msg[1024];
    if (serve_models_poll(m, msg, sizeof msg) <= 0) {
      if (m->failed_number != 0) snprintf(err, errlen, "%s", msg);
      else
        snprintf(err, errlen, "model base path %s has no version folder (expected %s/1/"
                 "model.safetensors, a number per version)", cfg->base_path, cfg->base_path);
      serve_models_close(m);
      return -1;
    }
  }
  *out = m;
  return 0;
}

serve_version_t *serve_models_acquire(serve_models_t *m, long number) {
  lock(m);
  serve_version_t *v = m->served;
  if (v && number != 0 && v->number != number) v = NULL;
  if (v) v->refs++;
  unlock(m);
  return v;
}

void serve_models_release(serve_models_t *m, serve_version_t *v) {
  lock(m);
  int idle = --v->refs == 0;
  unlock(m);
  if (idle) unload(m, v);
}

int serve_models_list(serve_models_t *m, long *numbers, int max) {
  lock(m);
  int n = 0;
  if (m->served && max > 0) numbers[n++] = m->served->number;
  unlock(m);
  return n;
}

void serve_models_shape(const serve_models_t *m, int *c, int *h, int *w, int *classes) {
  *c = m->c;
  *h = m->h;
  *w = m->w;
  *classes = m->classes;
}

void serve_models_stats(serve_models_t *m, serve_batcher_stats_t *st) {
  serve_version_t *v = serve_models_acquire(m, 0);
  serve_batcher_stats_t cur = {0};
  if (v) serve_batcher_stats(v->batcher, &cur);
  lock(m);
  st->forwards = m->unloaded.forwards + cur.forwards;
  st->samples = m->unloaded.samples + cur.samples;
  st->jobs = m->unloaded.jobs + cur.jobs;
  unlock(m);
  if (v) serve_models_release(m, v);
}

void serve_models_close(serve_models_t *m) {
  if (!m) return;
  if (m->served) serve_batcher_stop(m->served->batcher);
  free(m->served);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
