/* test_hvd_errors: every error of the runtime gives the documented status on every rank.
     mismatch:       dtype/count/op/root/kind mismatches fail on every rank with
                     HVD_ERR_MISMATCH and Horovod's message; the runtime stays usable;
                     duplicate in-flight names; invalid arguments.
     stall:          the stall inspector warns (rank 0, naming tensors and missing ranks)
                     and HVD_STALL_SHUTDOWN_TIME_SECONDS ends pending ops with
                     HVD_ERR_TIMEOUT and later ones with HVD_ERR_SHUTDOWN on all ranks.
     fatal:          rank 1 cannot allocate an allgather result (an address-space limit):
                     it gets HVD_ERR_NO_MEMORY and a message naming the 512 MiB it needed,
                     the others HVD_ERR_SHUTDOWN naming rank 1 (and not their own size),
                     everything pending and later fails with HVD_ERR_SHUTDOWN; no hang.
     peer_shutdown:  hvd_shutdown on rank 1 ends rank 0's pending op with HVD_ERR_SHUTDOWN.
     sigkill:        rank 1 is killed with SIGKILL mid-allreduce: the job ends within 10 s
                     of the kill, non-zero, and the output names rank 1.
   Started alone, it runs each mode under mpirun and checks the job's output. */
#include "hvd_test.h"

#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>

static int R, N;

static void check_error_has(const char *what) {
  CHECK(strstr(hvd_last_error(), what) != NULL, "last error \"%s\" lacks \"%s\"",
        hvd_last_error(), what);
}

static void mode_mismatch(void) {
  float a[12] = {0};
  CHECK_STATUS(hvd_allreduce("w1", a, a, R == 0 ? 10 : 12, HVD_FLOAT32, HVD_SUM),
               N > 1 ? HVD_ERR_MISMATCH : HVD_OK);
  if (N > 1)
    CHECK(strcmp(hvd_last_error(), "Mismatched allreduce counts for tensor \"w1\": one rank "
                 "sent 10, another rank sent 12.") == 0, "message: %s", hvd_last_error());
  if (N == 1) return;
  CHECK_STATUS(hvd_allreduce("w2", a, a, 4, R == 0 ? HVD_FLOAT32 : HVD_INT32, HVD_SUM),
               HVD_ERR_MISMATCH);
  check_error_has("Mismatched allreduce data types for tensor \"w2\": one rank sent float32, "
                  "another rank sent int32.");
  CHECK_STATUS(hvd_allreduce("w3", a, a, 4, HVD_FLOAT32, R == 0 ? HVD_SUM : HVD_MAX),
               HVD_ERR_MISMATCH);
  check_error_has("Mismatched allreduce ops for tensor \"w3\": one rank sent sum, another "
                  "rank sent max.");
  CHECK_STATUS(hvd_broadcast("w4", a, 4, HVD_FLOAT32, R == 0 ? 0 : N - 1), HVD_ERR_MISMATCH);
  check_error_has("root ranks for tensor \"w4\"");
  CHECK_STATUS(R == 0 ? hvd_allreduce("w5", a, a, 4, HVD_FLOAT32, HVD_SUM)
                      : hvd_broadcast("w5", a, 4, HVD_FLOAT32, 0), HVD_ERR_MISMATCH);
  check_error_has("Mismatched operations for tensor \"w5\"");

  /* A mismatched op next to a good one in the same batch fails alone. */
  hvd_request_t good, bad;
  float g[3] = {1, 2, 3}, b[5] = {0};
  CHECK_OK(hvd_allreduce_async("good", g, g, 3, HVD_FLOAT32, HVD_SUM, &good));
  CHECK_OK(hvd_allreduce_async("bad", b, b, R == 0 ? 4 : 5, HVD_FLOAT32, HVD_SUM, &bad));
  CHECK_STATUS(hvd_wait(bad), HVD_ERR_MISMATCH);
  CHECK_OK(hvd_wait(good));
  CHECK(g[0] == N && g[2] == 3 * N, "good after mismatch: %g %g", g[0], g[2]);

  /* Still usable, the mismatched names too. */
  for (int i = 0; i < 12; i++) a[i] = (float)(R + i);
  CHECK_OK(hvd_allreduce("w1", a, a, 12, HVD_FLOAT32, HVD_SUM));
  for (int i = 0; i < 12; i++)
    CHECK(a[i] == (float)(N * (N - 1) / 2 + N * i), "w1[%d] = %g after mismatch", i, a[i]);

  /* Duplicate: rank 0 submits "dup" twice while the others hold theirs back. */
  int32_t d = R + 1;
  hvd_request_t dup;
  if (R == 0) {
    CHECK_OK(hvd_allreduce_async("dup", &d, &d, 1, HVD_INT32, HVD_SUM, &dup));
    int32_t other = 5;
    hvd_request_t dup2 = (hvd_request_t)1;
    CHECK_STATUS(hvd_allreduce_async("dup", &other, &other, 1, HVD_INT32, HVD_SUM, &dup2),
                 HVD_ERR_DUPLICATE_NAME);
    CHECK(dup2 == NULL, "failed submission left a request handle");
    check_error_has("\"dup\" is already in flight");
  }
  CHECK_OK(hvd_barrier());
  if (R != 0) CHECK_OK(hvd_allreduce_async("dup", &d, &d, 1, HVD_INT32, HVD_SUM, &dup));
  CHECK_OK(hvd_wait(dup));
  CHECK(d == N * (N + 1) / 2, "dup result %d", d);
}

static void invalid_arguments(void) {
  float a[4];
  hvd_request_t req;
  char longname[HVD_NAME_MAX + 10];
  memset(longname, 'x', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  CHECK_STATUS(hvd_broadcast("x", a, 1, HVD_FLOAT32, N), HVD_ERR_INVALID_ARGUMENT);
  check_error_has("root");
  CHECK_STATUS(hvd_broadcast("x", a, 1, HVD_FLOAT32, -1), HVD_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(hvd_allreduce("x", NULL, a, 5, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  check_error_has("NULL buffer");
  CHECK_STATUS(hvd_allreduce("x", a, NULL, 5, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(hvd_allreduce("x", a, a, 1, (hvd_dtype_t)99, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  check_error_has("dtype");
  CHECK_STATUS(hvd_allreduce("x", a, a, 1, HVD_FLOAT32, (hvd_op_t)99), HVD_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(hvd_allreduce(longname, a, a, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  check_error_has("longer than");
  CHECK_STATUS(hvd_allreduce("\x01x", a, a, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  /* an empty name is refused at the call (the runtime goes on: the allreduce below) */
  CHECK_STATUS(hvd_allreduce("", a, a, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
  check_error_has("empty");
  CHECK_STATUS(hvd_allreduce_async("x", a, a, 1, HVD_FLOAT32, HVD_SUM, NULL),
               HVD_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(hvd_wait(NULL), HVD_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(hvd_allgather("x", a, 1, HVD_FLOAT32, NULL, NULL), HVD_ERR_INVALID_ARGUMENT);
  (void)req;
  /* count 0 with NULL buffers is fine */
  CHECK_OK(hvd_allreduce("zero", NULL, NULL, 0, HVD_FLOAT32, HVD_SUM));
}

static void mode_stall(void) {
  int32_t v = 1;
  hvd_request_t req;
  CHECK_OK(hvd_allreduce("warmup", &v, &v, 1, HVD_INT32, HVD_SUM));
  /* Each side waits for a tensor the other never submits. */
  CHECK_OK(hvd_allreduce_async(R == 0 ? "late" : "other_side", &v, &v, 1, HVD_INT32,
                               HVD_SUM, &req));
  double t0 = util_now_s();
  CHECK_STATUS(hvd_wait(req), HVD_ERR_TIMEOUT);
  check_error_has("stall shutdown");
  double waited = util_now_s() - t0;
  CHECK(waited > 2.0 && waited < 8.0, "timed out after %.1f s, expected about 3", waited);
  CHECK_STATUS(hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM), HVD_ERR_SHUTDOWN);
  CHECK_STATUS(hvd_barrier(), HVD_ERR_SHUTDOWN);
}

static void mode_fatal(void) {
  int32_t v = 1;
  CHECK_OK(hvd_allreduce("warmup", &v, &v, 1, HVD_INT32, HVD_SUM));
  size_t big = (size_t)128 << 20;   /* floats: 512 MiB, never touched */
  float *send = NULL;
  size_t count = 0;
  if (R == 0) {
    send = malloc(big * sizeof(float));
    CHECK(send != NULL, "malloc of the (untouched) 512 MiB contribution failed");
    count = big;
  }
  if (R == 1) {
    /* Room for what runs now, not for the 512 MiB result. */
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    CHECK(f && fscanf(f, "%lu", &pages) == 1, "reading /proc/self/statm");
    fclose(f);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (64ul << 20);
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
  }
  hvd_request_t pending = NULL;
  if (R != 1) CHECK_OK(hvd_allreduce_async("pending", &v, &v, 1, HVD_INT32, HVD_SUM, &pending));
  void *out = NULL;
  size_t total = 0;
  CHECK_STATUS(hvd_allgather("huge", send, count, HVD_FLOAT32, &out, &total),
               R == 1 ? HVD_ERR_NO_MEMORY : HVD_ERR_SHUTDOWN);
  /* Only rank 1 knows the size it could not allocate; the others must not name theirs. */
  char own[128];
  snprintf(own, sizeof(own), "rank 1 could not allocate %zu bytes for the result of "
           "allgather \"huge\"", big * sizeof(float));
  const char *other = "rank 1 could not allocate the memory for the result of allgather "
                      "\"huge\" (its own message names the size)";
  check_error_has(R == 1 ? own : other);
  printf("rank %d: %s\n", R, hvd_last_error());
  if (pending) {
    CHECK_STATUS(hvd_wait(pending), HVD_ERR_SHUTDOWN);
    check_error_has(other);
  }
  CHECK_STATUS(hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM), HVD_ERR_SHUTDOWN);
  free(send);
}

static void mode_peer_shutdown(void) {
  int32_t v = 1;
  hvd_request_t never;
  if (R == 0) CHECK_OK(hvd_allreduce_async("never", &v, &v, 1, HVD_INT32, HVD_SUM, &never));
  CHECK_OK(hvd_barrier());
  if (R == 0) {
    CHECK_STATUS(hvd_wait(never), HVD_ERR_SHUTDOWN);
    check_error_has("hvd_shutdown was called on rank 1");
    CHECK_STATUS(hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM), HVD_ERR_SHUTDOWN);
  }
}

static void mode_sigkill(void) {
  size_t n = 256 * 1024;
  float *b = calloc(n, sizeof(float));
  for (int i = 0; i < 100000; i++) {
    if (R == 1 && i == 20) {
      const char *stamp = getenv("HVD_TEST_KILL_STAMP");
      FILE *f = stamp ? fopen(stamp, "w") : NULL;
      if (f) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fprintf(f, "%.3f\n", (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
        fclose(f);
      }
      raise(SIGKILL);
    }
    hvd_status_t s = hvd_allreduce("k", b, b, n, HVD_FLOAT32, HVD_SUM);
    if (s != HVD_OK) {
      /* a survivor told of the loss: the documented statuses only */
      CHECK(s == HVD_ERR_PEER_LOST || s == HVD_ERR_SHUTDOWN, "status %s",
            hvd_status_string(s));
      return;
    }
  }
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  if (strcmp(mode, "mismatch") == 0) { mode_mismatch(); invalid_arguments(); }
  else if (strcmp(mode, "stall") == 0) mode_stall();
  else if (strcmp(mode, "fatal") == 0) mode_fatal();
  else if (strcmp(mode, "peer_shutdown") == 0) mode_peer_shutdown();
  else if (strcmp(mode, "sigkill") == 0) mode_sigkill();
  else CHECK(0, "unknown mode %s", mode);
  CHECK_OK(hvd_shutdown());
  CHECK_STATUS(hvd_allreduce("x", NULL, NULL, 0, HVD_FLOAT32, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
  printf("rank %d: %s checks passed on %d ranks\n", R, mode, N);
  return 0;
}

static char out[1 << 16];

static int expect_in_output(const char *what) {
  if (strstr(out, what)) return 1;
  printf("FAIL: the output lacks \"%s\"\n", what);
  return 0;
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body(argc > 1 ? argv[1] : "");
  int ok = 1;
  for (int np = 1; np <= 3 && ok; np++)
    ok = hvd_test_mpirun(argv[0], np, "mismatch", NULL, 60, NULL, 0) == 0;

  if (ok) {
    double t0 = util_now_s();
    ok = hvd_test_mpirun(argv[0], 2, "stall",
                         "HVD_STALL_CHECK_TIME_SECONDS=1 HVD_STALL_SHUTDOWN_TIME_SECONDS=3",
                         60, out, sizeof(out)) == 0;
    ok = ok && expect_in_output("allreduce \"late\": waiting") &&
         expect_in_output("missing ranks: 1") &&
         expect_in_output("allreduce \"other_side\": waiting") &&
         expect_in_output("missing ranks: 0");
    printf("stall run took %.1f s\n", util_now_s() - t0);
  }
  /* HOROVOD_* spellings work too. */
  if (ok)
    ok = hvd_test_mpirun(argv[0], 3, "stall",
                         "HOROVOD_STALL_CHECK_TIME_SECONDS=1 "
                         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3", 60, out, sizeof(out)) == 0 &&
         expect_in_output("missing ranks: 1, 2");
  if (ok) ok = hvd_test_mpirun(argv[0], 3, "fatal", NULL, 60, NULL, 0) == 0;
  if (ok) ok = hvd_test_mpirun(argv[0], 2, "peer_shutdown", NULL, 60, NULL, 0) == 0;
  if (ok) {
    char stamp[] = "/tmp/hvd_kill_stampXXXXXX", env[128];
    int fd = mkstemp(stamp);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    snprintf(env, sizeof(env), "HVD_TEST_KILL_STAMP=%s", stamp);
    int rc = hvd_test_mpirun(argv[0], 3, "sigkill", env, 60, out, sizeof(out));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, killed = 0;
    FILE *f = fopen(stamp, "r");
    if (!f || fscanf(f, "%lf", &killed) != 1) killed = 0;
    if (f) fclose(f);
    unlink(stamp);
    printf("sigkill: exit %d, %.1f s after the kill\n", rc, end - killed);
    if (killed == 0) { printf("FAIL: rank 1 never reached the kill\n"); ok = 0; }
    if (rc == 0 || rc == 124) { printf("FAIL: exit status %d\n", rc); ok = 0; }
    if (end - killed > 10.0) { printf("FAIL: took more than 10 s\n"); ok = 0; }
    ok = ok && expect_in_output("rank 1");
  }
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
