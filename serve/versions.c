/* serve/versions.c: loading versions of the model and swapping in newer ones. */
#include "serve/versions.h"

#include "nn/nn.h"
#include "serve/instances.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
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
  int loaded;                   /* versions in memory (served or still answering)      */
};

static void lock(serve_models_t *m) {
  int rc = pthread_mutex_lock(&m->mu);
  if (rc != 0) { fprintf(stderr, "serve: pthread_mutex_lock: %s\n", strerror(rc)); abort(); }
}
static void unlock(serve_models_t *m) {
  int rc = pthread_mutex_unlock(&m->mu);
  if (rc != 0) { fprintf(stderr, "serve: pthread_mutex_unlock: %s\n", strerror(rc)); abort(); }
}

/* ---- what a file records (train --export's __metadata__, docs/serve.md) ---- */

static void free_labels(char **labels) {
  if (!labels) return;
  for (char **l = labels; *l; l++) free(*l);
  free(labels);
}

/* "a,b,c": up to max numbers; how many, or -1 (not such a list). */
static int parse_list(const char *s, double *out, int max) {
  int n = 0;
  for (;;) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || n == max) return -1;
    out[n++] = v;
    if (*end == '\0') return n;
    if (*end != ',') return -1;
    s = end + 1;
  }
}

/* The shortest decimal that reads back as f (as train writes them). */
static void float_text(char *buf, size_t len, float f) {
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, len, "%.*g", p, (double)f);
    if (strtof(buf, NULL) == f) return;
  }
}

/* v[0..c) (channels past the third repeat the third) as "a,b,c". */
static void floats_text(char *buf, size_t len, const float v[3], int c) {
  buf[0] = '\0';
  for (int ch = 0; ch < c && ch < 16; ch++) {
    char t[32];
    size_t at = strlen(buf);
    float_text(t, sizeof t, v[ch < 3 ? ch : 2]);
    snprintf(buf + at, len - at, "%s%s", ch ? "," : "", t);
  }
}

/* Reads path's metadata into info and shape (c, h, w, classes; zeros when not recorded).
   A file without hvd_format_version records nothing (0); a file with it must have every
   entry of format 1, well formed, for this model (else -1 with err). */
static int read_info(const serve_models_t *m, const char *path, serve_version_info_t *info,
                     int shape[4], char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  memset(shape, 0, 4 * sizeof *shape);
  nn_st_file_t f;
  if (nn_st_read(path, &f) != NN_OK) return serve_fail(err, errlen, "%s", nn_last_error());
  int rc = 0;
  const char *ver = nn_st_meta_get(&f, "hvd_format_version");
  if (!ver) goto done;
  if (strcmp(ver, "1") != 0) {
    rc = serve_fail(err, errlen, "%s: hvd_format_version \"%.32s\" in its __metadata__: this serve "
              "reads version 1 (the file is from a newer train?)", path, ver);
    goto done;
  }
  static const char *const need[] = {"model", "input_shape", "num_classes", "norm_mean",
                                     "norm_std"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!nn_st_meta_get(&f, need[i])) {
      rc = serve_fail(err, errlen, "%s: its __metadata__ (hvd_format_version 1) lacks \"%s\"", path,
                need[i]);
      goto done;
    }
  const char *model = nn_st_meta_get(&f, "model");
  if (strcmp(model, m->cfg.arch) != 0) {
    rc = serve_fail(err, errlen, "%s was exported for model %.60s (its __metadata__ \"model\"), not "
              "for --model %s: serve it with --model %.60s", path, model, m->cfg.arch, model);
    goto done;
  }
  snprintf(info->model, sizeof info->model, "%s", model);
  const char *ds = nn_st_meta_get(&f, "dataset");
  snprintf(info->dataset, sizeof info->dataset, "%s", ds ? ds : "(not recorded)");
  double d[64];
  const char *txt = nn_st_meta_get(&f, "input_shape");
  if (parse_list(txt, d, 3) != 3 || d[0] < 1 || d[1] < 1 || d[2] < 1 || d[0] > 65536 ||
      d[1] > 65536 || d[2] > 65536 || d[0] != (int)d[0] || d[1] != (int)d[1] || d[2] != (int)d[2]) {
    rc = serve_fail(err, errlen, "%s: __metadata__ \"input_shape\" is \"%.40s\": expected \"C,H,W\" "
              "(positive integers)", path, txt);
    goto done;
  }
  for (int i = 0; i < 3; i++) shape[i] = (int)d[i];
  txt = nn_st_meta_get(&f, "num_classes");
  if (parse_list(txt, d, 1) != 1 || d[0] < 1 || d[0] > 1e6 || d[0] != (int)d[0]) {
    rc = serve_fail(err, errlen, "%s: __metadata__ \"num_classes\" is \"%.40s\": expected a positive "
              "integer", path, txt);
    goto done;
  }
  shape[3] = (int)d[0];
  const char *keys[2] = {"norm_mean", "norm_std"};
  float *vals[2] = {info->mean, info->std};
  char *texts[2] = {info->norm_mean, info->norm_std};
  for (int k = 0; k < 2; k++) {
    txt = nn_st_meta_get(&f, keys[k]);
    int n = parse_list(txt, d, 64);
    int ok = n == shape[0];
    for (int i = 0; ok && i < n; i++) ok = fabs(d[i]) < 1e30 && (k == 0 || d[i] > 0);
    if (!ok) {
      rc = serve_fail(err, errlen, "%s: __metadata__ \"%s\" is \"%.60s\": expected %d number(s), one "
                "per input channel%s", path, keys[k], txt, shape[0],
                k ? ", each above 0" : "");
      goto done;
    }
    for (int ch = 0; ch < 3; ch++) vals[k][ch] = (float)d[ch < n ? ch : n - 1];
    snprintf(texts[k], sizeof info->norm_mean, "%s", txt);
  }
  txt = nn_st_meta_get(&f, "class_names");
  if (txt) {
    json_t *a = json_loads(txt, JSON_REJECT_DUPLICATES, NULL);
    int ok = json_is_array(a) && json_array_size(a) == (size_t)shape[3];
    for (size_t i = 0; ok && i < json_array_size(a); i++)
      ok = json_is_string(json_array_get(a, i));
    if (ok) {
      info->labels = calloc((size_t)shape[3] + 1, sizeof *info->labels);
      for (int i = 0; info->labels && i < shape[3]; i++)
        if (!(info->labels[i] = strdup(json_string_value(json_array_get(a, (size_t)i))))) {
          free_labels(info->labels);
          info->labels = NULL;
        }
      if (!info->labels) rc = serve_fail(err, errlen, "out of memory");
    } else {
      rc = serve_fail(err, errlen, "%s: __metadata__ \"class_names\" is not a JSON array of %d "
                "strings", path, shape[3]);
    }
    json_decref(a);
    if (rc) goto done;
  }
  info->recorded = 1;
done:
  nn_st_free(&f);
  return rc;
}

/* The normalisation of version number (path, info): --normalize, else the recorded one,
   else the default; and the log line that says which and why. */
static void choose_normalization(const serve_models_t *m, long number, const char *path,
                                 serve_version_info_t *info) {
  serve_input_spec_t named = {0};
  const char *name = m->cfg.normalize ? m->cfg.normalize : m->cfg.default_normalize;
  serve_normalization(name, &named);
  char nm[64], ns[64], applied[160];
  floats_text(nm, sizeof nm, named.mean, m->c);
  floats_text(ns, sizeof ns, named.std, m->c);
  if (named.identity) snprintf(applied, sizeof applied, "none (values fed as sent)");
  else snprintf(applied, sizeof applied, "%s (mean %s, std %s)", name, nm, ns);
  if (!m->cfg.normalize && info->recorded) {
    snprintf(info->norm_source, sizeof info->norm_source, "recorded");
    snprintf(info->note, sizeof info->note, "info: version %ld: normalisation recorded in %s: "
             "data set %s, mean %s, std %s", number, path, info->dataset, info->norm_mean,
             info->norm_std);
    return;
  }
  int same = info->recorded && !named.identity;
  for (int ch = 0; same && ch < 3; ch++)
    same = named.mean[ch] == info->mean[ch] && named.std[ch] == info->std[ch];
  if (m->cfg.normalize && info->recorded)
    snprintf(info->note, sizeof info->note,
             same ? "info: version %ld: normalisation %s from --normalize, as %s records "
                    "(data set %s)"
                  : "warning: version %ld: normalisation %s from --normalize, overriding what %s "
                    "records (data set %s, mean %s, std %s)",
             number, applied, path, info->dataset, info->norm_mean, info->norm_std);
  else if (m->cfg.normalize)
    snprintf(info->note, sizeof info->note, "info: version %ld: normalisation %s from "
             "--normalize (%s records none)", number, applied, path);
  else
    snprintf(info->note, sizeof info->note,
             "warning: version %ld: %s records no normalisation (no hvd __metadata__: exported "
             "by an older train, or written by another program such as PyTorch): using the "
             "default, %s; --normalize NAME sets another", number, path, applied);
  snprintf(info->norm_source, sizeof info->norm_source, "%s %s",
           m->cfg.normalize ? "--normalize" : "default", name);
  memcpy(info->mean, named.mean, sizeof info->mean);
  memcpy(info->std, named.std, sizeof info->std);
  info->identity = named.identity;
  snprintf(info->norm_mean, sizeof info->norm_mean, "%s", named.identity ? "0" : nm);
  snprintf(info->norm_std, sizeof info->norm_std, "%s", named.identity ? "1" : ns);
}

/* Reads path's metadata, builds the model (of the recorded shape, else the model's
   default), loads path into it, starts its batcher. */
static int load_version(serve_models_t *m, long number, const char *path, serve_version_t **out,
                        char *err, size_t errlen) {
  serve_version_info_t info;
  int shape[4];
  /* An ONNX file (serve --model-file) is its own graph and weights; it records no
     normalisation serve reads (--normalize, else the default). */
  const int onnx = nn_model_source_is_onnx(path);
  if (onnx) {
    memset(&info, 0, sizeof info);
    memset(shape, 0, sizeof shape);
  } else if (read_info(m, path, &info, shape, err, errlen) != 0) {
    return -1;
  }
  nn_model_config_t mc = {.batch = m->cfg.batching.max_batch, .in_channels = shape[0],
                          .in_height = shape[1], .in_width = shape[2], .num_classes = shape[3]};
  nn_model_t *model = NULL;
  if (nn_model_create_from(&model, m->cfg.arch, &mc) != NN_OK) {
    snprintf(err, errlen, "model %s%s: %s", m->cfg.arch,
             info.recorded ? " of the shape its file records" : "", nn_last_error());
    free_labels(info.labels);
    return -1;
  }
  int c, h, w, classes = nn_model_num_classes(model);
  nn_model_input_shape(model, &c, &h, &w);
  if (m->classes == 0) { /* the first version fixes the shape */
    m->c = c;
    m->h = h;
    m->w = w;
    m->classes = classes;
  } else if (c != m->c || h != m->h || w != m->w || classes != m->classes) {
    snprintf(err, errlen, "%s records input %d,%d,%d and %d classes, the versions served take "
             "%d,%d,%d and %d: restart serve to serve it", path, c, h, w, classes, m->c, m->h,
             m->w, m->classes);
    nn_model_free(model);
    free_labels(info.labels);
    return -1;
  }
  if (!onnx && nn_model_load_safetensors(model, path) != NN_OK) {
    snprintf(err, errlen, "%s: %s", path, nn_last_error());
    nn_model_free(model);
    free_labels(info.labels);
    return -1;
  }
  if (m->cfg.gpu && nn_model_to_device(model, NN_DEVICE_CUDA) != NN_OK) {
    snprintf(err, errlen, "moving %s to the GPU: %s", m->cfg.arch, nn_last_error());
    nn_model_free(model);
    free_labels(info.labels);
    return -1;
  }
  serve_version_t *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "out of memory");
    nn_model_free(model);
    free_labels(info.labels);
    return -1;
  }
  if (serve_batcher_start(&v->batcher, model, &m->cfg.batching, err, errlen) != 0) {
    nn_model_free(model);
    free_labels(info.labels);
    free(v);
    return -1;
  }
  choose_normalization(m, number, path, &info);
  v->info = info;
  v->number = number;
  v->refs = 1;
  lock(m);
  m->loaded++;
  unlock(m);
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
  m->loaded--;
  unlock(m);
  free_labels(v->info.labels);
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

/* Serves v (NULL: nothing) instead of the version served; 1 when that one was idle and
   is unloaded now, else it is unloaded by its last request. */
static int swap_served(serve_models_t *m, serve_version_t *v) {
  lock(m);
  serve_version_t *old = m->served;
  m->served = v;
  int idle = old && --old->refs == 0;
  unlock(m);
  if (idle) unload(m, old);
  return idle;
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
  if (num == current) return 0;
  /* num < current: the served version's folder is gone. It is not served any longer,
     whether or not the newest remaining one loads. */
  serve_version_t *v = NULL;
  char err[512], gone[160] = "";
  if (num < current)
    snprintf(gone, sizeof gone, "version %ld's folder is gone: it is no longer served; ",
             current);
  if (num > 0 && load_version(m, num, path, &v, err, sizeof err) != 0) {
    if (num < current) swap_served(m, NULL);
    if (m->failed_number == num && num > current) return 0;
    m->failed_number = num;
    snprintf(msg, msglen, "%sversion %ld not loaded (retried at every poll): %s", gone, num, err);
    return -1;
  }
  int idle = swap_served(m, v);
  if (!v) {
    snprintf(msg, msglen, "%sno version folder is left in %s: every request gets 404 until "
             "one appears", gone, m->cfg.base_path);
    return -1;
  }
  snprintf(msg, msglen, "%sversion %ld loaded from %s and served%s", gone, num, path,
           current ? (idle ? "; the previous one unloaded" : "; the previous one unloads when idle")
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
  if (!m->cfg.default_normalize) m->cfg.default_normalize = "fashion-mnist";
  int rc = pthread_mutex_init(&m->mu, NULL);
  if (rc != 0) {
    snprintf(err, errlen, "pthread_mutex_init: %s", strerror(rc));
    free(m);
    return -1;
  }
  const char *norm = cfg->normalize ? cfg->normalize : m->cfg.default_normalize;
  if (serve_normalization(norm, &(serve_input_spec_t){0}) != 0) {
    snprintf(err, errlen, "unknown normalisation %s", norm);
    serve_models_close(m);
    return -1;
  }
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

int serve_models_loaded(serve_models_t *m) {
  lock(m);
  int n = m->loaded;
  unlock(m);
  return n;
}

void serve_models_close(serve_models_t *m) {
  if (!m) return;
  if (m->served) {
    serve_batcher_stop(m->served->batcher);
    free_labels(m->served->info.labels);
  }
  free(m->served);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

serve_input_spec_t serve_version_input(const serve_version_t *v, const serve_input_spec_t *base) {
  serve_input_spec_t spec = *base;
  memcpy(spec.mean, v->info.mean, sizeof spec.mean);
  memcpy(spec.std, v->info.std, sizeof spec.std);
  spec.identity = v->info.identity;
  return spec;
}
