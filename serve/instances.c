/* serve/instances.c: parsing and checking the instances of a predict request. */
#include "serve/instances.h"

#include "serve/image_input.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const serve_normalization_names[] = {"fashion-mnist", "mnist", "cifar10", "none",
                                                 NULL};

int serve_normalization(const char *dataset, serve_input_spec_t *spec) {
  /* The published per-channel constants train uses for these data sets (train/data.c):
     --normalize, and the default for a file that records no normalisation. */
  static const struct { const char *name; float mean[3], std[3]; } table[] = {
      {"fashion-mnist", {0.2860f, 0.2860f, 0.2860f}, {0.3530f, 0.3530f, 0.3530f}},
      {"mnist", {0.1307f, 0.1307f, 0.1307f}, {0.3081f, 0.3081f, 0.3081f}},
      {"cifar10", {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}},
      {"none", {0, 0, 0}, {1, 1, 1}},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(dataset, table[i].name) != 0) continue;
    memcpy(spec->mean, table[i].mean, sizeof spec->mean);
    memcpy(spec->std, table[i].std, sizeof spec->std);
    spec->identity = strcmp(dataset, "none") == 0;
    return 0;
  }
  return -1;
}

int serve_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "a number";
  }
}

/* The nesting of a sample, read down its first elements: dims[0..*ndim). */
static void sample_dims(const json_t *s, int dims[4], int *ndim) {
  *ndim = 0;
  while (json_is_array(s) && *ndim < 4) {
    dims[(*ndim)++] = (int)json_array_size(s);
    if (json_array_size(s) == 0) break;
    s = json_array_get(s, 0);
  }
}

/* Walks s against dims[0..ndim) and writes its numbers in order to out[*at...]. */
static int flatten(const json_t *s, const int *dims, int ndim, double *out, size_t *at,
                   const char *what, int inst, char *err, size_t errlen) {
  if (ndim == 0) {
    if (!json_is_number(s))
      return serve_fail(err, errlen, "%s %d: element %zu is %s: expected a number (DT_FLOAT)",
                  what, inst, *at, json_kind(s));
    double v = json_number_value(s);
    if (!isfinite(v) || fabs(v) > 3.0e38)
      return serve_fail(err, errlen, "%s %d: element %zu is not a finite float", what, inst, *at);
    out[(*at)++] = v;
    return 0;
  }
  if (!json_is_array(s) || (int)json_array_size(s) != dims[0])
    return serve_fail(err, errlen, "%s %d: ragged array: %s where an array of %d was expected",
                what, inst, json_is_array(s) ? "an array of another length" : json_kind(s),
                dims[0]);
  for (int i = 0; i < dims[0]; i++)
    if (flatten(json_array_get(s, (size_t)i), dims + 1, ndim - 1, out, at, what, inst, err,
                errlen))
      return -1;
  return 0;
}

/* One sample -> x[c][h][w], normalised. hwc: scratch of c*h*w doubles (a pixel k/255
   times 255 rounds back to exactly k). */
/* {"b64": "..."}: TF Serving's binary value, here an encoded image (serve/image_input.c). */
static int read_image(const json_t *b64, const serve_input_spec_t *sp, const char *what, int inst,
                      float *x, char *err, size_t errlen) {
  if (!json_is_string(b64))
    return serve_fail(err, errlen, "%s %d: \"b64\" is %s: expected a base64 string", what, inst,
                      json_kind(b64));
  uint8_t *bytes;
  size_t len;
  if (serve_base64_decode(json_string_value(b64), json_string_length(b64), &bytes, &len) != 0)
    return serve_fail(err, errlen, "%s %d: \"b64\" is not base64", what, inst);
  char why[400];
  int rc = serve_image_decode(bytes, len, sp, x, why, sizeof why);
  free(bytes);
  return rc == 0 ? 0 : serve_fail(err, errlen, "%s %d: %s", what, inst, why);
}

static int read_sample(const json_t *s, const serve_input_spec_t *sp, const char *what, int inst,
                       double *hwc, float *x, char *err, size_t errlen) {
  const json_t *b64 = json_is_object(s) && json_object_size(s) == 1 ? json_object_get(s, "b64") : NULL;
  if (b64) return read_image(b64, sp, what, inst, x, err, errlen);
  if (json_is_object(s)) { /* {"NAME": S}: the one named input */
    if (json_object_size(s) != 1)
      return serve_fail(err, errlen, "%s %d: an object with %zu keys: the model has one input%s",
                  what, inst, json_object_size(s),
                  strcmp(what, "example") == 0 ? " (one feature, the image)" : "");
    s = json_object_iter_value(json_object_iter((json_t *)s));
    b64 = json_is_object(s) && json_object_size(s) == 1 ? json_object_get(s, "b64") : NULL;
    if (b64) return read_image(b64, sp, what, inst, x, err, errlen);
  }
  int dims[4], ndim;
  sample_dims(s, dims, &ndim);
  int c = sp->c, h = sp->h, w = sp->w;
  int ok = (ndim == 3 && dims[0] == h && dims[1] == w && dims[2] == c) ||
           (ndim == 2 && c == 1 && dims[0] == h && dims[1] == w) ||
           (ndim == 1 && dims[0] == c * h * w);
  if (!ok) {
    char got[64] = "a scalar";
    if (ndim > 0) {
      int p = snprintf(got, sizeof got, "[%d", dims[0]);
      for (int i = 1; i < ndim && p < (int)sizeof got - 16; i++)
        p += snprintf(got + p, sizeof got - (size_t)p, ",%d", dims[i]);
      snprintf(got + p, sizeof got - (size_t)p, "%s]", ndim == 4 ? ",..." : "");
    }
    if (c == 1)
      return serve_fail(err, errlen, "%s %d has shape %s: expected [%d,%d,1], [%d,%d] or [%d]",
                  what, inst, got, h, w, h, w, h * w);
    return serve_fail(err, errlen, "%s %d has shape %s: expected [%d,%d,%d] or [%d]", what, inst, got,
                h, w, c, c * h * w);
  }
  size_t at = 0;
  if (flatten(s, dims, ndim, hwc, &at, what, inst, err, errlen)) return -1;
  for (int ch = 0; ch < c; ch++) {
    int k = ch < 3 ? ch : 2;
    float scale = 1.0f / (255.0f * sp->std[k]), shift = sp->mean[k] / sp->std[k];
    for (int i = 0; i < h * w; i++) {
      double v = hwc[(size_t)i * c + ch];
      x[(size_t)ch * h * w + i] = sp->identity ? (float)v : (float)(v * 255.0) * scale - shift;
    }
  }
  return 0;
}

static int check_signature(const json_t *v, char *err, size_t errlen) {
  if (!json_is_string(v) || strcmp(json_string_value(v), "serving_default") != 0)
    return serve_fail(err, errlen, "Serving signature name: %s not found in signature def "
                "(the one signature is \"serving_default\")",
                json_is_string(v) ? json_string_value(v) : json_kind(v));
  return 0;
}

/* The examples of a classify request (checked): {"examples": [E, ...]}, optional
   "signature_name" and an empty "context" (the model's one feature is the image). */
static int find_examples(json_t *root, const json_t **list, char *err, size_t errlen) {
  const char *key;
  json_t *v, *ex = NULL;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "examples") == 0) ex = v;
    else if (strcmp(key, "signature_name") == 0) {
      if (check_signature(v, err, errlen)) return -1;
    } else if (strcmp(key, "context") == 0) {
      if (!json_is_object(v))
        return serve_fail(err, errlen, "'context' is %s: expected an object", json_kind(v));
      if (json_object_size(v) != 0)
        return serve_fail(err, errlen, "'context' has features: the model has one feature, the "
                    "image; give it in each example");
    } else
      return serve_fail(err, errlen, "unknown key \"%.64s\": expected \"examples\"", key);
  }
  if (!ex) return serve_fail(err, errlen, "Missing 'examples' key");
  if (!json_is_array(ex))
    return serve_fail(err, errlen, "'examples' is %s: expected a list of examples", json_kind(ex));
  *list = ex;
  return 0;
}

/* The list of samples of the request: "instances" or "inputs" (checked). */
static int find_samples(json_t *root, const json_t **list, int *columnar, char *err,
                        size_t errlen) {
  const char *key;
  json_t *v;
  json_t *inst = NULL, *inputs = NULL;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "instances") == 0) inst = v;
    else if (strcmp(key, "inputs") == 0) inputs = v;
    else if (strcmp(key, "signature_name") == 0) {
      if (check_signature(v, err, errlen)) return -1;
    } else
      return serve_fail(err, errlen, "unknown key \"%.64s\": expected \"instances\" or \"inputs\"", key);
  }
  if (inst && inputs) return serve_fail(err, errlen, "Not both 'instances' and 'inputs' may be given");
  if (!inst && !inputs) return serve_fail(err, errlen, "Missing 'inputs' or 'instances' key");
  *columnar = inputs != NULL;
  v = inst ? inst : inputs;
  if (inputs && json_is_object(v)) { /* {"inputs": {"NAME": [S, ...]}} */
    if (json_object_size(v) != 1)
      return serve_fail(err, errlen, "'inputs' names %zu inputs: the model has one",
                  json_object_size(v));
    v = json_object_iter_value(json_object_iter(v));
  }
  if (!json_is_array(v))
    return serve_fail(err, errlen, "'%s' is %s: expected a list of samples",
                inst ? "instances" : "inputs", json_kind(v));
  *list = v;
  return 0;
}

static int parse(const char *body, size_t len, const serve_input_spec_t *spec, int classify,
                 serve_instances_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return serve_fail(err, errlen, "JSON Parse error: %s at line %d column %d", jerr.text, jerr.line,
                jerr.column);
  const json_t *list = NULL;
  const char *what = classify ? "example" : "instance";
  int columnar = 0, rc;
  if (!json_is_object(root))
    rc = serve_fail(err, errlen, "the request body is %s: expected a JSON object", json_kind(root));
  else
    rc = classify ? find_examples(root, &list, err, errlen)
                  : find_samples(root, &list, &columnar, err, errlen);
  size_t n = rc == 0 ? json_array_size(list) : 0;
  if (rc == 0 && n == 0) rc = serve_fail(err, errlen, "no %ss: expected at least one sample", what);
  if (rc == 0 && n > (size_t)spec->max_instances)
    rc = serve_fail(err, errlen, "%zu %ss: at most %d per request (--max-instances)", n, what,
              spec->max_instances);
  size_t per = (size_t)spec->c * spec->h * spec->w;
  double *hwc = NULL;
  float *x = NULL;
  if (rc == 0) {
    hwc = malloc(per * sizeof(double));
    x = malloc(n * per * sizeof(float));
    if (!hwc || !x) rc = serve_fail(err, errlen, "out of memory for %zu instances", n);
  }
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = read_sample(json_array_get(list, i), spec, what, (int)i, hwc, x + i * per, err, errlen);
  json_decref(root);
  free(hwc);
  if (rc != 0) {
    free(x);
    return -1;
  }
  out->x = x;
  out->n = (int)n;
  out->columnar = columnar;
  return 0;
}

int serve_instances_parse(const char *body, size_t len, const serve_input_spec_t *spec,
                          serve_instances_t *out, char *err, size_t errlen) {
  return parse(body, len, spec, 0, out, err, errlen);
}

int serve_examples_parse(const char *body, size_t len, const serve_input_spec_t *spec,
                         serve_instances_t *out, char *err, size_t errlen) {
  return parse(body, len, spec, 1, out, err, errlen);
}

void serve_instances_free(serve_instances_t *in) {
  free(in->x);
  in->x = NULL;
  in->n = 0;
}
