/* hello_allreduce: the smallest hvd program. Every rank contributes rank + 1; the sum
   over N ranks is N(N+1)/2, printed by every rank.
     make && mpirun -np 2 build/examples/hello_allreduce      (or build/hvdrun -np 2 ...)
   Built outside the project with: cc hello_allreduce.c $(PKG_CONFIG_PATH=build pkg-config
   --cflags --libs hvd) */
#include "hvd/hvd.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: mpirun -np N %s\n"
           "Allreduces rank+1 over all ranks and prints the sum on every rank.\n", argv[0]);
    return 0;
  }
  if (hvd_init() != HVD_OK) {
    fprintf(stderr, "hvd_init failed: %s\n", hvd_last_error());
    return 1;
  }
  float x = (float)(hvd_rank() + 1);
  hvd_status_t s = hvd_allreduce("x", &x, &x, 1, HVD_FLOAT32, HVD_SUM);
  if (s != HVD_OK) {
    fprintf(stderr, "rank %d: hvd_allreduce failed: %s: %s\n", hvd_rank(),
            hvd_status_string(s), hvd_last_error());
    hvd_shutdown();
    return 1;
  }
  printf("rank %d of %d: sum of rank+1 = %g\n", hvd_rank(), hvd_size(), x);
  return hvd_shutdown() == HVD_OK ? 0 : 1;
}
