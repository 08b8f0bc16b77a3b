/* test_hvd_fusion: fused and unfused allreduces give bit-identical results, and hvd
   lives inside a program that owns MPI.
   The program initialises MPI itself (MPI_THREAD_MULTIPLE), then runs the same async
   batch of allreduces under three runtimes in turn: HVD_FUSION_THRESHOLD=0 (nothing
   fused), the default (64 MiB: all fused), and 3000 bytes (some fused, one tensor larger
   than the threshold alone). hvd_shutdown must leave MPI running (the program calls
   MPI_Barrier and hvd_init again), and the results must match to the bit: random floats
   on 2 ranks (where a sum does not depend on order), integer-valued ones on 3-4 ranks
   (where the ring's order of additions depends on an element's offset). */
#include "hvd_test.h"

#include <mpi.h>
#include <stdint.h>

enum { K = 30 };

static size_t len_of(int k) { return k == 5 ? 5000 : (size_t)(k * 53 % 700) + 1; }

static void run(const char *threshold, int exact, float **res) {
  if (threshold) setenv("HVD_FUSION_THRESHOLD", threshold, 1);
  else unsetenv("HVD_FUSION_THRESHOLD");
  CHECK_OK(hvd_init());
  int R = hvd_rank();
  unsigned seed = 12345u + (unsigned)R * 7919u;
  hvd_request_t req[K];
  for (int k = 0; k < K; k++) {
    size_t n = len_of(k);
    res[k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      seed = seed * 1103515245u + 12345u;
      float u = (float)((seed >> 8) & 0xffff) / 65536.0f;
      res[k][i] = exact ? (float)((seed >> 8) % 100) : (u - 0.5f) * 3.7f;
    }
    char name[32];
    snprintf(name, sizeof(name), "f.%d", k);
    CHECK_OK(hvd_allreduce_async(name, res[k], res[k], n, HVD_FLOAT32,
                                 k % 2 ? HVD_AVERAGE : HVD_SUM, &req[k]));
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
