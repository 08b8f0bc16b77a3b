/* tests/test_util_plugin.c: util_plugin_load, the loader behind nn/cuda_loader.c and
   hvd/device_loader.c, without a CUDA backend: the system's libm stands in for the
   backend library (its symbol cos for the entry point), and call_entry hands back a
   table of the test's own, so that every check of the loader is reached: a library that
   is not there (the message names it and the path tried next to this program), a
   missing entry point, a table of another version or size, a table the caller's accept
   refuses, and a table that passes. */
#include <stdio.h>
#include <string.h>

#include "util/plugin.h"
#include "tests/check.h"

typedef struct {
  int abi;
  size_t size;
  int ops;
} demo_table_t;

static demo_table_t handed_out;   /* what call_entry returns */

static const void *call_entry(void *sym) {
  (void)sym;
  return &handed_out;
}

static int ops_set(const void *table) { return ((const demo_table_t *)table)->ops != 0; }

static util_plugin_spec_t spec(const char *soname, const char *symbol) {
  util_plugin_spec_t s = {
      .anchor = &handed_out,
      .soname = soname,
      .symbol = symbol,
      .call_entry = call_entry,
      .library = "demo",
      .abi = 3,
      .size = sizeof(demo_table_t),
      .accept = ops_set,
      .accept_what = "other operations",
  };
  return s;
}

/* Loads with s and checks the result: want_table (or NULL) and every needle in why. */
static void expect(const util_plugin_spec_t *s, const void *want_table, const char *case_name,
                   const char *needle1, const char *needle2) {
  char why[600] = "";
  const void *t = util_plugin_load(s, why, sizeof why);
  CHECK(t == want_table, "%s: got table %p, expected %p (why: '%s')", case_name, t,
        want_table, why);
  if (needle1) CHECK(strstr(why, needle1) != NULL, "%s: '%s' lacks '%s'", case_name, why, needle1);
  if (needle2) CHECK(strstr(why, needle2) != NULL, "%s: '%s' lacks '%s'", case_name, why, needle2);
}

int main(void) {
  util_plugin_spec_t s = spec("libhvd_test_no_such_backend.so.0", "entry");
  expect(&s, NULL, "missing library", "libhvd_test_no_such_backend.so.0",
         "; nor is it at ");

  s = spec("libm.so.6", "hvd_test_no_such_entry");
  expect(&s, NULL, "missing entry point", "libm.so.6: ", "hvd_test_no_such_entry");

  handed_out = (demo_table_t){.abi = 2, .size = sizeof(demo_table_t), .ops = 1};
  s = spec("libm.so.6", "cos");
  char want[200];
  snprintf(want, sizeof want, "(its table: version 2, %zu bytes; this libdemo's: 3, %zu; or "
           "other operations): install libdemo and libm.so.6 from one build",
           sizeof(demo_table_t), sizeof(demo_table_t));
  expect(&s, NULL, "older version", "libm.so.6 is from another build of demo", want);

  handed_out = (demo_table_t){.abi = 3, .size = sizeof(demo_table_t) - 1, .ops = 1};
  expect(&s, NULL, "other size", "another build of demo", "its table: version 3");

  handed_out = (demo_table_t){.abi = 3, .size = sizeof(demo_table_t), .ops = 0};
  expect(&s, NULL, "refused by accept", "another build of demo", "; or other operations");

  handed_out.ops = 1;
  expect(&s, &handed_out, "a good table", NULL, NULL);
  s.accept = NULL;
  s.accept_what = NULL;
  handed_out.ops = 0;
  expect(&s, &handed_out, "no accept", NULL, NULL);

  /* A message longer than the buffer is cut, never overrun. */
  s = spec("libhvd_test_no_such_backend.so.0", "entry");
  char small[16];
  memset(small, 'x', sizeof small);
  CHECK(util_plugin_load(&s, small, 12) == NULL && strlen(small) == 11 && small[12] == 'x',
        "a 12-byte buffer: '%.16s'", small);

  if (failures) return 1;
  printf("test_util_plugin: every check of the loader reached\n");
  return 0;
}
