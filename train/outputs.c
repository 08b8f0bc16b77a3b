/* train/outputs.c: rank 0's outputs besides the console: --checkpoint-dir and --export
   probed before any training, the TensorBoard runs and log.csv of --logdir, and the
   --export file (train/outputs.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/outputs.h"

static const char *const tb_run_names[TB_RUNS] = {"train", "validation"};

/* A write that failed (errno set): one line naming the file. Returns -1. */
static int write_failed(const char *path, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: write failed (%s)", path, strerror(errno));
  return -1;
}

/* Whether dir takes a new file: creates and removes one. 0, or -1 with errno set. */
static int probe_dir(const char *dir) {
  char p[4300];
  snprintf(p, sizeof p, "%s/.train-probe.%d", dir, (int)getpid());
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return -1;
  int e = close(fd) != 0 ? errno : 0;
  if (unlink(p) != 0 && !e) e = errno;
  errno = e;
  return e ? -1 : 0;
}

/* The export's format version: serve refuses a larger one (keys it would not know). */
#define EXPORT_FORMAT_VERSION "1"

/* The shortest decimal that strtof reads back as exactly f (0.2860f -> "0.286"). */
static void float_text(char *buf, size_t len, float f) {
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, len, "%.*g", p, (double)f);
    if (strtof(buf, NULL) == f) return;
  }
}

/* The class names of the named data sets, as a JSON array (NULL: none known). */
static const char *class_names_json(const char *dataset) {
  if (strcmp(dataset, "fashion-mnist") == 0)
    return "[\"T-shirt/top\",\"Trouser\",\"Pullover\",\"Dress\",\"Coat\",\"Sandal\","
           "\"Shirt\",\"Sneaker\",\"Bag\",\"Ankle boot\"]";
  if (strcmp(dataset, "mnist") == 0)
    return "[\"0\",\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]";
  if (strcmp(dataset, "cifar10") == 0)
    return "[\"airplane\",\"automobile\",\"bird\",\"cat\",\"deer\",\"dog\",\"frog\","
           "\"horse\",\"ship\",\"truck\"]";
  return NULL;
}

/* ---- --export: the weights and what a reader needs to feed them (docs/serve.md) ---- */

/* Writes the model's weights to --export with a safetensors "__metadata__" object
   (string values): hvd_format_version, model, dataset, input_shape "C,H,W", num_classes,
   norm_mean and norm_std (one value per input channel: the constants train_make_batch
   applied to that channel, x = (pixel/255 - mean) / std), and class_names (a JSON array,
   for the named data sets). The file is written to a temporary name and renamed, so a
   reader polling the folder (serve --model-base-path) never sees half a file. */
int train_export(const nn_model_t *model, const train_opts_t *o, const train_dataset_t *d,
                 const float mean[3], const float std[3], char *err, size_t errlen) {
  char shape[64], classes[16], means[64 * 16] = "", stds[64 * 16] = "", v[32];
  snprintf(shape, sizeof shape, "%d,%d,%d", d->c, d->h, d->w);
  snprintf(classes, sizeof classes, "%d", d->num_classes);
  for (int ch = 0; ch < d->c && ch < 64; ch++) {
    int k = ch < 3 ? ch : 2; /* train_make_batch's channel -> constant */
    size_t at = strlen(means);
    float_text(v, sizeof v, mean[k]);
    snprintf(means + at, sizeof means - at, "%s%s", ch ? "," : "", v);
    at = strlen(stds);
    float_text(v, sizeof v, std[k]);
    snprintf(stds + at, sizeof stds - at, "%s%s", ch ? "," : "", v);
  }
  nn_st_meta_t meta[8] = {{"hvd_format_version", EXPORT_FORMAT_VERSION},
                          {"model", o->model},
                          {"dataset", o->dataset},
                          {"input_shape", shape},
                          {"num_classes", classes},
                          {"norm_mean", means},
                          {"norm_std", stds}};
  int nmeta = 7;
  const char *names = class_names_json(o->dataset);
  if (names && d->num_classes == 10) meta[nmeta++] = (nn_st_meta_t){"class_names", names};
  if (nn_model_save_safetensors_meta(model, o->export_path, meta, nmeta) != NN_OK) {
    snprintf(err, errlen, "--export: %s", nn_last_error());
    return -1;
  }
  return 0;
}

int train_outputs_open(const train_opts_t *o, train_outputs_t *out, char *err, size_t errlen) {
  train_tfevents_t *tb = out->tb;
  train_csv_t *csv = &out->csv;
  if (o->checkpoint_dir) {
    if (train_mkdirs(o->checkpoint_dir) != 0) {
      snprintf(err, errlen, "--checkpoint-dir %s: cannot create (%s)", o->checkpoint_dir,
               strerror(errno));
      return -1;
    }
    if (probe_dir(o->checkpoint_dir) != 0) {
      snprintf(err, errlen, "--checkpoint-dir %s: cannot write there (%s)", o->checkpoint_dir,
               strerror(errno));
      return -1;
    }
  }
  if (o->export_path) {
    struct stat st;
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", o->export_path);
    const char *dir = dirname(buf);
    if (stat(o->export_path, &st) == 0 && S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "--export %s: is a directory (give a file name, such as %s/model.safetensors)",
               o->export_path, o->export_path);
      return -1;
    }
    if (stat(dir, &st) != 0) {
      snprintf(err, errlen, "--export %s: directory %s: %s", o->export_path, dir,
               errno == ENOENT ? "does not exist (create it first)" : strerror(errno));
      return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "--export %s: %s is not a directory", o->export_path, dir);
      return -1;
    }
    if (probe_dir(dir) != 0) {
      snprintf(err, errlen, "--export %s: cannot write in %s (%s)", o->export_path, dir,
               strerror(errno));
      return -1;
    }
  }
  if (o->logdir) {
    if (train_mkdirs(o->logdir) != 0) {
      snprintf(err, errlen, "--logdir %s: cannot create directory (%s)", o->logdir,
               strerror(errno));
      return -1;
    }
    char p[4200];
    int opened = 0;
    for (; opened < TB_RUNS; opened++) {
      snprintf(p, sizeof p, "%s/%s", o->logdir, tb_run_names[opened]);
      if (train_tfevents_open(&tb[opened], p, err, errlen) != 0) break;
    }
    if (opened == TB_RUNS) {
      snprintf(p, sizeof p, "%s/log.csv", o->logdir);
      if (train_csv_open(csv, p, o->resume != NULL) == 0) return 0;
      snprintf(err, errlen, "%s: cannot write (%s)", p, strerror(errno));
    }
    for (int i = 0; i < opened; i++) {  /* nothing was logged into them */
      train_tfevents_close(&tb[i]);
      unlink(tb[i].path);
    }
    return -1;
  }
  return 0;
}

/* The train run's epoch scalars and, every --histogram-freq epochs, a histogram of each
   weight; the validation run's scalars. Keras's steps: the epoch from 0. */
static int tb_epoch(train_tfevents_t tb[TB_RUNS], const train_opts_t *o, nn_model_t *m,
                    int epoch, double loss, double acc, double val_loss, double val_acc,
                    double lr, double ips, char *err, size_t errlen) {
  const double wall = train_wall_time();
  const char *train_tags[] = {"epoch_loss", "epoch_accuracy", "epoch_learning_rate",
                              "epoch_images_per_sec"};
  const double train_vals[] = {loss, acc, lr, ips};
  for (int i = 0; i < 4; i++)
    if (train_tfevents_scalar(&tb[TB_TRAIN], train_tags[i], (float)train_vals[i], epoch,
                              wall) != 0)
      return write_failed(tb[TB_TRAIN].path, err, errlen);
  train_tfevents_t *val = &tb[TB_VALIDATION];
  if (train_tfevents_scalar(val, "epoch_loss", (float)val_loss, epoch, wall) != 0 ||
      train_tfevents_scalar(val, "epoch_accuracy", (float)val_acc, epoch, wall) != 0)
    return write_failed(tb[TB_VALIDATION].path, err, errlen);
  if (o->histogram_freq <= 0 || epoch % o->histogram_freq != 0) return 0;
  /* The weights as a state_dict names them (the host mirror, refreshed this epoch). */
  const float *params = nn_model_params(m);
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (sl->kind != NN_SLICE_PARAM) continue;
    if (train_tfevents_histogram(&tb[TB_TRAIN], sl->name, params + sl->offset, sl->numel,
                                 epoch, wall) != 0)
      return write_failed(tb[TB_TRAIN].path, err, errlen);
  }
  return 0;
}

int train_outputs_epoch(train_outputs_t *out, const train_opts_t *o, nn_model_t *m, int epoch,
                        double loss, double acc, double val_loss, double val_acc, double lr,
                        double ips, double seconds, char *err, size_t errlen) {
  if (out->tb[TB_TRAIN].f && tb_epoch(out->tb, o, m, epoch, loss, acc, val_loss, val_acc, lr,
                                      ips, err, errlen) != 0)
    return -1;
  if (out->csv.f && train_csv_row(&out->csv, epoch + 1, loss, acc, val_loss, val_acc, lr, ips,
                                  seconds) != 0)
    return write_failed(out->csv.path, err, errlen);
  return 0;
}

int train_outputs_batch(train_outputs_t *out, long long step, float loss, float acc, char *err,
                        size_t errlen) {
  const double wall = train_wall_time();
  if (train_tfevents_scalar(&out->tb[TB_TRAIN], "batch_loss", loss, step, wall) != 0 ||
      train_tfevents_scalar(&out->tb[TB_TRAIN], "batch_accuracy", acc, step, wall) != 0)
    return write_failed(out->tb[TB_TRAIN].path, err, errlen);
  return 0;
}

/* Closes every file, also after a failure; the first failure is the one said. */
int train_outputs_close(train_outputs_t *out, char *err, size_t errlen) {
  int rc = 0;
  for (int i = 0; i < TB_RUNS; i++)
    if (out->tb[i].f && train_tfevents_close(&out->tb[i]) != 0 && rc == 0)
      rc = write_failed(out->tb[i].path, err, errlen);
  if (out->csv.f && train_csv_close(&out->csv) != 0 && rc == 0)
    rc = write_failed(out->csv.path, err, errlen);
  return rc;
}
