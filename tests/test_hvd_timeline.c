/* test_hvd_timeline: HVD_TIMELINE on 2 ranks. A batch of async allreduces (fused), a
   large one alone, a broadcast, an allgather and a barrier; then the file must parse as
   JSON (Debian's python3) and, tensor by tensor, hold exactly that tensor's events in
   order with its byte count: NEGOTIATE, QUEUE, then ALLREDUCE (unfused), or
   MEMCPY_IN_FUSION_BUFFER, ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER (fused: at least two of
   the batch, never the large one), BROADCAST, ALLGATHER or BARRIER; every tensor has its
   row, and every line between "[" and "]" must be one event followed by a comma (so a
   file cut short by a kill still loads in trace viewers). */
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
    "tensors = {e['args']['name'] for e in ev if e['name'] == 'thread_name'}\n"
    "by = {}\n"
    "for e in ev:\n"
    "    if e['ph'] == 'X':\n"
    "        assert e['dur'] >= 0 and e['ts'] >= 0, e\n"
    "        by.setdefault(e['args']['tensor'], []).append(e)\n"
    "plain = ['NEGOTIATE', 'QUEUE', 'ALLREDUCE']\n"
    "fused = ['NEGOTIATE', 'QUEUE', 'MEMCPY_IN_FUSION_BUFFER', 'ALLREDUCE',\n"
    "         'MEMCPY_OUT_FUSION_BUFFER']\n"
    "# tensor -> (the event sequences allowed, bytes of its collective): the sizes the\n"
    "# program above passes, 4-byte floats, 2 ranks\n"
    "want = {'grad.%d' % k: ([plain, fused], (100 + k) * 4) for k in range(20)}\n"
    "want['big \"quoted\"'] = ([plain], 4 << 20)\n"
    "want['weights'] = ([['NEGOTIATE', 'QUEUE', 'BROADCAST']], 4000)\n"
    "want['gathered'] = ([['NEGOTIATE', 'QUEUE', 'ALLGATHER']], 2 * 10 * 4)\n"
    "barriers = [t for t in by if 'barrier' in t]\n"
    "assert len(barriers) == 1, 'barrier rows: %s' % barriers\n"
    "want[barriers[0]] = ([['NEGOTIATE', 'QUEUE', 'BARRIER']], 0)\n"
    "assert sorted(by) == sorted(want), 'tensors %s, expected %s' % (sorted(by), sorted(want))\n"
    "nfused = 0\n"
    "for t, (seqs, nbytes) in sorted(want.items()):\n"
    "    assert t in tensors, 'no row for tensor %r' % t\n"
    "    got = [e['name'] for e in by[t]]\n"
    "    assert got in seqs, 'tensor %r: events %s, expected %s' % (t, got,\n"
    "                                                         ' or '.join(map(str, seqs)))\n"
    "    nfused += got == fused\n"
    "    ts = [e['ts'] for e in by[t]]\n"
    "    assert ts == sorted(ts), 'tensor %r: events out of time order: %s' % (t, ts)\n"
    "    for e in by[t]:\n"
    "        b = 0 if e['name'] in ('NEGOTIATE', 'QUEUE') else nbytes\n"
    "        assert e['args']['bytes'] == b, 'tensor %r: %s of %d bytes, expected %d' % (\n"
    "            t, e['name'], e['args']['bytes'], b)\n"
    "assert nfused >= 2, '%d tensors fused, expected at least 2 of the batch' % nfused\n"
    "lines = open(path).read().split('\\n')\n"
    "assert lines[0] == '[' and lines[-2] == ']', 'framing'\n"
    "for l in lines[1:-3]:\n"
    "    assert l.endswith(','), 'line without comma: %r' % l\n"
    "    json.loads(l[:-1])\n"
    "print('timeline ok: %d events, %d tensors, %d fused' % (len(ev), len(want), nfused))\n";

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
  char result[sizeof(script) + 8];
  snprintf(result, sizeof(result), "%s.out", script);
  if (ok) {
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s >%s 2>&1", script, path, result);
    ok = system(cmd) == 0;
    if (!ok) {   /* the start of the file, then the checker's verdict as the last lines */
      snprintf(cmd, sizeof(cmd), "head -c 3000 %s; echo", path);
      if (system(cmd) != 0) printf("(cannot show the file)\n");
    }
    fflush(stdout);
    snprintf(cmd, sizeof(cmd), "cat %s", result);
    if (system(cmd) != 0) printf("(cannot show the checker's output)\n");
  }
  unlink(path);
  unlink(script);
  unlink(result);
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
