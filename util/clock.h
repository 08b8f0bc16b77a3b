/* util/clock.h: the one monotonic clock of the project, in seconds.
   Header-only so that every module (nn, collectives, hvd, the programs, the tests) can
   use it without linking anything: util/ depends on nothing and nothing of util/ depends
   on the project. CLOCK_MONOTONIC never jumps with the wall clock (NTP, date -s), so
   intervals, timeouts and throughput figures stay right; clock_gettime cannot fail for
   CLOCK_MONOTONIC on Linux (EINVAL/EFAULT only for a bad clock id or pointer). */
#ifndef UTIL_CLOCK_H
#define UTIL_CLOCK_H

#include <time.h>

static inline double util_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The same clock in microseconds (the timeline's unit, Chrome trace format). */
static inline double util_now_us(void) { return util_now_s() * 1e6; }

#endif
