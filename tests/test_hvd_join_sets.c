/* test_hvd_join_sets: hvd_join_ex, join within a process set, on 2-4 ranks, against MPI
   sub-communicators of the same ranks.
   Sets A = {0, 1} and B = {1, ..., N-1} overlap in rank 1, and each rank runs A's work
   and B's work on two threads, so the two sets join independently:
   - in A, rank 1 joins at once and rank 0 steps 3 times: rank 0's allreduces (SUM,
     AVERAGE, int32, fused) equal MPI's over A's communicator with rank 1 adding zeros,
     AVERAGE divided by A's size; hvd_join_ex returns world rank 0 as the last to join;
   - in B, member i steps 2 + i times (the last member, world rank N-1, joins last): every
     result equals MPI's with the joined members adding zeros; rank 1, joined in A all
     along (rank 0 holds A's join open until B's steps are done), steps in B with its real
     data, and B's broadcasts, while no member of B has joined, work;
   then: a broadcast, allgather and alltoall in a set with a joined member fail on every
   member calling them with HVD_ERR_INVALID_ARGUMENT naming hvd_join; a rank outside the
   set and an unknown set are refused at the call; hvd_join_ex(NULL) is the world's join;
   a repeated allreduce in B is answered by the response cache again after the joins.
   Mode "lost" (3 ranks, HVD_PEER_TIMEOUT_SECONDS=3): rank 1 waits in B's join while rank
   2 stops (SIGSTOP): rank 1's join and rank 0's barrier end with HVD_ERR_PEER_LOST
   naming rank 2, and the job ends, non-zero, well within its time limit. */
#include "hvd/hvd.h"
#include "hvd/hvd_internal.h"
#include "hvd_test.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>

static int R, N;

enum { LEN = 29, K = 3, MAX_STEPS = 8, TAG_GO = 71, TAG_B_DONE = 72 };

typedef struct {
  const char *label;
  int ranks[4], n;
  hvd_process_set_t id;
  MPI_Comm comm;     /* MPI's communicator of the same ranks (MPI_COMM_NULL outside) */
  int me;            /* this rank's index in the set, -1 outside */
  int steps;         /* steps this rank runs in the set before joining */
  int last;          /* what hvd_join_ex returned */
  /* The results of each step: SUM float32, AVERAGE float32, SUM int32. */
  float out[MAX_STEPS][2][LEN];
  int32_t iout[MAX_STEPS][LEN];
} set_t;

static set_t A = {.label = "A"}, B = {.label = "B"};

static float fval(int rank, size_t i, int step) {
  return (float)((i * 5 + (size_t)rank * 3 + (size_t)step * 7) % 9) - 3.0f;
}

static void add_set(set_t *s) {
  s->me = -1;
  for (int i = 0; i < s->n; i++)
    if (s->ranks[i] == R) s->me = i;
  CHECK_OK(hvd_process_set_add(s->ranks, s->n, &s->id));
  MPI_Comm_split(MPI_COMM_WORLD, s->me >= 0 ? 1 : MPI_UNDEFINED, R, &s->comm);
}

/* One step in s: three allreduces at once (they fuse), all of this rank's data. */
static void step(set_t *s, int t) {
  hvd_options_t o = {.process_set = s->id};
  float in[2][LEN];
  int32_t iin[LEN];
  for (size_t i = 0; i < LEN; i++) {
    in[0][i] = in[1][i] = fval(R, i, t);
    iin[i] = (int32_t)fval(R, i, t + 50);
  }
  hvd_request_t req[K];
  CHECK_OK(hvd_allreduce_async_ex("js.sum", in[0], s->out[t][0], LEN, HVD_FLOAT32, HVD_SUM,
                                  &o, &req[0]));
  CHECK_OK(hvd_allreduce_async_ex("js.avg", in[1], s->out[t][1], LEN, HVD_FLOAT32,
                                  HVD_AVERAGE, &o, &req[1]));
  CHECK_OK(hvd_allreduce_async_ex("js.int", iin, s->iout[t], LEN, HVD_INT32, HVD_SUM, &o,
                                  &req[2]));
  for (int k = 0; k < K; k++) CHECK_OK(hvd_wait(req[k]));
}

/* B's broadcasts while every member still steps: from the set's last rank. */
static void broadcast_in_b(int t) {
  hvd_options_t o = {.process_set = B.id};
  int32_t v[3] = {R, t, -1}, want[3] = {B.ranks[B.n - 1], t, -1};
  CHECK_OK(hvd_broadcast_ex("js.bcast", v, 3, HVD_INT32, B.n - 1, &o));
  CHECK(memcmp(v, want, sizeof(v)) == 0, "rank %d, B step %d: broadcast gave %d %d %d", R,
        t, v[0], v[1], v[2]);
}

static void *run_a(void *arg) {
  (void)arg;
  hvd_options_t o = {.process_set = A.id};
  for (int t = 0; t < A.steps; t++) {
    step(&A, t);
    /* Rank 1 has joined A (step 0 could not be answered before): B may step now; A's
       join stays open until B's steps are done. */
    if (t == 0 && B.n > 1) {
      int go = 1;
      MPI_Send(&go, 1, MPI_INT, 1, TAG_GO, MPI_COMM_WORLD);
      MPI_Recv(&go, 1, MPI_INT, 1, TAG_B_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
  A.last = -7;
  CHECK_OK(hvd_join_ex(&A.last, &o));
  return NULL;
}

static void *run_b(void *arg) {
  (void)arg;
  hvd_options_t o = {.process_set = B.id};
  int go = 0;
  if (R == 1 && B.n > 1)
    MPI_Recv(&go, 1, MPI_INT, 0, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int t = 0; t < B.steps; t++) {
    if (t < 2) broadcast_in_b(t);   /* every member steps at least twice */
    step(&B, t);
  }
  if (R == 1 && B.n > 1) MPI_Send(&go, 1, MPI_INT, 0, TAG_B_DONE, MPI_COMM_WORLD);
  B.last = -7;
  CHECK_OK(hvd_join_ex(&B.last, &o));
  return NULL;
}

/* Every step of s against MPI over s's communicator, with zeros from the members that
   had joined by then; and the last rank to join. */
static void verify(set_t *s, int last_world_rank) {
  int most = 0;
  MPI_Allreduce(&s->steps, &most, 1, MPI_INT, MPI_MAX, s->comm);
  for (int t = 0; t < most; t++) {
    float in[LEN], want[2][LEN];
    int32_t iin[LEN], iwant[LEN];
    for (size_t i = 0; i < LEN; i++) {
      int here = t < s->steps;
      in[i] = here ? fval(R, i, t) : 0.0f;
      iin[i] = here ? (int32_t)fval(R, i, t + 50) : 0;
    }
    MPI_Allreduce(in, want[0], LEN, MPI_FLOAT, MPI_SUM, s->comm);
    MPI_Allreduce(iin, iwant, LEN, MPI_INT32_T, MPI_SUM, s->comm);
    for (size_t i = 0; i < LEN; i++) want[1][i] = want[0][i] / (float)s->n;
    if (t >= s->steps) continue;
    CHECK(memcmp(s->out[t][0], want[0], sizeof(want[0])) == 0,
          "rank %d, set %s, step %d: SUM differs from MPI's with zeros from the joined "
          "(element 0: %g, expected %g)", R, s->label, t, s->out[t][0][0], want[0][0]);
    CHECK(memcmp(s->out[t][1], want[1], sizeof(want[1])) == 0,
          "rank %d, set %s, step %d: AVERAGE differs from MPI's sum / %d (element 0: %g, "
          "expected %g)", R, s->label, t, s->n, s->out[t][1][0], want[1][0]);
    CHECK(memcmp(s->iout[t], iwant, sizeof(iwant)) == 0,
          "rank %d, set %s, step %d: int32 SUM differs from MPI's (element 0: %d, "
          "expected %d)", R, s->label, t, s->iout[t][0], iwant[0]);
  }
  CHECK(s->last == last_world_rank, "rank %d: hvd_join_ex in set %s returned last rank %d, "
        "expected world rank %d", R, s->label, s->last, last_world_rank);
}

/* The set's last member joins at once; the others try the collectives join refuses. */
static void refused_under_join(const set_t *s) {
  hvd_options_t o = {.process_set = s->id};
  int last = -7;
  if (s->me != s->n - 1) {
    float b[4] = {1, 2, 3, 4};
    CHECK_STATUS(hvd_broadcast_ex("js.refused.bcast", b, 4, HVD_FLOAT32, 0, &o),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hvd_last_error(), "broadcast") && strstr(hvd_last_error(), "hvd_join"),
          "rank %d: the error does not name broadcast and hvd_join: %s", R, hvd_last_error());
    void *out = NULL;
    size_t n = 0;
    CHECK_STATUS(hvd_allgather_ex("js.refused.gather", b, 2, HVD_FLOAT32, &out, &n, &o),
                 HVD_ERR_INVALID_ARGUMENT);
    free(out);
    out = NULL;
    CHECK_STATUS(hvd_alltoall_ex("js.refused.a2a", b, (size_t)s->n, NULL, HVD_FLOAT32, &out,
                                 &n, NULL, &o),
                 HVD_ERR_INVALID_ARGUMENT);
    free(out);
  }
  CHECK_OK(hvd_join_ex(&last, &o));
  /* The last to join is one of those that called the refused collectives first. */
  int lo = last, hi = last;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, s->comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, s->comm);
  CHECK(lo == hi && last >= s->ranks[0] && last < s->ranks[s->n - 1],
        "rank %d, set %s: last rank %d (from %d to %d on the members), expected the same "
        "world rank from %d to %d on every member", R, s->label, last, lo, hi, s->ranks[0],
        s->ranks[s->n - 1] - 1);
}

static void refusals(void) {
  int last = -7;
  hvd_options_t o = {.process_set = B.id};
  if (B.me < 0) {
    CHECK_STATUS(hvd_join_ex(&last, &o), HVD_ERR_INVALID_ARGUMENT);
    CHECK(last == -7, "rank %d: a refused join wrote last rank %d", R, last);
  }
  hvd_options_t unknown = {.process_set = 99};
  CHECK_STATUS(hvd_join_ex(&last, &unknown), HVD_ERR_INVALID_ARGUMENT);
}

/* The response cache answers B's repeated allreduce again once the joins are over. */
static void cached_after(void) {
  hvd_options_t o = {.process_set = B.id};
  float v[LEN], want[LEN];
  unsigned long long before = 0;
  for (int rep = 0; rep < 4; rep++) {
    if (rep == 1) before = atomic_load(&hvd_g.stat_cached);
    for (size_t i = 0; i < LEN; i++) v[i] = fval(R, i, 90 + rep);
    MPI_Allreduce(v, want, LEN, MPI_FLOAT, MPI_SUM, B.comm);
    CHECK_OK(hvd_allreduce_ex("js.cached", v, v, LEN, HVD_FLOAT32, HVD_SUM, &o));
    CHECK(memcmp(v, want, sizeof(v)) == 0, "rank %d: cached allreduce differs", R);
  }
  unsigned long long hits = atomic_load(&hvd_g.stat_cached) - before;
  CHECK(hits >= 3, "rank %d: %llu of the 3 repeated allreduces in B were cache hits", R, hits);
}

static int body(void) {
  for (int r = 0; r < 2 && r < N; r++) A.ranks[A.n++] = r;
  for (int r = 1; r < N; r++) B.ranks[B.n++] = r;
  add_set(&A);
  add_set(&B);
  A.steps = R == 0 ? 3 : 0;
  B.steps = B.me >= 0 ? 2 + B.me : 0;
  pthread_t ta, tb;
  if (A.me >= 0) CHECK(pthread_create(&ta, NULL, run_a, NULL) == 0, "pthread_create");
  if (B.me >= 0) CHECK(pthread_create(&tb, NULL, run_b, NULL) == 0, "pthread_create");
  if (A.me >= 0) pthread_join(ta, NULL);
  if (B.me >= 0) pthread_join(tb, NULL);
  if (A.me >= 0) verify(&A, 0);
  if (B.me >= 0) verify(&B, N - 1);
  if (B.n > 1 && B.me >= 0) refused_under_join(&B);
  if (A.me >= 0) refused_under_join(&A);
  refusals();
  int last = -7;
  CHECK_OK(hvd_join_ex(&last, NULL));   /* the world's join: everyone at once */
  CHECK(last >= 0 && last < N, "rank %d: the world's join returned %d", R, last);
  if (B.me >= 0) cached_after();
  CHECK_OK(hvd_barrier());   /* a rank's hvd_shutdown ends the others' runtime too */
  return 0;
}

/* Rank 2 (of B = {1, 2}) stops while rank 1 waits in B's join. */
static int lost(void) {
  int ranks[2] = {1, 2}, last = -7;
  hvd_process_set_t b = 0;
  CHECK_OK(hvd_process_set_add(ranks, 2, &b));
  hvd_options_t o = {.process_set = b};
  CHECK_OK(hvd_barrier());
  if (R == 2) {
    raise(SIGSTOP);
    return 3;   /* mpirun ends it: nothing to check */
  }
  hvd_status_t s = R == 1 ? hvd_join_ex(&last, &o) : hvd_barrier();
  CHECK(s == HVD_ERR_PEER_LOST && strstr(hvd_last_error(), "rank 2 (host "),
        "rank %d: %s (%s), expected HVD_ERR_PEER_LOST naming rank 2", R,
        hvd_status_string(s), hvd_last_error());
  printf("rank %d: lost member seen: %s\n", R, hvd_last_error());
  fflush(stdout);
  /* Both survivors have seen it before either exits (mpirun then ends the job). */
  int token = R, other = -1;
  MPI_Sendrecv(&token, 1, MPI_INT, 1 - R, 0, &other, 1, MPI_INT, 1 - R, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  return 0;
}

static int launch(const char *self) {
  for (int np = 2; np <= 4; np++)
    if (hvd_test_mpirun(self, np, "", "HVD_FUSION_THRESHOLD=4096", 60, NULL, 0) != 0) {
      printf("FAIL at np=%d\n", np);
      return 1;
    }
  static char out[1 << 16];
  int rc = hvd_test_mpirun(self, 3, "lost", "HVD_PEER_TIMEOUT_SECONDS=3", 60, out,
                           sizeof(out));
  int seen = 0;
  for (const char *p = out; (p = strstr(p, "lost member seen")) != NULL; p++) seen++;
  if (rc == 0 || rc == 124 || rc == 137 || seen != 2 || strstr(out, ": FAIL ")) {
    printf("FAIL lost: exit %d (expected the job to fail, not to time out), %d of 2 "
           "survivors saw the lost member\n", rc, seen);
    return 1;
  }
  printf("join per process set equals MPI sub-communicators on 2-4 ranks; a lost member "
         "ends the join\n");
  return 0;
}

int main(int argc, char **argv) {
  if (!hvd_test_is_rank()) {
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) snprintf(self, sizeof(self), "%s", argv[0]);
    return launch(self);
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK(provided == MPI_THREAD_MULTIPLE, "MPI gives thread level %d", provided);
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  if (argc > 1 && strcmp(argv[1], "lost") == 0) {
    lost();
    hvd_shutdown();
    _exit(0);   /* MPI_Finalize would wait for the stopped rank */
  }
  body();
  if (A.comm != MPI_COMM_NULL) MPI_Comm_free(&A.comm);
  if (B.comm != MPI_COMM_NULL) MPI_Comm_free(&B.comm);
  CHECK_OK(hvd_shutdown());
  MPI_Finalize();
  printf("rank %d of %d: ok\n", R, N);
  return 0;
}
