/* test_hvd_timeline: HVD_TIMELINE on 2 ranks. A batch of async allreduces (fused), a
   large one alone, a broadcast, an allgather and a barrier; then the file must parse as
   JSON (Debian's python3), hold the events NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER,
   ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER, BROADCAST, ALLGATHER, BARRIER with the tensor
   names, and every line between "[" and "]" must be one event followed by a comma (so
   a file cut short by a kill still loads in trace viewers). */
#include "hvd_test.h"

static int body(void) {
  CHECK_OK(hvd_init());
  enum { K = 20 };
  float *b[K];
  hvd_request_t req[K];
  for (int k = 0; k < K; k++) {
    b[k] = calloc(100 + (size_t)k, sizeof(float));
    char name[32];
    snprintf(name, sizeof(name), "grad.%d", k);
    CHECK_OK(hvd_allreduce_async(name, b[k], b[k], 100 + (size_t)k, HVD_FLOAT32, HVD_SUM,
                                 &req[k]));
  }
  for (int k = 0; k < K; k++) {
    CHECK_OK(hvd_wait(req[k]));
    free(b[k]);
  }
  float *big = calloc(1 << 20, sizeof(float));
  CHECK_OK(hvd_allreduce("big \"quoted\"", big, big, 1 << 20, HVD_FLOAT32, HVD_AVERAGE));
  CHECK_OK(hvd_broadcast("weights", big, 1000, HVD_FLOAT32, 1 % hvd_size()));
  void *out;
  size_t n;
  CHECK_OK(hvd_allgather("gathered", big, 10, HVD_FLOAT32, &out, &n));
  free(out);
  free(big);
  CHECK_OK(hvd_barrier());
  CHECK_OK(hvd_shutdown());
  return 0;
}

static const char *checker =
    "import json, sys\n"
    "path = sys.argv[1]\n"
    "ev = json.load(open(path))\n"
    "names = {e['name'] for e in ev}\n"
    "need = ['NEGOTIATE', 'QUEUE', 'MEMCPY_IN_FUSION_BUFFER', 'ALLREDUCE',\n"
    "        'MEMCPY_OUT_FUSION_BUFFER', 'BROADCAST', 'ALLGATHER', 'BARRIER']\n"
    "missing = [n for n in need if n not in names]\n"
    "assert not missing, 'missing events %s' % missing\n"
    "tensors = {e['args']['name'] for e in ev if e['name'] == 'thread_name'}\n"
    "for t in ['grad.0', 'grad.19', 'big \"quoted\"', 'weights', 'gathered']:\n"
    "    assert t in tensors, 'no row for tensor %r' % t\n"
    "fused = [e for e in ev if e['name'] == 'MEMCPY_IN_FUSION_BUFFER']\n"
    "assert all(e['args']['tensor'].startswith('grad.') for e in fused), 'fused a big one'\n"
    "for e in ev:\n"
    "    if e['ph'] == 'X': assert e['dur'] >= 0 and e['ts'] >= 0, e\n"
    "lines = open(path).read().split('\\n')\n"
    "assert lines[0] == '[' and lines[-2] == ']', 'framing'\n"
    "for l in lines[1:-3]:\n"
    "    assert l.endswith(','), 'line without comma: %r' % l\n"
    "    json.loads(l[:-1])\n"
    "print('timeline ok: %d events, %d fused copies' % (len(ev), len(fused)))\n";

int main(int argc, char **argv) {
  (void)argc;
  if (hvd_test_is_rank()) return body();
  if (access("/usr/bin/python3", X_OK) != 0) {
    printf("SKIP: /usr/bin/python3 (Debian's, to parse the JSON) is not installed\n");
    return 77;
  }
  char path[] = "/tmp/hvd_timelineXXXXXX", env[128], cmd[512];
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  char script[] = "/tmp/hvd_timeline_checkXXXXXX";
  fd = mkstemp(script);
  CHECK(fd >= 0 && write(fd, checker, strlen(checker)) == (ssize_t)strlen(checker), "script");
  close(fd);
  snprintf(env, sizeof(env), "HVD_TIMELINE=%s", path);
  int ok = hvd_test_mpirun(argv[0], 2, "", env, 60, NULL, 0) == 0;
  if (ok) {
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s", script, path);
    ok = system(cmd) == 0;
    if (!ok) {
      snprintf(cmd, sizeof(cmd), "head -c 3000 %s", path);
      if (system(cmd) != 0) printf("(cannot show the file)\n");
    }
  }
  unlink(path);
  unlink(script);
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
