/* bench/data_bench.c: the image input pipeline's speed (data/), side by side with its
   peer and its ceiling, on the same files in one run:
     hvd      data/'s pipeline: decode (TurboJPEG with DCT scaling) + RandomResizedCrop(S)
              + flip + normalise to float NCHW, --threads decode threads;
     torch    torchvision's DataLoader (PIL decodes), the same transforms, as many worker
              processes (bench/data_bench_torch.py, /usr/bin/python3);
     decode   TurboJPEG's bare full-size decode of the same files to RGB, one thread per
              --threads (tjbench's measure): what decoding every pixel costs.
   Each figure is the median of --repeats passes of --images images, after a warm-up, in
   images per second of wall time and per CPU second (the process's CPU time, all its
   threads; the peer's workers' and main process's): on a shared, loaded machine the wall
   figures swing with the load, the CPU figures much less. Output: one line per (threads,
   method), and the ratios the goals name (hvd / torch per core, hvd / full decode). Data: scripts/make_image_dataset.py
   photos DIR (about 500x375 JPEGs); --data_dir DIR reads DIR/train (or DIR/train-*). */
#include "data/data.h"
#include "util/clock.h"
#include "util/flags.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  double wall, cpu;   /* images per second of wall time, per CPU second */
} rate_t;

typedef struct {
  const char *data_dir;
  const char *python;
  int image_size, batch, images, repeats, max_threads, peer, stages;
} options_t;

enum { NFLAGS = 9 };
static void flag_table(options_t *o, util_flag_t t[NFLAGS]) {
  const util_flag_t f[NFLAGS] = {
      {"data_dir", UTIL_FLAG_STRING, &o->data_dir, .metavar = "DIR",
       .help = "images: DIR/train/CLASS/*.jpg or DIR/train-* TFRecords (required)"},
      {"image_size", UTIL_FLAG_INT, &o->image_size, .min = 8, .max = 1024,
       .help = "RandomResizedCrop's output side"},
      {"batch_size", UTIL_FLAG_INT, &o->batch, .min = 1, .max = 4096, .help = "images per batch"},
      {"images", UTIL_FLAG_INT, &o->images, .min = 1, .max = 1 << 30,
       .help = "images per timed pass"},
      {"repeats", UTIL_FLAG_INT, &o->repeats, .min = 1, .max = 100, .help = "timed passes (median)"},
      {"threads", UTIL_FLAG_INT, &o->max_threads, .min = 1, .max = 256,
       .help = "measure 1, 2, ... up to N threads (worker processes for the peer)"},
      {"peer", UTIL_FLAG_BOOL, &o->peer,
       .help = "also run torchvision's DataLoader (--no-peer: hvd and the ceiling only)"},
      {"python", UTIL_FLAG_STRING, &o->python, .metavar = "PATH",
       .help = "the Python with torch, torchvision and PIL"},
      {"stages", UTIL_FLAG_BOOL, &o->stages,
       .help = "first, one thread's time per stage (read, entropy decode, full decode, "
               "crop-only decode, resample), and the DCT scales the crops get"},
  };
  memcpy(t, f, sizeof f);
}

static void die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "data_bench: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  exit(2);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* hvd: the pipeline's images/sec at `threads` decode threads. */
static rate_t run_pipeline(const options_t *o, const data_source_t *src, int threads) {
  data_pipeline_opts_t po;
  data_pipeline_defaults(&po);
  po.image_size = o->image_size;
  po.augment = 1;
  po.threads = threads;
  po.prefetch = 2 * threads + 2;
  po.batch = o->batch;
  po.seed = 1;
  char err[4800];
  data_stream_t *s = data_stream_open(src, &po, err, sizeof err);
  if (!s) die("%s%s", err, "");
  size_t floats = (size_t)o->batch * 3 * o->image_size * o->image_size;
  float *x = malloc(sizeof(float) * floats);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)o->batch);
  double *rates = malloc(sizeof(double) * 2 * (size_t)o->repeats);
  if (!x || !y || !rates) die("out of memory%s%s", "", "");
  if (data_stream_next(s, x, y, err, sizeof err) != 0) die("%s%s", err, "");   /* warm-up */
  for (int r = 0; r < o->repeats; r++) {
    double t0 = util_now_s(), c0 = cpu_now();
    int n = 0;
    while (n < o->images) {
      if (data_stream_next(s, x, y, err, sizeof err) != 0) die("%s%s", err, "");
      n += o->batch;
    }
    rates[r] = n / (util_now_s() - t0);
    rates[o->repeats + r] = n / (cpu_now() - c0);
  }
  /* The threads go on filling the queue past the last batch taken: the CPU figure counts
     up to prefetch batches too many, in hvd's disfavour. */
  rate_t m = {median(rates, o->repeats), median(rates + o->repeats, o->repeats)};
  data_stream_close(s);
  free(x), free(y), free(rates);
  return m;
}

/* Where one thread's time goes, stage by stage, on the pipeline's own crops (the
   sample's crop and flip as data/pipeline.c draws them for epoch 0, seed 1): reading the
   file; the entropy (Huffman) pass alone over the whole file (what no DCT scaling or
   region decoding saves above a crop's bottom edge); TurboJPEG's full decode (the
   ceiling's); the crop-only decode (the crop's rows and iMCU columns at the DCT scale the
   pipeline picks: the best this decoder does for these crops with nothing else); the
   resample + flip + normalise into floats. Each in microseconds of the thread's CPU time per image, summed over
   --images images, the median of --repeats passes. */
enum { ST_READ, ST_ENTROPY, ST_FULL, ST_CROP, ST_RESAMPLE, ST_N };

typedef struct {
  double us[ST_N];
  int scale_count[4];       /* crops decoded at 1/1, 1/2, 1/4, 1/8 */
  double rows_frac, area_frac;   /* mean: rows up to the crop's bottom, the crop's area */
} stages_t;

/* The thread's CPU time: on a shared, loaded machine wall time per stage would count the
   time other processes ran. */
static double thread_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void stage_pass(const options_t *o, const data_source_t *src, stages_t *st, float *out) {
  data_read_buf_t rb = {0};
  data_pixels_t px = {0};
  data_pipeline_opts_t po;
  data_pipeline_defaults(&po);
  char err[4800];
  const int S = o->image_size;
  memset(st, 0, sizeof *st);
  for (int k = 0; k < o->images; k++) {
    size_t idx = (size_t)k % src->n;
    const uint8_t *b;
    size_t len;
    int32_t label;
    double t0 = thread_cpu_now();
    if (data_source_read(src, idx, &rb, &b, &len, &label, err, sizeof err) != 0) die("%s%s", err, "");
    double t1 = thread_cpu_now();
    data_image_info_t info;
    if (data_image_info(b, len, &info, err, sizeof err) != 0) die("%s%s", err, "");
    if (info.is_jpeg && data_jpeg_entropy_decode(b, len, err, sizeof err) != 0) die("%s%s", err, "");
    double t2 = thread_cpu_now();
    if (data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) != 0) die("%s%s", err, "");
    double t3 = thread_cpu_now();
    data_rng_t rng;
    data_rng_init(&rng, 1, idx);
    data_box_t box = data_random_resized_crop(info.width, info.height, 0.08, 1.0, 3.0 / 4,
                                              4.0 / 3, &rng);
    int flip = data_rng_uniform(&rng) < 0.5;
    if (data_image_decode_box(b, len, 3, box.x, box.y, box.w, box.h, S, S, &px, err,
                              sizeof err) != 0)
      die("%s%s", err, "");
    double t4 = thread_cpu_now();
    double fx = (double)px.full_width / info.width, fy = (double)px.full_height / info.height;
    data_box_t sb = {box.x * fx - px.x0, box.y * fy - px.y0, box.w * fx, box.h * fy};
    if (data_resample(&px, sb, S, S, flip, po.mean, po.std, 0, out) != 0) die("out of memory%s%s", "", "");
    double t5 = thread_cpu_now();
    st->us[ST_READ] += t1 - t0;
    st->us[ST_ENTROPY] += t2 - t1;
    st->us[ST_FULL] += t3 - t2;
    st->us[ST_CROP] += t4 - t3;
    st->us[ST_RESAMPLE] += t5 - t4;
    int sc = px.scale_denom / (px.scale_num ? px.scale_num : 1);
    st->scale_count[sc >= 8 ? 3 : sc >= 4 ? 2 : sc >= 2 ? 1 : 0]++;
    st->rows_frac += (box.y + box.h) / info.height;
    st->area_frac += box.w * box.h / ((double)info.width * info.height);
  }
  for (int i = 0; i < ST_N; i++) st->us[i] *= 1e6 / o->images;
  st->rows_frac /= o->images;
  st->area_frac /= o->images;
  data_read_buf_free(&rb);
  data_pixels_free(&px);
}

static void run_stages(const options_t *o, const data_source_t *src) {
  float *out = malloc(sizeof(float) * 3 * (size_t)o->image_size * o->image_size);
  stages_t *st = malloc(sizeof *st * (size_t)o->repeats);
  double *v = malloc(sizeof *v * (size_t)o->repeats);
  if (!out || !st || !v) die("out of memory%s%s", "", "");
  stages_t warm;
  stage_pass(&(options_t){.image_size = o->image_size, .images = o->batch}, src, &warm, out);
  for (int r = 0; r < o->repeats; r++) stage_pass(o, src, &st[r], out);
  static const char *names[ST_N] = {
      "read the file", "entropy decode only (whole file)", "full decode (TurboJPEG, RGB)",
      "crop-only decode (crop rows/iMCUs, DCT scale)", "resample + flip + normalise"};
  double med[ST_N];
  for (int i = 0; i < ST_N; i++) {
    for (int r = 0; r < o->repeats; r++) v[r] = st[r].us[i];
    med[i] = median(v, o->repeats);
  }
  printf("stages, 1 thread, CPU microseconds per image (images per CPU second), median of %d passes:\n",
         o->repeats);
  for (int i = 0; i < ST_N; i++)
    printf("  %-46s %9.1f us (%8.1f/s)\n", names[i], med[i], 1e6 / med[i]);
  double crop_path = med[ST_READ] + med[ST_CROP] + med[ST_RESAMPLE];
  printf("  crop-only decode / full decode: %.2fx; read + crop-only decode + resample: %.1f us "
         "(%.1f/s, %.2fx the full decode)\n", med[ST_FULL] / med[ST_CROP], crop_path,
         1e6 / crop_path, med[ST_FULL] / crop_path);
  const stages_t *s = &st[0];
  int n = s->scale_count[0] + s->scale_count[1] + s->scale_count[2] + s->scale_count[3];
  printf("  crops: DCT scale 1/1 %.0f%%, 1/2 %.0f%%, 1/4 %.0f%%, 1/8 %.0f%%; rows down to the "
         "crop's bottom %.0f%% of the height, crop area %.0f%% of the image (means)\n",
         100.0 * s->scale_count[0] / n, 100.0 * s->scale_count[1] / n,
         100.0 * s->scale_count[2] / n, 100.0 * s->scale_count[3] / n, 100 * s->rows_frac,
         100 * s->area_frac);
  fflush(stdout);
  free(out), free(st), free(v);
}

/* The ceiling: every file decoded at full size to RGB, files split over threads. */
typedef struct {
  const data_source_t *src;
  size_t first, count;
  int fail;
} decode_job_t;

static void *decode_files(void *arg) {
  decode_job_t *j = arg;
  data_read_buf_t rb = {0};
  data_pixels_t px = {0};
  char err[4800];
  for (size_t k = 0; k < j->count; k++) {
    const uint8_t *b;
    size_t len;
    int32_t label;
    size_t i = (j->first + k) % j->src->n;
    if (data_source_read(j->src, i, &rb, &b, &len, &label, err, sizeof err) != 0 ||
        data_image_decode(b, len, 3, 0, 0, &px, err, sizeof err) != 0)
      j->fail = 1;
  }
  data_read_buf_free(&rb);
  data_pixels_free(&px);
  return NULL;
}

static rate_t run_decode(const options_t *o, const data_source_t *src, int threads) {
  double *rates = malloc(sizeof(double) * 2 * (size_t)o->repeats);
  decode_job_t jobs[256];
  pthread_t tid[256];
  for (int r = -1; r < o->repeats; r++) {   /* r = -1: warm-up (files into the page cache) */
    size_t per = (size_t)(r < 0 ? o->batch : o->images) / threads + 1;
    double t0 = util_now_s(), c0 = cpu_now();
    for (int t = 0; t < threads; t++) {
      jobs[t] = (decode_job_t){src, per * t, per, 0};
      if (pthread_create(&tid[t], NULL, decode_files, &jobs[t]) != 0) die("cannot start a thread%s%s", "", "");
    }
    for (int t = 0; t < threads; t++) {
      pthread_join(tid[t], NULL);
      if (jobs[t].fail) die("a file does not decode (run the pipeline alone for its name)%s%s", "", "");
    }
    if (r >= 0) rates[r] = per * threads / (util_now_s() - t0);
    if (r >= 0) rates[o->repeats + r] = per * threads / (cpu_now() - c0);
  }
  rate_t m = {median(rates, o->repeats), median(rates + o->repeats, o->repeats)};
  free(rates);
  return m;
}

/* The peer, through bench/data_bench_torch.py; -1 when it fails (reason printed). */
static rate_t run_peer(const options_t *o, const data_source_t *src, int workers,
                       const char *listfile) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' bench/data_bench_torch.py '%s' %d %d %d %d %d", o->python,
           listfile, o->image_size, workers, o->batch, o->images, o->repeats);
  (void)src;
  rate_t rate = {-1, -1};
  FILE *p = popen(cmd, "r");
  if (!p) return rate;
  char line[256];
  while (fgets(line, sizeof line, p))
    sscanf(line, "images/sec: %lf cpu_images/sec: %lf", &rate.wall, &rate.cpu);
  int rc = pclose(p);
  if (rc != 0 || rate.wall < 0) {
    fprintf(stderr, "data_bench: the peer failed (exit %d): %s\n", rc, cmd);
    rate.wall = rate.cpu = -1;
  }
  return rate;
}

int main(int argc, char **argv) {
  options_t o = {.image_size = 224, .batch = 32, .images = 256, .repeats = 3, .max_threads = 2,
                 .peer = 1, .stages = 1, .python = "/usr/bin/python3"};
  util_flag_t table[NFLAGS];
  flag_table(&o, table);
  util_flags_spec_t spec = {.prog = "data_bench", .usage = "data_bench --data_dir DIR [flags]",
                            .flags = table, .nflags = NFLAGS};
  char err[4800];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    util_flags_usage(&spec, stdout);
    return 0;
  }
  if (rc != UTIL_FLAGS_OK) die("%s%s", err, "");
  if (!o.data_dir) die("--data_dir DIR is required (scripts/make_image_dataset.py photos DIR)%s%s", "", "");
  if (!data_images_available(err, sizeof err)) die("%s%s", err, "");
  /* The folder when there is one (the peer reads files), else the TFRecords. */
  data_source_t src;
  char folder[4096];
  snprintf(folder, sizeof folder, "%s/train", o.data_dir);
  if (data_source_imagefolder(folder, &src, err, sizeof err) != 0 &&
      data_source_open_split(o.data_dir, 0, &src, err, sizeof err) != 0)
    die("%s%s", err, "");
  /* The peer reads a list of the same files (TFRecords: it needs files; folders only). */
  char listfile[] = "/tmp/data_bench.XXXXXX";
  int peer = o.peer && src.kind != DATA_TFRECORD;
  if (o.peer && !peer) fprintf(stderr, "data_bench: the peer reads files: give a folder for it\n");
  if (peer) {
    int fd = mkstemp(listfile);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) die("cannot write %s%s", listfile, "");
    for (size_t i = 0; i < src.n; i++) fprintf(f, "%s 0\n", src.paths[i]);
    if (fclose(f) != 0) die("cannot write %s%s", listfile, "");
  }
  printf("data_bench: %zu images in %s, RandomResizedCrop(%d) + flip + normalise, batch %d, "
         "median of %d passes of %d images\n", src.n, o.data_dir, o.image_size, o.batch,
         o.repeats, o.images);
  if (o.stages) run_stages(&o, &src);
  printf("%-8s %-7s %12s %12s %14s\n", "threads", "method", "images/sec", "per thread",
         "per CPU second");
  for (int t = 1; t <= o.max_threads; t++) {
    rate_t hvd = run_pipeline(&o, &src, t);
    rate_t dec = run_decode(&o, &src, t);
    rate_t tv = peer ? run_peer(&o, &src, t, listfile) : (rate_t){-1, -1};
    printf("%-8d %-7s %12.1f %12.1f %14.1f\n", t, "hvd", hvd.wall, hvd.wall / t, hvd.cpu);
    if (tv.wall > 0)
      printf("%-8d %-7s %12.1f %12.1f %14.1f\n", t, "torch", tv.wall, tv.wall / t, tv.cpu);
    printf("%-8d %-7s %12.1f %12.1f %14.1f\n", t, "decode", dec.wall, dec.wall / t, dec.cpu);
    char vs[64] = "-";
    if (tv.wall > 0) snprintf(vs, sizeof vs, "%.2fx (per CPU second %.2fx)", hvd.wall / tv.wall, hvd.cpu / tv.cpu);
    printf("%-8d hvd/torch %s; hvd/full-decode %.2fx (per CPU second %.2fx)\n", t, vs,
           hvd.wall / dec.wall, hvd.cpu / dec.cpu);
    fflush(stdout);
  }
  if (peer) remove(listfile);
  data_source_free(&src);
  return 0;
}
