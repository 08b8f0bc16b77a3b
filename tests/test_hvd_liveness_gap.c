/* test_hvd_liveness_gap: a background thread that was away longer than
   HVD_PEER_TIMEOUT_SECONDS (inside a long collective, which its peers were in too, so
   nobody sent heartbeats) does not suspect its peers when it comes back: their clocks
   restart (hvd/liveness.c). Without that, a collective that legitimately lasts longer
   than the timeout ends a healthy job in a census.

   Two ranks under mpirun, the liveness checks driven by hand on simulated time
   (hvd_liveness_tick takes the time as an argument; the runtime is not started):
   rank 0 ticks, is away 3 s (peer timeout 1 s), ticks again: no suspicion. Rank 1
   then stays silent while rank 0 ticks every 60 ms: rank 1 is suspected at the first
   tick more than 1 s after the restart, not earlier (the check still works after a
   gap). Rank 1 sends nothing throughout (it never ticks), so no heartbeat can hide a
   missing restart. The same with a peer timeout of 0.2 s and an absence of 0.3 s: an
   absence is longer than half the timeout, or 0.5 s, whichever is shorter; and with an
   absence of 0.15 s, between half the timeout and the whole of it (a gap of the whole
   timeout would miss it: rank 1 would then be suspected 0.03 s after the absence, the
   0.17 s before it counted against it). And a thread starved of the CPU (nice 19 on a
   loaded machine), whose every tick comes after a gap: the clock restarts only once
   per sign of life, so a silent rank 1 is still suspected (forgiven at every gap, a
   lost peer was never named and the job hung). */
#include "hvd/hvd_internal.h"
#include "hvd/liveness.h"
#include "hvd_test.h"

/* With HVD_PEER_TIMEOUT_SECONDS=timeout_s: away away_s, no suspicion; then ticks every
   step_s: rank 1 suspected at tick want_at (the first more than timeout_s after). */
static void absence(double timeout_s, double away_s, double step_s, int want_at) {
  char why[HVD_ERROR_MAX] = "";
  hvd_g.cfg.peer_timeout_s = timeout_s;
  CHECK(hvd_liveness_init() == HVD_OK, "hvd_liveness_init");
  double t = util_now_us() + 20e3;
  CHECK(!hvd_liveness_tick(t, why, sizeof(why)), "first tick suspected a peer: %s", why);
  t += away_s * 1e6;
  CHECK(!hvd_liveness_tick(t, why, sizeof(why)),
        "after the background thread was away %g s (HVD_PEER_TIMEOUT_SECONDS=%g) the first "
        "tick suspected a peer instead of restarting its clock: %s", away_s, timeout_s, why);
  int at = -1;
  for (int i = 1; i <= 2 * want_at && at < 0; i++)
    if (hvd_liveness_tick(t + i * step_s * 1e6, why, sizeof(why))) at = i;
  CHECK(at == want_at, "a silent rank 1 was suspected %.2f s after the restart, expected "
        "%.2f s (-1: never)", at < 0 ? -1.0 : at * step_s, want_at * step_s);
  CHECK(at < 0 || strstr(why, "no sign of life from rank 1") != NULL,
        "the suspicion does not name rank 1: %s", why);
  printf("rank 0: after a %g s absence no suspicion; then: %s\n", away_s, why);
  hvd_liveness_free();
}

static void rank0_checks(void) {
  /* Steps that fall clear of the timeout: tick 17 of 60 ms is the first past 1 s. */
  absence(1.0, 3.0, 0.06, 17);
  /* A timeout shorter than the fixed gap (0.5 s): an absence of 0.3 s counts as one. */
  absence(0.2, 0.3, 0.03, 7);
  /* An absence above half the timeout but below the whole: it counts as one too. */
  absence(0.2, 0.15, 0.03, 7);
  /* Starved: every tick 0.6 s after the last (each a gap): suspected at 1.2 s. */
  absence(1.0, 3.0, 0.6, 2);
}

static int body(void) {
  int provided = 0;
  CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS,
        "MPI_Init_thread");
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &hvd_g.rank) == MPI_SUCCESS &&
            MPI_Comm_size(MPI_COMM_WORLD, &hvd_g.size) == MPI_SUCCESS &&
            MPI_Comm_dup(MPI_COMM_WORLD, &hvd_g.ctrl) == MPI_SUCCESS,
        "MPI rank, size, dup");
  CHECK(hvd_g.size == 2, "run on 2 ranks, not %d", hvd_g.size);
  if (hvd_g.rank == 0) rank0_checks();
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
  /* Receive rank 0's heartbeats (any tag) so none is left unmatched at MPI_Finalize. */
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, hvd_g.ctrl, &flag, &st) != MPI_SUCCESS ||
        !flag)
      break;
    CHECK(MPI_Recv(NULL, 0, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, hvd_g.ctrl,
                   MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Recv");
  }
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
  MPI_Comm_free(&hvd_g.ctrl);
  MPI_Finalize();
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  (void)argc;
  if (hvd_test_is_rank()) return body();
  int rc = hvd_test_mpirun(argv[0], 2, "", NULL, 60, NULL, 0);
  printf(rc == 0 ? "PASS\n" : "FAIL (exit %d)\n", rc);
  return rc == 0 ? 0 : 1;
}
