/* where: what each rank of a job sees of its place in it, one line a rank:
     rank R of N: local L of LS, cross C of CS on HOST
   For checking that a launcher (srun --mpi=pmix, mpirun, hvdrun) gave the ranks, hosts
   and local ranks it was asked for; tests/test_slurm_srun.sh builds and runs it.
   Built like examples/hello_allreduce.c:
     cc where.c $(PKG_CONFIG_PATH=build pkg-config --cflags --libs hvd) -o where */
#include "hvd/hvd.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: srun --mpi=pmix %s   (or mpirun / hvdrun)\n"
           "Prints each rank's rank, size, local rank/size, cross rank/size and host.\n",
           argv[0]);
    return 0;
  }
  if (hvd_init() != HVD_OK) {
    fprintf(stderr, "where: hvd_init failed: %s\n", hvd_last_error());
    return 1;
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  printf("rank %d of %d: local %d of %d, cross %d of %d on %s\n", hvd_rank(), hvd_size(),
         hvd_local_rank(), hvd_local_size(), hvd_cross_rank(), hvd_cross_size(), host);
  return hvd_shutdown() == HVD_OK ? 0 : 1;
}
