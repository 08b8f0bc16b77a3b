/* test_hvd_liveness: a stopped or silent rank ends the job with a clear error, never a
   hang (HVD_PEER_TIMEOUT_SECONDS=3 here).
     stop1:      3 ranks allreduce 1 MiB in a loop; the test stops rank 1 (SIGSTOP) in
                 the middle of it (mostly inside a collective): ranks 0 and 2 get HVD_ERR_PEER_LOST naming rank 1 and its
                 host, later calls fail alike, hvd_shutdown returns, and the job ends
                 within the timeout + 5 s of the stop, non-zero, with no process left.
     stop0:      the same with rank 0 (the coordinator) stopped.
     stop_idle:  rank 1 stops itself before submitting a tensor the others wait for (nobody is
                 inside a collective: the heartbeats find it).
     stall_exit: rank 1 never submits and stays alive; HVD_STALL_SHUTDOWN_TIME_SECONDS=3
                 ends the others' request with HVD_ERR_TIMEOUT, their hvd_shutdown
                 returns, and the job ends.
     stall_stop1, stall_stop0: as stop1/stop0 with the peer timeout off and
                 HVD_STALL_SHUTDOWN_TIME_SECONDS=3: the stall inspector, which runs
                 while the background thread is blocked inside the collective, ends it
                 (HVD_ERR_TIMEOUT on both survivors).
     timeline_kill: rank 0 (which writes HVD_TIMELINE) is killed: the file loads with
                 scripts/timeline_load.py, cut short, with its allreduces.
   Started alone, it runs each mode under mpirun and checks the job's output and
   timing; it also runs a program mode (loop) used by tests/test_netns_liveness.sh. */
#include "hvd_test.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>

static int R, N;
static char self_path[PATH_MAX < 1024 ? PATH_MAX : 1024];

static void set_self_path(const char *argv0) {
  if (!realpath(argv0, self_path)) snprintf(self_path, sizeof(self_path), "%s", argv0);
}

/* Writes the wall-clock time to path (when the fault happened). */
static void stamp_to(const char *path) {
  FILE *f = path ? fopen(path, "w") : NULL;
  if (!f) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  fprintf(f, "%.3f\n", (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
  fclose(f);
}
static void stamp(void) { stamp_to(getenv("HVD_TEST_STAMP")); }

/* The allreduce loop; at step 20 the victim rank writes its pid to $HVD_TEST_STAMP
   for the test to stop it from outside, wherever it then is (most of the time inside a
   collective) (victim < 0: nobody). Returns the status that ended it, HVD_OK when all
   steps ran. */
static int announce_loop; /* loop mode: say when the loop runs (the netns test waits) */
static hvd_status_t allreduce_loop(int victim, int steps) {
  size_t n = 256 * 1024;
  float *b = calloc(n, sizeof(float));
  CHECK(b != NULL, "calloc");
  hvd_status_t s = HVD_OK;
  for (int i = 0; i < steps && s == HVD_OK; i++) {
    if (R == victim && i == 20) {
      const char *path = getenv("HVD_TEST_STAMP");
      FILE *f = path ? fopen(path, "w") : NULL;
      if (f) {
        fprintf(f, "pid %ld\n", (long)getpid());
        fclose(f);
      }
    }
    s = hvd_allreduce("grad", b, b, n, HVD_FLOAT32, HVD_SUM);
    if (announce_loop && i == 0 && s == HVD_OK) {
      printf("rank %d: the loop runs\n", R);
      fflush(stdout);
    }
  }
  free(b);
  return s;
}

static void expect_lost(hvd_status_t s, int victim) {
  CHECK(s == HVD_ERR_PEER_LOST, "rank %d: status %s (%s), expected PEER_LOST", R,
        hvd_status_string(s), hvd_last_error());
  char want[64];
  snprintf(want, sizeof(want), "rank %d (host ", victim);
  CHECK(strstr(hvd_last_error(), want) != NULL, "rank %d: message \"%s\" does not name %s",
        R, hvd_last_error(), want);
  printf("rank %d: %s: %s\n", R, hvd_status_string(s), hvd_last_error());
  int32_t v = 1;
  CHECK_STATUS(hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM), HVD_ERR_PEER_LOST);
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  int victim = strcmp(mode, "stop0") == 0 ? 0 : 1;
  if (strcmp(mode, "stop1") == 0 || strcmp(mode, "stop0") == 0) {
    hvd_status_t s = allreduce_loop(victim, 100000);
    if (R == victim) return 3;   /* mpirun continues it to end it: nothing to check */
    expect_lost(s, victim);
  } else if (strncmp(mode, "stall_stop", 10) == 0) {
    /* no peer timeout: the watchdog's stall shutdown ends the collective */
    victim = mode[10] - '0';
    hvd_status_t s = allreduce_loop(victim, 100000);
    if (R == victim) return 3;
    CHECK(s == HVD_ERR_TIMEOUT, "rank %d: status %s (%s), expected TIMEOUT", R,
          hvd_status_string(s), hvd_last_error());
    CHECK(strstr(hvd_last_error(), "stall shutdown on rank") != NULL, "rank %d: message %s", R,
          hvd_last_error());
    printf("rank %d: %s: %s\n", R, hvd_status_string(s), hvd_last_error());
  } else if (strcmp(mode, "timeline_kill") == 0) {
    size_t n = 1024;
    float *b = calloc(n, sizeof(float));
    for (int i = 0; i < 100000; i++) {
      if (R == 0 && i == 30) raise(SIGKILL);   /* rank 0 writes the timeline */
      if (hvd_allreduce("t", b, b, n, HVD_FLOAT32, HVD_SUM) != HVD_OK) break;
    }
    free(b);
  } else if (strcmp(mode, "stop_idle") == 0) {
    int32_t v = 1;
    CHECK_OK(hvd_allreduce("warmup", &v, &v, 1, HVD_INT32, HVD_SUM));
    if (R == 1) {
      stamp();
      raise(SIGSTOP);
      return 3;
    }
    expect_lost(hvd_allreduce("never_from_1", &v, &v, 1, HVD_INT32, HVD_SUM), 1);
  } else if (strcmp(mode, "stall_exit") == 0) {
    int32_t v = 1;
    CHECK_OK(hvd_allreduce("warmup", &v, &v, 1, HVD_INT32, HVD_SUM));
    if (R == 1) {
      stamp();
      sleep(60);   /* alive, busy elsewhere: never submits */
    }
    CHECK_STATUS(hvd_allreduce("never_from_1", &v, &v, 1, HVD_INT32, HVD_SUM),
                 HVD_ERR_TIMEOUT);
  } else if (strcmp(mode, "loop") == 0) {
    /* tests/test_netns_liveness.sh cuts a link under it */
    announce_loop = 1;
    hvd_status_t s = allreduce_loop(-1, 1000000);
    printf("rank %d: %s: %s\n", R, hvd_status_string(s), hvd_last_error());
    fflush(stdout);
    hvd_shutdown();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("rank %d exits at %.3f\n", R, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
    return 3;
  } else {
    CHECK(0, "unknown mode %s", mode);
  }
  double t0 = util_now_s();
  hvd_shutdown();
  printf("rank %d: hvd_shutdown returned after %.1f s\n", R, util_now_s() - t0);
  fflush(stdout);
  return 3;   /* a program's error path: exits non-zero */
}

static char out[1 << 16];

/* Runs mode on np ranks; checks that the job failed within limit_s of the fault, that
   the output has want (at least `times` times), and that no rank is left. */
static int run_fault(const char *mode, int np, const char *env, double limit_s,
                     const char *want, int times) {
  char path[] = "/tmp/hvd_liveness_stampXXXXXX", envs[512], cmd[8192];
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  snprintf(envs, sizeof(envs), "HVD_TEST_STAMP=%s HVD_PEER_TIMEOUT_SECONDS=3 %s", path,
           env ? env : "");
  /* A rank that writes "pid P" there is stopped from here 0.2 s later, and the time of
     the stop replaces its pid. */
  pid_t stopper = fork();
  CHECK(stopper >= 0, "fork");
  if (stopper == 0) {
    for (int i = 0; i < 600; i++) {
      long pid = 0;
      FILE *f = fopen(path, "r");
      int got = f && fscanf(f, "pid %ld", &pid) == 1;
      if (f) fclose(f);
      if (got && pid > 0) {
        usleep(200000);
        kill((pid_t)pid, SIGSTOP);
        stamp_to(path);
        _exit(0);
      }
      usleep(50000);
    }
    _exit(0);
  }
  int rc = hvd_test_mpirun(self_path, np, mode, envs, 60, out, sizeof(out));
  kill(stopper, SIGKILL);
  waitpid(stopper, NULL, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double end = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, fault = 0;
  FILE *f = fopen(path, "r");
  if (!f || fscanf(f, "%lf", &fault) != 1) fault = 0;
  if (f) fclose(f);
  unlink(path);
  int ok = 1;
  printf("%s: exit %d, job over %.1f s after the fault\n", mode, rc, end - fault);
  if (fault == 0) { printf("FAIL %s: the fault never happened\n", mode); ok = 0; }
  if (rc == 0 || rc == 124 || rc == 137) { printf("FAIL %s: exit status %d\n", mode, rc); ok = 0; }
  if (fault > 0 && end - fault > limit_s) {
    printf("FAIL %s: the job ended %.1f s after the fault (limit %.0f s)\n", mode,
           end - fault, limit_s);
    ok = 0;
  }
  if (strstr(out, ": FAIL ")) { printf("FAIL %s: a rank's check failed\n", mode); ok = 0; }
  int seen = 0;
  for (const char *p = out; (p = strstr(p, want)) != NULL; p++) seen++;
  if (seen < times) {
    printf("FAIL %s: \"%s\" appears %d times in the output, expected %d\n", mode, want, seen,
           times);
    ok = 0;
  }
  /* No rank left behind (a stopped one included). */
  snprintf(cmd, sizeof(cmd), "sleep 1; pgrep -f '%s %s$' >/dev/null", self_path, mode);
  if (system(cmd) == 0) {
    printf("FAIL %s: a rank is still running after the job ended\n", mode);
    snprintf(cmd, sizeof(cmd), "pkill -KILL -f '%s %s$'", self_path, mode);
    if (system(cmd) != 0) printf("(pkill found nothing)\n");
    ok = 0;
  }
  return ok;
}

/* The timeline cut short by a kill still loads (scripts/timeline_load.py). */
static int run_timeline_kill(void) {
  char tl[] = "/tmp/hvd_timeline_killXXXXXX", env[256], cmd[512];
  int fd = mkstemp(tl);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  snprintf(env, sizeof(env), "HVD_TIMELINE=%s", tl);
  hvd_test_mpirun(self_path, 2, "timeline_kill", env, 60, out, sizeof(out));
  snprintf(cmd, sizeof(cmd), "python3 scripts/timeline_load.py %s > %s.txt 2>&1", tl, tl);
  int rc = system(cmd);
  snprintf(cmd, sizeof(cmd), "%s.txt", tl);
  FILE *f = fopen(cmd, "r");
  size_t got = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
  out[got] = '\0';
  if (f) fclose(f);
  printf("%s", out);
  int allreduces = 0;
  const char *a = strstr(out, "ALLREDUCE ");
  if (a) allreduces = atoi(a + strlen("ALLREDUCE "));
  int ok = 1;
  if (rc != 0 || !strstr(out, "cut short") || allreduces < 25) {
    printf("FAIL timeline_kill: the killed run's timeline did not load as cut short with "
           "its 30 allreduces (exit %d, %d allreduces)\n", rc, allreduces);
    ok = 0;
  }
  unlink(tl);
  unlink(cmd);
  return ok;
}

/* One case: a fault mode (run_fault's arguments) or the timeline case (mode NULL). */
typedef struct {
  const char *mode, *env, *want;
  double limit_s;
  int times;
} fault_case_t;

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body(argc > 1 ? argv[1] : "");
  set_self_path(argv[0]);
  /* Limits after the fault: a lost peer 3 s of silence + 5; a stall 3 s + 12 (up to 2 s
     of the coordinator's grace, hvd_shutdown's 5 s for peers that may still answer, and
     mpirun's teardown of a stopped rank: 8-12 s measured under TSan, all cases at once). */
  const fault_case_t cases[] = {
      /* Both survivors name the stopped rank. */
      {"stop1", NULL, "lost 1 rank(s): rank 1 (host ", 3 + 5, 2},
      {"stop0", NULL, "lost 1 rank(s): rank 0 (host ", 3 + 5, 2},
      {"stop_idle", NULL, "lost 1 rank(s): rank 1 (host ", 3 + 5, 2},
      {"stall_exit", "HVD_STALL_SHUTDOWN_TIME_SECONDS=3", "hvd_shutdown returned after",
       3 + 12, 2},
      /* The stall inspector runs while the background thread is blocked in a collective
         (the rank that notices: the others learn from its notice), rank 0 stopped too. */
      {"stall_stop1", "HVD_PEER_TIMEOUT_SECONDS=0 HVD_STALL_SHUTDOWN_TIME_SECONDS=3",
       "HVD_ERR_TIMEOUT: stall shutdown on rank", 3 + 12, 2},
      {"stall_stop0", "HVD_PEER_TIMEOUT_SECONDS=0 HVD_STALL_SHUTDOWN_TIME_SECONDS=3",
       "HVD_ERR_TIMEOUT: stall shutdown on rank", 3 + 12, 2},
      {NULL, NULL, NULL, 0, 0},
  };
  enum { NCASES = sizeof cases / sizeof cases[0] };
  /* The cases are independent jobs (their own stamp files, their own mode names for the
     left-behind check) that spend most of their time waiting for a timeout, so they run
     at once, each a child process writing to its own log; the logs are printed in
     order once all have ended. Run one after the other they took about a minute of the
     CI's serial time in each of the three builds. */
  char logs[NCASES][64];
  pid_t pids[NCASES];
  for (int i = 0; i < NCASES; i++) {
    snprintf(logs[i], sizeof(logs[i]), "/tmp/hvd_liveness_logXXXXXX");
    int fd = mkstemp(logs[i]);
    CHECK(fd >= 0, "mkstemp");
    fflush(stdout);
    pids[i] = fork();
    CHECK(pids[i] >= 0, "fork");
    if (pids[i] == 0) {
      CHECK(dup2(fd, STDOUT_FILENO) >= 0 && dup2(fd, STDERR_FILENO) >= 0, "dup2");
      close(fd);
      const fault_case_t *c = &cases[i];
      int ok = c->mode ? run_fault(c->mode, 3, c->env, c->limit_s, c->want, c->times)
                       : run_timeline_kill();
      fflush(stdout);
      _exit(ok && failures == 0 ? 0 : 1);
    }
    close(fd);
  }
  int ok = 1;
  for (int i = 0; i < NCASES; i++) {
    int st = 0;
    CHECK(waitpid(pids[i], &st, 0) == pids[i], "waitpid");
    FILE *f = fopen(logs[i], "r");
    size_t got;
    while (f && (got = fread(out, 1, sizeof(out), f)) > 0) fwrite(out, 1, got, stdout);
    if (f) fclose(f);
    unlink(logs[i]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("FAIL %s: its check failed (status %d)\n",
             cases[i].mode ? cases[i].mode : "timeline_kill", st);
      ok = 0;
    }
  }
  ok = ok && failures == 0;
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
