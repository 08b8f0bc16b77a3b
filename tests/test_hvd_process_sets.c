/* test_hvd_process_sets: process sets (hvd_process_set_add and the _ex collectives)
   against MPI sub-communicators of the same ranks, on 1-4 ranks.
   Overlapping sets (the even ranks, ranks 1.., ranks {0, 1}, the last rank alone) run
   every collective (allreduce with SUM/AVERAGE/MAX, fused and alone, in different orders
   on different ranks; grouped allreduce; broadcast from the set's last rank; allgather
   and alltoall with per-rank amounts; reducescatter; barrier), and the results must equal
   MPI's on a communicator of the set's ranks, bit for bit (integer-valued data). The
   prescale/postscale factors scale as Horovod's. A count that differs inside a set is a
   mismatch on every rank of the set, naming the set, and the runtime goes on; a rank
   outside a set, an unknown or removed set, and lists that differ between the ranks are
   refused. A set's repeated allreduce is answered by the response cache (hits counted
   on its ranks) with the same results. */
#include "hvd/hvd.h"
#include "hvd/hvd_internal.h"
#include "hvd_test.h"

#include <mpi.h>

static int R, N;

typedef struct {
  int ranks[4], n;
  hvd_process_set_t id;
  MPI_Comm comm;     /* MPI's communicator of the same ranks (MPI_COMM_NULL outside) */
  int me;            /* this rank's index in the set, -1 outside */
} set_t;

static float fval(int rank, size_t i, int salt) {
  return (float)((i * 5 + (size_t)rank * 3 + (size_t)salt) % 7) - 2.0f;
}

static void check_same(const void *got, const void *want, size_t bytes, const char *what,
                       const set_t *s) {
  CHECK(memcmp(got, want, bytes) == 0, "set {%d..%d} (%d ranks), %s: hvd's result differs "
        "from MPI's", s->ranks[0], s->ranks[s->n - 1], s->n, what);
}

static void allreduces(const set_t *s, int salt) {
  enum { LEN = 37, K = 3 };
  static const hvd_op_t ops[K] = {HVD_SUM, HVD_AVERAGE, HVD_MAX};
  float in[K][LEN], out[K][LEN], want[K][LEN];
  hvd_options_t o = {.process_set = s->id};
  hvd_request_t req[K];
  char name[K][32];
  for (int k = 0; k < K; k++) {
    for (size_t i = 0; i < LEN; i++) in[k][i] = fval(R, i, salt + k);
    snprintf(name[k], sizeof(name[k]), "ar.%d", k);
  }
  /* Submitted in different orders on different ranks, negotiated (and fused) alike. */
  for (int j = 0; j < K; j++) {
    int k = (j + R) % K;
    CHECK_OK(hvd_allreduce_async_ex(name[k], in[k], out[k], LEN, HVD_FLOAT32, ops[k], &o,
                                    &req[k]));
  }
  for (int k = 0; k < K; k++) CHECK_OK(hvd_wait(req[k]));
  MPI_Allreduce(in[0], want[0], LEN, MPI_FLOAT, MPI_SUM, s->comm);
  MPI_Allreduce(in[1], want[1], LEN, MPI_FLOAT, MPI_SUM, s->comm);
  for (size_t i = 0; i < LEN; i++) want[1][i] /= (float)s->n;
  MPI_Allreduce(in[2], want[2], LEN, MPI_FLOAT, MPI_MAX, s->comm);
  check_same(out[0], want[0], sizeof(out[0]), "allreduce sum", s);
  check_same(out[1], want[1], sizeof(out[1]), "allreduce average", s);
  check_same(out[2], want[2], sizeof(out[2]), "allreduce max", s);

  /* Unnamed and in place, int32. */
  int32_t iv[5], iw[5];
  for (int i = 0; i < 5; i++) iv[i] = iw[i] = R * 10 + i;
  CHECK_OK(hvd_allreduce_ex(NULL, iv, iv, 5, HVD_INT32, HVD_SUM, &o));
  MPI_Allreduce(MPI_IN_PLACE, iw, 5, MPI_INT32_T, MPI_SUM, s->comm);
  check_same(iv, iw, sizeof(iv), "unnamed int32 allreduce", s);

  /* Factors: (2 x) summed, then x 0.25. */
  hvd_options_t f = {.process_set = s->id, .prescale_factor = 2.0, .postscale_factor = 0.25};
  CHECK_OK(hvd_allreduce_ex("scaled", in[0], out[0], LEN, HVD_FLOAT32, HVD_SUM, &f));
  for (size_t i = 0; i < LEN; i++) want[0][i] = want[0][i] * 2.0f * 0.25f;
  check_same(out[0], want[0], sizeof(out[0]), "allreduce with prescale 2, postscale 0.25", s);

  /* Grouped: two tensors as one. */
  const void *sb[2] = {in[0], in[1]};
  void *rb[2] = {out[0], out[1]};
  size_t counts[2] = {LEN, 11};
  const char *names[2] = {"g.a", "g.b"};
  CHECK_OK(hvd_grouped_allreduce_ex(2, names, sb, rb, counts, HVD_FLOAT32, HVD_SUM, &o));
  MPI_Allreduce(in[0], want[0], LEN, MPI_FLOAT, MPI_SUM, s->comm);
  MPI_Allreduce(in[1], want[1], 11, MPI_FLOAT, MPI_SUM, s->comm);
  check_same(out[0], want[0], sizeof(out[0]), "grouped allreduce (first)", s);
  check_same(out[1], want[1], 11 * sizeof(float), "grouped allreduce (second)", s);
}

static void others(const set_t *s, int salt) {
  hvd_options_t o = {.process_set = s->id};
  /* broadcast from the set's last rank */
  float b[9], bw[9];
  for (int i = 0; i < 9; i++) b[i] = bw[i] = fval(R, (size_t)i, salt);
  CHECK_OK(hvd_broadcast_ex("bc", b, 9, HVD_FLOAT32, s->n - 1, &o));
  MPI_Bcast(bw, 9, MPI_FLOAT, s->n - 1, s->comm);
  check_same(b, bw, sizeof(b), "broadcast", s);

  /* allgather: set rank i sends i + 1 elements */
  int mine = s->me + 1;
  float g[4];
  for (int i = 0; i < mine; i++) g[i] = fval(R, (size_t)i, salt + 1);
  void *out = NULL;
  size_t outn = 0;
  CHECK_OK(hvd_allgather_ex("ag", g, (size_t)mine, HVD_FLOAT32, &out, &outn, &o));
  int rc[4], displ[4], total = 0;
  for (int i = 0; i < s->n; i++) {
    rc[i] = i + 1;
    displ[i] = total;
    total += rc[i];
  }
  float gw[16];
  MPI_Allgatherv(g, mine, MPI_FLOAT, gw, rc, displ, MPI_FLOAT, s->comm);
  CHECK(outn == (size_t)total, "allgather: %zu elements, MPI has %d", outn, total);
  check_same(out, gw, (size_t)total * sizeof(float), "allgather", s);
  free(out);

  /* alltoall: to set rank j, j + 1 elements */
  size_t splits[4], recv_splits[4];
  int sc[4], sd[4], rcv[4], rd[4], st = 0, rt = 0;
  float a[16], aw[16];
  for (int j = 0; j < s->n; j++) {
    splits[j] = (size_t)j + 1;
    sc[j] = j + 1;
    sd[j] = st;
    st += sc[j];
    rcv[j] = s->me + 1;
    rd[j] = rt;
    rt += rcv[j];
  }
  for (int i = 0; i < st; i++) a[i] = fval(R, (size_t)i, salt + 2);
  CHECK_OK(hvd_alltoall_ex("a2a", a, (size_t)st, splits, HVD_FLOAT32, &out, &outn,
                           recv_splits, &o));
  MPI_Alltoallv(a, sc, sd, MPI_FLOAT, aw, rcv, rd, MPI_FLOAT, s->comm);
  CHECK(outn == (size_t)rt, "alltoall: %zu elements, MPI has %d", outn, rt);
  check_same(out, aw, (size_t)rt * sizeof(float), "alltoall", s);
  for (int j = 0; j < s->n; j++)
    CHECK(recv_splits[j] == (size_t)rcv[j], "alltoall: %zu from set rank %d, expected %d",
          recv_splits[j], j, rcv[j]);
  free(out);

  /* reducescatter of 10 elements: the first 10 % n set ranks get one more */
  float rs[10], rso[10], rsw[10];
  int counts[4];
  for (int i = 0; i < 10; i++) rs[i] = fval(R, (size_t)i, salt + 3);
  for (int j = 0; j < s->n; j++) counts[j] = 10 / s->n + (j < 10 % s->n);
  size_t got = 0;
  CHECK_OK(hvd_reducescatter_ex("rs", rs, 10, HVD_FLOAT32, HVD_SUM, rso, &got, &o));
  MPI_Reduce_scatter(rs, rsw, counts, MPI_FLOAT, MPI_SUM, s->comm);
  CHECK(got == (size_t)counts[s->me], "reducescatter: %zu elements, expected %d", got,
        counts[s->me]);
  check_same(rso, rsw, got * sizeof(float), "reducescatter", s);

  CHECK_OK(hvd_barrier_ex(&o));
}

/* Every set of this rank at once, under one name: the coordinator sees several sets'
   tensors ready together and must neither fuse nor mix them. */
static void overlapping(const set_t *sets, int nsets) {
  enum { LEN = 6 };
  float in[4][LEN], out[4][LEN], want[LEN];
  hvd_request_t req[4];
  for (int k = 0; k < nsets; k++) {
    if (sets[k].me < 0) continue;
    hvd_options_t o = {.process_set = sets[k].id};
    for (size_t i = 0; i < LEN; i++) in[k][i] = fval(R, i, 40 + k);
    CHECK_OK(hvd_allreduce_async_ex("ov", in[k], out[k], LEN, HVD_FLOAT32, HVD_SUM, &o,
                                    &req[k]));
  }
  for (int k = 0; k < nsets; k++) {
    if (sets[k].me < 0) continue;
    CHECK_OK(hvd_wait(req[k]));
    MPI_Allreduce(in[k], want, LEN, MPI_FLOAT, MPI_SUM, sets[k].comm);
    check_same(out[k], want, sizeof(want), "overlapping sets in flight together", &sets[k]);
  }
}

/* A count that differs inside the set: HVD_ERR_MISMATCH on every rank of it. */
static void mismatch(const set_t *s) {
  if (s->n < 2) return;
  hvd_options_t o = {.process_set = s->id};
  float v[12] = {0};
  size_t count = s->me == 0 ? 10 : 12;
  CHECK_STATUS(hvd_allreduce_ex("mm", v, v, count, HVD_FLOAT32, HVD_SUM, &o),
               HVD_ERR_MISMATCH);
  char want[64];
  snprintf(want, sizeof(want), "(process set %d)", (int)s->id);
  CHECK(strstr(hvd_last_error(), "counts") && strstr(hvd_last_error(), want),
        "the mismatch message names the counts and %s: %s", want, hvd_last_error());
}

static void refusals(const set_t *sets, int nsets) {
  float v[2] = {1, 2};
  for (int k = 0; k < nsets; k++) {
    if (sets[k].me >= 0) continue;
    hvd_options_t o = {.process_set = sets[k].id};
    CHECK_STATUS(hvd_allreduce_ex("out", v, v, 2, HVD_FLOAT32, HVD_SUM, &o),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hvd_last_error(), "not in process set") != NULL, "message: %s",
          hvd_last_error());
    CHECK(hvd_process_set_rank(sets[k].id) == -1, "rank in a set it is not in: %d",
          hvd_process_set_rank(sets[k].id));
  }
  hvd_options_t unknown = {.process_set = 999};
  CHECK_STATUS(hvd_barrier_ex(&unknown), HVD_ERR_INVALID_ARGUMENT);
  CHECK(hvd_process_set_size(999) == -1, "size of an unknown set");
  hvd_options_t bad = {.prescale_factor = 2.0};
  int32_t iv[2] = {1, 2};
  CHECK_STATUS(hvd_allreduce_ex("int.scaled", iv, iv, 2, HVD_INT32, HVD_SUM, &bad),
               HVD_ERR_INVALID_ARGUMENT);
  /* Lists that differ between the ranks, and an unsorted one. */
  hvd_process_set_t id;
  if (N >= 2) {
    int mine[1] = {R == 0 ? 0 : 1};
    CHECK_STATUS(hvd_process_set_add(mine, 1, &id), HVD_ERR_MISMATCH);
    int unsorted[2] = {1, 0};
    CHECK_STATUS(hvd_process_set_add(unsorted, 2, &id), HVD_ERR_INVALID_ARGUMENT);
  }
  /* The world's collectives still work, as the _ex form with set 0 and with NULL. */
  hvd_options_t world = {0};
  CHECK_OK(hvd_allreduce_ex("world", v, v, 2, HVD_FLOAT32, HVD_SUM, &world));
  CHECK(v[0] == (float)N && v[1] == 2.0f * (float)N, "world allreduce: %g %g", v[0], v[1]);
  CHECK_OK(hvd_allreduce_ex("world.null", v, v, 2, HVD_FLOAT32, HVD_SUM, NULL));
}

/* A set's names are cached: the same allreduce again is a cache hit on the set's ranks
   (the others mark it wanted in the rounds without asking), and still equals MPI's. */
static void cached(const set_t *s) {
  enum { LEN = 19 };
  float in[LEN], out[LEN], want[LEN];
  hvd_options_t o = {.process_set = s->id};
  unsigned long long before = 0;
  for (int rep = 0; rep < 4; rep++) {
    if (rep == 1) before = atomic_load(&hvd_g.stat_cached);
    for (size_t i = 0; i < LEN; i++) in[i] = fval(R, i, 40 + rep);
    CHECK_OK(hvd_allreduce_ex("cached", in, out, LEN, HVD_FLOAT32, HVD_SUM, &o));
    MPI_Allreduce(in, want, LEN, MPI_FLOAT, MPI_SUM, s->comm);
    check_same(out, want, sizeof(out), "cached allreduce", s);
  }
  unsigned long long hits = atomic_load(&hvd_g.stat_cached) - before;
  CHECK(hits >= 3, "rank %d, set %d: %llu of the 3 repeated allreduces were cache hits",
        R, (int)s->id, hits);
}

static void add_set(set_t *s) {
  s->me = -1;
  for (int i = 0; i < s->n; i++)
    if (s->ranks[i] == R) s->me = i;
  CHECK_OK(hvd_process_set_add(s->ranks, s->n, &s->id));
  CHECK(hvd_process_set_size(s->id) == s->n, "size %d, expected %d",
        hvd_process_set_size(s->id), s->n);
  CHECK(hvd_process_set_rank(s->id) == s->me, "rank %d in the set, expected %d",
        hvd_process_set_rank(s->id), s->me);
  MPI_Comm_split(MPI_COMM_WORLD, s->me >= 0 ? 1 : MPI_UNDEFINED, R, &s->comm);
}

int main(int argc, char **argv) {
  if (!hvd_test_is_rank()) {
    for (int np = 1; np <= 4; np++)
      if (hvd_test_mpirun(argv[0], np, "", "HVD_FUSION_THRESHOLD=4096", 120, NULL, 0) != 0) {
        printf("FAIL at np=%d\n", np);
        return 1;
      }
    printf("process sets equal MPI sub-communicators on 1-4 ranks\n");
    return 0;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK(provided == MPI_THREAD_MULTIPLE, "MPI gives thread level %d", provided);
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  set_t sets[4];
  int nsets = 0;
  set_t even = {.n = 0}, tail = {.n = 0}, pair = {.n = 0}, last = {.n = 1};
  for (int r = 0; r < N; r += 2) even.ranks[even.n++] = r;
  for (int r = 1; r < N; r++) tail.ranks[tail.n++] = r;
  for (int r = 0; r < N && r < 2; r++) pair.ranks[pair.n++] = r;
  last.ranks[0] = N - 1;
  sets[nsets++] = even;
  if (tail.n > 0) sets[nsets++] = tail;
  sets[nsets++] = pair;
  sets[nsets++] = last;
  for (int k = 0; k < nsets; k++) add_set(&sets[k]);
  CHECK(sets[0].id == 1 && sets[nsets - 1].id == nsets, "ids %d..%d, expected 1..%d",
        (int)sets[0].id, (int)sets[nsets - 1].id, nsets);
  for (int round = 0; round < 2; round++)   /* the second round meets the cache's state */
    for (int k = 0; k < nsets; k++) {
      if (sets[k].me < 0) continue;
      allreduces(&sets[k], round * 10 + k);
      others(&sets[k], round * 10 + k);
      mismatch(&sets[k]);
    }
  for (int k = 0; k < nsets; k++)
    if (sets[k].me >= 0) cached(&sets[k]);
  overlapping(sets, nsets);
  refusals(sets, nsets);
  /* Removed: a set is unknown afterwards. */
  CHECK_OK(hvd_process_set_remove(sets[0].id));
  hvd_options_t gone = {.process_set = sets[0].id};
  CHECK_STATUS(hvd_barrier_ex(&gone), HVD_ERR_INVALID_ARGUMENT);
  for (int k = 0; k < nsets; k++)
    if (sets[k].comm != MPI_COMM_NULL) MPI_Comm_free(&sets[k].comm);
  CHECK_OK(hvd_shutdown());
  MPI_Finalize();
  printf("rank %d of %d: ok\n", R, N);
  return 0;
}
