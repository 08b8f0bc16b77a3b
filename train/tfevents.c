/* train/tfevents.c: TensorBoard event files, TFRecord + protobuf by hand.

   Protobuf wire format used here (field number << 3 | wire type):
     Event   { double wall_time = 1;  (0x09, 8 bytes LE)
               int64  step      = 2;  (0x10, varint)
               string file_version = 3; (0x1a, length-delimited)
               Summary summary  = 5;  (0x2a, length-delimited) }
     Summary { repeated Value value = 1; (0x0a) }
     Value   { string tag = 1; (0x0a)   float simple_value = 2; (0x15, 4 bytes LE)
               HistogramProto histo = 5; (0x2a, length-delimited) }
     HistogramProto { double min = 1; (0x09)  double max = 2; (0x11)  double num = 3; (0x19)
                      double sum = 4; (0x21)  double sum_squares = 5; (0x29)
                      repeated double bucket_limit = 6 [packed]; (0x32)
                      repeated double bucket = 7 [packed]; (0x3a) }
   A HistogramProto without plugin metadata is what TensorBoard's histogram and
   distribution dashboards read from TF1-style summaries (tensorboard's data_compat turns
   bucket i into [bucket_limit[i-1] (min for i = 0), bucket_limit[i] (max for the last)]). */
#include "train/tfevents.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint32_t crc32c_table[256];
static int crc32c_ready;

static void crc32c_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc32c_table[i] = c;
  }
  crc32c_ready = 1;
}

uint32_t train_crc32c(const void *data, size_t len) {
  if (!crc32c_ready) crc32c_init();
  const unsigned char *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < len; i++) c = crc32c_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t train_crc32c_masked(const void *data, size_t len) {
  uint32_t c = train_crc32c(data, len);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

int train_mkdirs(const char *dir) {
  char buf[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == '\0') {
      char saved = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      buf[i] = saved;
    }
  }
  struct stat st;
  if (stat(dir, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* ---- protobuf encoding into a small buffer ---- */
typedef struct {
  unsigned char b[2048];  /* the largest record: a histogram of TRAIN_TB_BUCKETS buckets */
  size_t n;
} pbuf_t;

static void put_byte(pbuf_t *p, unsigned char c) {
  if (p->n < sizeof p->b) p->b[p->n] = c;
  p->n++;
}
static void put_varint(pbuf_t *p, uint64_t v) {
  while (v >= 0x80) {
    put_byte(p, (unsigned char)(v | 0x80));
    v >>= 7;
  }
  put_byte(p, (unsigned char)v);
}
static void put_bytes(pbuf_t *p, const void *d, size_t len) {
  for (size_t i = 0; i < len; i++) put_byte(p, ((const unsigned char *)d)[i]);
}
static void put_le(pbuf_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) put_byte(p, (unsigned char)(v >> (8 * i)));
}
static void put_double(pbuf_t *p, double d) {
  uint64_t bits;
  memcpy(&bits, &d, 8);
  put_le(p, bits, 8);
}
/* A length-delimited field holding the message m. */
static void put_message(pbuf_t *p, unsigned char key, const pbuf_t *m) {
  put_byte(p, key);
  put_varint(p, m->n);
  put_bytes(p, m->b, m->n);
}

double train_wall_time(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (double)time(NULL);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_record(train_tfevents_t *w, const pbuf_t *ev) {
  if (ev->n > sizeof ev->b) {
    errno = EOVERFLOW;
    return -1;
  }
  unsigned char hdr[12];
  uint64_t len = ev->n;
  for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)(len >> (8 * i));
  uint32_t c = train_crc32c_masked(hdr, 8);
  for (int i = 0; i < 4; i++) hdr[8 + i] = (unsigned char)(c >> (8 * i));
  unsigned char tail[4];
  c = train_crc32c_masked(ev->b, ev->n);
  for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(c >> (8 * i));
  if (fwrite(hdr, 1, 12, w->f) != 12 || fwrite(ev->b, 1, ev->n, w->f) != ev->n ||
      fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f) != 0)
    return -1;
  return 0;
}

static void event_head(pbuf_t *p, double wall_time, int64_t step) {
  put_byte(p, 0x09);
  put_double(p, wall_time);
  put_byte(p, 0x10);
  put_varint(p, (uint64_t)step);
}

int train_tfevents_open(train_tfevents_t *w, const char *dir, char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  if (train_mkdirs(dir) != 0) {
    snprintf(err, errlen, "--logdir %s: cannot create directory (%s)", dir, strerror(errno));
    return -1;
  }
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
           (long long)ts.tv_sec, host, (int)getpid());
  w->f = fopen(w->path, "wb");
  if (!w->f) {
    snprintf(err, errlen, "%s: cannot create (%s)", w->path, strerror(errno));
    return -1;
  }
  pbuf_t p = {.n = 0};
  event_head(&p, ts.tv_sec + ts.tv_nsec * 1e-9, 0);
  static const char version[] = "brain.Event:2";
  put_byte(&p, 0x1a);
  put_varint(&p, sizeof version - 1);
  put_bytes(&p, version, sizeof version - 1);
  if (write_record(w, &p) != 0) {
    snprintf(err, errlen, "%s: write failed (%s)", w->path, strerror(errno));
    fclose(w->f);
    w->f = NULL;
    return -1;
  }
  return 0;
}

/* One Event of one Summary value (a tag and its encoded value fields) at step. */
static int write_value(train_tfevents_t *w, const pbuf_t *val, int64_t step, double wall_time) {
  pbuf_t sum = {.n = 0};
  put_message(&sum, 0x0a, val);
  pbuf_t ev = {.n = 0};
  event_head(&ev, wall_time, step);
  put_message(&ev, 0x2a, &sum);
  return write_record(w, &ev);
}

static int check_tag(const train_tfevents_t *w, const char *tag) {
  if (!w->f || strlen(tag) > 200) {
    errno = w->f ? EINVAL : EBADF;
    return -1;
  }
  return 0;
}

int train_tfevents_scalar(train_tfevents_t *w, const char *tag, float value, int64_t step,
                          double wall_time) {
  if (check_tag(w, tag) != 0) return -1;
  size_t tl = strlen(tag);
  pbuf_t val = {.n = 0};
  put_byte(&val, 0x0a);
  put_varint(&val, tl);
  put_bytes(&val, tag, tl);
  uint32_t fbits;
  memcpy(&fbits, &value, 4);
  put_byte(&val, 0x15);
  put_le(&val, fbits, 4);
  return write_value(w, &val, step, wall_time);
}

int train_tfevents_histogram(train_tfevents_t *w, const char *tag, const float *values,
                             size_t n, int64_t step, double wall_time) {
  if (check_tag(w, tag) != 0) return -1;
  /* Statistics of the finite values (a NaN weight would make min and max meaningless;
     num tells how many were counted). */
  double lo = INFINITY, hi = -INFINITY, num = 0, sum = 0, sum_sq = 0;
  for (size_t i = 0; i < n; i++) {
    double v = values[i];
    if (!isfinite(v)) continue;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    num += 1;
    sum += v;
    sum_sq += v * v;
  }
  if (num == 0) lo = hi = 0;
  /* Equal-width buckets over [min, max], as tf.summary.histogram's default (30); one
     bucket when every value is the same. */
  int k = hi > lo ? TRAIN_TB_BUCKETS : 1;
  double width = (hi - lo) / k, count[TRAIN_TB_BUCKETS] = {0};
  for (size_t i = 0; i < n && k > 1; i++) {
    double v = values[i];
    if (!isfinite(v)) continue;
    int b = (int)((v - lo) / width);
    count[b < 0 ? 0 : b >= k ? k - 1 : b] += 1;
  }
  if (k == 1) count[0] = num;
  pbuf_t h = {.n = 0};
  const double head[5] = {lo, hi, num, sum, sum_sq};
  for (int f = 0; f < 5; f++) {
    put_byte(&h, (unsigned char)((f + 1) << 3 | 1));
    put_double(&h, head[f]);
  }
  put_byte(&h, 0x32);
  put_varint(&h, (uint64_t)k * 8);
  for (int b = 0; b < k; b++) put_double(&h, b == k - 1 ? hi : lo + width * (b + 1));
  put_byte(&h, 0x3a);
  put_varint(&h, (uint64_t)k * 8);
  for (int b = 0; b < k; b++) put_double(&h, count[b]);
  size_t tl = strlen(tag);
  pbuf_t val = {.n = 0};
  put_byte(&val, 0x0a);
  put_varint(&val, tl);
  put_bytes(&val, tag, tl);
  put_message(&val, 0x2a, &h);
  return write_value(w, &val, step, wall_time);
}

int train_tfevents_close(train_tfevents_t *w) {
  if (!w->f) return 0;
  int bad = ferror(w->f);
  int rc = fclose(w->f);
  w->f = NULL;
  if (bad && rc == 0) errno = EIO;
  return bad || rc != 0 ? -1 : 0;
}
