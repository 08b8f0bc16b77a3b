/* tests/check.h: the one assertion of the tests. CHECK(cond, fmt, ...) prints where and
   why when cond is false ("FAIL file:line: CHECK(cond): message") and counts the failure
   in `failures`; main returns failures ? 1 : 0. Header-only: nothing is linked into
   other tests.
   Two knobs, defined before the #include by the tests that need them:
     CHECK_RANK()   an int expression, the rank to name in the message (multi-rank
                    tests); -1, the default, names none.
     CHECK_FATAL    1: the first failure ends the process with _exit(1) (the hvd runtime
                    tests run under mpirun, which ends every rank when one fails, and a
                    rank that goes on after a wrong value may block in a collective).
   CHECK_MAX_FAILURES (default 0: no limit) stops a test that would print thousands of
   lines for one broken kernel. */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef CHECK_RANK
#define CHECK_RANK() (-1)
#endif
#ifndef CHECK_FATAL
#define CHECK_FATAL 0
#endif
#ifndef CHECK_MAX_FAILURES
#define CHECK_MAX_FAILURES 0
#endif

static int failures;

/* The head of a failure's message; the caller prints the rest and calls check_failed_end. */
static inline void check_failed_begin(int rank, const char *file, int line, const char *cond) {
  if (rank >= 0) fprintf(stderr, "rank %d: ", rank);
  fprintf(stderr, "FAIL %s:%d: CHECK(%s): ", file, line, cond);
}

static inline void check_failed_end(void) {
  fprintf(stderr, "\n");
  fflush(stderr);
  failures++;
  if (CHECK_FATAL) _exit(1);
  if (CHECK_MAX_FAILURES > 0 && failures > CHECK_MAX_FAILURES) {
    fprintf(stderr, "more than %d failures: stopping\n", CHECK_MAX_FAILURES);
    exit(1);
  }
}

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      check_failed_begin(CHECK_RANK(), __FILE__, __LINE__, #cond);         \
      fprintf(stderr, __VA_ARGS__);                                        \
      check_failed_end();                                                  \
    }                                                                      \
  } while (0)

#endif /* TESTS_CHECK_H */
