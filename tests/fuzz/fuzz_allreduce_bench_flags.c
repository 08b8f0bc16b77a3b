/* tests/fuzz/fuzz_allreduce_bench_flags.c: allreduce_bench's flags. They are parsed
   inside its main (bench/allreduce_bench.c), so its source is included here with main
   renamed and the MPI calls main makes around the parsing redefined (size 1, rank 0):
   a bad flag or --help returns from main; flags that parse reach the backend's setup
   or the buffer size, where the harness jumps back (nothing past the parsing runs).
   Input: one argument per line (tests/fuzz/fuzz.h). */
#include "tests/fuzz/fuzz.h"

/* Everything allreduce_bench.c includes, first, so the macros below touch only its code. */
#include <limits.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "hvd/hvd.h"

static jmp_buf fuzz_parsed_jump;
__attribute__((noreturn)) static void fuzz_parsed(void) { longjmp(fuzz_parsed_jump, 1); }
static int fuzz_init_thread(int *argc, char ***argv, int want, int *provided) {
  (void)argc, (void)argv;
  *provided = want;
  return MPI_SUCCESS;
}
static int fuzz_comm_rank(MPI_Comm comm, int *rank) { (void)comm; *rank = 0; return MPI_SUCCESS; }
static int fuzz_comm_size(MPI_Comm comm, int *size) { (void)comm; *size = 1; return MPI_SUCCESS; }
static int fuzz_finalize(void) { return MPI_SUCCESS; }

#define main allreduce_bench_main
#define MPI_Init_thread fuzz_init_thread
#define MPI_Comm_rank fuzz_comm_rank
#define MPI_Comm_size fuzz_comm_size
#define MPI_Finalize fuzz_finalize
#define MPI_Abort(comm, code) abort()
/* The first calls after the flags, whatever they select. */
static coll_status_t fuzz_transport_create(MPI_Comm *comm, coll_transport_t **t) {
  (void)comm, (void)t;
  fuzz_parsed();
}
static hvd_status_t fuzz_hvd_init(void) { fuzz_parsed(); }
static size_t fuzz_dtype_size(coll_dtype_t dtype) {
  (void)dtype;
  fuzz_parsed();
}
#define coll_transport_mpi_create fuzz_transport_create
#define hvd_init fuzz_hvd_init
#define coll_dtype_size fuzz_dtype_size
#include "bench/allreduce_bench.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_argv_t a;
  fuzz_argv_make(&a, "allreduce_bench", data, size);
  /* The flags that set the collectives' global knobs: put back after each input. */
  size_t chunk = coll_chunk_bytes(), small = coll_small_message_bytes();
  size_t one_chunk = coll_one_chunk_bytes();
  if (setjmp(fuzz_parsed_jump) == 0) {
    int rc = allreduce_bench_main(a.argc, a.argv);
    if (rc != 0 && rc != 2) abort();
  }
  coll_set_chunk_bytes(chunk);
  coll_set_small_message_bytes(small);
  coll_set_one_chunk_bytes(one_chunk);
  fuzz_argv_free(&a);
  return 0;
}
