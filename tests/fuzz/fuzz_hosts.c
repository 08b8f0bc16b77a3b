/* tests/fuzz/fuzz_hosts.c: hvdrun's host parsers (launcher/hosts.c): the input as a
   hostfile (hvdrun_hosts_parse_file: OpenMPI "host slots=N max_slots=M" and horovodrun
   "host:N" lines, comments) and, up to its first newline, as a -H list
   (hvdrun_hosts_parse_list: "a:2,b,c:4"); then the total, and the namespace check. */
#include "tests/fuzz/fuzz.h"

#include "launcher/hvdrun.h"

static void check(hvdrun_hosts_t *h) {
  long long sum = 0;
  for (int i = 0; i < h->n; i++) {
    if (h->v[i].slots < 1 || h->v[i].name == NULL || h->v[i].name[0] == '\0') abort();
    sum += h->v[i].slots;
  }
  if (hvdrun_hosts_total_slots(h) != sum) abort();
  hvdrun_hosts_are_netns(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[HVDRUN_ERR_LEN];
  char path[32];
  int fd = fuzz_memfile(data, size, path);
  hvdrun_hosts_t h = {0};
  if (hvdrun_hosts_parse_file(&h, path, err) == 0) check(&h);
  close(fd);

  char *list = malloc(size + 1);
  if (!list) abort();
  memcpy(list, data, size);
  list[size] = '\0';
  char *nl = strchr(list, '\n');
  if (nl) *nl = '\0';
  /* Hosts accumulate, as with several -H options. */
  if (hvdrun_hosts_parse_list(&h, list, err) == 0) check(&h);
  free(list);
  hvdrun_hosts_free(&h);
  return 0;
}
