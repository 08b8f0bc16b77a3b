/* serve/instances.h: the body of a TF Serving predict (or classify) request -> a normalised
   float batch.

   Accepted (TF Serving's REST API, https://www.tensorflow.org/tfx/serving/api_rest):
     row format       {"instances": [S, S, ...]}           S: one sample, or {"NAME": S}
     columnar format  {"inputs": [S, S, ...]}  or  {"inputs": {"NAME": [S, ...]}}
     optional         "signature_name": "serving_default"
   A sample S of a model with input (c, h, w), in the shapes a Keras client sends:
     [h][w][c] (channels last), [h][w] when c == 1, or flat [h*w*c] in that order;
   numbers are pixel values in [0, 1] (others are served as given, after normalising);
   or {"b64": "..."} (TF Serving's binary convention), an encoded JPEG or PNG image,
   resized to (h, w) (serve/image_input.c).
   The batch written is NCHW, normalised as train normalised its data set:
     x = (255 v) * 1/(255 std) - mean/std   (train/data.c's arithmetic, so a pixel k/255
   gives bit for bit the float train fed the model).
   Errors: -1 with a message in err (the HTTP layer answers 400 with it). Memory taken:
   n * c * h * w floats, n <= max_instances; jansson's own tree is bounded by the body. */
#ifndef SERVE_INSTANCES_H
#define SERVE_INSTANCES_H

#include <stddef.h>

typedef struct {
  int c, h, w;
  float mean[3], std[3];
  int identity;             /* --normalize none: x = v                                 */
  int max_instances;
} serve_input_spec_t;

typedef struct {
  float *x;                 /* [n][c][h][w], malloc'ed                                */
  int n;
  int columnar;             /* 1: "inputs" (answer "outputs"), 0: "instances"         */
} serve_instances_t;

/* The normalisation of a data set by train's name: fashion-mnist, mnist, cifar10 (the
   constants train/data.c uses) or none. -1 for another name. (A file train exported
   records its own: serve/versions.c.) */
int serve_normalization(const char *dataset, serve_input_spec_t *spec);
extern const char *const serve_normalization_names[]; /* NULL-terminated */

int serve_instances_parse(const char *body, size_t len, const serve_input_spec_t *spec,
                          serve_instances_t *out, char *err, size_t errlen);
/* A classify request (TF Serving's Classify API, adapted to an image model):
     {"examples": [E, ...]}   E: {"FEATURE": S} (one feature, any name: "image", "input")
                                 or a bare sample S, in the shapes above
     optional "signature_name": "serving_default", and "context": {} (empty: the one
     feature is per example). */
int serve_examples_parse(const char *body, size_t len, const serve_input_spec_t *spec,
                         serve_instances_t *out, char *err, size_t errlen);
void serve_instances_free(serve_instances_t *in);

/* Writes the message to err (errlen bytes) and returns -1: the error return of serve's
   parsers and loaders. */
int serve_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* SERVE_INSTANCES_H */
