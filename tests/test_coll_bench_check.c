/* test_coll_bench_check: allreduce_bench's data check (-c), the part that says #wrong.
   bench/allreduce_bench.c is included with its main renamed, so its own check_input,
   check_expected and check_count_wrong are under test, without MPI:
   - the expected values are what the collectives' own arithmetic gives: every rank's
     inputs reduced with coll_reduce (and coll_divide for avg), for every dtype, op and
     1..5 ranks, count 0 wrong;
   - a wrong result is counted, element for element: corrupted elements, a rank's
     unreduced input (an allreduce that did nothing), another op's result, the poison
     the bench writes into recvbuf before a checked out-of-place run (a backend that
     never writes recvbuf), and for the sendrecv shift its own input instead of its left
     neighbour's. */
#define main allreduce_bench_main
#include "bench/allreduce_bench.c"
#undef main

#include "tests/check.h"

enum { COUNT = 101 };   /* not a multiple of 7 nor of any rank count here */

/* What an allreduce over n ranks gives, by the collectives' arithmetic. */
static void reference(void *out, coll_dtype_t d, bench_op_t op, int n) {
  unsigned char tmp[COUNT * 8];
  check_fill(out, COUNT, d, 0, n, op);
  for (int r = 1; r < n; r++) {
    check_fill(tmp, COUNT, d, r, n, op);
    coll_reduce(out, tmp, COUNT, d, coll_op(op));
  }
  if (op == BENCH_AVG) coll_divide(out, COUNT, d, n);
}

static void test_exact_results(void) {
  for (int d = COLL_FLOAT32; d <= COLL_INT64; d++)
    for (int op = BENCH_SUM; op <= BENCH_AVG; op++)
      for (int n = 1; n <= 5; n++) {
        unsigned char buf[COUNT * 8];
        reference(buf, (coll_dtype_t)d, (bench_op_t)op, n);
        for (int r = 0; r < n; r++) {
          long w = check_count_wrong(buf, COUNT, (coll_dtype_t)d, (bench_op_t)op, r, n, 0);
          CHECK(w == 0, "%s %s n=%d rank %d: %ld wrong in the exact result",
                coll_dtype_name((coll_dtype_t)d), OPS[op], n, r, w);
        }
      }
}

static void test_wrong_results_counted(void) {
  for (int d = COLL_FLOAT32; d <= COLL_INT64; d++)
    for (int op = BENCH_SUM; op <= BENCH_AVG; op++) {
      const coll_dtype_t dt = (coll_dtype_t)d;
      const char *dn = coll_dtype_name(dt);
      const int n = 3;
      unsigned char buf[COUNT * 8];
      /* Three elements off by one: three wrong. */
      reference(buf, dt, (bench_op_t)op, n);
      const size_t at[] = {0, COUNT / 2, COUNT - 1};
      for (int k = 0; k < 3; k++)
        coll_element_set(buf, at[k], dt, coll_element_get(buf, at[k], dt) + 1);
      long w = check_count_wrong(buf, COUNT, dt, (bench_op_t)op, 1, n, 0);
      CHECK(w == 3, "%s %s: 3 corrupted elements, %ld counted", dn, OPS[op], w);
      /* Rank 0's input left as it was: wrong somewhere for every op. */
      check_fill(buf, COUNT, dt, 0, n, (bench_op_t)op);
      w = check_count_wrong(buf, COUNT, dt, (bench_op_t)op, 0, n, 0);
      CHECK(w > 0, "%s %s: an unreduced input passed the check", dn, OPS[op]);
      /* Every element poisoned, as recvbuf before a checked run: all wrong. */
      memset(buf, 0xFF, sizeof buf);
      w = check_count_wrong(buf, COUNT, dt, (bench_op_t)op, 0, n, 0);
      CHECK(w == COUNT, "%s %s: poisoned buffer, %ld of %d counted wrong", dn, OPS[op], w,
            COUNT);
      /* Another op's result: wrong somewhere (the inputs of sum, min and max are the
         same, so their results differ; prod and avg have their own inputs). */
      int other = op == BENCH_SUM ? BENCH_MAX : BENCH_SUM;
      reference(buf, dt, (bench_op_t)other, n);
      w = check_count_wrong(buf, COUNT, dt, (bench_op_t)op, 0, n, 0);
      CHECK(w > 0, "%s: the %s result passed as %s", dn, OPS[other], OPS[op]);
    }
}

static void test_shift(void) {
  const int n = 4;
  unsigned char buf[COUNT * 8];
  for (int r = 0; r < n; r++) {
    check_fill(buf, COUNT, COLL_FLOAT32, (r - 1 + n) % n, n, BENCH_SUM);
    long w = check_count_wrong(buf, COUNT, COLL_FLOAT32, BENCH_SUM, r, n, 1);
    CHECK(w == 0, "shift: rank %d holding its left neighbour's input: %ld wrong", r, w);
    check_fill(buf, COUNT, COLL_FLOAT32, r, n, BENCH_SUM);
    w = check_count_wrong(buf, COUNT, COLL_FLOAT32, BENCH_SUM, r, n, 1);
    CHECK(w > 0, "shift: rank %d holding its own input passed", r);
  }
}

int main(void) {
  test_exact_results();
  test_wrong_results_counted();
  test_shift();
  if (failures) {
    printf("test_coll_bench_check: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_coll_bench_check: all passed\n");
  return 0;
}
