/* train/tfevents.h: a TensorBoard event file writer, by hand: TFRecord framing (length,
   masked crc32c of the length, data, masked crc32c of the data) around Event protobufs
   (wall_time, step, file_version or a Summary of one simple_value or one HistogramProto).
   TensorBoard reads files named events.out.tfevents.*; one directory is one run (train
   writes Keras's two, <logdir>/train and <logdir>/validation). */
#ifndef TRAIN_TFEVENTS_H
#define TRAIN_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  FILE *f;
  char path[4096];
} train_tfevents_t;

/* Creates dir (and parents) if needed and opens
   dir/events.out.tfevents.<seconds>.<hostname>, writing the file_version record.
   Returns 0 or -1 with a message in err. */
int train_tfevents_open(train_tfevents_t *w, const char *dir, char *err, size_t errlen);
/* One scalar at a step; flushed so TensorBoard sees it while training runs. 0, or -1
   with errno set (a failed write or flush: a full disk, a file-size limit). */
int train_tfevents_scalar(train_tfevents_t *w, const char *tag, float value, int64_t step,
                          double wall_time);
/* Buckets of a histogram: equal widths over [min, max], as tf.summary.histogram. */
#define TRAIN_TB_BUCKETS 30
/* A histogram of the n values (non-finite ones left out) at a step, as TensorBoard's
   HistogramProto: min, max, num, sum, sum_squares and TRAIN_TB_BUCKETS buckets (one when
   all values are equal). Flushed; 0, or -1 with errno set. */
int train_tfevents_histogram(train_tfevents_t *w, const char *tag, const float *values,
                             size_t n, int64_t step, double wall_time);
/* Seconds since the epoch with the clock's fraction (TensorBoard's wall_time). */
double train_wall_time(void);
/* 0, or -1 with errno set when a write or the close failed; w->path stays. */
int train_tfevents_close(train_tfevents_t *w);

/* CRC-32C (Castagnoli) and TFRecord's masked form. */
uint32_t train_crc32c(const void *data, size_t len);
uint32_t train_crc32c_masked(const void *data, size_t len);

/* mkdir -p; 0 or -1 (errno set). */
int train_mkdirs(const char *dir);

#endif /* TRAIN_TFEVENTS_H */
