/* serve/versions.h: the versions of the served model, as TF Serving keeps them.
   Either one weights file (version 1, for ever) or a base path holding numbered version
   folders, BASE/N/model.safetensors: the newest loadable version is served (TF Serving's
   default "latest" policy) and serve_models_poll picks up a newer one without a restart.
   Each version owns its model and batcher. A request holds a reference to the version
   it runs on: a version replaced by a newer one is unloaded when its last request is
   answered, so a reload never cuts one short.
   Errors: functions return 0 or -1 with one line in err; nothing is printed. */
#ifndef SERVE_VERSIONS_H
#define SERVE_VERSIONS_H

#include "serve/batcher.h"
#include "serve/instances.h"

#include <stddef.h>

typedef struct {
  const char *arch;          /* nn model name: lenet, mlp, resnet20, ...               */
  const char *weights;       /* one safetensors file, or NULL                          */
  const char *base_path;     /* or a folder of numbered versions                       */
  const char *normalize;     /* --normalize NAME: overrides what a file records; NULL:
                                the file's, else default_normalize                     */
  const char *default_normalize; /* for a file that records none                      */
  serve_batching_t batching;
  int gpu;                   /* 1: run on the CUDA device                              */
} serve_models_config_t;

/* What a version's file records (train --export's "__metadata__", docs/serve.md) and
   the normalisation its requests get. */
typedef struct {
  int recorded;              /* 1: the file has train's metadata (hvd_format_version)  */
  char model[64], dataset[64];
  char norm_mean[64], norm_std[64]; /* as recorded ("0.286"), or as applied            */
  float mean[3], std[3];     /* the normalisation applied (per channel, 3rd repeats)   */
  int identity;              /* --normalize none                                       */
  char norm_source[32];      /* "recorded", "--normalize NAME", "default NAME"         */
  char **labels;             /* classes names (class_names), or NULL: "0", "1", ...   */
  char note[640];            /* one log line: "info: ..." or "warning: ..."            */
} serve_version_info_t;

typedef struct serve_version {
  long number;
  serve_batcher_t *batcher;
  serve_version_info_t info;
  int refs;                  /* requests running on it, plus 1 while it is served      */
  struct serve_version *next;
} serve_version_t;

typedef struct serve_models serve_models_t;

/* Loads the first version (the file, or the newest loadable folder of base_path). A
   file whose metadata names another model than cfg->arch, has a newer
   hvd_format_version or malformed entries does not load (err says which). The first
   version fixes the sample shape and classes (the recorded ones, else the model's
   defaults); a later version recording others is not loaded. */
int serve_models_open(serve_models_t **out, const serve_models_config_t *cfg, char *err,
                      size_t errlen);
/* Checks base_path for a version newer than the one served and loads it; when the
   served version's folder is gone, falls back to the newest remaining one (none left:
   nothing is served, every request gets 404), as TF Serving does. Returns 1 with a line
   in msg when the served version changed (the older one is unloaded once idle), 0 when
   there is nothing new (or no base path), -1 with msg when the newest folder does not
   load (said once per folder; it is retried at every poll) or none is left. */
int serve_models_poll(serve_models_t *m, char *msg, size_t msglen);
/* The version to run a request on: number 0 means the newest. NULL when that version is
   not served. Pair with serve_models_release. */
serve_version_t *serve_models_acquire(serve_models_t *m, long number);
void serve_models_release(serve_models_t *m, serve_version_t *v);
/* The numbers of the versions served now, newest first; returns how many (<= max). */
int serve_models_list(serve_models_t *m, long *numbers, int max);
/* The sample shape (c, h, w) and classes every version has (one architecture). */
void serve_models_shape(const serve_models_t *m, int *c, int *h, int *w, int *classes);
/* Forward passes and samples over every version loaded so far. */
void serve_models_stats(serve_models_t *m, serve_batcher_stats_t *st);
/* Versions in memory now: the one served and those still answering their last requests
   (each holds a model and a batcher thread). */
int serve_models_loaded(serve_models_t *m);
/* The input of a request run on v: shape and limits from base, the normalisation v's
   file asks for. */
serve_input_spec_t serve_version_input(const serve_version_t *v, const serve_input_spec_t *base);
/* Unloads every version; requests must be over. NULL: nothing. */
void serve_models_close(serve_models_t *m);

#endif /* SERVE_VERSIONS_H */
