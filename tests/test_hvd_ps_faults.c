/* test_hvd_ps_faults: a lost parameter server or worker ends every survivor's calls with
   HVD_ERR_PEER_LOST naming it, within the peer timeout (HVD_PEER_TIMEOUT_SECONDS=3),
   and nothing hangs: 3 ranks, a dedicated server (rank 0) and two workers in sync mode.
     stop_server: rank 0 stops itself (SIGSTOP) after 5 steps; both workers, waiting for
                  its answer, get PEER_LOST naming rank 0.
     stop_worker: rank 2 stops itself after 5 steps; the other worker (waiting for the
                  step rank 2 never pushes) and the server (serving in hvd_ps_finish)
                  get PEER_LOST naming rank 2.
   Started alone, it runs both under mpirun and checks the output, the time the job took
   and that no rank is left. */
#include "hvd_test.h"

#include <limits.h>
#include <signal.h>

static char self_path[1024];

static void sgd(void *ctx, size_t var, size_t offset, float *values, float *grad,
                size_t count, uint64_t version) {
  (void)ctx, (void)var, (void)offset, (void)version;
  for (size_t i = 0; i < count; i++) values[i] -= 0.1f * grad[i];
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  int R = hvd_rank(), victim = strcmp(mode, "stop_server") == 0 ? 0 : 2;
  const char *const names[] = {"w", "b"};
  const size_t counts[] = {4096, 16};
  static float values[4112], grads[4112];
  hvd_ps_config_t cfg = {HVD_PS_SYNC, 1, HVD_PS_GREEDY, 0, -1, sgd, NULL, HVD_PS_AGG_AUTO};
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, 2, names, counts, NULL));
  hvd_status_t s = HVD_OK;
  if (R == 0 && victim == 0) {
    sleep(1);   /* the workers run a few steps */
    raise(SIGSTOP);
    return 3;   /* mpirun continues it to end it */
  }
  if (R == 0) {
    s = hvd_ps_finish(ps);
  } else {
    for (int t = 0; t < 100000 && s == HVD_OK; t++) {
      if (R == victim && t == 5) {
        raise(SIGSTOP);
        return 3;
      }
      s = hvd_ps_push_pull(ps, 0, 2, grads, values);
    }
  }
  CHECK(s == HVD_ERR_PEER_LOST, "rank %d: status %s (%s), expected PEER_LOST", R,
        hvd_status_string(s), hvd_last_error());
  char want[64];
  snprintf(want, sizeof(want), "rank %d (host ", victim);
  CHECK(strstr(hvd_last_error(), want) != NULL, "rank %d: message \"%s\" does not name %s",
        R, hvd_last_error(), want);
  printf("rank %d: %s: %s\n", R, hvd_status_string(s), hvd_last_error());
  fflush(stdout);
  hvd_ps_free(ps);
  hvd_shutdown();
  sleep(1);   /* the other survivor prints too before mpirun ends the job */
  return 3;   /* a program's error path */
}

static char out[1 << 16];

static int run(const char *mode, int victim) {
  double t0 = util_now_s();
  int rc = hvd_test_mpirun(self_path, 3, mode, "HVD_PEER_TIMEOUT_SECONDS=3", 60, out,
                           sizeof(out));
  double took = util_now_s() - t0;
  int ok = 1;
  char want[128], cmd[2048];
  int seen = 0;
  for (int r = 0; r < 3; r++) {   /* each survivor's own line */
    if (r == victim) continue;
    snprintf(want, sizeof(want), "rank %d: HVD_ERR_PEER_LOST: lost 1 rank(s): rank %d (host ",
             r, victim);
    if (strstr(out, want)) seen++;
    else printf("FAIL %s: no \"%s\" in the output\n", mode, want);
  }
  printf("%s: exit %d after %.1f s, %d survivor(s) named rank %d\n", mode, rc, took, seen,
         victim);
  if (rc == 0 || rc == 124 || rc == 137) { printf("FAIL %s: exit status %d\n", mode, rc); ok = 0; }
  if (seen < 2) ok = 0;
  if (strstr(out, ": FAIL ")) { printf("FAIL %s: a rank's check failed\n", mode); ok = 0; }
  /* Within the timeout: 3 s of silence, the census, hvd_shutdown, mpirun's teardown. */
  if (took > 40) { printf("FAIL %s: the job took %.1f s\n", mode, took); ok = 0; }
  snprintf(cmd, sizeof(cmd), "sleep 1; pgrep -f '%s %s$' >/dev/null", self_path, mode);
  if (system(cmd) == 0) {
    printf("FAIL %s: a rank is still running after the job ended\n", mode);
    snprintf(cmd, sizeof(cmd), "pkill -KILL -f '%s %s$'", self_path, mode);
    if (system(cmd) != 0) printf("(pkill found nothing)\n");
    ok = 0;
  }
  return ok;
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body(argc > 1 ? argv[1] : "");
  if (!realpath(argv[0], self_path)) snprintf(self_path, sizeof(self_path), "%s", argv[0]);
  int ok = run("stop_server", 0);
  ok = run("stop_worker", 2) && ok;
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
