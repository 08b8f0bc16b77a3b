/* data/tfrecord.c: TFRecord files (TensorFlow's record format):
     uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
     length bytes of data, uint32 masked CRC32C of the data.
   The index is built from the headers alone (each checked against its CRC and against
   what is left of the file), so a corrupt length is caught before anything is read or
   allocated; a record's data CRC is checked when the record is read. */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t le64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static uint32_t le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put_le(uint8_t *b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}

int data_tfrecord_index(const char *path, data_record_t **recs, size_t *count, char *err,
                        size_t errlen) {
  *recs = NULL;
  *count = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    fclose(f);
    return -1;
  }
  uint64_t size = (uint64_t)st.st_size, pos = 0;
  size_t n = 0, cap = 0;
  data_record_t *r = NULL;
  while (pos < size) {
    uint8_t h[12];
    if (size - pos < 12) {
      snprintf(err, errlen, "%s, record %zu: truncated header (%llu bytes left, 12 needed)",
               path, n, (unsigned long long)(size - pos));
      goto fail;
    }
    if (fseeko(f, (off_t)pos, SEEK_SET) != 0 || fread(h, 1, 12, f) != 12) {
      snprintf(err, errlen, "%s, record %zu: read error at byte %llu (%s)", path, n,
               (unsigned long long)pos, ferror(f) ? strerror(errno) : "end of file");
      goto fail;
    }
    uint64_t len = le64(h);
    if (data_crc32c_masked(h, 8) != le32(h + 8)) {
      snprintf(err, errlen, "%s, record %zu: corrupt length (CRC of the length field does "
               "not match, at byte %llu)", path, n, (unsigned long long)pos);
      goto fail;
    }
    if (len > size - pos - 12 || size - pos - 12 - len < 4) {
      snprintf(err, errlen, "%s, record %zu: length %llu runs past the end of the file "
               "(%llu bytes left)", path, n, (unsigned long long)len,
               (unsigned long long)(size - pos - 12));
      goto fail;
    }
    if (len > DATA_MAX_FILE_BYTES) {
      snprintf(err, errlen, "%s, record %zu: %llu bytes, more than the %u a record may have",
               path, n, (unsigned long long)len, DATA_MAX_FILE_BYTES);
      goto fail;
    }
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 256;
      data_record_t *g = realloc(r, nc * sizeof *r);
      if (!g) {
        snprintf(err, errlen, "%s: out of memory indexing %zu records", path, n);
        goto fail;
      }
      r = g;
      cap = nc;
    }
    r[n].offset = pos + 12;
    r[n].length = len;
    n++;
    pos += 12 + len + 4;
  }
  fclose(f);
  *recs = r;
  *count = n;
  return 0;
fail:
  free(r);
  fclose(f);
  return -1;
}

int data_tfrecord_read(const char *path, size_t index, data_record_t rec, uint8_t **buf,
                       size_t *cap, char *err, size_t errlen) {
  if (rec.length > DATA_MAX_FILE_BYTES) {
    snprintf(err, errlen, "%s, record %zu: %llu bytes, more than the %u a record may have",
             path, index, (unsigned long long)rec.length, DATA_MAX_FILE_BYTES);
    return -1;
  }
  size_t need = (size_t)rec.length + 4;
  if (*cap < need) {
    uint8_t *g = realloc(*buf, need);
    if (!g) {
      snprintf(err, errlen, "%s, record %zu: out of memory (%zu bytes)", path, index, need);
      return -1;
    }
    *buf = g;
    *cap = need;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    return -1;
  }
  int ok = fseeko(f, (off_t)rec.offset, SEEK_SET) == 0 && fread(*buf, 1, need, f) == need;
  fclose(f);
  if (!ok) {
    snprintf(err, errlen, "%s, record %zu: cannot read %zu bytes at byte %llu (the file "
             "changed since it was indexed?)", path, index, need,
             (unsigned long long)rec.offset);
    return -1;
  }
  if (data_crc32c_masked(*buf, (size_t)rec.length) != le32(*buf + rec.length)) {
    snprintf(err, errlen, "%s, record %zu: corrupt data (CRC32C of its %llu bytes does not "
             "match)", path, index, (unsigned long long)rec.length);
    return -1;
  }
  return 0;
}

int data_tfrecord_write(void *file, const void *buf, size_t len) {
  FILE *f = file;
  uint8_t h[12], t[4];
  put_le(h, len, 8);
  put_le(h + 8, data_crc32c_masked(h, 8), 4);
  put_le(t, data_crc32c_masked(buf, len), 4);
  if (fwrite(h, 1, 12, f) != 12 || fwrite(buf, 1, len, f) != len || fwrite(t, 1, 4, f) != 4)
    return -1;
  return 0;
}
