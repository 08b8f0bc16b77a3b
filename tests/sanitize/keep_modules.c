/* tests/sanitize/keep_modules.c: linked into the programs of an AddressSanitizer build
   (make SANITIZE=address,...; see the Makefile), never into a plain one. It defines
   dlclose as "keep the module loaded": the executable's definition comes first in symbol
   lookup, so OpenMPI's (and our loaders') calls land here instead of in libc.

   Why: OpenMPI 4 unloads its components (mca_*.so) at MPI_Finalize, and some of what
   they allocated at MPI_Init is still unfreed at exit, by design. LeakSanitizer matches
   each such leak against tests/sanitize/lsan.supp frame by frame, and for a frame whose
   module is gone, GCC 12's symbolizer rebuilds its module list from /proc/self/maps (130
   reads of it in one singleton train run). In test_hvd_allreduce (11 processes) that
   was 0.4-0.8 s: 4.2-4.6 s became 3.7-3.9 s. With the components still mapped, such a
   frame is named by its module (mca_op_avx.so, ...) and matches the suppressions at
   once. Nothing in the tests depends on a module going away. */
#include <dlfcn.h>

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
