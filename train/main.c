/* train/main.c: the `train` program. Trains a model of nn data-parallel on every
   rank with the hvd runtime, in the Horovod recipe:
     - rank 0's initial weights and buffers (and optimizer state on resume) are
       broadcast to all ranks;
     - each rank trains on its slice of each global batch of an epoch order drawn from
       the shared seed (the same batches on any number of ranks: train/data.h);
     - the learning rate is scaled by the number of ranks, with a linear warm-up from
       the unscaled rate;
     - gradients are averaged in fixed buckets (ranges of the flat gradient buffer) whose
       allreduces start from nn's grad-ready callback during backward, and are waited on
       before the optimizer step;
     - validation loss and accuracy are sums and counts allreduced over the ranks;
     - only rank 0 prints and writes files.
   --device gpu: the model, its gradients and its optimizer live on GPU local_rank
   (nn_model_to_device), the buckets are allreduced in device memory (NCCL); the data
   stays on the host and nn_model_forward copies each batch up. The loop itself is the
   same on either device: nn keeps parameters, gradients and optimizer where the model
   lives (nn_model_optim_step, nn_model_scale_grads, nn_model_zero_grads), and the host
   arrays (nn_model_params, nn_model_optim_state, ...) are the mirror that broadcasts,
   checkpoints, best weights and --export read, refreshed by nn_model_sync_to_host once
   per epoch and before export (no-ops on the CPU).
   --use-fp16 / --use-bf16 (GPU only): mixed precision (nn_model_set_precision before
   the move; nn_model_optim_step unscales and adapts the loss scale); weights, gradients,
   optimizer state and checkpoints stay float32, and the fp16 loss scale is shown every
   epoch.
   main() is the outline; its phases are the functions above it. Flags: train/flags.c;
   data: train/data.c; the replica's set-up (shared with cnn_bench): train/replica.c;
   one step: train/step.c; the run's checkpoints and resuming: train/resume.c (the file
   format: train/checkpoint.c); --logdir, --export and the output directories:
   train/outputs.c; callbacks (EarlyStopping, ModelCheckpoint, CSV): train/callbacks.c;
   TensorBoard: train/tfevents.c; progress display: train/progress.c. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/agree.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/export_onnx.h"
#include "train/data_images.h"
#include "train/flags.h"
#include "train/outputs.h"
#include "train/pipeline_run.h"
#include "train/progress.h"
#include "train/ps_run.h"
#include "train/ps_update.h"
#include "train/replica.h"
#include "train/resume.h"
#include "train/step.h"
#include "train/tfevents.h"
#include "train/transfer.h"
#include "hvd/hvd.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"
#include "util/clock.h"

/* ---- errors: one line on stderr from rank 0, then a non-zero exit on every rank ---- */

static int g_rank;            /* set from the launcher's environment before hvd_init */
static int g_hvd_up;

/* Prints msg from rank 0, shuts the runtime down and exits with code on every rank. */
static void die_msg(int code, const char *msg) __attribute__((noreturn));
static void die_msg(int code, const char *msg) {
  if (g_rank == 0) {
    fprintf(stderr, "train: %s\n", msg);
    fflush(stderr);
  }
  /* Before the runtime is up (bad data, found on every rank alike), only rank 0 says
     why; the others wait a moment before they exit, or the launcher, which ends the job
     at the first rank that exits non-zero, could end rank 0 before its line is out. */
  if (g_rank != 0 && !g_hvd_up) sleep(2);
  if (g_hvd_up) hvd_shutdown();
  exit(code);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  char msg[12288];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die_msg(1, msg);
}

/* A mistake in what the user gave (exit status 2, as a bad flag): found before the
   runtime is up and before anything is written. */
static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
  char msg[12288];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die_msg(2, msg);
}

static int g_launched;        /* started by mpirun/hvdrun (a rank variable was set) */

static int env_rank(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HVD_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      g_launched = 1;
      return atoi(v);
    }
  }
  return 0;
}

/* Whether s is rank 0 having shut the runtime down on its way out (die, or a failure it
   reported itself): it printed the reason, so a line from here would only blame the
   collective this rank happened to be in. */
static int stopped_by_rank0(hvd_status_t s) {
  return s == HVD_ERR_SHUTDOWN && g_rank != 0 &&
         strstr(hvd_last_error(), "hvd_shutdown was called on rank 0") != NULL;
}

/* MiB of float32 gradients in b's largest bucket. */
static double largest_bucket_mib(const hvd_grad_buckets_t *b) {
  size_t most = 0;
  for (size_t k = 0; k < hvd_grad_buckets_num(b); k++) {
    size_t count;
    hvd_grad_buckets_range(b, k, NULL, &count);
    if (count > most) most = count;
  }
  return (double)most * sizeof(float) / 1048576.0;
}

/* A runtime failure (a peer lost, a stall, a mismatch) can show on any rank, so every
   rank reports it, naming itself; except when rank 0 stopped everybody (above): then
   the other ranks exit non-zero without a line of their own. */
static void hvd_check(hvd_status_t s, const char *what) {
  if (s == HVD_OK) return;
  if (!stopped_by_rank0(s)) {
    fprintf(stderr, "train: rank %d: %s failed: %s (%s)\n", g_rank, what, hvd_status_string(s),
            hvd_last_error());
    fflush(stderr);
  }
  if (g_hvd_up) hvd_shutdown();
  exit(1);
}

static void nn_check(nn_status_t s, const char *what) {
  if (s != NN_OK) die("%s: %s", what, nn_last_error());
}

/* GPU failures (out of device memory, a missing device for this local rank) can differ
   between ranks, so the rank that sees one reports it. */
static void nn_check_rank(nn_status_t s, const char *what) {
  if (s == NN_OK) return;
  fprintf(stderr, "train: rank %d: %s failed: %s (%s)\n", g_rank, what, nn_status_string(s),
          nn_last_error());
  fflush(stderr);
  if (g_hvd_up) hvd_shutdown();
  exit(1);
}

/* Failures of nn on the model's device: on a GPU they can differ between ranks (out of
   device memory, a missing device for this local rank), so each rank reports its own;
   on the CPU every rank fails the same way and rank 0 speaks for all. */
static int g_gpu;
static void nn_check_model(nn_status_t s, const char *what) {
  if (g_gpu) nn_check_rank(s, what);
  else nn_check(s, what);
}

/* Appends one item to an epoch line's note, "; " between items. */
static void note_add(char *note, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_add(char *note, size_t size, const char *fmt, ...) {
  size_t l = strlen(note);
  if (l + 2 >= size) return;
  if (l) {
    memcpy(note + l, "; ", 3);
    l += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note + l, size - l, fmt, ap);
  va_end(ap);
}

/* ---- evaluation across ranks ---- */
typedef struct {
  double loss, acc;
} eval_t;

/* One evaluation batch's loss * n, correct and n added to sums. */
static void eval_batch(nn_model_t *m, const float *x, const int32_t *y, int n, double sums[3]) {
  float loss;
  int correct;
  nn_check(nn_model_forward(m, x, n, 0), "forward (evaluation)");
  nn_check(nn_model_loss(m, y, &loss, &correct), "loss (evaluation)");
  sums[0] += (double)loss * n;
  sums[1] += correct;
  sums[2] += n;
}

static eval_t evaluate(nn_model_t *m, const train_dataset_t *d, const train_batch_opts_t *bo,
                       int batch, int rank, int size, float *x, int32_t *y, uint32_t *idx,
                       const char *name) {
  int b, e;
  train_shard_range(d->n, rank, size, &b, &e);
  double sums[3] = {0, 0, 0}; /* loss * n, correct, n */
  train_batch_opts_t plain = *bo;
  plain.aug_pad = 0;
  plain.aug_flip = 0;
  for (int i = b; i < e; i += batch) {
    int n = e - i < batch ? e - i : batch;
    for (int k = 0; k < n; k++) idx[k] = (uint32_t)(i + k);
    train_make_batch(d, idx, n, &plain, x, y);
    eval_batch(m, x, y, n, sums);
  }
  hvd_check(hvd_allreduce(name, sums, sums, 3, HVD_FLOAT64, HVD_SUM), "allreduce of metrics");
  eval_t r = {sums[2] > 0 ? sums[0] / sums[2] : 0, sums[2] > 0 ? sums[1] / sums[2] : 0};
  return r;
}

/* A mid-epoch checkpoint (every rank takes part): the epoch's metrics so far summed over
   the ranks, every rank's batch-norm statistics (they are averaged only at epoch ends)
   gathered; rank 0 writes last.ckpt with their average as the buffers and all of them as
   rank.buffers, so that a resume on as many ranks goes on exactly. */
static void save_mid_epoch(train_run_t *r, int rank, int steps_done, int steps, const double sums[3],
                           double seconds) {
  nn_model_t *m = r->model;
  size_t nb = nn_model_num_buffers(m);
  nn_check_model(nn_model_sync_to_host(m), "copying the model to the host");
  double tot[3];
  hvd_check(hvd_allreduce("ckpt.metrics", sums, tot, 3, HVD_FLOAT64, HVD_SUM),
            "allreduce of metrics");
  float *all = NULL, *avg = NULL;
  if (nb > 0 && r->ranks > 1) {
    size_t got = 0;
    void *buf = NULL;
    hvd_check(hvd_allgather("ckpt.buffers", nn_model_buffers(m), nb, HVD_FLOAT32, &buf, &got),
              "allgather of buffers");
    all = buf;
    avg = calloc(nb, sizeof *avg);
    if (!avg) die("out of memory for a checkpoint");
    for (int k = 0; k < r->ranks; k++)
      for (size_t i = 0; i < nb; i++) avg[i] += all[(size_t)k * nb + i] / (float)r->ranks;
  }
  if (rank == 0) {
    r->st[ST_STEPS_DONE] = steps_done;
    r->st[ST_STEPS_PER_EPOCH] = steps;
    r->st[ST_EPOCH_LOSS_SUM] = tot[0];
    r->st[ST_EPOCH_CORRECT] = tot[1];
    r->st[ST_EPOCH_SAMPLES] = tot[2];
    r->st[ST_EPOCH_SECONDS] = seconds;
    char p[4200];
    snprintf(p, sizeof p, "%s/last.ckpt", r->o->checkpoint_dir);
    char err[8192];
    if (train_run_save(r, p, avg, all, err, sizeof err) != 0) die("%s", err);
  }
  free(all);
  free(avg);
}

static void bcast(const char *name, void *buf, size_t count, hvd_dtype_t t) {
  if (count == 0) return;
  hvd_check(hvd_broadcast(name, buf, count, t, 0), name);
}

/* train/resume.c's warnings: one line on stderr. */
static void warn_line(const char *line) { fprintf(stderr, "train: %s\n", line); }

/* ---- the run: everything the phases of main share ---- */

typedef struct {
  train_opts_t o;
  int rank, size, gpu;
  nn_precision_t precision;
  /* the data, loaded on every rank before the runtime is up */
  train_dataset_t train, test, val;
  int val_is_test, is_idx;
  float norm_mean[3], norm_std[3];
  nn_model_t *init;                /* --init-weights, until copied into the model */
  /* the replica and what checkpoints carry */
  train_run_t run;
  train_replica_t rep;             /* the model and its gradient buckets */
  size_t np, nb;
  int ncounters;
  train_early_stopping_t es;
  train_monitor_t ckmon;           /* ModelCheckpoint's own best: no min_delta, as Keras */
  int resumed;
  char resumed_from[4400];
  /* the loop */
  nn_lr_schedule_t sched;
  train_batch_opts_t bo;
  float *x;
  int32_t *y;
  uint32_t *perm, *idx;
  train_outputs_t out;
  train_progress_t prog;
  train_step_t step;
  int steps, accum, windows;       /* per epoch: batches, batches per window, windows */
  int start_epoch, start_step;
  long long kill_at;               /* test knob: SIGKILL rank 0 at this global step */
  /* --variable-update ps-*: the parameter servers; the data is shared by the workers
     only (data_rank -1: a dedicated server, no samples). horovod: rank and size. */
  train_ps_t *ps;
  int data_rank, data_size;
  double last_lr;
  int stopped_early;
  /* --pipeline-stages S > 1 (train/pipeline.h): the pipeline; data_rank and data_size
     are then this rank's replica among size / S. */
  train_pipeline_t *pipe;
  /* --dataset imagefolder | tfrecord | filelist: the sets are streamed (train/data_images.h);
     train, val and test then hold their shapes only. */
  train_images_t *images;
} trainer_t;

/* ---- streamed image sets (--dataset imagefolder | tfrecord | filelist) ---- */

/* A bad image stops the run; the rank that read it says which (die speaks on rank 0). */
static void die_images(const trainer_t *t, const char *err) {
  if (t->rank != 0) {
    fprintf(stderr, "train: rank %d: %s\n", t->rank, err);
    fflush(stderr);
  }
  die("%s", err);
}

/* Whether this rank reads training batches: a data rank, and in a pipeline its stage 0
   (which sends the other stages what they need: train/pipeline.h). */
static int reads_batches(const trainer_t *t) {
  return t->data_rank >= 0 && (!t->pipe || train_pipeline_stage(t->pipe) == 0);
}

/* Starts the decode threads of this rank's slices of the epoch, from step first. */
static void images_epoch_begin(trainer_t *t, int epoch, int first) {
  char err[8192];
  if (t->images && reads_batches(t) &&
      train_images_begin(t->images, TRAIN_IMAGES_TRAIN, epoch, first, t->data_rank,
                         t->data_size, t->o.batch, err, sizeof err) != 0)
    die_images(t, err);
}

/* The batch of step s into t->x, t->y; its sample count (fewer than the slice's when
   --skip-bad-images left some out). */
static int images_batch(trainer_t *t, int s) {
  char err[8192];
  int n = 0, step = -1;
  int rc = train_images_next(t->images, t->x, t->y, &n, &step, err, sizeof err);
  if (rc < 0) die_images(t, err);
  if (rc == 0 || step != s) die("input pipeline: batch of step %d where step %d was due", step, s);
  return n;
}

/* Evaluation on the streamed validation or test part, every sample once over the ranks. */
static eval_t evaluate_images(trainer_t *t, int part, const char *name) {
  char err[8192];
  double sums[3] = {0, 0, 0};
  int n, step, rc;
  if (train_images_begin(t->images, part, 0, 0, t->rank, t->size, t->o.batch, err,
                         sizeof err) != 0)
    die_images(t, err);
  while ((rc = train_images_next(t->images, t->x, t->y, &n, &step, err, sizeof err)) == 1)
    if (n > 0) eval_batch(t->rep.model, t->x, t->y, n, sums);
  if (rc < 0) die_images(t, err);
  train_images_end(t->images);
  hvd_check(hvd_allreduce(name, sums, sums, 3, HVD_FLOAT64, HVD_SUM), "allreduce of metrics");
  eval_t r = {sums[2] > 0 ? sums[0] / sums[2] : 0, sums[2] > 0 ? sums[1] / sums[2] : 0};
  return r;
}

/* --skip-bad-images: rank 0 says how many images all ranks left out. */
static void images_summary(const trainer_t *t) {
  if (!t->images) return;
  double skipped = (double)train_images_skipped(t->images);
  hvd_check(hvd_allreduce("images.skipped", &skipped, &skipped, 1, HVD_FLOAT64, HVD_SUM),
            "allreduce of the skipped images");
  if (t->rank == 0 && skipped > 0)
    printf("--skip-bad-images: %.0f bad image(s) left out (counted each time one was read)\n",
           skipped);
}

/* ---- parameter servers (--variable-update ps-sync | ps-async; train/ps_run.h) ---- */

static train_replica_opts_t replica_opts(const trainer_t *t);
static int ps_mode(const train_opts_t *o) { return train_ps_run_enabled(o); }

/* A failure of train/ps_run.c: a runtime call's as every other, else its message. */
static void ps_check(int rc, const train_ps_run_err_t *e) {
  if (rc == 0) return;
  if (e->hvd != HVD_OK) hvd_check(e->hvd, e->what);
  die_msg(e->status, e->err);
}

static void check_ps_flags(const train_opts_t *o) {
  train_ps_run_err_t e;
  ps_check(train_ps_run_check_flags(o, &e), &e);
}

/* Who trains on the data: the workers (ranks num_ps..size-1) with ps-*, else every rank. */
static void ps_data_ranks(trainer_t *t) {
  train_ps_run_err_t e;
  ps_check(train_ps_run_data_ranks(&t->o, t->rank, t->size, &t->data_rank, &t->data_size, &e),
           &e);
}

/* The servers, over the replica as every rank holds it now (a resumed one included): the
   step pushes to them instead of the ring's buckets and the local optimizer. */
static void ps_start(trainer_t *t) {
  if (!ps_mode(&t->o)) return;
  train_ps_run_start_t at = {.optim = replica_opts(t).optim, .sched = t->sched,
                             .steps = t->steps, .accum = t->accum, .windows = t->windows,
                             .start_epoch = t->start_epoch, .start_step = t->start_step};
  train_ps_run_err_t e;
  ps_check(train_ps_run_start(&t->ps, &t->o, t->rep.model, &at, &e), &e);
  t->step.ps = t->ps;
  t->step.buckets = NULL;
}

static void ps_epoch_end(trainer_t *t) {
  train_ps_run_err_t e;
  ps_check(train_ps_run_epoch_end(t->ps, t->rep.model, t->o.checkpoint_dir != NULL, t->rank,
                                  &e), &e);
}

/* After the last epoch: the servers stop; rank 0 prints their traffic and staleness (and
   with --logdir writes the staleness histogram). */
static void ps_end(trainer_t *t) {
  if (!t->ps) return;
  train_ps_run_report_t r;
  train_ps_run_err_t e;
  int rc = train_ps_run_end(t->ps, &t->o, t->rank, &r, &e);
  t->ps = NULL;
  t->step.ps = NULL;
  ps_check(rc, &e);
  if (t->rank != 0) return;
  char line[2048];
  train_ps_run_format(&r, &t->o, line, sizeof line);
  printf("%s\n", line);
  fflush(stdout);
  if (t->o.logdir)
    ps_check(train_ps_run_staleness_to_tensorboard(&t->out.tb[TB_TRAIN], t->o.logdir, &r,
                                                   (int64_t)t->run.st[ST_EPOCHS_DONE] - 1,
                                                   train_wall_time(), &e), &e);
}

/* Flag combinations that cannot work, found before any data is loaded. */
static void check_flags(trainer_t *t) {
  const train_opts_t *o = &t->o;
  t->gpu = g_gpu = strcmp(o->device, "gpu") == 0;
  if (o->use_fp16 && o->use_bf16) die("--use-fp16 and --use-bf16 together: choose one precision");
  char perr[1024];
  if (train_pipeline_run_check(o, t->gpu, ps_mode(o), perr, sizeof perr) != 0)
    die_usage("%s", perr);
  if (ps_mode(o) && o->freeze.count > 0)
    die_usage("--freeze with --variable-update %s: the parameter servers update every "
              "tensor; freeze with --variable-update horovod", o->variable_update);
  /* On the CPU nn computes in float32 only: stop before any data is loaded. */
  if (!t->gpu && (o->use_fp16 || o->use_bf16))
    die("%s: mixed precision needs --device gpu (on the CPU nn computes in float32; "
        "--fp16-allreduce compresses only the gradient allreduce)",
        o->use_fp16 ? "--use-fp16" : "--use-bf16");
  if (!t->gpu && o->channels_last)
    die("--channels-last needs --device gpu (on the CPU nn's layout is NCHW)");
  if (o->batches_per_allreduce > 1 && (o->use_fp16 || o->use_bf16 || o->channels_last))
    die_usage("--batches-per-allreduce %d: accumulating gradients needs float32 NCHW on the "
              "GPU (a %s model overwrites its gradients in backward); drop %s",
              o->batches_per_allreduce,
              o->use_fp16 ? "fp16" : o->use_bf16 ? "bf16" : "channels-last",
              o->use_fp16 ? "--use-fp16" : o->use_bf16 ? "--use-bf16" : "--channels-last");
  if (o->checkpoint_every_steps > 0 && !o->checkpoint_dir)
    die("--checkpoint-every-steps %d needs --checkpoint-dir (where last.ckpt goes)",
        o->checkpoint_every_steps);
  if (o->resume && strcmp(o->resume, "auto") == 0 && !o->checkpoint_dir)
    die("--resume auto needs --checkpoint-dir (the directory to resume from)");
  t->precision = o->use_fp16   ? NN_PRECISION_FP16
                 : o->use_bf16 ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
  /* nn_cuda_available() only asks cudaGetDeviceCount (nothing without CUDA in the
     build): safe before MPI is up, and every rank fails the same way. */
  if (t->gpu && !nn_cuda_available())
    die("--device gpu: no usable GPU (%s); use --device cpu", nn_cuda_reason());
  check_ps_flags(o);
}

/* The data sets and their normalisation; a bad file ends every rank the same way,
   quickly, before the runtime is up. */
static void load_data(trainer_t *t) {
  const train_opts_t *o = &t->o;
  char err[8192];
  /* Probe the model's input shape (synthetic data takes it; real data must match it). */
  nn_model_config_t probe_cfg = {.batch = 1, .seed = o->seed};
  nn_model_t *probe = NULL;
  if (nn_model_create_from(&probe, o->model, &probe_cfg) != NN_OK) die("--model: %s", nn_last_error());
  int mc, mh, mw;
  nn_model_input_shape(probe, &mc, &mh, &mw);
  nn_model_free(probe);

  int synth_test = o->synthetic_samples / 4 > 16 ? o->synthetic_samples / 4 : 16;
  t->is_idx = strcmp(o->dataset, "idx") == 0;
  /* Image files (train/data_images.c): streamed, decoded batch by batch during the passes;
     their normalisation, --max-* and --validation-split are the file lists'. */
  int images = train_is_image_dataset(o->dataset);
  int loaded = images ? train_images_open(o, mc, mh, mw, &t->images, &t->train, &t->val,
                                          &t->test, &t->val_is_test, t->norm_mean,
                                          t->norm_std, err, sizeof err)
               : t->is_idx
                   ? train_load_idx_sets(o->train_images, o->train_labels, o->test_images,
                                         o->test_labels, &t->train, &t->test, err, sizeof err)
                   : train_load_dataset(o->dataset, o->data_dir, o->seed, mc, mh, mw,
                                        o->synthetic_samples, synth_test, &t->train, &t->test,
                                        err, sizeof err);
  if (loaded != 0) die("%s", err);
  if (o->num_classes > 0 && o->num_classes < t->train.num_classes)
    die_usage("--num-classes %d: the data has %d classes (labels up to %d); give at least %d",
              o->num_classes, t->train.num_classes, t->train.num_classes - 1,
              t->train.num_classes);
  if (images) return;
  /* Normalisation: the named sets' published constants; a user's IDX files carry none, so
     their training images' own mean and std (before --max-train: a property of the file). */
  if (t->is_idx) train_norm_from_data(&t->train, t->norm_mean, t->norm_std);
  else train_norm_constants(o->dataset, t->norm_mean, t->norm_std);
  train_truncate(&t->train, o->max_train);
  train_truncate(&t->test, o->max_test);
  int nval = (int)(t->train.n * (double)o->validation_split);
  if (nval > 0) {
    if (train_split_tail(&t->train, nval, &t->val, err, sizeof err) != 0)
      die("--validation-split: %s", err);
  } else {
    t->val = t->test;
    t->val_is_test = 1;
  }
}

/* The classes of the model's head: --num-classes, else the data's. */
static int model_classes(const trainer_t *t) {
  return t->o.num_classes > 0 ? t->o.num_classes : t->train.num_classes;
}

/* --init-weights: read and checked against the model on every rank before the runtime is
   up, so a wrong file ends every rank alike with nothing written; copied into the model
   unless a checkpoint is resumed. */
static void load_init_weights(trainer_t *t) {
  const train_opts_t *o = &t->o;
  if (!o->init_weights) return;
  nn_model_config_t icfg = {.batch = 1, .seed = o->seed, .num_classes = model_classes(t),
                            .in_channels = t->train.c, .in_height = t->train.h,
                            .in_width = t->train.w};
  if (nn_model_create_from(&t->init, o->model, &icfg) != NN_OK)
    die("--model %s with %s (%dx%dx%d): %s", o->model, o->dataset, t->train.c, t->train.h,
        t->train.w, nn_last_error());
  char err[8192];
  if (o->init_skip.count > 0) {
    if (train_load_init_skip(t->init, o->init_weights, &o->init_skip, err, sizeof err) != 0)
      die_usage("%s", err);
  } else if (nn_model_load_safetensors(t->init, o->init_weights) != NN_OK) {
    die_usage("--init-weights: %s", nn_last_error());
  }
}

/* Every rank's shared settings and data set sizes, compared with rank 0's right after
   hvd_init: ranks started with other flags end at once with one line naming the flag
   and both values, instead of stalling in their first mismatched allreduce. */
static void check_ranks_agree(const train_opts_t *o, const train_agree_data_t *d, int size) {
  char mine[TRAIN_AGREE_LEN];
  train_agree_describe(o, d, mine);
  void *all = NULL;
  size_t got = 0;
  hvd_check(hvd_allgather("setup.agree", mine, sizeof mine, HVD_UINT8, &all, &got),
            "allgather of the settings");
  if (got != (size_t)size * sizeof mine) {
    free(all);
    die("allgather of the settings: %zu bytes, expected %d x %zu", got, size, sizeof mine);
  }
  char err[1024];
  int rc = train_agree_compare(all, size, err, sizeof err);
  free(all);
  if (rc != 0) die_usage("%s", err);
}

/* The normalisation: each host measured it on its own copy of the data (an image set's
   sample, a user's IDX files), so copies that differ by a file, or a host whose
   measurement decoded other pixels, would feed the replicas differently scaled inputs.
   Every rank takes rank 0's. HVD_TRAIN_TEST_PRINT_NORM: each rank prints what it uses. */
static void agree_norm(trainer_t *t) {
  float ms[6];
  memcpy(ms, t->norm_mean, sizeof t->norm_mean);
  memcpy(ms + 3, t->norm_std, sizeof t->norm_std);
  bcast("setup.norm", ms, 6, HVD_FLOAT32);
  memcpy(t->norm_mean, ms, sizeof t->norm_mean);
  memcpy(t->norm_std, ms + 3, sizeof t->norm_std);
  if (t->images) train_images_set_norm(t->images, t->norm_mean, t->norm_std);
  if (getenv("HVD_TRAIN_TEST_PRINT_NORM"))
    fprintf(stderr, "train: rank %d normalises with mean %.9g %.9g %.9g std %.9g %.9g %.9g\n",
            t->rank, (double)ms[0], (double)ms[1], (double)ms[2], (double)ms[3],
            (double)ms[4], (double)ms[5]);
}

/* hvd_init, the ranks' agreement on their flags, and the GPU of this local rank. */
static void start_runtime(trainer_t *t) {
  /* The gradients already go in fixed buckets (--bucket-mb). Fusing ready buckets once
     more would make each element's summation order in the ring depend on timing (which
     buckets were ready together), so runs on 3 or more ranks would not repeat bit for
     bit, nor a resumed run follow the uninterrupted one. Unless the user chose a fusion
     threshold, train runs with the runtime's fusion off. */
  if (!getenv("HVD_FUSION_THRESHOLD") && !getenv("HOROVOD_FUSION_THRESHOLD") &&
      setenv("HVD_FUSION_THRESHOLD", "0", 1) != 0)
    die("setenv: %s", strerror(errno));
  char perr[512];
  if (t->o.pipeline_stages > 1 && train_pipeline_mpi_init(perr, sizeof perr) != 0)
    die("--pipeline-stages: %s", perr);
  hvd_check(hvd_init(), "hvd_init");
  g_hvd_up = 1;
  t->rank = g_rank = hvd_rank();
  t->size = hvd_size();
  if (t->size % t->o.pipeline_stages != 0)
    die_usage("--pipeline-stages %d does not divide the %d ranks (np must be replicas x "
              "stages)", t->o.pipeline_stages, t->size);
  ps_data_ranks(t);
  if (t->o.pipeline_stages > 1) {   /* this rank's replica of the pipeline */
    t->data_size = t->size / t->o.pipeline_stages;
    t->data_rank = t->rank / t->o.pipeline_stages;
  }
  const train_agree_data_t sizes = {t->train.n, t->val_is_test ? 0 : t->val.n, t->test.n};
  check_ranks_agree(&t->o, &sizes, t->size);
  agree_norm(t);
  if (t->train.n < t->size) die("%d training samples cannot feed %d ranks", t->train.n, t->size);
#ifdef NN_WITH_CUDA
  /* A CUDA build on a machine without a usable GPU: say so once (the reason, and that
     it runs on the CPU). */
  if (t->rank == 0 && !t->o.quiet && !nn_cuda_available()) {
    printf("train: %s\n", nn_cuda_info());
    fflush(stdout);
  }
#endif
  if (t->gpu) {
    /* Before any other CUDA work of this process: local rank i drives GPU i. */
    nn_check_rank(nn_cuda_set_device(hvd_local_rank()), "selecting the GPU");
    if (t->rank == 0 && !t->o.quiet) {
      printf("train: %s; local rank i uses GPU i; precision %s\n", nn_cuda_info(),
             nn_precision_name(t->precision));
      fflush(stdout);
    }
  }
}

/* The replica's settings (train/replica.h) for batches of o->batch samples. */
static train_replica_opts_t replica_opts(const trainer_t *t) {
  const train_opts_t *o = &t->o;
  train_replica_opts_t r = {.model = o->model, .optimizer = 1, .broadcast = 1, .gpu = t->gpu,
                            .tf32 = -1, .buckets = 1, .overlap = !o->no_overlap};
  r.cfg = (nn_model_config_t){.batch = o->batch, .seed = o->seed,
                              .num_classes = model_classes(t), .in_channels = t->train.c,
                              .in_height = t->train.h, .in_width = t->train.w};
  r.optim = (nn_optim_config_t){.momentum = o->momentum, .nesterov = o->nesterov,
                                .weight_decay = o->weight_decay};
  r.optim.kind = strcmp(o->optimizer, "sgd") == 0    ? NN_OPTIM_SGD
                 : strcmp(o->optimizer, "adam") == 0 ? NN_OPTIM_ADAM : NN_OPTIM_ADAMW;
  if (r.optim.kind != NN_OPTIM_SGD) r.optim.momentum = 0;
  /* Mixed precision changes how the model is laid out on the device: before moving.
     Weights, gradients (what hvd averages) and the optimizer state stay float32, so
     broadcasts, buckets and checkpoints are the same in every precision. */
  r.precision = (nn_precision_config_t){.precision = t->precision,  /* zeros: nn's defaults */
                                        .channels_last = o->channels_last};
  /* Gradient buckets: ranges of the flat gradient buffer that end at parameter
     boundaries, the same on all ranks. */
  r.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
  if (r.bucket_bytes < sizeof(float)) r.bucket_bytes = sizeof(float);
  r.first_bucket_bytes = r.bucket_bytes < 1048576 ? r.bucket_bytes : 1048576;
  r.compression = o->fp16_allreduce ? HVD_COMPRESSION_FP16 : HVD_COMPRESSION_NONE;
  r.op = o->predivide != 1.0f ? HVD_SUM : HVD_AVERAGE;
  return r;
}

/* The model and its optimizer, for batches of o->batch samples (made anew when a resumed
   checkpoint changes the batch). */
static void make_model(trainer_t *t) {
  const train_opts_t *o = &t->o;
  train_replica_opts_t ro = replica_opts(t);
  train_replica_free(&t->rep);
  if (train_replica_create(&t->rep, &ro) == 0) {
    t->run.model = t->rep.model;
    char err[8192];
    if (train_freeze(t->rep.model, o, err, sizeof err) != 0) die_usage("%s", err);
    return;
  }
  if (t->rep.stage == TRAIN_REPLICA_CREATE)
    die("--model %s with %s (%dx%dx%d): %s", o->model, o->dataset, t->train.c, t->train.h,
        t->train.w, nn_last_error());
  nn_check(t->rep.nn_status, "optimizer");
}

/* Broadcast, precision, device, buckets: the replica as every rank trains it. */
static void start_replica(trainer_t *t, const float *own_buffers) {
  train_replica_opts_t ro = replica_opts(t);
  ro.own_buffers = own_buffers;
  train_replica_t *r = &t->rep;
  if (train_replica_start(r, &ro) == 0) return;
  switch (r->stage) {
  case TRAIN_REPLICA_BROADCAST: hvd_check(r->hvd_status, r->failed); break;
  case TRAIN_REPLICA_PRECISION: nn_check(r->nn_status, "setting the precision"); break;
  case TRAIN_REPLICA_DEVICE: nn_check_rank(r->nn_status, "moving the model to the GPU"); break;
  case TRAIN_REPLICA_BUCKETS: hvd_check(r->hvd_status, "gradient buckets"); break;
  default: die("%s", r->err);
  }
}

/* Temporary files of writes cut short (a kill in the middle of one): rank 0 removes them
   before anything else looks at the directory. */
static void clean_checkpoint_dir(const trainer_t *t) {
  const train_opts_t *o = &t->o;
  struct stat ckdir;
  char err[8192];
  if (t->rank == 0 && o->checkpoint_dir && stat(o->checkpoint_dir, &ckdir) == 0 &&
      S_ISDIR(ckdir.st_mode)) {  /* else train_outputs_open says what is wrong with it */
    int removed = 0;
    if (train_ckpt_remove_stale(o->checkpoint_dir, &removed, err, sizeof err) != 0)
      fprintf(stderr, "train: warning: --checkpoint-dir: %s\n", err);
    if (removed > 0)
      printf("train: removed %d stale temporary checkpoint file(s) from %s (writes cut short "
             "by an earlier run)\n", removed, o->checkpoint_dir);
  }
}

/* Resume: rank 0 finds, reads and checks; every rank learns the verdict and the run the
   checkpoint came from. Sets t->resumed (and o->batch, the model made anew, when the
   checkpoint's run had another number of ranks). */
static void find_checkpoint(trainer_t *t) {
  train_run_t *run = &t->run;
  char err[8192];
  int32_t info[3] = {0, 0, 0}; /* verdict (-1, 0 none, 1), the file's ranks, batch */
  double file_lr_scale = 0;
  if (t->rank == 0) {
    info[0] = train_resume_load(run, t->resumed_from, sizeof t->resumed_from, err, sizeof err);
    info[1] = run->ranks_in_file;
    info[2] = run->batch_in_file;
    file_lr_scale = run->lr_scale_in_file;
  }
  bcast("resume.status", info, 3, HVD_INT32);
  if (info[0] < 0) die("%s", err);
  t->resumed = info[0] == 1;
  if (!t->resumed && t->rank == 0 && t->init)
    printf("train: --resume auto: no checkpoint in %s, starting from --init-weights %s\n",
           t->o.checkpoint_dir, t->o.init_weights);
  else if (!t->resumed && t->rank == 0)
    printf("train: --resume auto: no checkpoint in %s, starting from scratch\n",
           t->o.checkpoint_dir);
  if (!t->resumed) return;
  bcast("resume.lr_scale", &file_lr_scale, 1, HVD_FLOAT64);
  run->ranks_in_file = info[1];
  run->batch_in_file = info[2];
  run->lr_scale_in_file = file_lr_scale;
  int batch = t->o.batch;
  char note[1024];
  train_resume_plan_batch(&t->o, run, t->size, note, sizeof note);
  if (t->rank == 0 && note[0]) {
    printf("train: %s\n", note);
    fflush(stdout);
  }
  if (t->o.batch != batch) {
    /* The model's activations are sized for its batch: make it anew, and load again. */
    make_model(t);
    int32_t ok = 1;
    if (t->rank == 0 && train_run_load(run, t->resumed_from, 0, err, sizeof err) != 0) ok = 0;
    bcast("resume.reload", &ok, 1, HVD_INT32);
    if (!ok) die("%s", err);
  }
}

/* Every rank takes rank 0's resumed optimizer, state and best weights; the callbacks go
   on where they were. */
static void share_resumed(trainer_t *t) {
  nn_model_t *model = t->rep.model;
  train_run_t *run = &t->run;
  /* The frozen set of the checkpoint (rank 0 took it on loading): the optimizer state
     that follows is sized by it. */
  int64_t from = (int64_t)nn_model_trainable_from(model);
  bcast("resume.trainable_from", &from, 1, HVD_INT64);
  nn_check(nn_model_set_trainable_from(model, (size_t)from), "the checkpoint's frozen layers");
  size_t optn = 0;
  float *ostate = nn_model_optim_state(model, &optn);
  bcast("resume.optim.state", ostate, optn, HVD_FLOAT32);
  bcast("resume.optim.step", nn_model_optim_step_count(model), 1, HVD_INT64);
  bcast("resume.state", run->st, ST_COUNT, HVD_FLOAT64);
  nn_model_set_dropout_step(model, (uint64_t)run->st[ST_DROPOUT_STEP]);
  if (run->best_params && run->st[ST_HAVE_BEST] != 0) {
    bcast("resume.best.params", run->best_params, t->np, HVD_FLOAT32);
    bcast("resume.best.buffers", run->best_buffers, t->nb, HVD_FLOAT32);
  }
  t->es.mon.best = run->st[ST_ES_BEST];
  t->es.mon.best_epoch = (int)run->st[ST_ES_BEST_EPOCH];
  t->es.wait = (int)run->st[ST_ES_WAIT];
  t->ckmon.best = run->st[ST_CK_BEST];
  t->ckmon.best_epoch = (int)run->st[ST_CK_BEST_EPOCH];
}

/* A mid-epoch checkpoint of as many ranks: each rank goes on with its own batch-norm
   statistics (otherwise all start from their average, in "buffers"). Returns this rank's
   (to free), or NULL. */
static float *own_buffers(trainer_t *t) {
  float *mine = NULL;
  if (t->resumed && t->nb > 0 && t->size > 1) {
    const size_t nb = t->nb;
    int32_t own = t->rank == 0 && t->run.rank_buffers && t->run.ranks_in_file == t->size;
    bcast("resume.own_buffers", &own, 1, HVD_INT32);
    if (own) {
      float *all = t->rank == 0 ? t->run.rank_buffers : malloc((size_t)t->size * nb * sizeof(float));
      mine = malloc(nb * sizeof(float));
      if (!all || !mine) die("out of memory for the ranks' buffers");
      bcast("resume.rank.buffers", all, (size_t)t->size * nb, HVD_FLOAT32);
      memcpy(mine, all + (size_t)t->rank * nb, nb * sizeof(float));
      if (t->rank != 0) free(all);
    }
  }
  free(t->run.rank_buffers);
  t->run.rank_buffers = NULL;
  return mine;
}

/* The replica every rank trains: the model, a resumed checkpoint or --init-weights, rank
   0's weights everywhere, the device, the buckets (Horovod's recipe). */
static void set_up_replica(trainer_t *t) {
  const train_opts_t *o = &t->o;
  train_run_t *run = &t->run;
  make_model(t);
  t->np = nn_model_param_len(t->rep.model);
  t->nb = nn_model_num_buffers(t->rep.model);
  t->ncounters = train_model_counters(t->rep.model);
  /* Linear scaling (Horovod): the global batch is batch x batches_per_allreduce x ranks. */
  run->o = o;
  run->ranks = t->size;
  run->lr_scale = o->lr_scaling ? (double)t->data_size * o->batches_per_allreduce : 1.0;
  run->warn = warn_line;
  if (o->restore_best) {
    run->best_params = malloc(t->np * sizeof(float));
    run->best_buffers = malloc((t->nb ? t->nb : 1) * sizeof(float));
    if (!run->best_params || !run->best_buffers) die("out of memory for the best weights");
  }
  train_early_stopping_init(&t->es, o->monitor, o->min_delta, o->es_patience);
  train_monitor_init(&t->ckmon, o->monitor, 0.0);
  run->st[ST_ES_BEST] = t->es.mon.best;
  run->st[ST_ES_BEST_EPOCH] = -1;
  run->st[ST_CK_BEST] = t->ckmon.best;
  run->st[ST_CK_BEST_EPOCH] = -1;
  run->st[ST_BEST_VAL_ACC] = -1;
  run->st[ST_BEST_VAL_ACC_EPOCH] = -1;
  clean_checkpoint_dir(t);
  if (o->resume) find_checkpoint(t);
  nn_model_t *model = t->rep.model;
  if (t->resumed) share_resumed(t);
  if (t->init && !t->resumed) {
    memcpy(nn_model_params(model), nn_model_params(t->init), t->np * sizeof(float));
    memcpy(nn_model_buffers(model), nn_model_buffers(t->init), t->nb * sizeof(float));
    memcpy(nn_model_counters(model), nn_model_counters(t->init),
           (size_t)t->ncounters * sizeof(int64_t));
  } else if (t->init && t->rank == 0) {
    printf("train: resuming %s: its weights, not --init-weights %s\n", t->resumed_from,
           o->init_weights);
    fflush(stdout);
  }
  nn_model_free(t->init);
  t->init = NULL;
  float *mine = own_buffers(t);
  start_replica(t, mine);
  free(mine);
}

/* Every rank gets the whole model from the stages (train/pipeline_run.h). */
static void pipeline_gather(trainer_t *t, int epoch_end) {
  char err[1024];
  if (t->pipe && train_pipeline_run_gather(t->pipe, epoch_end, err, sizeof err) != 0)
    die("%s", err);
}

/* The schedule, the batch buffers, rank 0's outputs (opened or probed now; every rank
   learns the verdict, so a bad path ends the run before any training with rank 0's one
   line), and where the loop starts (with --pipeline-stages, the pipeline). */
static void set_up_loop(trainer_t *t) {
  const train_opts_t *o = &t->o;
  char err[8192];
  t->sched = (nn_lr_schedule_t){.base_lr = o->lr * t->run.lr_scale,
                                .warmup_epochs = o->warmup_epochs, .warmup_start_lr = o->lr,
                                .step_epochs = o->lr_step_epochs, .gamma = o->lr_gamma,
                                .total_epochs = (float)o->epochs, .min_lr = o->min_lr};
  t->sched.kind = strcmp(o->lr_schedule, "step") == 0     ? NN_LR_STEP
                  : strcmp(o->lr_schedule, "cosine") == 0 ? NN_LR_COSINE : NN_LR_CONSTANT;
  t->bo = (train_batch_opts_t){.aug_pad = 0, .aug_flip = 0, .seed = o->seed};
  memcpy(t->bo.mean, t->norm_mean, sizeof t->bo.mean);
  memcpy(t->bo.std, t->norm_std, sizeof t->bo.std);
  if (o->augment) {
    t->bo.aug_pad = o->crop_pad >= 0 ? o->crop_pad : strcmp(o->dataset, "cifar10") == 0 ? 4 : 2;
    /* Digits and clothes have a handedness: flip only natural images. */
    t->bo.aug_flip = strcmp(o->dataset, "cifar10") == 0;
  }
  size_t per = (size_t)t->train.c * t->train.h * t->train.w;
  t->x = malloc(sizeof(float) * per * o->batch);
  t->y = malloc(sizeof(int32_t) * o->batch);
  t->perm = malloc(sizeof(uint32_t) * t->train.n);
  t->idx = malloc(sizeof(uint32_t) * o->batch);
  if (!t->x || !t->y || !t->perm || !t->idx) die("out of memory for batches");

  int32_t outputs_ok = 1;
  if (t->rank == 0 && train_outputs_open(o, &t->out, err, sizeof err) != 0) outputs_ok = 0;
  bcast("setup.outputs", &outputs_ok, 1, HVD_INT32);
  if (!outputs_ok) die("%s", err);

  train_progress_init(&t->prog, t->rank == 0 && !o->quiet, g_launched);
  t->steps = train_steps_per_epoch(t->train.n, t->data_size, o->batch);
  /* Gradient accumulation: the batches of an epoch form windows of K (the last one may be
     shorter), each one optimizer step. Windows restart every epoch. */
  t->accum = o->batches_per_allreduce;
  t->windows = (t->steps + t->accum - 1) / t->accum;
  t->kill_at = -1;
  if (getenv("HVD_TRAIN_TEST_KILL_AT_STEP")) t->kill_at = atoll(getenv("HVD_TRAIN_TEST_KILL_AT_STEP"));
  t->step = (train_step_t){.model = t->rep.model, .buckets = t->rep.buckets, .size = t->data_size,
                           .predivide = o->predivide};
  if (o->pipeline_stages > 1 &&
      train_pipeline_run_create(&t->pipe, o, t->rep.model, t->rank, t->data_size, stdout, err,
                                sizeof err) != 0)
    die("%s", err);
}

/* Where a resumed run goes on. A mid-epoch checkpoint: the step to go on from. With the
   same global batch (more or fewer ranks, the batch per rank scaled) it is the same step
   of the same batches; with another global batch, the same fraction of the epoch. */
static void plan_start(trainer_t *t) {
  const train_run_t *run = &t->run;
  const int steps = t->steps, accum = t->accum;
  t->start_epoch = (int)run->st[ST_EPOCHS_DONE];
  int start_step = (int)run->st[ST_STEPS_DONE], file_steps = (int)run->st[ST_STEPS_PER_EPOCH];
  if (start_step > 0 && file_steps != steps) {
    int mapped = (int)((double)start_step * steps / file_steps + 0.5);
    if (mapped >= steps) mapped = steps - 1;
    if (t->rank == 0)
      printf("train: step %d of %d of epoch %d goes on at step %d of %d of this run's global "
             "batches (samples of this epoch may repeat or be left out)\n",
             start_step, file_steps, t->start_epoch + 1, mapped, steps);
    start_step = mapped;
  }
  /* A window's gradients live only in memory: go on from the start of the window (a
     checkpoint of this run is always taken at a window's end). */
  if (start_step % accum != 0) {
    if (t->rank == 0)
      printf("train: step %d of epoch %d is inside an accumulation window of %d: going on from "
             "step %d\n", start_step, t->start_epoch + 1, accum, start_step - start_step % accum);
    start_step -= start_step % accum;
  }
  t->start_step = start_step;
  t->last_lr = nn_lr_at(&t->sched, t->start_epoch);
}

/* Rank 0's line about the run before the first epoch. */
static void print_banner(const trainer_t *t) {
  const train_opts_t *o = &t->o;
  if (t->rank != 0 || o->quiet) return;
  char accum_note[128] = "";
  if (t->accum > 1)
    snprintf(accum_note, sizeof accum_note, " x %d batches per allreduce", t->accum);
  printf("train: %s on %s, %d rank(s), batch %d per rank%s (%d global), %d train / %d val / "
         "%d test samples, %zu parameters, lr %.5g x %g, %s, %d steps per epoch",
         o->model, o->dataset, t->size, o->batch, accum_note, o->batch * t->data_size * t->accum,
         t->train.n, t->val_is_test ? 0 : t->val.n, t->test.n,
         nn_model_num_params(t->rep.model), o->lr, t->run.lr_scale, o->optimizer, t->steps);
  if (t->accum > 1) printf(" (%d optimizer steps)", t->windows);
  if (o->predivide != 1.0f) printf(", gradient predivide factor %g", (double)o->predivide);
  printf("%s\n", t->resumed ? ", resumed" : "");
  if (t->is_idx)
    printf("train: %s: %d classes, %dx%d images, normalised with mean %.4f, std %.4f (of the "
           "training images)\n", o->train_images, t->train.num_classes, t->train.h, t->train.w,
           (double)t->norm_mean[0], (double)t->norm_std[0]);
  if (t->resumed && t->start_step > 0)
    printf("train: resuming %s after epoch %d and step %d of epoch %d\n", t->resumed_from,
           t->start_epoch, t->start_step, t->start_epoch + 1);
  else if (t->resumed)
    printf("train: resuming %s after epoch %d\n", t->resumed_from, t->start_epoch);
  fflush(stdout);
}

/* Keras's update_freq: the epoch's running loss and accuracy over all ranks, at the
   global batch count (Keras's step for batch_* scalars). */
static void log_batch(trainer_t *t, const double sums[3], long long global_batch) {
  const train_opts_t *o = &t->o;
  if (!o->logdir || o->tb_update_freq <= 0 || global_batch % o->tb_update_freq != 0) return;
  double run_sums[3];
  char err[8192];
  hvd_check(hvd_allreduce("tb.batch.metrics", sums, run_sums, 3, HVD_FLOAT64, HVD_SUM),
            "allreduce of metrics");
  if (t->rank == 0 && run_sums[2] > 0 &&
      train_outputs_batch(&t->out, global_batch, (float)(run_sums[0] / run_sums[2]),
                          (float)(run_sums[1] / run_sums[2]), err, sizeof err) != 0)
    die("%s", err);
}

/* The steps of one epoch from step `first`. sums: loss * n, correct, n of this rank (rank
   0 starts with what a mid-epoch checkpoint held); t0: the epoch's clock start. */
static void train_steps(trainer_t *t, int epoch, int first, double sums[3], double t0) {
  const train_opts_t *o = &t->o;
  const int steps = t->steps, accum = t->accum, rank = t->rank, size = t->data_size;
  int window_total = 0;  /* samples of the current window over all ranks */
  for (int s = first; s < steps; s++) {
    if (t->kill_at >= 0 && t->rank == 0 && (long long)epoch * steps + s == t->kill_at) raise(SIGKILL);
    const int window = s / accum, window_start = window * accum;
    const int window_end = window_start + accum < steps ? window_start + accum : steps;
    const int last_pass = s + 1 == window_end;
    if (s == window_start) {
      window_total = 0;
      for (int k = window_start; k < window_end; k++)
        window_total += train_step_total(t->train.n, size, o->batch, k);
    }
    int offset = 0;
    int n = t->data_rank < 0 ? 0
                             : train_step_slice(t->train.n, t->data_rank, size, o->batch, s, &offset);
    if (o->straggler_delay_ms > 0 && rank == o->straggler_rank)
      usleep((useconds_t)o->straggler_delay_ms * 1000);
    /* Streamed images: every step's batch is taken, an empty slice's too. */
    if (t->images && reads_batches(t)) n = images_batch(t, s);
    else if (n > 0 && reads_batches(t)) train_make_batch(&t->train, t->perm + offset, n, &t->bo, t->x, t->y);
    t->last_lr = nn_lr_at(&t->sched, epoch + (double)window_start / steps);
    int flags = TRAIN_STEP_FETCH_LOSS | (last_pass ? 0 : TRAIN_STEP_ACCUMULATE);
    char perr[1024];
    if (t->pipe) {
      if (train_pipeline_run_step(t->pipe, rank, t->x, t->y, n, window_total,
                                  (float)t->last_lr, sums, perr, sizeof perr) != 0) {
        fprintf(stderr, "train: rank %d: %s\n", rank, perr);
        fflush(stderr);
        hvd_shutdown();
        exit(1);
      }
    } else if (train_step_run(&t->step, t->x, t->y, n, window_total, (float)t->last_lr,
                              flags) != 0) {
      if (t->step.hvd_status != HVD_OK) hvd_check(t->step.hvd_status, t->step.failed);
      nn_check_model(t->step.nn_status, t->step.failed);
    }
    if (n > 0 && !t->pipe) {
      sums[0] += (double)t->step.loss * n;
      sums[1] += t->step.correct;
      sums[2] += n;
    }
    if (t->prog.tty && sums[2] > 0) {
      double el = util_now_s() - t0;
      train_progress_step(&t->prog, s + 1, sums[0] / sums[2], sums[1] / sums[2],
                          el > 0 ? sums[2] * (t->pipe ? 1 : size) / el : 0);
    }
    log_batch(t, sums, (long long)epoch * steps + s + 1);
    /* Mid-epoch checkpoints at a window's end, counted in optimizer steps. */
    long long global_step = (long long)epoch * t->windows + window + 1;
    if (last_pass && o->checkpoint_every_steps > 0 && s + 1 < steps &&
        global_step % o->checkpoint_every_steps == 0) {
      pipeline_gather(t, 0);
      save_mid_epoch(&t->run, t->rank, s + 1, steps, sums, util_now_s() - t0);
    }
  }
}

/* The model every rank holds at an epoch's end: the host mirror refreshed, batch-norm
   statistics averaged (they drift apart on each rank's shard), counters agreed. */
static void sync_replicas(trainer_t *t) {
  nn_model_t *model = t->rep.model;
  /* Refresh the host mirror (weights, buffers, optimizer state) that the buffer average,
     best weights and checkpoints read (on the CPU: nothing to do). */
  nn_check_model(nn_model_sync_to_host(model), "copying the model to the host");
  /* A pipeline's stages hold other stages' statistics: pipeline_gather averaged them. */
  if (t->nb > 0 && !t->pipe)
    hvd_check(hvd_allreduce("epoch.buffers", nn_model_buffers(model), nn_model_buffers(model),
                            t->nb, HVD_FLOAT32, HVD_AVERAGE), "allreduce of buffers");
  if (t->nb > 0)
    nn_check_model(nn_model_sync_to_device(model), "copying the averaged buffers to the GPU");
  if (t->ncounters > 0)
    hvd_check(hvd_allreduce("epoch.counters", nn_model_counters(model),
                            nn_model_counters(model), (size_t)t->ncounters, HVD_INT64, HVD_MAX),
              "allreduce of counters");
}

/* The callbacks after validation: the best accuracy, EarlyStopping (and the best weights
   it keeps), ModelCheckpoint's own monitor; into the run's state. Returns whether
   ModelCheckpoint's monitor improved. */
static int update_callbacks(trainer_t *t, int epoch, const eval_t *v) {
  train_run_t *run = &t->run;
  nn_model_t *model = t->rep.model;
  if (v->acc > run->st[ST_BEST_VAL_ACC]) {
    run->st[ST_BEST_VAL_ACC] = v->acc;
    run->st[ST_BEST_VAL_ACC_EPOCH] = epoch;
  }
  double monitored = strcmp(t->o.monitor, "val_accuracy") == 0 ? v->acc : v->loss;
  int improved = 0;
  t->stopped_early = train_early_stopping_update(&t->es, monitored, epoch, &improved);
  if (improved && run->best_params) {
    memcpy(run->best_params, nn_model_params(model), t->np * sizeof(float));
    memcpy(run->best_buffers, nn_model_buffers(model), t->nb * sizeof(float));
    run->st[ST_HAVE_BEST] = 1;
  }
  int ck_improved = train_monitor_update(&t->ckmon, monitored, epoch);
  run->st[ST_ES_BEST] = t->es.mon.best;
  run->st[ST_ES_BEST_EPOCH] = t->es.mon.best_epoch;
  run->st[ST_ES_WAIT] = t->es.wait;
  run->st[ST_CK_BEST] = t->ckmon.best;
  run->st[ST_CK_BEST_EPOCH] = t->ckmon.best_epoch;
  return ck_improved;
}

/* Rank 0: the epoch's checkpoints (last, and best or one per epoch); notes what it saved. */
static void save_epoch(trainer_t *t, int epoch, int ck_improved, char *note, size_t notelen) {
  const train_opts_t *o = &t->o;
  if (!o->checkpoint_dir) return;
  char p[4200], err[8192];
  snprintf(p, sizeof p, "%s/last.ckpt", o->checkpoint_dir);
  if (train_run_save(&t->run, p, NULL, NULL, err, sizeof err) != 0) die("%s", err);
  if (o->save_best_only && !ck_improved) return;
  if (o->save_best_only) snprintf(p, sizeof p, "%s/best.ckpt", o->checkpoint_dir);
  else snprintf(p, sizeof p, "%s/epoch-%03d.ckpt", o->checkpoint_dir, epoch + 1);
  if (train_run_save(&t->run, p, NULL, NULL, err, sizeof err) != 0) die("%s", err);
  note_add(note, notelen, "saved %s", p);
}

/* One epoch: the steps, the replicas synchronised, validation, callbacks, checkpoints and
   rank 0's line and logs. */
static void run_epoch(trainer_t *t, int epoch) {
  const train_opts_t *o = &t->o;
  train_run_t *run = &t->run;
  nn_model_t *model = t->rep.model;
  char err[8192];
  int first = epoch == t->start_epoch ? t->start_step : 0;
  /* Time and metrics of the steps a mid-epoch checkpoint already took (rank 0 holds the
     sums over all ranks). */
  double t0 = util_now_s() - (first > 0 ? run->st[ST_EPOCH_SECONDS] : 0);
  double sums[3] = {0, 0, 0}; /* loss * n, correct, n (this rank) */
  if (first > 0 && t->rank == 0) {
    sums[0] = run->st[ST_EPOCH_LOSS_SUM];
    sums[1] = run->st[ST_EPOCH_CORRECT];
    sums[2] = run->st[ST_EPOCH_SAMPLES];
  }
  train_epoch_permutation(t->perm, t->train.n, o->seed, epoch);
  t->bo.epoch = epoch;
  train_progress_begin(&t->prog, epoch, o->epochs, t->steps);
  images_epoch_begin(t, epoch, first);
  train_steps(t, epoch, first, sums, t0);
  train_images_end(t->images);
  ps_epoch_end(t);
  for (int k = ST_STEPS_DONE; k <= ST_EPOCH_SECONDS; k++) run->st[k] = 0; /* an epoch end */
  double train_s = util_now_s() - t0;
  hvd_check(hvd_allreduce("train.metrics", sums, sums, 3, HVD_FLOAT64, HVD_SUM),
            "allreduce of metrics");
  double loss = sums[2] > 0 ? sums[0] / sums[2] : 0, acc = sums[2] > 0 ? sums[1] / sums[2] : 0;
  double ips = train_s > 0 ? sums[2] / train_s : 0; /* all ranks together */
  pipeline_gather(t, 1);
  sync_replicas(t);
  eval_t v = t->images ? evaluate_images(t, TRAIN_IMAGES_VAL, "val.metrics")
             : evaluate(model, &t->val, &t->bo, o->batch, t->rank, t->size, t->x, t->y, t->idx,
                        "val.metrics");
  double seconds = util_now_s() - t0;
  run->st[ST_EPOCHS_DONE] = epoch + 1;
  run->st[ST_TRAIN_SECONDS] += train_s;
  run->st[ST_TRAIN_IMAGES] += sums[2];
  int ck_improved = update_callbacks(t, epoch, &v);

  char note[4400] = "";
  /* fp16 on the GPU: where dynamic loss scaling stands (one wait for the GPU). */
  if (t->precision == NN_PRECISION_FP16) {
    float scale = 1.0f;
    int64_t skipped = 0;
    nn_check_model(nn_model_loss_scale(model, &scale, &skipped), "reading the loss scale");
    note_add(note, sizeof note, "loss_scale %g (%lld skipped steps)", (double)scale,
             (long long)skipped);
  }
  if (t->rank != 0) return;
  save_epoch(t, epoch, ck_improved, note, sizeof note);
  if (t->stopped_early)
    note_add(note, sizeof note, "early stopping: no improvement of %s in %d epochs", o->monitor,
             o->es_patience);
  train_progress_end(&t->prog, loss, acc, v.loss, v.acc, t->last_lr, ips, seconds, note);
  /* A failed write (a full disk, a file-size limit) stops the run: the checkpoints of
     this epoch are already complete. */
  if (train_outputs_epoch(&t->out, o, model, epoch, loss, acc, v.loss, v.acc, t->last_lr, ips,
                          seconds, err, sizeof err) != 0)
    die("%s", err);
}

/* --unfreeze-at-epoch E: from epoch E + 1 on every layer trains (the optimizer state of
   the newly trainable ones starts at zero), the buckets cover every gradient, and the lr
   is --fine-tune-lr (scaled as --lr). Also after a resume past E (the checkpoint is
   already unfrozen then: only the lr is set). */
static void begin_phase(trainer_t *t, int epoch) {
  const train_opts_t *o = &t->o;
  if (o->unfreeze_at_epoch <= 0 || epoch < o->unfreeze_at_epoch) return;
  nn_model_t *model = t->rep.model;
  if (o->fine_tune_lr > 0) {
    t->sched.base_lr = o->fine_tune_lr * (float)t->run.lr_scale;
    t->sched.warmup_epochs = 0;
  }
  if (nn_model_trainable_from(model) == 0) return;
  int tensors;
  size_t params;
  train_frozen_counts(model, &tensors, &params);
  nn_check_model(nn_model_sync_to_host(model), "copying the optimizer state to the host");
  nn_check_model(nn_model_set_frozen(model, NULL, 0), "unfreezing");
  train_replica_opts_t ro = replica_opts(t);
  if (train_replica_buckets(&t->rep, &ro) != 0) {
    if (t->rep.stage == TRAIN_REPLICA_BUCKET_BOUNDS) die("%s", t->rep.err);
    hvd_check(t->rep.hvd_status, "gradient buckets");
  }
  t->step.buckets = t->rep.buckets;
  if (t->rank == 0 && !o->quiet)
    printf("train: epoch %d: unfroze %d tensors (%zu parameters); every layer trains, lr %.5g\n",
           epoch + 1, tensors, params, (double)t->sched.base_lr);
}

/* After the last epoch: the best weights restored (EarlyStopping's
   restore_best_weights), the test set, --export and rank 0's summary. */
static void finish(trainer_t *t) {
  const train_opts_t *o = &t->o;
  train_run_t *run = &t->run;
  nn_model_t *model = t->rep.model;
  char err[8192];
  if (t->rank == 0 && train_outputs_close(&t->out, err, sizeof err) != 0) die("%s", err);
  int restored = 0;
  if (run->best_params && run->st[ST_HAVE_BEST] != 0 &&
      (int)run->st[ST_ES_BEST_EPOCH] != (int)run->st[ST_EPOCHS_DONE] - 1) {
    memcpy(nn_model_params(model), run->best_params, t->np * sizeof(float));
    memcpy(nn_model_buffers(model), run->best_buffers, t->nb * sizeof(float));
    restored = 1;
    nn_check_model(nn_model_sync_to_device(model), "copying the best weights to the GPU");
  }
  eval_t e = t->images ? evaluate_images(t, TRAIN_IMAGES_TEST, "test.metrics")
             : evaluate(model, &t->test, &t->bo, o->batch, t->rank, t->size, t->x, t->y, t->idx,
                        "test.metrics");
  images_summary(t);
  if (t->rank != 0) return;
  if (o->export_path) {
    nn_check_model(nn_model_sync_to_host(model), "copying the model to the host");
    if (train_export(model, o, &t->train, t->norm_mean, t->norm_std, err, sizeof err) != 0)
      die("%s", err);
  }
  if (o->export_onnx_path) {
    nn_check_model(nn_model_sync_to_host(model), "copying the model to the host");
    if (train_export_onnx(model, o, &t->train, t->norm_mean, t->norm_std, err, sizeof err) != 0)
      die("%s", err);
  }
  const int size = t->size;
  double secs = run->st[ST_TRAIN_SECONDS];
  double total_ips = secs > 0 ? run->st[ST_TRAIN_IMAGES] / secs : 0; /* all ranks */
  printf("---------------------------------------------------------------\n");
  printf("model %s, data set %s, %d rank(s), %d epoch(s)%s\n", o->model, o->dataset, size,
         (int)run->st[ST_EPOCHS_DONE], t->stopped_early ? " (stopped early)" : "");
  if (run->st[ST_BEST_VAL_ACC_EPOCH] >= 0)
    printf("best val_accuracy: %.2f%% at epoch %d\n", 100.0 * run->st[ST_BEST_VAL_ACC],
           (int)run->st[ST_BEST_VAL_ACC_EPOCH] + 1);
  if (restored)
    printf("restored the best weights of epoch %d (%s)\n", (int)run->st[ST_ES_BEST_EPOCH] + 1,
           o->monitor);
  printf("training time: %.1f s, images/sec: %.1f per rank, %.1f total\n", secs,
         total_ips / size, total_ips);
  const hvd_grad_buckets_t *buckets = t->rep.buckets;
  hvd_grad_buckets_stats_t bs;
  hvd_grad_buckets_stats(buckets, &bs);
  if (bs.steps > 0 && size > 1)
    printf("gradient allreduce: %zu bucket(s) at parameter boundaries, the largest %.3g "
           "MiB, %.1f s in flight, %.1f s of it waited for after backward (%.0f%% "
           "overlapped)\n", hvd_grad_buckets_num(buckets), largest_bucket_mib(buckets),
           bs.comm_s, bs.blocked_s, bs.comm_s > 0 ? 100.0 * (1.0 - bs.blocked_s / bs.comm_s) : 0.0);
  if (bs.steps > 0 && size > 1)
    printf("gradient allreduce bytes per step: %.0f\n", (double)bs.bytes / (double)bs.steps);
  int frozen_tensors;
  size_t frozen_params;
  train_frozen_counts(model, &frozen_tensors, &frozen_params);
  if (frozen_tensors > 0)
    printf("frozen: %d tensors (%zu parameters) kept; %zu gradient bytes per step not "
           "allreduced\n", frozen_tensors, frozen_params,
           nn_model_trainable_from(model) * (o->fp16_allreduce ? 2 : sizeof(float)));
  if (o->export_path) printf("exported weights to %s\n", o->export_path);
  if (o->export_onnx_path) printf("exported the ONNX model to %s\n", o->export_onnx_path);
  printf("test loss: %.4f\n", e.loss);
  printf("test accuracy: %.2f%%\n", 100.0 * e.acc);
  if (fflush(stdout) != 0 || ferror(stdout))
    die("standard output: write failed (%s)", strerror(errno));
}

static void free_all(trainer_t *t) {
  train_pipeline_free(t->pipe);
  train_replica_free(&t->rep);
  free(t->run.best_params);
  free(t->run.best_buffers);
  free(t->x);
  free(t->y);
  free(t->perm);
  free(t->idx);
  train_images_free(t->images);
  train_dataset_free(&t->train);
  train_dataset_free(&t->test);
  if (!t->val_is_test) train_dataset_free(&t->val);
}

int main(int argc, char **argv) {
  if (nn_blas_fix_misdetected_core(argv) != NN_OK)
    fprintf(stderr, "train: warning: %s\n", nn_last_error());
  g_rank = env_rank();
  /* Over a file-size limit a write fails with EFBIG and is reported like a full disk,
     instead of the signal killing the process without a word. */
  signal(SIGXFSZ, SIG_IGN);
  static trainer_t t;   /* zeroed; large */
  train_flags_defaults(&t.o);
  char err[8192];
  int pr = train_flags_parse(argc, argv, &t.o, err, sizeof err);
  if (pr == 1) {
    if (g_rank == 0) train_flags_help(stdout, argv[0]);
    return 0;
  }
  if (pr != 0) {
    if (g_rank == 0) fprintf(stderr, "train: %s\n", err);
    return 2;
  }
  if (t.o.threads > 0) nn_set_threads(t.o.threads);
  check_flags(&t);
  load_data(&t);
  load_init_weights(&t);
  start_runtime(&t);
  set_up_replica(&t);
  set_up_loop(&t);
  plan_start(&t);
  ps_start(&t);
  print_banner(&t);
  for (int epoch = t.start_epoch; epoch < t.o.epochs && !t.stopped_early; epoch++) {
    begin_phase(&t, epoch);
    run_epoch(&t, epoch);
  }
  if (t.pipe && train_pipeline_run_report(t.pipe, &t.o, t.rep.model, t.rank, stdout, err,
                                          sizeof err) != 0)
    die("%s", err);
  ps_end(&t);
  finish(&t);
  free_all(&t);
  hvd_check(hvd_shutdown(), "hvd_shutdown");
  if (t.o.pipeline_stages > 1) train_pipeline_mpi_finalize();   /* MPI is train's then */
  return 0;
}
