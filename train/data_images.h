/* train/data_images.h: the image data sets of the train program (--dataset imagefolder,
   tfrecord, filelist; data/ reads and decodes them), streamed: the sets are lists of
   files (or records) and every batch is decoded when the loop needs it, by the data
   module's pipeline of decode threads, a bounded number of batches ahead. Memory is
   bounded by --prefetch batches, not by the data set. */
#ifndef TRAIN_DATA_IMAGES_H
#define TRAIN_DATA_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "train/data.h"
#include "train/flags.h"

/* 1 when name is one of the image data sets. */
int train_is_image_dataset(const char *name);

typedef struct train_images train_images_t;

/* Opens both parts of --data-dir (D/train and D/val, D/train-* and D/validation-*, or
   D/train.txt and D/val.txt): train, val and test describe them (n, shape, classes; no
   pixels). Image size and channels default to the model's input (model_c x model_h x
   model_w). --max-train, --max-test and --validation-split (the training part's tail,
   as train_split_tail) are applied to the file lists; *val_is_test when there is no
   split. mean and std: per channel, measured on an evenly spaced sample of the training
   part (before --max-train), the same in every run of these files; each host measures
   its own copy, so a multi-rank run replaces them with rank 0's (train_images_set_norm)
   before the first pass. TFRecords without
   --num-classes: every record's label is read once to count the classes. */
int train_images_open(const train_opts_t *o, int model_c, int model_h, int model_w,
                      train_images_t **out, train_dataset_t *train, train_dataset_t *val,
                      train_dataset_t *test, int *val_is_test, float mean[3], float std[3],
                      char *err, size_t errlen);

enum { TRAIN_IMAGES_TRAIN, TRAIN_IMAGES_VAL, TRAIN_IMAGES_TEST };

/* Starts a pass over a part: TRAIN for epoch `epoch` from step first_step (the epoch's
   permutation of train_epoch_permutation, torchvision's RandomResizedCrop and flip with
   --augment, rank's slice of each global batch of batch x size: train_step_slice's
   scheme); VAL and TEST in order, resized and centre-cropped, every sample once over
   the ranks. One pass at a time. */
int train_images_begin(train_images_t *im, int part, int epoch, int first_step, int rank,
                       int size, int batch, char *err, size_t errlen);
/* The pass's next batch into x (NCHW, normalised) and y: 1 (*count samples, *step its
   step), 0 at the end of the pass, -1 err (a bad image without --skip-bad-images, naming
   the file, or a label outside the model's classes). */
int train_images_next(train_images_t *im, float *x, int32_t *y, int *count, int *step,
                      char *err, size_t errlen);
void train_images_end(train_images_t *im);
/* The normalisation every later pass uses (rank 0's, agreed across the ranks). */
void train_images_set_norm(train_images_t *im, const float mean[3], const float std[3]);
/* Images left out with --skip-bad-images so far (every time one was read). */
uint64_t train_images_skipped(const train_images_t *im);
void train_images_free(train_images_t *im);

#endif /* TRAIN_DATA_IMAGES_H */
