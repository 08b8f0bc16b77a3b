/* nn/model_internal.h: the layer graph behind nn_model_t, shared by model.c (forward,
   backward, buffers), models.c (builders by name) and model_io.c (safetensors).
   Not public: programs use nn.h only. */
#ifndef NN_MODEL_INTERNAL_H
#define NN_MODEL_INTERNAL_H

#include "nn/nn.h"

typedef enum {
  NN_LAYER_CONV2D,
  NN_LAYER_BATCHNORM2D,
  NN_LAYER_RELU,
  NN_LAYER_MAXPOOL2D,
  NN_LAYER_AVGPOOL2D,
  NN_LAYER_GLOBAL_AVGPOOL,
  NN_LAYER_LINEAR,
  NN_LAYER_DROPOUT,
  NN_LAYER_FLATTEN,
  NN_LAYER_ADD
} nn_layer_kind_t;

#define NN_MODEL_INPUT (-1) /* input index meaning "the model's input batch"       */
#define NN_LAYER_ERROR (-2) /* returned by nn_model_add_* after an error            */

typedef struct {
  nn_layer_kind_t kind;
  char name[96];          /* PyTorch module path ("layer1.0.conv1") or a descriptive one */
  int in[2];              /* producing layers; NN_MODEL_INPUT; in[1] only for add      */
  int c, h, w;            /* output shape of one sample                                 */
  int in_c, in_h, in_w;   /* input shape of one sample                                  */

  /* hyper-parameters */
  int kh, kw, stride, pad; /* conv, pools                                               */
  int has_bias;           /* conv, linear                                               */
  float eps, momentum;    /* batch norm                                                 */
  float p;                /* dropout                                                    */

  /* parameters: offsets into params[]/grads[] and buffers[] (SIZE_MAX when absent) */
  size_t w_off, b_off;    /* conv/linear weight and bias; batch norm gamma and beta    */
  size_t rm_off, rv_off;  /* batch norm running mean and var in buffers[]             */
  int counter;            /* batch norm num_batches_tracked index, -1 otherwise        */
  size_t param_begin, param_end; /* range of this layer's params in params[]           */

  /* activations for cfg.batch samples. A view (flatten, in-place relu) aliases its
     input's out and dout instead of owning memory. */
  int is_view;
  int consumers;          /* how many layers read this one's output                   */
  float *out, *dout;
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

  float *params, *grads, *buffers;
  int64_t *counters;

  float *input;           /* copy of the last forward's input, for conv backward       */
  float *dinput;          /* gradient scratch for layers other than conv/linear that
                             read the input (none of the built-in models)             */
  float *dlogits;         /* set by nn_model_loss                                      */
  float *workspace;       /* conv im2col scratch shared by all convolutions            */
  size_t workspace_floats;

  int last_n;             /* samples of the last forward                               */
  int last_training;
  int have_loss;          /* nn_model_loss ran after the last forward                  */
  uint64_t dropout_step;  /* forward passes in training mode, for dropout masks        */
  void *cuda;             /* device state when on the GPU (nn/cuda/model_cuda.c), else NULL */
  nn_precision_config_t precision; /* defaults filled in; used by nn_model_to_device */
  nn_model_hook_fn hook;  /* tests only (see above); the CPU walk only                  */
  void *hook_ctx;
};

/* ---- what the CPU walk (model.c) and the device walk (cuda/model_cuda.c) share ---- */
/* Kernel shapes of layer l for a batch of n. */
nn_conv2d_shape_t nn_layer_conv_shape(const nn_layer_t *l, int n);
nn_pool2d_shape_t nn_layer_pool_shape(const nn_layer_t *l, int n);
nn_batchnorm2d_shape_t nn_layer_bn_shape(const nn_layer_t *l, int n);
/* Whether anybody needs the gradient of layer `in`'s output: not of the model input,
   nor of a flatten of it (mlp, trivial), so conv/linear can skip computing dx. */
int nn_layer_input_grad_wanted(const nn_model_t *m, int in);
/* The dropout seed of layer i: its masks are drawn from (this, m->dropout_step), the
   same on the CPU and the GPU. */
uint64_t nn_layer_dropout_seed(const nn_model_t *m, int i);

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
/* Allocates parameters, buffers and activations, initialises the weights as PyTorch's
   defaults from cfg.seed. On failure frees m (also after a build error). */
nn_status_t nn_model_finish(nn_model_t *m);

#endif /* NN_MODEL_INTERNAL_H */
