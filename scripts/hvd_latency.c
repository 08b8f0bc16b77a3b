/* scripts/hvd_latency.c: the latency of one small blocking allreduce, hvd beside
   MPI_Allreduce, in one run. The program initialises MPI itself (MPI_THREAD_MULTIPLE),
   times MPI_Allreduce first, then hvd_allreduce of the same bytes (one tensor name, so
   with the response cache on every call after the first is a hit).
   Build: mpicc -O2 -I. scripts/hvd_latency.c BUILD/libhvd.a BUILD/libutil.a (+ the CUDA
   libraries of a CUDA build) -o BUILD/hvd_latency
   Run:   mpirun -np 2 BUILD/hvd_latency [bytes] [iterations]
   Prints per method the mean microseconds per call, best of 5 loops. */
#include "hvd/hvd.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double best_of(int reps, int iters, int use_hvd, char *buf, int bytes) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
      if (use_hvd) {
        if (hvd_allreduce("latency", buf, buf, (size_t)bytes, HVD_INT8, HVD_MAX) != HVD_OK) {
          fprintf(stderr, "hvd_allreduce: %s\n", hvd_last_error());
          exit(1);
        }
      } else {
        MPI_Allreduce(MPI_IN_PLACE, buf, bytes, MPI_CHAR, MPI_MAX, MPI_COMM_WORLD);
      }
    }
    double us = (MPI_Wtime() - t0) * 1e6 / iters;
    if (us < best) best = us;
  }
  return best;
}

int main(int argc, char **argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int bytes = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 20000;
  char *buf = calloc((size_t)bytes, 1);
  best_of(1, iters / 10, 0, buf, bytes);
  double mpi = best_of(5, iters, 0, buf, bytes);
  if (hvd_init() != HVD_OK) {
    fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
    return 1;
  }
  best_of(1, iters / 10, 1, buf, bytes);
  double hvd = best_of(5, iters, 1, buf, bytes);
  if (rank == 0)
    printf("%d-byte allreduce, %d iterations, best of 5: MPI_Allreduce %.2f us, "
           "hvd_allreduce %.2f us (HVD_CACHE_CAPACITY=%s)\n", bytes, iters, mpi, hvd,
           getenv("HVD_CACHE_CAPACITY") ? getenv("HVD_CACHE_CAPACITY") : "default");
  hvd_shutdown();
  free(buf);
  MPI_Finalize();
  return 0;
}
