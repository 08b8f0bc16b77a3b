/* train/data_images.h: the image data sets of the train program (--dataset imagefolder,
   tfrecord, filelist; data/ reads and decodes them), as train_dataset_t. */
#ifndef TRAIN_DATA_IMAGES_H
#define TRAIN_DATA_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "train/data.h"
#include "train/flags.h"

typedef struct {
  const char *dataset;   /* imagefolder | tfrecord | filelist */
  const char *dir;       /* ImageNet's layouts: dir/train/CLASS/..., dir/val/CLASS/...;
                            dir/train-*, dir/validation-*; dir/train.txt, dir/val.txt */
  int image_size, channels;
  int threads, prefetch;
  int skip_bad;
} train_images_opts_t;

/* 1 when name is one of the image data sets. */
int train_is_image_dataset(const char *name);
/* Decodes both parts once (the shorter side resized to image_size, then the centre
   crop: the whole image when it is square) into 8-bit NCHW sets, train and test (the
   validation part). *skipped: bad images left out with skip_bad. */
int train_load_images(const train_images_opts_t *o, train_dataset_t *train,
                      train_dataset_t *test, uint64_t *skipped, char *err, size_t errlen);

/* The same from train's flags (--data-dir, --image-size, --channels, --data-threads,
   --prefetch, --skip-bad-images); image size and channels default to the model's input
   (model_c x model_h x model_w). */
int train_load_image_sets(const train_opts_t *o, int model_c, int model_h, int model_w,
                          train_dataset_t *train, train_dataset_t *test, uint64_t *skipped,
                          char *err, size_t errlen);

#endif /* TRAIN_DATA_IMAGES_H */
