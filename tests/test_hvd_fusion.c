/* test_hvd_fusion: fused and unfused allreduces give bit-identical results, and hvd
   lives inside a program that owns MPI.
   The program initialises MPI itself (MPI_THREAD_MULTIPLE), then runs the same async
   batch of allreduces under three runtimes in turn: HVD_FUSION_THRESHOLD=0 (nothing
   fused), the default (64 MiB: all fused), and 3000 bytes (some fused, one tensor larger
   than the threshold alone). hvd_shutdown must leave MPI running (the program calls
   MPI_Barrier and hvd_init again), and the results must match to the bit: random floats
   on 2 ranks (where a sum does not depend on order), integer-valued ones on 3-4 ranks
   (where the ring's order of additions depends on an element's offset).
   Each run is also checked against the closed form: element i of tensor k on rank r is
   input(r, k, i), so the SUM is the sum over r, computed here in one float addition per
   rank (exact: order-free on 2 ranks, integers on 3-4), and the AVERAGE that sum divided
   by the number of ranks. */
#include "hvd_test.h"

#include <mpi.h>
#include <stdint.h>

enum { K = 30 };

static size_t len_of(int k) { return k == 5 ? 5000 : (size_t)(k * 53 % 700) + 1; }
static hvd_op_t op_of(int k) { return k % 2 ? HVD_AVERAGE : HVD_SUM; }

/* Element i of tensor k on rank r: a hash of (r, k, i); integers 0..99 when exact, else
   floats in [-1.85, 1.85). */
static float input(int r, int k, size_t i, int exact) {
  uint32_t h = (uint32_t)r * 2654435761u ^ (uint32_t)k * 40503u ^ (uint32_t)i * 2246822519u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return exact ? (float)(h % 100) : ((float)(h & 0xffff) / 65536.0f - 0.5f) * 3.7f;
}

static float expected(int size, int k, size_t i, int exact) {
  float sum = 0;
  for (int r = 0; r < size; r++) sum += input(r, k, i, exact);
  return op_of(k) == HVD_AVERAGE ? sum / (float)size : sum;
}

/* Every element of every tensor of one run against the closed form. */
static void check_expected(float **res, int size, int exact, const char *run) {
  int rank;   /* after hvd_shutdown, CHECK's hvd_rank() is -1 */
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int k = 0; k < K; k++) {
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < len_of(k); i++)
      if (res[k][i] != expected(size, k, i, exact) && wrong++ == 0) first = i;
    CHECK(wrong == 0, "MPI rank %d of %d, %s run, tensor %d (%s): %zu of %zu elements wrong, "
          "first [%zu] = %g, expected %g", rank, size, run, k,
          op_of(k) == HVD_AVERAGE ? "AVERAGE" : "SUM", wrong, len_of(k), first, res[k][first],
          expected(size, k, first, exact));
  }
}

static void run(const char *threshold, int exact, float **res) {
  if (threshold) setenv("HVD_FUSION_THRESHOLD", threshold, 1);
  else unsetenv("HVD_FUSION_THRESHOLD");
  CHECK_OK(hvd_init());
  int R = hvd_rank();
  hvd_request_t req[K];
  for (int k = 0; k < K; k++) {
    size_t n = len_of(k);
    res[k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) res[k][i] = input(R, k, i, exact);
    char name[32];
    snprintf(name, sizeof(name), "f.%d", k);
    CHECK_OK(hvd_allreduce_async(name, res[k], res[k], n, HVD_FLOAT32, op_of(k), &req[k]));
  }
  for (int k = 0; k < K; k++) CHECK_OK(hvd_wait(req[k]));
  CHECK_OK(hvd_shutdown());
}

int main(int argc, char **argv) {
  (void)argc;
  if (!hvd_test_is_rank()) {
    for (int np = 1; np <= 4; np++)
      if (hvd_test_mpirun(argv[0], np, "", NULL, 60, NULL, 0) != 0) {
        printf("FAIL at np=%d\n", np);
        return 1;
      }
    printf("PASS\n");
    return 0;
  }
  int provided;
  CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS, "MPI_Init");
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exact = size > 2;
  float *unfused[K], *fused[K], *mixed[K];
  run("0", exact, unfused);
  int finalized = 1;
  MPI_Finalized(&finalized);
  CHECK(!finalized, "hvd_shutdown finalized the program's MPI");
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier after hvd_shutdown");
  run(NULL, exact, fused);
  run("3000", exact, mixed);
  check_expected(unfused, size, exact, "unfused");
  check_expected(fused, size, exact, "fused");
  check_expected(mixed, size, exact, "partly fused");
  for (int k = 0; k < K; k++) {
    CHECK(memcmp(unfused[k], fused[k], len_of(k) * sizeof(float)) == 0,
          "tensor %d: fused result differs from unfused", k);
    CHECK(memcmp(unfused[k], mixed[k], len_of(k) * sizeof(float)) == 0,
          "tensor %d: partly fused result differs from unfused", k);
    free(unfused[k]);
    free(fused[k]);
    free(mixed[k]);
  }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("rank 0: fused == unfused on %d ranks (%s values)\n", size,
                        exact ? "integer" : "random");
  MPI_Finalize();
  return 0;
}
