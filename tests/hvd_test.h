/* tests/hvd_test.h: helpers of the hvd runtime tests (header only, so nothing is linked
   into other tests). A test binary runs itself under mpirun: started alone (by
   tests/run.sh) it launches `mpirun -np N itself MODE` under `timeout` for each N it
   needs; started by mpirun it is one rank and runs the body. */
#ifndef HVD_TEST_H
#define HVD_TEST_H

#include "hvd/hvd.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* CHECK (tests/check.h) names the rank and fails the whole job at once: mpirun ends
   every rank when one exits non-zero. */
#define CHECK_RANK() hvd_rank()
#define CHECK_FATAL 1
#include "tests/check.h"

#define CHECK_STATUS(expr, want)                                                  \
  do {                                                                            \
    hvd_status_t s_ = (expr);                                                     \
    CHECK(s_ == (want), "%s returned %s, expected %s (last error: %s)", #expr,    \
          hvd_status_string(s_), hvd_status_string(want), hvd_last_error());      \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, HVD_OK)

static inline int hvd_test_is_rank(void) { return getenv("OMPI_COMM_WORLD_SIZE") != NULL; }

/* Runs `env... timeout -k 5 limit mpirun -np np self mode` and returns its exit status;
   with out != NULL the combined output is captured there (outlen bytes). */
static inline int hvd_test_mpirun(const char *self, int np, const char *mode,
                                  const char *env, int limit_s, char *out, size_t outlen) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd),
           "%s timeout -k 5 %d mpirun --allow-run-as-root --oversubscribe --bind-to none "
           "-np %d '%s' %s 2>&1",
           env ? env : "", limit_s, np, self, mode);
  printf("== %s\n", cmd);
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) { perror("popen"); return -1; }
  size_t len = 0;
  char line[4096];
  while (fgets(line, sizeof(line), p)) {
    fputs(line, stdout);
    size_t l = strlen(line);
    if (out && len + l < outlen) { memcpy(out + len, line, l); len += l; }
  }
  if (out && outlen) out[len < outlen ? len : outlen - 1] = '\0';
  int st = pclose(p);
  fflush(stdout);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif /* HVD_TEST_H */
