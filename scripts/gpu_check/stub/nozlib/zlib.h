/* scripts/gpu_check/stub/nozlib/zlib.h: A ZLIB STAND-IN, ONLY FOR THE GPU CHECK, and only
   where the GPU machine has no zlib headers or library (scripts/gpu_check.sh tries the
   real one first). `train` needs zlib for crc32 (checkpoints) and for gzip-compressed
   IDX files; the GPU check trains on --dataset synthetic only. crc32 here is the real
   CRC-32 (the same values as zlib); gzopen always fails (ENOSYS), so a data set on disk
   says "cannot open" instead of being misread. Never used by the normal build. */
#ifndef GPU_CHECK_NOZLIB_H
#define GPU_CHECK_NOZLIB_H

typedef unsigned int uInt;
typedef unsigned long uLong;
typedef unsigned char Bytef;
typedef struct gpu_check_gz *gzFile;

#define Z_OK 0
#define Z_ERRNO (-1)

uLong crc32(uLong crc, const Bytef *buf, uInt len);
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
const char *gzerror(gzFile file, int *errnum);
int gzclose(gzFile file);

#endif /* GPU_CHECK_NOZLIB_H */
