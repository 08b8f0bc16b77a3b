/* tests/test_coll_mpi.c: the collectives over the MPI transport, in real MPI processes
   (run by tests/test_coll_mpi.sh under mpirun -np 1..4; run alone it is one rank).
   Exact integer-valued inputs, every result checked element by element on every rank;
   the ring's float32 sum is also checked against MPI_Allreduce. Every buffer a
   collective reads or writes has guard bytes on both sides (tests/guard.h), checked after
   every call, so a write one element outside the buffer fails. Exit 1 if anything is
   wrong on any rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "util/clock.h"
#include "guard.h"
#include "mpi_same_host.h"

static int rank, size;

#define CHECK_RANK() rank
#include "tests/check.h"

static double value(int r, size_t i) { return (double)((r * 5 + i) % 9); }

/* Counts a failure when a write went outside p (a guard_alloc buffer). */
static void check_guards(const void *p, const char *what, size_t n) {
  size_t before, after;
  if (guard_damage2(p, &before, &after))
    CHECK(0, "%s (n=%zu): %zu guard bytes before the buffer and %zu after it overwritten",
          what, n, before, after);
}

static void test_allreduce(coll_transport_t *t, size_t n, int alg, int inplace, coll_dtype_t d) {
  size_t es = coll_dtype_size(d);
  char *send = guard_alloc(n * es), *recv = guard_alloc(n * es);
  for (size_t i = 0; i < n; i++) {
    double v = value(rank, i);
    switch (d) {
      case COLL_FLOAT32: ((float *)send)[i] = (float)v; break;
      case COLL_FLOAT64: ((double *)send)[i] = v; break;
      case COLL_INT32: ((int32_t *)send)[i] = (int32_t)v; break;
      case COLL_BFLOAT16: ((uint16_t *)send)[i] = coll_float_to_bfloat16((float)v); break;
      default: break;
    }
  }
  if (inplace) memcpy(recv, send, n * es);
  const void *sb = inplace ? recv : send;
  coll_status_t st = alg == 0   ? coll_allreduce(t, sb, recv, n, d, COLL_SUM)
                     : alg == 1 ? coll_ring_allreduce(t, sb, recv, n, d, COLL_SUM)
                                : coll_recursive_doubling_allreduce(t, sb, recv, n, d, COLL_SUM);
  CHECK(st == COLL_OK, "allreduce alg %d n=%zu: %s: %s", alg, n, coll_status_string(st), t->error);
  char what[96];
  snprintf(what, sizeof what, "allreduce alg %d %s inplace=%d recvbuf", alg, coll_dtype_name(d),
           inplace);
  check_guards(recv, what, n);
  snprintf(what, sizeof what, "allreduce alg %d %s inplace=%d sendbuf", alg, coll_dtype_name(d),
           inplace);
  check_guards(send, what, n);
  long bad = 0;
  for (size_t i = 0; i < n && st == COLL_OK; i++) {
    double want = 0, got = 0;
    for (int r = 0; r < size; r++) want += value(r, i);
    switch (d) {
      case COLL_FLOAT32: got = ((float *)recv)[i]; break;
      case COLL_FLOAT64: got = ((double *)recv)[i]; break;
      case COLL_INT32: got = ((int32_t *)recv)[i]; break;
      case COLL_BFLOAT16: got = coll_bfloat16_to_float(((uint16_t *)recv)[i]); break;
      default: break;
    }
    bad += got != want;
  }
  CHECK(bad == 0, "allreduce alg %d n=%zu %s inplace=%d: %ld wrong", alg, n, coll_dtype_name(d),
        inplace, bad);
  if (d == COLL_FLOAT32 && st == COLL_OK && n > 0) { /* same answer as the MPI library */
    float *ref = malloc(n * sizeof *ref);
    MPI_Allreduce(send, ref, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (!inplace) CHECK(memcmp(ref, recv, n * 4) == 0, "differs from MPI_Allreduce, n=%zu", n);
    free(ref);
  }
  guard_free(send);
  guard_free(recv);
}

/* Messages above INT_MAX bytes travel as 1 MiB blocks plus a remainder. Needs ~4.3 GB
   of memory per pair, so only with HVD_TEST_BIG=1. */
static void test_big_message(coll_transport_t *t) {
  if (size < 2 || rank > 1) return;
  size_t bytes = (size_t)INT32_MAX + (3u << 20) + 5;
  unsigned char *buf = guard_alloc(bytes);
  CHECK(buf != NULL, "cannot allocate %zu bytes", bytes);
  if (!buf) return;
  coll_request_t req;
  coll_status_t st;
  if (rank == 0) {
    for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)(i * 7 + i / 4099);
    st = t->ops->isend(t, 1, buf, bytes, 997, &req);
  } else {
    memset(buf, 0, bytes);
    st = t->ops->irecv(t, 0, buf, bytes, 997, &req);
  }
  if (st == COLL_OK) st = t->ops->wait(t, &req);
  CHECK(st == COLL_OK, "big message: %s", t->error);
  if (rank == 1) {
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += buf[i] != (unsigned char)(i * 7 + i / 4099);
    CHECK(bad == 0, "big message: %zu bytes wrong", bad);
  }
  check_guards(buf, "big message", bytes);
  guard_free(buf);
}

static void test_others(coll_transport_t *t) {
  /* allgatherv with zeros */
  size_t counts[8], total = 0, off = 0;
  for (int g = 0; g < size; g++) {
    /* Over one 64 KiB chunk (16384 elements): pipelined in pass 0, whole in pass 1. */
    counts[g] = (size_t)(g % 2 ? 0 : 20000 + g);
    if (g < rank) off += counts[g];
    total += counts[g];
  }
  int32_t *all = guard_alloc(total * 4), *mine = guard_alloc(counts[rank] * 4);
  for (size_t i = 0; i < counts[rank]; i++) mine[i] = rank * 100000 + (int32_t)i;
  coll_status_t st = coll_allgatherv(t, mine, all, counts, COLL_INT32);
  CHECK(st == COLL_OK, "allgatherv: %s", t->error);
  size_t k = 0;
  long bad = 0;
  for (int g = 0; g < size; g++)
    for (size_t i = 0; i < counts[g]; i++, k++) bad += all[k] != g * 100000 + (int32_t)i;
  CHECK(bad == 0, "allgatherv: %ld wrong", bad);
  check_guards(all, "allgatherv recvbuf", total);
  check_guards(mine, "allgatherv sendbuf", counts[rank]);

  /* reduce_scatter: rank r gets the sum of segment r */
  float *src = guard_alloc(total * 4), *seg = guard_alloc(counts[rank] * 4);
  for (size_t i = 0; i < total; i++) src[i] = (float)value(rank, i);
  st = coll_reduce_scatter(t, src, seg, counts, COLL_FLOAT32, COLL_SUM);
  CHECK(st == COLL_OK, "reduce_scatter: %s", t->error);
  bad = 0;
  for (size_t i = 0; i < counts[rank]; i++) {
    double want = 0;
    for (int r = 0; r < size; r++) want += value(r, off + i);
    bad += seg[i] != (float)want;
  }
  CHECK(bad == 0, "reduce_scatter: %ld wrong", bad);
  check_guards(seg, "reduce_scatter recvbuf", counts[rank]);
  check_guards(src, "reduce_scatter sendbuf", total);

  /* broadcast from every root, several chunks */
  size_t n = 300000;
  double *b = guard_alloc(n * sizeof *b);
  for (int root = 0; root < size; root++) {
    for (size_t i = 0; i < n; i++) b[i] = rank == root ? (double)i + root : -1;
    st = coll_broadcast(t, b, n, COLL_FLOAT64, root);
    CHECK(st == COLL_OK, "broadcast root %d: %s", root, t->error);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != (double)i + root;
    CHECK(bad == 0, "broadcast root %d: %ld wrong", root, bad);
    check_guards(b, "broadcast", n);
  }

  /* alltoall */
  int64_t *sa = guard_alloc((size_t)size * 2 * sizeof *sa);
  int64_t *ra = guard_alloc((size_t)size * 2 * sizeof *ra);
  for (int p = 0; p < size; p++)
    for (int i = 0; i < 2; i++) sa[p * 2 + i] = rank * 100 + p * 10 + i;
  st = coll_alltoall(t, sa, ra, 2, COLL_INT64);
  CHECK(st == COLL_OK, "alltoall: %s", t->error);
  for (int p = 0; p < size; p++)
    for (int i = 0; i < 2; i++)
      CHECK(ra[p * 2 + i] == p * 100 + rank * 10 + i, "alltoall block %d: %lld", p,
            (long long)ra[p * 2 + i]);
  check_guards(ra, "alltoall recvbuf", (size_t)size * 2);
  check_guards(sa, "alltoall sendbuf", (size_t)size * 2);
  guard_free(sa);
  guard_free(ra);

  CHECK(coll_barrier(t) == COLL_OK, "barrier: %s", t->error);

  /* abort: a wait for a message nobody sends returns CANCELLED, and writes nothing */
  coll_transport_abort(t);
  coll_request_t req;
  int *dummy = guard_alloc(sizeof *dummy);
  *dummy = 0;
  st = t->ops->irecv(t, (rank + 1) % size, dummy, sizeof *dummy, 999, &req);
  CHECK(st == COLL_OK, "irecv: %s", t->error);
  st = t->ops->wait(t, &req);
  CHECK(st == COLL_ERR_CANCELLED, "aborted wait returned %s", coll_status_string(st));
  CHECK(*dummy == 0, "aborted receive wrote %d", *dummy);
  check_guards(dummy, "aborted receive", 1);
  t->aborted = 0;   /* a test may undo it; the runtime never does */

  /* peer timeout: the same silent receive gives up with PEER_LOST naming the peer */
  t->peer_timeout_s = 0.3;
  int silent = (rank + 1) % size;
  double t0 = util_now_s();
  st = t->ops->irecv(t, silent, dummy, sizeof *dummy, 997, &req);
  CHECK(st == COLL_OK, "irecv: %s", t->error);
  st = t->ops->wait(t, &req);
  double waited = util_now_s() - t0;
  CHECK(st == COLL_ERR_PEER_LOST, "silent peer: wait returned %s", coll_status_string(st));
  CHECK(t->lost_peer == silent, "lost_peer %d, expected %d", t->lost_peer, silent);
  char expect[64];
  snprintf(expect, sizeof expect, "to or from rank %d for", silent);
  CHECK(strstr(t->error, expect) != NULL, "peer-lost message \"%s\" lacks \"%s\"", t->error,
        expect);
  CHECK(waited >= 0.3 && waited < 5.0, "gave up after %.2f s, expected 0.3", waited);
  CHECK(*dummy == 0, "timed-out receive wrote %d", *dummy);
  t->peer_timeout_s = 0;
  t->lost_peer = -1;
  CHECK(coll_barrier(t) == COLL_OK, "barrier after cancel: %s", t->error);

  /* A short message (the ranks disagree about a length) is an error, not silent. */
  if (size >= 2 && rank < 2) {
    double *d = guard_alloc(2 * sizeof *d);
    d[0] = 1, d[1] = 2;
    if (rank == 0) {
      st = t->ops->isend(t, 1, d, sizeof(double), 998, &req);
      if (st == COLL_OK) st = t->ops->wait(t, &req);
      CHECK(st == COLL_OK, "short send: %s", t->error);
    } else {
      st = t->ops->irecv(t, 0, d, 2 * sizeof *d, 998, &req);
      if (st == COLL_OK) st = t->ops->wait(t, &req);
      CHECK(st == COLL_ERR_ARG, "short message gave %s, expected invalid argument",
            coll_status_string(st));
    }
    check_guards(d, "short message", 2);
    guard_free(d);
  }
  CHECK(coll_barrier(t) == COLL_OK, "barrier after short message: %s", t->error);

  guard_free(all);
  guard_free(mine);
  guard_free(src);
  guard_free(seg);
  guard_free(b);
  guard_free(dummy);
}

int main(int argc, char **argv) {
  int provided;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return 2;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  coll_transport_t *t = NULL;
  MPI_Comm world = MPI_COMM_WORLD;
  if (coll_transport_mpi_create(&world, &t) != COLL_OK || !t || t->rank != rank || t->size != size) {
    fprintf(stderr, "rank %d: coll_transport_mpi_create failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* one_host against the host names: test_coll_mpi.sh starts every rank here. */
  const int one_host = mpi_same_host(MPI_COMM_WORLD);
  CHECK(t->one_host == one_host, "one_host %d, but the ranks' host names say %d", t->one_host,
        one_host);
  size_t lens[] = {0, 1, 3, 5, 1000, 100003, 1u << 20};
  coll_set_chunk_bytes(64u << 10); /* several chunks per segment at the larger lengths */
  /* Pass 0 pipelines every ring; pass 1 (the default) sends a segment whole on one host
     up to coll_one_chunk_bytes(), which covers every length here (1 Mi floats = 4 MiB). */
  const size_t one_chunk = coll_one_chunk_bytes();
  for (int pass = 0; pass < 2; pass++) {
    coll_set_one_chunk_bytes(pass ? one_chunk : 0);
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
      for (int alg = 0; alg < 3; alg++)
        for (int inplace = 0; inplace < 2; inplace++)
          test_allreduce(t, lens[li], alg, inplace, COLL_FLOAT32);
    coll_dtype_t dts[] = {COLL_FLOAT64, COLL_INT32, COLL_BFLOAT16};
    for (int d = 0; d < 3; d++) test_allreduce(t, 77777, 1, d % 2, dts[d]);
    if (size <= 8) test_others(t);
  }
  const char *big = getenv("HVD_TEST_BIG");
  if (big && atoi(big)) test_big_message(t);
  coll_transport_destroy(t);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_coll_mpi: np=%d, %d failed checks\n", size, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
