/* tests/fuzz/fuzz_train_flags.c: the train program's flags (train/flags.c
   train_flags_parse, then train_flags_describe of what parsed). Input: one argument per
   line (tests/fuzz/fuzz.h). */
#include "tests/fuzz/fuzz.h"

#include "train/flags.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_argv_t a;
  fuzz_argv_make(&a, "train", data, size);
  train_opts_t o;
  train_flags_defaults(&o);
  char err[512];
  err[0] = '\0';
  int rc = train_flags_parse(a.argc, a.argv, &o, err, sizeof err);
  if (rc == -1 && err[0] == '\0') abort();   /* an error must say what was wrong */
  if (rc == 0) {
    char buf[4096];
    train_flags_describe(&o, 2, buf, sizeof buf);
    fuzz_touch(buf, strlen(buf));
  }
  fuzz_argv_free(&a);
  return 0;
}
