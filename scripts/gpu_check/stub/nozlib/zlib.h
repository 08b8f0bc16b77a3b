/* scripts/gpu_check/stub/nozlib/zlib.h: A ZLIB STAND-IN, ONLY FOR THE GPU CHECK, and only
   where the GPU machine has no zlib headers or library (scripts/gpu_check.sh tries the
   real one first). `train` needs zlib for crc32 (checkpoints) and for gzip-compressed
   IDX files; the GPU check trains on --dataset synthetic only. crc32 here is the real
   CRC-32 (the same values as zlib); gzopen always fails (ENOSYS), so a data set on disk
   says "cannot open" instead of being misread. Built only with `make ZLIB=none`. */
#ifndef GPU_CHECK_NOZLIB_H
#define GPU_CHECK_NOZLIB_H

typedef unsigned int uInt;
typedef unsigned long uLong;
typedef unsigned char Bytef;
typedef struct gpu_check_gz *gzFile;

#define Z_OK 0
#define Z_ERRNO (-1)

/* inflate: the fields and calls train's IDX reader uses; inflateInit2 always fails
   (Z_STREAM_ERROR), so a gzip file says so instead of being misread. */
#define Z_NO_FLUSH 0
#define Z_STREAM_END 1
#define Z_NEED_DICT 2
#define Z_STREAM_ERROR (-2)
#define Z_DATA_ERROR (-3)
#define Z_MEM_ERROR (-4)
#define Z_BUF_ERROR (-5)
#define MAX_WBITS 15
typedef struct {
  const Bytef *next_in;
  uInt avail_in;
  Bytef *next_out;
  uInt avail_out;
  const char *msg;
} z_stream;
int inflateInit2(z_stream *strm, int window_bits);
int inflate(z_stream *strm, int flush);
int inflateReset(z_stream *strm);
int inflateEnd(z_stream *strm);

uLong crc32(uLong crc, const Bytef *buf, uInt len);
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
const char *gzerror(gzFile file, int *errnum);
int gzclose(gzFile file);

#endif /* GPU_CHECK_NOZLIB_H */
