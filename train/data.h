/* train/data.h: data sets of the train program (IDX, CIFAR-10 binary,
   synthetic), per-rank shards reshuffled every epoch, normalisation and augmentation.
   Independent of nn and hvd so the tests can use it alone.
   Errors: functions return 0 or -1 and write a one-line message into err. */
#ifndef TRAIN_DATA_H
#define TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int n, c, h, w;          /* samples, channels, height, width */
  uint8_t *images;         /* n*c*h*w bytes, NCHW */
  int32_t *labels;         /* n labels in [0, num_classes) */
  int num_classes;
} train_dataset_t;

void train_dataset_free(train_dataset_t *d);

/* IDX pair (images idx3, labels idx1), gzip or plain (zlib reads both); labels 0..9,
   10 classes (the MNIST family). */
int train_load_idx(const char *images_path, const char *labels_path, train_dataset_t *out,
                   char *err, size_t errlen);
/* A user's IDX data (--dataset idx): two pairs of any image size and labels 0..255
   (EMNIST, KMNIST, ...). A pair whose counts differ, train and test images of different
   shapes, or labels all 0 fail with err naming the file. num_classes of both sets: the
   largest label of either plus one. */
int train_load_idx_sets(const char *train_images, const char *train_labels,
                        const char *test_images, const char *test_labels,
                        train_dataset_t *train, train_dataset_t *test, char *err,
                        size_t errlen);
/* One IDX file of unsigned bytes with want_dims dimensions: the data (malloc; the
   caller frees) and its dims, or NULL with the reason in err. The size the header
   claims is checked against overflow and the file before anything is allocated. */
uint8_t *train_idx_read(const char *path, int want_dims, uint32_t dims[3], char *err,
                        size_t errlen);
/* CIFAR-10 binary batch files (1 label byte + 3072 pixel bytes per record), appended. */
int train_load_cifar(const char *const *paths, int count, train_dataset_t *out, char *err,
                     size_t errlen);
/* Learnable synthetic data: each class is a fixed random template plus noise. */
int train_make_synthetic(int n, int c, int h, int w, int num_classes, uint64_t seed,
                         train_dataset_t *out, char *err, size_t errlen);

/* Loads the train and test sets of a named data set ("fashion-mnist", "mnist",
   "cifar10", "synthetic"); dir NULL: the default directory. */
int train_load_dataset(const char *name, const char *dir, uint64_t seed,
                       int synth_c, int synth_h, int synth_w, int synth_train,
                       int synth_test, train_dataset_t *train, train_dataset_t *test,
                       char *err, size_t errlen);

/* Moves the last `count` samples of d into val (a Keras-style validation split). */
int train_split_tail(train_dataset_t *d, int count, train_dataset_t *val, char *err,
                     size_t errlen);
/* Keeps only the first `count` samples (count <= 0 or >= n: unchanged). */
void train_truncate(train_dataset_t *d, int count);

/* Per-channel mean and std of the data set, in [0, 1] units (known constants for the
   named data sets keep runs comparable; synthetic computes them). */
void train_norm_constants(const char *dataset, float mean[3], float std[3]);
/* The same measured on d's images (per channel; --dataset idx, whose files carry none). */
void train_norm_from_data(const train_dataset_t *d, float mean[3], float std[3]);

/* ---- sharding ----
   The epoch's order is a permutation of [0, n) drawn from (seed, epoch), identical on
   every rank, cut into global batches of G = batch x size samples: global batch s is
   perm[s*G, s*G + G) (the last one may be shorter) and rank r takes its slice of it
   (batch samples from r*batch; of a shorter last batch an even share, maybe none). So a
   global batch holds the same samples however many ranks share it: a run resumed on
   fewer ranks with the global batch kept (an elastic restart) trains on the very
   batches the first run would have, and the slices cover every index exactly once.
   Steps per epoch: ceil(n / G), the same on all ranks. train_shard_range cuts [0, n)
   into contiguous blocks (evaluation). */
void train_epoch_permutation(uint32_t *perm, int n, uint64_t seed, int epoch);
void train_shard_range(int n, int rank, int size, int *begin, int *end);
int train_steps_per_epoch(int n, int size, int batch);
/* Samples that rank takes at step s, from perm[*offset] on (offset may be NULL). */
int train_step_slice(int n, int rank, int size, int batch, int step, int *offset);
int train_step_count(int n, int rank, int size, int batch, int step);
/* Samples all ranks together take at step s. */
int train_step_total(int n, int size, int batch, int step);

/* ---- batches ----
   Copies samples idx[0..count) into x (float NCHW, normalised) and y. With aug_pad > 0
   each sample is zero-padded by aug_pad and cropped back at a random offset; with
   aug_flip it is mirrored left-right with probability 1/2. The randomness comes from
   (seed, epoch, sample index), so a run is reproducible and resumable. */
typedef struct {
  float mean[3], std[3];
  int aug_pad;
  int aug_flip;
  uint64_t seed;
  int epoch;
} train_batch_opts_t;
void train_make_batch(const train_dataset_t *d, const uint32_t *idx, int count,
                      const train_batch_opts_t *o, float *x, int32_t *y);

/* splitmix64: the one random source (stateless, from a counter). */
uint64_t train_mix64(uint64_t x);

#endif /* TRAIN_DATA_H */
