/* test_hvd_init: lifetime and local errors in a process started alone (no launcher:
   MPI singleton, size 1). Before init everything is HVD_ERR_NOT_INITIALIZED and the
   topology is -1; a malformed HVD_/HOROVOD_ variable (HVD_BACKGROUND_NICE among them)
   fails init with a message; init gives size 1; a second init is a no-op; every
   dtype/op reduces to itself (AVERAGE divides by 1); HVD_THREAD_AFFINITY pins the
   background thread; after shutdown calls are HVD_ERR_NOT_INITIALIZED again. */
#include "hvd_test.h"

#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

/* How many threads of this process other than the calling one may run only on the
   cores "want" (as /proc prints Cpus_allowed_list). */
static int other_threads_pinned_to(const char *want) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int found = 0;
  long self = (long)gettid();
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atol(e->d_name) == self) continue;
    char path[300], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof(line), f))
      if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
        char *v = line + 18;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = '\0';
        if (strcmp(v, want) == 0) found++;
      }
    fclose(f);
  }
  closedir(d);
  return found;
}

int main(void) {
  if (hvd_test_is_rank()) {
    printf("run alone, not under mpirun\n");
    return 77;
  }
  /* before init */
  CHECK(!hvd_initialized(), "initialized before init");
  CHECK(hvd_rank() == -1 && hvd_size() == -1 && hvd_local_rank() == -1 &&
        hvd_local_size() == -1 && hvd_cross_rank() == -1 && hvd_cross_size() == -1,
        "topology before init");
  float f = 1;
  hvd_request_t req;
  CHECK_STATUS(hvd_allreduce("a", &f, &f, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
  CHECK(strstr(hvd_last_error(), "before hvd_init") != NULL, "message: %s", hvd_last_error());
  CHECK_STATUS(hvd_allreduce_async("a", &f, &f, 1, HVD_FLOAT32, HVD_SUM, &req),
               HVD_ERR_NOT_INITIALIZED);
  CHECK_STATUS(hvd_broadcast("a", &f, 1, HVD_FLOAT32, 0), HVD_ERR_NOT_INITIALIZED);
  void *out;
  size_t n;
  CHECK_STATUS(hvd_allgather("a", &f, 1, HVD_FLOAT32, &out, &n), HVD_ERR_NOT_INITIALIZED);
  CHECK_STATUS(hvd_barrier(), HVD_ERR_NOT_INITIALIZED);
  CHECK_STATUS(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);

  /* names and sizes */
  CHECK(strcmp(hvd_status_string(HVD_ERR_MISMATCH), "HVD_ERR_MISMATCH") == 0, "status string");
  CHECK(strcmp(hvd_status_string(HVD_OK), "HVD_OK") == 0, "status string");
  CHECK(strcmp(hvd_status_string(HVD_ERR_NO_MEMORY), "HVD_ERR_NO_MEMORY") == 0, "status string");
  size_t sizes[] = {4, 8, 2, 2, 1, 1, 4, 8};
  for (int d = 0; d < 8; d++) CHECK(hvd_dtype_size((hvd_dtype_t)d) == sizes[d], "dtype %d", d);
  CHECK(hvd_dtype_size((hvd_dtype_t)8) == 0, "invalid dtype size");

  /* malformed configuration, both spellings */
  setenv("HVD_FUSION_THRESHOLD", "lots", 1);
  CHECK_STATUS(hvd_init(), HVD_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hvd_last_error(), "HVD_FUSION_THRESHOLD=\"lots\"") != NULL, "message: %s",
        hvd_last_error());
  unsetenv("HVD_FUSION_THRESHOLD");
  setenv("HOROVOD_LOG_LEVEL", "chatty", 1);
  CHECK_STATUS(hvd_init(), HVD_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hvd_last_error(), "HOROVOD_LOG_LEVEL") != NULL, "message: %s", hvd_last_error());
  unsetenv("HOROVOD_LOG_LEVEL");
  setenv("HOROVOD_THREAD_AFFINITY", "0,,1", 1);
  CHECK_STATUS(hvd_init(), HVD_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hvd_last_error(), "HOROVOD_THREAD_AFFINITY=\"0,,1\"") != NULL, "message: %s",
        hvd_last_error());
  unsetenv("HOROVOD_THREAD_AFFINITY");
  const char *bad_nice[] = {"20", "-1", "5x", "low", "99999999999999999999"};
  for (int i = 0; i < 5; i++) {
    char want[64];
    snprintf(want, sizeof(want), "HVD_BACKGROUND_NICE=\"%s\"", bad_nice[i]);
    setenv("HVD_BACKGROUND_NICE", bad_nice[i], 1);
    CHECK_STATUS(hvd_init(), HVD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hvd_last_error(), want) != NULL, "message: %s", hvd_last_error());
  }
  unsetenv("HVD_BACKGROUND_NICE");
  CHECK(!hvd_initialized(), "a failed init left the runtime initialized");

  /* init alone, the background thread pinned to core 0 */
  setenv("HVD_THREAD_AFFINITY", "0", 1);
  CHECK_OK(hvd_init());
  CHECK(other_threads_pinned_to("0") >= 1, "no thread runs on core 0 alone after "
        "HVD_THREAD_AFFINITY=0");
  unsetenv("HVD_THREAD_AFFINITY");
  CHECK_OK(hvd_init());
  CHECK(hvd_initialized(), "not initialized");
  CHECK(hvd_rank() == 0 && hvd_size() == 1 && hvd_local_rank() == 0 && hvd_local_size() == 1 &&
        hvd_cross_rank() == 0 && hvd_cross_size() == 1, "topology %d/%d %d/%d %d/%d",
        hvd_rank(), hvd_size(), hvd_local_rank(), hvd_local_size(), hvd_cross_rank(),
        hvd_cross_size());
  for (int d = 0; d < 8; d++)
    for (int op = HVD_SUM; op <= HVD_PRODUCT; op++) {
      unsigned char in[16], res[16];
      memset(in, 0, sizeof(in));
      for (int i = 0; i < 2; i++) {   /* the value 3 (1 for the 8-bit ints) twice */
        size_t es = hvd_dtype_size((hvd_dtype_t)d);
        switch (d) {
          case HVD_FLOAT32: ((float *)in)[i] = 3; break;
          case HVD_FLOAT64: ((double *)in)[i] = 3; break;
          case HVD_FLOAT16: ((uint16_t *)in)[i] = 0x4200; break;   /* 3.0 */
          case HVD_BFLOAT16: ((uint16_t *)in)[i] = 0x4040; break;  /* 3.0 */
          case HVD_INT32: ((int32_t *)in)[i] = 3; break;
          case HVD_INT64: ((int64_t *)in)[i] = 3; break;
          default: in[i * es] = 1; break;
        }
      }
      CHECK_OK(hvd_allreduce(NULL, in, res, 2, (hvd_dtype_t)d, (hvd_op_t)op));
      CHECK(memcmp(in, res, 2 * hvd_dtype_size((hvd_dtype_t)d)) == 0,
            "size-1 allreduce dtype %d op %d changed the values", d, op);
    }
  int64_t b = 42;
  CHECK_OK(hvd_broadcast("b", &b, 1, HVD_INT64, 0));
  CHECK(b == 42, "broadcast");
  CHECK_OK(hvd_allgather("g", &b, 1, HVD_INT64, &out, &n));
  CHECK(n == 1 && *(int64_t *)out == 42, "allgather");
  free(out);
  CHECK_OK(hvd_barrier());

  CHECK_OK(hvd_shutdown());
  CHECK(!hvd_initialized() && hvd_rank() == -1, "still initialized after shutdown");
  CHECK_STATUS(hvd_allreduce("a", &f, &f, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
  CHECK_STATUS(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
  printf("PASS\n");
  return 0;
}
