/* scripts/gpu_check/stub/nozlib/zlib.c: the GPU check's zlib stand-in (see zlib.h):
   CRC-32 as zlib computes it (reflected polynomial 0xEDB88320), no gzip reading. */
#include "zlib.h"

#include <errno.h>
#include <stddef.h>

uLong crc32(uLong crc, const Bytef *buf, uInt len) {
  static unsigned long table[256];
  static int ready;
  if (!ready) {
    for (unsigned long i = 0; i < 256; i++) {
      unsigned long c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320ul : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  if (buf == NULL) return 0;   /* zlib: crc32(0, NULL, 0) is the initial value */
  unsigned long c = (crc & 0xFFFFFFFFul) ^ 0xFFFFFFFFul;
  for (uInt i = 0; i < len; i++) c = table[(c ^ buf[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFul;
}

gzFile gzopen(const char *path, const char *mode) {
  (void)path, (void)mode;
  errno = ENOSYS;   /* "Function not implemented": this stand-in reads no files */
  return NULL;
}

int gzread(gzFile file, void *buf, unsigned len) {
  (void)file, (void)buf, (void)len;
  return -1;
}

const char *gzerror(gzFile file, int *errnum) {
  (void)file;
  if (errnum) *errnum = Z_ERRNO;
  return "no zlib in the GPU check build";
}

int gzclose(gzFile file) {
  (void)file;
  return Z_ERRNO;
}

int inflateInit2(z_stream *strm, int window_bits) {
  (void)window_bits;
  strm->msg = "no gzip in the GPU check's zlib stand-in";
  return Z_STREAM_ERROR;
}
int inflate(z_stream *strm, int flush) {
  (void)strm;
  (void)flush;
  return Z_STREAM_ERROR;
}
int inflateReset(z_stream *strm) {
  (void)strm;
  return Z_STREAM_ERROR;
}
int inflateEnd(z_stream *strm) {
  (void)strm;
  return Z_OK;
}
