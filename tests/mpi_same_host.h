/* tests/mpi_same_host.h: mpi_same_host(comm), 1 when every rank of comm reports the same
   processor (host) name, else 0; an MPI failure aborts the job. The tests' own oracle
   for a transport's one_host (which the library takes from MPI_COMM_TYPE_SHARED).
   Header-only. */
#ifndef TESTS_MPI_SAME_HOST_H
#define TESTS_MPI_SAME_HOST_H

#include <mpi.h>
#include <string.h>

static int mpi_same_host(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {0}, first[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0, mine, all = 0;
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
  memcpy(first, name, sizeof first);
  if (MPI_Bcast(first, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm) != MPI_SUCCESS)
    MPI_Abort(MPI_COMM_WORLD, 2);
  mine = strcmp(name, first) == 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
    MPI_Abort(MPI_COMM_WORLD, 2);
  return all;
}

#endif
