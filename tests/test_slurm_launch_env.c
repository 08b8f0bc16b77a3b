/* test_slurm_launch_env: hvd_launch_env_check, the refusal of a process that SLURM
   started as one task of many while MPI says it is alone (srun without --mpi=pmix, or a
   program typed in the shell of an allocation of many tasks). Runs alone, no MPI: the
   check sees only the size it is given and the environment, set here case by case. */
#include "hvd/hvd_internal.h"
#include "tests/check.h"

#include <stdarg.h>
#include <string.h>

static const char *vars[] = {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS",
                             "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "PMI_SIZE",
                             "OMPI_COMM_WORLD_SIZE", NULL};

/* check(SIZE, WANT_OK, NEEDLE, "VAR=value", ..., NULL): clears every variable above,
   sets the given ones, and checks the verdict and that a refusal's message has NEEDLE. */
static void check(int line, int size, int want_ok, const char *needle, ...) {
  for (const char **v = vars; *v; v++) unsetenv(*v);
  va_list ap;
  va_start(ap, needle);
  for (const char *kv; (kv = va_arg(ap, const char *)) != NULL;) {
    char name[64];
    size_t n = strcspn(kv, "=");
    snprintf(name, sizeof name, "%.*s", (int)n, kv);
    setenv(name, kv + n + 1, 1);
  }
  va_end(ap);
  char msg[1024] = "";
  hvd_status_t s = hvd_launch_env_check(size, msg, sizeof msg);
  CHECK((s == HVD_OK) == want_ok, "line %d: size %d: got %s (%s), want %s", line, size,
        hvd_status_string(s), msg, want_ok ? "HVD_OK" : "a refusal");
  if (!want_ok && s != HVD_OK) {
    CHECK(s == HVD_ERR_BACKEND, "line %d: status %s, want HVD_ERR_BACKEND", line,
          hvd_status_string(s));
    CHECK(strstr(msg, needle) != NULL, "line %d: message '%s' lacks '%s'", line, msg, needle);
    CHECK(strstr(msg, "srun --mpi=pmix") != NULL, "line %d: message '%s' does not say "
          "srun --mpi=pmix", line, msg);
  }
}

int main(void) {
  /* No SLURM at all, or SLURM and MPI agree. */
  check(__LINE__, 1, 1, "", NULL);
  check(__LINE__, 4, 1, "", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=4",
        "SLURM_NTASKS=4", "SLURM_PROCID=2", NULL);
  /* The srun-style start: task 1 of 2, no PMI. */
  check(__LINE__, 1, 0, "SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_ID=7",
        "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_NTASKS=2", "SLURM_PROCID=1", NULL);
  /* Task 0 of 2 is refused as well: it would train alone, silently. */
  check(__LINE__, 1, 0, "SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_ID=7",
        "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=0", NULL);
  /* Only SLURM_PROCID > 0 (an older SLURM without the step's task count). */
  check(__LINE__, 1, 0, "SLURM_PROCID=3", "SLURM_STEP_ID=0", "SLURM_PROCID=3", NULL);
  /* In the allocation's shell (salloc, sbatch script) with SLURM_NTASKS=4. */
  check(__LINE__, 1, 0, "SLURM_NTASKS=4", "SLURM_JOB_ID=7", "SLURM_NTASKS=4",
        "SLURM_PROCID=0", NULL);
  /* srun -N1 -n1 PROG on purpose inside that allocation: the step says 1 task. */
  check(__LINE__, 1, 1, "", "SLURM_JOB_ID=7", "SLURM_STEP_ID=3", "SLURM_STEP_NUM_TASKS=1",
        "SLURM_NTASKS=1", "SLURM_PROCID=0", NULL);
  /* An allocation of one task. */
  check(__LINE__, 1, 1, "", "SLURM_JOB_ID=7", "SLURM_NTASKS=1", NULL);
  /* mpirun -np 1 inside an allocation: OpenMPI set the size; SLURM's variables are its
     daemons' (a step of one task per node). */
  check(__LINE__, 1, 1, "", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=2",
        "SLURM_PROCID=1", "OMPI_COMM_WORLD_SIZE=1", NULL);
  /* A PMI launcher this MPI does not speak (srun --mpi=pmi2 here). */
  check(__LINE__, 1, 0, "PMI_SIZE=4", "PMI_SIZE=4", NULL);
  check(__LINE__, 1, 1, "", "PMI_SIZE=1", NULL);
  /* Malformed counts are not a reason to refuse. */
  check(__LINE__, 1, 1, "", "SLURM_NTASKS=many", "SLURM_PROCID=", NULL);
  if (failures == 0) printf("PASS: hvd_launch_env_check\n");
  return failures ? 1 : 0;
}
