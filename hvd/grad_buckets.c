/* hvd/grad_buckets.c: allreduce of a flat gradient buffer in buckets, started
   while backward still runs (PyTorch DDP's Reducer, Horovod's per-tensor hooks).

   Layout, for count = 10 floats, first bucket 3, bucket 4 (in floats):

       offset  0 1 2 3 4 5 6 7 8 9
       bucket  2 2 2 1 1 1 1 0 0 0      <- backward finishes offset 9 first

   Bucket 0 is small so that communication starts early; the last bucket (the lowest
   offsets, the first layers of the model, finished last by backward) takes the rest.
   The layout depends only on (count, sizes) and the parameter starts below, so every
   rank names the same ranges "grad.bucket.K".

   With the parameters' start offsets (hvd_grad_buckets_set_params) buckets end only at
   parameter boundaries, as PyTorch DDP assigns them: from the end of the buffer a bucket
   takes whole parameters until it holds at least its size. A model whose large layer
   comes late in forward (lenet's, alexnet's, vgg's fully connected layers) then gets that
   layer in a bucket of its own, reduced while backward still runs through the
   convolutions, instead of sharing the last bucket with them, which only starts when
   backward is over.

   FP16 compression (Horovod's Compression.fp16): a bucket is cast into a float16
   staging array when it is submitted, reduced as HVD_FLOAT16, and cast back in wait()
   (an average is a float16 sum divided by the rank count in float32 after the cast).
   Gradients in CUDA device memory are cast on the GPU, with the same rounding as here,
   by the device collective itself (hvd_allreduce_async_fp16): on hvd's stream, after it
   waited for the submission event of the compute stream, into a float16 array in device
   memory, and back before its completion event; the compute stream is never
   synchronised. wait() returns once every bucket's completion event has completed, so
   on return the buffer holds the result as it does for host memory. */
#include "hvd/hvd.h"
#include "hvd/hvd_internal.h"
#include "collectives/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Not under clang (make fuzz): clang 14's __builtin_cpu_supports has no "f16c", and
   collectives/reduce.c makes the same choice. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GB_HAVE_F16C 1
#include <immintrin.h>
#else
#define GB_HAVE_F16C 0
#endif

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)
#define DEFAULT_FIRST_BUCKET_BYTES ((size_t)1 << 20)

typedef struct {
  size_t offset, count;
  hvd_request_t req;     /* non-NULL while in flight */
  double t_submit, t_done;   /* this step; t_done when we saw the completion */
} bucket_t;

struct hvd_grad_buckets {
  float *grads;
  size_t count;
  hvd_compression_t compression;
  hvd_op_t op;
  int overlap;
  uint16_t *half;        /* FP16 staging, count elements, same offsets as grads; in
                            device memory when grads is                           */
  int device;            /* the GPU holding grads, or -1 for host memory         */
  size_t per, first;      /* bucket sizes in floats (bucket 0: first) */
  size_t num;
  bucket_t *buckets;
  size_t next;           /* buckets [0, next) are submitted in this step */
  hvd_status_t error;    /* first failure in this step                   */
  hvd_grad_buckets_stats_t stats;
};

/* Bulk float32 <-> float16 for the compression casts (millions of gradients per step):
   the F16C instructions when the CPU has them (round to nearest even, like
   coll_float_to_half), else coll's scalar conversions. */
#if GB_HAVE_F16C
__attribute__((target("avx,f16c"))) static void to_half_f16c(uint16_t *h, const float *g,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(h + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(g + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) h[i] = coll_float_to_half(g[i]);
}
__attribute__((target("avx,f16c"))) static void from_half_f16c(float *g, const uint16_t *h,
                                                               size_t n, float div) {
  const __m256 d = _mm256_set1_ps(div);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(g + i, _mm256_div_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                              (const __m128i *)(h + i))), d));
  for (; i < n; i++) g[i] = coll_half_to_float(h[i]) / div;
}
#endif

#if GB_HAVE_F16C
static int have_f16c(void) {
  return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}
#endif

static void to_half(uint16_t *h, const float *g, size_t n) {
#if GB_HAVE_F16C
  if (have_f16c()) {
    to_half_f16c(h, g, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) h[i] = coll_float_to_half(g[i]);
}

/* g = h / div (div: the rank count for an average, else 1). */
static void from_half(float *g, const uint16_t *h, size_t n, int div) {
  const float d = div > 0 ? (float)div : 1.0f;
#if GB_HAVE_F16C
  if (have_f16c()) {
    from_half_f16c(g, h, n, d);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) g[i] = coll_half_to_float(h[i]) / d;
}

/* The next boundary below end: the highest start in starts[0..n) (ascending) that lies
   below end, or 0. */
static size_t start_below(const size_t *starts, size_t n, size_t end) {
  size_t lo = 0, hi = n;   /* the first index whose start is >= end, by bisection */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (starts[mid] < end) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 ? starts[lo - 1] : 0;
}

/* Fills b->buckets from the end of the buffer down: fixed sizes (n == 0), or whole
   parameters until a bucket holds at least its size (the parameters start at
   starts[0..n), ascending, all below count). Sizes are counted twice: first the number of
   buckets, then the ranges. 0 when out of memory (b keeps its old layout). */
static int lay_out(hvd_grad_buckets_t *b, const size_t *starts, size_t n) {
  size_t num = 0;
  for (int fill = 0; fill < 2; fill++) {
    size_t end = b->count, k = 0;
    while (end > 0) {
      size_t want = k == 0 ? b->first : b->per;
      /* The rest, if want reaches offset 0; else exactly want (fixed), or down to the
         start of the parameter that holds offset end - want (the bucket then holds at
         least want). */
      size_t off = want >= end ? 0
                   : n == 0    ? end - want
                               : start_below(starts, n, end - want + 1);
      if (fill) {
        b->buckets[k].offset = off;
        b->buckets[k].count = end - off;
      }
      end = off;
      k++;
    }
    if (!fill) {
      num = k;
      bucket_t *nb = num ? calloc(num, sizeof(bucket_t)) : NULL;
      if (num && nb == NULL) return 0;
      free(b->buckets);
      b->buckets = nb;
      b->num = num;
    }
  }
  return 1;
}

hvd_status_t hvd_grad_buckets_create(hvd_grad_buckets_t **out, float *grads, size_t count,
                                     size_t bucket_bytes, size_t first_bucket_bytes,
                                     hvd_compression_t compression, hvd_op_t op) {
  if (out == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_create: out is NULL");
  *out = NULL;
  if (grads == NULL && count > 0)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_grad_buckets_create: grads is NULL with count %zu", count);
  if (compression != HVD_COMPRESSION_NONE && compression != HVD_COMPRESSION_FP16)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_grad_buckets_create: compression %d is neither "
                         "HVD_COMPRESSION_NONE nor HVD_COMPRESSION_FP16", (int)compression);
  if (op != HVD_SUM && op != HVD_AVERAGE && op != HVD_MIN && op != HVD_MAX &&
      op != HVD_PRODUCT)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_create: op %d is not "
                         "an hvd_op_t", (int)op);
  size_t per = (bucket_bytes ? bucket_bytes : DEFAULT_BUCKET_BYTES) / sizeof(float);
  size_t first = (first_bucket_bytes ? first_bucket_bytes : DEFAULT_FIRST_BUCKET_BYTES) /
                 sizeof(float);
  if (per == 0) per = 1;
  if (first == 0) first = 1;

  hvd_grad_buckets_t *b = calloc(1, sizeof(*b));
  if (b == NULL) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_grad_buckets_create: out of memory");
  b->grads = grads;
  b->count = count;
  b->compression = compression;
  b->op = op;
  b->overlap = 1;
  b->error = HVD_OK;
  b->device = -1;
  if (count > 0 && hvd_device_is_device_ptr(grads)) b->device = hvd_device_of_ptr(grads);

  b->per = per;
  b->first = first;
  if (!lay_out(b, NULL, 0)) {
    free(b);
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_grad_buckets_create: out of memory for "
                         "the buckets of %zu floats", count);
  }
  if (compression == HVD_COMPRESSION_FP16 && count > 0 && b->device >= 0) {
    hvd_status_t s =
        hvd_device_buffer_alloc((void **)&b->half, count * sizeof(uint16_t), b->device);
    if (s != HVD_OK) {
      free(b->buckets);
      free(b);
      return s;   /* the last error says why */
    }
  } else if (compression == HVD_COMPRESSION_FP16 && count > 0) {
    b->half = malloc(count * sizeof(uint16_t));
    if (b->half == NULL) {
      free(b->buckets);
      free(b);
      return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_grad_buckets_create: out of memory for "
                           "the %zu-byte float16 staging buffer", count * sizeof(uint16_t));
    }
  }
  *out = b;
  return HVD_OK;
}

void hvd_grad_buckets_free(hvd_grad_buckets_t *b) {
  if (b == NULL) return;
  /* A request still in flight points into our buffers: finish it before freeing. */
  for (size_t k = 0; k < b->num; k++)
    if (b->buckets[k].req != NULL) hvd_wait(b->buckets[k].req);
  if (b->device >= 0) hvd_device_buffer_free(b->half);
  else free(b->half);
  free(b->buckets);
  free(b);
}

void hvd_grad_buckets_set_overlap(hvd_grad_buckets_t *b, int overlap) {
  if (b != NULL) b->overlap = overlap != 0;
}

hvd_status_t hvd_grad_buckets_set_params(hvd_grad_buckets_t *b, const size_t *starts,
                                         size_t n) {
  if (b == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_set_params: b is NULL");
  if (n > 0 && starts == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_grad_buckets_set_params: starts is NULL with n %zu", n);
  if (b->next > 0)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_set_params: %zu "
                         "buckets of this step are submitted; call it between steps",
                         b->next);
  for (size_t i = 0; i < n; i++)
    if (starts[i] >= b->count || (i > 0 && starts[i] <= starts[i - 1]))
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                           "hvd_grad_buckets_set_params: start %zu is %zu: the starts must "
                           "ascend strictly and lie below the %zu gradients", i, starts[i],
                           b->count);
  if (!lay_out(b, starts, n))
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_grad_buckets_set_params: out of memory");
  return HVD_OK;
}

size_t hvd_grad_buckets_num(const hvd_grad_buckets_t *b) { return b ? b->num : 0; }

void hvd_grad_buckets_range(const hvd_grad_buckets_t *b, size_t k, size_t *offset,
                            size_t *count) {
  size_t o = 0, c = 0;
  if (b != NULL && k < b->num) {
    o = b->buckets[k].offset;
    c = b->buckets[k].count;
  }
  if (offset) *offset = o;
  if (count) *count = c;
}

size_t hvd_grad_buckets_num_submitted(const hvd_grad_buckets_t *b) {
  return b ? b->next : 0;
}

static void record_error(hvd_grad_buckets_t *b, hvd_status_t s) {
  if (s != HVD_OK && b->error == HVD_OK) b->error = s;
}

static hvd_status_t submit(hvd_grad_buckets_t *b, size_t k) {
  bucket_t *bk = &b->buckets[k];
  char name[48];
  snprintf(name, sizeof(name), "grad.bucket.%zu", k);
  bk->t_submit = util_now_s();
  hvd_status_t s;
  if (b->compression == HVD_COMPRESSION_FP16) {
    uint16_t *h = b->half + bk->offset;
    float *g = b->grads + bk->offset;
    /* AVERAGE as a float16 SUM, divided after the cast back: one float16 rounding
       fewer, and the division runs vectorised in float32. */
    hvd_op_t op = b->op == HVD_AVERAGE ? HVD_SUM : b->op;
    b->stats.bytes += bk->count * sizeof(uint16_t);
    if (b->device >= 0) {
      /* Both casts run on hvd's stream, inside the collective (hvd/device.c). */
      int div = b->op == HVD_AVERAGE ? hvd_size() : 1;
      s = hvd_allreduce_async_fp16(name, g, h, g, bk->count, op, div > 0 ? (float)div : 1.0f,
                                   &bk->req);
    } else {
      to_half(h, g, bk->count);
      s = hvd_allreduce_async(name, h, h, bk->count, HVD_FLOAT16, op, &bk->req);
    }
  } else {
    float *g = b->grads + bk->offset;
    s = hvd_allreduce_async(name, g, g, bk->count, HVD_FLOAT32, b->op, &bk->req);
    b->stats.bytes += bk->count * sizeof(float);
  }
  if (s != HVD_OK) {
    bk->req = NULL;   /* nothing to wait for */
    bk->t_done = bk->t_submit;
  }
  return s;
}

/* Marks buckets whose request finished; the time is when we noticed. */
static void poll_in_flight(hvd_grad_buckets_t *b) {
  for (size_t k = 0; k < b->next; k++) {
    bucket_t *bk = &b->buckets[k];
    if (bk->req == NULL) continue;
    int done = 0;
    hvd_status_t s = hvd_test(bk->req, &done);
    if (s != HVD_OK) {
      /* hvd_test reports the operation's failure with done set and req freed; without
         done the handle is still ours and wait() will collect it. */
      record_error(b, s);
      if (!done) continue;
    }
    if (done) {
      bk->req = NULL;
      bk->t_done = util_now_s();
    }
  }
}

hvd_status_t hvd_grad_buckets_ready(hvd_grad_buckets_t *b, size_t ready_from) {
  if (b == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_ready: b is NULL");
  if (!b->overlap) return HVD_OK;
  while (b->next < b->num && b->buckets[b->next].offset >= ready_from) {
    hvd_status_t s = submit(b, b->next);
    b->next++;
    if (s != HVD_OK) {
      record_error(b, s);
      return s;
    }
  }
  poll_in_flight(b);
  return b->error;
}

void hvd_grad_buckets_on_ready(void *b, size_t ready_from) {
  hvd_grad_buckets_ready((hvd_grad_buckets_t *)b, ready_from);
}

hvd_status_t hvd_grad_buckets_wait(hvd_grad_buckets_t *b) {
  if (b == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_grad_buckets_wait: b is NULL");
  double t0 = util_now_s();
  poll_in_flight(b);
  /* Submit what is left even after an error: the other ranks may be waiting for these
     names, and the runtime reports a shut-down state on its own. */
  while (b->next < b->num) {
    record_error(b, submit(b, b->next));
    b->next++;
  }
  for (size_t k = 0; k < b->num; k++) {
    bucket_t *bk = &b->buckets[k];
    if (bk->req != NULL) {
      record_error(b, hvd_wait(bk->req));
      bk->req = NULL;
      bk->t_done = util_now_s();
    }
    int div = b->op == HVD_AVERAGE ? hvd_size() : 1;
    /* (device gradients: cast back by the collective before it completed) */
    if (b->compression == HVD_COMPRESSION_FP16 && b->device < 0)
      from_half(b->grads + bk->offset, b->half + bk->offset, bk->count, div);
  }
  double t1 = util_now_s();
  b->stats.blocked_s += t1 - t0;
  b->stats.steps++;
  /* Communication time: the union of the buckets' [submit, done] intervals, which
     start in submission order. The cast back counts as communication. */
  double busy = 0, start = 0, end = 0;
  for (size_t k = 0; k < b->num; k++) {
    bucket_t *bk = &b->buckets[k];
    double done = bk->t_done > bk->t_submit ? bk->t_done : bk->t_submit;
    if (k == 0 || bk->t_submit > end) {
      busy += end - start;
      start = bk->t_submit;
      end = done;
    } else if (done > end) {
      end = done;
    }
  }
  if (b->num > 0) {
    if (b->compression == HVD_COMPRESSION_FP16 && t1 > end) end = t1;
    busy += end - start;
  }
  b->stats.comm_s += busy;

  hvd_status_t s = b->error;
  b->error = HVD_OK;
  b->next = 0;
  return s;
}

void hvd_grad_buckets_stats(const hvd_grad_buckets_t *b, hvd_grad_buckets_stats_t *s) {
  if (s == NULL) return;
  memset(s, 0, sizeof(*s));
  if (b != NULL) *s = b->stats;
}

void hvd_grad_buckets_reset_stats(hvd_grad_buckets_t *b) {
  if (b != NULL) memset(&b->stats, 0, sizeof(b->stats));
}
