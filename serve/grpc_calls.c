/* serve/grpc_calls.c: TF Serving's gRPC methods, message in, message out (see
   grpc_calls.h). protobuf-c decodes and encodes the messages (proto/, compiled by the
   build). */
#include "serve/grpc_calls.h"

#include "serve/image_input.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char predict_path[] = "/tensorflow.serving.PredictionService/Predict";
static const char metadata_path[] = "/tensorflow.serving.PredictionService/GetModelMetadata";
static const char status_path[] = "/tensorflow.serving.ModelService/GetModelStatus";
static const char classify_path[] = "/tensorflow.serving.PredictionService/Classify";

int serve_grpc_known_method(const char *path) {
  return strcmp(path, predict_path) == 0 || strcmp(path, metadata_path) == 0 ||
         strcmp(path, status_path) == 0 || strcmp(path, classify_path) == 0;
}

const char *serve_grpc_code_name(int code) {
  static const char *const names[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  return code >= 0 && code < (int)(sizeof names / sizeof names[0]) ? names[code] : "UNKNOWN";
}

static void answer_error(serve_grpc_answer_t *out, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer_error(serve_grpc_answer_t *out, int code, const char *fmt, ...) {
  out->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->message, sizeof out->message, fmt, ap);
  va_end(ap);
}

#ifdef HVD_NO_PROTOBUF

static const char no_protobuf[] =
    "serve was built without protobuf-c (make PROTOBUF=none): no gRPC; rebuild with "
    "PROTOBUF=system";

int serve_grpc_predict_open(const uint8_t *msg, size_t len, const char *model_name,
                            const serve_labels_t *labels, serve_grpc_predict_t **out,
                            long *version, char *err, size_t errlen) {
  (void)msg, (void)len, (void)model_name, (void)labels;
  *out = NULL;
  *version = 0;
  snprintf(err, errlen, "%s", no_protobuf);
  return SERVE_GRPC_UNIMPLEMENTED;
}

int serve_grpc_predict_batch(const serve_grpc_predict_t *p, const serve_input_spec_t *spec,
                             serve_instances_t *batch, char *err, size_t errlen) {
  (void)p, (void)spec;
  memset(batch, 0, sizeof *batch);
  snprintf(err, errlen, "%s", no_protobuf);
  return SERVE_GRPC_UNIMPLEMENTED;
}

void serve_grpc_predict_close(serve_grpc_predict_t *p) { (void)p; }

void serve_grpc_call(const serve_grpc_env_t *env, const char *path, const uint8_t *msg,
                     size_t len, serve_grpc_answer_t *out) {
  (void)env, (void)path, (void)msg, (void)len;
  memset(out, 0, sizeof *out);
  answer_error(out, SERVE_GRPC_UNIMPLEMENTED, "%s", no_protobuf);
}

#else

#include "tensorflow_serving/apis/classification.pb-c.h"
#include "tensorflow_serving/apis/get_model_metadata.pb-c.h"
#include "tensorflow_serving/apis/get_model_status.pb-c.h"
#include "tensorflow_serving/apis/predict.pb-c.h"

/* ---- the model spec ---- */

/* model_spec -> the version number it asks for (0: the newest). Returns OK or the code. */
static int choose_version(const Tensorflow__Serving__ModelSpec *ms, const char *model_name,
                          const serve_labels_t *labels, long *version, char *err, size_t errlen) {
  *version = 0;
  if (!ms)
    return serve_fail(err, errlen, "Missing ModelSpec"), SERVE_GRPC_INVALID_ARGUMENT;
  if (strcmp(ms->name, model_name) != 0)
    return serve_fail(err, errlen, "Servable not found for request: Latest(%.128s)", ms->name),
           SERVE_GRPC_NOT_FOUND;
  if (ms->signature_name[0] && strcmp(ms->signature_name, "serving_default") != 0)
    return serve_fail(err, errlen, "Serving signature name: \"%.128s\" not found in signature "
                      "def (the model has serving_default)", ms->signature_name),
           SERVE_GRPC_INVALID_ARGUMENT;
  if (ms->version_choice_case == TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION) {
    *version = ms->version ? (long)ms->version->value : 0;
    if (*version < 1)
      return serve_fail(err, errlen, "Servable not found for request: Specific(%.128s, %ld)",
                        ms->name, *version), SERVE_GRPC_NOT_FOUND;
  } else if (ms->version_choice_case ==
             TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION_LABEL) {
    *version = serve_labels_find(labels, ms->version_label);
    if (*version == 0)
      return serve_fail(err, errlen, "Unrecognized servable version label: %.64s "
                        "(--version-labels)", ms->version_label), SERVE_GRPC_NOT_FOUND;
  }
  return SERVE_GRPC_OK;
}

/* ---- Predict's input tensor ---- */

/* The samples of shape dims[0..ndim), when it is one the model takes: [n,h,w,c],
   [n,h,w] with c 1, [n,h*w*c]; else -1. */
static long tensor_samples(const Tensorflow__TensorShapeProto *shape,
                           const serve_input_spec_t *sp) {
  if (!shape || shape->unknown_rank) return -1;
  size_t nd = shape->n_dim;
  int64_t d[4] = {0};
  for (size_t i = 0; i < nd && i < 4; i++) d[i] = shape->dim[i]->size;
  int ok = (nd == 4 && d[1] == sp->h && d[2] == sp->w && d[3] == sp->c) ||
           (nd == 3 && sp->c == 1 && d[1] == sp->h && d[2] == sp->w) ||
           (nd == 2 && d[1] == (int64_t)sp->c * sp->h * sp->w);
  return ok && d[0] >= 1 ? (long)(d[0] > 1L << 30 ? 1L << 30 : d[0]) : -1;
}

static void shape_text(const Tensorflow__TensorShapeProto *shape, char *buf, size_t len) {
  if (!shape || shape->unknown_rank) {
    snprintf(buf, len, "%s", shape ? "unknown rank" : "no shape");
    return;
  }
  size_t at = (size_t)snprintf(buf, len, "[");
  for (size_t i = 0; i < shape->n_dim && at < len - 24; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "",
                           (long long)shape->dim[i]->size);
  snprintf(buf + at, len - at, "%s]", shape->n_dim > 8 ? ",..." : "");
}

/* n samples of floats v (channels last) -> out[n][c][h][w], normalised with the
   arithmetic of serve/instances.c's read_sample, so that a float gives bit for bit the
   input REST gives for the same number. */
static int normalise(const float *v, long n, const serve_input_spec_t *sp, float *out,
                     const char *name, char *err, size_t errlen) {
  int c = sp->c, hw = sp->h * sp->w;
  size_t per = (size_t)c * hw;
  for (long k = 0; k < n; k++) {
    const float *s = v + (size_t)k * per;
    for (int ch = 0; ch < c; ch++) {
      int q = ch < 3 ? ch : 2;
      float scale = 1.0f / (255.0f * sp->std[q]), shift = sp->mean[q] / sp->std[q];
      for (int i = 0; i < hw; i++) {
        double x = s[(size_t)i * c + ch];
        if (!isfinite(x))
          return serve_fail(err, errlen, "input %s: sample %ld, element %zu is not a finite float",
                            name, k, (size_t)i * c + ch);
        out[(size_t)k * per + (size_t)ch * hw + i] =
            sp->identity ? (float)x : (float)(x * 255.0) * scale - shift;
      }
    }
  }
  return 0;
}

/* DT_STRING [n] (or [n,1]): n encoded images -> the batch. */
static int image_batch(const char *name, const Tensorflow__TensorProto *t, const char *got,
                       const serve_input_spec_t *sp, serve_instances_t *out, char *err,
                       size_t errlen) {
  const Tensorflow__TensorShapeProto *sh = t->tensor_shape;
  int ok = sh && !sh->unknown_rank && (sh->n_dim == 1 || (sh->n_dim == 2 && sh->dim[1]->size == 1));
  if (!ok || sh->dim[0]->size != (int64_t)t->n_string_val || t->n_string_val == 0)
    return serve_fail(err, errlen, "input %s: DT_STRING of shape %s with %zu string_val: "
                      "expected shape [n] holding n encoded images (JPEG or PNG)", name, got,
                      t->n_string_val);
  if (t->n_string_val > (size_t)sp->max_instances)
    return serve_fail(err, errlen, "input %s: %zu images: at most %d per request "
                      "(--max-instances)", name, t->n_string_val, sp->max_instances);
  size_t per = (size_t)sp->c * sp->h * sp->w;
  if (!(out->x = malloc(t->n_string_val * per * sizeof(float))))
    return serve_fail(err, errlen, "out of memory for %zu images", t->n_string_val);
  for (size_t i = 0; i < t->n_string_val; i++) {
    char why[400];
    if (serve_image_decode(t->string_val[i].data, t->string_val[i].len, sp, out->x + i * per,
                           why, sizeof why) != 0) {
      serve_instances_free(out);
      return serve_fail(err, errlen, "input %s: image %zu: %s", name, i, why);
    }
  }
  out->n = (int)t->n_string_val;
  return 0;
}

static int tensor_batch(const char *name, const Tensorflow__TensorProto *t,
                        const serve_input_spec_t *sp, serve_instances_t *out, char *err,
                        size_t errlen) {
  char got[96];
  shape_text(t->tensor_shape, got, sizeof got);
  if (t->dtype == TENSORFLOW__DATA_TYPE__DT_STRING)
    return image_batch(name, t, got, sp, out, err, errlen);
  if (t->dtype != TENSORFLOW__DATA_TYPE__DT_FLOAT)
    return serve_fail(err, errlen, "input %s: dtype %d: expected DT_FLOAT (1), or DT_STRING (7) "
                      "holding encoded images", name, (int)t->dtype);
  long n = tensor_samples(t->tensor_shape, sp);
  if (n < 0) {
    if (sp->c == 1)
      return serve_fail(err, errlen, "input %s has shape %s: expected [n,%d,%d,1], [n,%d,%d] or "
                        "[n,%d]", name, got, sp->h, sp->w, sp->h, sp->w, sp->h * sp->w);
    return serve_fail(err, errlen, "input %s has shape %s: expected [n,%d,%d,%d] or [n,%d]", name,
                      got, sp->h, sp->w, sp->c, sp->c * sp->h * sp->w);
  }
  if (n > sp->max_instances)
    return serve_fail(err, errlen, "input %s: %ld samples: at most %d per request "
                      "(--max-instances)", name, n, sp->max_instances);
  size_t count = (size_t)n * sp->c * sp->h * sp->w;
  const float *v = t->float_val;
  if (t->tensor_content.len) {
    if (t->n_float_val)
      return serve_fail(err, errlen, "input %s: both tensor_content and float_val: give one", name);
    if (t->tensor_content.len != count * sizeof(float))
      return serve_fail(err, errlen, "input %s: tensor_content of %zu bytes: shape %s needs %zu",
                        name, t->tensor_content.len, got, count * sizeof(float));
  } else if (t->n_float_val != count) {
    return serve_fail(err, errlen, "input %s: %zu float_val for shape %s: expected %zu", name,
                      t->n_float_val, got, count);
  }
  float *copy = NULL; /* tensor_content is bytes: little-endian, maybe unaligned */
  if (t->tensor_content.len) {
    if (!(copy = malloc(count * sizeof(float))))
      return serve_fail(err, errlen, "out of memory for %ld samples", n);
    memcpy(copy, t->tensor_content.data, count * sizeof(float));
    v = copy;
  }
  out->x = malloc(count * sizeof(float));
  int rc = out->x ? normalise(v, n, sp, out->x, name, err, errlen)
                  : serve_fail(err, errlen, "out of memory for %ld samples", n);
  free(copy);
  if (rc != 0) {
    serve_instances_free(out);
    return -1;
  }
  out->n = (int)n;
  return 0;
}

struct serve_grpc_predict {
  Tensorflow__Serving__PredictRequest *req;
};

int serve_grpc_predict_open(const uint8_t *msg, size_t len, const char *model_name,
                            const serve_labels_t *labels, serve_grpc_predict_t **out,
                            long *version, char *err, size_t errlen) {
  *out = NULL;
  *version = 0;
  Tensorflow__Serving__PredictRequest *req =
      tensorflow__serving__predict_request__unpack(NULL, len, msg);
  if (!req)
    return serve_fail(err, errlen, "the request is not a PredictRequest (protobuf decoding "
                      "failed)"), SERVE_GRPC_INVALID_ARGUMENT;
  int code = choose_version(req->model_spec, model_name, labels, version, err, errlen);
  for (size_t i = 0; code == 0 && i < req->n_output_filter; i++)
    if (strcmp(req->output_filter[i], "predictions") != 0)
      code = (serve_fail(err, errlen, "output tensor alias not found in signature: %.64s "
                         "(the output is predictions)", req->output_filter[i]),
              SERVE_GRPC_INVALID_ARGUMENT);
  if (code == 0 && req->n_inputs != 1)
    code = (serve_fail(err, errlen, "%zu inputs: the model has one, input", req->n_inputs),
            SERVE_GRPC_INVALID_ARGUMENT);
  if (code == 0 && strcmp(req->inputs[0]->key, "input") != 0)
    code = (serve_fail(err, errlen, "input tensor alias not found in signature: %.64s. Inputs "
                       "expected to be in the set {input}", req->inputs[0]->key),
            SERVE_GRPC_INVALID_ARGUMENT);
  if (code == 0 && !req->inputs[0]->value)
    code = (serve_fail(err, errlen, "input %s has no tensor", req->inputs[0]->key),
            SERVE_GRPC_INVALID_ARGUMENT);
  serve_grpc_predict_t *p = code == 0 ? malloc(sizeof *p) : NULL;
  if (code == 0 && !p)
    code = (serve_fail(err, errlen, "out of memory"), SERVE_GRPC_INTERNAL);
  if (code != 0) {
    tensorflow__serving__predict_request__free_unpacked(req, NULL);
    return code;
  }
  p->req = req;
  *out = p;
  return SERVE_GRPC_OK;
}

int serve_grpc_predict_batch(const serve_grpc_predict_t *p, const serve_input_spec_t *spec,
                             serve_instances_t *batch, char *err, size_t errlen) {
  memset(batch, 0, sizeof *batch);
  const Tensorflow__Serving__PredictRequest__InputsEntry *in = p->req->inputs[0];
  return tensor_batch(in->key, in->value, spec, batch, err, errlen) == 0
             ? SERVE_GRPC_OK : SERVE_GRPC_INVALID_ARGUMENT;
}

void serve_grpc_predict_close(serve_grpc_predict_t *p) {
  if (!p) return;
  tensorflow__serving__predict_request__free_unpacked(p->req, NULL);
  free(p);
}

/* ---- the answers ---- */

/* Packs message m into out->body; OK, or INTERNAL when memory runs out. */
static void answer_message(serve_grpc_answer_t *out, const ProtobufCMessage *m) {
  size_t len = protobuf_c_message_get_packed_size(m);
  out->body = malloc(len ? len : 1);
  if (!out->body) {
    answer_error(out, SERVE_GRPC_INTERNAL, "out of memory for a %zu-byte answer", len);
    return;
  }
  out->len = protobuf_c_message_pack(m, out->body);
  out->code = SERVE_GRPC_OK;
}

static void not_served(serve_grpc_answer_t *out, const char *name, long version) {
  if (version)
    answer_error(out, SERVE_GRPC_NOT_FOUND, "Servable not found for request: Specific(%s, %ld)",
                 name, version);
  else
    answer_error(out, SERVE_GRPC_NOT_FOUND, "Servable not found for request: Latest(%s)", name);
}

/* The effective model spec of an answer: name, version, serving_default. */
typedef struct {
  Tensorflow__Serving__ModelSpec spec;
  Google__Protobuf__Int64Value version;
} answer_spec_t;

static void fill_spec(answer_spec_t *a, const char *name, long version) {
  Tensorflow__Serving__ModelSpec ms = TENSORFLOW__SERVING__MODEL_SPEC__INIT;
  Google__Protobuf__Int64Value v = GOOGLE__PROTOBUF__INT64_VALUE__INIT;
  a->spec = ms;
  a->version = v;
  a->version.value = version;
  a->spec.name = (char *)name;
  a->spec.signature_name = (char *)"serving_default";
  a->spec.version_choice_case = TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION;
  a->spec.version = &a->version;
}

/* probs [n][classes] -> PredictResponse {outputs: {predictions: DT_FLOAT [n, classes]}}. */
static void answer_predictions(serve_grpc_answer_t *out, const char *name, long version,
                               float *probs, int n, int classes) {
  answer_spec_t as;
  fill_spec(&as, name, version);
  Tensorflow__TensorShapeProto__Dim d0 = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT, d1 = d0;
  d0.size = n;
  d1.size = classes;
  Tensorflow__TensorShapeProto__Dim *dims[2] = {&d0, &d1};
  Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
  shape.n_dim = 2;
  shape.dim = dims;
  Tensorflow__TensorProto t = TENSORFLOW__TENSOR_PROTO__INIT;
  t.dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
  t.tensor_shape = &shape;
  t.n_float_val = (size_t)n * classes; /* float_val, as TF Serving answers */
  t.float_val = probs;
  Tensorflow__Serving__PredictResponse__OutputsEntry e =
      TENSORFLOW__SERVING__PREDICT_RESPONSE__OUTPUTS_ENTRY__INIT;
  e.key = (char *)"predictions";
  e.value = &t;
  Tensorflow__Serving__PredictResponse__OutputsEntry *entries[1] = {&e};
  Tensorflow__Serving__PredictResponse r = TENSORFLOW__SERVING__PREDICT_RESPONSE__INIT;
  r.model_spec = &as.spec;
  r.n_outputs = 1;
  r.outputs = entries;
  answer_message(out, &r.base);
}

/* The batch made from the request (code: OK, or why it could not be made) through v's
   batcher: its probabilities [n][*classes], malloc'ed, or NULL with the status in out. */
static float *run_batch(const serve_version_t *v, int code, const serve_instances_t *batch,
                        int *classes, serve_grpc_answer_t *out) {
  *classes = serve_batcher_classes(v->batcher);
  if (code != 0) {
    out->code = code;
    return NULL;
  }
  float *probs = malloc((size_t)batch->n * *classes * sizeof(float));
  if (!probs) {
    answer_error(out, SERVE_GRPC_INTERNAL, "out of memory for %d predictions", batch->n);
    return NULL;
  }
  serve_job_t job = {.x = batch->x, .n = batch->n, .probs = probs};
  out->instances = batch->n;
  if (serve_batcher_run(v->batcher, &job) != 0) {
    answer_error(out, SERVE_GRPC_INTERNAL, "%s", job.err);
    free(probs);
    return NULL;
  }
  return probs;
}

static void predict(const serve_grpc_env_t *env, const uint8_t *msg, size_t len,
                    serve_grpc_answer_t *out) {
  long number;
  serve_grpc_predict_t *p;
  int code = serve_grpc_predict_open(msg, len, env->model_name, env->labels, &p, &number,
                                     out->message, sizeof out->message);
  if (code != 0) {
    out->code = code;
    return;
  }
  serve_version_t *v = serve_models_acquire(env->models, number);
  if (!v) {
    serve_grpc_predict_close(p);
    not_served(out, env->model_name, number);
    return;
  }
  serve_input_spec_t spec = serve_version_input(v, &env->input);
  serve_instances_t batch;
  code = serve_grpc_predict_batch(p, &spec, &batch, out->message, sizeof out->message);
  serve_grpc_predict_close(p);
  int classes;
  float *probs = run_batch(v, code, &batch, &classes, out);
  if (probs) answer_predictions(out, env->model_name, v->number, probs, batch.n, classes);
  free(probs);
  serve_instances_free(&batch);
  serve_models_release(env->models, v);
}

/* TensorInfo of a DT_FLOAT tensor [-1, dims...] named name, in storage the caller holds. */
typedef struct {
  Tensorflow__TensorInfo info;
  Tensorflow__TensorShapeProto shape;
  Tensorflow__TensorShapeProto__Dim dim[4];
  Tensorflow__TensorShapeProto__Dim *dims[4];
} tensor_info_t;

static void fill_info(tensor_info_t *ti, const char *name, const long *sizes, int nd) {
  Tensorflow__TensorInfo info = TENSORFLOW__TENSOR_INFO__INIT;
  Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
  Tensorflow__TensorShapeProto__Dim dim = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
  ti->info = info;
  ti->shape = shape;
  for (int i = 0; i < nd; i++) {
    ti->dim[i] = dim;
    ti->dim[i].size = sizes[i];
    ti->dims[i] = &ti->dim[i];
  }
  ti->shape.n_dim = (size_t)nd;
  ti->shape.dim = ti->dims;
  ti->info.encoding_case = TENSORFLOW__TENSOR_INFO__ENCODING_NAME;
  ti->info.name = (char *)name;
  ti->info.dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
  ti->info.tensor_shape = &ti->shape;
}

/* The SignatureDefMap of serving_default, as REST's /metadata shows it (serve/http.c):
   input "input" [-1,h,w,c], output "predictions" [-1,classes], packed into any->value. */
static int pack_signatures(const serve_grpc_env_t *env, Google__Protobuf__Any *any) {
  int c, h, w, classes;
  serve_models_shape(env->models, &c, &h, &w, &classes);
  tensor_info_t in, outp;
  long in_dims[4] = {-1, h, w, c}, out_dims[2] = {-1, classes};
  fill_info(&in, "serving_default_input:0", in_dims, 4);
  fill_info(&outp, "StatefulPartitionedCall:0", out_dims, 2);
  Tensorflow__SignatureDef__InputsEntry ie = TENSORFLOW__SIGNATURE_DEF__INPUTS_ENTRY__INIT;
  Tensorflow__SignatureDef__OutputsEntry oe = TENSORFLOW__SIGNATURE_DEF__OUTPUTS_ENTRY__INIT;
  ie.key = (char *)"input";
  ie.value = &in.info;
  oe.key = (char *)"predictions";
  oe.value = &outp.info;
  Tensorflow__SignatureDef__InputsEntry *ies[1] = {&ie};
  Tensorflow__SignatureDef__OutputsEntry *oes[1] = {&oe};
  Tensorflow__SignatureDef sig = TENSORFLOW__SIGNATURE_DEF__INIT;
  sig.n_inputs = sig.n_outputs = 1;
  sig.inputs = ies;
  sig.outputs = oes;
  sig.method_name = (char *)"tensorflow/serving/predict";
  Tensorflow__Serving__SignatureDefMap__SignatureDefEntry se =
      TENSORFLOW__SERVING__SIGNATURE_DEF_MAP__SIGNATURE_DEF_ENTRY__INIT;
  se.key = (char *)"serving_default";
  se.value = &sig;
  Tensorflow__Serving__SignatureDefMap__SignatureDefEntry *ses[1] = {&se};
  Tensorflow__Serving__SignatureDefMap map = TENSORFLOW__SERVING__SIGNATURE_DEF_MAP__INIT;
  map.n_signature_def = 1;
  map.signature_def = ses;
  size_t len = tensorflow__serving__signature_def_map__get_packed_size(&map);
  if (!(any->value.data = malloc(len ? len : 1))) return -1;
  any->value.len = tensorflow__serving__signature_def_map__pack(&map, any->value.data);
  any->type_url = (char *)"type.googleapis.com/tensorflow.serving.SignatureDefMap";
  return 0;
}

static void get_metadata(const serve_grpc_env_t *env, const uint8_t *msg, size_t len,
                         serve_grpc_answer_t *out) {
  Tensorflow__Serving__GetModelMetadataRequest *req =
      tensorflow__serving__get_model_metadata_request__unpack(NULL, len, msg);
  if (!req) {
    answer_error(out, SERVE_GRPC_INVALID_ARGUMENT, "the request is not a "
                 "GetModelMetadataRequest (protobuf decoding failed)");
    return;
  }
  long number;
  int code = choose_version(req->model_spec, env->model_name, env->labels, &number,
                            out->message, sizeof out->message);
  if (code == 0 && req->n_metadata_field == 0)
    code = (serve_fail(out->message, sizeof out->message, "GetModelMetadataRequest must specify "
                       "at least one metadata_field"), SERVE_GRPC_INVALID_ARGUMENT);
  for (size_t i = 0; code == 0 && i < req->n_metadata_field; i++)
    if (strcmp(req->metadata_field[i], "signature_def") != 0)
      code = (serve_fail(out->message, sizeof out->message, "Metadata field %.64s is not "
                         "supported", req->metadata_field[i]), SERVE_GRPC_INVALID_ARGUMENT);
  tensorflow__serving__get_model_metadata_request__free_unpacked(req, NULL);
  if (code != 0) {
    out->code = code;
    return;
  }
  serve_version_t *v = serve_models_acquire(env->models, number);
  if (!v) {
    not_served(out, env->model_name, number);
    return;
  }
  answer_spec_t as;
  fill_spec(&as, env->model_name, v->number);
  serve_models_release(env->models, v);
  as.spec.signature_name = (char *)""; /* TF Serving's answer names no signature */
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  if (pack_signatures(env, &any) != 0) {
    answer_error(out, SERVE_GRPC_INTERNAL, "out of memory for the signature_def");
    return;
  }
  Tensorflow__Serving__GetModelMetadataResponse__MetadataEntry e =
      TENSORFLOW__SERVING__GET_MODEL_METADATA_RESPONSE__METADATA_ENTRY__INIT;
  e.key = (char *)"signature_def";
  e.value = &any;
  Tensorflow__Serving__GetModelMetadataResponse__MetadataEntry *es[1] = {&e};
  Tensorflow__Serving__GetModelMetadataResponse r =
      TENSORFLOW__SERVING__GET_MODEL_METADATA_RESPONSE__INIT;
  r.model_spec = &as.spec;
  r.n_metadata = 1;
  r.metadata = es;
  answer_message(out, &r.base);
  free(any.value.data);
}

static void get_status(const serve_grpc_env_t *env, const uint8_t *msg, size_t len,
                       serve_grpc_answer_t *out) {
  Tensorflow__Serving__GetModelStatusRequest *req =
      tensorflow__serving__get_model_status_request__unpack(NULL, len, msg);
  if (!req) {
    answer_error(out, SERVE_GRPC_INVALID_ARGUMENT, "the request is not a GetModelStatusRequest "
                 "(protobuf decoding failed)");
    return;
  }
  long number;
  int code = choose_version(req->model_spec, env->model_name, env->labels, &number,
                            out->message, sizeof out->message);
  tensorflow__serving__get_model_status_request__free_unpacked(req, NULL);
  if (code != 0) {
    out->code = code;
    return;
  }
  long nums[4];
  int n = serve_models_list(env->models, nums, 4), k = 0;
  Tensorflow__Serving__ModelVersionStatus st[4], *sts[4];
  Tensorflow__Serving__StatusProto ok[4];
  for (int i = 0; i < n; i++) {
    if (number && nums[i] != number) continue;
    Tensorflow__Serving__ModelVersionStatus s = TENSORFLOW__SERVING__MODEL_VERSION_STATUS__INIT;
    Tensorflow__Serving__StatusProto o = TENSORFLOW__SERVING__STATUS_PROTO__INIT;
    st[k] = s;
    ok[k] = o;
    st[k].version = nums[i];
    st[k].state = TENSORFLOW__SERVING__MODEL_VERSION_STATUS__STATE__AVAILABLE;
    st[k].status = &ok[k];
    sts[k] = &st[k];
    k++;
  }
  if (k == 0) {
    not_served(out, env->model_name, number);
    return;
  }
  Tensorflow__Serving__GetModelStatusResponse r =
      TENSORFLOW__SERVING__GET_MODEL_STATUS_RESPONSE__INIT;
  r.n_model_version_status = (size_t)k;
  r.model_version_status = sts;
  answer_message(out, &r.base);
}

/* ---- Classify ---- */

/* Example i (one feature, any name: float_list of c*h*w pixels channels last, or
   bytes_list of one encoded image) -> x, normalised with spec. */
static int example_sample(const Tensorflow__Example *e, size_t i, const serve_input_spec_t *sp,
                          float *x, char *err, size_t errlen) {
  const Tensorflow__Features *fs = e ? e->features : NULL;
  size_t nf = fs ? fs->n_feature : 0;
  if (nf != 1)
    return serve_fail(err, errlen, "example %zu has %zu features: expected one, the image", i, nf);
  const char *name = fs->feature[0]->key;
  const Tensorflow__Feature *f = fs->feature[0]->value;
  size_t per = (size_t)sp->c * sp->h * sp->w;
  if (f && f->kind_case == TENSORFLOW__FEATURE__KIND_FLOAT_LIST && f->float_list) {
    if (f->float_list->n_value != per)
      return serve_fail(err, errlen, "example %zu: feature %.64s has %zu floats: expected %zu "
                        "(%dx%dx%d, channels last)", i, name, f->float_list->n_value, per, sp->h,
                        sp->w, sp->c);
    return normalise(f->float_list->value, 1, sp, x, name, err, errlen);
  }
  if (f && f->kind_case == TENSORFLOW__FEATURE__KIND_BYTES_LIST && f->bytes_list &&
      f->bytes_list->n_value == 1) {
    char why[400];
    if (serve_image_decode(f->bytes_list->value[0].data, f->bytes_list->value[0].len, sp, x, why,
                           sizeof why) != 0)
      return serve_fail(err, errlen, "example %zu: feature %.64s: %s", i, name, why);
    return 0;
  }
  return serve_fail(err, errlen, "example %zu: feature %.64s: expected a float_list of %zu "
                    "pixels or a bytes_list of one JPEG or PNG image", i, name, per);
}

/* The examples of a ClassificationRequest -> a batch; OK or INVALID_ARGUMENT. */
static int examples_batch(const Tensorflow__Serving__Input *in, const serve_input_spec_t *sp,
                          serve_instances_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  Tensorflow__Example **ex = NULL;
  size_t n = 0;
  if (in && in->kind_case == TENSORFLOW__SERVING__INPUT__KIND_EXAMPLE_LIST && in->example_list) {
    ex = in->example_list->examples;
    n = in->example_list->n_examples;
  } else if (in && in->kind_case == TENSORFLOW__SERVING__INPUT__KIND_EXAMPLE_LIST_WITH_CONTEXT &&
             in->example_list_with_context) {
    const Tensorflow__Example *ctx = in->example_list_with_context->context;
    if (ctx && ctx->features && ctx->features->n_feature)
      return serve_fail(err, errlen, "a context with %zu features: the image is per example, "
                        "give an empty context", ctx->features->n_feature),
             SERVE_GRPC_INVALID_ARGUMENT;
    ex = in->example_list_with_context->examples;
    n = in->example_list_with_context->n_examples;
  }
  if (n == 0)
    return serve_fail(err, errlen, "no examples: input.example_list holds the images"),
           SERVE_GRPC_INVALID_ARGUMENT;
  if (n > (size_t)sp->max_instances)
    return serve_fail(err, errlen, "%zu examples: at most %d per request (--max-instances)", n,
                      sp->max_instances), SERVE_GRPC_INVALID_ARGUMENT;
  size_t per = (size_t)sp->c * sp->h * sp->w;
  if (!(out->x = malloc(n * per * sizeof(float))))
    return serve_fail(err, errlen, "out of memory for %zu examples", n), SERVE_GRPC_INTERNAL;
  for (size_t i = 0; i < n; i++)
    if (example_sample(ex[i], i, sp, out->x + i * per, err, errlen) != 0) {
      serve_instances_free(out);
      return SERVE_GRPC_INVALID_ARGUMENT;
    }
  out->n = (int)n;
  return SERVE_GRPC_OK;
}

/* probs [n][classes] -> ClassificationResponse: every class of each example, the highest
   score first (ties in class order), labelled with the recorded class names, else the
   index (as REST's :classify). */
static void answer_classes(serve_grpc_answer_t *out, const serve_version_t *v, const char *name,
                           const float *probs, int n, int classes) {
  size_t total = (size_t)n * classes;
  Tensorflow__Serving__Class *cls = calloc(total, sizeof *cls);
  Tensorflow__Serving__Class **clsp = calloc(total, sizeof *clsp);
  Tensorflow__Serving__Classifications *lists = calloc((size_t)n, sizeof *lists);
  Tensorflow__Serving__Classifications **listp = calloc((size_t)n, sizeof *listp);
  char (*idx)[16] = calloc((size_t)classes, sizeof *idx);
  int *order = calloc((size_t)classes, sizeof *order);
  if (cls && clsp && lists && listp && idx && order) {
    for (int j = 0; j < classes; j++) snprintf(idx[j], sizeof idx[j], "%d", j);
    for (int i = 0; i < n; i++) {
      const float *p = probs + (size_t)i * classes;
      for (int j = 0; j < classes; j++) { /* insertion sort: stable, classes is small */
        int k = j;
        for (; k > 0 && p[order[k - 1]] < p[j]; k--) order[k] = order[k - 1];
        order[k] = j;
      }
      Tensorflow__Serving__Classifications l = TENSORFLOW__SERVING__CLASSIFICATIONS__INIT;
      lists[i] = l;
      lists[i].n_classes = (size_t)classes;
      lists[i].classes = clsp + (size_t)i * classes;
      listp[i] = &lists[i];
      for (int j = 0; j < classes; j++) {
        Tensorflow__Serving__Class one = TENSORFLOW__SERVING__CLASS__INIT;
        Tensorflow__Serving__Class *cj = &cls[(size_t)i * classes + j];
        *cj = one;
        cj->label = v->info.labels ? v->info.labels[order[j]] : idx[order[j]];
        cj->score = p[order[j]];
        clsp[(size_t)i * classes + j] = cj;
      }
    }
    answer_spec_t as;
    fill_spec(&as, name, v->number);
    Tensorflow__Serving__ClassificationResult res =
        TENSORFLOW__SERVING__CLASSIFICATION_RESULT__INIT;
    res.n_classifications = (size_t)n;
    res.classifications = listp;
    Tensorflow__Serving__ClassificationResponse r =
        TENSORFLOW__SERVING__CLASSIFICATION_RESPONSE__INIT;
    r.model_spec = &as.spec;
    r.result = &res;
    answer_message(out, &r.base);
  } else {
    answer_error(out, SERVE_GRPC_INTERNAL, "out of memory for %d classifications", n);
  }
  free(cls), free(clsp), free(lists), free(listp), free(idx), free(order);
}

static void classify(const serve_grpc_env_t *env, const uint8_t *msg, size_t len,
                     serve_grpc_answer_t *out) {
  Tensorflow__Serving__ClassificationRequest *req =
      tensorflow__serving__classification_request__unpack(NULL, len, msg);
  if (!req) {
    answer_error(out, SERVE_GRPC_INVALID_ARGUMENT, "the request is not a ClassificationRequest "
                 "(protobuf decoding failed)");
    return;
  }
  long number;
  int code = choose_version(req->model_spec, env->model_name, env->labels, &number,
                            out->message, sizeof out->message);
  serve_version_t *v = code == 0 ? serve_models_acquire(env->models, number) : NULL;
  if (code != 0 || !v) {
    tensorflow__serving__classification_request__free_unpacked(req, NULL);
    if (code != 0) out->code = code;
    else not_served(out, env->model_name, number);
    return;
  }
  serve_input_spec_t spec = serve_version_input(v, &env->input);
  serve_instances_t batch;
  code = examples_batch(req->input, &spec, &batch, out->message, sizeof out->message);
  tensorflow__serving__classification_request__free_unpacked(req, NULL);
  int classes;
  float *probs = run_batch(v, code, &batch, &classes, out);
  if (probs) answer_classes(out, v, env->model_name, probs, batch.n, classes);
  free(probs);
  serve_instances_free(&batch);
  serve_models_release(env->models, v);
}

void serve_grpc_call(const serve_grpc_env_t *env, const char *path, const uint8_t *msg,
                     size_t len, serve_grpc_answer_t *out) {
  memset(out, 0, sizeof *out);
  if (strcmp(path, predict_path) == 0) predict(env, msg, len, out);
  else if (strcmp(path, classify_path) == 0) classify(env, msg, len, out);
  else if (strcmp(path, metadata_path) == 0) get_metadata(env, msg, len, out);
  else if (strcmp(path, status_path) == 0) get_status(env, msg, len, out);
  else answer_error(out, SERVE_GRPC_UNIMPLEMENTED, "unknown method %.200s", path);
}

#endif /* HVD_NO_PROTOBUF */
