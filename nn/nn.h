/* nn/nn.h: the one public header of nn, a minimal tensor and layer library.
   Knows nothing of hvd: a model trains alone too.

   Two levels:
   1. Kernels (nn_conv2d_forward, nn_batchnorm2d_backward, ...): plain functions over
      float32 NCHW arrays with a shape struct. The CPU versions are the reference; a CUDA
      backend keeps the same names and signatures and is tested against them.
      Convention: backward kernels ADD into every gradient they produce (dx += ...,
      dw += ...), as PyTorch accumulates .grad, so fan-out (residual connections) needs
      no special case. Callers zero gradients before a backward pass.
   2. Models (nn_model_t): a graph of layers built by name ("lenet", "resnet20", ...).
      All parameters of a model live in one contiguous float buffer and all gradients
      in another, same order and layout (forward order of the layers), so gradients can
      be reduced in one call or in buckets over ranges. Each layer owns named slices
      with PyTorch's names ("conv1.weight", "layer1.0.bn1.running_mean").

   Errors: functions return nn_status_t; nn_last_error() holds the message (per thread).
   Library code never prints or exits. */
#ifndef NN_H
#define NN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  NN_OK = 0,
  NN_ERR_ARG,          /* bad shape, NULL pointer, unknown name                    */
  NN_ERR_NO_MEMORY,
  NN_ERR_IO,           /* open/read/write/fsync/rename failed                      */
  NN_ERR_FORMAT,       /* a file is corrupt, truncated or for another model        */
  NN_ERR_UNSUPPORTED,  /* e.g. a device this build lacks                           */
  NN_ERR_BACKEND       /* BLAS, CUDA, cuDNN, cuBLAS error                          */
} nn_status_t;

const char *nn_status_string(nn_status_t s);
const char *nn_last_error(void);                 /* "" if none on this thread */
/* Sets the message returned by nn_last_error (printf-style); returns s. For nn's own
   files and for programs that want to report in the same way. */
nn_status_t nn_set_error(nn_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Notices: a choice nn made on its own that changes its speed (e.g. cuDNN refused a
   batch-norm type or layout and nn's own kernels run instead), each said once. They go
   to the handler set here, or (fn NULL, the default) as one "nn: ..." line on stderr.
   nn_notice is for nn's own files. */
typedef void (*nn_notice_fn)(const char *line, void *ctx);
void nn_set_notice_handler(nn_notice_fn fn, void *ctx);
void nn_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Threads used by the CPU kernels (OpenBLAS and nn's own loops). Default: 1 when the
   process was started by a multi-rank launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE > 1),
   else the number of online cores. */
void nn_set_threads(int n);
int nn_threads(void);
/* Which BLAS kernels run the matrix products and who chose them, for a benchmark's
   report: e.g. "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell)" or "OpenBLAS
   Cooperlake kernels (OpenBLAS's choice)". */
const char *nn_blas_kernels(void);
/* OpenBLAS 0.3.21 (Debian 12's) picks its kernels by CPU model and falls back to its
   oldest x86-64 kernels (Prescott, SSE3) for a model it does not know, as a virtual
   machine that hides the model often makes it: on one AVX-512 VM that made SGEMM 5-9x
   slower. A program calls this first thing in main, before MPI starts: when
   OPENBLAS_CORETYPE is unset and OpenBLAS chose kernels without AVX2 on a CPU that has
   AVX2 and FMA, it runs the program again (execv of /proc/self/exe, same pid, same
   argv) with OPENBLAS_CORETYPE set to the best kernels the CPU runs (SkylakeX with
   AVX-512, else Haswell) and NN_BLAS_CORE_SET=1 so nn_blas_kernels says who chose.
   Returns only when nothing needs doing (or the exec failed: NN_ERR_IO, the program
   goes on with OpenBLAS's choice). Setting OPENBLAS_CORETYPE, to any value, opts out;
   nothing is done for an OpenBLAS without DYNAMIC_ARCH or a program started through the
   loader (ld.so ./prog). */
nn_status_t nn_blas_fix_misdetected_core(char **argv);

/* ---- tensors ---- */
typedef enum { NN_DEVICE_CPU = 0, NN_DEVICE_CUDA = 1 } nn_device_t;

#define NN_MAX_DIMS 4
typedef struct {
  int ndim;
  int shape[NN_MAX_DIMS];
  size_t stride[NN_MAX_DIMS];  /* in elements; contiguous row-major (NCHW) when created */
  float *data;
  nn_device_t device;
  int owns_data;               /* nn_tensor_free releases data only when set */
} nn_tensor_t;

/* Owned, zero-filled, contiguous. */
nn_status_t nn_tensor_create(nn_tensor_t *t, int ndim, const int *shape);
/* A view of memory owned elsewhere (contiguous). */
nn_tensor_t nn_tensor_view(float *data, int ndim, const int *shape);
void nn_tensor_free(nn_tensor_t *t);
size_t nn_tensor_numel(const nn_tensor_t *t);

/* ---- kernels (CPU reference) ----
   Layouts as PyTorch: x[N][C][H][W]; conv weight[Cout][Cin][KH][KW]; linear
   weight[Out][In]; y = x W^T + b. Output sizes: floor((H + 2*pad - K) / stride) + 1. */

typedef struct {
  int n, c_in, h_in, w_in;
  int c_out, kh, kw;
  int stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;            /* filled by nn_conv2d_shape */
} nn_conv2d_shape_t;

/* Fills h_out/w_out; NN_ERR_ARG when the output would be empty. */
nn_status_t nn_conv2d_shape(nn_conv2d_shape_t *s);
/* Scratch floats the conv kernels need (im2col buffer); the caller provides it. */
size_t nn_conv2d_workspace_floats(const nn_conv2d_shape_t *s);
/* b may be NULL (no bias). */
nn_status_t nn_conv2d_forward(const nn_conv2d_shape_t *s, const float *x, const float *w,
                              const float *b, float *y, float *workspace);
/* dx, dw, db may each be NULL (not wanted). */
nn_status_t nn_conv2d_backward(const nn_conv2d_shape_t *s, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db,
                               float *workspace);

typedef struct { int n, c, h, w; float eps, momentum; } nn_batchnorm2d_shape_t;
/* Training: normalises with batch statistics, saves mean and 1/sqrt(var+eps) per channel
   for backward, and updates running statistics as PyTorch (unbiased variance,
   running = (1 - momentum) * running + momentum * batch). */
nn_status_t nn_batchnorm2d_forward_train(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var, float *y,
                                         float *save_mean, float *save_invstd);
nn_status_t nn_batchnorm2d_forward_infer(const nn_batchnorm2d_shape_t *s, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *running_mean,
                                         const float *running_var, float *y);
nn_status_t nn_batchnorm2d_backward(const nn_batchnorm2d_shape_t *s, const float *x,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *dy, float *dx,
                                    float *dgamma, float *dbeta);

/* Elementwise over count floats. relu backward uses the forward output y. */
void nn_relu_forward(size_t count, const float *x, float *y);
void nn_relu_backward(size_t count, const float *y, const float *dy, float *dx);
/* y = a + b; backward adds dy into da and db. */
void nn_add_forward(size_t count, const float *a, const float *b, float *y);

typedef struct {
  int n, c, h_in, w_in;
  int kh, kw, stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;            /* filled by nn_pool2d_shape */
} nn_pool2d_shape_t;
nn_status_t nn_pool2d_shape(nn_pool2d_shape_t *s);
/* argmax (n*c*h_out*w_out int32) records the input index chosen, for backward. */
nn_status_t nn_maxpool2d_forward(const nn_pool2d_shape_t *s, const float *x, float *y,
                                 int32_t *argmax);
nn_status_t nn_maxpool2d_backward(const nn_pool2d_shape_t *s, const int32_t *argmax,
                                  const float *dy, float *dx);
/* Average pooling counts padded cells (PyTorch's count_include_pad=True). */
nn_status_t nn_avgpool2d_forward(const nn_pool2d_shape_t *s, const float *x, float *y);
nn_status_t nn_avgpool2d_backward(const nn_pool2d_shape_t *s, const float *dy, float *dx);
/* [n][c][h][w] -> [n][c] mean over h*w. */
void nn_global_avgpool_forward(int n, int c, int hw, const float *x, float *y);
void nn_global_avgpool_backward(int n, int c, int hw, const float *dy, float *dx);

/* x[n][in] -> y[n][out] = x W^T + b; b may be NULL. dx, dw, db may each be NULL. */
nn_status_t nn_linear_forward(int n, int in, int out, const float *x, const float *w,
                              const float *b, float *y);
nn_status_t nn_linear_backward(int n, int in, int out, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db);

/* Inverted dropout: kept elements are scaled by 1/(1-p). mask (count bytes) is drawn
   from (seed, step) so a run is reproducible. */
void nn_dropout_forward(size_t count, float p, uint64_t seed, uint64_t step, const float *x,
                        float *y, uint8_t *mask);
void nn_dropout_backward(size_t count, float p, const uint8_t *mask, const float *dy,
                         float *dx);

/* Softmax cross-entropy, mean over the batch. logits[n][k], labels in [0, k).
   Returns the mean loss in *loss and the number of rows whose argmax equals the label
   in *correct; dlogits (may be NULL) is SET (not added) to d(mean loss)/d(logits). */
nn_status_t nn_softmax_cross_entropy(int n, int k, const float *logits,
                                     const int32_t *labels, float *loss, int *correct,
                                     float *dlogits);

/* ---- models ---- */
typedef struct nn_model nn_model_t;

/* One named tensor of a model, as it appears in a PyTorch state_dict. */
typedef enum {
  NN_SLICE_PARAM,      /* trained: lives in params[], gradient in grads[] at offset   */
  NN_SLICE_BUFFER,     /* batch-norm running statistics: lives in buffers[] at offset */
  NN_SLICE_COUNTER     /* batch-norm num_batches_tracked (int64 in PyTorch)           */
} nn_slice_kind_t;

typedef struct {
  char name[96];         /* "layer1.0.conv1.weight" */
  nn_slice_kind_t kind;
  size_t offset;         /* in elements into params[] / buffers[]; counters: index    */
  size_t numel;
  int ndim;              /* 0 for num_batches_tracked */
  int shape[NN_MAX_DIMS];
} nn_slice_t;

typedef struct {
  int batch;             /* largest batch forward will see (activations sized for it) */
  uint64_t seed;         /* weight initialisation (PyTorch defaults), dropout          */
  int num_classes;       /* 0: the model's default (10; resnet50/vgg16: 1000)           */
  int in_channels;       /* 0: the model's default                                      */
  int in_height, in_width; /* 0: the model's default (28 lenet/mlp, 32 resnet20, 224)   */
} nn_model_config_t;

/* Builds a model by name: "mlp", "lenet", "resnet20", "resnet18", "resnet50",
   "resnet101", "vgg16", "vgg16_bn", "alexnet", "trivial" (resnet18 to alexnet: torchvision's
   layers and state_dict names). Unknown name: NN_ERR_ARG listing the known ones. */
nn_status_t nn_model_create(nn_model_t **out, const char *name,
                            const nn_model_config_t *cfg);
void nn_model_free(nn_model_t *m);
const char *const *nn_model_names(void);        /* NULL-terminated */

const char *nn_model_name(const nn_model_t *m);
/* Input shape of one sample (c, h, w) and number of classes. */
void nn_model_input_shape(const nn_model_t *m, int *c, int *h, int *w);
int nn_model_num_classes(const nn_model_t *m);

size_t nn_model_num_params(const nn_model_t *m);  /* trained floats (PyTorch's count) */
/* The parameters and their gradients, each nn_model_param_len() floats: every parameter
   slice starts at a multiple of NN_PARAM_ALIGN elements (so device copies in any
   precision are aligned for cuDNN and cuBLAS), with zeros between slices that stay zero
   under every optimizer. Size optimizers, broadcasts and allreduces by param_len. */
#define NN_PARAM_ALIGN 64
size_t nn_model_param_len(const nn_model_t *m);
float *nn_model_params(nn_model_t *m);
float *nn_model_grads(nn_model_t *m);
size_t nn_model_num_buffers(const nn_model_t *m);
float *nn_model_buffers(nn_model_t *m);           /* running statistics */
int nn_model_num_slices(const nn_model_t *m);
const nn_slice_t *nn_model_slice(const nn_model_t *m, int i);  /* state_dict order */
/* Where each non-empty parameter begins in params[] / grads[], strictly ascending, into
   starts (room for every slice: nn_model_num_slices); returns how many (starts NULL:
   only counts). For gradient buckets that end at parameter boundaries
   (hvd_grad_buckets_set_params). */
size_t nn_model_param_starts(const nn_model_t *m, size_t *starts);
int64_t *nn_model_counters(nn_model_t *m);        /* num_batches_tracked values */

/* Forward a batch of n <= cfg.batch samples x[n][c][h][w]. training selects batch
   statistics for batch norm and enables dropout. The logits stay inside the model. */
nn_status_t nn_model_forward(nn_model_t *m, const float *x, int n, int training);
const float *nn_model_logits(const nn_model_t *m);  /* [n][num_classes] of the last forward */
/* Training-mode forward passes so far. Dropout masks are drawn from (seed, this count),
   so a checkpoint saves it and a resumed run sets it back to draw the same masks. */
uint64_t nn_model_dropout_step(const nn_model_t *m);
void nn_model_set_dropout_step(nn_model_t *m, uint64_t step);
/* Softmax cross-entropy of the last forward against labels; prepares backward. */
nn_status_t nn_model_loss(nn_model_t *m, const int32_t *labels, float *loss, int *correct);

/* Called during backward each time more gradients are final. Parameters are laid out
   in forward order and backward runs in reverse, so the final region only grows
   downwards: every gradient at offset >= ready_from is final and will not change again
   in this pass. Lets a training loop start allreduces of gradient buckets while
   backward goes on. */
typedef void (*nn_grad_ready_fn)(void *ctx, size_t ready_from);
/* Zeroes the gradients, then back-propagates the last loss. on_ready may be NULL. */
nn_status_t nn_model_backward(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx);
/* The same, adding to the gradients there are instead of zeroing them first (gradient
   accumulation over several batches, as PyTorch's .grad). NN_ERR_UNSUPPORTED for a
   model on the GPU in fp16/bf16 or channels-last, whose backward overwrites. */
nn_status_t nn_model_backward_accumulate(nn_model_t *m, nn_grad_ready_fn on_ready, void *ctx);

/* ---- where a model lives ----
   A model is built on the CPU; nn_model_to_device moves it to a GPU (a build with CUDA
   and a device: see nn_cuda.h), after which forward, loss, backward, the gradients and
   the optimizer step (nn_model_optim_*) run there without host round trips. The host
   arrays (nn_model_params, nn_model_grads, nn_model_buffers, nn_model_optim_state) are
   then a mirror: nn_model_sync_to_host refreshes it (before saving, printing or
   broadcasting from it), nn_model_sync_to_device pushes it (after loading or editing
   it). On the CPU the host arrays are the model itself and both syncs do nothing, so
   a training loop written against this section runs unchanged on either device.
   Counters (nn_model_counters) always live on the host. */
/* Moves m to `device` with its parameters, buffers and optimizer (state included).
   NN_DEVICE_CPU on a model on the CPU does nothing; back from a GPU is
   NN_ERR_UNSUPPORTED; NN_DEVICE_CUDA without CUDA or a device is NN_ERR_UNSUPPORTED. */
nn_status_t nn_model_to_device(nn_model_t *m, nn_device_t device);
nn_device_t nn_model_device(const nn_model_t *m);
/* The parameters and gradients where the model computes with them, param_len floats
   each, in the layout of nn_model_params: device memory on a GPU, the host arrays on
   the CPU. Hand nn_model_grads_home to the gradient allreduce. */
float *nn_model_params_home(nn_model_t *m);
float *nn_model_grads_home(nn_model_t *m);
/* Host arrays <-> the device copies: params, buffers and the optimizer state and step.
   Wait for the GPU. sync_to_device pushes the whole mirror, the optimizer state
   included: after steps on the GPU, refresh it with sync_to_host before editing any of
   it, or the device's newer state is overwritten with the older host copy. */
nn_status_t nn_model_sync_to_host(nn_model_t *m);
nn_status_t nn_model_sync_to_device(nn_model_t *m);
/* Sets every gradient to zero (a step with no samples still joins the allreduce). */
nn_status_t nn_model_zero_grads(nn_model_t *m);
/* Multiplies gradients [from, to) by factor where they live: for a training loop that
   weights a rank's uneven last batch; callable from the grad-ready callback for the
   range it just announced (on a GPU the scaling is enqueued before the allreduce). */
nn_status_t nn_model_scale_grads(nn_model_t *m, size_t from, size_t to, float factor);
/* The current loss scale and how many updates were skipped for inf/NaN gradients so far
   (1 and 0 unless the model runs in fp16/bf16 on a GPU). Waits for the GPU: for logs,
   not for every step. */
nn_status_t nn_model_loss_scale(nn_model_t *m, float *scale, int64_t *skipped_steps);

/* ---- mixed precision (models on the CUDA device only) ----
   fp16/bf16: activations, convolution and GEMM inputs in half precision with float32
   accumulation (tensor cores); float32 master weights, gradients (what hvd reduces),
   batch-norm statistics and optimizer state. The loss is scaled before backward so that
   small float16 gradients do not flush to zero; nn_model_optim_step unscales them,
   skips the update when any is inf/NaN and adapts the scale (PyTorch's GradScaler
   rules), all on the device without waiting for it. */
typedef enum { NN_PRECISION_FP32 = 0, NN_PRECISION_FP16 = 1, NN_PRECISION_BF16 = 2 }
    nn_precision_t;
typedef struct {
  nn_precision_t precision;
  float init_scale;      /* 0: 65536 for fp16, 1 for bf16                            */
  float growth_factor;   /* 0: 2                                                    */
  float backoff_factor;  /* 0: 0.5                                                  */
  int growth_interval;   /* 0: 2000 finite steps before the scale grows              */
  int static_scale;      /* 1: keep init_scale (default for bf16, whose range is fp32's) */
  int channels_last;     /* 1: activations NHWC on the device (PyTorch's channels_last,
                            what tensor-core convolutions prefer); any precision */
} nn_precision_config_t;
/* Records the precision and layout; call before nn_model_to_device (NN_ERR_ARG after
   it). A model that stays on the CPU computes in float32 NCHW only: its forward then
   fails with NN_ERR_UNSUPPORTED. NULL cfg means fp32 NCHW. */
nn_status_t nn_model_set_precision(nn_model_t *m, const nn_precision_config_t *cfg);
nn_precision_t nn_model_precision(const nn_model_t *m);
const char *nn_precision_name(nn_precision_t p);    /* "fp32", "fp16", "bf16" */

/* ---- layer ranges (nn/model_range.c): a pipeline stage runs layers [first, last) of
   the same model ----
   forward_range reads x, the output of layer first - 1 for n samples (the model input
   when first is 0), and runs the range; the result is nn_model_layer_out(m, last - 1).
   backward_range goes back from dy, the gradient of that output (NULL: the loss's, for
   a range that ends with the last layer, after nn_model_loss), ADDS the range's
   parameter gradients (zero them once per step: nn_model_zero_grads) and leaves the
   gradient of its input in nn_model_range_input_grad(m, first) (NULL when first is 0 or
   nobody wants it). Models on the CPU only (NN_ERR_UNSUPPORTED on a GPU). A range of a
   model gives exactly what the same layers give inside nn_model_forward/backward. */
nn_status_t nn_model_forward_range(nn_model_t *m, int first, int last, const float *x, int n,
                                   int training);
nn_status_t nn_model_backward_range(nn_model_t *m, int first, int last, const float *dy,
                                    nn_grad_ready_fn on_ready, void *ctx);
float *nn_model_layer_out(nn_model_t *m, int i);        /* host; NULL on a GPU */
size_t nn_model_layer_out_size(const nn_model_t *m, int i);  /* floats per sample */
float *nn_model_range_input_grad(nn_model_t *m, int first);
/* Whether the model may be cut before layer k (0 < k < layers): no layer from k on reads
   a layer before k - 1 (a residual connection across k forbids it). */
int nn_model_range_cut_ok(const nn_model_t *m, int k);
/* The parameters of layers [first, last): params[*begin .. *end) (empty: both 0). */
void nn_model_range_params(const nn_model_t *m, int first, int last, size_t *begin,
                           size_t *end);
/* The batch-norm running statistics and counters of layers [first, last):
   buffers[*begin .. *end) and counters[*cbegin .. *cend) (empty: both 0). */
void nn_model_range_buffers(const nn_model_t *m, int first, int last, size_t *begin,
                            size_t *end, int *cbegin, int *cend);
/* Activation stashing: what the range's backward reads after the last forward (n
   samples) goes to buf (stash_bytes(n) bytes) and comes back with unstash, so several
   micro-batches can be in flight on one model. */
size_t nn_model_range_stash_bytes(nn_model_t *m, int first, int last, int n);
nn_status_t nn_model_range_stash(nn_model_t *m, int first, int last, void *buf);
nn_status_t nn_model_range_unstash(nn_model_t *m, int first, int last, const void *buf);
/* Zero-copy stashing: an activation set is buffers like the ones the range's backward
   reads (as stash_bytes: its input, outputs, batch-norm statistics, masks, the loss's
   gradient) for up to n samples, with the state of the micro-batch they hold.
   nn_model_range_use makes the range run in set a (NULL: the model's own buffers
   again): the micro-batch of the set in use stays in that set, and a's comes back,
   with no copy, so each micro-batch in flight keeps its own set (a set of another
   range of the model may be in use: it keeps its micro-batch). A range forward of
   more samples than the set holds fails; restore the model's buffers (NULL) before
   any other use of the model, and free a set only when it is not in use. */
typedef struct nn_range_acts nn_range_acts_t;
nn_status_t nn_range_acts_create(nn_model_t *m, int first, int last, int n,
                                 nn_range_acts_t **out);
nn_status_t nn_model_range_use(nn_model_t *m, int first, int last, nn_range_acts_t *a);
void nn_range_acts_free(nn_range_acts_t *a);

/* Per-layer timing (seconds of the last forward/backward), for profiles. */
int nn_model_num_layers(const nn_model_t *m);
const char *nn_model_layer_name(const nn_model_t *m, int i);
void nn_model_layer_times(const nn_model_t *m, int i, double *forward_s, double *backward_s);

/* safetensors: a JSON header and raw little-endian data, PyTorch's names and layouts
   (num_batches_tracked as I64 scalars), so strict loading works both ways. Load checks
   that every tensor of the model is present with the right dtype and shape, and that
   the file has no others; on any failure the model is left unchanged. */
nn_status_t nn_model_save_safetensors(const nn_model_t *m, const char *path);
nn_status_t nn_model_load_safetensors(nn_model_t *m, const char *path);

/* ---- safetensors files (generic) ----
   The format: 8-byte little-endian header length, a JSON object mapping each tensor name
   to {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional "__metadata__"
   object of strings), then the raw little-endian data. Used for model weights and for
   the test fixtures. */
typedef enum { NN_ST_F32, NN_ST_F64, NN_ST_F16, NN_ST_BF16, NN_ST_I8, NN_ST_U8,
               NN_ST_I32, NN_ST_I64 } nn_st_dtype_t;
#define NN_ST_MAX_DIMS 8
typedef struct {
  char name[128];
  nn_st_dtype_t dtype;
  int ndim;
  int64_t shape[NN_ST_MAX_DIMS];
  size_t nbytes;
  void *data;            /* reading: points into the file's blob; writing: caller's */
} nn_st_tensor_t;
/* One "__metadata__" entry: the format allows string keys and string values only. */
typedef struct {
  const char *key, *value;
} nn_st_meta_t;
typedef struct {
  int count;
  nn_st_tensor_t *tensors;
  void *blob;            /* owned by the file after nn_st_read */
  int meta_count;        /* "__metadata__" entries, in the file's order (0: none)       */
  const nn_st_meta_t *meta; /* owned by the file after nn_st_read (nn_st_free)         */
  void *meta_blob;       /* the array and its strings, one allocation                   */
} nn_st_file_t;
/* Reads and validates the whole file (header JSON, dtypes, shapes against byte ranges,
   ranges inside the file, no overlaps; "__metadata__" an object of strings, no key
   twice): a corrupt or truncated file is NN_ERR_FORMAT with a message naming the file
   and what is wrong. */
nn_status_t nn_st_read(const char *path, nn_st_file_t *f);
const nn_st_tensor_t *nn_st_find(const nn_st_file_t *f, const char *name);
/* The value of a "__metadata__" key, or NULL when the file has none. */
const char *nn_st_meta_get(const nn_st_file_t *f, const char *key);
void nn_st_free(nn_st_file_t *f);
/* Writes to path.tmp, fsyncs, renames over path: a crash never leaves a half file. */
nn_status_t nn_st_write(const char *path, const nn_st_tensor_t *tensors, int count);
/* The same with a "__metadata__" object of meta_count entries (keys non-empty, no key
   twice; meta_count 0: none, as nn_st_write). */
nn_status_t nn_st_write_meta(const char *path, const nn_st_tensor_t *tensors, int count,
                             const nn_st_meta_t *meta, int meta_count);
size_t nn_st_dtype_size(nn_st_dtype_t dtype);
/* nn_model_save_safetensors with a "__metadata__" object (what a reader needs to feed
   the model: train --export records its input shape and normalisation there). */
nn_status_t nn_model_save_safetensors_meta(const nn_model_t *m, const char *path,
                                           const nn_st_meta_t *meta, int meta_count);

/* ---- ONNX models (nn/onnx_import.c, nn/onnx_export.c; protobuf-c) ----
   nn_model_from_onnx builds a model from an ONNX file (opsets 11 to 17): one float
   input [N, C, H, W], one output [N, classes] (the logits; a Softmax or LogSoftmax that
   ends the graph is left out, as nn trains with a softmax cross-entropy). The ops of
   image classifiers are supported (docs/onnx.md lists them); an unsupported op or
   attribute is NN_ERR_UNSUPPORTED naming the node, a corrupt file NN_ERR_FORMAT. The
   initializers are the starting weights and the tensors keep their names. cfg: batch
   and seed as for nn_model_create; in_* and num_classes 0 (or the graph's). A build
   without protobuf-c (PROTOBUF=none) returns NN_ERR_UNSUPPORTED.
   nn_model_save_onnx writes m as an inference graph (opset 13; batch norm with its
   running statistics, dropout left out) with the tensors' names, the input "input"
   [N, C, H, W] and the output "logits" [N, classes]. On the GPU sync to host first. */
nn_status_t nn_model_from_onnx(nn_model_t **out, const char *path,
                               const nn_model_config_t *cfg);
nn_status_t nn_model_save_onnx(const nn_model_t *m, const char *path);
/* The same with metadata_props (key, value strings: what a reader needs to feed the
   model, as nn_model_save_safetensors_meta records). */
nn_status_t nn_model_save_onnx_meta(const nn_model_t *m, const char *path,
                                    const nn_st_meta_t *meta, int meta_count);
/* A model from a built-in name (nn_model_create) or, for a name ending in ".onnx", from
   that file (nn_model_from_onnx): what --model and --model-file name. */
nn_status_t nn_model_create_from(nn_model_t **out, const char *model,
                                 const nn_model_config_t *cfg);
int nn_model_source_is_onnx(const char *model);

/* ---- optimizers ---- */
typedef enum { NN_OPTIM_SGD, NN_OPTIM_ADAM, NN_OPTIM_ADAMW, NN_OPTIM_RMSPROP } nn_optim_kind_t;

typedef struct {
  nn_optim_kind_t kind;
  float momentum;        /* SGD, RMSprop */
  int nesterov;          /* SGD */
  float weight_decay;    /* SGD, Adam, RMSprop: L2 added to the gradient; AdamW: decoupled */
  float beta1, beta2, eps; /* Adam/AdamW (0: PyTorch defaults 0.9, 0.999, 1e-8). RMSprop:
                              beta2 is its alpha, the decay of the mean square (0: 0.99),
                              and eps its eps (0: 1e-8), as torch.optim.RMSprop's */
} nn_optim_config_t;

typedef struct nn_optim nn_optim_t;
/* Same update rules as torch.optim.SGD / Adam / AdamW / RMSprop (not centred). RMSprop
   runs on the CPU only: a model on the GPU refuses it (NN_ERR_UNSUPPORTED). */
nn_status_t nn_optim_create(nn_optim_t **out, const nn_optim_config_t *cfg, size_t count);
void nn_optim_free(nn_optim_t *o);
nn_status_t nn_optim_step(nn_optim_t *o, float *params, const float *grads, float lr);
/* State for checkpoints: the floats (SGD: momentum buffer; Adam: m then v; RMSprop: the
   mean square then the momentum buffer) and the step count. */
float *nn_optim_state(nn_optim_t *o, size_t *count);
int64_t *nn_optim_step_count(nn_optim_t *o);

/* ---- a model's own optimizer, where its parameters live ----
   nn_model_optim_create gives m an optimizer over its param_len parameters (replacing
   any previous one; before or after nn_model_to_device: a move takes it along).
   nn_model_optim_step applies it to the home parameters and gradients: on a GPU one
   fused kernel, and in fp16/bf16 it also divides the gradients by the loss scale, skips
   the update when any is inf or NaN and adapts the scale (PyTorch's GradScaler rules),
   all enqueued on nn's stream without waiting. Call it after the gradients are reduced.
   nn_model_optim_state / _step_count: the state as nn_optim_state, in host memory
   (on a GPU the mirror that nn_model_sync_to_host refreshes and nn_model_sync_to_device
   pushes), for checkpoints and broadcasts; NULL (count 0) before an optimizer exists. */
nn_status_t nn_model_optim_create(nn_model_t *m, const nn_optim_config_t *cfg);
nn_status_t nn_model_optim_step(nn_model_t *m, float lr);
float *nn_model_optim_state(nn_model_t *m, size_t *count);
int64_t *nn_model_optim_step_count(nn_model_t *m);

/* ---- frozen layers (transfer learning; nn/model_freeze.c) ----
   A frozen layer keeps its parameters: backward computes no gradient for it, the
   optimizer holds no state for it and never changes it, and a frozen batch norm
   normalises with its running statistics (and leaves them as they are) in training too,
   Keras' rule for trainable=False. nn freezes the bottom of a model: every frozen layer
   comes before every trainable one, so backward stops below the lowest trainable layer
   and the trainable parameters are one range, params[nn_model_trainable_from(m),
   param_len): all the optimizer covers (nn_model_optim_state counts only it) and all a
   training loop needs to allreduce (the gradients below it stay zero).
   nn_model_set_frozen freezes exactly the layers that own a tensor matching one of the
   glob patterns (fnmatch over state_dict names: "features.*", "layer[12].*") and
   unfreezes every other; count 0 unfreezes all. An optimizer the model has is resized:
   the state of layers that stay trainable is kept, that of newly trainable ones starts
   at zero, the step count goes on (on a GPU: nn_model_sync_to_host first, the state is
   taken from the host mirror). NN_ERR_ARG, with nothing changed, when a pattern matches
   no tensor, a frozen layer would lie above a trainable one (the message names both)
   or nothing would be left to train. */
nn_status_t nn_model_set_frozen(nn_model_t *m, const char *const *patterns, int count);
/* The same, freezing the layers whose parameters lie below params[from]: from is 0 or a
   value of nn_model_trainable_from (how a checkpoint restores its frozen set). */
nn_status_t nn_model_set_trainable_from(nn_model_t *m, size_t from);
size_t nn_model_trainable_from(const nn_model_t *m);   /* 0: nothing frozen */
int nn_model_slice_frozen(const nn_model_t *m, int i);  /* slice i's layer is frozen */

/* ---- learning-rate schedules ---- */
typedef enum { NN_LR_CONSTANT, NN_LR_STEP, NN_LR_COSINE } nn_lr_kind_t;
typedef struct {
  nn_lr_kind_t kind;
  float base_lr;
  float warmup_epochs;   /* linear warm-up from warmup_start_lr to base_lr (0: none)    */
  float warmup_start_lr; /* Horovod: the unscaled lr, base_lr = lr * ranks             */
  float step_epochs;     /* NN_LR_STEP: multiply by gamma every step_epochs             */
  float gamma;
  float total_epochs;    /* NN_LR_COSINE: reaches min_lr at total_epochs               */
  float min_lr;
} nn_lr_schedule_t;
/* Learning rate at a fractional epoch (epoch + step / steps_per_epoch). */
float nn_lr_at(const nn_lr_schedule_t *s, double epoch);

#ifdef __cplusplus
}
#endif

#endif /* NN_H */
