/* nn/model_internal.h: the layer graph behind nn_model_t and the backend interface.
   model.c builds the graph (models.c names the built-in ones, model_io.c saves and
   loads it); model_walk.c walks it (forward, loss, backward, the update) through the
   backend the model lives on: model_cpu.c (host memory, the reference) or
   cuda/model_cuda.c (a GPU). A backend knows how to run each layer kind on its device;
   the walk knows the graph. Not public: programs use nn.h only. */
#ifndef NN_MODEL_INTERNAL_H
#define NN_MODEL_INTERNAL_H

#include "nn/dropout_rng.h"
#include "nn/graph_kernels_internal.h"
#include "nn/nn.h"

/* The layer kinds, each with the stem of its functions in every backend: a backend
   defines static stem_forward and stem_backward (nn_layer_ops_t) for every kind and
   fills its table with NN_LAYER_KIND_LIST(NN_LAYER_OPS_ENTRY), so a new kind is one
   line here and one function pair per backend, and a backend without it fails to
   compile. */
#define NN_LAYER_KIND_LIST(X)       \
  X(NN_LAYER_CONV2D, conv)          \
  X(NN_LAYER_BATCHNORM2D, bn)       \
  X(NN_LAYER_RELU, relu)            \
  X(NN_LAYER_MAXPOOL2D, maxpool)    \
  X(NN_LAYER_AVGPOOL2D, avgpool)    \
  X(NN_LAYER_GLOBAL_AVGPOOL, gap)   \
  X(NN_LAYER_LINEAR, linear)        \
  X(NN_LAYER_DROPOUT, dropout)      \
  X(NN_LAYER_FLATTEN, flatten)      \
  X(NN_LAYER_ADD, add)              \
  NN_LAYER_GRAPH_KIND_LIST(X)
/* The kinds that imported graphs (nn/onnx_import.c) need beyond the built-in models:
   a convolution with groups, dilations or unequal strides and pads (depthwise in
   MobileNet), elementwise activations, an elementwise product and a channel concat
   (nn/model_graph_layers.c builds them, nn/graph_kernels.c computes them on the CPU). */
#define NN_LAYER_GRAPH_KIND_LIST(X) \
  X(NN_LAYER_GCONV, gconv)          \
  X(NN_LAYER_ACT, act)              \
  X(NN_LAYER_MUL, mul)              \
  X(NN_LAYER_CONCAT, concat)
#define NN_LAYER_ENUM_ENTRY(kind, stem) kind,
#define NN_LAYER_OPS_ENTRY(kind, stem) [kind] = {stem##_forward, stem##_backward},

typedef enum {
  NN_LAYER_KIND_LIST(NN_LAYER_ENUM_ENTRY)
  NN_LAYER_KINDS          /* the number of kinds */
} nn_layer_kind_t;

#define NN_MODEL_INPUT (-1) /* input index meaning "the model's input batch"       */
#define NN_LAYER_ERROR (-2) /* returned by nn_model_add_* after an error            */

typedef struct {
  nn_layer_kind_t kind;
  char name[96];          /* PyTorch module path ("layer1.0.conv1") or a descriptive one */
  int in[2];              /* producing layers; NN_MODEL_INPUT; in[1]: add, mul, concat */
  int c, h, w;            /* output shape of one sample                                 */
  int in_c, in_h, in_w;   /* input shape of one sample                                  */

  /* hyper-parameters */
  int kh, kw, stride, pad; /* conv, pools                                               */
  int has_bias;           /* conv, linear                                               */
  float eps, momentum;    /* batch norm                                                 */
  float p;                /* dropout                                                    */
  /* graph kinds (NN_LAYER_GRAPH_KIND_LIST): a grouped convolution's groups, dilations
     and width stride and pad (stride, pad above are the height's); an activation's
     function (nn_act_t) and its constants (leaky relu slope; clip bounds) */
  int groups, dil_h, dil_w, stride_w, pad_w;
  int act;
  float alpha, lo, hi;

  /* parameters: offsets into params[]/grads[] and buffers[] (SIZE_MAX when absent) */
  size_t w_off, b_off;    /* conv/linear weight and bias; batch norm gamma and beta    */
  size_t rm_off, rv_off;  /* batch norm running mean and var in buffers[]             */
  int counter;            /* batch norm num_batches_tracked index, -1 otherwise        */
  size_t param_begin, param_end; /* range of this layer's params in params[]           */
  int frozen;             /* nn_model_set_frozen: no gradient, no update; batch norm in
                             inference mode (nn/model_freeze.c)                        */

  /* The graph decides views: a flatten, and a relu that may overwrite its input
     (nn_model_finish), alias their input's activations instead of owning memory. */
  int is_view;
  int consumers;          /* how many layers read this one's output                   */
  /* Who writes which activation gradient first (nn_model_finish): the backward walks the
     layers from the last to the first, so of the layers that write the gradient of one
     output (its consumers, through views), the one of highest index writes it first.
     dx_first[k]: this layer is that first writer for its input k (in[1]: add only). On a
     backend with writes_first_dx that layer stores its input gradient (dx = ...) and
     the later writers add into it, so the pass needs no zeroing and no first read of a
     zero gradient; elsewhere every gradient is zeroed before the pass and every writer
     adds. dout_unwritten: no layer writes this layer's own gradient (it owns one): still
     zeroed before the pass. */
  int dx_first[2];
  int dout_unwritten;

  /* Activations for cfg.batch samples in the backend's memory and element type (host
     floats on the CPU; device memory in the model's precision on a GPU), set up by the
     backend. own_out/own_dout: allocated for this layer (else an alias), so released
     by nn_model_free_activations. */
  void *out, *dout;
  int own_out, own_dout;
  /* The CPU backend's per-layer state (model_cpu.c); NULL on other backends. */
  float *save_mean, *save_invstd; /* batch norm, c floats each                         */
  int32_t *argmax;        /* max pool                                                  */
  uint8_t *mask;          /* dropout                                                   */

  double forward_s, backward_s;
} nn_layer_t;

/* A test hook of the CPU walk, for tests/test_nn_precision_emulation.c: it rounds what
   the GPU stores in half precision (activations, activation gradients, weight
   gradients) to emulate mixed precision on the CPU. NULL (the default) costs one test
   per layer. Points of a step, in order:
   - NN_HOOK_FORWARD after layer `layer`'s forward: buf is its output (count floats for
     the batch; for a view, the floats it aliases).
   - NN_HOOK_LOSS after nn_model_loss: buf is the gradient of the logits (layer -1).
   - NN_HOOK_BACKWARD after layer `layer`'s backward, once per input gradient it added
     into (an add has two): buf, count; buf NULL and count 0 when it computed none (a
     convolution reading the model input). Its parameter gradients (grads[] from
     param_begin to param_end) are final by then. */
typedef enum { NN_HOOK_FORWARD, NN_HOOK_LOSS, NN_HOOK_BACKWARD } nn_model_hook_point_t;
typedef void (*nn_model_hook_fn)(void *ctx, nn_model_t *m, nn_model_hook_point_t point,
                                 int layer, float *buf, size_t count);

struct nn_model {
  char name[32];
  nn_status_t status;     /* sticky build error: later add_* calls do nothing      */
  nn_model_config_t cfg;
  int in_c, in_h, in_w, num_classes;

  nn_layer_t *layers;
  int num_layers, cap_layers;

  nn_slice_t *slices;
  int num_slices, cap_slices;
  size_t num_params;      /* parameters (PyTorch's count)                              */
  size_t param_len;       /* floats in params[] and grads[]: the parameters, each slice
                             at a multiple of NN_PARAM_ALIGN, zeros between            */
  size_t num_buffers;
  int num_counters;

  /* Host arrays: the parameters, gradients and buffers of a model on the CPU; the
     mirror (nn_model_sync_to_host/_to_device) of one on a GPU. Counters always live
     here (the host counts batch-norm steps on every backend). */
  float *params, *grads, *buffers;
  int64_t *counters;
  /* Frozen layers (nn/model_freeze.c) are those below train_layer: backward walks only
     layers train_layer.., and the optimizer covers params[train_from, param_len) (0 and
     0 when nothing is frozen). */
  int train_layer;
  size_t train_from;
  nn_optim_t *optim;      /* nn_model_optim_create, over params[train_from, param_len);
                             on a GPU the host mirror of the device optimizer's state */
  nn_optim_config_t optim_cfg;

  /* Where the model lives and runs (model_cpu.c unless nn_model_to_device moved it),
     and that backend's private state (NULL on the CPU). */
  const struct nn_backend *backend;
  void *backend_state;

  /* Backend memory, like the activations: */
  void *input;            /* copy of the last forward's input, for conv backward       */
  void *dinput;           /* gradient scratch for layers other than conv/linear that
                             read the input (none of the built-in models)             */
  void *dlogits;          /* set by nn_model_loss                                      */
  size_t act_size;        /* bytes per activation element on the backend               */
  int need_dinput;        /* a layer other than conv/linear/flatten reads the input    */
  int dinput_unwritten;   /* dinput is zeroed before backward (see dout_unwritten)     */
  int backward_store;     /* nn_backward_store when the model was built: the plan of
                             dx_first stores (1) or zeroes every gradient (0)         */
  float *workspace;       /* CPU: conv im2col scratch shared by all convolutions       */
  size_t workspace_floats;

  int last_n;             /* samples of the last forward                               */
  int last_training;
  int have_loss;          /* nn_model_loss ran after the last forward                  */
  /* nn_model_range_use (nn/model_range.c): the activation set a layer range runs in
     (NULL: the model's own buffers), and the model's own ones meanwhile. */
  struct nn_range_acts *acts_cur, *acts_home;
  uint64_t dropout_step;  /* forward passes in training mode, for dropout masks        */
  nn_precision_config_t precision; /* defaults filled in; used by nn_model_to_device */
  nn_model_hook_fn hook;  /* tests only (see above); host-memory backends only           */
  void *hook_ctx;
};

/* ---- the backend interface ----
   The walk (model_walk.c) runs a model through the table of the backend it lives on.
   Every pointer a backend hands the walk or its layers (activations, m->input, ...) is
   in that backend's memory; the walk never dereferences one, it only passes them on
   (and to the test hook on host backends). A new layer kind is one entry per table. */
typedef struct {
  /* Layer i over the first n samples: reads its input(s), writes l->out. */
  nn_status_t (*forward)(nn_model_t *m, int i, int n, int training);
  /* ADDS into the gradient(s) of its input(s) (or stores them, where the backend has
     writes_first_dx and the layer has dx_first) and, on the CPU and on a float32 NCHW
     CUDA model, into its parameter gradients (a converted CUDA model, half or NHWC,
     overwrites its own parameter range from the half gradients: each range belongs to
     one layer and is zeroed before backward, so the two agree; accumulating gradients
     over several backward calls would need the add). By return this layer's parameter
     gradients are final in the home gradients (what nn_model_grads_home points to), as
     the grad-ready callback announces them. */
  nn_status_t (*backward)(nn_model_t *m, int i, int n);
} nn_layer_ops_t;

typedef struct nn_backend {
  const char *name;                         /* for messages: "CPU", "CUDA"           */
  nn_device_t device;
  /* Its layers store the input gradients that they write first (nn_layer_t.dx_first)
     instead of adding into them; 0: the walk zeroes every gradient first. */
  int writes_first_dx;
  nn_layer_ops_t layer[NN_LAYER_KINDS];
  /* Backend memory: zero and copy bytes (may be asynchronous, in order). */
  nn_status_t (*zero)(void *p, size_t bytes);
  nn_status_t (*copy)(void *dst, const void *src, size_t bytes);
  /* The host batch x (n samples) into m->input; also whatever the layers need before
     a forward (the compute copy of the weights). Refuses what the backend cannot run. */
  nn_status_t (*load_input)(nn_model_t *m, const float *x, int n);
  nn_status_t (*forward_done)(nn_model_t *m, int n);    /* NULL: nothing to do     */
  /* Loss of the last forward (m->last_n samples); fills m->dlogits. labels: host
     memory, or device memory on a device backend. loss/correct may be NULL. */
  nn_status_t (*loss)(nn_model_t *m, const int32_t *labels, float *loss, int *correct);
  const float *(*logits_host)(const nn_model_t *m);     /* last forward's, host   */
  /* Parameters and gradients where this backend keeps them (float32, param_len). */
  float *(*params_home)(nn_model_t *m);
  float *(*grads_home)(nn_model_t *m);
  nn_status_t (*zero_grads)(nn_model_t *m);
  nn_status_t (*scale_grads)(nn_model_t *m, size_t from, size_t to, float factor);
  /* m->optim was created (or replaced): make the backend's optimizer from m->optim_cfg
     and m->optim's state. NULL: m->optim itself is the optimizer. */
  nn_status_t (*optim_attach)(nn_model_t *m);
  nn_status_t (*optim_step)(nn_model_t *m, float lr);
  /* Host arrays <-> the backend's copies (params, buffers, optimizer state); NULL on
     the host. */
  nn_status_t (*sync_to_host)(nn_model_t *m);
  nn_status_t (*sync_to_device)(nn_model_t *m);
  nn_status_t (*loss_scale)(nn_model_t *m, float *scale, int64_t *skipped); /* NULL: 1 */
  /* Frees everything the backend allocated for m (activations included) and leaves
     m->backend_state NULL. */
  void (*release)(nn_model_t *m);
} nn_backend_t;

/* The checks of nn_model_to_device common to the CUDA build (nn/cuda/model_cuda.c) and
   the build without it (nn/device_stub.c): NN_OK with *done = 1 when m is already on
   device; NN_OK with *done = 0 when the move to CUDA is to be made; an error otherwise. */
static inline nn_status_t nn_model_to_device_args(const nn_model_t *m, nn_device_t device,
                                                  int *done) {
  *done = 0;
  if (!m) return nn_set_error(NN_ERR_ARG, "nn_model_to_device: NULL model");
  if (device == m->backend->device) {
    *done = 1;
    return NN_OK;
  }
  if (device == NN_DEVICE_CPU)
    return nn_set_error(NN_ERR_UNSUPPORTED, "nn_model_to_device: moving a model back to "
                        "the CPU is not supported (nn_model_sync_to_host copies its state)");
  if (device != NN_DEVICE_CUDA)
    return nn_set_error(NN_ERR_ARG, "nn_model_to_device: unknown device %d", (int)device);
  return NN_OK;
}

/* The CPU backend (model_cpu.c): allocates the host activations for cfg.batch and
   makes it m's backend (nn_model_finish). */
nn_status_t nn_cpu_backend_attach(nn_model_t *m);
/* The model's own activation buffers back in place of a layer range's set
   (nn_model_range_use with NULL), before the model frees them. */
void nn_model_range_use_home(nn_model_t *m);

/* Frees the activations the layers own (own_out/own_dout) and m->input, m->dinput and
   m->dlogits with free_fn (the backend's), and clears the pointers. */
void nn_model_free_activations(nn_model_t *m, void (*free_fn)(void *));

/* ---- what the backends share about a layer (inline: no backend calls another file
   of nn for them) ---- */
static inline size_t nn_layer_sample_size(const nn_layer_t *l) {
  return (size_t)l->c * l->h * l->w;
}
static inline size_t nn_model_input_size(const nn_model_t *m) {
  return (size_t)m->in_c * m->in_h * m->in_w;
}
/* Kernel shapes of layer l for a batch of n. */
static inline nn_conv2d_shape_t nn_layer_conv_shape(const nn_layer_t *l, int n) {
  nn_conv2d_shape_t s = {n, l->in_c, l->in_h, l->in_w, l->c, l->kh, l->kw,
                         l->stride, l->stride, l->pad, l->pad, l->h, l->w};
  return s;
}
static inline nn_pool2d_shape_t nn_layer_pool_shape(const nn_layer_t *l, int n) {
  nn_pool2d_shape_t s = {n, l->c, l->in_h, l->in_w, l->kh, l->kw, l->stride, l->stride,
                         l->pad, l->pad, l->h, l->w};
  return s;
}
static inline nn_batchnorm2d_shape_t nn_layer_bn_shape(const nn_layer_t *l, int n) {
  nn_batchnorm2d_shape_t s = {n, l->c, l->h, l->w, l->eps, l->momentum};
  return s;
}
static inline nn_gconv_shape_t nn_layer_gconv_shape(const nn_layer_t *l, int n) {
  nn_gconv_shape_t s = {n, l->in_c, l->in_h, l->in_w, l->c, l->kh, l->kw, l->groups,
                        l->stride, l->stride_w, l->pad, l->pad_w, l->dil_h, l->dil_w,
                        l->h, l->w};
  return s;
}
/* Whether layers of this kind read a second input (in[1]). */
static inline int nn_layer_kind_has_two_inputs(nn_layer_kind_t kind) {
  return kind == NN_LAYER_ADD || kind == NN_LAYER_MUL || kind == NN_LAYER_CONCAT;
}
/* The output of layer `in` (NN_MODEL_INPUT: the input copy) and its gradient. */
static inline void *nn_layer_in(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? m->input : m->layers[in].out;
}
static inline void *nn_layer_in_grad(const nn_model_t *m, int in) {
  return in == NN_MODEL_INPUT ? m->dinput : m->layers[in].dout;
}
/* Whether anybody needs the gradient of layer `in`'s output: not of the model input,
   nor of a flatten of it (mlp, trivial), so conv/linear can skip computing dx. */
static inline int nn_layer_input_grad_wanted(const nn_model_t *m, int in) {
  if (in == NN_MODEL_INPUT) return 0;
  const nn_layer_t *l = &m->layers[in];
  return !(l->kind == NN_LAYER_FLATTEN && l->in[0] == NN_MODEL_INPUT);
}
/* The gradient buffer layer i's backward adds into for its first input: NULL for a
   convolution or linear layer whose input gradient nobody wants. */
static inline void *nn_layer_dx(const nn_model_t *m, int i) {
  const nn_layer_t *l = &m->layers[i];
  if ((l->kind == NN_LAYER_CONV2D || l->kind == NN_LAYER_LINEAR) &&
      !nn_layer_input_grad_wanted(m, l->in[0]))
    return NULL;
  return nn_layer_in_grad(m, l->in[0]);
}
/* The dropout seed of layer i: its masks are drawn from (this, m->dropout_step), the
   same on the CPU and the GPU (splitmix64 of the model seed and the layer index). */
static inline uint64_t nn_layer_dropout_seed(const nn_model_t *m, int i) {
  uint64_t z = m->cfg.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
  return nn_dropout_mix64(z + 0x9E3779B97F4A7C15ull);
}

/* Plans who writes which activation gradient first (nn_layer_t.dx_first and
   dout_unwritten, m->dinput_unwritten) for a backend whose layer j shares its input's
   activation gradient where view[j] (one flag per layer; model.c plans the model's own
   is_view when it builds the model, and a backend whose memory differs, a relu that
   does not run in place or a flatten that permutes, plans again with its own views
   when it takes the model). m->backward_store decides storing. written: scratch of
   num_layers + 1 bytes. */
void nn_model_plan_grad_writes(nn_model_t *m, const char *view, char *written);

/* ---- graph construction (model.c), used by the builders in models.c ----
   Each add_* appends one layer reading layer `in` (NN_MODEL_INPUT for the input) and
   returns its index. On an error it returns NN_LAYER_ERROR and records the status in
   m->status (nn_last_error says why); every later add_* is then a no-op and
   nn_model_finish returns that status, so builders need not check each call.
   Parameters and buffers are registered in call order, which must be PyTorch's
   state_dict order and a topological order of the graph. */
nn_model_t *nn_model_begin(const char *name, const nn_model_config_t *cfg, int in_c,
                           int in_h, int in_w, int num_classes);
int nn_model_add_conv2d(nn_model_t *m, const char *name, int in, int c_out, int k,
                        int stride, int pad, int bias);
int nn_model_add_batchnorm2d(nn_model_t *m, const char *name, int in);
int nn_model_add_relu(nn_model_t *m, const char *name, int in);
int nn_model_add_maxpool2d(nn_model_t *m, const char *name, int in, int k, int stride,
                           int pad);
int nn_model_add_avgpool2d(nn_model_t *m, const char *name, int in, int k, int stride,
                           int pad);
int nn_model_add_global_avgpool(nn_model_t *m, const char *name, int in);
int nn_model_add_flatten(nn_model_t *m, const char *name, int in);
int nn_model_add_linear(nn_model_t *m, const char *name, int in, int out, int bias);
int nn_model_add_dropout(nn_model_t *m, const char *name, int in, float p);
int nn_model_add_add(nn_model_t *m, const char *name, int a, int b);
/* The graph kinds (nn/model_graph_layers.c). gconv: weight [c_out][in_c/groups][kh][kw]
   (and a bias of c_out when bias), pads and strides per axis, symmetric; act: one of
   nn_act_t with alpha (leaky relu) or lo, hi (clip); mul: a * b, b of a's shape or one
   value per channel ([c][1][1]); concat: a's channels then b's (same height and width). */
int nn_model_add_gconv(nn_model_t *m, const char *name, int in, int c_out, int kh, int kw,
                       const int stride[2], const int pad[2], const int dil[2], int groups,
                       int bias);
int nn_model_add_act(nn_model_t *m, const char *name, int in, int act, float alpha,
                     float lo, float hi);
int nn_model_add_mul(nn_model_t *m, const char *name, int a, int b);
int nn_model_add_concat(nn_model_t *m, const char *name, int a, int b);
/* What model.c's builders use, for the builders of other files: append a layer reading
   `in` (NULL after an error), register a state_dict entry of the layer being built,
   record a build error (returns NN_LAYER_ERROR), and close the layer being built
   (returns its index). */
nn_layer_t *nn_model_push_layer(nn_model_t *m, nn_layer_kind_t kind, const char *name,
                                int in);
size_t nn_model_add_slice(nn_model_t *m, const char *layer, const char *suffix,
                          nn_slice_kind_t kind, int ndim, const int *shape);
int nn_model_fail(nn_model_t *m, nn_status_t s, const char *what);
int nn_model_layer_done(nn_model_t *m);
/* Allocates parameters, buffers and activations, initialises the weights as PyTorch's
   defaults from cfg.seed. On failure frees m (also after a build error). */
nn_status_t nn_model_finish(nn_model_t *m);

#endif /* NN_MODEL_INTERNAL_H */
