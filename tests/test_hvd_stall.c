/* test_hvd_stall: which stall report wins, and who prints it.

   grace: rank 1 submits "x", which rank 0 never submits; HVD_STALL_SHUTDOWN_TIME_SECONDS=1.
     Two inspectors could end it: the coordinator's (rank 0's background thread, which
     names the ranks that did not submit) and rank 1's watchdog (which only knows that
     its own request waits). The watchdog gives the coordinator COORDINATOR_GRACE_S (2 s)
     while its background thread still runs (hvd/watchdog.c), so the coordinator's
     report must win. To tell a correct grace from none (or an inverted one) without a
     race, the coordinator learns of "x" 1 s late: rank 0 is stopped (SIGSTOP, by
     itself) when rank 1 submits, and rank 1 continues it 1 s later. The coordinator
     then ends "x" 1 + 1 s after its submission, rank 1's watchdog would at 1 + 2 s (at
     1 s without the grace): 1 s of margin either way.
     Expected: rank 1's call fails with HVD_ERR_TIMEOUT and the coordinator's text
     ("stall shutdown: tensor "x" ... for ranks 0 that never submitted it"), rank 0's
     later call fails with the same text, rank 0 logs the stall warning naming rank 0 as
     missing, and no rank prints the watchdog's "stall shutdown on rank".
   bytes: an 8 MiB allreduce on 2 ranks: the world transport's count
     of bytes sent and received (what the watchdog's warning reports) grows by at least
     the 8 MiB this rank must receive.
   quiet: (the first warning's interval) 32 MiB of allreduces first, then a stall:
     rank 1 submits "z" (16 MiB), waits 1 s for its request to reach the coordinator and
     stops itself (SIGSTOP); rank 0 then submits "z", so its background thread enters
     the collective and waits for the stopped rank. HVD_STALL_CHECK_TIME_SECONDS=1, no
     response cache. Rank 0's first watchdog warning about "z" must say "waiting for its
     peers: no bytes": the bytes it reports are counted from the background thread's
     last turn before the collective, not from start-up (which would call the stall "a
     large transfer"). Rank 0 continues rank 1 only once that warning is out (it reads
     its own stderr from a file), so a slow machine cannot move it past the stop; a
     warning about the 32 MiB first may rightly say "long collective" on a slow machine.
   Before the jobs, without MPI: the watchdog's warning for a background thread inside
   one collective says "long collective" with the bytes moved when the transports moved
   some in the last interval, and "waiting for its peers" only when they moved none.
   Started alone, it runs the modes under mpirun and checks the output. */
#include "hvd/hvd_internal.h"
#include "hvd/watchdog.h"
#include "hvd_test.h"
#include "collectives/coll.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>

#define LATE_S 1.0   /* how long the coordinator is kept from seeing "x" */
#define WARNING_WAIT_S 30.0   /* quiet: the most rank 1 stays stopped (a hang, not a
                                 stall, past that: the peer timeout is 60 s) */

static int R;

/* 1 when process pid is stopped (state T in /proc/pid/stat). */
static int is_stopped(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');   /* the name may hold spaces and parentheses */
  return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

static void grace(void) {
  int64_t pid = (int64_t)getpid(), *pids = NULL;
  size_t n = 0;
  CHECK_OK(hvd_allgather("pids", &pid, 1, HVD_INT64, (void **)&pids, &n));
  CHECK(n == 2, "allgather of pids gave %zu", n);
  int32_t v = 1;
  if (R == 0) {
    raise(SIGSTOP);   /* rank 1 continues it */
    sleep(5);         /* past the stall shutdown, without submitting "x" */
    CHECK_STATUS(hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM), HVD_ERR_SHUTDOWN);
  } else {
    double until = util_now_s() + 20;
    while (!is_stopped((long)pids[0]) && util_now_s() < until) usleep(10000);
    CHECK(is_stopped((long)pids[0]), "rank 0 (pid %ld) did not stop", (long)pids[0]);
    hvd_request_t req;
    CHECK_OK(hvd_allreduce_async("x", &v, &v, 1, HVD_INT32, HVD_SUM, &req));
    usleep((useconds_t)(LATE_S * 1e6));
    CHECK(kill((pid_t)pids[0], SIGCONT) == 0, "SIGCONT to rank 0: %s", strerror(errno));
    CHECK_STATUS(hvd_wait(req), HVD_ERR_TIMEOUT);
  }
  printf("rank %d: %s\n", R, hvd_last_error());
  fflush(stdout);
  free(pids);
}

static void bytes(void) {
  size_t n = 2 * 1024 * 1024;   /* floats: 8 MiB */
  float *b = calloc(n, sizeof(float));
  CHECK(b != NULL, "calloc");
  unsigned long long before = __atomic_load_n(&hvd_g.world->bytes_done, __ATOMIC_RELAXED);
  CHECK_OK(hvd_allreduce("big", b, b, n, HVD_FLOAT32, HVD_SUM));
  unsigned long long moved =
      __atomic_load_n(&hvd_g.world->bytes_done, __ATOMIC_RELAXED) - before;
  CHECK(moved >= n * sizeof(float), "rank %d: an allreduce of %zu bytes counted %llu bytes "
        "sent and received", R, n * sizeof(float), moved);
  printf("rank %d: %llu bytes sent and received\n", R, moved);
  free(b);
}

/* quiet, rank 0: its stderr (the watchdog's warnings) goes to an unlinked temporary
   file, read back to know when the warning about "z" is out, then copied to the real
   stderr at the end. */
static int log_fd = -1, saved_stderr = -1;

static void log_to_file(void) {
  char path[] = "/tmp/test_hvd_stall.XXXXXX";
  fflush(stderr);
  log_fd = mkstemp(path);
  CHECK(log_fd >= 0, "mkstemp: %s", strerror(errno));
  if (log_fd < 0) return;
  unlink(path);
  saved_stderr = dup(2);
  CHECK(saved_stderr >= 0 && dup2(log_fd, 2) == 2, "moving stderr to %s: %s", path,
        strerror(errno));
}

/* Whether the file holds text (what was written so far; 0 when it is not in use). */
static int log_has(const char *text) {
  static char buf[1 << 16];
  if (log_fd < 0) return 0;
  ssize_t n = pread(log_fd, buf, sizeof(buf) - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  return strstr(buf, text) != NULL;
}

static void log_restore(void) {
  if (log_fd < 0) return;
  fflush(stderr);
  if (saved_stderr >= 0) dup2(saved_stderr, 2);
  char buf[4096];
  ssize_t n;
  for (off_t at = 0; (n = pread(log_fd, buf, sizeof(buf), at)) > 0; at += n)
    if (write(2, buf, (size_t)n) != n) break;
  close(log_fd);
  if (saved_stderr >= 0) close(saved_stderr);
  log_fd = saved_stderr = -1;
}

static void quiet(void) {
  if (R == 0) log_to_file();
  size_t n = 2 * 1024 * 1024;   /* floats: 8 MiB, four times */
  float *b = calloc(n, sizeof(float));
  CHECK(b != NULL, "calloc");
  for (int i = 0; i < 4; i++) CHECK_OK(hvd_allreduce("big", b, b, n, HVD_FLOAT32, HVD_SUM));
  free(b);
  int64_t pid = (int64_t)getpid(), *pids = NULL;
  size_t np = 0;
  CHECK_OK(hvd_allgather("pids", &pid, 1, HVD_INT64, (void **)&pids, &np));
  CHECK(np == 2, "allgather of pids gave %zu", np);
  /* 16 MiB: rank 0's sends to the stopped rank cannot complete (too large to be
     buffered), so its transports count no byte while it waits, whatever the timing. */
  size_t zn = 4 * 1024 * 1024;
  int32_t *z = malloc(zn * sizeof(int32_t));
  CHECK(z != NULL, "malloc");
  for (size_t i = 0; i < zn; i++) z[i] = 1;
  hvd_request_t req;
  if (R == 1) {
    CHECK_OK(hvd_allreduce_async("z", z, z, zn, HVD_INT32, HVD_SUM, &req));
    /* Taken by the background thread, which sends it on in the same turn; then 1 s for
       it to reach the coordinator, which waits for rank 0's. */
    double until = util_now_s() + 20;
    while (atomic_load(&hvd_g.queued) > 0 && util_now_s() < until) usleep(10000);
    sleep(1);
    raise(SIGSTOP);    /* rank 0 continues it */
  } else {
    double until = util_now_s() + 20;
    while (!is_stopped((long)pids[1]) && util_now_s() < until) usleep(10000);
    CHECK(is_stopped((long)pids[1]), "rank 1 (pid %ld) did not stop", (long)pids[1]);
    CHECK_OK(hvd_allreduce_async("z", z, z, zn, HVD_INT32, HVD_SUM, &req));
    const char *warned = "the oldest request of this rank is allreduce \"z\"";
    until = util_now_s() + WARNING_WAIT_S;
    while (!log_has(warned) && util_now_s() < until) usleep(10000);
    CHECK(log_has(warned), "no watchdog warning about \"z\" within %.0f s", WARNING_WAIT_S);
    CHECK(kill((pid_t)pids[1], SIGCONT) == 0, "SIGCONT to rank 1: %s", strerror(errno));
  }
  CHECK_OK(hvd_wait(req));
  CHECK(z[0] == 2 && z[zn - 1] == 2, "rank %d: allreduce \"z\" gave %d ... %d, expected 2",
        R, (int)z[0], (int)z[zn - 1]);
  free(z);
  free(pids);
  log_restore();
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  if (strcmp(mode, "grace") == 0) grace();
  else if (strcmp(mode, "bytes") == 0) bytes();
  else if (strcmp(mode, "quiet") == 0) quiet();
  else CHECK(0, "unknown mode %s", mode);
  hvd_shutdown();
  return failures ? 1 : 0;
}

static char out[1 << 16];

static int expect(const char *what, int want) {
  int seen = strstr(out, what) != NULL;
  if (seen != want)
    printf("FAIL: the output %s \"%s\"\n", want ? "lacks" : "has", what);
  return seen == want;
}

/* quiet: rank 0's first watchdog warning about "z" (while rank 1 is stopped) says that
   nothing moved. Those about the 32 MiB before may rightly say "long collective" on a
   slow machine, as may later ones about "z": once rank 1 is continued, the 16 MiB move
   (slow under a sanitizer) while the background thread is still inside. */
static int first_warning_quiet(void) {
  const char *head = "[hvd rank 0] WARNING: ", *tail = "is allreduce \"z\"";
  const char *line = NULL;
  for (const char *p = strstr(out, head); p && !line; p = strstr(p + 1, head)) {
    const char *end = strchr(p, '\n'), *z = strstr(p, tail);
    if (z && (!end || z < end)) line = p;
  }
  if (!line) {
    printf("FAIL: rank 0 printed no watchdog warning about allreduce \"z\"\n");
    return 0;
  }
  const char *end = strchr(line, '\n');
  const char *want = "stall: rank 0 (host", *want2 = "waiting for its peers: no bytes sent "
                     "or received";
  const char *at = strstr(line, want), *at2 = strstr(line, want2);
  if (!at || !at2 || (end && (at > end || at2 > end))) {
    printf("FAIL: rank 0's first watchdog warning about \"z\" is not \"%s ...: %s\": "
           "%.400s\n", want, want2, line);
    return 0;
  }
  return 1;
}

/* The watchdog's warning text, both ways. */
static int warning_text(void) {
  char t[HVD_ERROR_MAX];
  int ok = 1;
  hvd_g.rank = 3;   /* this process never starts the runtime: as if it were rank 3 */
  hvd_stall_warning_text(t, sizeof(t), 61.0, 3ull << 29, 10.0, "allreduce \"big\"", 62.0);
  printf("%s\n", t);
  if (!strstr(t, "long collective: rank 3") || !strstr(t, "still moving data: 1.5 GiB sent "
      "and received over MPI in the last 10.0 s") || strstr(t, "waiting for its peers")) {
    printf("FAIL: the warning while 1.5 GiB moved reads: %s\n", t);
    ok = 0;
  }
  hvd_stall_warning_text(t, sizeof(t), 61.0, 0, 10.0, "allreduce \"big\"", 62.0);
  printf("%s\n", t);
  if (!strstr(t, "stall: rank 3") || !strstr(t, "waiting for its peers: no bytes sent or "
      "received over MPI in the last 10.0 s") || !strstr(t, "allreduce \"big\" (62.0 s)")) {
    printf("FAIL: the warning while nothing moved reads: %s\n", t);
    ok = 0;
  }
  return ok;
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body(argc > 1 ? argv[1] : "");
  if (!warning_text()) {
    printf("FAIL\n");
    return 1;
  }
  if (hvd_test_mpirun(argv[0], 2, "bytes", NULL, 60, NULL, 0) != 0) {
    printf("FAIL: bytes\n");
    return 1;
  }
  /* Peer timeout well past STOPPED_S: the stopped rank is stalled, not lost. No response
     cache: with it, rank 0 would run "z" only after a round with the stopped rank, and
     would wait between turns, not inside the collective. */
  if (hvd_test_mpirun(argv[0], 2, "quiet",
                      "HVD_STALL_CHECK_TIME_SECONDS=1 HVD_PEER_TIMEOUT_SECONDS=60 "
                      "HVD_CACHE_CAPACITY=0", 60, out, sizeof(out)) != 0) {
    printf("FAIL: quiet: the job failed\n");
    return 1;
  }
  if (!first_warning_quiet()) {
    printf("FAIL: quiet\n");
    return 1;
  }
  int rc = hvd_test_mpirun(argv[0], 2, "grace",
                           "HVD_STALL_SHUTDOWN_TIME_SECONDS=1 HVD_PEER_TIMEOUT_SECONDS=10", 60,
                           out, sizeof(out));
  int ok = rc == 0;
  if (rc != 0) printf("FAIL: the job exited %d\n", rc);
  ok &= expect("rank 1: the hvd runtime was shut down: stall shutdown: tensor \"x\" "
                "waited", 1);
  ok &= expect("for ranks 0 that never submitted it", 1);
  ok &= expect("rank 0: the hvd runtime was shut down: stall shutdown: tensor \"x\" "
                "waited", 1);
  ok &= expect("[hvd rank 0] WARNING: stall: 1 tensor(s)", 1);
  ok &= expect("allreduce \"x\": waiting", 1);
  ok &= expect("stall shutdown on rank", 0);
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
