/* serve/grpc_calls.h: TF Serving's gRPC methods on serve's model registry, message in,
   message out (the HTTP/2 side is serve/grpc_server.c):
     /tensorflow.serving.PredictionService/Predict           PredictRequest -> PredictResponse
     /tensorflow.serving.PredictionService/Classify          ClassificationRequest -> ...Response
     /tensorflow.serving.PredictionService/GetModelMetadata  signature_def, as TF Serving's
     /tensorflow.serving.ModelService/GetModelStatus          the versions served
   Predict's one input, "input", is a TensorProto: DT_FLOAT as float_val or tensor_content,
   shape [n,h,w,c] (or [n,h,w] when c is 1, or [n,h*w*c]), pixel values in [0, 1] as REST
   takes them, normalised with the same arithmetic (serve/instances.c); or DT_STRING,
   shape [n], each string an encoded JPEG or PNG image (serve/image_input.c). The answer's
   output "predictions" is DT_FLOAT [n, classes], the softmax, in float_val.
   Classify's examples (input.example_list) hold one feature each, any name: a float_list
   of the pixels (channels last) or a bytes_list of one encoded image; the answer lists
   every class of each example, the highest score first, labelled with the recorded class
   names (else the index), as REST's :classify.
   The model_spec chooses the version as REST's URL does: name (else NOT_FOUND), version
   or version_label (--version-labels), else the newest. */
#ifndef SERVE_GRPC_CALLS_H
#define SERVE_GRPC_CALLS_H

#include "serve/instances.h"
#include "serve/labels.h"
#include "serve/versions.h"

#include <stddef.h>
#include <stdint.h>

/* gRPC's status codes (the same numbers as tensorflow.error.Code). */
enum {
  SERVE_GRPC_OK = 0,
  SERVE_GRPC_CANCELLED = 1,
  SERVE_GRPC_INVALID_ARGUMENT = 3,
  SERVE_GRPC_DEADLINE_EXCEEDED = 4,
  SERVE_GRPC_NOT_FOUND = 5,
  SERVE_GRPC_RESOURCE_EXHAUSTED = 8,
  SERVE_GRPC_FAILED_PRECONDITION = 9,
  SERVE_GRPC_UNIMPLEMENTED = 12,
  SERVE_GRPC_INTERNAL = 13,
  SERVE_GRPC_UNAVAILABLE = 14,
};

typedef struct {
  serve_models_t *models;
  const char *model_name;        /* the name model_spec.name must give                  */
  serve_input_spec_t input;      /* shape and max_instances (each version normalises)  */
  const serve_labels_t *labels;  /* --version-labels                                    */
} serve_grpc_env_t;

typedef struct {
  int code;                      /* SERVE_GRPC_*                                         */
  char message[600];             /* grpc-message when code != 0                          */
  uint8_t *body;                 /* the response message (code 0), malloc'ed             */
  size_t len;
  int instances;                 /* samples run (for the log)                           */
} serve_grpc_answer_t;

/* 1 when path is a method answered here. */
int serve_grpc_known_method(const char *path);
/* Answers the call of path with request message msg[0..len); out->body is the caller's
   to free. Never fails otherwise: every problem is a status in out. */
void serve_grpc_call(const serve_grpc_env_t *env, const char *path, const uint8_t *msg,
                     size_t len, serve_grpc_answer_t *out);
/* The status code's name: "INVALID_ARGUMENT". */
const char *serve_grpc_code_name(int code);

/* The decoding half of Predict, for serve_grpc_call and the fuzz harness, in two steps
   because the normalisation is the version's: open decodes the PredictRequest and finds
   the version it asks for (0: the newest) and checks all but the tensor; batch turns its
   input tensor into a batch normalised with spec. Each returns SERVE_GRPC_OK or the code,
   with why in err; close frees what open made (NULL: nothing). */
typedef struct serve_grpc_predict serve_grpc_predict_t;
int serve_grpc_predict_open(const uint8_t *msg, size_t len, const char *model_name,
                            const serve_labels_t *labels, serve_grpc_predict_t **out,
                            long *version, char *err, size_t errlen);
int serve_grpc_predict_batch(const serve_grpc_predict_t *p, const serve_input_spec_t *spec,
                             serve_instances_t *batch, char *err, size_t errlen);
void serve_grpc_predict_close(serve_grpc_predict_t *p);

#endif /* SERVE_GRPC_CALLS_H */
