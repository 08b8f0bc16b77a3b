/* train/flags.c: the train program's flags, a table for util/flags.h (which gives
   every program the same syntax, messages and --help). */
#include "train/flags.h"

#include "util/flags.h"

#include <string.h>

void train_flags_defaults(train_opts_t *o) {
  memset(o, 0, sizeof *o);
  strcpy(o->model, "lenet");
  strcpy(o->dataset, "fashion-mnist");
  o->epochs = 3;
  o->batch = 64;
  o->lr = -1.0f;               /* chosen by optimizer below */
  strcpy(o->optimizer, "sgd");
  o->momentum = 0.9f;
  o->seed = 42;
  strcpy(o->lr_schedule, "constant");
  o->lr_gamma = 0.1f;
  o->lr_step_epochs = 30.0f;
  strcpy(o->monitor, "val_loss");
  o->crop_pad = -1;
  o->bucket_mb = 4.0f;
  strcpy(o->device, "cpu");
  o->validation_split = 0.1f;
  o->synthetic_samples = 2048;
  o->batches_per_allreduce = 1;
  o->predivide = 1.0f;
  o->lr_scaling = 1;
  o->pipeline_stages = 1;
  o->micro_batches = 1;
  strcpy(o->pipeline_schedule, "1f1b");
  o->data_threads = 2;
  o->prefetch = 4;
  strcpy(o->variable_update, "horovod");
  strcpy(o->ps_placement, "greedy");
  strcpy(o->ps_local_aggregation, "auto");
  o->max_staleness = -1;
  o->straggler_rank = -1;
}

static const char *const VARIABLE_UPDATES[] = {"horovod", "ps-sync", "ps-async", NULL};
static const char *const PS_PLACEMENTS[] = {"greedy", "round-robin", NULL};
static const char *const PS_AGGREGATIONS[] = {"auto", "on", "off", NULL};

static const char *const DATASETS[] = {"fashion-mnist", "mnist", "cifar10", "synthetic", "idx",
                                       "imagefolder", "tfrecord", "filelist", NULL};
static const char *const OPTIMIZERS[] = {"sgd", "adam", "adamw", NULL};
static const char *const SCHEDULES[] = {"constant", "step", "cosine", NULL};
static const char *const MONITORS[] = {"val_loss", "val_accuracy", NULL};
static const char *const DEVICES[] = {"cpu", "gpu", NULL};
static const char *const PIPE_SCHEDULES[] = {"gpipe", "1f1b", NULL};

/* --freeze and --init-skip: each use adds a pattern. */
static int add_pattern(const util_flag_t *flag, char **values, char *err, size_t errlen) {
  train_patterns_t *p = flag->dest;
  if (!values[0][0]) {
    snprintf(err, errlen, "a glob pattern over tensor names, e.g. 'features.*'");
    return UTIL_FLAG_BAD_VALUE;
  }
  if (p->count == TRAIN_MAX_PATTERNS) {
    snprintf(err, errlen, "--%s: more than %d patterns; join them into fewer globs",
             flag->name, TRAIN_MAX_PATTERNS);
    return UTIL_FLAG_FAILED;
  }
  p->items[p->count++] = values[0];
  return UTIL_FLAGS_OK;
}

/* The flags, writing into o. A function, not a static table: the destinations are o's
   fields, and --help shows the defaults by building it over train_flags_defaults. */
#define BUF(field) o->field, .dest_size = sizeof o->field
enum { NFLAGS = 73 };
static void flag_table(train_opts_t *o, util_flag_t table[NFLAGS]) {
  const util_flag_t t[] = {
      {"model", UTIL_FLAG_STRING, BUF(model), .metavar = "NAME",
       .help = "model name: lenet, mlp, resnet20, resnet18, resnet50, resnet101, vgg16, "
               "vgg16_bn, alexnet, trivial; resnet18 to alexnet are torchvision's, layer for "
               "layer (python/hvd_models.py from-torchvision converts their weights)"},
      {"model-file", UTIL_FLAG_STRING, BUF(model), .metavar = "FILE.onnx", .def = "none",
       .help = "instead of --model: an ONNX graph (torch.onnx.export, tf2onnx) with its "
               "initial weights; input shape and classes from the graph (docs/onnx.md)"},
      {"export-onnx", UTIL_FLAG_STRING, &o->export_onnx_path, .metavar = "FILE.onnx",
       .help = "write the trained model as an ONNX inference graph (opset 13) for "
               "onnxruntime, TensorRT or serve --model-file"},
      {"dataset", UTIL_FLAG_CHOICE, BUF(dataset), .choices = DATASETS, .metavar = "NAME",
       .help = "data set; idx: your own IDX files (--train-images, --train-labels, "
               "--test-images, --test-labels)"},
      {"data-dir", UTIL_FLAG_STRING, &o->data_dir, .metavar = "PATH",
       .def = "/usr/share/datasets/<dataset>", .help = "directory of the data set files"},
      {"epochs", UTIL_FLAG_INT, &o->epochs, .min = 0, .max = 100000, .help = "epochs to train"},
      {"batch-size", UTIL_FLAG_INT, &o->batch, .min = 1, .max = 65536,
       .help = "batch size per rank"},
      {"lr", UTIL_FLAG_FLOAT, &o->lr, .min = 0, .max = 100, .def = "sgd 0.01, adam 0.001",
       .help = "learning rate before scaling by ranks x --batches-per-allreduce"},
      {"lr-scaling", UTIL_FLAG_BOOL, &o->lr_scaling,
       .help = "scale --lr by ranks x --batches-per-allreduce (the global batch over the "
               "batch per rank, Horovod's linear scaling); --no-lr-scaling trains with --lr "
               "as given"},
      {"batches-per-allreduce", UTIL_FLAG_INT, &o->batches_per_allreduce, .min = 1, .max = 1024,
       .help = "gradient accumulation (Horovod's backward_passes_per_step): N batches per rank "
               "summed (each weighted so the sum is the mean over the N batches), then one "
               "allreduce and one optimizer step; global batch = batch-size x N x ranks, and "
               "--lr is scaled by N x ranks (see --lr-scaling)"},
      {"gradient-predivide-factor", UTIL_FLAG_FLOAT, &o->predivide, .min = 1e-6, .max = 1e6,
       .help = "Horovod's: gradients are divided by X before the sum over the ranks and by "
               "ranks/X after it (the same average; X > 1 keeps a float16 sum in range)"},
      {"init-weights", UTIL_FLAG_STRING, &o->init_weights, .metavar = "FILE",
       .help = "start from these weights: a safetensors file with the model's PyTorch names, "
               "shapes and dtypes exactly (an --export, or python/hvd_models.py's state_dict); "
               "a checkpoint that --resume loads takes precedence"},
      {"optimizer", UTIL_FLAG_CHOICE, BUF(optimizer), .choices = OPTIMIZERS,
       .help = "optimizer"},
      {"momentum", UTIL_FLAG_FLOAT, &o->momentum, .min = 0, .max = 1, .help = "SGD momentum"},
      {"nesterov", UTIL_FLAG_BOOL, &o->nesterov, .help = "Nesterov momentum for SGD"},
      {"weight-decay", UTIL_FLAG_FLOAT, &o->weight_decay, .min = 0, .max = 10,
       .help = "weight decay"},
      {"seed", UTIL_FLAG_U64, &o->seed, .help = "seed of weights, data order, augmentation"},
      {"threads", UTIL_FLAG_INT, &o->threads, .min = 0, .max = 1024,
       .def = "1 under a launcher, else all cores", .help = "CPU threads per rank"},
      {"export", UTIL_FLAG_STRING, &o->export_path, .metavar = "PATH",
       .help = "write the trained weights to this safetensors file (PyTorch names)"},
      {"warmup-epochs", UTIL_FLAG_FLOAT, &o->warmup_epochs, .min = 0, .max = 10000,
       .help = "linear warm-up from the unscaled to the scaled lr over these epochs"},
      {"lr-schedule", UTIL_FLAG_CHOICE, BUF(lr_schedule), .choices = SCHEDULES,
       .help = "learning-rate schedule after warm-up"},
      {"lr-step-epochs", UTIL_FLAG_FLOAT, &o->lr_step_epochs, .min = 0.001, .max = 1e6,
       .help = "step schedule: multiply by --lr-gamma every this many epochs"},
      {"lr-gamma", UTIL_FLAG_FLOAT, &o->lr_gamma, .min = 0, .max = 1,
       .help = "step schedule factor"},
      {"min-lr", UTIL_FLAG_FLOAT, &o->min_lr, .min = 0, .max = 100,
       .help = "cosine schedule: final lr"},
      {"early-stopping-patience", UTIL_FLAG_INT, &o->es_patience, .min = 0, .max = 100000,
       .def = "0: off", .help = "stop after this many epochs without improvement of --monitor"},
      {"min-delta", UTIL_FLAG_FLOAT, &o->min_delta, .min = 0, .max = 1e6,
       .help = "smallest change of --monitor that counts as an improvement"},
      {"monitor", UTIL_FLAG_CHOICE, BUF(monitor), .choices = MONITORS,
       .help = "quantity watched by early stopping and --save-best-only"},
      {"restore-best-weights", UTIL_FLAG_BOOL, &o->restore_best,
       .help = "end with the weights of the best epoch of --monitor"},
      {"checkpoint-dir", UTIL_FLAG_STRING, &o->checkpoint_dir, .metavar = "PATH",
       .help = "write checkpoints here: last.ckpt every epoch, plus epoch-NNN.ckpt or best.ckpt"},
      {"save-best-only", UTIL_FLAG_BOOL, &o->save_best_only,
       .help = "keep best.ckpt (best --monitor) instead of one file per epoch"},
      {"checkpoint-every-steps", UTIL_FLAG_INT, &o->checkpoint_every_steps, .min = 0,
       .max = 1 << 30, .def = "0: at epoch ends only",
       .help = "also rewrite last.ckpt every N steps inside an epoch (resumes exactly)"},
      {"resume", UTIL_FLAG_STRING, &o->resume, .metavar = "PATH|auto",
       .help = "continue exactly from this checkpoint; auto: from the newest valid one in "
               "--checkpoint-dir, or start fresh when there is none"},
      {"logdir", UTIL_FLAG_STRING, &o->logdir, .metavar = "PATH",
       .help = "TensorBoard runs as Keras writes them, PATH/train and PATH/validation (tags "
               "epoch_loss, epoch_accuracy, ...), and PATH/log.csv"},
      {"tensorboard-update-freq", UTIL_FLAG_INT, &o->tb_update_freq, .min = 0, .max = 1 << 30,
       .def = "0: per epoch only",
       .help = "also write batch_loss and batch_accuracy (the epoch's running means over all "
               "ranks) every N batches (Keras's update_freq)"},
      {"histogram-freq", UTIL_FLAG_INT, &o->histogram_freq, .min = 0, .max = 100000,
       .def = "0: none",
       .help = "write a histogram of every weight every N epochs (Keras's histogram_freq)"},
      {"augment", UTIL_FLAG_BOOL, &o->augment,
       .help = "random crop (pad 2 for digits, 4 for cifar10) and, for cifar10, left-right flips; "
               "image files: torchvision's RandomResizedCrop(--image-size) and flips"},
      {"crop-pad", UTIL_FLAG_INT, &o->crop_pad, .min = 0, .max = 16,
       .def = "2 for digits, 4 for cifar10", .help = "padding of the random crop with --augment"},
      {"bucket-mb", UTIL_FLAG_FLOAT, &o->bucket_mb, .min = 0.001, .max = 4096,
       .help = "MiB of gradients per allreduce bucket: each takes whole parameters until "
               "it holds this much (the first, min(this, 1) MiB), so one may hold more"},
      {"fp16-allreduce", UTIL_FLAG_BOOL, &o->fp16_allreduce,
       .help = "allreduce gradients as float16"},
      {"no-overlap", UTIL_FLAG_BOOL, &o->no_overlap,
       .help = "start the allreduces after backward instead of during it"},
      {"device", UTIL_FLAG_CHOICE, BUF(device), .choices = DEVICES,
       .help = "gpu: a build with CUDA and a GPU; local rank i uses GPU i"},
      {"use-fp16", UTIL_FLAG_BOOL, &o->use_fp16,
       .help = "--device gpu: mixed precision with float16 (float32 weights, dynamic loss "
               "scaling)"},
      {"use-bf16", UTIL_FLAG_BOOL, &o->use_bf16,
       .help = "--device gpu: mixed precision with bfloat16 (float32 weights, no loss scaling)"},
      {"channels-last", UTIL_FLAG_BOOL, &o->channels_last,
       .help = "--device gpu: activations NHWC (what tensor-core convolutions prefer)"},
      {"validation-split", UTIL_FLAG_FLOAT, &o->validation_split, .min = 0, .max = 0.9,
       .help = "fraction of the training set held out for validation (0: use the test set)"},
      {"max-train", UTIL_FLAG_INT, &o->max_train, .min = 0, .max = 1 << 30, .def = "all",
       .help = "use only the first N training samples"},
      {"max-test", UTIL_FLAG_INT, &o->max_test, .min = 0, .max = 1 << 30, .def = "all",
       .help = "use only the first N test samples"},
      {"synthetic-samples", UTIL_FLAG_INT, &o->synthetic_samples, .min = 16, .max = 1 << 24,
       .help = "training samples of --dataset synthetic"},
      {"train-images", UTIL_FLAG_STRING, &o->train_images, .metavar = "FILE",
       .help = "--dataset idx: training images, IDX (idx3-ubyte: count x height x width), "
               "gzip or plain"},
      {"train-labels", UTIL_FLAG_STRING, &o->train_labels, .metavar = "FILE",
       .help = "--dataset idx: training labels, IDX (idx1-ubyte), 0..255"},
      {"test-images", UTIL_FLAG_STRING, &o->test_images, .metavar = "FILE",
       .help = "--dataset idx: test images"},
      {"test-labels", UTIL_FLAG_STRING, &o->test_labels, .metavar = "FILE",
       .help = "--dataset idx: test labels"},
      {"quiet", UTIL_FLAG_BOOL, &o->quiet, .help = "print only the summary"},
      {"pipeline-stages", UTIL_FLAG_INT, &o->pipeline_stages, .min = 1, .max = 64,
       .help = "cut the model into S stages on consecutive ranks (np/S replicas of the "
               "pipeline; CPU); --batch-size is then per replica"},
      {"micro-batches", UTIL_FLAG_INT, &o->micro_batches, .min = 1, .max = 1024,
       .help = "micro-batches per replica batch in a pipeline (batch norm normalises per "
               "micro-batch, as PyTorch's pipeline does)"},
      {"pipeline-schedule", UTIL_FLAG_CHOICE, BUF(pipeline_schedule),
       .choices = PIPE_SCHEDULES, .metavar = "NAME",
       .help = "gpipe (all forwards, then all backwards) or 1f1b (one forward one backward: "
               "at most S micro-batches' activations per stage)"},
      /* transfer learning (train/transfer.c) */
      {"freeze", UTIL_FLAG_CUSTOM, &o->freeze, .metavar = "PATTERN", .parse = add_pattern,
       .def = "",
       .help = "keep the layers owning tensors that match this glob ('features.*'; "
               "repeatable) at their weights: no gradient, no allreduce, no optimizer state, "
               "batch norm in inference mode; they must be the bottom of the model"},
      {"init-skip", UTIL_FLAG_CUSTOM, &o->init_skip, .metavar = "PATTERN", .parse = add_pattern,
       .def = "",
       .help = "--init-weights leaves tensors matching this glob ('fc.*', a new head; "
               "repeatable) at their fresh initialisation, whatever their shape in the file"},
      {"num-classes", UTIL_FLAG_INT, &o->num_classes, .min = 0, .max = 1 << 20,
       .def = "the data's", .help = "classes of the model's head (at least the data's)"},
      {"unfreeze-at-epoch", UTIL_FLAG_INT, &o->unfreeze_at_epoch, .min = 0, .max = 100000,
       .def = "0: never",
       .help = "after E epochs with --freeze, train every layer (Keras' fine-tuning phase); "
               "the newly trainable layers' optimizer state starts at zero"},
      {"fine-tune-lr", UTIL_FLAG_FLOAT, &o->fine_tune_lr, .min = 0, .max = 100,
       .def = "--lr", .help = "learning rate after --unfreeze-at-epoch, scaled as --lr"},
      /* image data sets (docs/data.md) */
      {"image-size", UTIL_FLAG_INT, &o->image_size, .min = 0, .max = 4096,
       .def = "the model's input", .help = "--dataset imagefolder|tfrecord|filelist: images "
               "are resized (shorter side) and centre-cropped to S x S"},
      {"channels", UTIL_FLAG_INT, &o->channels, .min = 0, .max = 3, .def = "the model's input",
       .help = "1 (grey) or 3 (RGB): image files are converted to it"},
      {"data-threads", UTIL_FLAG_INT, &o->data_threads, .min = 1, .max = 256,
       .help = "image decode threads per rank"},
      {"prefetch", UTIL_FLAG_INT, &o->prefetch, .min = 1, .max = 1024,
       .help = "decoded batches held ready at most"},
      {"skip-bad-images", UTIL_FLAG_BOOL, &o->skip_bad_images,
       .help = "leave out (and count) images that cannot be read or decoded, instead of "
               "stopping with the file's name"},
      /* parameter servers */
      {"variable-update", UTIL_FLAG_CHOICE, BUF(variable_update), .choices = VARIABLE_UPDATES,
       .help = "horovod: ring allreduce; ps-sync / ps-async: parameter servers (the optimizer "
               "runs on the server shards), synchronous or asynchronous updates"},
      {"num-ps", UTIL_FLAG_INT, &o->num_ps, .min = 0, .max = 1 << 20, .def = "0: colocated",
       .help = "ps-*: ranks 0..K-1 only serve (the others work); 0: every rank serves a shard "
               "and works"},
      {"ps-placement", UTIL_FLAG_CHOICE, BUF(ps_placement), .choices = PS_PLACEMENTS,
       .help = "ps-*: variables to servers by fewest bytes so far, or in turn"},
      {"ps-local-aggregation", UTIL_FLAG_CHOICE, BUF(ps_local_aggregation),
       .choices = PS_AGGREGATIONS,
       .help = "ps-sync: a host's workers sum their gradients before one push per host "
               "(auto: with colocated servers)"},
      {"max-staleness", UTIL_FLAG_INT, &o->max_staleness, .min = -1, .max = 1 << 20,
       .def = "-1: unbounded",
       .help = "ps-async: a worker more than S steps ahead of the slowest waits"},
      {"straggler-delay-ms", UTIL_FLAG_INT, &o->straggler_delay_ms, .min = 0, .max = 3600000,
       .help = "--straggler-rank sleeps this long every step (for comparisons)"},
      {"straggler-rank", UTIL_FLAG_INT, &o->straggler_rank, .min = -1, .max = 1 << 20,
       .def = "-1: none", .help = "the rank that --straggler-delay-ms slows down"},
  };
  _Static_assert(sizeof t / sizeof t[0] == NFLAGS, "NFLAGS is the number of flags");
  memcpy(table, t, sizeof t);
}
#undef BUF

static util_flags_spec_t flag_spec(const util_flag_t *table, const char *usage) {
  return (util_flags_spec_t){
      .prog = "train", .usage = usage, .flags = table, .nflags = NFLAGS,
      .about = "Trains a model data-parallel on every rank (Horovod recipe: rank 0's weights\n"
               "broadcast, lr scaled by ranks with warm-up, gradients averaged in buckets\n"
               "during backward). Only rank 0 prints and writes files.\n"};
}

void train_flags_help(FILE *f, const char *prog) {
  train_opts_t defaults;
  train_flags_defaults(&defaults);
  util_flag_t table[NFLAGS];
  flag_table(&defaults, table);
  char usage[256];
  snprintf(usage, sizeof usage, "mpirun -np N %s [flags]", prog);
  util_flags_spec_t spec = flag_spec(table, usage);
  util_flags_usage(&spec, f);
}

int train_flags_parse(int argc, char **argv, train_opts_t *o, char *err, size_t errlen) {
  util_flag_t table[NFLAGS];
  flag_table(o, table);
  util_flags_spec_t spec = flag_spec(table, "train [flags]");
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, errlen);
  if (rc != UTIL_FLAGS_OK) return rc == UTIL_FLAGS_HELP ? 1 : -1;
  if (o->lr < 0) o->lr = strcmp(o->optimizer, "sgd") == 0 ? 0.01f : 0.001f;
  /* The TensorBoard options refine --logdir (Keras's callback arguments). */
  if ((o->tb_update_freq > 0 || o->histogram_freq > 0) && !o->logdir) {
    snprintf(err, errlen, "%s needs --logdir (where the TensorBoard runs go); see train --help",
             o->tb_update_freq > 0 ? "--tensorboard-update-freq" : "--histogram-freq");
    return -1;
  }
  /* --dataset idx takes its four files, and only it does. */
  const char *idx_flags[4] = {"--train-images", "--train-labels", "--test-images",
                              "--test-labels"};
  const char *idx_files[4] = {o->train_images, o->train_labels, o->test_images, o->test_labels};
  int is_idx = strcmp(o->dataset, "idx") == 0;
  for (int i = 0; i < 4; i++) {
    if (is_idx && !idx_files[i]) {
      snprintf(err, errlen, "--dataset idx needs %s FILE (all four of --train-images, "
               "--train-labels, --test-images, --test-labels); see train --help", idx_flags[i]);
      return -1;
    }
    if (!is_idx && idx_files[i]) {
      snprintf(err, errlen, "%s is for --dataset idx (this run has --dataset %s); "
               "see train --help", idx_flags[i], o->dataset);
      return -1;
    }
  }
  if (o->unfreeze_at_epoch > 0 && o->freeze.count == 0) {
    snprintf(err, errlen, "--unfreeze-at-epoch %d needs --freeze (the layers to unfreeze); "
             "see train --help", o->unfreeze_at_epoch);
    return -1;
  }
  if (o->fine_tune_lr > 0 && o->unfreeze_at_epoch == 0) {
    snprintf(err, errlen, "--fine-tune-lr needs --unfreeze-at-epoch (when it starts); see "
             "train --help");
    return -1;
  }
  if (o->init_skip.count > 0 && !o->init_weights) {
    snprintf(err, errlen, "--init-skip needs --init-weights (the file it skips tensors of); "
             "see train --help");
    return -1;
  }
  return 0;
}

void train_flags_describe(const train_opts_t *o, int ranks, char *buf, size_t len) {
  snprintf(buf, len,
           "model=%s\ndataset=%s\nbatch_size=%d\nranks=%d\nseed=%llu\nlr=%.9g\noptimizer=%s\n"
           "momentum=%.9g\nnesterov=%d\nweight_decay=%.9g\nwarmup_epochs=%.9g\nlr_schedule=%s\n"
           "lr_step_epochs=%.9g\nlr_gamma=%.9g\nmin_lr=%.9g\nepochs=%d\naugment=%d\n"
           "crop_pad=%d\nvalidation_split=%.9g\nmax_train=%d\nmax_test=%d\n"
           "synthetic_samples=%d\nmonitor=%s\nmin_delta=%.9g\npatience=%d\n"
           "batches_per_allreduce=%d\ngradient_predivide_factor=%.9g\nlr_scaling=%d\n",
           o->model, o->dataset, o->batch, ranks, (unsigned long long)o->seed, o->lr,
           o->optimizer, o->momentum, o->nesterov, o->weight_decay, o->warmup_epochs,
           o->lr_schedule, o->lr_step_epochs, o->lr_gamma, o->min_lr, o->epochs, o->augment,
           o->crop_pad, o->validation_split, o->max_train, o->max_test, o->synthetic_samples,
           o->monitor, o->min_delta, o->es_patience, o->batches_per_allreduce,
           (double)o->predivide, o->lr_scaling);
}
