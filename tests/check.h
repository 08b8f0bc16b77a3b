/* tests/check.h: the assertion of the single-process tests. CHECK counts a failure and
   prints where and why, and the test goes on, so one run reports every wrong value;
   main returns failures ? 1 : 0. Header-only: nothing is linked into other tests. */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

#endif /* TESTS_CHECK_H */
