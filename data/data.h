/* data/data.h: image input for training and benchmarks (the data module's one public
   header). Sources: a folder per class, a list file, TFRecord shards; decoding with
   libjpeg-turbo (TurboJPEG, DCT-domain scaling) and libpng; torchvision's transforms
   (RandomResizedCrop, flip, normalise; resize + centre crop for evaluation); a pipeline
   of decode threads filling a bounded queue of ready batches.
   The module includes nothing else of the project. Errors: functions return 0 / -1 (or
   NULL) and write a one-line message naming the file (and record) into err. */
#ifndef DATA_DATA_H
#define DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Limits on what a file may claim, checked before anything is allocated. */
#define DATA_MAX_SIDE 32768              /* pixels per side of a decoded image */
#define DATA_MAX_PIXELS (64u << 20)      /* width x height of a decoded image */
#define DATA_MAX_FILE_BYTES (256u << 20) /* one image file or TFRecord record */

/* ---- CRC32C and TFRecord ---- */
uint32_t data_crc32c(uint32_t crc, const void *buf, size_t len);
/* TFRecord's masked CRC: rotate right by 15, plus 0xa282ead8. */
uint32_t data_crc32c_masked(const void *buf, size_t len);

/* One record of a TFRecord shard: where its data starts and how long it is. */
typedef struct {
  uint64_t offset, length;
} data_record_t;

/* Scans a whole TFRecord file: every record's header (length and its CRC), and that the
   data and its CRC fit in the file. *recs (malloc) and *count; an empty file is 0
   records. A header that lies fails naming the file and the record's number. */
int data_tfrecord_index(const char *path, data_record_t **recs, size_t *count, char *err,
                        size_t errlen);
/* Reads record `index` (at rec) of path into buf (capacity *cap, grown with realloc),
   and checks its data CRC. */
int data_tfrecord_read(const char *path, size_t index, data_record_t rec, uint8_t **buf,
                       size_t *cap, char *err, size_t errlen);
/* A tf.train.Example as tf_cnn_benchmarks writes ImageNet: the bytes of image/encoded
   (*image points into a malloc'd copy the caller frees) and image/class/label. */
int data_example_parse(const uint8_t *rec, size_t len, uint8_t **image, size_t *image_len,
                       int64_t *label, char *err, size_t errlen);
/* Appends one record to f with both CRCs (a writer for tests and tools). */
int data_tfrecord_write(void *file, const void *buf, size_t len);

/* ---- decoding ---- */
typedef struct {
  int width, height;   /* as stored */
  int is_jpeg;         /* 1 JPEG, 0 PNG */
} data_image_info_t;

/* Format and size from the header alone; a size over the limits fails. */
int data_image_info(const uint8_t *buf, size_t len, data_image_info_t *info, char *err,
                    size_t errlen);

/* A decoded image: 8-bit interleaved pixels, channels 1 (grey) or 3 (RGB). */
typedef struct {
  uint8_t *pixels;
  size_t cap;
  int width, height, channels;
  int scale_num, scale_denom;   /* the DCT scaling used (1/1 for PNG) */
  int x0, y0;                   /* where pixels start in the whole (scaled) image */
  int full_width, full_height;  /* the whole image at that scale */
  void *tj;                     /* the TurboJPEG handle, kept between images */
  float *scratch;               /* data_resample's, kept between images */
  size_t scratch_cap;
} data_pixels_t;

/* Decodes to `channels` (1 or 3), converting grey, CMYK/YCCK, palette, alpha (dropped)
   and 16-bit inputs. A JPEG is decoded at the smallest DCT scale (1/8 .. 1) that keeps
   at least min_w x min_h pixels (0, 0: full size). out->pixels is reused and grown. */
int data_image_decode(const uint8_t *buf, size_t len, int channels, int min_w, int min_h,
                      data_pixels_t *out, char *err, size_t errlen);
void data_pixels_free(data_pixels_t *p);

/* A JPEG's part that a resample of box (in stored pixels) to out_w x out_h reads, at the
   smallest DCT scale that keeps the box at least out_w x out_h: libjpeg decodes only
   those rows (the ones above are skipped, the ones below never decoded) and, cut at iMCU
   boundaries, those columns (DALI's region decoding). out->x0, y0 and full_width,
   full_height place the part in the scaled image. A PNG is decoded whole. */
int data_image_decode_box(const uint8_t *buf, size_t len, int channels, double bx, double by,
                          double bw, double bh, int out_w, int out_h, data_pixels_t *out,
                          char *err, size_t errlen);

/* A JPEG's entropy (Huffman) decoding alone, nothing after it: what no DCT scaling or
   region decoding saves (data_bench's measure of the ceiling of those savings). */
int data_jpeg_entropy_decode(const uint8_t *buf, size_t len, char *err, size_t errlen);

/* ---- transforms (torchvision's) ---- */
/* A crop box in the stored image's pixels (fractional after DCT scaling). */
typedef struct {
  double x, y, w, h;
} data_box_t;

/* A small counter-based random source: the same (seed, stream) gives the same draws. */
typedef struct {
  uint64_t state;
} data_rng_t;
void data_rng_init(data_rng_t *r, uint64_t seed, uint64_t stream);
double data_rng_uniform(data_rng_t *r);   /* [0, 1) */
uint64_t data_mix64(uint64_t x);

/* torchvision.transforms.RandomResizedCrop.get_params: area fraction in [scale_min,
   scale_max], log-uniform aspect ratio in [ratio_min, ratio_max], 10 tries, then the
   centre crop with the ratio clamped. Integer box. */
data_box_t data_random_resized_crop(int width, int height, double scale_min, double scale_max,
                                    double ratio_min, double ratio_max, data_rng_t *rng);
/* Resize(resize) (the shorter side to resize) then CenterCrop(size), as one box. */
data_box_t data_center_crop_box(int width, int height, int resize, int size);

/* Resamples the box of src (in src's pixels) to out_w x out_h with PIL's bilinear filter
   (its support widened by the downscale factor: antialiased, as torchvision on PIL
   images), optionally mirrored, then writes (v/255 - mean[c]) / std[c] as float, NCHW
   (nhwc 0) or NHWC (nhwc 1). -1: out of memory. Its scratch memory stays in src. */
int data_resample(data_pixels_t *src, data_box_t box, int out_w, int out_h, int flip,
                  const float mean[3], const float std[3], int nhwc, float *out);

/* ---- sources ---- */
enum { DATA_IMAGEFOLDER, DATA_FILELIST, DATA_TFRECORD };

typedef struct {
  int kind;
  size_t n;                 /* samples */
  int num_classes;          /* folder: classes found; list: largest label + 1;
                               TFRecord: 0 until the records are read */
  char **class_names;       /* folder only: num_classes names, sorted */
  char **paths;             /* folder, list: n paths */
  int32_t *labels;          /* folder, list: n labels */
  char **files;             /* TFRecord: the shards */
  size_t nfiles;
  uint32_t *rec_file;       /* TFRecord: shard of sample i */
  data_record_t *recs;      /* TFRecord: record of sample i */
  uint32_t *rec_index;      /* TFRecord: its number within the shard */
  int view;                 /* 1: the arrays belong to another source (data_source_view) */
} data_source_t;

/* D/CLASS/<files .jpg .jpeg .png, any case>, classes and files sorted by name. */
int data_source_imagefolder(const char *dir, data_source_t *s, char *err, size_t errlen);
/* Lines "PATH LABEL" (relative paths from the list file's directory; '#' comments). */
int data_source_filelist(const char *list, data_source_t *s, char *err, size_t errlen);
/* Every file matching dir/prefix* (sorted), indexed. */
int data_source_tfrecord(const char *dir, const char *prefix, data_source_t *s, char *err,
                         size_t errlen);
void data_source_free(data_source_t *s);
/* Samples [begin, begin + count) of s as a source of their own (a split or a truncation
   without copying): it shares s's arrays, so s must outlive it; freeing it frees nothing. */
void data_source_view(const data_source_t *s, size_t begin, size_t count, data_source_t *view);
/* "path" or "path, record N": what an error names for sample i. */
void data_source_name(const data_source_t *s, size_t i, char *buf, size_t len);

/* One sample's encoded bytes and 0-based label (TFRecord: tf_cnn_benchmarks' 1-based
   label minus 1). buf is reused and grown; *image points into buf or *owned (which the
   caller frees). */
typedef struct {
  uint8_t *file;      /* whole file or record */
  size_t cap;
  uint8_t *image;     /* TFRecord: the Example's image bytes (malloc) */
} data_read_buf_t;
int data_source_read(const data_source_t *s, size_t i, data_read_buf_t *b,
                     const uint8_t **bytes, size_t *len, int32_t *label, char *err,
                     size_t errlen);
void data_read_buf_free(data_read_buf_t *b);

/* ---- the pipeline ---- */
typedef struct {
  int image_size;         /* output S x S */
  int channels;           /* 1 or 3 */
  int nhwc;               /* 0: NCHW (nn's layout), 1: NHWC */
  int augment;            /* 1: RandomResizedCrop + flip; 0: resize + centre crop */
  int resize;             /* evaluation's shorter side (0: S * 256 / 224) */
  double scale_min, scale_max, ratio_min, ratio_max;   /* 0: torchvision's defaults */
  float mean[3], std[3];
  int threads;            /* decode threads, >= 1 */
  int prefetch;           /* ready batches held at most, >= 1 */
  int skip_bad;           /* 1: a bad image is left out and counted; 0: an error */
  int full_decode;        /* 1: no DCT scaling (every JPEG decoded at full size) */
  int shuffle;            /* 1: a permutation per epoch from (seed, epoch) */
  uint64_t seed;
  int batch, rank, size;  /* per-rank batch; this rank's slice of each global batch */
} data_pipeline_opts_t;

void data_pipeline_defaults(data_pipeline_opts_t *o);

/* One batch: count samples, x (count x C x S x S floats, or NHWC), y labels. Valid until
   the next call of data_pipeline_next or data_pipeline_stop. */
typedef struct {
  int count;
  int step;
  float *x;
  int32_t *y;
} data_batch_t;

/* One sample as the pipeline makes it in epoch `epoch` (for a single thread, e.g. a
   measurement of the data's statistics): read, decoded, cropped, resampled, normalised
   into out, label into *y. The buffers are reused between calls. */
int data_sample(const data_source_t *src, const data_pipeline_opts_t *o, int epoch, size_t idx,
                data_read_buf_t *rb, data_pixels_t *px, float *out, int32_t *y, char *err,
                size_t errlen);

typedef struct data_pipeline data_pipeline_t;
/* Starts the threads for one epoch, at global step first_step. The order: a permutation
   of [0, n) from (seed, epoch) (identity without shuffle) cut into global batches of
   batch x size; this rank takes batch samples from rank x batch of each (of a shorter
   last one, an even share). A sample's augmentation comes from (seed, epoch, index), so
   the batches do not depend on the number of threads. */
data_pipeline_t *data_pipeline_start(const data_source_t *src, const data_pipeline_opts_t *o,
                                     int epoch, int first_step, char *err, size_t errlen);
/* 1: *out holds the next batch; 0: the epoch is over; -1: err (a bad image without
   skip_bad, naming it). Blocks while the decode threads work. */
int data_pipeline_next(data_pipeline_t *p, data_batch_t *out, char *err, size_t errlen);
int data_pipeline_steps(const data_pipeline_t *p);
uint64_t data_pipeline_skipped(const data_pipeline_t *p);
/* Seconds data_pipeline_next spent waiting for decode threads so far. */
double data_pipeline_wait_seconds(const data_pipeline_t *p);
void data_pipeline_stop(data_pipeline_t *p);
/* Ends p's pass and starts epoch `epoch` (from first_step) of the same source and
   options, keeping the batch buffers: no allocation, and no first touch of fresh pages
   (tens of megabytes a pass at 224x224). Skipped and wait counters start over. -1: a
   thread could not start (err); p then gives no batches and must still be stopped. */
int data_pipeline_restart(data_pipeline_t *p, int epoch, int first_step, char *err,
                          size_t errlen);

/* Batches without end (epoch after epoch; seeds as the pipeline's): each call fills x
   and y with exactly o->batch samples. For loops that count steps (cnn_bench). */
typedef struct data_stream data_stream_t;
data_stream_t *data_stream_open(const data_source_t *src, const data_pipeline_opts_t *o,
                                char *err, size_t errlen);
int data_stream_next(data_stream_t *s, float *x, int32_t *y, char *err, size_t errlen);
double data_stream_wait_seconds(const data_stream_t *s);
uint64_t data_stream_skipped(const data_stream_t *s);
void data_stream_close(data_stream_t *s);
/* ImageNet's layouts in dir: TFRecords dir/train-* (dir/validation-*) when there are
   any, else the folder dir/train (dir/val). */
int data_source_open_split(const char *dir, int validation, data_source_t *s, char *err,
                           size_t errlen);

/* The epoch's order and the slice scheme (the same as train's). */
void data_epoch_permutation(uint32_t *perm, size_t n, uint64_t seed, int epoch);
int data_steps_per_epoch(size_t n, int size, int batch);
int data_step_slice(size_t n, int rank, int size, int batch, int step, size_t *offset);

/* 1 when built with the image libraries; else 0 and why in err. */
int data_images_available(char *err, size_t errlen);

#endif /* DATA_DATA_H */
