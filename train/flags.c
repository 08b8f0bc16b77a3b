/* train/flags.c: parsing of the train program's flags ("--name value" or
   "--name=value"); every bad flag or value is one line naming it. */
#include "train/flags.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
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
}

typedef enum { F_BOOL, F_INT, F_FLOAT, F_U64, F_STR, F_CHOICE, F_PATH } ftype_t;

typedef struct {
  const char *name;
  ftype_t type;
  size_t offset;
  size_t size;                 /* F_STR/F_CHOICE: buffer size */
  const char *choices;         /* F_CHOICE: "a|b|c" */
  double min, max;             /* F_INT/F_FLOAT */
  const char *help;
} flag_t;

#define OFF(f) offsetof(train_opts_t, f)
#define SZ(f) sizeof(((train_opts_t *)0)->f)
static const flag_t FLAGS[] = {
    {"model", F_STR, OFF(model), SZ(model), NULL, 0, 0,
     "model name: lenet, mlp, resnet20, ... (default lenet)"},
    {"dataset", F_CHOICE, OFF(dataset), SZ(dataset), "fashion-mnist|mnist|cifar10|synthetic", 0, 0,
     "data set (default fashion-mnist)"},
    {"data-dir", F_PATH, OFF(data_dir), 0, NULL, 0, 0,
     "directory of the data set files (default /usr/share/datasets/<dataset>)"},
    {"epochs", F_INT, OFF(epochs), 0, NULL, 0, 100000, "epochs to train (default 3)"},
    {"batch-size", F_INT, OFF(batch), 0, NULL, 1, 65536, "batch size per rank (default 64)"},
    {"lr", F_FLOAT, OFF(lr), 0, NULL, 0, 100,
     "learning rate before scaling by the number of ranks (default sgd 0.01, adam 0.001)"},
    {"optimizer", F_CHOICE, OFF(optimizer), SZ(optimizer), "sgd|adam|adamw", 0, 0,
     "optimizer (default sgd)"},
    {"momentum", F_FLOAT, OFF(momentum), 0, NULL, 0, 1, "SGD momentum (default 0.9)"},
    {"nesterov", F_BOOL, OFF(nesterov), 0, NULL, 0, 0, "Nesterov momentum for SGD"},
    {"weight-decay", F_FLOAT, OFF(weight_decay), 0, NULL, 0, 10, "weight decay (default 0)"},
    {"seed", F_U64, OFF(seed), 0, NULL, 0, 0, "seed of weights, data order, augmentation (default 42)"},
    {"threads", F_INT, OFF(threads), 0, NULL, 0, 1024,
     "CPU threads per rank (default: 1 under a launcher, else all cores)"},
    {"export", F_PATH, OFF(export_path), 0, NULL, 0, 0,
     "write the trained weights to this safetensors file (PyTorch names)"},
    {"warmup-epochs", F_FLOAT, OFF(warmup_epochs), 0, NULL, 0, 10000,
     "linear warm-up from the unscaled to the scaled lr over these epochs (default 0)"},
    {"lr-schedule", F_CHOICE, OFF(lr_schedule), SZ(lr_schedule), "constant|step|cosine", 0, 0,
     "learning-rate schedule after warm-up (default constant)"},
    {"lr-step-epochs", F_FLOAT, OFF(lr_step_epochs), 0, NULL, 0.001, 1e6,
     "step schedule: multiply by --lr-gamma every this many epochs (default 30)"},
    {"lr-gamma", F_FLOAT, OFF(lr_gamma), 0, NULL, 0, 1, "step schedule factor (default 0.1)"},
    {"min-lr", F_FLOAT, OFF(min_lr), 0, NULL, 0, 100, "cosine schedule: final lr (default 0)"},
    {"early-stopping-patience", F_INT, OFF(es_patience), 0, NULL, 0, 100000,
     "stop after this many epochs without improvement of --monitor (default 0: off)"},
    {"min-delta", F_FLOAT, OFF(min_delta), 0, NULL, 0, 1e6,
     "smallest change of --monitor that counts as an improvement (default 0)"},
    {"monitor", F_CHOICE, OFF(monitor), SZ(monitor), "val_loss|val_accuracy", 0, 0,
     "quantity watched by early stopping and --save-best-only (default val_loss)"},
    {"restore-best-weights", F_BOOL, OFF(restore_best), 0, NULL, 0, 0,
     "end with the weights of the best epoch of --monitor"},
    {"checkpoint-dir", F_PATH, OFF(checkpoint_dir), 0, NULL, 0, 0,
     "write checkpoints here: last.ckpt every epoch, plus epoch-NNN.ckpt or best.ckpt"},
    {"save-best-only", F_BOOL, OFF(save_best_only), 0, NULL, 0, 0,
     "keep best.ckpt (best --monitor) instead of one file per epoch"},
    {"resume", F_PATH, OFF(resume), 0, NULL, 0, 0, "continue exactly from this checkpoint"},
    {"logdir", F_PATH, OFF(logdir), 0, NULL, 0, 0,
     "TensorBoard event file and log.csv of per-epoch scalars go here"},
    {"augment", F_BOOL, OFF(augment), 0, NULL, 0, 0,
     "random crop (pad 2 for digits, 4 for cifar10) and, for cifar10, left-right flips"},
    {"crop-pad", F_INT, OFF(crop_pad), 0, NULL, 0, 16, "padding of the random crop with --augment"},
    {"bucket-mb", F_FLOAT, OFF(bucket_mb), 0, NULL, 0.001, 4096,
     "MiB of gradients per allreduce bucket (default 4)"},
    {"fp16-allreduce", F_BOOL, OFF(fp16_allreduce), 0, NULL, 0, 0,
     "allreduce gradients as float16"},
    {"no-overlap", F_BOOL, OFF(no_overlap), 0, NULL, 0, 0,
     "start the allreduces after backward instead of during it"},
    {"device", F_CHOICE, OFF(device), SZ(device), "cpu|gpu", 0, 0,
     "cpu (default), or gpu: a build with CUDA and a GPU; local rank i uses GPU i"},
    {"use-fp16", F_BOOL, OFF(use_fp16), 0, NULL, 0, 0,
     "--device gpu: mixed precision with float16 (float32 weights, dynamic loss scaling)"},
    {"use-bf16", F_BOOL, OFF(use_bf16), 0, NULL, 0, 0,
     "--device gpu: mixed precision with bfloat16 (float32 weights, no loss scaling)"},
    {"channels-last", F_BOOL, OFF(channels_last), 0, NULL, 0, 0,
     "--device gpu: activations NHWC (what tensor-core convolutions prefer)"},
    {"validation-split", F_FLOAT, OFF(validation_split), 0, NULL, 0, 0.9,
     "fraction of the training set held out for validation (default 0.1; 0: use the test set)"},
    {"max-train", F_INT, OFF(max_train), 0, NULL, 0, 1 << 30,
     "use only the first N training samples (default all)"},
    {"max-test", F_INT, OFF(max_test), 0, NULL, 0, 1 << 30,
     "use only the first N test samples (default all)"},
    {"synthetic-samples", F_INT, OFF(synthetic_samples), 0, NULL, 16, 1 << 24,
     "training samples of --dataset synthetic (default 2048)"},
    {"quiet", F_BOOL, OFF(quiet), 0, NULL, 0, 0, "print only the summary"},
};
#define NFLAGS (sizeof FLAGS / sizeof FLAGS[0])

void train_flags_help(FILE *f, const char *prog) {
  fprintf(f,
          "usage: mpirun -np N %s [flags]\n"
          "Trains a model data-parallel on every rank (Horovod recipe: rank 0's weights\n"
          "broadcast, lr scaled by ranks with warm-up, gradients averaged in buckets during\n"
          "backward). Only rank 0 prints and writes files.\n\nflags:\n",
          prog);
  for (size_t i = 0; i < NFLAGS; i++) {
    const flag_t *fl = &FLAGS[i];
    char lhs[64];
    const char *arg = fl->type == F_BOOL ? "" : fl->type == F_CHOICE ? " CHOICE"
                      : fl->type == F_PATH ? " PATH" : fl->type == F_STR ? " NAME"
                      : fl->type == F_FLOAT ? " X" : " N";
    snprintf(lhs, sizeof lhs, "--%s%s", fl->name, arg);
    fprintf(f, "  %-30s %s", lhs, fl->help);
    if (fl->type == F_CHOICE) fprintf(f, " [%s]", fl->choices);
    fprintf(f, "\n");
  }
  fprintf(f, "  %-30s %s\n", "--help", "this text");
  fprintf(f, "Flag names take - or _ alike (--use-fp16 or --use_fp16).\n");
}

static int choice_ok(const char *choices, const char *v) {
  size_t vl = strlen(v);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == vl && strncmp(p, v, l) == 0) return 1;
    p = bar ? bar + 1 : p + l;
  }
  return 0;
}

static int set_value(const flag_t *fl, const char *v, train_opts_t *o, char *err, size_t errlen) {
  char *base = (char *)o + fl->offset;
  char *end = NULL;
  errno = 0;
  switch (fl->type) {
    case F_BOOL:
      *(int *)base = 1;
      return 0;
    case F_INT: {
      long x = strtol(v, &end, 10);
      if (errno || end == v || *end || x < fl->min || x > fl->max) {
        snprintf(err, errlen, "--%s: bad value '%s' (expected an integer in [%.0f, %.0f])",
                 fl->name, v, fl->min, fl->max);
        return -1;
      }
      *(int *)base = (int)x;
      return 0;
    }
    case F_FLOAT: {
      double x = strtod(v, &end);
      if (errno || end == v || *end || !isfinite(x) || x < fl->min || x > fl->max) {
        snprintf(err, errlen, "--%s: bad value '%s' (expected a number in [%g, %g])", fl->name,
                 v, fl->min, fl->max);
        return -1;
      }
      *(float *)base = (float)x;
      return 0;
    }
    case F_U64: {
      if (*v == '-') {
        snprintf(err, errlen, "--%s: bad value '%s' (expected a non-negative integer)", fl->name, v);
        return -1;
      }
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || end == v || *end) {
        snprintf(err, errlen, "--%s: bad value '%s' (expected a non-negative integer)", fl->name, v);
        return -1;
      }
      *(uint64_t *)base = x;
      return 0;
    }
    case F_CHOICE:
      if (!choice_ok(fl->choices, v)) {
        snprintf(err, errlen, "--%s: bad value '%s' (expected one of %s)", fl->name, v,
                 fl->choices);
        return -1;
      }
      /* fall through */
    case F_STR:
      if (*v == '\0' || strlen(v) >= fl->size) {
        snprintf(err, errlen, "--%s: bad value '%s' (empty or too long)", fl->name, v);
        return -1;
      }
      strcpy(base, v);
      return 0;
    case F_PATH:
      if (*v == '\0') {
        snprintf(err, errlen, "--%s: empty path", fl->name);
        return -1;
      }
      *(const char **)base = v;
      return 0;
  }
  return -1;
}

/* tf_cnn_benchmarks and Horovod's examples spell flags with '_', Keras-style scripts
   with '-': both name the same flag. */
static int same_name(const char *flag, const char *arg, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char a = arg[i] == '_' ? '-' : arg[i];
    if (flag[i] != a) return 0;
  }
  return 1;
}

int train_flags_parse(int argc, char **argv, train_opts_t *o, char *err, size_t errlen) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
    if (strncmp(a, "--", 2) != 0) {
      snprintf(err, errlen, "%s: unexpected argument (flags start with --; see --help)", a);
      return -1;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nl = eq ? (size_t)(eq - name) : strlen(name);
    const flag_t *fl = NULL;
    for (size_t k = 0; k < NFLAGS; k++)
      if (strlen(FLAGS[k].name) == nl && same_name(FLAGS[k].name, name, nl)) fl = &FLAGS[k];
    if (!fl) {
      snprintf(err, errlen, "--%.*s: unknown flag (see --help)", (int)nl, name);
      return -1;
    }
    const char *v;
    if (fl->type == F_BOOL) {
      if (eq) {
        snprintf(err, errlen, "--%s: takes no value", fl->name);
        return -1;
      }
      v = "1";
    } else if (eq) {
      v = eq + 1;
    } else {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "--%s: missing value", fl->name);
        return -1;
      }
      v = argv[++i];
    }
    if (set_value(fl, v, o, err, errlen) != 0) return -1;
  }
  if (o->lr < 0) o->lr = strcmp(o->optimizer, "sgd") == 0 ? 0.01f : 0.001f;
  if (o->restore_best && o->es_patience == 0 && !o->checkpoint_dir) {
    /* Keras allows it without early stopping too: the best epoch is still tracked. */
  }
  return 0;
}

void train_flags_describe(const train_opts_t *o, int ranks, char *buf, size_t len) {
  snprintf(buf, len,
           "model=%s\ndataset=%s\nbatch_size=%d\nranks=%d\nseed=%llu\nlr=%.9g\noptimizer=%s\n"
           "momentum=%.9g\nnesterov=%d\nweight_decay=%.9g\nwarmup_epochs=%.9g\nlr_schedule=%s\n"
           "lr_step_epochs=%.9g\nlr_gamma=%.9g\nmin_lr=%.9g\nepochs=%d\naugment=%d\n"
           "crop_pad=%d\nvalidation_split=%.9g\nmax_train=%d\nmax_test=%d\n"
           "synthetic_samples=%d\nmonitor=%s\nmin_delta=%.9g\npatience=%d\n",
           o->model, o->dataset, o->batch, ranks, (unsigned long long)o->seed, o->lr,
           o->optimizer, o->momentum, o->nesterov, o->weight_decay, o->warmup_epochs,
           o->lr_schedule, o->lr_step_epochs, o->lr_gamma, o->min_lr, o->epochs, o->augment,
           o->crop_pad, o->validation_split, o->max_train, o->max_test, o->synthetic_samples,
           o->monitor, o->min_delta, o->es_patience);
}
