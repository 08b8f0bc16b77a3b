/* nn/onnx_import.c: nn_model_from_onnx, a model built from an ONNX file (what
   torch.onnx.export and tf2onnx write). The file is read with protobuf-c against ONNX's
   own messages (proto/onnx/onnx.proto, ONNX's field numbers), not by a parser of ours:
   protobuf-c checks every length and tag, so a truncated or corrupt file is an error,
   never a read past the buffer.

   The graph's nodes come in topological order (ONNX requires it); each maps onto zero
   or more of nn's layers (model_internal.h), appended in that order, which is also the
   order of the parameters. Values are followed by name: each names a layer's output
   (or the input batch) with its per-sample shape, rank 4 [C][H][W] or rank 2 [C].
   Nodes that compute nothing (Identity, a Flatten of a flat value, Dropout at inference,
   the Softmax that ends a classifier) alias their input. Initializers become the
   starting weights, and the model's tensors keep the initializers' names. */
#include "nn/graph_kernels_internal.h"
#include "nn/model_internal.h"

#include <stdarg.h>
#include <stdio.h>

#ifdef HVD_NO_PROTOBUF

nn_status_t nn_model_from_onnx(nn_model_t **out, const char *path,
                               const nn_model_config_t *cfg) {
  (void)cfg;
  if (out) *out = NULL;
  return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_from_onnx(\"%s\"): built without "
                      "protobuf-c (PROTOBUF=none): ONNX files cannot be read; rebuild with "
                      "PROTOBUF=system", path ? path : "(null)");
}

#else

#include "onnx/onnx.pb-c.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ONNX_OPSET_MIN 11
#define ONNX_OPSET_MAX 17
#define ONNX_FLOAT 1      /* TensorProto.DataType FLOAT */
#define ONNX_INT64 7
#define ONNX_MAX_BYTES ((size_t)2 << 30)  /* protobuf's limit for one message */
/* The activations of one sample, all layers together: 8 GiB of floats, far beyond any
   image classifier, so that a small file cannot make nn allocate the impossible. */
#define ONNX_MAX_SAMPLE_FLOATS ((size_t)1 << 31)

static const char *const supported_ops =
    "Conv, Gemm, MatMul (+ Add of a bias), BatchNormalization, Relu, LeakyRelu, Sigmoid, "
    "Tanh, Clip, MaxPool, AveragePool, GlobalAveragePool, Add, Mul, Concat, Flatten, "
    "Reshape to 2-D, Dropout, Identity, Constant, Cast of constants, Pad (zeros, into Conv or AveragePool), "
    "Softmax or LogSoftmax at the end";

/* A named value of the graph: the output of a layer (or the input batch), per sample. */
typedef struct {
  const char *name;
  int layer;              /* NN_MODEL_INPUT or a layer index */
  int rank;               /* 4: [C][H][W]; 2: [C] (h = w = 1) */
  int c, h, w;
  int pad;                /* a Pad node's zeros around H and W, not yet applied: only a
                             convolution or an average pool (counting them) reads it */
} value_t;

/* A weight to copy from an initializer once the model is allocated. */
typedef struct {
  int slice;
  const Onnx__TensorProto *t;
  int transpose;          /* [in][out] (MatMul, Gemm transB=0) into nn's [out][in] */
} load_t;

typedef struct {
  const char *path;
  Onnx__ModelProto *model;
  const Onnx__GraphProto *g;
  nn_model_t *m;
  int opset;
  value_t *vals;
  int num_vals, cap_vals;
  load_t *loads;
  int num_loads, cap_loads;
  const Onnx__TensorProto **consts;  /* Constant nodes' values, by node index */
  char *skip;                        /* nodes folded into an earlier one */
  const char *graph_output;
} importer_t;

static const char *str(const char *s) { return s ? s : ""; }

static nn_status_t file_error(const importer_t *im, nn_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static nn_status_t file_error(const importer_t *im, nn_status_t s, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return nn_set_error(s, "nn_model_from_onnx(\"%s\"): %s", im->path, msg);
}

static nn_status_t node_error(const importer_t *im, const Onnx__NodeProto *n, nn_status_t s,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static nn_status_t node_error(const importer_t *im, const Onnx__NodeProto *n, nn_status_t s,
                              const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return nn_set_error(s, "nn_model_from_onnx(\"%s\"): node \"%s\" (%s): %s", im->path,
                      n->name && *n->name ? n->name : (n->n_output ? str(n->output[0]) : ""),
                      str(n->op_type), msg);
}

/* ---- reading the file ---- */

static nn_status_t read_model(importer_t *im) {
  FILE *f = fopen(im->path, "rb");
  if (!f) return file_error(im, NN_ERR_IO, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > ONNX_MAX_BYTES) {
    fclose(f);
    return file_error(im, NN_ERR_FORMAT, "not a regular file of at most 2 GiB");
  }
  size_t len = (size_t)st.st_size;
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) {
    fclose(f);
    return file_error(im, NN_ERR_NO_MEMORY, "out of memory reading %zu bytes", len);
  }
  size_t got = fread(buf, 1, len, f);
  fclose(f);
  if (got != len) {
    free(buf);
    return file_error(im, NN_ERR_IO, "read %zu of %zu bytes", got, len);
  }
  im->model = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (!im->model)
    return file_error(im, NN_ERR_FORMAT, "not an ONNX model: the protobuf message is "
                      "truncated or corrupt (%zu bytes)", len);
  if (!im->model->graph || im->model->graph->n_node == 0)
    return file_error(im, NN_ERR_FORMAT, "not an ONNX model: no graph, or a graph "
                      "without nodes");
  im->g = im->model->graph;
  return NN_OK;
}

static nn_status_t check_opset(importer_t *im) {
  const Onnx__ModelProto *mp = im->model;
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    const char *d = str(o->domain);
    if (*d == '\0' || strcmp(d, "ai.onnx") == 0) im->opset = (int)o->version;
  }
  if (im->opset < ONNX_OPSET_MIN || im->opset > ONNX_OPSET_MAX)
    return file_error(im, NN_ERR_UNSUPPORTED, "opset %d of the ONNX operators; nn reads "
                      "opsets %d to %d (torch.onnx.export(..., opset_version=13))",
                      im->opset, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
  return NN_OK;
}

/* ---- values, constants and attributes ---- */

static value_t *find_value(importer_t *im, const char *name) {
  for (int i = im->num_vals - 1; i >= 0; i--)
    if (strcmp(im->vals[i].name, name) == 0) return &im->vals[i];
  return NULL;
}

static nn_status_t add_value(importer_t *im, const char *name, value_t v) {
  if (im->num_vals == im->cap_vals) {
    int cap = im->cap_vals ? 2 * im->cap_vals : 64;
    value_t *p = realloc(im->vals, (size_t)cap * sizeof *p);
    if (!p) return file_error(im, NN_ERR_NO_MEMORY, "out of memory");
    im->vals = p;
    im->cap_vals = cap;
  }
  v.name = name;
  im->vals[im->num_vals++] = v;
  return NN_OK;
}

/* An initializer or a Constant node's value (NULL: neither). */
static const Onnx__TensorProto *find_const(const importer_t *im, const char *name) {
  if (!name || !*name) return NULL;
  for (size_t i = 0; i < im->g->n_initializer; i++)
    if (strcmp(str(im->g->initializer[i]->name), name) == 0) return im->g->initializer[i];
  for (size_t i = 0; i < im->g->n_node; i++) {
    const Onnx__NodeProto *n = im->g->node[i];
    if (im->consts[i] && n->n_output > 0 && strcmp(str(n->output[0]), name) == 0)
      return im->consts[i];
  }
  return NULL;
}

static size_t tensor_numel(const Onnx__TensorProto *t) {
  size_t n = 1;
  for (size_t d = 0; d < t->n_dims; d++) {
    if (t->dims[d] < 0 || t->dims[d] > (1 << 30)) return SIZE_MAX;
    n *= (size_t)t->dims[d];
    if (n > ((size_t)1 << 31)) return SIZE_MAX;
  }
  return n;
}

/* The values a float or int64 tensor holds (raw or typed); SIZE_MAX for raw bytes that
   are no whole number of values, 0 for another type. */
static size_t tensor_count(const Onnx__TensorProto *t) {
  size_t size = t->data_type == ONNX_FLOAT ? 4 : t->data_type == ONNX_INT64 ? 8 : 0;
  if (!size) return 0;
  if (t->has_raw_data) return t->raw_data.len % size ? SIZE_MAX : t->raw_data.len / size;
  return size == 4 ? t->n_float_data : t->n_int64_data;
}

/* Element i of a float or int64 tensor as a double (the caller checked i against
   tensor_count). */
static double tensor_at(const Onnx__TensorProto *t, size_t i) {
  if (t->data_type == ONNX_FLOAT) {
    float f;
    if (!t->has_raw_data) return t->float_data[i];
    memcpy(&f, t->raw_data.data + 4 * i, 4);
    return f;
  }
  int64_t v;
  if (!t->has_raw_data) return (double)t->int64_data[i];
  memcpy(&v, t->raw_data.data + 8 * i, 8);
  return (double)v;
}

/* A scalar (or one-element) float or int64 constant input k of n; 0 when absent (the
   input is missing or named ""), -1 when present but not such a constant. */
static int const_scalar(const importer_t *im, const Onnx__NodeProto *n, size_t k, double *v) {
  if (k >= n->n_input || !*str(n->input[k])) return 0;
  const Onnx__TensorProto *t = find_const(im, n->input[k]);
  if (!t || tensor_numel(t) != 1 || tensor_count(t) != 1) return -1;
  *v = tensor_at(t, 0);
  return 1;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (strcmp(str(n->attribute[i]->name), name) == 0) return n->attribute[i];
  return NULL;
}

/* Every attribute of n must be one of the names in `known` (space separated). */
static nn_status_t check_attrs(const importer_t *im, const Onnx__NodeProto *n,
                               const char *known) {
  for (size_t i = 0; i < n->n_attribute; i++) {
    const char *a = str(n->attribute[i]->name);
    size_t len = strlen(a);
    const char *p = known;
    int ok = 0;
    while (!ok && len && (p = strstr(p, a)) != NULL) {
      ok = (p == known || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0');
      p += len;
    }
    if (!ok)
      return node_error(im, n, NN_ERR_UNSUPPORTED, "attribute \"%s\" is not supported "
                        "(supported: %s)", a, *known ? known : "none");
  }
  return NN_OK;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
  const Onnx__AttributeProto *a = find_attr(n, name);
  return a && a->has_i ? a->i : dflt;
}

static float attr_float(const Onnx__NodeProto *n, const char *name, float dflt) {
  const Onnx__AttributeProto *a = find_attr(n, name);
  return a && a->has_f ? a->f : dflt;
}

/* An ints attribute of exactly `count` values into out (dflt each when absent);
   0 when present with another count or a value outside [lo, 4096]. */
static int attr_ints(const Onnx__NodeProto *n, const char *name, size_t count, int dflt,
                     int lo, int *out) {
  const Onnx__AttributeProto *a = find_attr(n, name);
  for (size_t i = 0; i < count; i++) out[i] = dflt;
  if (!a) return 1;
  if (a->n_ints != count) return 0;
  for (size_t i = 0; i < count; i++) {
    if (a->ints[i] < lo || a->ints[i] > 4096) return 0;
    out[i] = (int)a->ints[i];
  }
  return 1;
}

/* auto_pad NOTSET (or absent) only: explicit pads are what exporters write. */
static nn_status_t check_auto_pad(const importer_t *im, const Onnx__NodeProto *n) {
  const Onnx__AttributeProto *a = find_attr(n, "auto_pad");
  if (a && a->has_s && !(a->s.len == 6 && memcmp(a->s.data, "NOTSET", 6) == 0))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "auto_pad \"%.*s\" is not supported "
                      "(NOTSET with explicit pads is)", (int)(a->s.len > 32 ? 32 : a->s.len),
                      (const char *)a->s.data);
  return NN_OK;
}

/* Input k of n as a value of the graph (not a constant); padded: it may be a Pad's. */
static nn_status_t input_value_padded(importer_t *im, const Onnx__NodeProto *n, size_t k,
                                      value_t *v, int padded) {
  if (k >= n->n_input || !*str(n->input[k]))
    return node_error(im, n, NN_ERR_FORMAT, "input %zu is missing", k);
  const value_t *found = find_value(im, n->input[k]);
  if (!found) {
    if (find_const(im, n->input[k]))
      return node_error(im, n, NN_ERR_UNSUPPORTED, "input \"%s\" is a constant; nn "
                        "supports this op on computed values only", n->input[k]);
    return node_error(im, n, NN_ERR_FORMAT, "input \"%s\" is computed by no earlier "
                      "node (a node out of order, or an output nn does not compute)",
                      n->input[k]);
  }
  if (found->pad && !padded)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "input \"%s\" comes from a Pad; nn pads "
                      "only into a Conv or an AveragePool", n->input[k]);
  *v = *found;
  return NN_OK;
}

static nn_status_t input_value(importer_t *im, const Onnx__NodeProto *n, size_t k,
                               value_t *v) {
  return input_value_padded(im, n, k, v, 0);
}

/* The node's first output names `v` (after a layer or an alias). */
static nn_status_t set_output(importer_t *im, const Onnx__NodeProto *n, value_t v) {
  if (n->n_output < 1 || !*str(n->output[0]))
    return node_error(im, n, NN_ERR_FORMAT, "no output");
  return add_value(im, n->output[0], v);
}

/* The value of the layer just appended (index idx), or the builder's error. */
static nn_status_t layer_output(importer_t *im, const Onnx__NodeProto *n, int idx,
                                int rank) {
  if (idx == NN_LAYER_ERROR) return node_error(im, n, im->m->status,
                                               "%s", nn_last_error());
  const nn_layer_t *l = &im->m->layers[idx];
  value_t v = {NULL, idx, rank, l->c, l->h, l->w, 0};
  return set_output(im, n, v);
}

/* ---- weights ---- */

/* A float initializer input k of n with the given dims (ndim 0: any one-element);
   NULL with the error set otherwise. */
static const Onnx__TensorProto *weight(importer_t *im, const Onnx__NodeProto *n, size_t k,
                                       int ndim, const int *dims, nn_status_t *s) {
  const char *name = k < n->n_input ? str(n->input[k]) : "";
  const Onnx__TensorProto *t = find_const(im, name);
  if (!t || t->data_type != ONNX_FLOAT) {
    *s = node_error(im, n, NN_ERR_UNSUPPORTED, "input %zu (\"%s\") must be a float "
                    "initializer (trained weights are constants of the graph)", k, name);
    return NULL;
  }
  int ok = (int)t->n_dims == ndim;
  for (int d = 0; ok && d < ndim; d++) ok = t->dims[d] == dims[d];
  size_t want = 1;
  for (int d = 0; d < ndim; d++) want *= (size_t)dims[d];
  if (!ok || tensor_numel(t) != want || tensor_count(t) != want) {
    *s = node_error(im, n, NN_ERR_FORMAT, "initializer \"%s\" has %zu dims and %zu values, "
                    "expected %d dims and %zu values", name, t->n_dims, tensor_count(t), ndim,
                    want);
    return NULL;
  }
  *s = NN_OK;
  return t;
}

/* Slice `slice` of the model takes its values from t (and its name). */
static nn_status_t load_slice(importer_t *im, const Onnx__NodeProto *n, int slice,
                              const Onnx__TensorProto *t, int transpose) {
  nn_slice_t *sl = &im->m->slices[slice];
  const char *name = str(t->name);
  if (strlen(name) >= sizeof sl->name)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "initializer name \"%.40s...\" is longer "
                      "than nn's %zu characters", name, sizeof sl->name - 1);
  for (int i = 0; i < im->num_loads; i++)
    if (im->loads[i].t == t)
      return node_error(im, n, NN_ERR_UNSUPPORTED, "initializer \"%s\" is used by two "
                        "layers; shared weights are not supported", name);
  snprintf(sl->name, sizeof sl->name, "%s", name);
  if (im->num_loads == im->cap_loads) {
    int cap = im->cap_loads ? 2 * im->cap_loads : 64;
    load_t *p = realloc(im->loads, (size_t)cap * sizeof *p);
    if (!p) return file_error(im, NN_ERR_NO_MEMORY, "out of memory");
    im->loads = p;
    im->cap_loads = cap;
  }
  im->loads[im->num_loads++] = (load_t){slice, t, transpose};
  return NN_OK;
}

/* A layer's name: its weight's name without ".weight" (PyTorch's module path), else
   the node's name, else its output's. */
static void layer_name(const Onnx__NodeProto *n, const char *weight_name, char out[96]) {
  const char *w = str(weight_name);
  size_t len = strlen(w);
  if (len > 7 && strcmp(w + len - 7, ".weight") == 0 && len - 7 < 96) {
    snprintf(out, 96, "%.*s", (int)(len - 7), w);
    return;
  }
  snprintf(out, 96, "%s", n->name && *n->name ? n->name : (n->n_output ? str(n->output[0]) : "?"));
}

/* ---- the ops ---- */

static nn_status_t need_rank(const importer_t *im, const Onnx__NodeProto *n,
                             const value_t *v, int rank) {
  if (v->rank == rank) return NN_OK;
  return node_error(im, n, NN_ERR_UNSUPPORTED, "input \"%s\" has rank %d; this op takes "
                    "rank %d here ([N, C, H, W] images or [N, features])", v->name,
                    v->rank, rank);
}

static nn_status_t op_conv(importer_t *im, const Onnx__NodeProto *n) {
  nn_status_t s = check_attrs(im, n, "auto_pad dilations group kernel_shape pads strides");
  value_t x;
  if (s != NN_OK || (s = check_auto_pad(im, n)) != NN_OK ||
      (s = input_value_padded(im, n, 0, &x, 1)) != NN_OK || (s = need_rank(im, n, &x, 4)) != NN_OK)
    return s;
  int group = (int)attr_int(n, "group", 1), dil[2], st[2], pads[4], ks[2];
  if (!attr_ints(n, "dilations", 2, 1, 1, dil) || !attr_ints(n, "strides", 2, 1, 1, st) ||
      !attr_ints(n, "pads", 4, 0, 0, pads) || !attr_ints(n, "kernel_shape", 2, 0, 1, ks) ||
      group < 1 || group > x.c || x.c % group)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "2-D convolutions only, with 2 dilations "
                      "and strides >= 1, 4 pads >= 0, and a group dividing the %d input "
                      "channels", x.c);
  for (int k = 0; k < 4; k++) pads[k] += x.pad;
  if (pads[0] != pads[2] || pads[1] != pads[3])
    return node_error(im, n, NN_ERR_UNSUPPORTED, "asymmetric pads [%d, %d, %d, %d]; nn pads "
                      "both sides of an axis alike", pads[0], pads[1], pads[2], pads[3]);
  const Onnx__TensorProto *wt = find_const(im, n->n_input > 1 ? n->input[1] : NULL);
  if (!wt || wt->n_dims != 4 || wt->dims[0] < 1 || wt->dims[0] > (1 << 20) ||
      wt->dims[1] != x.c / group || wt->dims[2] < 1 || wt->dims[2] > 4096 ||
      wt->dims[3] < 1 || wt->dims[3] > 4096)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "the weight must be an initializer "
                      "[C_out, %d, kH, kW]", x.c / group);
  int co = (int)wt->dims[0], kh = (int)wt->dims[2], kw = (int)wt->dims[3];
  if ((ks[0] && ks[0] != kh) || (ks[1] && ks[1] != kw))
    return node_error(im, n, NN_ERR_FORMAT, "kernel_shape [%d, %d] differs from the "
                      "weight's [%d, %d]", ks[0], ks[1], kh, kw);
  int wdims[4] = {co, x.c / group, kh, kw};
  if (!weight(im, n, 1, 4, wdims, &s)) return s;
  int bias = n->n_input > 2 && *str(n->input[2]);
  const Onnx__TensorProto *bt = bias ? weight(im, n, 2, 1, &co, &s) : NULL;
  if (bias && !bt) return s;
  char name[96];
  layer_name(n, wt->name, name);
  int first = im->m->num_slices, idx;
  if (group == 1 && dil[0] == 1 && dil[1] == 1 && st[0] == st[1] && pads[0] == pads[1] &&
      kh == kw)
    idx = nn_model_add_conv2d(im->m, name, x.layer, co, kh, st[0], pads[0], bias);
  else
    idx = nn_model_add_gconv(im->m, name, x.layer, co, kh, kw, st, pads, dil, group, bias);
  if ((s = layer_output(im, n, idx, 4)) != NN_OK) return s;
  if ((s = load_slice(im, n, first, wt, 0)) != NN_OK) return s;
  return bias ? load_slice(im, n, first + 1, bt, 0) : NN_OK;
}

static nn_status_t op_batchnorm(importer_t *im, const Onnx__NodeProto *n) {
  nn_status_t s = check_attrs(im, n, "epsilon momentum training_mode spatial");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK) return s;
  if (attr_int(n, "spatial", 1) != 1)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "spatial=0 is not supported");
  const Onnx__TensorProto *t[4];
  for (int k = 0; k < 4; k++)
    if (!(t[k] = weight(im, n, (size_t)k + 1, 1, &x.c, &s))) return s;
  char name[96];
  layer_name(n, t[0]->name, name);
  int first = im->m->num_slices;
  int idx = nn_model_add_batchnorm2d(im->m, name, x.layer);
  if ((s = layer_output(im, n, idx, x.rank)) != NN_OK) return s;
  /* ONNX's momentum weighs the running value, PyTorch's (nn's) the batch's. */
  float eps = attr_float(n, "epsilon", 1e-5f), mom = attr_float(n, "momentum", 0.9f);
  if (!(eps > 0.0f && eps < 1.0f) || !(mom >= 0.0f && mom <= 1.0f))
    return node_error(im, n, NN_ERR_FORMAT, "epsilon %g or momentum %g out of range",
                      (double)eps, (double)mom);
  im->m->layers[idx].eps = eps;
  im->m->layers[idx].momentum = 1.0f - mom;
  for (int k = 0; k < 4 && s == NN_OK; k++) s = load_slice(im, n, first + k, t[k], 0);
  return s;
}

/* Gemm (transB 0 or 1) and MatMul: a linear layer on a rank-2 value; bias from C, or
   from the Add that follows a MatMul (folded: marked to skip). */
static nn_status_t op_linear(importer_t *im, const Onnx__NodeProto *n, size_t node_idx) {
  int gemm = strcmp(n->op_type, "Gemm") == 0;
  nn_status_t s = check_attrs(im, n, gemm ? "alpha beta transA transB" : "");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK ||
      (s = need_rank(im, n, &x, 2)) != NN_OK)
    return s;
  if (gemm && (attr_int(n, "transA", 0) != 0 || attr_float(n, "alpha", 1.0f) != 1.0f ||
               attr_float(n, "beta", 1.0f) != 1.0f))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "transA=1, alpha != 1 or beta != 1 is not "
                      "supported (PyTorch's Linear exports transB=1 only)");
  int trans_b = gemm ? (int)attr_int(n, "transB", 0) : 0;
  const Onnx__TensorProto *wt = find_const(im, n->n_input > 1 ? n->input[1] : NULL);
  if (!wt || wt->n_dims != 2 || wt->dims[trans_b ? 1 : 0] != x.c || wt->dims[0] < 1 ||
      wt->dims[1] < 1 || wt->dims[trans_b ? 0 : 1] > (1 << 24))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "the weight must be an initializer of "
                      "%s with %d inputs", trans_b ? "[out, in]" : "[in, out]", x.c);
  int out = (int)wt->dims[trans_b ? 0 : 1];
  int wdims[2] = {trans_b ? out : x.c, trans_b ? x.c : out};
  if (!weight(im, n, 1, 2, wdims, &s)) return s;
  const Onnx__NodeProto *bias_node = n;
  size_t bias_input = 2;
  if (!gemm && n->n_output == 1 && node_idx + 1 < im->g->n_node) {
    /* A MatMul's bias is the Add right after it, of it and a constant [out]. */
    const Onnx__NodeProto *a = im->g->node[node_idx + 1];
    if (strcmp(str(a->op_type), "Add") == 0 && a->n_input == 2) {
      size_t k = strcmp(str(a->input[0]), str(n->output[0])) == 0 ? 1 : 0;
      const Onnx__TensorProto *c = find_const(im, a->input[k]);
      if (strcmp(str(a->input[1 - k]), str(n->output[0])) == 0 && c && tensor_numel(c) == (size_t)out) {
        bias_node = a;
        bias_input = k;
        im->skip[node_idx + 1] = 1;
      }
    }
  }
  int bias = bias_input < bias_node->n_input && *str(bias_node->input[bias_input]);
  const Onnx__TensorProto *bt = NULL;
  if (bias) {
    bt = find_const(im, bias_node->input[bias_input]);
    /* C of [out] or [1, out] (broadcast over the batch) */
    int bd[2] = {1, out};
    if (bt && bt->n_dims == 2) bt = weight(im, bias_node, bias_input, 2, bd, &s);
    else bt = weight(im, bias_node, bias_input, 1, &out, &s);
    if (!bt) return s;
  }
  char name[96];
  layer_name(n, wt->name, name);
  int first = im->m->num_slices;
  int idx = nn_model_add_linear(im->m, name, x.layer, out, bias);
  if ((s = layer_output(im, bias_node, idx, 2)) != NN_OK) return s;
  if (bias_node != n && (s = set_output(im, n, im->vals[im->num_vals - 1])) != NN_OK)
    return s;
  if ((s = load_slice(im, n, first, wt, !trans_b)) != NN_OK) return s;
  return bias ? load_slice(im, n, first + 1, bt, 0) : NN_OK;
}

static nn_status_t op_pool(importer_t *im, const Onnx__NodeProto *n, int max) {
  nn_status_t s = check_attrs(im, n, max ? "auto_pad ceil_mode dilations kernel_shape pads "
                                           "storage_order strides"
                                         : "auto_pad ceil_mode count_include_pad "
                                           "kernel_shape pads strides");
  value_t x;
  if (s != NN_OK || (s = check_auto_pad(im, n)) != NN_OK ||
      (s = input_value_padded(im, n, 0, &x, !max)) != NN_OK ||
      (s = need_rank(im, n, &x, 4)) != NN_OK)
    return s;
  int ks[2], st[2], pads[4], dil[2];
  if (!attr_ints(n, "kernel_shape", 2, 0, 1, ks) || !ks[0] ||
      !attr_ints(n, "strides", 2, 1, 1, st) || !attr_ints(n, "pads", 4, 0, 0, pads) ||
      !attr_ints(n, "dilations", 2, 1, 1, dil))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "2-D pooling only, with a kernel_shape, "
                      "2 strides and 4 pads");
  if (ks[0] != ks[1] || st[0] != st[1] || pads[0] != pads[1] || pads[0] != pads[2] ||
      pads[0] != pads[3] || dil[0] != 1 || dil[1] != 1 ||
      (n->n_output > 1 && *str(n->output[1])))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "nn pools with square kernels, equal "
                      "strides and pads on every side, no dilation and no Indices output");
  if (x.pad && (pads[0] || pads[1] || pads[2] || pads[3]))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "pads on a Pad's output");
  if (x.pad) {
    /* PyTorch's avg_pool2d(padding=p) with count_include_pad: zeros that count */
    for (int k = 0; k < 4; k++) pads[k] = x.pad;
  } else if (!max && pads[0] > 0 && attr_int(n, "count_include_pad", 0) == 0)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "count_include_pad=0 with pads: nn's "
                      "average counts the padded cells (PyTorch's default)");
  int span = x.h + 2 * pads[0] - ks[0];
  if (attr_int(n, "ceil_mode", 0) && (span % st[0] || (x.w + 2 * pads[0] - ks[0]) % st[0]))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "ceil_mode=1 where it changes the output "
                      "size of %dx%d input", x.h, x.w);
  char name[96];
  layer_name(n, NULL, name);
  int idx = max ? nn_model_add_maxpool2d(im->m, name, x.layer, ks[0], st[0], pads[0])
                : nn_model_add_avgpool2d(im->m, name, x.layer, ks[0], st[0], pads[0]);
  return layer_output(im, n, idx, 4);
}

/* Relu, LeakyRelu, Sigmoid, Tanh, Clip. */
static nn_status_t op_activation(importer_t *im, const Onnx__NodeProto *n, int act) {
  nn_status_t s = check_attrs(im, n, act == NN_ACT_LEAKY_RELU ? "alpha" : "");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK) return s;
  float alpha = attr_float(n, "alpha", 0.01f), lo = -FLT_MAX, hi = FLT_MAX;
  if (act == NN_ACT_CLIP) {
    double v;
    int k;
    if ((k = const_scalar(im, n, 1, &v)) < 0) goto bad_clip;
    if (k) lo = (float)v;
    if ((k = const_scalar(im, n, 2, &v)) < 0) goto bad_clip;
    if (k) hi = (float)v;
    if (!(lo <= hi)) goto bad_clip;
  }
  char name[96];
  layer_name(n, NULL, name);
  int idx;
  if (act < 0 || (act == NN_ACT_CLIP && lo == 0.0f && hi == FLT_MAX))
    idx = nn_model_add_relu(im->m, name, x.layer);
  else
    idx = nn_model_add_act(im->m, name, x.layer, act, alpha, lo, hi);
  return layer_output(im, n, idx, x.rank);
bad_clip:
  return node_error(im, n, NN_ERR_UNSUPPORTED, "min and max must be scalar constants with "
                    "min <= max");
}

/* Add, Mul, Concat of computed values; Concat of more than two chains. */
static nn_status_t op_binary(importer_t *im, const Onnx__NodeProto *n, nn_layer_kind_t kind) {
  nn_status_t s = check_attrs(im, n, kind == NN_LAYER_CONCAT ? "axis" : "");
  value_t a, b;
  if (s != NN_OK || (s = input_value(im, n, 0, &a)) != NN_OK) return s;
  if (n->n_input < 2 || (kind != NN_LAYER_CONCAT && n->n_input != 2))
    return node_error(im, n, NN_ERR_FORMAT, "%zu inputs", n->n_input);
  int64_t axis = attr_int(n, "axis", 1);
  if (kind == NN_LAYER_CONCAT && axis != 1 && axis != 1 - a.rank)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "axis %lld: nn concatenates channels "
                      "(axis 1)", (long long)axis);
  char name[96];
  layer_name(n, NULL, name);
  for (size_t k = 1; k < n->n_input; k++) {
    if ((s = input_value(im, n, k, &b)) != NN_OK) return s;
    if (kind == NN_LAYER_MUL && a.h * a.w == 1 && b.h * b.w > 1) {
      value_t t = a;
      a = b;
      b = t;
    }
    if (b.layer == NN_MODEL_INPUT) {
      value_t t = a;   /* nn's second input is a layer: for Add and Mul the order is free */
      if (kind == NN_LAYER_CONCAT || t.layer == NN_MODEL_INPUT)
        return node_error(im, n, NN_ERR_UNSUPPORTED, "the model input as a later input");
      a = b;
      b = t;
    }
    if (a.rank != b.rank)
      return node_error(im, n, NN_ERR_UNSUPPORTED, "inputs of rank %d and %d", a.rank, b.rank);
    if (kind != NN_LAYER_CONCAT && a.c != b.c)
      return node_error(im, n, NN_ERR_UNSUPPORTED, "inputs of %d and %d channels; nn "
                        "broadcasts one value per channel only (Mul)", a.c, b.c);
    int idx = kind == NN_LAYER_ADD   ? nn_model_add_add(im->m, name, a.layer, b.layer)
              : kind == NN_LAYER_MUL ? nn_model_add_mul(im->m, name, a.layer, b.layer)
                                     : nn_model_add_concat(im->m, name, a.layer, b.layer);
    if (idx == NN_LAYER_ERROR)
      return node_error(im, n, im->m->status, "%s", nn_last_error());
    const nn_layer_t *l = &im->m->layers[idx];
    a = (value_t){NULL, idx, a.rank, l->c, l->h, l->w, 0};
  }
  return set_output(im, n, a);
}

/* Flatten (axis 1) and Reshape to [N, C*H*W] given as a constant [0 or -1 or N, -1 or
   C*H*W]; a flat value is aliased. */
static nn_status_t op_flatten(importer_t *im, const Onnx__NodeProto *n, int reshape) {
  nn_status_t s = check_attrs(im, n, reshape ? "allowzero" : "axis");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK) return s;
  size_t features = (size_t)x.c * x.h * x.w;
  if (!reshape && attr_int(n, "axis", 1) != 1)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "axis %lld: nn flattens from axis 1",
                      (long long)attr_int(n, "axis", 1));
  if (reshape) {
    const Onnx__TensorProto *t = find_const(im, n->n_input > 1 ? n->input[1] : NULL);
    int ok = t && t->data_type == ONNX_INT64 && tensor_numel(t) == 2 && tensor_count(t) == 2;
    double d0 = ok ? tensor_at(t, 0) : 0, d1 = ok ? tensor_at(t, 1) : 0;
    if (!ok || !(d0 >= -1) || !(d1 == -1 || d1 == (double)features) || (d0 == -1 && d1 == -1))
      return node_error(im, n, NN_ERR_UNSUPPORTED, "nn reshapes to 2-D [N, %zu] only, "
                        "with a constant shape (a shape computed in the graph: export "
                        "torch.flatten(x, 1) instead of x.view(x.size(0), -1))", features);
  }
  if (x.rank == 2) return set_output(im, n, x);
  char name[96];
  layer_name(n, NULL, name);
  return layer_output(im, n, nn_model_add_flatten(im->m, name, x.layer), 2);
}

static nn_status_t op_dropout(importer_t *im, const Onnx__NodeProto *n) {
  nn_status_t s = check_attrs(im, n, "ratio seed is_test");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK) return s;
  double p = attr_float(n, "ratio", 0.5f);
  if (const_scalar(im, n, 1, &p) < 0 || !(p >= 0.0 && p < 1.0))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "the ratio must be a constant in [0, 1)");
  char name[96];
  layer_name(n, NULL, name);
  return layer_output(im, n, nn_model_add_dropout(im->m, name, x.layer, (float)p), x.rank);
}

static nn_status_t op_alias(importer_t *im, const Onnx__NodeProto *n, int softmax) {
  nn_status_t s = check_attrs(im, n, softmax ? "axis" : "");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK) return s;
  if (softmax && (n->n_output < 1 || strcmp(str(n->output[0]), im->graph_output) != 0 ||
                  x.rank != 2))
    return node_error(im, n, NN_ERR_UNSUPPORTED, "Softmax and LogSoftmax only as the last "
                      "node of a classifier, over [N, classes] (nn trains on the logits "
                      "with a softmax cross-entropy)");
  return set_output(im, n, x);
}

/* Pad with zeros around H and W, equal on every side: left on the value for the Conv or
   AveragePool that reads it (none at all: an alias). */
static nn_status_t op_pad(importer_t *im, const Onnx__NodeProto *n) {
  nn_status_t s = check_attrs(im, n, "mode");
  value_t x;
  if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK ||
      (s = need_rank(im, n, &x, 4)) != NN_OK)
    return s;
  const Onnx__AttributeProto *mode = find_attr(n, "mode");
  const Onnx__TensorProto *t = find_const(im, n->n_input > 1 ? n->input[1] : NULL);
  double zero = 0;
  int ok = (!mode || (mode->has_s && mode->s.len == 8 && !memcmp(mode->s.data, "constant", 8))) &&
           t && t->data_type == ONNX_INT64 && tensor_numel(t) == 8 && tensor_count(t) == 8 &&
           const_scalar(im, n, 2, &zero) >= 0 && zero == 0.0;
  double p = ok ? tensor_at(t, 2) : 0;
  for (int k = 0; ok && k < 8; k++)
    ok = tensor_at(t, k) == ((k % 4) < 2 ? 0.0 : p);
  if (!ok || p < 0 || p > 4096)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "nn pads with zeros, equally around height "
                      "and width, into a Conv or an AveragePool only");
  x.pad = (int)p;
  return set_output(im, n, x);
}

static nn_status_t op_constant(importer_t *im, const Onnx__NodeProto *n, size_t idx) {
  nn_status_t s = check_attrs(im, n, "value");
  if (s != NN_OK) return s;
  const Onnx__AttributeProto *a = find_attr(n, "value");
  if (!a || !a->t)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "a Constant without a tensor \"value\"");
  im->consts[idx] = a->t;
  return NN_OK;
}

/* Cast to float or int64 of a constant (PyTorch's relu6 casts its bounds) is that
   constant, whose values are read as numbers; of a float value, the value itself. */
static nn_status_t op_cast(importer_t *im, const Onnx__NodeProto *n, size_t idx) {
  nn_status_t s = check_attrs(im, n, "to saturate");
  if (s != NN_OK) return s;
  int64_t to = attr_int(n, "to", 0);
  const Onnx__TensorProto *t = find_const(im, n->n_input ? n->input[0] : NULL);
  if (t && (to == ONNX_FLOAT || to == ONNX_INT64) &&
      (t->data_type == ONNX_FLOAT || t->data_type == ONNX_INT64)) {
    im->consts[idx] = t;
    return NN_OK;
  }
  value_t x;
  if (!t && to == ONNX_FLOAT && (s = input_value(im, n, 0, &x)) == NN_OK)
    return set_output(im, n, x);
  return node_error(im, n, NN_ERR_UNSUPPORTED, "a Cast to float of a float value, or to "
                    "float or int64 of a float or int64 constant, only");
}

static nn_status_t import_node(importer_t *im, size_t idx) {
  const Onnx__NodeProto *n = im->g->node[idx];
  const char *op = str(n->op_type), *dom = str(n->domain);
  if (*dom && strcmp(dom, "ai.onnx") != 0)
    return node_error(im, n, NN_ERR_UNSUPPORTED, "operator domain \"%s\" is not supported "
                      "(the default ONNX domain is)", dom);
  if (!strcmp(op, "Conv")) return op_conv(im, n);
  if (!strcmp(op, "BatchNormalization")) return op_batchnorm(im, n);
  if (!strcmp(op, "Gemm") || !strcmp(op, "MatMul")) return op_linear(im, n, idx);
  if (!strcmp(op, "MaxPool")) return op_pool(im, n, 1);
  if (!strcmp(op, "AveragePool")) return op_pool(im, n, 0);
  if (!strcmp(op, "Relu")) return op_activation(im, n, -1);
  if (!strcmp(op, "LeakyRelu")) return op_activation(im, n, NN_ACT_LEAKY_RELU);
  if (!strcmp(op, "Sigmoid")) return op_activation(im, n, NN_ACT_SIGMOID);
  if (!strcmp(op, "Tanh")) return op_activation(im, n, NN_ACT_TANH);
  if (!strcmp(op, "Clip")) return op_activation(im, n, NN_ACT_CLIP);
  if (!strcmp(op, "Add")) return op_binary(im, n, NN_LAYER_ADD);
  if (!strcmp(op, "Mul")) return op_binary(im, n, NN_LAYER_MUL);
  if (!strcmp(op, "Concat")) return op_binary(im, n, NN_LAYER_CONCAT);
  if (!strcmp(op, "Flatten")) return op_flatten(im, n, 0);
  if (!strcmp(op, "Reshape")) return op_flatten(im, n, 1);
  if (!strcmp(op, "Dropout")) return op_dropout(im, n);
  if (!strcmp(op, "Identity")) return op_alias(im, n, 0);
  if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) return op_alias(im, n, 1);
  if (!strcmp(op, "Constant")) return op_constant(im, n, idx);
  if (!strcmp(op, "Pad")) return op_pad(im, n);
  if (!strcmp(op, "Cast")) return op_cast(im, n, idx);
  if (!strcmp(op, "GlobalAveragePool")) {
    value_t x;
    nn_status_t s = check_attrs(im, n, "");
    if (s != NN_OK || (s = input_value(im, n, 0, &x)) != NN_OK ||
        (s = need_rank(im, n, &x, 4)) != NN_OK)
      return s;
    char name[96];
    layer_name(n, NULL, name);
    return layer_output(im, n, nn_model_add_global_avgpool(im->m, name, x.layer), 4);
  }
  return node_error(im, n, NN_ERR_UNSUPPORTED, "op \"%s\" is not supported (supported: %s)",
                    op, supported_ops);
}

/* ---- the graph's input and output ---- */

/* The one graph input that is not an initializer: float [N, C, H, W], C, H, W fixed. */
static nn_status_t find_input(importer_t *im, int *c, int *h, int *w) {
  const Onnx__ValueInfoProto *in = NULL;
  for (size_t i = 0; i < im->g->n_input; i++) {
    const Onnx__ValueInfoProto *v = im->g->input[i];
    int is_init = 0;
    for (size_t j = 0; j < im->g->n_initializer && !is_init; j++)
      is_init = strcmp(str(v->name), str(im->g->initializer[j]->name)) == 0;
    if (is_init) continue;
    if (in)
      return file_error(im, NN_ERR_UNSUPPORTED, "graph inputs \"%s\" and \"%s\": nn models "
                        "take one input", str(in->name), str(v->name));
    in = v;
  }
  if (!in) return file_error(im, NN_ERR_FORMAT, "the graph has no input");
  const Onnx__TypeProto *tp = in->type;
  const Onnx__TypeProto__Tensor *tt =
      tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? tp->tensor_type : NULL;
  if (!tt || tt->elem_type != ONNX_FLOAT || !tt->shape)
    return file_error(im, NN_ERR_UNSUPPORTED, "input \"%s\" is not a float tensor of known "
                      "shape", str(in->name));
  const Onnx__TensorShapeProto *sh = tt->shape;
  if (sh->n_dim != 4)
    return file_error(im, NN_ERR_UNSUPPORTED, "input \"%s\" has rank %zu; nn takes images "
                      "[N, C, H, W] (rank 4)", str(in->name), sh->n_dim);
  int d[3];
  for (int k = 0; k < 3; k++) {
    const Onnx__TensorShapeProto__Dimension *dim = sh->dim[k + 1];
    if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
        dim->dim_value < 1 || dim->dim_value > 65536)
      return file_error(im, NN_ERR_UNSUPPORTED, "input \"%s\": dimension %d is not a fixed "
                        "size in [1, 65536] (export with a fixed C, H, W)", str(in->name),
                        k + 1);
    d[k] = (int)dim->dim_value;
  }
  *c = d[0];
  *h = d[1];
  *w = d[2];
  value_t v = {NULL, NN_MODEL_INPUT, 4, d[0], d[1], d[2], 0};
  return add_value(im, str(in->name), v);
}

/* The graph's one output: the last layer, [N, classes]. */
static nn_status_t check_output(importer_t *im, int *classes) {
  const value_t *v = find_value(im, im->graph_output);
  if (!v || v->layer == NN_MODEL_INPUT)
    return file_error(im, NN_ERR_FORMAT, "the graph output \"%s\" is computed by no node",
                      im->graph_output);
  if (v->layer != im->m->num_layers - 1)
    return file_error(im, NN_ERR_UNSUPPORTED, "the graph output \"%s\" is not computed by "
                      "the last layer (%s); nn trains graphs that end in their output",
                      im->graph_output, im->m->layers[im->m->num_layers - 1].name);
  if (v->rank != 2)
    return file_error(im, NN_ERR_UNSUPPORTED, "the graph output \"%s\" has rank %d; nn "
                      "trains classifiers with logits [N, classes]", im->graph_output, v->rank);
  *classes = v->c;
  return NN_OK;
}

/* ---- the weights into the allocated model ---- */

static void copy_weights(importer_t *im) {
  nn_model_t *m = im->m;
  for (int i = 0; i < im->num_loads; i++) {
    const load_t *ld = &im->loads[i];
    const nn_slice_t *sl = &m->slices[ld->slice];
    float *dst = sl->kind == NN_SLICE_PARAM ? m->params + sl->offset : m->buffers + sl->offset;
    size_t count = sl->numel;
    /* weight() checked the dims and count; a transposed one is 2-D [in][out]. */
    size_t rows = ld->transpose ? (size_t)ld->t->dims[0] : 1, cols = count / rows;
    for (size_t k = 0; k < count; k++) {
      float v = (float)tensor_at(ld->t, k);
      if (ld->transpose) dst[(k % cols) * rows + k / cols] = v;
      else dst[k] = v;
    }
  }
}

static nn_status_t check_config(importer_t *im, const nn_model_config_t *cfg, int c, int h,
                                int w, int classes) {
  if ((cfg->in_channels && cfg->in_channels != c) || (cfg->in_height && cfg->in_height != h) ||
      (cfg->in_width && cfg->in_width != w))
    return file_error(im, NN_ERR_ARG, "the graph takes %dx%dx%d inputs, the configuration "
                      "asks for %dx%dx%d (leave it 0 to take the graph's)", c, h, w,
                      cfg->in_channels, cfg->in_height, cfg->in_width);
  if (cfg->num_classes && cfg->num_classes != classes)
    return file_error(im, NN_ERR_ARG, "the graph has %d classes, the configuration asks "
                      "for %d (leave it 0 to take the graph's)", classes, cfg->num_classes);
  return NN_OK;
}

static nn_status_t import(importer_t *im, const nn_model_config_t *cfg, nn_model_t **out) {
  nn_status_t s;
  int c = 0, h = 0, w = 0, classes = 0;
  if ((s = read_model(im)) != NN_OK || (s = check_opset(im)) != NN_OK) return s;
  if (im->g->n_output != 1)
    return file_error(im, NN_ERR_UNSUPPORTED, "%zu graph outputs; nn trains graphs with "
                      "one output (the logits)", im->g->n_output);
  im->graph_output = str(im->g->output[0]->name);
  im->consts = calloc(im->g->n_node, sizeof *im->consts);
  im->skip = calloc(im->g->n_node, 1);
  if (!im->consts || !im->skip) return file_error(im, NN_ERR_NO_MEMORY, "out of memory");
  if ((s = find_input(im, &c, &h, &w)) != NN_OK) return s;
  im->m = nn_model_begin("onnx", cfg, c, h, w, 1);
  if (!im->m) return NN_ERR_NO_MEMORY;
  for (size_t i = 0; i < im->g->n_node; i++)
    if (!im->skip[i] && (s = import_node(im, i)) != NN_OK) return s;
  if (im->m->num_layers == 0)
    return file_error(im, NN_ERR_UNSUPPORTED, "the graph computes nothing nn trains");
  size_t floats = (size_t)c * h * w;
  for (int i = 0; i < im->m->num_layers; i++)
    floats += nn_layer_sample_size(&im->m->layers[i]);
  if (floats > ONNX_MAX_SAMPLE_FLOATS)
    return file_error(im, NN_ERR_UNSUPPORTED, "the graph's activations take %zu floats per "
                      "sample, more than nn's limit of %zu", floats, ONNX_MAX_SAMPLE_FLOATS);
  if ((s = check_output(im, &classes)) != NN_OK ||
      (s = check_config(im, cfg, c, h, w, classes)) != NN_OK)
    return s;
  im->m->num_classes = classes;
  nn_model_t *m = im->m;
  im->m = NULL;   /* nn_model_finish frees it on failure */
  if ((s = nn_model_finish(m)) != NN_OK) return s;
  im->m = m;
  copy_weights(im);
  *out = m;
  im->m = NULL;
  return NN_OK;
}

nn_status_t nn_model_from_onnx(nn_model_t **out, const char *path,
                               const nn_model_config_t *cfg) {
  if (out) *out = NULL;
  if (!out || !path || !cfg)
    return nn_set_error(NN_ERR_ARG, "nn_model_from_onnx: NULL argument");
  if (cfg->batch < 1)
    return nn_set_error(NN_ERR_ARG, "nn_model_from_onnx(\"%s\"): batch %d, expected >= 1",
                        path, cfg->batch);
  importer_t im = {.path = path};
  nn_status_t s = import(&im, cfg, out);
  nn_model_free(im.m);
  free(im.vals);
  free(im.loads);
  free(im.consts);
  free(im.skip);
  if (im.model) onnx__model_proto__free_unpacked(im.model, NULL);
  return s;
}

#endif /* HVD_NO_PROTOBUF */
