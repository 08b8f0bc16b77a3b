/* test_hvd_collectives: hvd_broadcast from every root (every dtype, lengths 0, 1, 1000),
   hvd_allgather with unequal counts including 0 (and a name reused after completion),
   hvd_barrier, and the async broadcast, on 1-4 ranks. Exact results. */
#include "hvd_test.h"

#include <stdint.h>

static int R, N;

static void broadcasts(void) {
  size_t lens[] = {0, 1, 1000};
  for (int root = 0; root < N; root++)
    for (int dt = HVD_FLOAT32; dt <= HVD_INT64; dt++)
      for (size_t li = 0; li < 3; li++) {
        size_t n = lens[li], es = hvd_dtype_size((hvd_dtype_t)dt);
        unsigned char *b = malloc(n * es + 1), *want = malloc(n * es + 1);
        /* root's bytes are a pattern of (root, i); the others start with garbage */
        for (size_t i = 0; i < n * es; i++) {
          want[i] = (unsigned char)(i * 31 + (size_t)root * 7 + 1);
          b[i] = R == root ? want[i] : (unsigned char)(0xee ^ R);
        }
        char name[64];
        snprintf(name, sizeof(name), "bcast.%d.%d.%zu", root, dt, li);
        CHECK_OK(hvd_broadcast(name, b, n, (hvd_dtype_t)dt, root));
        CHECK(memcmp(b, want, n * es) == 0, "%s: wrong bytes", name);
        free(b);
        free(want);
      }
  /* async form, all roots at once */
  hvd_request_t req[8];
  int32_t v[8];
  for (int root = 0; root < N; root++) {
    v[root] = R == root ? 1000 + root : -1;
    char name[32];
    snprintf(name, sizeof(name), "abcast.%d", root);
    CHECK_OK(hvd_broadcast_async(name, &v[root], 1, HVD_INT32, root, &req[root]));
  }
  for (int root = N - 1; root >= 0; root--) {
    CHECK_OK(hvd_wait(req[root]));
    CHECK(v[root] == 1000 + root, "async broadcast from %d gave %d", root, v[root]);
  }
}

static size_t gather_count(int rank, int salt) {
  /* rank 1 contributes nothing; the others unequal amounts */
  return rank == 1 ? 0 : (size_t)(rank * 5 + salt + 1);
}

static void allgathers(void) {
  for (int salt = 0; salt < 4; salt++)
    for (int dt = HVD_FLOAT32; dt <= HVD_INT64; dt += 3) {
      size_t es = hvd_dtype_size((hvd_dtype_t)dt);
      size_t n = gather_count(R, salt);
      unsigned char *send = malloc(n * es + 1);
      for (size_t i = 0; i < n * es; i++) send[i] = (unsigned char)(R * 17 + (int)i + salt);
      void *out = NULL;
      size_t total = 0;
      CHECK_OK(hvd_allgather("gather", send, n, (hvd_dtype_t)dt, &out, &total));
      size_t want_total = 0;
      for (int r = 0; r < N; r++) want_total += gather_count(r, salt);
      CHECK(total == want_total, "allgather total %zu, expected %zu", total, want_total);
      CHECK(out != NULL, "allgather returned no buffer");
      size_t off = 0;
      for (int r = 0; r < N; r++) {
        size_t c = gather_count(r, salt) * es;
        for (size_t i = 0; i < c; i++)
          CHECK(((unsigned char *)out)[off + i] == (unsigned char)(r * 17 + (int)i + salt),
                "allgather byte %zu of rank %d wrong", i, r);
        off += c;
      }
      free(out);
      free(send);
    }
  /* every rank 0 elements */
  void *out = (void *)1;
  size_t total = 7;
  CHECK_OK(hvd_allgather(NULL, NULL, 0, HVD_INT8, &out, &total));
  CHECK(total == 0, "empty allgather total %zu", total);
  free(out);
}

static int body(void) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  N = hvd_size();
  broadcasts();
  allgathers();
  for (int i = 0; i < 5; i++) CHECK_OK(hvd_barrier());
  CHECK_OK(hvd_shutdown());
  if (R == 0) printf("rank 0: broadcast/allgather/barrier checks passed on %d ranks\n", N);
  return 0;
}

int main(int argc, char **argv) {
  (void)argc;
  if (hvd_test_is_rank()) return body();
  for (int np = 1; np <= 4; np++)
    if (hvd_test_mpirun(argv[0], np, "", NULL, 120, NULL, 0) != 0) {
      printf("FAIL at np=%d\n", np);
      return 1;
    }
  printf("PASS\n");
  return 0;
}
