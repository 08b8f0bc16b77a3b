/* train/agree.h: the settings every rank of a run must share, compared across the ranks
   at start. Ranks started with different ones (an MPMD command line, a typo on one host,
   another data set on one host's disk) would take different numbers of steps and wait
   on each other's allreduces forever; the comparison turns that into one line naming the
   flag and both values. */
#ifndef TRAIN_AGREE_H
#define TRAIN_AGREE_H

#include <stddef.h>

#include "train/flags.h"

/* The size of one rank's description: what each rank contributes to the allgather. */
#define TRAIN_AGREE_LEN 4096

/* The sizes of the data sets a rank loaded (from its own disk). */
typedef struct {
  int train, val, test;
} train_agree_data_t;

/* Writes o's shared settings and the data sets' sizes into buf (TRAIN_AGREE_LEN bytes,
   NUL-padded) as "NAME\tVALUE\n" lines, NAME a flag (--batch-size) or a data set's size.
   Flags that only rank 0 uses (--export, --checkpoint-dir, --logdir's paths, --quiet) or
   that may differ per host (--threads, --data-dir) are left out. */
void train_agree_describe(const train_opts_t *o, const train_agree_data_t *d,
                          char buf[TRAIN_AGREE_LEN]);

/* all: nranks descriptions in rank order, TRAIN_AGREE_LEN bytes each. 0 when every rank's
   equals rank 0's; else -1 with one line in err naming the first setting that differs,
   rank 0's value and that of the lowest rank with another. */
int train_agree_compare(const char *all, int nranks, char *err, size_t errlen);

#endif /* TRAIN_AGREE_H */
