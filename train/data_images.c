/* train/data_images.c: --dataset imagefolder | tfrecord | filelist, streamed. The sets
   are the data module's sources (lists of files or records); each pass over one runs
   the module's pipeline: decode threads fill a bounded ring of ready batches while the
   step runs, so memory is --prefetch batches whatever the set's size. The training order
   and slices are train's own (data/pipeline.c reproduces train_epoch_permutation and
   train_step_slice), and a sample's crop and flip depend only on (seed, epoch, index):
   a resumed or elastic run sees the batches the uninterrupted one would have, whatever
   --data-threads. */
#include "train/data_images.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

/* Images measured for the normalisation constants (evenly spaced over the set). */
#define NORM_SAMPLES 2048

struct train_images {
  data_source_t whole_train, whole_test;    /* owned */
  data_source_t train, val, test;           /* views into them */
  data_pipeline_opts_t po;                  /* the flags' settings */
  int num_classes;
  data_pipeline_t *pass;                    /* the running pass, if any */
  uint64_t skipped;                         /* of finished passes */
};

int train_is_image_dataset(const char *name) {
  return strcmp(name, "imagefolder") == 0 || strcmp(name, "tfrecord") == 0 ||
         strcmp(name, "filelist") == 0;
}

static int open_part(const train_opts_t *o, int val, data_source_t *s, char *err,
                     size_t errlen) {
  char p[4096];
  if (strcmp(o->dataset, "imagefolder") == 0) {
    snprintf(p, sizeof p, "%s/%s", o->data_dir, val ? "val" : "train");
    return data_source_imagefolder(p, s, err, errlen);
  }
  if (strcmp(o->dataset, "filelist") == 0) {
    snprintf(p, sizeof p, "%s/%s", o->data_dir, val ? "val.txt" : "train.txt");
    return data_source_filelist(p, s, err, errlen);
  }
  return data_source_tfrecord(o->data_dir, val ? "validation-" : "train-", s, err, errlen);
}

/* ImageFolder's labels are positions in the sorted class list: both parts must have the
   same classes, or a label would mean two things. */
static int same_classes(const char *dir, const data_source_t *a, const data_source_t *b,
                        char *err, size_t errlen) {
  if (!a->class_names || !b->class_names) return 0;
  for (int c = 0; c < a->num_classes || c < b->num_classes; c++)
    if (c >= a->num_classes || c >= b->num_classes ||
        strcmp(a->class_names[c], b->class_names[c]) != 0) {
      snprintf(err, errlen, "%s/val has %d class folders, %s/train %d: they differ at '%s' "
               "(both parts need the same class folders)", dir, b->num_classes, dir,
               a->num_classes, c < b->num_classes ? b->class_names[c] : a->class_names[c]);
      return -1;
    }
  return 0;
}

/* TFRecords name their classes only in the records: every label read once (a bad record
   is an error here, or left out with --skip-bad-images). */
static int count_record_classes(const data_source_t *s, int skip_bad, int *classes, char *err,
                                size_t errlen) {
  data_read_buf_t rb = {0};
  int rc = 0;
  for (size_t i = 0; i < s->n && rc == 0; i++) {
    const uint8_t *bytes;
    size_t len;
    int32_t y;
    if (data_source_read(s, i, &rb, &bytes, &len, &y, err, errlen) != 0) {
      if (!skip_bad) rc = -1;
      continue;
    }
    if (y + 1 > *classes) *classes = y + 1;
  }
  data_read_buf_free(&rb);
  return rc;
}

/* Per-channel mean and std (in [0, 1] units, as train_norm_from_data) of up to
   NORM_SAMPLES images of s, with the evaluation transform: the first ones of a fixed
   shuffle (seed 0, whatever --seed: a property of the files), decoded by the pipeline's
   threads. */
static int measure_norm(const data_source_t *s, const data_pipeline_opts_t *po, float mean[3],
                        float std[3], char *err, size_t errlen) {
  data_pipeline_opts_t o = *po;
  o.augment = 0;
  o.shuffle = 1;
  o.seed = 0;
  o.batch = 64;
  o.rank = 0;
  o.size = 1;
  for (int c = 0; c < 3; c++) o.mean[c] = 0, o.std[c] = 1.0f;   /* v / 255 */
  data_pipeline_t *p = data_pipeline_start(s, &o, 0, 0, err, errlen);
  if (!p) return -1;
  const size_t per = (size_t)o.image_size * o.image_size;
  double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
  size_t used = 0;
  data_batch_t b;
  int rc = 0;
  while (used < NORM_SAMPLES && (rc = data_pipeline_next(p, &b, err, errlen)) == 1)
    for (int i = 0; i < b.count && used < NORM_SAMPLES; i++, used++)
      for (int c = 0; c < o.channels; c++) {
        const float *x = b.x + ((size_t)i * o.channels + c) * per;
        for (size_t k = 0; k < per; k++) {
          sum[c] += x[k];
          sq[c] += (double)x[k] * x[k];
        }
      }
  data_pipeline_stop(p);
  if (rc < 0) return -1;
  for (int ch = 0; ch < 3; ch++) {
    int c = ch < o.channels ? ch : o.channels - 1;   /* grey: the one channel, repeated */
    double n = (double)used * per, m = used ? sum[c] / n : 0.5;
    double var = used ? sq[c] / n - m * m : 0.0625;
    mean[ch] = (float)m;
    std[ch] = var > 1e-12 ? (float)sqrt(var) : 1.0f;   /* a constant set: as it is */
  }
  return 0;
}

/* The pipeline's settings from the flags; image size and channels from the model's
   input unless given. */
static int pipeline_opts(const train_opts_t *o, int model_c, int model_h, int model_w,
                         data_pipeline_opts_t *po, char *err, size_t errlen) {
  data_pipeline_defaults(po);
  po->image_size = o->image_size;
  if (!po->image_size) {
    if (model_h != model_w) {
      snprintf(err, errlen, "--model %s takes %dx%d inputs, not square: give --image-size",
               o->model, model_h, model_w);
      return -1;
    }
    po->image_size = model_h;
  }
  po->channels = o->channels ? o->channels : model_c == 1 ? 1 : 3;
  if (po->channels == 2) {
    snprintf(err, errlen, "--channels 2: images are read as 1 (grey) or 3 (RGB) channels");
    return -1;
  }
  po->threads = o->data_threads;
  po->prefetch = o->prefetch;
  po->skip_bad = o->skip_bad_images;
  po->seed = o->seed;
  /* Without --augment every pass sees the whole image resized to S x S (centre-cropped
     when not square); with it, training takes torchvision's RandomResizedCrop and flip
     and evaluation its Resize(S * 256 / 224) + CenterCrop(S). */
  po->augment = o->augment;
  po->resize = o->augment ? 0 : po->image_size;
  return 0;
}

static void describe(const train_images_t *im, const data_source_t *s, train_dataset_t *d) {
  memset(d, 0, sizeof *d);
  d->n = (int)s->n;
  d->c = im->po.channels;
  d->h = d->w = im->po.image_size;
  d->num_classes = im->num_classes;
}

/* The parts as train's flags cut them: --max-train, --validation-split, --max-test. */
static int cut_parts(const train_opts_t *o, train_images_t *im, int *val_is_test, char *err,
                     size_t errlen) {
  if (im->whole_train.n > (size_t)1 << 30 || im->whole_test.n > (size_t)1 << 30) {
    snprintf(err, errlen, "%s: %zu training and %zu validation images, more than train takes "
             "(2^30)", o->data_dir, im->whole_train.n, im->whole_test.n);
    return -1;
  }
  size_t ntrain = im->whole_train.n, ntest = im->whole_test.n;
  if (o->max_train > 0 && (size_t)o->max_train < ntrain) ntrain = (size_t)o->max_train;
  if (o->max_test > 0 && (size_t)o->max_test < ntest) ntest = (size_t)o->max_test;
  size_t nval = (size_t)(ntrain * (double)o->validation_split);
  if (ntrain > 0 && nval >= ntrain) nval = ntrain - 1;
  data_source_view(&im->whole_train, 0, ntrain - nval, &im->train);
  data_source_view(&im->whole_train, ntrain - nval, nval, &im->val);
  data_source_view(&im->whole_test, 0, ntest, &im->test);
  *val_is_test = nval == 0;
  if (nval == 0) im->val = im->test;
  if (im->train.n == 0 || im->test.n == 0) {
    snprintf(err, errlen, "%s: %zu training and %zu validation images: both parts need some",
             o->data_dir, im->train.n, im->test.n);
    return -1;
  }
  return 0;
}

int train_images_open(const train_opts_t *o, int model_c, int model_h, int model_w,
                      train_images_t **out, train_dataset_t *train, train_dataset_t *val,
                      train_dataset_t *test, int *val_is_test, float mean[3], float std[3],
                      char *err, size_t errlen) {
  *out = NULL;
  if (!data_images_available(err, errlen)) return -1;
  if (!o->data_dir) {
    snprintf(err, errlen, "--dataset %s needs --data-dir D (D/train and D/val folders, "
             "D/train-* and D/validation-* TFRecords, or D/train.txt and D/val.txt lists)",
             o->dataset);
    return -1;
  }
  train_images_t *im = calloc(1, sizeof *im);
  if (!im) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (pipeline_opts(o, model_c, model_h, model_w, &im->po, err, errlen) != 0 ||
      open_part(o, 0, &im->whole_train, err, errlen) != 0 ||
      open_part(o, 1, &im->whole_test, err, errlen) != 0 ||
      same_classes(o->data_dir, &im->whole_train, &im->whole_test, err, errlen) != 0)
    goto fail;
  /* One class count for both parts (a class may be missing from the smaller one). */
  int nc = im->whole_train.num_classes > im->whole_test.num_classes
               ? im->whole_train.num_classes : im->whole_test.num_classes;
  if (im->whole_train.kind == DATA_TFRECORD && o->num_classes > 0) nc = o->num_classes;
  else if (im->whole_train.kind == DATA_TFRECORD &&
           (count_record_classes(&im->whole_train, o->skip_bad_images, &nc, err, errlen) != 0 ||
            count_record_classes(&im->whole_test, o->skip_bad_images, &nc, err, errlen) != 0))
    goto fail;
  im->num_classes = nc;
  if (measure_norm(&im->whole_train, &im->po, mean, std, err, errlen) != 0 ||
      cut_parts(o, im, val_is_test, err, errlen) != 0)
    goto fail;
  for (int c = 0; c < 3; c++) im->po.mean[c] = mean[c], im->po.std[c] = std[c];
  describe(im, &im->train, train);
  describe(im, &im->test, test);
  describe(im, &im->val, val);
  *out = im;
  return 0;
fail:
  train_images_free(im);
  return -1;
}

void train_images_set_norm(train_images_t *im, const float mean[3], const float std[3]) {
  for (int c = 0; c < 3; c++) im->po.mean[c] = mean[c], im->po.std[c] = std[c];
}

int train_images_begin(train_images_t *im, int part, int epoch, int first_step, int rank,
                       int size, int batch, char *err, size_t errlen) {
  train_images_end(im);
  data_pipeline_opts_t po = im->po;
  po.rank = rank;
  po.size = size;
  po.batch = batch;
  const data_source_t *s = part == TRAIN_IMAGES_TRAIN ? &im->train
                           : part == TRAIN_IMAGES_VAL ? &im->val : &im->test;
  if (part != TRAIN_IMAGES_TRAIN) po.augment = 0, po.shuffle = 0;
  im->pass = data_pipeline_start(s, &po, epoch, first_step, err, errlen);
  return im->pass ? 0 : -1;
}

int train_images_next(train_images_t *im, float *x, int32_t *y, int *count, int *step,
                      char *err, size_t errlen) {
  if (!im->pass) return 0;
  data_batch_t b;
  int rc = data_pipeline_next(im->pass, &b, err, errlen);
  if (rc != 1) return rc;
  for (int i = 0; i < b.count; i++)
    if (b.y[i] < 0 || b.y[i] >= im->num_classes) {
      snprintf(err, errlen, "label %d in the batch of step %d: the model has %d classes (give "
               "--num-classes above every label of the data)", b.y[i], b.step, im->num_classes);
      return -1;
    }
  size_t per = (size_t)im->po.channels * im->po.image_size * im->po.image_size;
  memcpy(x, b.x, sizeof(float) * per * b.count);
  memcpy(y, b.y, sizeof(int32_t) * b.count);
  *count = b.count;
  *step = b.step;
  return 1;
}

void train_images_end(train_images_t *im) {
  if (!im || !im->pass) return;
  im->skipped += data_pipeline_skipped(im->pass);
  data_pipeline_stop(im->pass);
  im->pass = NULL;
}

uint64_t train_images_skipped(const train_images_t *im) {
  return im->skipped + (im->pass ? data_pipeline_skipped(im->pass) : 0);
}

void train_images_free(train_images_t *im) {
  if (!im) return;
  train_images_end(im);
  data_source_free(&im->whole_train);
  data_source_free(&im->whole_test);
  free(im);
}
