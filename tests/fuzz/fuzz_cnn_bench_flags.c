/* tests/fuzz/fuzz_cnn_bench_flags.c: cnn_bench's flags (bench/cnn_bench.c parse_args,
   a static function: the program's source is included here, its main renamed). The
   parser exit()s on --help and on a bad flag: exit is redefined for the included code
   only, to jump back here. Input: one argument per line (tests/fuzz/fuzz.h). */
#include "tests/fuzz/fuzz.h"

/* Everything cnn_bench.c includes, first, so the macros below touch only its code. */
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hvd/hvd.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"

static jmp_buf fuzz_exit_jump;
__attribute__((noreturn)) static void fuzz_exit(int code) { longjmp(fuzz_exit_jump, code + 1); }

#define main cnn_bench_main
#define exit(code) fuzz_exit(code)
#include "bench/cnn_bench.c"
#undef exit
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_argv_t a;
  fuzz_argv_make(&a, "cnn_bench", data, size);
  options_t o = default_options();   /* main's */
  /* --help prints the usage to stdout, errors go to stderr: keep the fuzzer's output
     readable. */
  if (setjmp(fuzz_exit_jump) == 0) {
    parse_args(a.argc, a.argv, &o);
    /* Parsed: the values main relies on hold. */
    if (o.batch_size < 1 || o.num_batches < 1 || o.num_warmup_batches < 0 ||
        o.display_every < 1 || !(o.bucket_mb > 0) || !(o.first_bucket_mb > 0))
      abort();
    precision_label(&o);
  }
  fuzz_argv_free(&a);
  return 0;
}
