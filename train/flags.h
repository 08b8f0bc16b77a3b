/* train/flags.h: command-line flags of the train program. */
#ifndef TRAIN_FLAGS_H
#define TRAIN_FLAGS_H

#include <stdint.h>
#include <stdio.h>

/* A repeatable flag's values (--freeze, --init-skip): glob patterns over tensor names. */
#define TRAIN_MAX_PATTERNS 32
typedef struct {
  const char *items[TRAIN_MAX_PATTERNS];
  int count;
} train_patterns_t;

typedef struct {
  char model[1024];            /* a built-in name, or --model-file's ONNX path */
  char dataset[32];
  const char *data_dir;        /* NULL: the data set's default */
  int epochs;
  int batch;                   /* per rank */
  float lr;                    /* before scaling by the number of ranks */
  char optimizer[16];          /* sgd | adam | adamw */
  float momentum, weight_decay;
  int nesterov;
  uint64_t seed;
  int threads;                 /* 0: nn's default */
  const char *export_path;
  const char *export_onnx_path; /* --export-onnx */
  float warmup_epochs;
  char lr_schedule[16];        /* constant | step | cosine */
  float lr_step_epochs, lr_gamma, min_lr;
  int es_patience;             /* 0: no early stopping */
  float min_delta;
  char monitor[16];            /* val_loss | val_accuracy */
  int restore_best;
  const char *checkpoint_dir;
  int save_best_only;
  int checkpoint_every_steps;  /* 0: checkpoints at epoch ends only */
  const char *resume;          /* a path, or "auto" */
  const char *logdir;
  int augment;
  int crop_pad;                /* -1: the data set's default when --augment */
  float bucket_mb;
  int fp16_allreduce;
  int no_overlap;
  char device[16];
  int use_fp16, use_bf16;      /* --device gpu: mixed precision (float16 or bfloat16) */
  int channels_last;           /* --device gpu: NHWC activations */
  float validation_split;
  int max_train, max_test;     /* 0: all */
  int synthetic_samples;
  /* --dataset idx: the four IDX files (images idx3, labels idx1, gzip or plain) */
  const char *train_images, *train_labels, *test_images, *test_labels;
  const char *init_weights;    /* safetensors file to start from (PyTorch names), or NULL */
  int batches_per_allreduce;   /* Horovod's backward_passes_per_step: local passes summed
                                  before one allreduce and one optimizer step */
  float predivide;             /* Horovod's gradient_predivide_factor (1: none) */
  int lr_scaling;              /* 1: lr x ranks x batches_per_allreduce (--no-lr-scaling: 0) */
  int tb_update_freq;          /* TensorBoard batch_* scalars every N batches (0: epochs only) */
  int histogram_freq;          /* TensorBoard weight histograms every N epochs (0: none) */
  int quiet;
  /* Pipeline model parallelism (train/pipeline.h): stages S (1: none), micro-batches M
     per replica batch, "gpipe" or "1f1b". */
  int pipeline_stages, micro_batches;
  char pipeline_schedule[8];
  /* Transfer learning (train/transfer.c). */
  train_patterns_t freeze;     /* --freeze: layers that keep their weights */
  train_patterns_t init_skip;  /* --init-skip: tensors --init-weights leaves at their init */
  int num_classes;             /* 0: the data's */
  int unfreeze_at_epoch;       /* 0: never; E: epochs E+1.. train every layer */
  float fine_tune_lr;          /* lr from --unfreeze-at-epoch on (0: --lr) */
  /* --dataset imagefolder | tfrecord | filelist (train/data_images.h) */
  int image_size;              /* 0: the model's input size */
  int channels;                /* 0: the model's input channels */
  int data_threads, prefetch;
  int skip_bad_images;
  /* Parameter servers (train/ps_update.c) instead of the ring, and the straggler knob. */
  char variable_update[16];    /* horovod | ps-sync | ps-async */
  int num_ps;                  /* dedicated servers (ranks 0..K-1); 0: colocated */
  char ps_placement[16];       /* greedy | round-robin */
  char ps_local_aggregation[8];  /* auto | on | off (ps-sync) */
  int max_staleness;           /* ps-async: -1 unbounded */
  int straggler_delay_ms, straggler_rank;   /* that rank sleeps that long each step */
} train_opts_t;

void train_flags_defaults(train_opts_t *o);
/* 0: parsed; 1: --help was given; -1: bad flag or value, one line in err naming it.
   Flag names take '-' or '_' alike (--batch-size, --batch_size). */
int train_flags_parse(int argc, char **argv, train_opts_t *o, char *err, size_t errlen);
void train_flags_help(FILE *f, const char *prog);
/* The settings as "key=value\n" lines (for checkpoints and the log). */
void train_flags_describe(const train_opts_t *o, int ranks, char *buf, size_t len);

#endif /* TRAIN_FLAGS_H */
