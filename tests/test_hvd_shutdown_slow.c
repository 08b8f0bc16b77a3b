/* test_hvd_shutdown_slow: rank 0's hvd_shutdown waits for a worker that is slow to
   acknowledge, as long as the worker is alive, and no longer than the peer timeout for
   one that is gone (2 ranks).
     slow: rank 0 stops rank 1 (SIGSTOP: its background thread does not run, as one at
           nice 19 on a loaded machine may not) and calls hvd_shutdown; a thread of rank 0
           continues rank 1 5 s later (longer than the 3 s rank 0 waits at first, shorter
           than the peer timeout of 10 s). The shutdown is clean: both ranks' hvd_shutdown
           return HVD_OK, no "acknowledged" warning, the job exits 0.
     dead: the same with rank 1 never continued and HVD_PEER_TIMEOUT_SECONDS=3: rank 0's
           wait for the acknowledgement ends within the peer timeout plus 3 s (its warning
           says how long it waited; checked with 10 s to spare for a loaded machine), its
           hvd_shutdown returns, and the job ends (non-zero: rank 1 never finished). */
#include "hvd_test.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>

static void wait_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  for (int i = 0; i < 1000; i++) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');   /* "pid (comm) S ..." */
    if (p && p[1] == ' ' && p[2] == 'T') return;
    usleep(10000);
  }
  CHECK(0, "rank 1 (pid %ld) did not stop", (long)pid);
}

static pid_t victim;
static void *continue_later(void *arg) {
  (void)arg;
  sleep(5);
  kill(victim, SIGCONT);
  return NULL;
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  int r = hvd_rank(), slow = strcmp(mode, "slow") == 0;
  int64_t pid = (int64_t)getpid(), pids[2] = {0, 0};
  void *all = NULL;
  size_t n = 0;
  hvd_status_t s = hvd_allgather("pids", &pid, 1, HVD_INT64, &all, &n);
  if (r == 1) {   /* stopped from here on (by rank 0), until continued or ended */
    free(all);
    if (s == HVD_OK) s = hvd_shutdown();
    if (!slow) return 0;   /* given up as lost: nothing to check */
    CHECK(s == HVD_OK, "rank 1: %s (%s)", hvd_status_string(s), hvd_last_error());
    printf("rank 1: shutdown ok\n");
    return 0;
  }
  CHECK(s == HVD_OK && n == 2, "rank 0: allgather: %s (%s)", hvd_status_string(s),
        hvd_last_error());
  memcpy(pids, all, sizeof(pids));
  free(all);
  victim = (pid_t)pids[1];
  CHECK(kill(victim, SIGSTOP) == 0, "kill(%ld, SIGSTOP)", (long)victim);
  wait_stopped(victim);
  pthread_t t;
  if (slow) CHECK(pthread_create(&t, NULL, continue_later, NULL) == 0, "pthread_create");
  s = hvd_shutdown();
  if (slow) {
    pthread_join(t, NULL);
    CHECK(s == HVD_OK, "rank 0: hvd_shutdown: %s (%s)", hvd_status_string(s),
          hvd_last_error());
  }
  printf("rank 0: shutdown returned\n");
  fflush(stdout);
  if (!slow) _exit(0);   /* MPI is left unfinalized after the loss: mpirun ends the job */
  return 0;
}

/* The seconds rank 0's warning says it waited (-1: no warning). */
static double waited(const char *out) {
  const char *p = strstr(out, "ranks acknowledged within ");
  return p ? atof(p + strlen("ranks acknowledged within ")) : -1;
}

static int launch(const char *self) {
  static char out[1 << 16];
  int ok = 1;
  int rc = hvd_test_mpirun(self, 2, "slow", "HVD_PEER_TIMEOUT_SECONDS=10", 60, out,
                           sizeof(out));
  if (rc != 0 || strstr(out, "acknowledged") || !strstr(out, "rank 0: shutdown returned") ||
      !strstr(out, "rank 1: shutdown ok")) {
    printf("FAIL slow: exit %d; expected a clean shutdown, both ranks ok, no "
           "\"acknowledged\" warning\n", rc);
    ok = 0;
  }
  rc = hvd_test_mpirun(self, 2, "dead", "HVD_PEER_TIMEOUT_SECONDS=3", 60, out, sizeof(out));
  double w = waited(out);
  if (rc == 0 || rc == 124 || rc == 137 || !strstr(out, "rank 0: shutdown returned") ||
      w < 0 || w > 3 + 3 + 10) {
    printf("FAIL dead: exit %d, rank 0 waited %.1f s for the acknowledgement; expected the "
           "job to end (not by the time limit), the warning, and about 6 s at most (the "
           "peer timeout of 3 s plus 3)\n", rc, w);
    ok = 0;
  }
  if (ok) printf("shutdown waits for a slow worker and not for a dead one\n");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (!hvd_test_is_rank()) {
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) snprintf(self, sizeof(self), "%s", argv[0]);
    return launch(self);
  }
  return body(argc > 1 ? argv[1] : "slow");
}
