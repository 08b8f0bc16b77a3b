/* nn/model_graph_layers.c: the builders of the layer kinds that imported graphs need
   beyond the built-in models (nn/model_internal.h, NN_LAYER_GRAPH_KIND_LIST), on
   model.c's helpers: they append a layer, register its state_dict entries and compute
   its output shape, as model.c's builders do. */
#include "nn/graph_kernels_internal.h"
#include "nn/model_internal.h"

int nn_model_add_gconv(nn_model_t *m, const char *name, int in, int c_out, int kh, int kw,
                       const int stride[2], const int pad[2], const int dil[2], int groups,
                       int bias) {
  nn_layer_t *l = nn_model_push_layer(m, NN_LAYER_GCONV, name, in);
  if (!l) return NN_LAYER_ERROR;
  nn_gconv_shape_t s = {1, l->in_c, l->in_h, l->in_w, c_out, kh, kw, groups,
                        stride[0], stride[1], pad[0], pad[1], dil[0], dil[1], 0, 0};
  if (!nn_gconv_shape(&s))
    return nn_model_fail(m, NN_ERR_ARG, "grouped convolution: channels not divisible by "
                         "the groups, or an empty output (input too small?)");
  l->kh = kh;
  l->kw = kw;
  l->stride = stride[0];
  l->stride_w = stride[1];
  l->pad = pad[0];
  l->pad_w = pad[1];
  l->dil_h = dil[0];
  l->dil_w = dil[1];
  l->groups = groups;
  l->has_bias = bias;
  l->c = c_out;
  l->h = s.h_out;
  l->w = s.w_out;
  int ws[4] = {c_out, l->in_c / groups, kh, kw};
  l->w_off = nn_model_add_slice(m, name, "weight", NN_SLICE_PARAM, 4, ws);
  if (bias) l->b_off = nn_model_add_slice(m, name, "bias", NN_SLICE_PARAM, 1, &c_out);
  l->param_end = m->param_len;
  return nn_model_layer_done(m);
}

int nn_model_add_act(nn_model_t *m, const char *name, int in, int act, float alpha,
                     float lo, float hi) {
  nn_layer_t *l = nn_model_push_layer(m, NN_LAYER_ACT, name, in);
  if (!l) return NN_LAYER_ERROR;
  if (act < NN_ACT_LEAKY_RELU || act > NN_ACT_CLIP || (act == NN_ACT_CLIP && !(lo <= hi)))
    return nn_model_fail(m, NN_ERR_ARG, "activation: unknown function or clip bounds "
                         "with min > max");
  l->act = act;
  l->alpha = alpha;
  l->lo = lo;
  l->hi = hi;
  return nn_model_layer_done(m);
}

/* The second input of a two-input layer: a layer (the input batch is only ever the
   first), consumed once more. */
static const nn_layer_t *second_input(nn_model_t *m, nn_layer_t *l, int b) {
  if (b < 0 || b >= m->num_layers) return NULL;
  l->in[1] = b;
  m->layers[b].consumers++;
  return &m->layers[b];
}

int nn_model_add_mul(nn_model_t *m, const char *name, int a, int b) {
  nn_layer_t *l = nn_model_push_layer(m, NN_LAYER_MUL, name, a);
  if (!l) return NN_LAYER_ERROR;
  const nn_layer_t *lb = second_input(m, l, b);
  if (!lb) return nn_model_fail(m, NN_ERR_ARG, "mul: bad second input");
  if (lb->c != l->c || !((lb->h == l->h && lb->w == l->w) || (lb->h == 1 && lb->w == 1)))
    return nn_model_fail(m, NN_ERR_ARG, "mul: the second input is neither of the first's "
                         "shape nor one value per channel");
  return nn_model_layer_done(m);
}

int nn_model_add_concat(nn_model_t *m, const char *name, int a, int b) {
  nn_layer_t *l = nn_model_push_layer(m, NN_LAYER_CONCAT, name, a);
  if (!l) return NN_LAYER_ERROR;
  const nn_layer_t *lb = second_input(m, l, b);
  if (!lb) return nn_model_fail(m, NN_ERR_ARG, "concat: bad second input");
  if (lb->h != l->h || lb->w != l->w)
    return nn_model_fail(m, NN_ERR_ARG, "concat: the inputs differ in height or width");
  l->c = l->in_c + lb->c;
  return nn_model_layer_done(m);
}
