/* test_hvd_alltoall_reducescatter: hvd_alltoall (per-rank splits, zero and odd ones, and
   even splits), hvd_reducescatter and hvd_grouped_allreduce (blocking and async) on 1-4
   ranks, every dtype and every op allreduce takes, odd lengths, exact results.
   A grouped allreduce whose ranks split the same total differently is a mismatch on
   every rank, and the runtime goes on; so does an alltoall whose splits do not fit its
   buffer (refused at the call, their size_t sum wrapping to count included). */
#include "hvd/hvd_internal.h"
#include "hvd_test.h"
#include "collectives/coll.h"

static int R, N;
static const hvd_dtype_t dtypes[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_BFLOAT16,
                                     HVD_INT8, HVD_UINT8, HVD_INT32, HVD_INT64};
static const hvd_op_t ops[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};

/* Small integers: every dtype holds sums and products of 4 ranks exactly. */
static int value(int rank, size_t i, int salt) {
  return (int)((i * 7 + (size_t)rank * 3 + (size_t)salt) % 3) + 1;
}

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
    default:
      if (dt == HVD_FLOAT64) return (double)sum / N;
      if (dt == HVD_FLOAT32 || dt == HVD_FLOAT16 || dt == HVD_BFLOAT16)
        return (double)((float)sum / (float)N);
      return (double)(sum / N);
  }
}

/* got[0..n) against the expected elements first.. of the reduction. */
static void verify(const void *got, size_t n, size_t first, hvd_dtype_t dt, hvd_op_t op,
                   int salt, const char *what) {
  size_t es = hvd_dtype_size(dt), wrong = 0, at = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char want[8];
    coll_element_set(want, 0, (coll_dtype_t)dt, expected(first + i, dt, op, salt));
    if (memcmp(want, (const char *)got + i * es, es) != 0 && wrong++ == 0) at = i;
  }
  CHECK(wrong == 0, "rank %d of %d, %s: %zu of %zu elements wrong (first at %zu: %g, "
        "expected %g)", R, N, what, wrong, n, at,
        n ? coll_element_get(got, at, (coll_dtype_t)dt) : 0.0,
        expected(first + at, dt, op, salt));
}

static void reducescatter(void) {
  const size_t lens[] = {0, 1, 5, 1001};
  int salt = 0;
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
      for (size_t l = 0; l < sizeof lens / sizeof *lens; l++, salt++) {
        hvd_dtype_t dt = dtypes[d];
        size_t n = lens[l], es = hvd_dtype_size(dt);
        char *in = malloc(n * es + 1), *out = malloc(n * es + 1), name[64];
        for (size_t i = 0; i < n; i++)
          coll_element_set(in, i, (coll_dtype_t)dt, value(R, i, salt));
        size_t got = 12345, want = n / (size_t)N + ((size_t)R < n % (size_t)N);
        size_t first = (size_t)R * (n / (size_t)N) + ((size_t)R < n % (size_t)N ? (size_t)R
                                                                               : n % (size_t)N);
        snprintf(name, sizeof name, "rs.%d", salt);
        if (salt % 2) {
          hvd_request_t req;
          CHECK_OK(hvd_reducescatter_async(name, in, n, dt, ops[o], out, &got, &req));
          CHECK_OK(hvd_wait(req));
        } else {
          CHECK_OK(hvd_reducescatter(name, in, n, dt, ops[o], out, &got));
        }
        CHECK(got == want, "rank %d of %d: reducescatter of %zu gave %zu elements, expected "
              "%zu", R, N, n, got, want);
        char what[96];
        snprintf(what, sizeof what, "reducescatter %s %s n=%zu", hvd_dtype_name(dt),
                 hvd_op_name(ops[o]), n);
        verify(out, got, first, dt, ops[o], salt, what);
        free(in);
        free(out);
      }
}

/* What rank src sends to rank dst, element i of that block. */
static int a2a_value(int src, int dst, size_t i) { return (int)((size_t)src * 7 + (size_t)dst * 3 + i) % 50; }
static size_t a2a_split(int src, int dst) { return (size_t)(src + 2 * dst) % 5; }

static void alltoall(void) {
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (int even = 0; even < 2; even++) {
      hvd_dtype_t dt = dtypes[d];
      size_t es = hvd_dtype_size(dt), splits[4], count = 0;
      for (int j = 0; j < N; j++) count += splits[j] = even ? 3 : a2a_split(R, j);
      char *in = malloc(count * es + 1);
      size_t off = 0;
      for (int j = 0; j < N; j++)
        for (size_t i = 0; i < splits[j]; i++)
          coll_element_set(in, off++, (coll_dtype_t)dt, a2a_value(R, j, i));
      void *out = NULL;
      size_t total = 0, recv_splits[4] = {99, 99, 99, 99};
      char name[64];
      snprintf(name, sizeof name, "a2a.%zu.%d", d, even);
      if (d % 2) {
        hvd_request_t req;
        CHECK_OK(hvd_alltoall_async(name, in, count, even ? NULL : splits, dt, &out, &total,
                                    recv_splits, &req));
        CHECK_OK(hvd_wait(req));
      } else {
        CHECK_OK(hvd_alltoall(name, in, count, even ? NULL : splits, dt, &out, &total,
                              recv_splits));
      }
      size_t want_total = 0, wrong = 0;
      off = 0;
      for (int j = 0; j < N; j++) {
        size_t want = even ? 3 : a2a_split(j, R);
        CHECK(recv_splits[j] == want, "rank %d of %d, alltoall %s: %zu elements from rank %d, "
              "expected %zu", R, N, hvd_dtype_name(dt), recv_splits[j], j, want);
        want_total += want;
        for (size_t i = 0; i < want; i++, off++)
          if (coll_element_get(out, off, (coll_dtype_t)dt) != a2a_value(j, R, i)) wrong++;
      }
      CHECK(total == want_total && wrong == 0, "rank %d of %d, alltoall %s: %zu elements "
            "(expected %zu), %zu wrong", R, N, hvd_dtype_name(dt), total, want_total, wrong);
      free(in);
      free(out);
    }
}

/* Splits that do not fit the buffer are refused at the call on every rank, naming the
   split, and the runtime goes on (the alltoalls that follow). {9, SIZE_MAX} adds up to
   8 in size_t arithmetic, as does {1, SIZE_MAX, 8}, whose splits but the second fit:
   accepted, a peer would be sent SIZE_MAX elements. */
static void bad_splits(void) {
  const size_t count = 8;
  char in[8] = {0};
  const struct {
    size_t splits[4];
    int min_ranks;
    const char *want;
  } cases[] = {
      {{9, SIZE_MAX, 0, 0}, 2,
       "splits[0] is 9 elements, more than the whole buffer (count 8)"},
      {{1, SIZE_MAX, 8, 0}, 3, "splits[1] is 18446744073709551615 elements, more than the "
                               "whole buffer"},
      {{5, 5, 0, 0}, 2, "splits[0..1] already add up to 10 elements, more than count 8"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    if (N < cases[c].min_ranks) continue;
    void *out = (void *)1;
    size_t total = 77, recv_splits[4] = {99, 99, 99, 99};
    hvd_status_t s = hvd_alltoall("a2a.bad", in, count, cases[c].splits, HVD_INT8, &out,
                                  &total, recv_splits);
    CHECK(s == HVD_ERR_INVALID_ARGUMENT && strstr(hvd_last_error(), cases[c].want),
          "rank %d of %d, alltoall splits case %zu: %s (%s), expected "
          "HVD_ERR_INVALID_ARGUMENT with \"%s\"", R, N, c, hvd_status_string(s),
          hvd_last_error(), cases[c].want);
    CHECK(out == NULL && total == 0, "rank %d: a refused alltoall left recvbuf %p, "
          "recvcount %zu", R, out, total);
  }
}

static void grouped(void) {
  enum { M = 3 };
  const size_t lens[M] = {1, 17, 1001};
  int salt = 100;
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++, salt++) {
      hvd_dtype_t dt = dtypes[d];
      size_t es = hvd_dtype_size(dt);
      void *buf[M];
      const void *send[M];
      char names[M][32];
      const char *np[M];
      for (int m = 0; m < M; m++) {
        buf[m] = malloc(lens[m] * es);
        send[m] = buf[m];
        for (size_t i = 0; i < lens[m]; i++)
          coll_element_set(buf[m], i, (coll_dtype_t)dt, value(R, i, salt + m));
        snprintf(names[m], sizeof names[m], "g.%d.%d", salt, m);
        np[m] = names[m];
      }
      if (salt % 2) {
        hvd_request_t req;
        CHECK_OK(hvd_grouped_allreduce_async(M, np, send, buf, lens, dt, ops[o], &req));
        CHECK_OK(hvd_wait(req));
      } else {
        CHECK_OK(hvd_grouped_allreduce(M, np, send, buf, lens, dt, ops[o]));
      }
      for (int m = 0; m < M; m++) {
        char what[96];
        snprintf(what, sizeof what, "grouped allreduce %s %s member %d", hvd_dtype_name(dt),
                 hvd_op_name(ops[o]), m);
        verify(buf[m], lens[m], 0, dt, ops[o], salt + m, what);
        free(buf[m]);
      }
    }
  if (N > 1) {
    /* Same total (10), split 4+6 on rank 0 and 5+5 elsewhere. */
    float a[10] = {0};
    const size_t counts[2] = {R == 0 ? 4u : 5u, R == 0 ? 6u : 5u};
    const void *s2[2] = {a, a + counts[0]};
    void *r2[2] = {a, a + counts[0]};
    const char *n2[2] = {"g.bad.0", "g.bad.1"};
    hvd_status_t s = hvd_grouped_allreduce(2, n2, s2, r2, counts, HVD_FLOAT32, HVD_SUM);
    CHECK(s == HVD_ERR_MISMATCH && strstr(hvd_last_error(), "g.bad.0"),
          "rank %d: differently split groups gave %s (%s), expected HVD_ERR_MISMATCH", R,
          hvd_status_string(s), hvd_last_error());
  }
}

int main(int argc, char **argv) {
  (void)argc;
  if (!hvd_test_is_rank()) {
    for (int np = 1; np <= 4; np++)
      if (hvd_test_mpirun(argv[0], np, "", "HVD_FUSION_THRESHOLD=4096", 120, NULL, 0) != 0) {
        printf("FAIL at np=%d\n", np);
        return 1;
      }
    printf("alltoall, reducescatter and grouped allreduce exact on 1-4 ranks\n");
    return 0;
  }
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  reducescatter();
  bad_splits();
  alltoall();
  grouped();
  CHECK_OK(hvd_shutdown());
  printf("rank %d of %d: ok\n", R, N);
  return 0;
}
