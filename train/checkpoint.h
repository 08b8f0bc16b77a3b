/* train/checkpoint.h: the train program's checkpoint file.
   Layout (little-endian):
     "HVDCKPT1"                      8-byte magic
     u64 file length                 catches truncation before anything else
     u32 metadata length, metadata   "key=value\n" lines: model, dataset, epoch, settings
     u32 section count, then per section: u16 name length, name, u64 byte count, bytes
     u32 crc32 (zlib) of every byte before it
   Sections hold raw arrays (params, buffers, optimizer state, ...); their meaning is
   the caller's. Written to a temporary file, fsynced, renamed over the target and the
   directory fsynced, so a crash leaves either the old or the new file, never half (and
   perhaps a "NAME.tmp.PID": train_ckpt_remove_stale). */
#ifndef TRAIN_CHECKPOINT_H
#define TRAIN_CHECKPOINT_H

#include <stddef.h>

typedef struct {
  char name[64];
  const void *data;
  size_t nbytes;
} train_ckpt_section_t;

typedef struct {
  char *meta;                    /* NUL-terminated "key=value\n" lines */
  int count;
  train_ckpt_section_t *sections;
  void *blob;                    /* the whole file; sections point into it */
} train_ckpt_t;

int train_ckpt_write(const char *path, const char *meta, const train_ckpt_section_t *sections,
                     int count, char *err, size_t errlen);
/* Reads and verifies (magic, length, structure, crc32): a corrupt or truncated file
   gives -1 and a one-line message naming the file. */
int train_ckpt_read(const char *path, train_ckpt_t *out, char *err, size_t errlen);
const train_ckpt_section_t *train_ckpt_find(const train_ckpt_t *c, const char *name);
/* Value of key in the metadata copied into buf; NULL when absent. */
const char *train_ckpt_meta(const train_ckpt_t *c, const char *key, char *buf, size_t len);

/* The metadata's "format" field: TRAIN_CKPT_FORMAT_PREFIX followed by a version. train
   writes TRAIN_CKPT_FORMAT and reads every version from 1 (before mid-epoch checkpoints)
   up to it. */
#define TRAIN_CKPT_FORMAT_PREFIX "hvd-train-checkpoint-"
#define TRAIN_CKPT_FORMAT 2
/* The version of c's format field in *version: 0, or -1 with err naming the file, the
   field's value (or its absence) and the versions this program reads. */
int train_ckpt_format(const train_ckpt_t *c, const char *path, int *version, char *err,
                      size_t errlen);
void train_ckpt_free(train_ckpt_t *c);

/* ---- a checkpoint directory ---- */
/* Removes the temporary files "NAME.ckpt.tmp.PID" that a write cut short (a kill, a
   crash) leaves behind; *removed counts them. 0, or -1 with err naming the file. */
int train_ckpt_remove_stale(const char *dir, int *removed, char *err, size_t errlen);

typedef struct {
  char path[4400];
  double mtime;                  /* seconds since the epoch */
} train_ckpt_file_t;
/* The regular files "*.ckpt" of dir, unordered, in *files (malloc; the caller frees).
   0, or -1 with err naming the directory. */
int train_ckpt_list(const char *dir, train_ckpt_file_t **files, int *count, char *err,
                    size_t errlen);

#endif /* TRAIN_CHECKPOINT_H */
