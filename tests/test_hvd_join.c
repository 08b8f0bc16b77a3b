/* test_hvd_join: hvd_join for uneven data on 1-3 ranks. Rank r runs 10 - 3r steps of
   allreduces (SUM and AVERAGE over several dtypes, fused async ones, a grouped
   allreduce and a reducescatter), then joins: every element on every rank must be the
   sum over the ranks still stepping (a joined rank adds zeros), AVERAGE that sum divided
   by size() (joined ranks included, as Horovod does), and hvd_join must return the last
   rank to join (rank 0, the one with most steps) on every rank. Then: a broadcast and an
   allgather while a rank has joined fail on every rank with HVD_ERR_INVALID_ARGUMENT
   naming the op; every rank joining at once; and an allreduce on all ranks afterwards. */
#include "hvd/hvd_internal.h"
#include "hvd_test.h"
#include "collectives/coll.h"

static int R, N;
static const hvd_dtype_t dtypes[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_INT8,
                                     HVD_INT32, HVD_INT64};
#define NDT (sizeof dtypes / sizeof *dtypes)
#define LEN 37

static int steps_of(int rank) { return 10 - 3 * rank; }

/* Small integers, exact in every dtype summed over 3 ranks. */
static int value(int rank, size_t i, int step, int salt) {
  return (int)((i * 5 + (size_t)rank * 7 + (size_t)step * 3 + (size_t)salt) % 9) + 1;
}

static double expected(size_t i, int step, int salt, hvd_dtype_t dt, hvd_op_t op) {
  long long sum = 0;
  for (int r = 0; r < N; r++)
    if (step < steps_of(r)) sum += value(r, i, step, salt);
  if (op == HVD_SUM) return (double)sum;
  if (dt == HVD_FLOAT64) return (double)sum / N;
  if (dt == HVD_FLOAT32 || dt == HVD_FLOAT16) return (double)((float)sum / (float)N);
  return (double)(sum / N);
}

static void fill(void *buf, size_t n, hvd_dtype_t dt, int step, int salt) {
  for (size_t i = 0; i < n; i++)
    coll_element_set(buf, i, (coll_dtype_t)dt, value(R, i, step, salt));
}

static void verify(const void *got, size_t n, size_t first, int step, int salt,
                   hvd_dtype_t dt, hvd_op_t op, const char *what) {
  size_t es = hvd_dtype_size(dt), wrong = 0, at = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char want[8];
    coll_element_set(want, 0, (coll_dtype_t)dt, expected(first + i, step, salt, dt, op));
    if (memcmp(want, (const char *)got + i * es, es) != 0 && wrong++ == 0) at = i;
  }
  CHECK(wrong == 0, "rank %d of %d, step %d, %s (%s, %s): %zu of %zu elements wrong "
        "(first at %zu: %g, expected %g)", R, N, step, what, hvd_dtype_name(dt),
        hvd_op_name(op), wrong, n, at, n ? coll_element_get(got, at, (coll_dtype_t)dt) : 0,
        expected(first + at, step, salt, dt, op));
}

/* One step: every dtype with SUM and AVERAGE (async, so they fuse), a grouped allreduce
   and a reducescatter. */
static void step(int s) {
  char in[2 * NDT][LEN * 8], out[2 * NDT][LEN * 8], name[64];
  hvd_request_t req[2 * NDT];
  for (size_t k = 0; k < 2 * NDT; k++) {
    hvd_dtype_t dt = dtypes[k / 2];
    hvd_op_t op = k % 2 ? HVD_AVERAGE : HVD_SUM;
    fill(in[k], LEN, dt, s, (int)k);
    snprintf(name, sizeof name, "join.%zu", k);
    CHECK_OK(hvd_allreduce_async(name, in[k], out[k], LEN, dt, op, &req[k]));
  }
  for (size_t k = 0; k < 2 * NDT; k++) {
    CHECK_OK(hvd_wait(req[k]));
    verify(out[k], LEN, 0, s, (int)k, dtypes[k / 2], k % 2 ? HVD_AVERAGE : HVD_SUM,
           "allreduce");
  }
  /* grouped: two members of 5 and 9 elements, one tensor of 14 to the reduction */
  float g[14], go[14];
  fill(g, 14, HVD_FLOAT32, s, 100);
  const char *names[] = {"join.group.a", "join.group.b"};
  const void *sb[] = {g, g + 5};
  void *rb[] = {go, go + 5};
  size_t counts[] = {5, 9};
  CHECK_OK(hvd_grouped_allreduce(2, names, sb, rb, counts, HVD_FLOAT32, HVD_AVERAGE));
  verify(go, 14, 0, s, 100, HVD_FLOAT32, HVD_AVERAGE, "grouped allreduce");
  /* reducescatter of 11 int32: rank j gets segment j */
  int32_t rs[11], rso[11];
  size_t got = 0;
  fill(rs, 11, HVD_INT32, s, 200);
  CHECK_OK(hvd_reducescatter("join.rs", rs, 11, HVD_INT32, HVD_SUM, rso, &got));
  size_t want = 11 / (size_t)N + ((size_t)R < 11 % (size_t)N);
  size_t first = (size_t)R * (11 / (size_t)N) + ((size_t)R < 11 % (size_t)N ? (size_t)R
                                                                          : 11 % (size_t)N);
  CHECK(got == want, "rank %d: reducescatter gave %zu elements, expected %zu", R, got, want);
  verify(rso, got, first, s, 200, HVD_INT32, HVD_SUM, "reducescatter");
}

/* The same value on every rank. */
static void check_agreed(int v, const char *what) {
  int32_t lo = v, hi = v;
  CHECK_OK(hvd_allreduce(NULL, &lo, &lo, 1, HVD_INT32, HVD_MIN));
  CHECK_OK(hvd_allreduce(NULL, &hi, &hi, 1, HVD_INT32, HVD_MAX));
  CHECK(lo == hi, "rank %d: %s differs between ranks (%d .. %d)", R, what, lo, hi);
}

static void uneven(void) {
  for (int s = 0; s < steps_of(R); s++) step(s);
  int last = -7;
  CHECK_OK(hvd_join(&last));
  CHECK(last == 0, "rank %d of %d: hvd_join returned last rank %d, expected 0 (the rank "
        "with the most steps joins last)", R, N, last);
}

/* The last rank joins at once; the others try a broadcast and an allgather first. */
static void unsupported_under_join(void) {
  int last = -7;
  if (R != N - 1) {
    float b[3] = {1, 2, 3};
    CHECK_STATUS(hvd_broadcast("join.bcast", b, 3, HVD_FLOAT32, 0),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hvd_last_error(), "broadcast") && strstr(hvd_last_error(), "hvd_join"),
          "rank %d: the error does not name broadcast and hvd_join: %s", R, hvd_last_error());
    void *out = NULL;
    size_t n = 0;
    CHECK_STATUS(hvd_allgather("join.gather", b, 3, HVD_FLOAT32, &out, &n),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hvd_last_error(), "allgather") != NULL,
          "rank %d: the error does not name allgather: %s", R, hvd_last_error());
    free(out);
  }
  CHECK_OK(hvd_join(&last));
  CHECK(last >= 0 && last < N, "rank %d: hvd_join returned %d", R, last);
  check_agreed(last, "the last rank to join");
}

int main(int argc, char **argv) {
  (void)argc;
  if (!hvd_test_is_rank()) {
    for (int np = 1; np <= 3; np++)
      if (hvd_test_mpirun(argv[0], np, "", "HVD_FUSION_THRESHOLD=1024", 120, NULL, 0) !=
          0) {
        printf("FAIL at np=%d\n", np);
        return 1;
      }
    printf("hvd_join exact on 1-3 ranks\n");
    return 0;
  }
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  uneven();
  /* every rank joins at once */
  int last = -7;
  CHECK_OK(hvd_join(&last));
  CHECK(last >= 0 && last < N, "rank %d: hvd_join (all at once) returned %d", R, last);
  check_agreed(last, "the last rank to join (all at once)");
  if (N > 1) unsupported_under_join();
  /* usable afterwards: a full allreduce on every rank */
  int64_t v = R + 1;
  CHECK_OK(hvd_allreduce("join.after", &v, &v, 1, HVD_INT64, HVD_SUM));
  CHECK(v == (int64_t)N * (N + 1) / 2, "rank %d: allreduce after join gave %lld", R,
        (long long)v);
  CHECK_OK(hvd_shutdown());
  printf("rank %d of %d: ok\n", R, N);
  return 0;
}
