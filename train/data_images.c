/* train/data_images.c: --dataset imagefolder | tfrecord | filelist. The data module
   decodes every image once through its pipeline (decode threads, DCT scaling) into the
   8-bit NCHW set the rest of train already shards, shuffles, augments and evaluates, so
   checkpoints, resume and evaluation work unchanged. The decoded set is held in memory
   (n x channels x size x size bytes). */
#include "train/data_images.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

int train_is_image_dataset(const char *name) {
  return strcmp(name, "imagefolder") == 0 || strcmp(name, "tfrecord") == 0 ||
         strcmp(name, "filelist") == 0;
}

static int open_part(const train_images_opts_t *o, int val, data_source_t *s, char *err,
                     size_t errlen) {
  char p[4096];
  if (strcmp(o->dataset, "imagefolder") == 0) {
    snprintf(p, sizeof p, "%s/%s", o->dir, val ? "val" : "train");
    return data_source_imagefolder(p, s, err, errlen);
  }
  if (strcmp(o->dataset, "filelist") == 0) {
    snprintf(p, sizeof p, "%s/%s", o->dir, val ? "val.txt" : "train.txt");
    return data_source_filelist(p, s, err, errlen);
  }
  return data_source_tfrecord(o->dir, val ? "validation-" : "train-", s, err, errlen);
}

/* Every sample of s, in order, into d (8-bit NCHW). */
static int decode_all(const train_images_opts_t *o, const data_source_t *s, train_dataset_t *d,
                      uint64_t *skipped, char *err, size_t errlen) {
  data_pipeline_opts_t po;
  data_pipeline_defaults(&po);
  po.image_size = o->image_size;
  po.channels = o->channels;
  po.resize = o->image_size;
  po.threads = o->threads;
  po.prefetch = o->prefetch;
  po.skip_bad = o->skip_bad;
  po.shuffle = 0;
  po.batch = 64;
  for (int c = 0; c < 3; c++) po.mean[c] = 0, po.std[c] = 1.0f / 255;   /* pixel values */
  size_t per = (size_t)o->channels * o->image_size * o->image_size;
  memset(d, 0, sizeof *d);
  d->images = malloc(per * s->n);
  d->labels = malloc(sizeof(int32_t) * s->n);
  if (!d->images || !d->labels) {
    snprintf(err, errlen, "out of memory for %zu decoded images of %zu bytes", s->n, per);
    train_dataset_free(d);
    return -1;
  }
  data_pipeline_t *p = data_pipeline_start(s, &po, 0, 0, err, errlen);
  if (!p) {
    train_dataset_free(d);
    return -1;
  }
  data_batch_t b;
  int rc, n = 0;
  while ((rc = data_pipeline_next(p, &b, err, errlen)) == 1) {
    for (size_t i = 0; i < per * b.count; i++) d->images[per * n + i] = (uint8_t)lrintf(b.x[i]);
    memcpy(d->labels + n, b.y, sizeof(int32_t) * b.count);
    n += b.count;
  }
  *skipped += data_pipeline_skipped(p);
  data_pipeline_stop(p);
  if (rc != 0 || n == 0) {
    if (rc == 0) snprintf(err, errlen, "no image could be read (all %zu were bad)", s->n);
    train_dataset_free(d);
    return -1;
  }
  d->n = n;
  d->c = o->channels;
  d->h = d->w = o->image_size;
  for (int i = 0; i < n; i++)
    if (d->labels[i] + 1 > d->num_classes) d->num_classes = d->labels[i] + 1;
  return 0;
}

int train_load_images(const train_images_opts_t *o, train_dataset_t *train,
                      train_dataset_t *test, uint64_t *skipped, char *err, size_t errlen) {
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  *skipped = 0;
  if (!data_images_available(err, errlen)) return -1;
  if (!o->dir) {
    snprintf(err, errlen, "--dataset %s needs --data-dir D (D/train and D/val folders, "
             "D/train-* and D/validation-* TFRecords, or D/train.txt and D/val.txt lists)",
             o->dataset);
    return -1;
  }
  data_source_t s, first = {0};
  for (int val = 0; val < 2; val++) {
    if (open_part(o, val, &s, err, errlen) != 0) goto fail;
    int rc = 0;
    /* ImageFolder's labels are positions in the sorted class list: both parts must have
       the same classes, or a label would mean two things. */
    for (int c = 0; val && c < s.num_classes && s.class_names; c++)
      if (s.num_classes != first.num_classes || strcmp(s.class_names[c], first.class_names[c])) {
        snprintf(err, errlen, "%s/val has %d class folders, %s/train %d: they differ at "
                 "'%s' (both parts need the same class folders)", o->dir, s.num_classes, o->dir,
                 first.num_classes, s.class_names[c]);
        rc = -1;
        break;
      }
    train_dataset_t *d = val ? test : train;
    if (rc == 0) rc = decode_all(o, &s, d, skipped, err, errlen);
    if (rc == 0 && s.num_classes > d->num_classes) d->num_classes = s.num_classes;
    if (val) data_source_free(&s);
    else first = s;
    if (rc != 0) goto fail;
  }
  data_source_free(&first);
  /* One class count for both parts (a class may be missing from the smaller one). */
  int nc = train->num_classes > test->num_classes ? train->num_classes : test->num_classes;
  train->num_classes = test->num_classes = nc;
  return 0;
fail:
  data_source_free(&first);
  train_dataset_free(train);
  train_dataset_free(test);
  return -1;
}

int train_load_image_sets(const train_opts_t *o, int model_c, int model_h, int model_w,
                          train_dataset_t *train, train_dataset_t *test, uint64_t *skipped,
                          char *err, size_t errlen) {
  train_images_opts_t io = {.dataset = o->dataset, .dir = o->data_dir,
                            .image_size = o->image_size, .channels = o->channels,
                            .threads = o->data_threads, .prefetch = o->prefetch,
                            .skip_bad = o->skip_bad_images};
  if (!io.image_size) {
    if (model_h != model_w) {
      snprintf(err, errlen, "--model %s takes %dx%d inputs, not square: give --image-size",
               o->model, model_h, model_w);
      return -1;
    }
    io.image_size = model_h;
  }
  if (!io.channels) io.channels = model_c == 1 ? 1 : 3;
  if (io.channels == 2) {
    snprintf(err, errlen, "--channels 2: images are read as 1 (grey) or 3 (RGB) channels");
    return -1;
  }
  return train_load_images(&io, train, test, skipped, err, errlen);
}
