/* train/checkpoint.h: the train program's checkpoint file.
   Layout (little-endian):
     "HVDCKPT1"                      8-byte magic
     u64 file length                 catches truncation before anything else
     u32 metadata length, metadata   "key=value\n" lines: model, dataset, epoch, settings
     u32 section count, then per section: u16 name length, name, u64 byte count, bytes
     u32 crc32 (zlib) of every byte before it
   Sections hold raw arrays (params, buffers, optimizer state, ...); their meaning is
   the caller's. Written to a temporary file, fsynced, renamed over the target and the
   directory fsynced, so a crash leaves either the old or the new file, never half. */
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
void train_ckpt_free(train_ckpt_t *c);

#endif /* TRAIN_CHECKPOINT_H */
