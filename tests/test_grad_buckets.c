/* test_grad_buckets: the bucket layout of hvd/grad_buckets.c covers every gradient
   exactly once, and a bucketed allreduce gives the right average with and without
   overlap, with float32 (exact) and with fp16 compression (within float16 tolerance),
   with fixed buckets and with buckets at parameter boundaries; one step of each goes
   through hvd_grad_buckets_on_ready (nn's callback signature).
   Runs alone (size 1); tests/test_grad_buckets_mpi.sh runs it under mpirun -np 2 and 3. */
#include "hvd/hvd.h"
#include "collectives/coll.h"
#include "nn/nn.h"
#include "train/step.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

/* Layout of one (count, bucket, first) case against the rules in hvd.h. */
static void check_layout(size_t count, size_t bucket_bytes, size_t first_bytes) {
  static float dummy[1];
  float *grads = count ? malloc(count * sizeof(float)) : dummy;
  hvd_grad_buckets_t *b = NULL;
  hvd_status_t s = hvd_grad_buckets_create(&b, grads, count, bucket_bytes, first_bytes,
                                           HVD_COMPRESSION_NONE, HVD_AVERAGE);
  CHECK(s == HVD_OK, "create count=%zu: %s", count, hvd_status_string(s));
  if (s != HVD_OK) return;
  size_t per = (bucket_bytes ? bucket_bytes : (25u << 20)) / 4;
  size_t first = (first_bytes ? first_bytes : (1u << 20)) / 4;
  if (per == 0) per = 1;
  if (first == 0) first = 1;
  size_t rest = count > first ? count - first : 0;
  size_t want_num = count == 0 ? 0 : 1 + (rest + per - 1) / per;
  size_t num = hvd_grad_buckets_num(b);
  CHECK(num == want_num, "count=%zu per=%zu first=%zu: %zu buckets, expected %zu", count,
        per, first, num, want_num);

  unsigned char *seen = calloc(count + 1, 1);
  size_t end = count;
  for (size_t k = 0; k < num; k++) {
    size_t off, n;
    hvd_grad_buckets_range(b, k, &off, &n);
    CHECK(n > 0, "count=%zu bucket %zu is empty", count, k);
    CHECK(off + n == end, "count=%zu bucket %zu is [%zu,%zu), expected to end at %zu",
          count, k, off, off + n, end);
    size_t cap = k == 0 ? first : per;
    CHECK(n <= cap, "count=%zu bucket %zu has %zu floats > %zu", count, k, n, cap);
    if (off > 0) CHECK(n == cap, "count=%zu bucket %zu not full (%zu of %zu)", count, k, n, cap);
    for (size_t i = off; i < off + n && i < count; i++) seen[i]++;
    end = off;
  }
  for (size_t i = 0; i < count; i++)
    if (seen[i] != 1) {
      CHECK(0, "count=%zu: element %zu covered %d times", count, i, seen[i]);
      break;
    }
  free(seen);
  hvd_grad_buckets_free(b);
  if (count) free(grads);
}

/* Layout at parameter boundaries (hvd_grad_buckets_set_params) against the rules in
   hvd.h: the buckets tile [0, count) from the end down, each begins at a parameter start
   (or 0), holds at least its size unless it reaches offset 0, and holds no parameter
   more than it needs: without its lowest parameter it would be below its size. */
static void check_param_layout(size_t count, const size_t *starts, size_t n,
                               size_t bucket_bytes, size_t first_bytes) {
  float *grads = malloc((count ? count : 1) * sizeof(float));
  hvd_grad_buckets_t *b = NULL;
  hvd_status_t s = hvd_grad_buckets_create(&b, grads, count, bucket_bytes, first_bytes,
                                           HVD_COMPRESSION_NONE, HVD_AVERAGE);
  CHECK(s == HVD_OK, "create count=%zu: %s", count, hvd_status_string(s));
  if (s == HVD_OK) s = hvd_grad_buckets_set_params(b, starts, n);
  CHECK(s == HVD_OK, "set_params count=%zu n=%zu: %s %s", count, n, hvd_status_string(s),
        hvd_last_error());
  if (s != HVD_OK) {
    hvd_grad_buckets_free(b);
    free(grads);
    return;
  }
  size_t per = bucket_bytes / 4, first = first_bytes / 4;
  size_t end = count, num = hvd_grad_buckets_num(b);
  for (size_t k = 0; k < num; k++) {
    size_t off, len;
    hvd_grad_buckets_range(b, k, &off, &len);
    CHECK(len > 0 && off + len == end, "count=%zu bucket %zu is [%zu,+%zu), expected to end "
          "at %zu", count, k, off, len, end);
    size_t j = 0;   /* the first start above off */
    while (j < n && starts[j] <= off) j++;
    CHECK(off == 0 || (j > 0 && starts[j - 1] == off),
          "count=%zu bucket %zu begins at %zu, inside a parameter", count, k, off);
    size_t cap = k == 0 ? first : per;
    if (off > 0) CHECK(len >= cap, "count=%zu bucket %zu holds %zu < %zu", count, k, len, cap);
    if (j < n && starts[j] < end)
      CHECK(end - starts[j] < cap, "count=%zu bucket %zu [%zu,%zu) would hold %zu >= %zu "
            "without its lowest parameter", count, k, off, end, end - starts[j], cap);
    end = off;
  }
  CHECK(end == 0, "count=%zu: the buckets stop at %zu, not 0", count, end);
  hvd_grad_buckets_free(b);
  free(grads);
}

static void test_param_layouts(void) {
  /* The example: parameters at 0, 8, 10, 100 of 110 floats, first bucket 4 floats, then
     40 -> [100,110) [10,100) [0,10): the large parameter [10,100) has a bucket of its
     own, and the small first ones share the last. */
  const size_t ex[] = {0, 8, 10, 100};
  float g[110];
  hvd_grad_buckets_t *b;
  CHECK(hvd_grad_buckets_create(&b, g, 110, 160, 16, HVD_COMPRESSION_NONE, HVD_SUM) ==
            HVD_OK, "create example");
  CHECK(hvd_grad_buckets_set_params(b, ex, 4) == HVD_OK, "set_params example: %s",
        hvd_last_error());
  const size_t want[][2] = {{100, 10}, {10, 90}, {0, 10}};
  CHECK(hvd_grad_buckets_num(b) == 3, "example: %zu buckets", hvd_grad_buckets_num(b));
  for (size_t k = 0; k < 3 && k < hvd_grad_buckets_num(b); k++) {
    size_t off, n;
    hvd_grad_buckets_range(b, k, &off, &n);
    CHECK(off == want[k][0] && n == want[k][1], "example bucket %zu = [%zu,+%zu), expected "
          "[%zu,+%zu)", k, off, n, want[k][0], want[k][1]);
  }
  /* n 0: the fixed layout again (first 4, then 40: [106,110) [66,106) [26,66) [0,26)). */
  CHECK(hvd_grad_buckets_set_params(b, NULL, 0) == HVD_OK, "set_params(NULL, 0)");
  CHECK(hvd_grad_buckets_num(b) == 4, "fixed again: %zu buckets", hvd_grad_buckets_num(b));
  size_t off0, n0;
  hvd_grad_buckets_range(b, 0, &off0, &n0);
  CHECK(off0 == 106 && n0 == 4, "fixed again: bucket 0 = [%zu,+%zu)", off0, n0);

  /* Bad starts: each refused with the layout kept. */
  const size_t unsorted[] = {0, 10, 8}, dup[] = {0, 8, 8}, beyond[] = {0, 110};
  CHECK(hvd_grad_buckets_set_params(b, unsorted, 3) == HVD_ERR_INVALID_ARGUMENT,
        "descending starts accepted");
  CHECK(strstr(hvd_last_error(), "start 2 is 8") != NULL, "message: \"%s\"", hvd_last_error());
  CHECK(hvd_grad_buckets_set_params(b, dup, 3) == HVD_ERR_INVALID_ARGUMENT,
        "repeated start accepted");
  CHECK(hvd_grad_buckets_set_params(b, beyond, 2) == HVD_ERR_INVALID_ARGUMENT,
        "a start at count accepted");
  CHECK(hvd_grad_buckets_set_params(b, NULL, 2) == HVD_ERR_INVALID_ARGUMENT,
        "NULL starts accepted");
  CHECK(hvd_grad_buckets_set_params(NULL, ex, 4) == HVD_ERR_INVALID_ARGUMENT,
        "NULL b accepted");
  CHECK(hvd_grad_buckets_num(b) == 4, "a refused call changed the layout");
  hvd_grad_buckets_free(b);

  /* Random models: parameter sizes 1..3000 (a few of 20000), bucket sizes from 1 float. */
  uint64_t state = 12345;
  for (int c = 0; c < 100; c++) {
    size_t starts[64], n = 0, count = 0;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    size_t nparams = 1 + (size_t)(state >> 33) % 60;
    for (size_t i = 0; i < nparams; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      size_t len = 1 + (size_t)(state >> 33) % 3000;
      if ((state >> 20) % 10 == 0) len = 20000;
      starts[n++] = count;
      count += len;
    }
    /* The first parameter need not start at 0 (a model's padding could come first). */
    size_t from = n > 1 ? (size_t)c % 2 : 0;
    size_t caps[][2] = {{4, 4}, {4000, 400}, {16000, 4000}, {100000, 40000}, {1u << 30, 4}};
    for (size_t j = 0; j < sizeof caps / sizeof *caps; j++)
      check_param_layout(count, starts + from, n - from, caps[j][0], caps[j][1]);
  }
}

/* What train and cnn_bench do (train_buckets_at_params): lenet's gradients, 6.65 MB, at
   the default sizes (1 MiB first, then 25 MiB) make two buckets that meet where the first
   fully connected layer begins: its 6.4 MB with the layers after it, and the 0.2 MB of
   the convolutions, final last in backward. */
static void test_lenet_buckets(void) {
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = 1, .seed = 1};
  CHECK(nn_model_create(&m, "lenet", &cfg) == NN_OK, "lenet: %s", nn_last_error());
  if (!m) return;
  size_t fc1 = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++)
    if (!strcmp(nn_model_slice(m, i)->name, "fc1.weight")) fc1 = nn_model_slice(m, i)->offset;
  CHECK(fc1 > 0, "lenet has no fc1.weight");
  hvd_grad_buckets_t *b = NULL;
  CHECK(hvd_grad_buckets_create(&b, nn_model_grads(m), nn_model_param_len(m), 0, 0,
                                HVD_COMPRESSION_NONE, HVD_AVERAGE) == HVD_OK, "create");
  char err[256] = "";
  CHECK(b && train_buckets_at_params(b, m, err, sizeof err) == 0, "train_buckets_at_params: %s",
        err);
  size_t off0 = 0, n0 = 0, off1 = 1, n1 = 0;
  hvd_grad_buckets_range(b, 0, &off0, &n0);
  hvd_grad_buckets_range(b, 1, &off1, &n1);
  CHECK(hvd_grad_buckets_num(b) == 2 && off0 == fc1 && off0 + n0 == nn_model_param_len(m) &&
            off1 == 0 && n1 == fc1,
        "lenet: %zu buckets, [%zu,+%zu) [%zu,+%zu); expected [%zu,%zu) [0,%zu)",
        hvd_grad_buckets_num(b), off0, n0, off1, n1, fc1, nn_model_param_len(m), fc1);
  hvd_grad_buckets_free(b);
  nn_model_free(m);
}

static void test_layouts(void) {
  const size_t counts[] = {0, 1, 2, 3, 4, 7, 10, 11, 255, 256, 257, 1000, 1024, 4096,
                           (1u << 18) + 5, (25u << 18) + (1u << 18)};
  const size_t sizes[][2] = {{4, 4},       {16, 12},   {40, 8},  {1024, 1024}, {0, 0},
                             {12, 40},     {1, 1},     {4096, 1024},
                             {1u << 20, 256 << 10}};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
    for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++)
      check_layout(counts[i], sizes[j][0], sizes[j][1]);

  /* The documented example: 10 floats, first 3, then 4 -> [7,10) [3,7) [0,3). */
  float g[10];
  hvd_grad_buckets_t *b;
  CHECK(hvd_grad_buckets_create(&b, g, 10, 16, 12, HVD_COMPRESSION_NONE, HVD_SUM) == HVD_OK,
        "create example");
  size_t off, n;
  CHECK(hvd_grad_buckets_num(b) == 3, "example: %zu buckets", hvd_grad_buckets_num(b));
  hvd_grad_buckets_range(b, 0, &off, &n);
  CHECK(off == 7 && n == 3, "example bucket 0 = [%zu,+%zu)", off, n);
  hvd_grad_buckets_range(b, 1, &off, &n);
  CHECK(off == 3 && n == 4, "example bucket 1 = [%zu,+%zu)", off, n);
  hvd_grad_buckets_range(b, 2, &off, &n);
  CHECK(off == 0 && n == 3, "example bucket 2 = [%zu,+%zu)", off, n);
  hvd_grad_buckets_free(b);

  /* Bad input. */
  CHECK(hvd_grad_buckets_create(&b, NULL, 5, 0, 0, HVD_COMPRESSION_NONE, HVD_SUM) ==
            HVD_ERR_INVALID_ARGUMENT, "NULL grads accepted");
  CHECK(strstr(hvd_last_error(), "grads is NULL with count 5") != NULL,
        "message for NULL grads: \"%s\"", hvd_last_error());
  CHECK(hvd_grad_buckets_create(&b, g, 10, 0, 0, (hvd_compression_t)7, HVD_SUM) ==
            HVD_ERR_INVALID_ARGUMENT, "bad compression accepted");
  CHECK(hvd_grad_buckets_create(&b, g, 10, 0, 0, HVD_COMPRESSION_NONE, (hvd_op_t)42) ==
            HVD_ERR_INVALID_ARGUMENT, "bad op accepted");
  CHECK(hvd_grad_buckets_create(NULL, g, 10, 0, 0, HVD_COMPRESSION_NONE, HVD_SUM) ==
            HVD_ERR_INVALID_ARGUMENT, "NULL out accepted");
}

/* Gradient of rank r at element i in step t: multiples of 1/8 below 250, so float32
   sums and averages by 1, 2, 4 ranks are exact (and every input is a float16 number);
   every 97th is scaled by 1e-4, which float16 cannot hold exactly. */
static float grad_value(int r, size_t i, int t) {
  long v = (long)((i * 7919u + (size_t)r * 104729u + (size_t)t * 31u) % 4001u) - 2000;
  float x = (float)v / 8.0f;
  if (i % 97 == 0) x *= 1e-4f;   /* small values: float16 relative precision matters */
  return x;
}

/* params: buckets at the boundaries of parameters of 1237 floats (and one of 9000). */
static void test_allreduce(hvd_compression_t comp, int overlap, int params) {
  const int size = hvd_size(), rank = hvd_rank();
  const size_t count = 50000;     /* 200 KB: with 16 KiB buckets, 13 buckets */
  float *g = malloc(count * sizeof(float));
  hvd_grad_buckets_t *b;
  hvd_status_t s = hvd_grad_buckets_create(&b, g, count, 16 << 10, 4 << 10, comp,
                                           HVD_AVERAGE);
  CHECK(s == HVD_OK, "create: %s", hvd_status_string(s));
  if (s != HVD_OK) {
    free(g);
    return;
  }
  if (params) {
    size_t starts[64], n = 0;
    for (size_t at = 0; at < count; at += at == 20 * 1237 ? 9000 : 1237) starts[n++] = at;
    s = hvd_grad_buckets_set_params(b, starts, n);
    CHECK(s == HVD_OK, "set_params: %s", hvd_last_error());
  }
  hvd_grad_buckets_set_overlap(b, overlap);
  const size_t num = hvd_grad_buckets_num(b);
  const char *what = comp == HVD_COMPRESSION_FP16 ? "fp16" : "fp32";
  const int steps = 3;
  for (int t = 0; t < steps; t++) {
    for (size_t i = 0; i < count; i++) g[i] = grad_value(rank, i, t);
    /* A backward pass: ready_from falls in slices of 3001 floats from the end, and
       also stops just above and exactly at every bucket boundary. */
    size_t ready = count;
    while (ready > 0) {
      size_t nextr = ready > 3001 ? ready - 3001 : 0;
      for (size_t k = 0; k < num; k++) {
        size_t off;
        hvd_grad_buckets_range(b, k, &off, NULL);
        if (off + 1 < ready && off + 1 > nextr) nextr = off + 1;
        else if (off < ready && off > nextr) nextr = off;
      }
      ready = nextr;
      if (t == 1) {
        /* Step 1 goes through nn's callback signature, as nn_model_backward calls it. */
        nn_grad_ready_fn on_ready = hvd_grad_buckets_on_ready;
        on_ready(b, ready);
        s = HVD_OK;
      } else {
        s = hvd_grad_buckets_ready(b, ready);
      }
      CHECK(s == HVD_OK, "%s ready(%zu): %s %s", what, ready, hvd_status_string(s),
            hvd_last_error());
      size_t want = 0;
      if (overlap)
        while (want < num) {
          size_t off;
          hvd_grad_buckets_range(b, want, &off, NULL);
          if (off < ready) break;
          want++;
        }
      CHECK(hvd_grad_buckets_num_submitted(b) == want,
            "%s overlap=%d ready_from=%zu: %zu buckets submitted, expected %zu", what,
            overlap, ready, hvd_grad_buckets_num_submitted(b), want);
    }
    if (overlap && hvd_grad_buckets_num_submitted(b) > 0) {
      /* Between ready() and wait(): the layout cannot change under buckets in flight. */
      size_t one = 0;
      CHECK(hvd_grad_buckets_set_params(b, &one, 1) == HVD_ERR_INVALID_ARGUMENT,
            "set_params accepted while buckets are in flight");
    }
    s = hvd_grad_buckets_wait(b);
    CHECK(s == HVD_OK, "%s wait: %s %s", what, hvd_status_string(s), hvd_last_error());
    CHECK(hvd_grad_buckets_num_submitted(b) == 0, "wait did not end the step");

    size_t bad = 0, differs = 0;
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
      double sum = 0, amax = 0;
      for (int r = 0; r < size; r++) {
        double v = grad_value(r, i, t);
        sum += v;
        if (fabs(v) > amax) amax = fabs(v);
      }
      const float want = (float)(sum / size);
      if (comp == HVD_COMPRESSION_NONE) {
        /* The multiples of 1/8 are exact; the scaled-down ones carry float32 rounding
           of the sum in some order and of the division. */
        double tol = i % 97 == 0 ? size * ldexp(1.0, -23) * amax : 0.0;
        if (size & (size - 1)) tol += ldexp(1.0, -23) * fabs(want);   /* sum / 3 */
        if (fabs((double)g[i] - want) > tol) bad++;
      } else {
        /* Each input rounded to half (2^-11 relative), the float32 sum rounded to half,
           (the runtime's own average would round once more): at most 3 half-ulps of the
           largest input, plus the smallest subnormal steps. */
        double tol = 3.0 * ldexp(1.0, -11) * amax + 3.0 * ldexp(1.0, -24);
        double err = fabs((double)g[i] - want);
        if (err > worst) worst = err;
        if (err > tol) {
          if (bad < 5)
            fprintf(stderr, "fp16 element %zu: got %.9g want %.9g tol %.3g\n", i, g[i],
                    want, tol);
          bad++;
        }
        /* The sum came back from float16: times the rank count, the average is a
           float16 number (up to the float32 rounding of the division); alone, it is
           exactly the input rounded as coll_float_to_half rounds. */
        float sum16 = g[i] * (float)size;
        if (fabsf(coll_half_to_float(coll_float_to_half(sum16)) - sum16) >
            ldexpf(fabsf(sum16), -21))
          bad++;
        if (size == 1 && g[i] != coll_half_to_float(coll_float_to_half(grad_value(0, i, t))))
          bad++;
        if (g[i] != want) differs++;
      }
    }
    CHECK(bad == 0, "%s overlap=%d params=%d step %d: %zu of %zu elements wrong", what,
          overlap, params, t, bad, count);
    if (comp == HVD_COMPRESSION_FP16)
      CHECK(differs > 0, "fp16: every element equals float32; was it compressed?");
  }
  hvd_grad_buckets_stats_t st;
  hvd_grad_buckets_stats(b, &st);
  const size_t esize = comp == HVD_COMPRESSION_FP16 ? 2 : 4;
  CHECK(st.steps == (uint64_t)steps, "stats: %llu steps", (unsigned long long)st.steps);
  CHECK(st.bytes == (uint64_t)steps * count * esize, "stats: %llu bytes",
        (unsigned long long)st.bytes);
  CHECK(st.comm_s > 0 && st.blocked_s > 0, "stats: comm %g s blocked %g s", st.comm_s,
        st.blocked_s);
  if (!overlap)
    CHECK(st.comm_s <= st.blocked_s + 1e-9,
          "no overlap: communication %g s should all be blocked (%g s)", st.comm_s,
          st.blocked_s);
  hvd_grad_buckets_reset_stats(b);
  hvd_grad_buckets_stats(b, &st);
  CHECK(st.steps == 0 && st.comm_s == 0, "reset_stats");
  hvd_grad_buckets_free(b);
  free(g);
}

int main(void) {
  hvd_status_t s = hvd_init();
  if (s != HVD_OK) {
    fprintf(stderr, "hvd_init: %s %s\n", hvd_status_string(s), hvd_last_error());
    return 1;
  }
  /* The layouts are each process's own arithmetic: checked once, in the run alone
     (tests/test_grad_buckets_mpi.sh runs only the allreduces at np 2 and 3). */
  if (hvd_size() == 1) {
    test_layouts();
    test_param_layouts();
    test_lenet_buckets();
  }
  for (int comp = 0; comp < 2; comp++)
    for (int overlap = 1; overlap >= 0; overlap--)
      for (int params = 0; params <= overlap; params++)   /* parameter layout: with overlap */
        test_allreduce((hvd_compression_t)comp, overlap, params);
  int rank = hvd_rank(), size = hvd_size();
  hvd_shutdown();
  if (failures) {
    fprintf(stderr, "rank %d of %d: %d failures\n", rank, size, failures);
    return 1;
  }
  printf("rank %d of %d: grad buckets OK\n", rank, size);
  return 0;
}
