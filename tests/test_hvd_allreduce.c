/* test_hvd_allreduce: hvd_allreduce through the whole runtime on 1-4 ranks, exact
   results. Lengths 0, 1, N-1, N, N+1, non-divisible, larger than the fusion threshold
   (set to 64 KiB here so that is cheap); every dtype and op; in place and out of place;
   async with waits in reverse order (these get fused); ranks submitting in different
   orders; unnamed calls; several user threads submitting at once; hvd_test polling.
   Every user buffer has guard bytes on both sides (tests/guard.h), checked after each
   allreduce: the runtime must not write one element before or past a buffer. */
#include "hvd_test.h"
#include "collectives/coll.h"
#include "guard.h"

#include <pthread.h>
#include <stdint.h>

#define FUSION_THRESHOLD (64 * 1024)

static int R, N;

/* Small integers, so every dtype holds sums and products of 4 ranks exactly. */
static int value(int rank, size_t i, int salt) {
  return (int)((i * 7 + (size_t)rank * 3 + (size_t)salt) % 3) + 1;
}


/* The exact expected value of result element i. */
static double expected(size_t i, hvd_dtype_t dt, hvd_op_t op, int salt) {
  long long sum = 0, prod = 1, mn = 1000, mx = -1000;
  for (int r = 0; r < N; r++) {
    int v = value(r, i, salt);
    sum += v;
    prod *= v;
    if (v < mn) mn = v;
    if (v > mx) mx = v;
  }
  switch (op) {
    case HVD_SUM: return (double)sum;
    case HVD_PRODUCT: return (double)prod;
    case HVD_MIN: return (double)mn;
    case HVD_MAX: return (double)mx;
    case HVD_AVERAGE:
      if (dt == HVD_FLOAT64) return (double)sum / N;
      if (dt == HVD_FLOAT32 || dt == HVD_FLOAT16 || dt == HVD_BFLOAT16)
        return (double)((float)sum / (float)N);
      return (double)(sum / N);   /* C integer division */
  }
  return 0;
}

/* Fails the job when a write went outside p (a guard_alloc buffer). */
static void check_guards(const void *p, size_t n, const char *what) {
  size_t before, after;
  CHECK(guard_damage2(p, &before, &after) == 0,
        "%s (n=%zu): %zu guard bytes before the buffer and %zu after it overwritten", what, n,
        before, after);
}

static void fill(void *buf, size_t n, hvd_dtype_t dt, int salt) {
  for (size_t i = 0; i < n; i++) coll_element_set(buf, i, (coll_dtype_t)dt, value(R, i, salt));
}

static void verify(const void *got, size_t n, hvd_dtype_t dt, hvd_op_t op, int salt,
                   const char *what) {
  size_t es = hvd_dtype_size(dt), wrong = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char want[8];
    coll_element_set(want, 0, (coll_dtype_t)dt, expected(i, dt, op, salt));
    if (memcmp(want, (const char *)got + i * es, es) != 0 && wrong++ == 0) first = i;
  }
  CHECK(wrong == 0, "%s: %zu of %zu elements wrong (first at %zu, expected %g)", what,
        wrong, n, first, expected(first, dt, op, salt));
}

static void one(const char *name, size_t n, hvd_dtype_t dt, hvd_op_t op, int in_place,
                int salt) {
  size_t es = hvd_dtype_size(dt);
  char *send = guard_alloc(n * es), *recv = guard_alloc(n * es);
  CHECK(send && recv, "malloc");
  fill(send, n, dt, salt);
  if (in_place) memcpy(recv, send, n * es);
  else memset(recv, 0x5a, n * es);
  CHECK_OK(hvd_allreduce(name, in_place ? recv : send, recv, n, dt, op));
  char what[300];
  snprintf(what, sizeof(what), "allreduce %s n=%zu dtype=%d op=%d %s", name ? name : "(null)",
           n, dt, op, in_place ? "in place" : "out of place");
  verify(recv, n, dt, op, salt, what);
  check_guards(recv, n, what);
  check_guards(send, n, what);
  if (!in_place) {   /* the input is untouched */
    char *again = malloc(n * es + 1);
    fill(again, n, dt, salt);
    CHECK(memcmp(again, send, n * es) == 0, "%s: sendbuf was modified", what);
    free(again);
  }
  guard_free(send);
  guard_free(recv);
}

static void lengths_dtypes_ops(void) {
  size_t lens[] = {0, 1, (size_t)N - 1, (size_t)N, (size_t)N + 1, 1000, 12345,
                   FUSION_THRESHOLD / 2 + 77 /* > threshold for 4+-byte types */};
  for (int dt = HVD_FLOAT32; dt <= HVD_INT64; dt++)
    for (int op = HVD_SUM; op <= HVD_PRODUCT; op++)
      for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        char name[64];
        snprintf(name, sizeof(name), "t.%d.%d.%zu", dt, op, li);
        one(name, lens[li], (hvd_dtype_t)dt, (hvd_op_t)op, (int)(li % 2), dt + op);
      }
  /* one tensor four times the fusion threshold, both placements */
  one("big", 4 * FUSION_THRESHOLD / 4 + 3, HVD_FLOAT32, HVD_SUM, 0, 1);
  one("big", 4 * FUSION_THRESHOLD / 4 + 3, HVD_FLOAT32, HVD_AVERAGE, 1, 2);
}

/* Many async submissions (fused together by the runtime), waited in reverse order, and
   submitted in a different order on every rank. */
static void async_orders(int unnamed) {
  enum { K = 40 };
  hvd_request_t req[K];
  float *buf[K];
  size_t len[K];
  for (int k = 0; k < K; k++) {
    len[k] = (size_t)(k * 37 % 500) + (k == 7 ? 20000 : 0);
    buf[k] = guard_alloc(len[k] * sizeof(float));
    fill(buf[k], len[k], HVD_FLOAT32, k);
  }
  for (int j = 0; j < K; j++) {
    /* unnamed calls are matched by position, so they keep one order */
    int k = unnamed ? j : (j + R * 13) % K;
    char name[32];
    snprintf(name, sizeof(name), "async.%d", k);
    CHECK_OK(hvd_allreduce_async(unnamed ? NULL : name, buf[k], buf[k], len[k],
                                 HVD_FLOAT32, HVD_SUM, &req[k]));
  }
  for (int k = K - 1; k >= 0; k--) {
    if (k % 3 == 0) {
      int done = 0;
      while (!done) {
        hvd_status_t s = hvd_test(req[k], &done);
        CHECK(s == HVD_OK, "hvd_test: %s %s", hvd_status_string(s), hvd_last_error());
        if (!done) usleep(100);
      }
    } else {
      CHECK_OK(hvd_wait(req[k]));
    }
    verify(buf[k], len[k], HVD_FLOAT32, HVD_SUM, k, unnamed ? "async unnamed" : "async");
    check_guards(buf[k], len[k], unnamed ? "async unnamed" : "async");
    guard_free(buf[k]);
  }
}

typedef struct { int id; } thread_arg_t;

static void *user_thread(void *p) {
  int id = ((thread_arg_t *)p)->id;
  for (int it = 0; it < 25; it++) {
    char name[64];
    snprintf(name, sizeof(name), "thread.%d.%d", id, it);
    size_t n = (size_t)(id * 100 + it * 3 + 1);
    int32_t *b = guard_alloc(n * sizeof(int32_t));
    fill(b, n, HVD_INT32, id + it);
    CHECK_OK(hvd_allreduce(name, b, b, n, HVD_INT32, HVD_SUM));
    verify(b, n, HVD_INT32, HVD_SUM, id + it, name);
    check_guards(b, n, name);
    guard_free(b);
  }
  return NULL;
}

static void threads(void) {
  enum { T = 4 };
  pthread_t th[T];
  thread_arg_t a[T];
  for (int i = 0; i < T; i++) {
    a[i].id = i;
    CHECK(pthread_create(&th[i], NULL, user_thread, &a[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
}

static int body(void) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  CHECK(R >= 0 && R < N, "rank %d size %d", R, N);
  lengths_dtypes_ops();
  async_orders(0);
  async_orders(1);
  for (int i = 0; i < 5; i++) one(NULL, 100 + (size_t)i, HVD_FLOAT64, HVD_MAX, i % 2, i);
  threads();
  CHECK_OK(hvd_shutdown());
  if (R == 0) printf("rank 0: all allreduce checks passed on %d ranks\n", N);
  return 0;
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body();
  (void)argc;
  char env[128];
  snprintf(env, sizeof(env), "HVD_FUSION_THRESHOLD=%d", FUSION_THRESHOLD);
  for (int np = 1; np <= 4; np++)
    if (hvd_test_mpirun(argv[0], np, "", env, 120, NULL, 0) != 0) {
      printf("FAIL at np=%d\n", np);
      return 1;
    }
  printf("PASS\n");
  return 0;
}
