/* nn/onnx_export.c: nn_model_save_onnx, a model as an ONNX inference graph (opset 13),
   written with protobuf-c against ONNX's own messages (proto/onnx/onnx.proto), so that
   onnxruntime, TensorRT or our serve read what train produced.

   One node per layer, in the layers' order (already topological): batch norm in its
   eval form (the running statistics are initializers), dropout left out (an alias), a
   Flatten put before a linear layer that reads a 4-D value. The parameters and running
   statistics are the initializers, under the model's tensor names (PyTorch's for the
   built-in models, the graph's for an imported one); the counters are not part of an
   inference graph. Input "input" [N, C, H, W], output "logits" [N, classes]. */
#include "nn/graph_kernels_internal.h"
#include "nn/model_internal.h"

#include <stdio.h>

#ifdef HVD_NO_PROTOBUF

nn_status_t nn_model_save_onnx_meta(const nn_model_t *m, const char *path,
                                    const nn_st_meta_t *meta, int meta_count) {
  (void)m, (void)meta, (void)meta_count;
  return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_save_onnx(\"%s\"): built without "
                      "protobuf-c (PROTOBUF=none): ONNX files cannot be written; rebuild "
                      "with PROTOBUF=system", path ? path : "(null)");
}

#else

#include "onnx/onnx.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ONNX_FLOAT 1
#define EXPORT_OPSET 13
#define EXPORT_IR_VERSION 7     /* the IR version of opset 13 */
#define MAX_ATTRS 6
#define MAX_INPUTS 5

/* One node with room for its inputs, attributes and their values. */
typedef struct {
  Onnx__NodeProto node;
  char *in[MAX_INPUTS], *out[1];
  Onnx__AttributeProto attr[MAX_ATTRS];
  Onnx__AttributeProto *attrp[MAX_ATTRS];
  int64_t ints[MAX_ATTRS][4];
  char name[112];
} enode_t;

typedef struct {
  const nn_model_t *m;
  enode_t *nodes;
  Onnx__NodeProto **nodep;
  int num_nodes;
  Onnx__TensorProto *inits;
  Onnx__TensorProto **initp;
  int64_t (*init_dims)[NN_MAX_DIMS];
  int num_inits;
  float *clip_values;       /* two per layer: a clip's min and max */
  char (*extra_names)[2][32]; /* per layer: a clip's bounds, or the Flatten before a Gemm */
  char (*names)[24];        /* each layer's output value, "x<i>" ("logits" for the last) */
  const char **value;       /* the value each layer's output is (an alias's: its input's) */
  int *rank;                /* 4 or 2, per layer */
} exporter_t;

static const char *in_value(const exporter_t *e, int in) {
  return in == NN_MODEL_INPUT ? "input" : e->value[in];
}

static int in_rank(const exporter_t *e, int in) {
  return in == NN_MODEL_INPUT ? 4 : e->rank[in];
}

static enode_t *add_node(exporter_t *e, const char *op, const char *name, const char *out) {
  enode_t *n = &e->nodes[e->num_nodes];
  e->nodep[e->num_nodes++] = &n->node;
  onnx__node_proto__init(&n->node);
  snprintf(n->name, sizeof n->name, "%s", name);
  n->node.name = n->name;
  n->node.op_type = (char *)op;
  n->out[0] = (char *)out;
  n->node.output = n->out;
  n->node.n_output = 1;
  n->node.input = n->in;
  n->node.attribute = n->attrp;
  return n;
}

static void add_input(enode_t *n, const char *name) {
  n->in[n->node.n_input++] = (char *)name;
}

static Onnx__AttributeProto *add_attr(enode_t *n, const char *name) {
  size_t k = n->node.n_attribute++;
  Onnx__AttributeProto *a = &n->attr[k];
  onnx__attribute_proto__init(a);
  n->attrp[k] = a;
  a->name = (char *)name;
  a->has_type = 1;
  return a;
}

static void attr_ints(enode_t *n, const char *name, int count, const int *v) {
  Onnx__AttributeProto *a = add_attr(n, name);
  int64_t *ints = n->ints[n->node.n_attribute - 1];
  for (int i = 0; i < count; i++) ints[i] = v[i];
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->ints = ints;
  a->n_ints = (size_t)count;
}

static void attr_int(enode_t *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = add_attr(n, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
}

static void attr_float(enode_t *n, const char *name, float v) {
  Onnx__AttributeProto *a = add_attr(n, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a->has_f = 1;
  a->f = v;
}

/* A float initializer over count floats at data. */
static const char *add_init(exporter_t *e, const char *name, int ndim, const int *shape,
                            const float *data, size_t count) {
  Onnx__TensorProto *t = &e->inits[e->num_inits];
  onnx__tensor_proto__init(t);
  int64_t *dims = e->init_dims[e->num_inits];
  for (int d = 0; d < ndim; d++) dims[d] = shape[d];
  t->name = (char *)name;
  t->dims = dims;
  t->n_dims = (size_t)ndim;
  t->has_data_type = 1;
  t->data_type = ONNX_FLOAT;
  t->has_raw_data = 1;   /* little-endian floats, as ONNX's raw_data */
  t->raw_data.len = count * sizeof(float);
  t->raw_data.data = (uint8_t *)data;
  e->initp[e->num_inits++] = t;
  return name;
}

/* The slice of layer l at params/buffers offset off as an initializer (its name). */
static const char *slice_init(exporter_t *e, size_t off, int buffer) {
  const nn_model_t *m = e->m;
  for (int i = 0; i < m->num_slices; i++) {
    const nn_slice_t *s = &m->slices[i];
    if (s->offset != off || s->kind != (buffer ? NN_SLICE_BUFFER : NN_SLICE_PARAM)) continue;
    const float *base = buffer ? m->buffers : m->params;
    return add_init(e, s->name, s->ndim, s->shape, base + s->offset, s->numel);
  }
  return NULL;
}

static void conv_attrs(enode_t *n, const nn_layer_t *l, int gconv) {
  int ks[2] = {l->kh, l->kw};
  int st[2] = {l->stride, gconv ? l->stride_w : l->stride};
  int pw = gconv ? l->pad_w : l->pad;
  int pads[4] = {l->pad, pw, l->pad, pw};
  int dil[2] = {gconv ? l->dil_h : 1, gconv ? l->dil_w : 1};
  attr_ints(n, "kernel_shape", 2, ks);
  attr_ints(n, "strides", 2, st);
  attr_ints(n, "pads", 4, pads);
  attr_ints(n, "dilations", 2, dil);
  attr_int(n, "group", gconv ? l->groups : 1);
}

static nn_status_t export_layer(exporter_t *e, int i) {
  const nn_layer_t *l = &e->m->layers[i];
  const char *x = in_value(e, l->in[0]), *out = e->names[i];
  static const char *const act_ops[] = {"LeakyRelu", "Sigmoid", "Tanh", "Clip"};
  enode_t *n;
  e->value[i] = out;
  e->rank[i] = in_rank(e, l->in[0]);
  switch (l->kind) {
  case NN_LAYER_CONV2D:
  case NN_LAYER_GCONV:
    n = add_node(e, "Conv", l->name, out);
    add_input(n, x);
    add_input(n, slice_init(e, l->w_off, 0));
    if (l->has_bias) add_input(n, slice_init(e, l->b_off, 0));
    conv_attrs(n, l, l->kind == NN_LAYER_GCONV);
    break;
  case NN_LAYER_BATCHNORM2D:
    n = add_node(e, "BatchNormalization", l->name, out);
    add_input(n, x);
    add_input(n, slice_init(e, l->w_off, 0));
    add_input(n, slice_init(e, l->b_off, 0));
    add_input(n, slice_init(e, l->rm_off, 1));
    add_input(n, slice_init(e, l->rv_off, 1));
    attr_float(n, "epsilon", l->eps);
    attr_float(n, "momentum", 1.0f - l->momentum);
    break;
  case NN_LAYER_RELU: add_input(add_node(e, "Relu", l->name, out), x); break;
  case NN_LAYER_MAXPOOL2D:
  case NN_LAYER_AVGPOOL2D: {
    int ks[2] = {l->kh, l->kw}, st[2] = {l->stride, l->stride};
    int pads[4] = {l->pad, l->pad, l->pad, l->pad};
    n = add_node(e, l->kind == NN_LAYER_MAXPOOL2D ? "MaxPool" : "AveragePool", l->name, out);
    add_input(n, x);
    attr_ints(n, "kernel_shape", 2, ks);
    attr_ints(n, "strides", 2, st);
    attr_ints(n, "pads", 4, pads);
    if (l->kind == NN_LAYER_AVGPOOL2D) attr_int(n, "count_include_pad", 1);
    break;
  }
  case NN_LAYER_GLOBAL_AVGPOOL:
    add_input(add_node(e, "GlobalAveragePool", l->name, out), x);
    break;
  case NN_LAYER_LINEAR:
    if (e->rank[i] == 4) {   /* Gemm takes [N, features] */
      char *flat = e->extra_names[i][0];
      snprintf(flat, sizeof e->extra_names[i][0], "x%d_flat", i);
      n = add_node(e, "Flatten", l->name, flat);
      add_input(n, x);
      attr_int(n, "axis", 1);
      x = flat;
    }
    n = add_node(e, "Gemm", l->name, out);
    add_input(n, x);
    add_input(n, slice_init(e, l->w_off, 0));
    if (l->has_bias) add_input(n, slice_init(e, l->b_off, 0));
    attr_int(n, "transB", 1);
    e->rank[i] = 2;
    break;
  case NN_LAYER_DROPOUT: e->value[i] = x; break;   /* inference: the identity */
  case NN_LAYER_FLATTEN:
    if (e->rank[i] == 2) {
      e->value[i] = x;
      break;
    }
    n = add_node(e, "Flatten", l->name, out);
    add_input(n, x);
    attr_int(n, "axis", 1);
    e->rank[i] = 2;
    break;
  case NN_LAYER_ADD:
  case NN_LAYER_MUL:
  case NN_LAYER_CONCAT:
    n = add_node(e, l->kind == NN_LAYER_ADD ? "Add" : l->kind == NN_LAYER_MUL ? "Mul" : "Concat",
                 l->name, out);
    add_input(n, x);
    add_input(n, in_value(e, l->in[1]));
    if (l->kind == NN_LAYER_CONCAT) attr_int(n, "axis", 1);
    break;
  case NN_LAYER_ACT:
    if (l->act < NN_ACT_LEAKY_RELU || l->act > NN_ACT_CLIP)
      return nn_set_error(NN_ERR_ARG, "nn_model_save_onnx: layer %s: unknown activation %d",
                          l->name, l->act);
    n = add_node(e, act_ops[l->act], l->name, out);
    add_input(n, x);
    if (l->act == NN_ACT_LEAKY_RELU) attr_float(n, "alpha", l->alpha);
    if (l->act == NN_ACT_CLIP) {
      e->clip_values[2 * i] = l->lo;
      e->clip_values[2 * i + 1] = l->hi;
      snprintf(e->extra_names[i][0], 32, "x%d_min", i);
      snprintf(e->extra_names[i][1], 32, "x%d_max", i);
      add_input(n, add_init(e, e->extra_names[i][0], 0, NULL, &e->clip_values[2 * i], 1));
      add_input(n, add_init(e, e->extra_names[i][1], 0, NULL, &e->clip_values[2 * i + 1], 1));
    }
    break;
  default:
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_save_onnx: layer %s of kind %d has no "
                        "ONNX form", l->name, (int)l->kind);
  }
  for (int k = 0; k < e->num_nodes; k++)
    for (size_t j = 0; j < e->nodes[k].node.n_input; j++)
      if (!e->nodes[k].in[j])
        return nn_set_error(NN_ERR_ARG, "nn_model_save_onnx: layer %s: a parameter without "
                            "its tensor", l->name);
  return NN_OK;
}

static void value_info(Onnx__ValueInfoProto *v, Onnx__TypeProto *tp, Onnx__TypeProto__Tensor *tt,
                       Onnx__TensorShapeProto *sh, Onnx__TensorShapeProto__Dimension *dims,
                       Onnx__TensorShapeProto__Dimension **dimp, const char *name, int ndim,
                       const int *shape) {
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int d = 0; d < ndim; d++) {
    onnx__tensor_shape_proto__dimension__init(&dims[d]);
    if (d == 0) {
      dims[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dims[d].dim_param = (char *)"N";
    } else {
      dims[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dims[d].dim_value = shape[d];
    }
    dimp[d] = &dims[d];
  }
  sh->dim = dimp;
  sh->n_dim = (size_t)ndim;
  tt->has_elem_type = 1;
  tt->elem_type = ONNX_FLOAT;
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->name = (char *)name;
  v->type = tp;
}

/* Writes buf to path.tmp, fsyncs, renames over path. */
static nn_status_t write_file(const char *path, const uint8_t *buf, size_t len) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return nn_set_error(NN_ERR_ARG, "nn_model_save_onnx: path too long");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return nn_set_error(NN_ERR_IO, "nn_model_save_onnx: cannot create %s: %s", tmp,
                        strerror(errno));
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, buf + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  int err = done < len ? errno : 0;
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return nn_set_error(NN_ERR_IO, "nn_model_save_onnx: writing %s: %s", path,
                        strerror(err ? err : EIO));
  }
  return NN_OK;
}

static nn_status_t alloc_exporter(exporter_t *e, const nn_model_t *m) {
  size_t L = (size_t)m->num_layers, S = (size_t)m->num_slices + 2 * L;
  e->m = m;
  e->nodes = calloc(2 * L + 1, sizeof *e->nodes);
  e->nodep = calloc(2 * L + 1, sizeof *e->nodep);
  e->inits = calloc(S, sizeof *e->inits);
  e->initp = calloc(S, sizeof *e->initp);
  e->init_dims = calloc(S, sizeof *e->init_dims);
  e->clip_values = calloc(2 * L, sizeof *e->clip_values);
  e->extra_names = calloc(L, sizeof *e->extra_names);
  e->names = calloc(L, sizeof *e->names);
  e->value = calloc(L, sizeof *e->value);
  e->rank = calloc(L, sizeof *e->rank);
  if (!e->nodes || !e->nodep || !e->inits || !e->initp || !e->init_dims || !e->clip_values ||
      !e->extra_names || !e->names || !e->value || !e->rank)
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_save_onnx: out of memory");
  for (size_t i = 0; i < L; i++) snprintf(e->names[i], sizeof e->names[i], "x%zu", i);
  return NN_OK;
}

static void free_exporter(exporter_t *e) {
  free(e->nodes);
  free(e->nodep);
  free(e->inits);
  free(e->initp);
  free(e->init_dims);
  free(e->clip_values);
  free(e->extra_names);
  free(e->names);
  free(e->value);
  free(e->rank);
}

/* The model message around the graph's nodes and initializers, packed and written. */
static nn_status_t write_model(exporter_t *e, const char *path, const nn_st_meta_t *meta,
                               int meta_count) {
  const nn_model_t *m = e->m;
  Onnx__ValueInfoProto vin, vout, *vinp = &vin, *voutp = &vout;
  Onnx__TypeProto tin, tout;
  Onnx__TypeProto__Tensor ttin, ttout;
  Onnx__TensorShapeProto sin, sout;
  Onnx__TensorShapeProto__Dimension din[4], dout[2], *dinp[4], *doutp[2];
  int ishape[4] = {0, m->in_c, m->in_h, m->in_w}, oshape[2] = {0, m->num_classes};
  value_info(&vin, &tin, &ttin, &sin, din, dinp, "input", 4, ishape);
  value_info(&vout, &tout, &ttout, &sout, dout, doutp, "logits", 2, oshape);
  Onnx__GraphProto g;
  onnx__graph_proto__init(&g);
  g.name = (char *)m->name;
  g.node = e->nodep;
  g.n_node = (size_t)e->num_nodes;
  g.initializer = e->initp;
  g.n_initializer = (size_t)e->num_inits;
  g.input = &vinp;
  g.n_input = 1;
  g.output = &voutp;
  g.n_output = 1;
  Onnx__OperatorSetIdProto opset, *opsetp = &opset;
  onnx__operator_set_id_proto__init(&opset);
  opset.domain = (char *)"";
  opset.has_version = 1;
  opset.version = EXPORT_OPSET;
  Onnx__ModelProto mp;
  onnx__model_proto__init(&mp);
  mp.has_ir_version = 1;
  mp.ir_version = EXPORT_IR_VERSION;
  mp.opset_import = &opsetp;
  mp.n_opset_import = 1;
  mp.producer_name = (char *)"hvd";
  mp.graph = &g;
  Onnx__StringStringEntryProto props[16], *propp[16];
  for (int i = 0; i < meta_count && i < 16; i++) {
    onnx__string_string_entry_proto__init(&props[i]);
    props[i].key = (char *)meta[i].key;
    props[i].value = (char *)meta[i].value;
    propp[i] = &props[i];
  }
  mp.metadata_props = propp;
  mp.n_metadata_props = (size_t)(meta_count < 16 ? meta_count : 16);
  size_t len = onnx__model_proto__get_packed_size(&mp);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf)
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_model_save_onnx: out of memory for %zu bytes",
                        len);
  size_t packed = onnx__model_proto__pack(&mp, buf);
  nn_status_t s = packed == len ? write_file(path, buf, len)
                                : nn_set_error(NN_ERR_BACKEND, "nn_model_save_onnx: "
                                               "protobuf-c packed %zu of %zu bytes", packed, len);
  free(buf);
  return s;
}

nn_status_t nn_model_save_onnx_meta(const nn_model_t *m, const char *path,
                                    const nn_st_meta_t *meta, int meta_count) {
  if (!m || !path || meta_count < 0 || meta_count > 16 || (meta_count && !meta))
    return nn_set_error(NN_ERR_ARG, "nn_model_save_onnx: NULL argument, or metadata "
                        "entries outside 0..16");
  exporter_t e = {0};
  nn_status_t s = alloc_exporter(&e, m);
  for (int i = 0; s == NN_OK && i < m->num_layers; i++) s = export_layer(&e, i);
  if (s == NN_OK) {
    /* The last layer's value is the graph output "logits" (an Identity when it is an
       alias, a dropout at the end). */
    const char *last = e.value[m->num_layers - 1];
    if (last == e.names[m->num_layers - 1]) {
      for (int k = 0; k < e.num_nodes; k++)
        if (e.nodes[k].out[0] == last) e.nodes[k].out[0] = (char *)"logits";
    } else {
      add_input(add_node(&e, "Identity", "logits", "logits"), last);
    }
    s = write_model(&e, path, meta, meta_count);
  }
  free_exporter(&e);
  return s;
}

#endif /* HVD_NO_PROTOBUF */

nn_status_t nn_model_save_onnx(const nn_model_t *m, const char *path) {
  return nn_model_save_onnx_meta(m, path, NULL, 0);
}
