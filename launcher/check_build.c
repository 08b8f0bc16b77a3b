/* launcher/check_build.c: hvdrun --check-build, what horovodrun --check-build prints:
   which backends this build of hvd has, and the local machine as hwloc sees it.
   The versions are the ones compiled in (the headers this build saw), plus the MPI
   launcher found now on PATH, since that is what hvdrun will run. */
#include "launcher/hvdrun.h"
#include "launcher/topology.h"

#include <hwloc.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#if __has_include(<openblas_config.h>)
#include <openblas_config.h>
#endif

static void line(int have, const char *what, const char *detail)
{
  printf("    [%c] %-9s %s\n", have ? 'X' : ' ', what, detail);
}

static void print_backends(void)
{
  char buf[1024];
  printf("Available backends:\n");

#if defined(OMPI_MAJOR_VERSION)
  snprintf(buf, sizeof buf, "Open MPI %d.%d.%d (mpi.h, MPI %d.%d)", OMPI_MAJOR_VERSION,
           OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, MPI_VERSION, MPI_SUBVERSION);
#elif defined(MPICH_VERSION)
  snprintf(buf, sizeof buf, "MPICH %s (mpi.h, MPI %d.%d)", MPICH_VERSION, MPI_VERSION,
           MPI_SUBVERSION);
#else
  snprintf(buf, sizeof buf, "MPI %d.%d (mpi.h of an unrecognised implementation)",
           MPI_VERSION, MPI_SUBVERSION);
#endif
  line(1, "MPI", buf);
  char *path = NULL, version[256], err[HVDRUN_ERR_LEN];
  if (hvdrun_find_launcher(HVDRUN_MPI_UNKNOWN, &path, err) == 0) {
    hvdrun_detect_mpi(path, version, sizeof version);
    printf("                  launcher: %s (%s)\n", path, version);
    free(path);
  } else {
    printf("                  launcher: none on PATH (apt-get install openmpi-bin)\n");
  }

  /* The GPU parts are built only when the Makefile finds nvcc and defines these as 1.
     A switch defined as 1 expands to "1" here; an undefined one stays its own name. */
#define CB_STRING(x) #x
#define CB_DEFINED_1(x) (CB_STRING(x)[0] == '1')
  const struct { const char *what; int on; const char *off; } gpu_parts[] = {
      {"CUDA", CB_DEFINED_1(HVD_WITH_CUDA),
       "not compiled in (no nvcc at build time; CUDA=1 make insists)"},
      {"cuDNN", CB_DEFINED_1(HVD_WITH_CUDNN), "not compiled in"},
      {"cuBLAS", CB_DEFINED_1(HVD_WITH_CUBLAS), "not compiled in"},
      {"NCCL", CB_DEFINED_1(HVD_WITH_NCCL),
       "not compiled in (collectives run over MPI point-to-point)"},
  };
  for (size_t i = 0; i < sizeof gpu_parts / sizeof gpu_parts[0]; i++)
    line(gpu_parts[i].on, gpu_parts[i].what, gpu_parts[i].on ? "compiled in" : gpu_parts[i].off);

#if defined(OPENBLAS_VERSION)
  /* OPENBLAS_VERSION is " OpenBLAS 0.3.21 " with blanks around it. */
  snprintf(buf, sizeof buf, "%s(openblas_config.h)", OPENBLAS_VERSION);
  line(1, "OpenBLAS", buf + (buf[0] == ' '));
#else
  line(1, "BLAS", "linked as -lopenblas (openblas_config.h not found at build time)");
#endif

  unsigned lib = hwloc_get_api_version();
  snprintf(buf, sizeof buf, "API %u.%u.%u (hwloc.h %u.%u.%u)", lib >> 16, (lib >> 8) & 0xff,
           lib & 0xff, HWLOC_API_VERSION >> 16, (HWLOC_API_VERSION >> 8) & 0xff,
           HWLOC_API_VERSION & 0xff);
  line(1, "hwloc", buf);
}

int hvdrun_check_build(int local_size)
{
  printf("hvd v0.1 (hvdrun --check-build)\n\n");
  print_backends();

  hvdrun_topo_t *t;
  char err[HVDRUN_ERR_LEN];
  if (hvdrun_topo_load(&t, err, sizeof err) != 0) {
    fprintf(stderr, "hvdrun: error: %s\n", err);
    return 1;
  }
  hvdrun_topo_summary_t s;
  hvdrun_topo_summary(t, &s);
  printf("\nLocal topology (hwloc):\n");
  printf("    packages: %d\n    NUMA nodes: %d\n    cores: %d\n    PUs: %d\n    GPUs: %d\n",
         s.packages, s.numa_nodes, s.cores, s.pus, s.gpus);
  for (int g = 0; g < s.gpus && g < HVDRUN_TOPO_MAX_GPUS; g++)
    printf("      gpu %d: %s\n", g, s.gpu_names[g]);
  if (local_size < 1) local_size = s.gpus > 0 ? s.gpus : (s.cores > 0 ? s.cores : 1);
  printf("\nPlacement of %d local rank%s (one per %s):\n", local_size, local_size > 1 ? "s" : "",
         s.gpus > 0 ? "GPU, with the cores near it" : "share of the cores");
  int rc = 0;
  for (int r = 0; r < local_size; r++) {
    char pus[256], cores[256];
    int gpu;
    if (hvdrun_topo_rank_place(t, r, local_size, pus, sizeof pus, cores, sizeof cores, &gpu,
                               err, sizeof err) != 0) {
      fprintf(stderr, "hvdrun: error: %s\n", err);
      rc = 1;
      break;
    }
    if (gpu >= 0)
      printf("    local rank %d: gpu %d, cores %s, PUs %s\n", r, gpu, cores, pus);
    else
      printf("    local rank %d: cores %s, PUs %s\n", r, cores, pus);
  }
  hvdrun_topo_free(t);
  return rc;
}
