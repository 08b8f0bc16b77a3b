/* data/pipeline.c: decode threads filling a bounded ring of batches.

   Work is one sample: job j of the epoch is position j % batch of this rank's step
   j / batch (positions past a short last step are no work). A thread takes the next job
   only while its step is within `prefetch` steps of the one the consumer holds, so at
   most prefetch batches exist, whatever the data set's size. Each job writes its own
   place in its step's slot; the consumer waits until every job of the next step is
   done. What a sample becomes depends only on (seed, epoch, sample index), never on
   which thread decoded it or when: the same seed gives the same batches for any number
   of threads.

     jobs:  step s   | step s+1 | ... | step s+prefetch-1 |  (waiting)
     slots: s % K      (s+1) % K         ...                  K = prefetch */
#include "data/data.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  float *x;
  int32_t *y;
  uint8_t *bad;       /* per position: 1 when the image was skipped */
  int done, need;
  int err_pos;        /* smallest failed position (-1: none) */
  char err[4800];
} slot_t;

struct data_pipeline {
  const data_source_t *src;
  data_pipeline_opts_t o;
  int epoch, steps, first_step;
  uint32_t *perm;
  size_t per;                 /* floats per sample */
  slot_t *slots;
  pthread_mutex_t mu;
  pthread_cond_t work, ready;
  int64_t next_job, end_job;
  int held;                   /* the step the consumer holds or waits for */
  int holding;                /* 1: the consumer has step held's batch */
  int stop;
  uint64_t skipped;
  double wait_s;
  pthread_t *threads;
  int nthreads;
};

void data_pipeline_defaults(data_pipeline_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->image_size = 224;
  o->channels = 3;
  for (int c = 0; c < 3; c++) {   /* ImageNet's, as torchvision's examples */
    o->mean[c] = (const float[]){0.485f, 0.456f, 0.406f}[c];
    o->std[c] = (const float[]){0.229f, 0.224f, 0.225f}[c];
  }
  o->threads = 1;
  o->prefetch = 2;
  o->shuffle = 1;
  o->batch = 32;
  o->size = 1;
}

void data_epoch_permutation(uint32_t *perm, size_t n, uint64_t seed, int epoch) {
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  /* train/data.c's train_epoch_permutation, draw for draw: the same order as train's
     in-memory data sets. */
  uint64_t base = data_mix64(seed ^ data_mix64(0x5eed0000ull + (uint64_t)epoch));
  for (size_t i = n - 1; n > 0 && i > 0; i--) {
    uint64_t r = data_mix64(base + (uint64_t)i);
    size_t j = (size_t)(r % (uint64_t)(i + 1));
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

int data_steps_per_epoch(size_t n, int size, int batch) {
  uint64_t g = (uint64_t)batch * size;
  return (int)((n + g - 1) / g);
}

int data_step_slice(size_t n, int rank, int size, int batch, int step, size_t *offset) {
  uint64_t g = (uint64_t)batch * size, start = (uint64_t)step * g;
  uint64_t total = start >= n ? 0 : (n - start < g ? n - start : g), b, e;
  if (total == g) {
    b = (uint64_t)rank * batch;
    e = b + batch;
  } else {   /* the last, shorter global batch: an even share each */
    b = total * rank / size;
    e = total * (rank + 1) / size;
  }
  if (offset) *offset = (size_t)(start + b);
  return (int)(e - b);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* torchvision's defaults where the options leave 0. */
static void resolve_defaults(data_pipeline_opts_t *o) {
  if (o->scale_max <= 0) o->scale_min = 0.08, o->scale_max = 1.0;
  if (o->ratio_max <= 0) o->ratio_min = 3.0 / 4, o->ratio_max = 4.0 / 3;
  if (o->resize <= 0) o->resize = (int)(o->image_size * 256.0 / 224.0 + 0.5);
}

/* Decodes and transforms sample `idx` into out; label into *y. */
static int make_sample(const data_source_t *src, const data_pipeline_opts_t *o, int epoch,
                       size_t idx, data_read_buf_t *rb, data_pixels_t *px, float *out,
                       int32_t *y, char *err, size_t errlen) {
  const uint8_t *bytes;
  size_t len;
  if (data_source_read(src, idx, rb, &bytes, &len, y, err, errlen) != 0) return -1;
  char why[400], what[4200];
  data_image_info_t info;
  data_box_t box;
  int flip = 0, S = o->image_size;
  if (data_image_info(bytes, len, &info, why, sizeof why) != 0) goto bad;
  if (o->augment) {
    data_rng_t rng;
    data_rng_init(&rng, o->seed, ((uint64_t)epoch << 40) ^ idx);
    box = data_random_resized_crop(info.width, info.height, o->scale_min, o->scale_max,
                                   o->ratio_min, o->ratio_max, &rng);
    flip = data_rng_uniform(&rng) < 0.5;
  } else {
    box = data_center_crop_box(info.width, info.height, o->resize, S);
  }
  /* Only the part of the JPEG the resample reads, at the smallest DCT scale that leaves
     the box at least S x S pixels (as PIL's draft); full_decode: the whole image. */
  int rc = o->full_decode
               ? data_image_decode(bytes, len, o->channels, info.width, info.height, px, why,
                                   sizeof why)
               : data_image_decode_box(bytes, len, o->channels, box.x, box.y, box.w, box.h, S,
                                       S, px, why, sizeof why);
  if (rc != 0) goto bad;
  double fx = (double)px->full_width / info.width, fy = (double)px->full_height / info.height;
  data_box_t sb = {box.x * fx - px->x0, box.y * fy - px->y0, box.w * fx, box.h * fy};
  if (data_resample(px, sb, S, S, flip, o->mean, o->std, o->nhwc, out) != 0) {
    snprintf(why, sizeof why, "out of memory resampling");
    goto bad;
  }
  return 0;
bad:
  data_source_name(src, idx, what, sizeof what);
  snprintf(err, errlen, "%s: %s", what, why);
  return -1;
}

int data_sample(const data_source_t *src, const data_pipeline_opts_t *opts, int epoch, size_t idx,
                data_read_buf_t *rb, data_pixels_t *px, float *out, int32_t *y, char *err,
                size_t errlen) {
  data_pipeline_opts_t o = *opts;
  resolve_defaults(&o);
  if (idx >= src->n) {
    snprintf(err, errlen, "sample %zu of %zu", idx, src->n);
    return -1;
  }
  return make_sample(src, &o, epoch, idx, rb, px, out, y, err, errlen);
}

static void *worker(void *arg) {
  data_pipeline_t *p = arg;
  data_read_buf_t rb = {0};
  data_pixels_t px = {0};
  char err[4800];
  const int K = p->o.prefetch, B = p->o.batch;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next_job < p->end_job &&
           p->first_step + p->next_job / B >= p->held + K)
      pthread_cond_wait(&p->work, &p->mu);
    if (p->stop || p->next_job >= p->end_job) break;
    int64_t j = p->next_job++;
    int step = p->first_step + (int)(j / B), pos = (int)(j % B);
    slot_t *s = &p->slots[step % K];
    if (pos >= s->need) continue;   /* past a short last step */
    pthread_mutex_unlock(&p->mu);
    size_t off;
    data_step_slice(p->src->n, p->o.rank, p->o.size, B, step, &off);
    size_t idx = p->perm[off + pos];
    int rc = make_sample(p->src, &p->o, p->epoch, idx, &rb, &px, s->x + p->per * pos, &s->y[pos],
                         err, sizeof err);
    pthread_mutex_lock(&p->mu);
    if (rc != 0) {
      s->bad[pos] = 1;
      if (s->err_pos < 0 || pos < s->err_pos) {
        s->err_pos = pos;
        snprintf(s->err, sizeof s->err, "%s", err);
      }
    }
    if (++s->done == s->need) pthread_cond_broadcast(&p->ready);
  }
  pthread_mutex_unlock(&p->mu);
  data_read_buf_free(&rb);
  data_pixels_free(&px);
  return NULL;
}

/* Prepares the slot of step (its counts), under the lock. */
static void slot_reset(data_pipeline_t *p, int step) {
  slot_t *s = &p->slots[step % p->o.prefetch];
  s->done = 0;
  s->need = step < p->steps ? data_step_slice(p->src->n, p->o.rank, p->o.size, p->o.batch,
                                              step, NULL) : 0;
  s->err_pos = -1;
  memset(s->bad, 0, (size_t)p->o.batch);
}

static int check_opts(const data_source_t *src, const data_pipeline_opts_t *o, char *err,
                      size_t errlen) {
  if (o->image_size < 1 || o->image_size > 4096 || (o->channels != 1 && o->channels != 3) ||
      o->threads < 1 || o->threads > 256 || o->prefetch < 1 || o->prefetch > 1024 ||
      o->batch < 1 || o->size < 1 || o->rank < 0 || o->rank >= o->size || src->n == 0 ||
      src->n > UINT32_MAX) {
    snprintf(err, errlen, "pipeline options out of range: image size %d (1..4096), channels "
             "%d (1 or 3), threads %d (1..256), prefetch %d (1..1024), batch %d, rank %d of "
             "%d, %zu samples", o->image_size, o->channels, o->threads, o->prefetch, o->batch,
             o->rank, o->size, src->n);
    return -1;
  }
  return 0;
}

/* Sets p up for epoch `epoch` from step first_step: the order, the job counters, the
   slots' counts. The threads are not running. */
static void begin_epoch(data_pipeline_t *p, int epoch, int first_step) {
  data_pipeline_opts_t *o = &p->o;
  p->epoch = epoch;
  p->first_step = first_step < 0 ? 0 : first_step > p->steps ? p->steps : first_step;
  p->held = p->first_step;
  p->holding = 0;
  p->stop = 0;
  p->skipped = 0;
  p->wait_s = 0;
  p->next_job = 0;
  p->end_job = (int64_t)(p->steps - p->first_step) * o->batch;
  if (o->shuffle) data_epoch_permutation(p->perm, p->src->n, o->seed, epoch);
  else for (size_t i = 0; i < p->src->n; i++) p->perm[i] = (uint32_t)i;
  for (int s = p->first_step; s < p->first_step + o->prefetch; s++) slot_reset(p, s);
}

/* 0, or -1 with err when a thread cannot start (those started are stopped). */
static int start_threads(data_pipeline_t *p, char *err, size_t errlen) {
  for (int t = 0; t < p->o.threads; t++) {
    if (pthread_create(&p->threads[t], NULL, worker, p) != 0) {
      snprintf(err, errlen, "cannot start decode thread %d of %d", t + 1, p->o.threads);
      p->nthreads = t;
      return -1;
    }
  }
  p->nthreads = p->o.threads;
  return 0;
}

static void join_threads(data_pipeline_t *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int t = 0; t < p->nthreads; t++) pthread_join(p->threads[t], NULL);
  p->nthreads = 0;
}

data_pipeline_t *data_pipeline_start(const data_source_t *src, const data_pipeline_opts_t *opts,
                                     int epoch, int first_step, char *err, size_t errlen) {
  if (check_opts(src, opts, err, errlen) != 0) return NULL;
  data_pipeline_t *p = calloc(1, sizeof *p);
  if (!p) goto oom;
  p->src = src;
  p->o = *opts;
  data_pipeline_opts_t *o = &p->o;
  resolve_defaults(o);
  p->steps = data_steps_per_epoch(src->n, o->size, o->batch);
  p->per = (size_t)o->channels * o->image_size * o->image_size;
  p->perm = malloc(sizeof *p->perm * src->n);
  p->slots = calloc((size_t)o->prefetch, sizeof *p->slots);
  p->threads = calloc((size_t)o->threads, sizeof *p->threads);
  if (!p->perm || !p->slots || !p->threads) goto oom;
  for (int k = 0; k < o->prefetch; k++) {
    slot_t *s = &p->slots[k];
    s->x = malloc(sizeof(float) * p->per * o->batch);
    s->y = malloc(sizeof(int32_t) * o->batch);
    s->bad = malloc((size_t)o->batch);
    if (!s->x || !s->y || !s->bad) goto oom;
  }
  begin_epoch(p, epoch, first_step);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->ready, NULL);
  if (start_threads(p, err, errlen) != 0) {
    data_pipeline_stop(p);
    return NULL;
  }
  return p;
oom:
  snprintf(err, errlen, "out of memory starting the input pipeline (%d batches of %d)",
           opts->prefetch, opts->batch);
  if (p) {
    for (int k = 0; p->slots && k < opts->prefetch; k++) {
      free(p->slots[k].x);
      free(p->slots[k].y);
      free(p->slots[k].bad);
    }
    free(p->slots);
    free(p->perm);
    free(p->threads);
    free(p);
  }
  return NULL;
}

int data_pipeline_restart(data_pipeline_t *p, int epoch, int first_step, char *err,
                          size_t errlen) {
  join_threads(p);
  begin_epoch(p, epoch, first_step);
  if (start_threads(p, err, errlen) != 0) {
    join_threads(p);
    p->end_job = 0;   /* a pass with nothing left: next says the epoch is over */
    p->held = p->steps;
    return -1;
  }
  return 0;
}

int data_pipeline_next(data_pipeline_t *p, data_batch_t *out, char *err, size_t errlen) {
  pthread_mutex_lock(&p->mu);
  if (p->holding) {   /* the batch handed out last time is free again */
    p->holding = 0;
    p->held++;
    slot_reset(p, p->held + p->o.prefetch - 1);
    pthread_cond_broadcast(&p->work);
  }
  if (p->held >= p->steps) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  slot_t *s = &p->slots[p->held % p->o.prefetch];
  double t0 = now_s();
  while (s->done < s->need) pthread_cond_wait(&p->ready, &p->mu);
  p->wait_s += now_s() - t0;
  int rc = 1;
  if (s->err_pos >= 0 && !p->o.skip_bad) {
    snprintf(err, errlen, "%s", s->err);
    rc = -1;
  } else {
    /* Skipped images leave the batch: the good ones move up, in order. */
    int n = 0;
    for (int i = 0; i < s->need; i++) {
      if (s->bad[i]) {
        p->skipped++;
        continue;
      }
      if (n != i) {
        memcpy(s->x + p->per * n, s->x + p->per * i, sizeof(float) * p->per);
        s->y[n] = s->y[i];
      }
      n++;
    }
    out->count = n;
    out->step = p->held;
    out->x = s->x;
    out->y = s->y;
    p->holding = 1;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int data_pipeline_steps(const data_pipeline_t *p) { return p->steps; }

uint64_t data_pipeline_skipped(const data_pipeline_t *p) { return p->skipped; }

double data_pipeline_wait_seconds(const data_pipeline_t *p) { return p->wait_s; }

void data_pipeline_stop(data_pipeline_t *p) {
  if (!p) return;
  join_threads(p);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->ready);
  for (int k = 0; k < p->o.prefetch; k++) {
    free(p->slots[k].x);
    free(p->slots[k].y);
    free(p->slots[k].bad);
  }
  free(p->slots);
  free(p->perm);
  free(p->threads);
  free(p);
}

int data_images_available(char *err, size_t errlen) {
#if defined(HVD_NO_IMAGES)
  snprintf(err, errlen, "image input: this build has no libjpeg-turbo or libpng (built with "
           "IMAGES=none); rebuild with them (scripts/install-deps.sh)");
  return 0;
#else
  (void)err, (void)errlen;
  return 1;
#endif
}
