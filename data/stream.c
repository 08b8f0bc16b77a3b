/* data/stream.c: batches without end for a benchmark or a training loop that counts
   steps, not epochs: epoch after epoch of the pipeline, each batch filled to the full
   batch size (a short last batch of an epoch, or one with skipped images, is topped up
   from the next one). */
#include "data/data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct data_stream {
  const data_source_t *src;
  data_pipeline_opts_t o;
  data_pipeline_t *p;
  int epoch;
  data_batch_t cur;    /* the batch being taken from, from position `used` */
  int used;
  size_t per;
  double wait_s;
  uint64_t skipped;
};

data_stream_t *data_stream_open(const data_source_t *src, const data_pipeline_opts_t *o,
                                char *err, size_t errlen) {
  data_stream_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  s->src = src;
  s->o = *o;
  s->per = (size_t)o->channels * o->image_size * o->image_size;
  if (!(s->p = data_pipeline_start(src, o, 0, 0, err, errlen))) {
    free(s);
    return NULL;
  }
  return s;
}

static void count_epoch(data_stream_t *s) {
  s->wait_s += data_pipeline_wait_seconds(s->p);
  s->skipped += data_pipeline_skipped(s->p);
}

int data_stream_next(data_stream_t *s, float *x, int32_t *y, char *err, size_t errlen) {
  int n = 0, empty_epochs = 0;
  while (n < s->o.batch) {
    if (s->used < s->cur.count) {
      int take = s->cur.count - s->used < s->o.batch - n ? s->cur.count - s->used : s->o.batch - n;
      memcpy(x + s->per * n, s->cur.x + s->per * s->used, sizeof(float) * s->per * take);
      memcpy(y + n, s->cur.y + s->used, sizeof(int32_t) * take);
      n += take;
      s->used += take;
      continue;
    }
    int rc = data_pipeline_next(s->p, &s->cur, err, errlen);
    s->used = 0;
    if (rc < 0) return -1;
    if (rc == 1) {
      if (s->cur.count > 0) empty_epochs = 0;
      continue;
    }
    s->cur.count = 0;
    count_epoch(s);
    if (++empty_epochs > 2) {   /* two epochs in a row gave nothing: every image is bad */
      snprintf(err, errlen, "no image could be read (all %zu were bad)", s->src->n);
      return -1;
    }
    /* The next epoch in the same pipeline: its batch buffers are reused. */
    if (data_pipeline_restart(s->p, ++s->epoch, 0, err, errlen) != 0) return -1;
  }
  return 0;
}

double data_stream_wait_seconds(const data_stream_t *s) {
  return s->wait_s + data_pipeline_wait_seconds(s->p);
}

uint64_t data_stream_skipped(const data_stream_t *s) {
  return s->skipped + data_pipeline_skipped(s->p);
}

void data_stream_close(data_stream_t *s) {
  if (!s) return;
  data_pipeline_stop(s->p);
  free(s);
}

int data_source_open_split(const char *dir, int validation, data_source_t *s, char *err,
                           size_t errlen) {
  const char *prefix = validation ? "validation-" : "train-";
  DIR *d = opendir(dir);
  int have_records = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) have_records = 1;
    closedir(d);
  }
  if (have_records) return data_source_tfrecord(dir, prefix, s, err, errlen);
  char sub[4096];
  snprintf(sub, sizeof sub, "%s/%s", dir, validation ? "val" : "train");
  struct stat st;
  if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: neither TFRecords %s* nor a folder %s/ (ImageNet's layouts, "
             "docs/data.md)", dir, prefix, sub);
    return -1;
  }
  return data_source_imagefolder(sub, s, err, errlen);
}
