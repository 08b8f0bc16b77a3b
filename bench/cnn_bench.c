/* bench/cnn_bench: image-classification training throughput in the manner of
   tf_cnn_benchmarks (same flags, same output), on synthetic data (or a real data set,
   --data_name), with gradients averaged through the hvd runtime (--variable_update
   horovod) or not at all (--variable_update none: independent replicas, the
   no-communication ceiling; --variable_update barrier: the same, waiting for each other
   with hvd_barrier after every step, which is what the skew between ranks alone costs a
   synchronous scheme); --forward_only times inference instead (forward in
   evaluation mode, no backward, no allreduce, no update).

   Each step: forward, loss, backward; with horovod, gradient buckets are allreduced as
   soon as backward has finished them (hvd_grad_buckets_ready from nn's grad-ready
   callback) and waited on just before the optimizer step. The input is one synthetic
   batch made once per rank and reused every step, so no input pipeline is timed and the
   loss goes down. With a real data set (--data_name fashion_mnist, mnist, cifar10, read
   by train's loaders) each rank cuts the batches it will use from its shard before the
   clock starts (normalised as train normalises them) and takes them in turn, so no input
   pipeline is timed there either.

   Optimizers as tf_cnn_benchmarks': sgd is plain gradient descent, momentum is Nesterov
   momentum (its MomentumOptimizer with use_nesterov=True), adam and rmsprop take its
   --adam_* and --rmsprop_* flags. nn's update rules are torch.optim's: RMSprop's eps is
   added outside the square root and its mean square starts at 0 (TensorFlow's puts eps
   inside and starts at 1), the same work per element.

   --device gpu (a build with CUDA, on a machine with a GPU): local rank i drives GPU i;
   the model, its gradients and the optimizer state live in device memory, the gradient
   buckets are allreduced there (NCCL), and the synthetic batch is copied to the device
   once, as tf_cnn_benchmarks keeps its synthetic images on the GPU. --use_fp16 /
   --use_bf16 select mixed precision (half-precision activations and tensor-core math,
   float32 master weights and gradients, dynamic loss scaling for fp16), --allow_tf32
   TF32 math for float32. Everything the tf_cnn_benchmarks format does not have (which
   GPU, why there is none) goes to stderr so stdout keeps that format.

   How the timed steps are timed. The clock starts after the warm-up steps, a wait for
   the GPU (--device gpu) and a barrier, and stops after the last timed step, one more
   wait for the GPU and a barrier: "total images/sec" is ranks x steps x batch over that
   wall time (async parameter servers, --cross_replica_sync false: the sum of each
   worker's steps x batch over its own time to its last step, as no worker waits for
   another). On the CPU every step is done when train_step returns, so each step is
   timed alone. On the GPU kernels run asynchronously and a step does not wait for them
   (the loss is fetched only for the steps whose Step line prints it; warm-up steps take
   none): rank 0 waits for the GPU only at its display steps, and every step of the
   window since the previous display gets that window's mean step time (window time /
   its steps), from which the Step line's figures are computed as on the CPU. This is
   how scripts/gpu_check/torch_bench.py times PyTorch (synchronize after the warm-up,
   clock, timed steps, synchronize, clock), plus a wait at each display step. With
   --trace_file every GPU step waits for the GPU (after its loss and at its end), as its
   phase times need, and is timed alone.

   Usage: mpirun -np 2 build/cnn_bench --model resnet20 --batch_size 64 --num_batches 20 */
#include "hvd/hvd.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"
#include "data/data.h"
#include "train/data.h"
#include "train/replica.h"
#include "train/ps_update.h"
#include "train/step.h"
#include "util/clock.h"
#include "util/flags.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  const char *model;
  int batch_size;            /* per device (rank) */
  int num_batches;
  int num_warmup_batches;
  int display_every;
  const char *device;
  int gpu;                   /* --device gpu */
  const char *variable_update;
  int use_fp16;              /* --device gpu: float16 mixed precision */
  int use_bf16;              /* --device gpu: bfloat16 mixed precision */
  int allow_tf32;            /* --device gpu: TF32 tensor-core math for float32 */
  const char *data_format;
  const char *optimizer;
  float learning_rate;
  float momentum;
  float weight_decay;
  float adam_beta1, adam_beta2, adam_epsilon;
  float rmsprop_decay, rmsprop_momentum, rmsprop_epsilon;
  int num_gpus;              /* per process: 1 (one process per GPU) */
  int forward_only;          /* inference: forward only */
  int print_training_accuracy;
  const char *data_name;     /* synthetic, or a real data set (train's loaders) */
  const char *data_dir;      /* NULL: train's default directory of data_name */
  int data_threads;          /* --data_name imagenet: decode threads */
  int threads;               /* 0: nn's default */
  double bucket_mb;
  double first_bucket_mb;
  int overlap;
  int fp16_allreduce;
  uint64_t seed;
  const char *trace_file;    /* rank 0's compute phases, Chrome trace; NULL: none */
  /* --variable_update parameter_server (train/ps_update.h), as tf_cnn_benchmarks */
  const char *cross_replica_sync;   /* "true": ps-sync; "false": ps-async */
  const char *ps_local_aggregation;  /* auto | on | off */
  int num_ps;                /* dedicated servers (ranks 0..K-1); 0: colocated */
  int max_staleness;         /* async: -1 unbounded */
  int straggler_delay_ms, straggler_rank;   /* that rank sleeps that long each step */
} options_t;

/* The flags' defaults (tf_cnn_benchmarks' where it has the flag). */
static options_t default_options(void) {
  return (options_t){
      .model = "trivial", .batch_size = 32, .num_batches = 100, .num_warmup_batches = 10,
      .display_every = 10, .device = "cpu", .variable_update = "horovod", .use_fp16 = 0,
      .data_format = "NCHW", .optimizer = "sgd", .learning_rate = 0.01f,
      .momentum = 0.9f, .weight_decay = 4e-5f, .adam_beta1 = 0.9f, .adam_beta2 = 0.999f,
      .adam_epsilon = 1e-8f, .rmsprop_decay = 0.9f, .rmsprop_momentum = 0.9f,
      .rmsprop_epsilon = 1.0f, .num_gpus = 1, .forward_only = 0,
      .print_training_accuracy = 0, .data_name = "synthetic", .data_dir = NULL,
      .threads = 0, .bucket_mb = 25, .first_bucket_mb = 1, .overlap = 1,
      .fp16_allreduce = 0, .seed = 1, .trace_file = NULL, .data_threads = 2,
      .cross_replica_sync = "true", .ps_local_aggregation = "auto",
      .num_ps = 0, .max_staleness = -1, .straggler_delay_ms = 0, .straggler_rank = -1};
}

static const char *const DEVICES[] = {"cpu", "gpu", NULL};
static const char *const BOOLS[] = {"true", "false", NULL};
static const char *const AGGREGATIONS[] = {"auto", "on", "off", NULL};
static const char *const UPDATES[] = {"horovod", "none", "barrier", "parameter_server", NULL};
static const char *const FORMATS[] = {"NCHW", "NHWC", NULL};
static const char *const OPTIMIZERS[] = {"momentum", "sgd", "rmsprop", "adam", NULL};
/* --data_name: tf_cnn_benchmarks spells names with '_', train with '-'; both are taken.
   imagenet: JPEG files or TFRecords in --data_dir, streamed through data/'s pipeline. */
static const char *const DATA_NAMES[] = {"synthetic", "fashion_mnist", "fashion-mnist",
                                         "mnist", "cifar10", "imagenet", NULL};

/* The flags (tf_cnn_benchmarks' names, '_' spelling), writing into o: --help builds the
   table over default_options() to show the defaults. */
enum { NFLAGS = 41 };
static void flag_table(options_t *o, util_flag_t table[NFLAGS]) {
  const util_flag_t t[] = {
      {"model", UTIL_FLAG_CHOICE, &o->model, .choices = nn_model_names(), .metavar = "NAME",
       .help = "the network"},
      {"model_file", UTIL_FLAG_STRING, &o->model, .metavar = "FILE.onnx", .def = "none",
       .help = "instead of --model: an ONNX graph (torch.onnx.export), its input shape and "
               "classes from the graph (docs/onnx.md)"},
      {"batch_size", UTIL_FLAG_INT, &o->batch_size, .min = 1, .max = 1e9,
       .help = "images per device (rank) per step"},
      {"num_batches", UTIL_FLAG_INT, &o->num_batches, .min = 1, .max = 1e9,
       .help = "timed steps"},
      {"num_warmup_batches", UTIL_FLAG_INT, &o->num_warmup_batches, .min = 0, .max = 1e9,
       .help = "untimed steps first"},
      {"display_every", UTIL_FLAG_INT, &o->display_every, .min = 1, .max = 1e9,
       .help = "print a Step line every N steps"},
      {"device", UTIL_FLAG_CHOICE, &o->device, .choices = DEVICES,
       .help = "gpu needs a build with CUDA and a GPU: local rank i uses GPU i"},
      {"variable_update", UTIL_FLAG_CHOICE, &o->variable_update, .choices = UPDATES,
       .help = "horovod: average gradients over ranks; none: independent replicas, the "
               "no-communication ceiling; barrier: independent replicas that wait for each "
               "other after every step (what any synchronous scheme pays for the ranks' "
               "skew)"},
      {"use_fp16", UTIL_FLAG_BOOL, &o->use_fp16,
       .help = "mixed precision with float16 (--device gpu only): float16 activations and "
               "tensor-core math, float32 weights and gradients, dynamic loss scaling"},
      {"use_bf16", UTIL_FLAG_BOOL, &o->use_bf16,
       .help = "the same with bfloat16 (no loss scaling needed)"},
      {"allow_tf32", UTIL_FLAG_BOOL, &o->allow_tf32,
       .help = "TF32 tensor-core math for float32 convolutions and GEMMs (--device gpu "
               "only; off: exact float32)"},
      {"data_format", UTIL_FLAG_CHOICE, &o->data_format, .choices = FORMATS,
       .help = "activation layout (NHWC, channels last, needs --device gpu)"},
      {"optimizer", UTIL_FLAG_CHOICE, &o->optimizer, .choices = OPTIMIZERS,
       .help = "as tf_cnn_benchmarks: sgd plain gradient descent, momentum Nesterov "
               "momentum (--momentum), rmsprop (--rmsprop_*; CPU only), adam (--adam_*)"},
      {"init_learning_rate", UTIL_FLAG_FLOAT, &o->learning_rate, .min = 0, .max = INFINITY,
       .help = "learning rate"},
      {"momentum", UTIL_FLAG_FLOAT, &o->momentum, .min = 0, .max = INFINITY,
       .help = "momentum of --optimizer momentum"},
      {"adam_beta1", UTIL_FLAG_FLOAT, &o->adam_beta1, .min = 1e-9, .max = 0.999999,
       .help = "Adam's beta1"},
      {"adam_beta2", UTIL_FLAG_FLOAT, &o->adam_beta2, .min = 1e-9, .max = 0.999999,
       .help = "Adam's beta2"},
      {"adam_epsilon", UTIL_FLAG_FLOAT, &o->adam_epsilon, .min = 1e-30, .max = INFINITY,
       .help = "Adam's epsilon"},
      {"rmsprop_decay", UTIL_FLAG_FLOAT, &o->rmsprop_decay, .min = 1e-9, .max = 0.999999,
       .help = "RMSprop's decay of the mean square (torch.optim.RMSprop's alpha)"},
      {"rmsprop_momentum", UTIL_FLAG_FLOAT, &o->rmsprop_momentum, .min = 0, .max = INFINITY,
       .help = "RMSprop's momentum"},
      {"rmsprop_epsilon", UTIL_FLAG_FLOAT, &o->rmsprop_epsilon, .min = 1e-30, .max = INFINITY,
       .help = "RMSprop's epsilon"},
      {"weight_decay", UTIL_FLAG_FLOAT, &o->weight_decay, .min = 0, .max = INFINITY,
       .help = "L2 weight decay"},
      {"num_gpus", UTIL_FLAG_INT, &o->num_gpus, .min = 0, .max = 1e9,
       .help = "GPUs per process: 1 (Horovod's model, one process per GPU: start more "
               "ranks for more GPUs)"},
      {"forward_only", UTIL_FLAG_BOOL, &o->forward_only,
       .help = "time inference: forward in evaluation mode only, no backward, allreduce or "
               "update; the Step lines show top_1 and top_5 accuracy of the batch"},
      {"print_training_accuracy", UTIL_FLAG_BOOL, &o->print_training_accuracy,
       .help = "add the training batch's top_1 and top_5 accuracy to the Step lines"},
      {"data_name", UTIL_FLAG_CHOICE, &o->data_name, .choices = DATA_NAMES,
       .help = "synthetic (one random batch), or a real data set read by train's loaders "
               "from --data_dir (fashion_mnist, mnist, cifar10)"},
      {"data_dir", UTIL_FLAG_STRING, &o->data_dir, .metavar = "DIR",
       .def = "train's: /usr/share/datasets/<name>, cifar-10-batches-bin",
       .help = "directory of the --data_name files"},
      {"threads", UTIL_FLAG_INT, &o->threads, .min = 1, .max = 1e9,
       .def = "1 under a multi-rank launcher, else all cores",
       .help = "compute threads per rank"},
      {"bucket_mb", UTIL_FLAG_DOUBLE, &o->bucket_mb, .min = 1e-6, .max = INFINITY,
       .help = "gradient bucket size in MiB (25: PyTorch DDP's); buckets hold whole "
               "parameters, so one may be larger"},
      {"first_bucket_mb", UTIL_FLAG_DOUBLE, &o->first_bucket_mb, .min = 1e-6, .max = INFINITY,
       .help = "size of the first bucket submitted"},
      {"overlap", UTIL_FLAG_BOOL, &o->overlap,
       .help = "allreduce gradient buckets during backward; --no-overlap submits them all "
               "after backward"},
      {"fp16-allreduce", UTIL_FLAG_BOOL, &o->fp16_allreduce,
       .help = "cast gradients to float16 for the allreduce"},
      {"seed", UTIL_FLAG_U64, &o->seed, .help = "weights and synthetic data"},
      {"datasets_num_private_threads", UTIL_FLAG_INT, &o->data_threads, .min = 1, .max = 256,
       .help = "--data_name imagenet: image decode threads per rank"},
      {"trace_file", UTIL_FLAG_STRING, &o->trace_file, .metavar = "FILE",
       .help = "rank 0 writes its compute phases (forward, backward, allreduce wait, "
               "optimizer) of the timed steps as a Chrome trace (merge it with HVD_TIMELINE's "
               "file by scripts/cnn_bench_timeline.py); with --device gpu every step then "
               "waits for the GPU (phase times need it), so its images/sec is lower than "
               "without"},
      /* parameter servers */
      {"cross_replica_sync", UTIL_FLAG_CHOICE, &o->cross_replica_sync, .choices = BOOLS,
       .help = "--variable_update parameter_server: synchronous updates (false: each push "
               "applied on arrival)"},
      {"num_ps", UTIL_FLAG_INT, &o->num_ps, .min = 0, .max = 1 << 20, .def = "0: colocated",
       .help = "--variable_update parameter_server: ranks 0..K-1 only serve; 0: every rank "
               "serves a shard and works"},
      {"ps_local_aggregation", UTIL_FLAG_CHOICE, &o->ps_local_aggregation,
       .choices = AGGREGATIONS,
       .help = "--cross_replica_sync true: a host's workers sum their gradients before one "
               "push per host (auto: with --num_ps 0)"},
      {"max_staleness", UTIL_FLAG_INT, &o->max_staleness, .min = -1, .max = 1 << 20,
       .def = "-1: unbounded",
       .help = "--cross_replica_sync false: a worker more than S steps ahead waits"},
      {"straggler_delay_ms", UTIL_FLAG_INT, &o->straggler_delay_ms, .min = 0, .max = 3600000,
       .help = "--straggler_rank sleeps this long every step"},
      {"straggler_rank", UTIL_FLAG_INT, &o->straggler_rank, .min = -1, .max = 1 << 20,
       .def = "-1: none", .help = "the rank that --straggler_delay_ms slows down"},
  };
  _Static_assert(sizeof t / sizeof t[0] == NFLAGS, "NFLAGS is the number of flags");
  memcpy(table, t, sizeof t);
}

static util_flags_spec_t flag_spec(const util_flag_t *table) {
  return (util_flags_spec_t){
      .prog = "cnn_bench", .usage = "cnn_bench [flags]   (flags as tf_cnn_benchmarks)",
      .flags = table, .nflags = NFLAGS,
      .footer = "Environment: HVD_TIMELINE=file writes a Chrome-trace timeline of the "
                "allreduces.\n"};
}

static void usage(FILE *f) {
  options_t defaults = default_options();
  util_flag_t table[NFLAGS];
  flag_table(&defaults, table);
  util_flags_spec_t spec = flag_spec(table);
  util_flags_usage(&spec, f);
}

/* Parses the flags into o (main's defaults), then refuses what parses but this build or
   machine cannot run; prints and exits on --help and on any error. */
static void parse_args(int argc, char **argv, options_t *o) {
  util_flag_t table[NFLAGS];
  flag_table(o, table);
  util_flags_spec_t spec = flag_spec(table);
  char err[512];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    usage(stdout);
    exit(0);
  }
  if (rc != UTIL_FLAGS_OK) {
    fprintf(stderr, "cnn_bench: %s\n", err);
    exit(2);
  }

  /* Values that parse but this build cannot run. */
  o->gpu = strcmp(o->device, "gpu") == 0;
  if (o->num_gpus != 1) {
    fprintf(stderr, "cnn_bench: --num_gpus %d: hvd drives one GPU per process (Horovod's "
                    "model; tf_cnn_benchmarks too wants --num_gpus=1 with --variable_update "
                    "horovod); start one process per GPU instead: mpirun -np N cnn_bench "
                    "--device gpu (local rank i uses GPU i)\n", o->num_gpus);
    exit(2);
  }
  if (strcmp(o->data_name, "imagenet") == 0 && !o->data_dir) {
    fprintf(stderr, "cnn_bench: --data_name imagenet needs --data_dir DIR (TFRecords "
                    "DIR/train-* or JPEG folders DIR/train/CLASS/*: docs/data.md)\n");
    exit(2);
  }
  if (o->data_dir && strcmp(o->data_name, "synthetic") == 0) {
    fprintf(stderr, "cnn_bench: --data_dir %s: give the data set too, --data_name "
                    "fashion_mnist, mnist or cifar10 (synthetic data reads no files)\n",
            o->data_dir);
    exit(2);
  }
  if (o->gpu && strcmp(o->optimizer, "rmsprop") == 0) {
    fprintf(stderr, "cnn_bench: --optimizer rmsprop runs on the CPU only (nn has SGD, "
                    "momentum and Adam kernels on the GPU); use --device cpu or another "
                    "optimizer\n");
    exit(2);
  }
  if (o->use_fp16 && o->use_bf16) {
    fprintf(stderr, "cnn_bench: --use_fp16 and --use_bf16 together: choose one precision\n");
    exit(2);
  }
  /* On the CPU nn computes in float32 only: say so before any work is done. */
  if (!o->gpu && (o->use_fp16 || o->use_bf16)) {
    fprintf(stderr, "cnn_bench: %s: mixed precision needs --device gpu (on the CPU nn "
                    "computes in float32; --fp16-allreduce compresses only the gradient "
                    "allreduce)\n", o->use_fp16 ? "--use_fp16" : "--use_bf16");
    exit(2);
  }
  if (!o->gpu && o->allow_tf32) {
    fprintf(stderr, "cnn_bench: --allow_tf32: TF32 is GPU tensor-core math; it needs "
                    "--device gpu\n");
    exit(2);
  }
  /* nn_cuda_available() only asks cudaGetDeviceCount (nothing in a build without CUDA),
     so it is safe before MPI is up; its info names the reason (no CUDA in this build,
     no device, driver too old). */
  if (o->gpu && !nn_cuda_available()) {
    fprintf(stderr, "cnn_bench: --device gpu: no usable GPU (%s); use --device cpu\n",
            nn_cuda_reason());
    exit(2);
  }
  if (!o->gpu && strcmp(o->data_format, "NHWC") == 0) {
    fprintf(stderr, "cnn_bench: --data_format NHWC needs --device gpu (channels-last "
                    "activations; on the CPU nn's layout is NCHW)\n");
    exit(2);
  }
}

/* fp32, tf32, fp16 or bf16: what the header and the gpu check call the run. */
static const char *precision_label(const options_t *o) {
  if (o->use_fp16) return "fp16";
  if (o->use_bf16) return "bf16";
  return o->allow_tf32 ? "tf32" : "fp32";
}


/* splitmix64: a seeded stream for the synthetic data. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/* Standard normal truncated to [-2, 2] (tf.truncated_normal: redraw outside 2 sigma). */
static float truncated_normal(uint64_t *s) {
  for (;;) {
    double u1 = uniform01(s), u2 = uniform01(s);
    if (u1 <= 0) continue;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    if (fabs(z) <= 2.0) return (float)z;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* tf_cnn_benchmarks' numbers over the step times so far: images/sec = batch / mean
   time; +/- = std of per-step images/sec over sqrt(n); jitter = 1.4826 * MAD. */
static void perf(const double *times, int n, int batch, double *mean, double *unc,
                 double *jitter) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += times[i];
  *mean = batch / (sum / n);
  double *speeds = malloc(sizeof(double) * (size_t)n);
  double ms = 0, var = 0;
  for (int i = 0; i < n; i++) ms += (speeds[i] = batch / times[i]);
  ms /= n;
  for (int i = 0; i < n; i++) var += (speeds[i] - ms) * (speeds[i] - ms);
  *unc = sqrt(var / n) / sqrt((double)n);
  double med = median(speeds, n);
  for (int i = 0; i < n; i++) speeds[i] = fabs(speeds[i] - med);
  *jitter = 1.4826 * median(speeds, n);
  free(speeds);
}

static int rank_g = 0;

static void fail_nn(const char *what, nn_status_t s) {
  fprintf(stderr, "cnn_bench: rank %d: %s failed: %s: %s\n", rank_g, what,
          nn_status_string(s), nn_last_error());
  exit(1);
}

static void fail_hvd(const char *what, hvd_status_t s) {
  fprintf(stderr, "cnn_bench: rank %d: %s failed: %s: %s\n", rank_g, what,
          hvd_status_string(s), hvd_last_error());
  exit(1);
}

/* The replica's settings (train/replica.h): tf_cnn_benchmarks' optimizers (see the top),
   none for inference; the broadcast and the buckets with --variable_update horovod. */
static train_replica_opts_t replica_opts(const options_t *o, const nn_model_config_t *cfg) {
  const int horovod = !strcmp(o->variable_update, "horovod");
  const int ps = !strcmp(o->variable_update, "parameter_server");
  train_replica_opts_t r = {.model = o->model, .cfg = *cfg, .optimizer = !o->forward_only,
                            .broadcast = horovod || ps, .gpu = o->gpu, .tf32 = o->allow_tf32,
                            .buckets = horovod && !o->forward_only, .overlap = o->overlap};
  nn_optim_config_t *oc = &r.optim;
  oc->weight_decay = o->weight_decay;
  if (!strcmp(o->optimizer, "sgd")) {
    oc->kind = NN_OPTIM_SGD;
  } else if (!strcmp(o->optimizer, "momentum")) {
    oc->kind = NN_OPTIM_SGD;
    oc->momentum = o->momentum;
    oc->nesterov = o->momentum > 0;   /* nn's Nesterov needs momentum; 0 is plain SGD */
  } else if (!strcmp(o->optimizer, "adam")) {
    oc->kind = NN_OPTIM_ADAM;
    oc->beta1 = o->adam_beta1;
    oc->beta2 = o->adam_beta2;
    oc->eps = o->adam_epsilon;
  } else {
    oc->kind = NN_OPTIM_RMSPROP;
    oc->beta2 = o->rmsprop_decay;
    oc->momentum = o->rmsprop_momentum;
    oc->eps = o->rmsprop_epsilon;
  }
  /* zeros: nn's defaults (PyTorch GradScaler's) */
  r.precision.precision = o->use_fp16   ? NN_PRECISION_FP16
                          : o->use_bf16 ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
  r.precision.channels_last = strcmp(o->data_format, "NHWC") == 0;
  r.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
  r.first_bucket_bytes = (size_t)(o->first_bucket_mb * 1048576.0);
  r.compression = o->fp16_allreduce ? HVD_COMPRESSION_FP16 : HVD_COMPRESSION_NONE;
  r.op = HVD_AVERAGE;
  return r;
}

/* A failed set-up, said by the rank that saw it. */
static void replica_failed(const train_replica_t *r, int real_data) {
  switch (r->stage) {
  case TRAIN_REPLICA_CREATE:
    fail_nn(real_data ? "creating the model for --data_name's images" : "creating the model",
            r->nn_status);
    break;
  case TRAIN_REPLICA_OPTIMIZER: fail_nn("creating the optimizer", r->nn_status); break;
  case TRAIN_REPLICA_BROADCAST:
    fail_hvd(!strcmp(r->failed, "init.params") ? "broadcast of the initial weights"
             : !strcmp(r->failed, "init.buffers") ? "broadcast of the initial buffers"
                                                  : "broadcast of the initial counters",
             r->hvd_status);
    break;
  case TRAIN_REPLICA_PRECISION: fail_nn("setting the precision", r->nn_status); break;
  case TRAIN_REPLICA_DEVICE: fail_nn("moving the model to the GPU", r->nn_status); break;
  case TRAIN_REPLICA_BUCKETS: fail_hvd("creating the gradient buckets", r->hvd_status); break;
  default:
    fprintf(stderr, "cnn_bench: rank %d: %s\n", rank_g, r->err);
    exit(1);
  }
}

/* The phases of one step (train/step.h: forward+loss, backward, wait, update), seconds
   of util_now_s. */
typedef struct { double start[TRAIN_NUM_PHASES + 1]; } step_trace_t;

/* The batches a rank takes in turn: one synthetic batch, or nb batches cut from its
   shard of a real data set. */
typedef struct {
  int nb;
  size_t image_floats;           /* floats of one batch */
  float *images;                 /* nb batches, host memory */
  int32_t *labels;               /* nb batches, host memory */
  float *dev_images;             /* --device gpu: the same in device memory */
  int32_t *dev_labels;
} batches_t;

typedef struct {
  train_step_t step;             /* the model, its buckets (NULL without communication) */
  const float *images;           /* the nb batches: host memory, or device memory with */
  const int32_t *labels;         /* --device gpu                                      */
  const int32_t *host_labels;    /* the same labels in host memory, for the accuracy   */
  int nb;
  size_t image_floats;
  int batch;
  float lr;
  int barrier;                   /* --variable_update barrier: hvd_barrier after each step */
  data_stream_t *feed;           /* --data_name imagenet: the batches, one per step */
  float *feed_x;                 /* its batch in host memory (images: t->images) */
  int32_t *feed_y;
  double feed_s;                 /* seconds the steps waited for decoded batches */
  int straggler_us;              /* this rank sleeps that long each step (--straggler_*) */
  double own_s;                  /* this rank's timed steps, before the closing barrier */
  int step_rank;                 /* prints the Step lines: 0, or the first worker when
                                    dedicated parameter servers take ranks 0..K-1 */
  int64_t steps;                 /* steps taken (warm-up included) */
} trainer_t;

/* The batch of step k (0-based, warm-up included): the batches in turn. */
static const float *batch_images(const trainer_t *t, int64_t k) {
  return t->images + (size_t)(k % t->nb) * t->image_floats;
}
static const int32_t *batch_labels(const int32_t *labels, const trainer_t *t, int64_t k) {
  return labels + (size_t)(k % t->nb) * (size_t)t->batch;
}

/* ---- --data_name imagenet: real images streamed through data/'s pipeline ----
   Decode threads fill a bounded queue while the step computes; the step takes the next
   batch from it (RandomResizedCrop, flip, ImageNet's normalisation, as torchvision's
   ImageNet training) and the time it waits is the input pipeline's share of the step. */
static data_source_t imagenet_src;

static void feed_failed(const char *what, const char *err) {
  fprintf(stderr, "cnn_bench: rank %d: --data_name imagenet: %s: %s\n", hvd_rank(), what, err);
  exit(2);
}

static void feed_next(trainer_t *t) {
  char err[4800];
  const double t0 = util_now_s();
  if (data_stream_next(t->feed, t->feed_x, t->feed_y, err, sizeof err) != 0)
    feed_failed("reading a batch", err);
  if (t->images != t->feed_x) {   /* --device gpu: the batch goes up every step */
    nn_status_t s = nn_cuda_to_device((void *)t->images, t->feed_x,
                                      t->image_floats * sizeof(float));
    if (s == NN_OK)
      s = nn_cuda_to_device((void *)t->labels, t->feed_y, sizeof(int32_t) * (size_t)t->batch);
    if (s != NN_OK) fail_nn("copying the batch to the GPU", s);
  }
  t->feed_s += util_now_s() - t0;
}

/* The source and the model's input (3 x 224 x 224 unless the model says otherwise). */
static void imagenet_open(const options_t *o, nn_model_config_t *cfg) {
  char err[4800];
  if (!data_images_available(err, sizeof err)) feed_failed("this build", err);
  if (data_source_open_split(o->data_dir, 0, &imagenet_src, err, sizeof err) != 0)
    feed_failed("opening the data", err);
  /* TFRecords' classes are known only from their records: ImageNet's 1000. */
  cfg->num_classes = imagenet_src.num_classes > 0 ? imagenet_src.num_classes : 1000;
}

static void imagenet_batches(const options_t *o, trainer_t *t, batches_t *bt, int c, int h,
                             int rank, int size) {
  char err[4800];
  data_pipeline_opts_t po;
  data_pipeline_defaults(&po);
  po.image_size = h;
  po.channels = c == 1 ? 1 : 3;
  po.augment = 1;
  po.threads = o->data_threads;
  po.prefetch = 4;
  po.seed = o->seed;
  po.batch = o->batch_size, po.rank = rank, po.size = size;
  t->feed = data_stream_open(&imagenet_src, &po, err, sizeof err);
  if (!t->feed) feed_failed("starting the decode threads", err);
  bt->nb = 1;
  bt->image_floats = (size_t)o->batch_size * po.channels * h * h;
  bt->images = malloc(bt->image_floats * sizeof(float));
  bt->labels = malloc(sizeof(int32_t) * (size_t)o->batch_size);
  if (!bt->images || !bt->labels) feed_failed("allocating a batch", "out of memory");
  t->feed_x = bt->images;
  t->feed_y = bt->labels;
}

static void imagenet_report(const trainer_t *t, double feed_before, double wall) {
  double wait = t->feed_s - feed_before;
  printf("input pipeline: %.1f%% of the step time (%.2f s of %.2f s waiting for decoded "
         "batches, rank 0)\n", 100.0 * wait / wall, wait, wall);
  if (data_stream_skipped(t->feed) > 0)
    printf("--skip-bad-images: %llu bad image(s) left out\n",
           (unsigned long long)data_stream_skipped(t->feed));
}

/* One training step, train's own (train/step.c); returns its loss when want_loss (else
   NAN on the GPU). On the GPU asking for the loss waits for forward's kernels, and
   wait_gpu waits for the whole step at its end: without either the step only queues
   kernels. The CPU always has its loss. */
static float train_step(trainer_t *t, step_trace_t *tr, int want_loss, int wait_gpu) {
  int flags = (want_loss ? TRAIN_STEP_FETCH_LOSS : 0) | (wait_gpu ? TRAIN_STEP_SYNC : 0);
  if (t->feed) feed_next(t);
  if (t->straggler_us > 0) usleep((useconds_t)t->straggler_us);
  /* Every rank takes a full batch: the step is never uneven. */
  if (train_step_run(&t->step, batch_images(t, t->steps), batch_labels(t->labels, t, t->steps),
                     t->batch, t->batch * t->step.size, t->lr, flags) != 0) {
    if (t->step.hvd_status != HVD_OK) fail_hvd(t->step.failed, t->step.hvd_status);
    fail_nn(t->step.failed, t->step.nn_status);
  }
  if (t->barrier) {
    hvd_status_t h = hvd_barrier();
    if (h != HVD_OK) fail_hvd("barrier after the step", h);
  }
  t->steps++;
  if (tr) memcpy(tr->start, t->step.phase_start, sizeof tr->start);
  return t->step.loss;
}

/* One inference step (--forward_only): forward in evaluation mode (batch norm's running
   statistics, no dropout), as tf_cnn_benchmarks' forward-only mode builds the model with
   phase_train off. On the GPU it only queues kernels unless wait_gpu. In a trace the
   step is all forward: the other phases start and end with it. */
static void forward_step(trainer_t *t, step_trace_t *tr, int wait_gpu) {
  if (t->feed) feed_next(t);
  const double t0 = util_now_s();
  nn_status_t s = nn_model_forward(t->step.model, batch_images(t, t->steps), t->batch, 0);
  if (s != NN_OK) fail_nn("forward", s);
  if (wait_gpu && nn_model_device(t->step.model) == NN_DEVICE_CUDA) {
    s = nn_cuda_synchronize();
    if (s != NN_OK) fail_nn("synchronising the GPU", s);
  }
  const double t1 = util_now_s();
  t->steps++;
  if (tr) {
    tr->start[TRAIN_PHASE_FORWARD] = t0;
    for (int p = TRAIN_PHASE_FORWARD + 1; p <= TRAIN_NUM_PHASES; p++) tr->start[p] = t1;
  }
}

/* Top-1 and top-5 accuracy of n samples' logits, as tf.nn.in_top_k counts them: the
   label is among the k largest logits when fewer than k classes score strictly higher
   (ties count for it); a non-finite logit of the label never counts. */
static void top_k_accuracy(const float *logits, const int32_t *labels, int n, int classes,
                           double *top1, double *top5) {
  int hit1 = 0, hit5 = 0;
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * (size_t)classes;
    const float target = z[labels[i]];
    if (!isfinite(target)) continue;
    int above = 0;
    for (int c = 0; c < classes; c++) above += z[c] > target;
    hit1 += above < 1;
    hit5 += above < 5;
  }
  *top1 = n > 0 ? (double)hit1 / n : 0.0;
  *top5 = n > 0 ? (double)hit5 / n : 0.0;
}

/* train's name of a --data_name ('-' where tf_cnn_benchmarks writes '_'). */
static const char *train_data_name(const char *data_name) {
  return strcmp(data_name, "fashion_mnist") == 0 ? "fashion-mnist" : data_name;
}

/* One synthetic batch per rank, made once: truncated-normal images (tf.truncated_normal),
   uniform labels. */
static void make_synthetic(batches_t *bt, int batch, int c, int h, int w, int classes,
                           uint64_t seed, int rank) {
  bt->nb = 1;
  bt->image_floats = (size_t)batch * (size_t)c * (size_t)h * (size_t)w;
  bt->images = malloc(bt->image_floats * sizeof(float));
  bt->labels = malloc((size_t)batch * sizeof(int32_t));
  if (bt->images == NULL || bt->labels == NULL) {
    fprintf(stderr, "cnn_bench: rank %d: out of memory for a batch of %zu floats\n", rank,
            bt->image_floats);
    exit(1);
  }
  uint64_t rng = seed * 1000003ull + (uint64_t)rank + 1;
  for (size_t i = 0; i < bt->image_floats; i++) bt->images[i] = truncated_normal(&rng);
  for (int i = 0; i < batch; i++) bt->labels[i] = (int32_t)(next_u64(&rng) % (uint64_t)classes);
}

/* A real data set's training split: rank r's shard of one shuffled order (train's
   sharding), cut into as many batches as the run takes (at most the shard's), made as
   train makes them (normalised, no augmentation). Exits on an error. */
static void make_real(batches_t *bt, const train_dataset_t *d, const char *name, int batch,
                      int steps, uint64_t seed, int rank, int size) {
  int begin, end;
  train_shard_range(d->n, rank, size, &begin, &end);
  const int shard_batches = (end - begin) / batch;
  if (shard_batches < 1) {
    fprintf(stderr, "cnn_bench: rank %d: --data_name %s: a shard of %d samples holds no "
                    "batch of %d; use a smaller --batch_size or fewer ranks\n", rank, name,
            end - begin, batch);
    exit(2);
  }
  bt->nb = steps < shard_batches ? steps : shard_batches;
  bt->image_floats = (size_t)batch * (size_t)d->c * (size_t)d->h * (size_t)d->w;
  uint32_t *perm = malloc((size_t)d->n * sizeof(uint32_t));
  bt->images = malloc((size_t)bt->nb * bt->image_floats * sizeof(float));
  bt->labels = malloc((size_t)bt->nb * (size_t)batch * sizeof(int32_t));
  if (perm == NULL || bt->images == NULL || bt->labels == NULL) {
    fprintf(stderr, "cnn_bench: rank %d: out of memory for %d batches of %zu floats\n", rank,
            bt->nb, bt->image_floats);
    exit(1);
  }
  train_epoch_permutation(perm, d->n, seed, 0);
  train_batch_opts_t bo = {0};
  train_norm_constants(train_data_name(name), bo.mean, bo.std);
  bo.seed = seed;
  for (int k = 0; k < bt->nb; k++)
    train_make_batch(d, perm + begin + (size_t)k * (size_t)batch, batch, &bo,
                     bt->images + (size_t)k * bt->image_floats,
                     bt->labels + (size_t)k * (size_t)batch);
  free(perm);
}

/* Chrome-trace JSON (Perfetto, chrome://tracing): one complete event per phase, in
   microseconds of CLOCK_MONOTONIC. pid 1 keeps clear of the timeline's pid 0. */
static int write_trace(const char *path, const step_trace_t *tr, int steps,
                       const double anchor[2]) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "cnn_bench: --trace_file %s: cannot open for writing\n", path);
    return -1;
  }
  fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"
             "\"args\":{\"name\":\"cnn_bench rank 0 compute\"}}");
  /* HVD_TIMELINE counts from hvd_init; this event lets a merge line the clocks up
     (scripts/cnn_bench_timeline.py): its end is just after the runtime's BROADCAST of
     init.params ends. */
  if (anchor[1] > 0)
    fprintf(f, ",\n{\"name\":\"broadcast init.params\",\"cat\":\"anchor\",\"ph\":\"X\","
               "\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f}",
            anchor[0] * 1e6, (anchor[1] - anchor[0]) * 1e6);
  for (int i = 0; i < steps; i++)
    for (int p = 0; p < TRAIN_NUM_PHASES; p++)
      fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"step %d\",\"ph\":\"X\",\"pid\":1,"
                 "\"tid\":1,\"ts\":%.3f,\"dur\":%.3f}",
              train_phase_names[p], i + 1, tr[i].start[p] * 1e6,
              (tr[i].start[p + 1] - tr[i].start[p]) * 1e6);
  fprintf(f, "\n]\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "cnn_bench: --trace_file %s: write failed\n", path);
    return -1;
  }
  return 0;
}

/* hvd_init, the threads, the GPU of this local rank; returns the rank. */
static int start_runtime(const options_t *o) {
  hvd_status_t h = hvd_init();
  if (h != HVD_OK) fail_hvd("hvd_init", h);
  const int rank = hvd_rank();
  rank_g = rank;
  if (o->threads > 0) nn_set_threads(o->threads);
#ifdef NN_WITH_CUDA
  /* A CUDA build on a machine without a usable GPU: say once that it runs on the CPU
     (stderr: stdout keeps tf_cnn_benchmarks' format). */
  if (rank == 0 && !nn_cuda_available()) {
    fprintf(stderr, "cnn_bench: %s\n", nn_cuda_info());
    fflush(stderr);
  }
#endif
  if (o->gpu) {
    /* Before any other CUDA work of this process: local rank i drives GPU i. */
    nn_status_t ds = nn_cuda_set_device(hvd_local_rank());
    if (ds != NN_OK) fail_nn("selecting the GPU", ds);
    if (rank == 0) {
      fprintf(stderr, "cnn_bench: %s\n", nn_cuda_info());
      fflush(stderr);
    }
  }
  return rank;
}

/* tf_cnn_benchmarks' block about the run (rank 0). */
static void print_config(const options_t *o, int size) {
  printf("Model:       %s\n", o->model);
  /* tf_cnn_benchmarks' data set names, with '_' */
  printf("Dataset:     %s\n",
         !strcmp(o->data_name, "fashion-mnist") ? "fashion_mnist" : o->data_name);
  printf("Mode:        %s\n", o->forward_only ? "forward only" : "training");
  printf("Batch size:  %d global\n", o->batch_size * size);
  printf("             %d per device\n", o->batch_size);
  printf("Num batches: %d\n", o->num_batches);
  printf("Devices:     [");
  for (int r = 0; r < size; r++) printf("%s'%s:%d'", r ? ", " : "", o->gpu ? "gpu" : "cpu", r);
  printf("]\n");
  printf("Data format: %s\n", o->data_format);
  printf("Optimizer:   %s\n", o->optimizer);
  printf("Variables:   %s\n", o->variable_update);
  /* Not in tf_cnn_benchmarks' block (its precision is a flag only): printed for
     --device gpu, where it is a choice; the CPU computes in float32 only. */
  if (o->gpu) printf("Precision:   %s\n", precision_label(o));
}

/* A real data set's training split (tf_cnn_benchmarks trains on it), which gives the
   model its input shape and classes in cfg. */
static void load_real(const options_t *o, int rank, train_dataset_t *data, nn_model_config_t *cfg) {
  train_dataset_t test_data = {0};
  char derr[512];
  if (train_load_dataset(train_data_name(o->data_name), o->data_dir, o->seed, 0, 0, 0, 0, 0,
                         data, &test_data, derr, sizeof derr) != 0) {
    fprintf(stderr, "cnn_bench: rank %d: --data_name %s: %s%s\n", rank, o->data_name, derr,
            o->data_dir ? "" : " (give its directory with --data_dir)");
    exit(2);
  }
  train_dataset_free(&test_data);
  cfg->in_channels = data->c;
  cfg->in_height = data->h;
  cfg->in_width = data->w;
  cfg->num_classes = data->num_classes;
}

/* The batches: one synthetic batch, or the rank's batches of the real data set (freed
   here); on the GPU copied up once, as tf_cnn_benchmarks' synthetic images live there,
   so no host-to-device transfer is timed either. */
static void make_batches(const options_t *o, trainer_t *t, train_dataset_t *data, int real_data,
                         int rank, int size, batches_t *bt) {
  int c, hh, w;
  nn_model_input_shape(t->step.model, &c, &hh, &w);
  const int classes = nn_model_num_classes(t->step.model);
  if (strcmp(o->data_name, "imagenet") == 0) {
    if (hh != w) {
      fprintf(stderr, "cnn_bench: --model %s takes %dx%d images: --data_name imagenet makes "
                      "square ones\n", o->model, hh, w);
      exit(2);
    }
    imagenet_batches(o, t, bt, c, hh, rank, size);
  } else if (real_data) {
    if (c != data->c || hh != data->h || w != data->w || classes != data->num_classes) {
      fprintf(stderr, "cnn_bench: --model %s takes %dx%dx%d images and %d classes, --data_name "
                      "%s has %dx%dx%d and %d\n", o->model, c, hh, w, classes, o->data_name,
              data->c, data->h, data->w, data->num_classes);
      exit(2);
    }
    make_real(bt, data, o->data_name, o->batch_size, o->num_warmup_batches + o->num_batches,
              o->seed, rank, size);
    train_dataset_free(data);
  } else {
    make_synthetic(bt, o->batch_size, c, hh, w, classes, o->seed, rank);
  }
  t->nb = bt->nb;
  t->image_floats = bt->image_floats;
  t->images = bt->images;
  t->labels = bt->labels;
  t->host_labels = bt->labels;
  t->batch = o->batch_size;
  t->lr = o->learning_rate;
  if (!o->gpu) return;
  const size_t image_bytes = (size_t)bt->nb * bt->image_floats * sizeof(float);
  const size_t label_bytes = (size_t)bt->nb * (size_t)o->batch_size * sizeof(int32_t);
  nn_status_t s = nn_cuda_malloc((void **)&bt->dev_images, image_bytes);
  if (s != NN_OK) fail_nn("allocating the batches on the GPU", s);
  s = nn_cuda_malloc((void **)&bt->dev_labels, label_bytes);
  if (s != NN_OK) fail_nn("allocating the labels on the GPU", s);
  s = nn_cuda_to_device(bt->dev_images, bt->images, image_bytes);
  if (s != NN_OK) fail_nn("copying the batches to the GPU", s);
  s = nn_cuda_to_device(bt->dev_labels, bt->labels, label_bytes);
  if (s != NN_OK) fail_nn("copying the labels to the GPU", s);
  t->images = bt->dev_images;
  t->labels = bt->dev_labels;
}

/* The untimed steps, then the GPU idle and every rank at the start line. */
static void warm_up(const options_t *o, trainer_t *t, int rank, int step_timed, int show_accuracy) {
  if (rank == 0) {
    printf("Running warm up\n");
    fflush(stdout);
  }
  for (int i = 0; i < o->num_warmup_batches; i++) {
    if (o->forward_only) forward_step(t, NULL, step_timed);
    else train_step(t, NULL, 0, step_timed);
  }
  /* The clock starts with the GPU idle: no warm-up kernel is timed. */
  if (o->gpu) {
    nn_status_t s = nn_cuda_synchronize();
    if (s != NN_OK) fail_nn("synchronising the GPU after warm-up", s);
  }
  if (t->step.buckets) hvd_grad_buckets_reset_stats(t->step.buckets);
  hvd_status_t h = hvd_barrier();
  if (h != HVD_OK) fail_hvd("barrier after warm-up", h);
  if (rank == 0) {
    printf("Done warm up\n");
    printf("Step\tImg/sec\ttotal_loss%s\n",
           show_accuracy ? "\ttop_1_accuracy\ttop_5_accuracy" : "");
    fflush(stdout);
  }
}

/* The timed steps and rank 0's Step lines; times[i] gets step i's seconds, trace (rank 0,
   --trace_file) its phases. Returns the wall time of all of them, every rank done. */
static double timed_steps(const options_t *o, trainer_t *t, int rank, int step_timed,
                          int show_accuracy, double *times, step_trace_t *trace) {
  const int classes = nn_model_num_classes(t->step.model);
  nn_status_t s;
  const double start = util_now_s();
  double window_start = start;   /* GPU: the display window's first step */
  int window_first = 0;
  for (int i = 0; i < o->num_batches; i++) {
    const int display = rank == t->step_rank && (i == 0 || (i + 1) % o->display_every == 0);
    double t0 = util_now_s();
    const int64_t k = t->steps;   /* the batch this step takes */
    /* Forward-only prints a loss of 0, as tf_cnn_benchmarks (it computes none). */
    float loss = 0.0f;
    if (o->forward_only) forward_step(t, trace ? &trace[i] : NULL, step_timed);
    else loss = train_step(t, trace ? &trace[i] : NULL, display || step_timed, step_timed);
    if (step_timed) {
      times[i] = util_now_s() - t0;
    } else if (display) {
      s = nn_cuda_synchronize();
      if (s != NN_OK) fail_nn("synchronising the GPU", s);
      double now = util_now_s(), step_s = (now - window_start) / (i + 1 - window_first);
      for (int j = window_first; j <= i; j++) times[j] = step_s;
      window_start = now;
      window_first = i + 1;
    }
    if (display) {
      double mean, unc, jitter;
      perf(times, i + 1, o->batch_size, &mean, &unc, &jitter);
      printf("%d\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f", i + 1, mean, unc,
             jitter, loss);
      if (show_accuracy) {
        /* The logits of this step's forward (backward and the update leave them; on the
           GPU this copies them back, after the step's time was taken). */
        const float *logits = nn_model_logits(t->step.model);
        if (logits == NULL) fail_nn("reading the logits", NN_ERR_UNSUPPORTED);
        double top1, top5;
        top_k_accuracy(logits, batch_labels(t->host_labels, t, k), o->batch_size, classes,
                       &top1, &top5);
        printf("\t%.3f\t%.3f", top1, top5);
      }
      printf("\n");
      fflush(stdout);
    }
  }
  /* The wall time holds every kernel the timed steps queued. */
  if (o->gpu) {
    s = nn_cuda_synchronize();
    if (s != NN_OK) fail_nn("synchronising the GPU after the timed steps", s);
  }
  t->own_s = util_now_s() - start;
  hvd_status_t h = hvd_barrier();
  if (h != HVD_OK) fail_hvd("barrier after the timed steps", h);
  return util_now_s() - start;
}

/* The closing lines: images/sec, how much communication was hidden (averaged over the
   ranks), fp16's loss scale. */
static void report(const options_t *o, const trainer_t *t, int rank, int size, double wall) {
  /* fp16: where dynamic loss scaling ended (waits for the GPU, so after the timing). */
  float loss_scale = 1.0f;
  int64_t skipped = 0;
  if (o->gpu && o->use_fp16 && !o->forward_only) {
    nn_status_t s = nn_model_loss_scale(t->step.model, &loss_scale, &skipped);
    if (s != NN_OK) fail_nn("reading the loss scale", s);
  }
  double comm[3] = {0, 0, 0};
  if (t->step.buckets) {
    hvd_grad_buckets_stats_t st;
    hvd_grad_buckets_stats(t->step.buckets, &st);
    comm[0] = st.blocked_s;
    comm[1] = st.comm_s;
    comm[2] = (double)st.steps;
    hvd_status_t h = hvd_allreduce("bench.comm_stats", comm, comm, 3, HVD_FLOAT64, HVD_AVERAGE);
    if (h != HVD_OK) fail_hvd("allreduce of the communication statistics", h);
  }
  /* Async parameter servers: no worker waits for another, so each worker's own rate
     counts (as tf_cnn_benchmarks' async workers report each their own), not the time
     until the slowest is done: the sum of the workers' images/sec. */
  const int async = t->step.ps && strcmp(o->cross_replica_sync, "false") == 0;
  double own_rate = async && rank >= o->num_ps && t->own_s > 0
                        ? (double)o->num_batches * o->batch_size / t->own_s : 0;
  if (async) {
    hvd_status_t h = hvd_allreduce("bench.own_rates", &own_rate, &own_rate, 1, HVD_FLOAT64,
                                   HVD_SUM);
    if (h != HVD_OK) fail_hvd("allreduce of the workers' images/sec", h);
  }
  if (rank != 0) return;
  double total = async ? own_rate : (double)size * o->num_batches * o->batch_size / wall;
  if (async)
    fprintf(stderr, "cnn_bench: async parameter servers: total images/sec is the sum of the "
            "workers' own; until every worker was done: %.2f\n",
            (double)size * o->num_batches * o->batch_size / wall);
  printf("----------------------------------------------------------------\n");
  printf("total images/sec: %.2f\n", total);
  printf("----------------------------------------------------------------\n");
  if (t->step.buckets && comm[2] > 0) {
    double blocked = comm[0] / comm[2] * 1e3, total = comm[1] / comm[2] * 1e3;
    if (blocked > total) blocked = total;
    double hidden = total > 0 ? 100.0 * (1.0 - blocked / total) : 0.0;
    printf("communication hidden: %.1f%% (not overlapped %.1f ms of %.1f ms per step)\n",
           hidden, blocked, total);
  }
  if (o->gpu && o->use_fp16 && !o->forward_only)
    printf("loss scale: %g (%lld of %lld steps skipped for inf/NaN gradients)\n",
           (double)loss_scale, (long long)skipped, (long long)t->steps);
  fflush(stdout);
}

/* --variable_update parameter_server: the servers over the broadcast replica; the step
   pushes to them (a dedicated server's step does nothing). NULL otherwise. */
static train_ps_t *ps_start(const options_t *o, trainer_t *t, nn_model_t *m,
                            const train_replica_opts_t *ro) {
  if (strcmp(o->variable_update, "parameter_server") != 0 || o->forward_only) return NULL;
  if (o->gpu) {
    fprintf(stderr, "cnn_bench: --variable_update parameter_server keeps host memory; use "
            "--device cpu\n");
    exit(1);
  }
  if (o->num_ps >= hvd_size()) {
    fprintf(stderr, "cnn_bench: --num_ps %d with %d rank(s) leaves no worker; use at most "
            "%d\n", o->num_ps, hvd_size(), hvd_size() - 1);
    exit(1);
  }
  const int sync = strcmp(o->cross_replica_sync, "true") == 0;
  train_ps_opts_t po = {.async = !sync, .num_ps = o->num_ps,
                        .max_staleness = sync ? -1 : o->max_staleness,
                        .local_aggregation =
                            train_ps_local_aggregation(o->ps_local_aggregation),
                        .optim = ro->optim, .steps = 1, .accum = 1, .windows = 1};
  po.sched = (nn_lr_schedule_t){.kind = NN_LR_CONSTANT, .base_lr = o->learning_rate,
                                .warmup_start_lr = o->learning_rate};
  train_ps_t *ps = NULL;
  char err[1024];
  if (train_ps_create(&ps, m, &po, err, sizeof err) != 0) {
    fprintf(stderr, "cnn_bench: rank %d: %s\n", hvd_rank(), err);
    exit(1);
  }
  t->step.ps = ps;
  t->step.buckets = NULL;
  t->step.size = hvd_size() - o->num_ps;
  t->step_rank = o->num_ps;
  return ps;
}

/* The servers' end, and rank 0's line: bytes through the busiest server's link per
   step, staleness. */
static void ps_report(train_ps_t *ps, const options_t *o, int rank) {
  if (!ps) return;
  hvd_ps_stats_t st;
  hvd_status_t h = train_ps_finish(ps, &st);
  if (h != HVD_OK) fail_hvd("the parameter servers' end", h);
  int serves = o->num_ps == 0 || rank < o->num_ps;
  int64_t v[3] = {serves ? (int64_t)(st.bytes_in + st.bytes_out) : 0,
                  (int64_t)st.max_staleness, 0};
  h = hvd_allreduce("bench.ps_stats", v, v, 3, HVD_INT64, HVD_MAX);
  if (h != HVD_OK) fail_hvd("allreduce of the parameter-server statistics", h);
  if (rank != 0) return;
  int64_t steps = (int64_t)o->num_batches + o->num_warmup_batches;
  printf("parameter servers: %s, %s; busiest server link %.2f MB per step (in + out), "
         "staleness max %lld\n", strcmp(o->cross_replica_sync, "true") ? "async" : "sync",
         o->num_ps ? "dedicated" : "colocated", v[0] / 1e6 / (double)steps, (long long)v[1]);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (nn_blas_fix_misdetected_core(argv) != NN_OK)
    fprintf(stderr, "cnn_bench: warning: %s\n", nn_last_error());
  options_t o = default_options();
  parse_args(argc, argv, &o);
  const int rank = start_runtime(&o), size = hvd_size();
  if (rank == 0) print_config(&o, size);
  const int real_data = strcmp(o.data_name, "synthetic") != 0;
  train_dataset_t data = {0};
  nn_model_config_t cfg = {.batch = o.batch_size, .seed = o.seed};
  const int imagenet = strcmp(o.data_name, "imagenet") == 0;
  if (imagenet) imagenet_open(&o, &cfg);
  else if (real_data) load_real(&o, rank, &data, &cfg);

  trainer_t t = {0};
  t.step.size = size;
  t.barrier = !strcmp(o.variable_update, "barrier");
  /* The replica as train sets it up (train/replica.h): the model, tf_cnn_benchmarks'
     optimizer (none for inference), rank 0's weights everywhere (horovod, as Horovod's
     broadcast_global_variables), the precision and the GPU, the gradient buckets
     (horovod, training). */
  train_replica_opts_t ro = replica_opts(&o, &cfg);
  train_replica_t rep = {0};
  if (train_replica_create(&rep, &ro) != 0) replica_failed(&rep, real_data);
  t.step.model = rep.model;
  if (rank == 0) {
    printf("Parameters:  %zu\n", nn_model_num_params(t.step.model));
    printf("==========\n");
    printf("Generating training model\n");
    fflush(stdout);
  }
  if (train_replica_start(&rep, &ro) != 0) replica_failed(&rep, real_data);
  t.step.buckets = rep.buckets;
  train_ps_t *ps = ps_start(&o, &t, rep.model, &ro);
  if (rank == o.straggler_rank) t.straggler_us = o.straggler_delay_ms * 1000;
  const double anchor[2] = {rep.broadcast_start, rep.broadcast_end};
  batches_t bt = {0};
  make_batches(&o, &t, &data, real_data, rank, size, &bt);

  /* Each step timed alone (the CPU; the GPU with --trace_file, every step waiting for
     it), or the GPU timed per display window (see the comment at the top). */
  const int step_timed = !o.gpu || o.trace_file != NULL;
  /* tf_cnn_benchmarks adds the batch's accuracy to the Step lines in forward-only mode
     and with --print_training_accuracy. */
  const int show_accuracy = o.forward_only || o.print_training_accuracy;
  warm_up(&o, &t, rank, step_timed, show_accuracy);
  double *times = malloc(sizeof(double) * (size_t)o.num_batches);
  step_trace_t *trace = NULL;
  if (rank == 0 && o.trace_file) trace = calloc((size_t)o.num_batches, sizeof(step_trace_t));
  if (times == NULL || (rank == 0 && o.trace_file && trace == NULL)) {
    fprintf(stderr, "cnn_bench: rank %d: out of memory for %d step times\n", rank,
            o.num_batches);
    return 1;
  }
  const double feed_before = t.feed_s;
  const double wall = timed_steps(&o, &t, rank, step_timed, show_accuracy, times, trace);
  report(&o, &t, rank, ps ? size - o.num_ps : size, wall);
  if (t.feed && rank == 0) imagenet_report(&t, feed_before, wall);
  ps_report(ps, &o, rank);
  if (trace) {
    if (write_trace(o.trace_file, trace, o.num_batches, anchor) != 0) return 1;
    free(trace);
  }
  train_replica_free(&rep);
  nn_cuda_free(bt.dev_images);
  nn_cuda_free(bt.dev_labels);
  free(times);
  data_stream_close(t.feed);
  data_source_free(&imagenet_src);
  free(bt.images);
  free(bt.labels);
  hvd_status_t h = hvd_shutdown();
  if (h != HVD_OK) fail_hvd("hvd_shutdown", h);
  return 0;
}
