/* hvd/launch_env.c: is this process the whole job, as MPI says, or one of many copies
   that a launcher started without telling MPI?

   srun PROG (no --mpi=pmix), or srun --mpi=pmi2 with an MPI without SLURM's PMI2, starts
   N copies that each find no PMI server and initialise MPI alone: N jobs of one rank,
   each training on its own, silently. So do `./train` typed inside salloc or an sbatch
   script of N tasks, when one process was not what was meant. SLURM says what it
   started: in a step (srun), SLURM_STEP_NUM_TASKS and SLURM_PROCID; in the allocation's
   shell, SLURM_NTASKS. A process started by OpenMPI's mpirun (OMPI_COMM_WORLD_SIZE set)
   has the size it was asked for, whatever SLURM variables it inherits (mpirun's daemons
   run as a SLURM step of one task per node). */
#include "hvd/hvd_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* A positive decimal SLURM count, or -1 when unset or not a number. */
static long slurm_count(const char *name) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return -1;
  char *end;
  long n = strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? n : -1;
}

hvd_status_t hvd_launch_env_check(int mpi_size, char *msg, size_t len) {
  if (mpi_size > 1 || getenv("OMPI_COMM_WORLD_SIZE") != NULL) return HVD_OK;
  int in_step = getenv("SLURM_STEP_ID") != NULL;
  const char *tasks_var = in_step && getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                                                                    : "SLURM_NTASKS";
  long tasks = slurm_count(tasks_var), procid = slurm_count("SLURM_PROCID");
  long pmi_size = slurm_count("PMI_SIZE");
  if (tasks > 1 || procid > 0) {
    if (in_step)
      snprintf(msg, len,
               "SLURM started this process as one task of a step (SLURM_PROCID=%s, %s=%s) "
               "but MPI says the job has %d rank: srun did not pass the job to MPI. Start "
               "it with srun --mpi=pmix (this MPI's PMI; --mpi=pmi2 needs an MPI built with "
               "SLURM's PMI2), or with mpirun or hvdrun inside the allocation",
               getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "unset", tasks_var,
               getenv(tasks_var) ? getenv(tasks_var) : "unset", mpi_size);
    else
      snprintf(msg, len,
               "this process runs alone (MPI size %d) in a SLURM allocation of %ld tasks "
               "(SLURM_NTASKS=%ld): start the job with srun --mpi=pmix PROG, or hvdrun PROG "
               "or mpirun PROG (they read the allocation); to run one process on purpose: "
               "srun -N1 -n1 PROG",
               mpi_size, tasks, tasks);
    return HVD_ERR_BACKEND;
  }
  if (pmi_size > 1) {
    snprintf(msg, len,
             "the launcher started %ld processes (PMI_SIZE=%ld) but MPI says the job has %d "
             "rank: this MPI does not speak that launcher's PMI. With SLURM use srun "
             "--mpi=pmix, or mpirun or hvdrun",
             pmi_size, pmi_size, mpi_size);
    return HVD_ERR_BACKEND;
  }
  return HVD_OK;
}
