/* bench/allreduce_bench: allreduce bandwidth in nccl-tests columns (rank 0 prints).

     mpirun -np 2 build/allreduce_bench -b 1M -e 256M -f 2 --backend ring

   time = max over ranks of the mean time per iteration (us); algbw = bytes / time
   (GB/s); busbw = algbw * 2(n-1)/n; #wrong = elements (summed over ranks) that differ
   from the exactly known result. Inputs are small integers, so sums are exact in every
   dtype. The exit code is 1 when any #wrong > 0, 2 on a usage or setup error.

   Backends are rows of the table below: ring (coll_allreduce over the MPI transport),
   mpi (the MPI library's MPI_Allreduce), sendrecv (MPI_Sendrecv around the ring: the
   one-way bandwidth a copy can reach, for reference; busbw = algbw there). Adding one
   (e.g. the hvd runtime) is a new row: init, run, fini. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "hvd/hvd.h"

typedef struct bench bench_t;

typedef struct {
  const char *name;
  const char *help;
  int is_allreduce; /* else a point-to-point shift: checks and busbw differ */
  /* 0 on success; on failure fill err. */
  int (*init)(bench_t *b, char *err, size_t errlen);
  int (*run)(bench_t *b, const void *sendbuf, void *recvbuf, size_t count, char *err,
             size_t errlen);
  void (*fini)(bench_t *b);
} backend_t;

struct bench {
  int rank, size;
  coll_dtype_t dtype;
  coll_op_t op;
  const backend_t *backend;
  coll_transport_t *transport; /* ring */
  void *state;                 /* for backends added later */
};

/* ---- ring: our collectives over the MPI transport ---- */
static int ring_init(bench_t *b, char *err, size_t errlen) {
  MPI_Comm world = MPI_COMM_WORLD;
  coll_status_t st = coll_transport_mpi_create(&world, &b->transport);
  if (st != COLL_OK) snprintf(err, errlen, "coll_transport_mpi_create: %s", coll_status_string(st));
  return st != COLL_OK;
}
static int ring_run(bench_t *b, const void *s, void *r, size_t count, char *err, size_t errlen) {
  coll_status_t st = coll_allreduce(b->transport, s, r, count, b->dtype, b->op);
  if (st != COLL_OK) snprintf(err, errlen, "coll_allreduce: %s", b->transport->error);
  return st != COLL_OK;
}
static void ring_fini(bench_t *b) { coll_transport_destroy(b->transport); }

/* ---- mpi: MPI_Allreduce ---- */
static MPI_Datatype mpi_dtype(coll_dtype_t d) {
  switch (d) {
    case COLL_FLOAT32: return MPI_FLOAT;
    case COLL_FLOAT64: return MPI_DOUBLE;
    case COLL_INT8: return MPI_INT8_T;
    case COLL_UINT8: return MPI_UINT8_T;
    case COLL_INT32: return MPI_INT32_T;
    case COLL_INT64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL; /* MPI has no float16/bfloat16 */
  }
}
static MPI_Op mpi_op(coll_op_t op) {
  switch (op) {
    case COLL_SUM: return MPI_SUM;
    case COLL_MIN: return MPI_MIN;
    case COLL_MAX: return MPI_MAX;
    case COLL_PRODUCT: return MPI_PROD;
  }
  return MPI_OP_NULL;
}
static int mpi_init(bench_t *b, char *err, size_t errlen) {
  if (mpi_dtype(b->dtype) == MPI_DATATYPE_NULL) {
    snprintf(err, errlen, "--backend mpi: MPI has no %s type; use float, double or an integer type",
             coll_dtype_name(b->dtype));
    return 1;
  }
  return 0;
}
static int mpi_run(bench_t *b, const void *s, void *r, size_t count, char *err, size_t errlen) {
  if (count > INT_MAX) {
    snprintf(err, errlen, "MPI_Allreduce: count %zu exceeds INT_MAX", count);
    return 1;
  }
  int e = MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, (int)count, mpi_dtype(b->dtype),
                        mpi_op(b->op), MPI_COMM_WORLD);
  if (e != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(e, msg, &len);
    snprintf(err, errlen, "MPI_Allreduce: %s", msg);
  }
  return e != MPI_SUCCESS;
}

/* ---- sendrecv: each rank sends to rank+1 and receives from rank-1 ---- */
static int sendrecv_run(bench_t *b, const void *s, void *r, size_t count, char *err,
                        size_t errlen) {
  size_t bytes = count * coll_dtype_size(b->dtype);
  if (bytes > INT_MAX) {
    snprintf(err, errlen, "MPI_Sendrecv: %zu bytes exceed INT_MAX", bytes);
    return 1;
  }
  int right = (b->rank + 1) % b->size, left = (b->rank - 1 + b->size) % b->size;
  int e = MPI_Sendrecv(s, (int)bytes, MPI_BYTE, right, 7, r, (int)bytes, MPI_BYTE, left, 7,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (e != MPI_SUCCESS) snprintf(err, errlen, "MPI_Sendrecv failed (error %d)", e);
  return e != MPI_SUCCESS;
}

/* ---- hvd: hvd_allreduce through the whole runtime (queue, background thread,
   negotiation with rank 0, fusion buffer, the same ring) ---- */
static int hvd_backend_init(bench_t *b, char *err, size_t errlen) {
  (void)b;
  hvd_status_t s = hvd_init();
  if (s != HVD_OK) snprintf(err, errlen, "hvd_init: %s", hvd_last_error());
  return s != HVD_OK;
}
static int hvd_backend_run(bench_t *b, const void *s, void *r, size_t count, char *err,
                           size_t errlen) {
  /* coll_dtype_t has hvd_dtype_t's order; the ops differ by AVERAGE */
  const hvd_op_t ops[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT};
  hvd_status_t st = hvd_allreduce("allreduce_bench", s, r, count, (hvd_dtype_t)b->dtype,
                                  ops[b->op]);
  if (st != HVD_OK) snprintf(err, errlen, "hvd_allreduce: %s", hvd_last_error());
  return st != HVD_OK;
}
static void hvd_backend_fini(bench_t *b) {
  (void)b;
  hvd_shutdown();
}

static const backend_t backends[] = {
    {"ring", "coll_allreduce (recursive doubling / pipelined ring) over the MPI transport", 1,
     ring_init, ring_run, ring_fini},
    {"mpi", "the MPI library's MPI_Allreduce", 1, mpi_init, mpi_run, NULL},
    {"hvd", "hvd_allreduce through the hvd runtime (negotiation, fusion, background thread)", 1,
     hvd_backend_init, hvd_backend_run, hvd_backend_fini},
    {"sendrecv", "MPI_Sendrecv to rank+1 (one-way copy bandwidth, for reference)", 0, NULL,
     sendrecv_run, NULL},
};
#define NBACKENDS (sizeof backends / sizeof *backends)

/* ---- inputs with exactly known results ---- */
static double input(int r, size_t i, int n, coll_op_t op) {
  if (op == COLL_PRODUCT) return (size_t)r == i % (size_t)n ? 2 : 1;
  return (double)((r + i) % 7);
}
static double expected(size_t i, int n, coll_op_t op) {
  double acc = input(0, i, n, op);
  for (int r = 1; r < n; r++) {
    double v = input(r, i, n, op);
    if (op == COLL_SUM) acc += v;
    else if (op == COLL_PRODUCT) acc *= v;
    else if (op == COLL_MIN) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  return acc;
}

/* ---- flags ---- */
static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case 'M': case 'm': v *= 1024.0 * 1024; break;
    case 'K': case 'k': v *= 1024.0; break;
    case '\0': break;
    default: return 0;
  }
  if (*end != '\0' && end[1] != '\0') return 0;   /* one suffix letter, nothing after */
  /* 0 is "bad" to the callers: NaN, below one byte, or past size_t (converting that
     would be undefined) */
  if (!(v >= 1.0) || v >= 18446744073709551616.0) return 0;
  return (size_t)v;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N allreduce_bench [flags]\n"
          "  -b SIZE     smallest message in bytes (K/M/G suffixes), default 8\n"
          "  -e SIZE     largest message in bytes, default 128M\n"
          "  -f FACTOR   multiply the size by this each row, default 2\n"
          "  -n ITERS    timed iterations per size, default 20\n"
          "  -w ITERS    warm-up iterations per size, default 5\n"
          "  -r REPS     repeat the timed loop, report the best, default 1\n"
          "  -d DTYPE    float|double|half|bfloat16|int8|uint8|int32|int64, default float\n"
          "  -o OP       sum|prod|min|max, default sum\n"
          "  --inplace   sendbuf == recvbuf (default: out of place)\n"
          "  --chunk SIZE  ring pipeline chunk (coll_set_chunk_bytes), default %zu\n"
          "  --small SIZE  below this, recursive doubling (coll_set_small_message_bytes), default %zu\n"
          "  --backend B one of:\n",
          coll_chunk_bytes(), coll_small_message_bytes());
  for (size_t i = 0; i < NBACKENDS; i++) fprintf(f, "      %-9s %s\n", backends[i].name, backends[i].help);
  fprintf(f, "Prints nccl-tests columns on rank 0; exits 1 when any #wrong > 0.\n");
}

int main(int argc, char **argv) {
  /* The hvd backend's background thread calls MPI while main times with MPI_Barrier /
     MPI_Allreduce: that needs MPI_THREAD_MULTIPLE, asked only then. */
  int provided, want = MPI_THREAD_SERIALIZED;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--backend") && !strcmp(argv[i + 1], "hvd")) want = MPI_THREAD_MULTIPLE;
  MPI_Init_thread(&argc, &argv, want, &provided);
  if (provided < want) {
    fprintf(stderr, "allreduce_bench: MPI provides thread level %d, need %d\n", provided, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  bench_t b = {0};
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  size_t minb = 8, maxb = 128u << 20;
  double factor = 2;
  int iters = 20, warmup = 5, reps = 1, inplace = 0;
  b.dtype = COLL_FLOAT32;
  b.op = COLL_SUM;
  b.backend = &backends[0];
  const char *bad = NULL;
  for (int i = 1; i < argc && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      if (b.rank == 0) usage(stdout);
      MPI_Finalize();
      return 0;
    } else if (!strcmp(a, "--inplace")) {
      inplace = 1;
    } else if (!v) {
      bad = a;
    } else if (!strcmp(a, "-b")) {
      if (!(minb = parse_size(v))) bad = a;
      i++;
    } else if (!strcmp(a, "-e")) {
      if (!(maxb = parse_size(v))) bad = a;
      i++;
    } else if (!strcmp(a, "-f")) {
      factor = atof(v);
      if (factor <= 1) bad = a;
      i++;
    } else if (!strcmp(a, "-n")) {
      if ((iters = atoi(v)) < 1) bad = a;
      i++;
    } else if (!strcmp(a, "-w")) {
      if ((warmup = atoi(v)) < 0) bad = a;
      i++;
    } else if (!strcmp(a, "--chunk")) {
      size_t c = parse_size(v);
      if (!c) bad = a;
      else coll_set_chunk_bytes(c);
      i++;
    } else if (!strcmp(a, "--small")) {
      coll_set_small_message_bytes(parse_size(v));
      i++;
    } else if (!strcmp(a, "-r")) {
      if ((reps = atoi(v)) < 1) bad = a;
      i++;
    } else if (!strcmp(a, "-d")) {
      int found = 0;
      for (int d = COLL_FLOAT32; d <= COLL_INT64; d++)
        if (!strcmp(v, coll_dtype_name((coll_dtype_t)d))) b.dtype = (coll_dtype_t)d, found = 1;
      if (!found) bad = a;
      i++;
    } else if (!strcmp(a, "-o")) {
      const char *names[] = {"sum", "min", "max", "prod"};
      int found = 0;
      for (int o = 0; o < 4; o++)
        if (!strcmp(v, names[o])) b.op = (coll_op_t)o, found = 1;
      if (!found) bad = a;
      i++;
    } else if (!strcmp(a, "--backend")) {
      int found = 0;
      for (size_t k = 0; k < NBACKENDS; k++)
        if (!strcmp(v, backends[k].name)) b.backend = &backends[k], found = 1;
      if (!found) bad = a;
      i++;
    } else {
      bad = a;
    }
  }
  if (bad || minb > maxb) {
    if (b.rank == 0) {
      if (bad) fprintf(stderr, "allreduce_bench: bad or incomplete flag %s\n", bad);
      else fprintf(stderr, "allreduce_bench: -b %zu is larger than -e %zu\n", minb, maxb);
      usage(stderr);
    }
    MPI_Finalize();
    return 2;
  }
  char err[512] = "";
  if (b.backend->init && b.backend->init(&b, err, sizeof err)) {
    if (b.rank == 0) fprintf(stderr, "allreduce_bench: %s\n", err);
    MPI_Finalize();
    return 2;
  }
  const size_t es = coll_dtype_size(b.dtype);
  unsigned char *sendbuf = malloc(maxb + es), *recvbuf = malloc(maxb + es);
  if (!sendbuf || !recvbuf) {
    fprintf(stderr, "allreduce_bench: rank %d cannot allocate 2 x %zu bytes\n", b.rank, maxb);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(sendbuf, 0, maxb + es); /* fault the pages in before anything is timed */
  memset(recvbuf, 0, maxb + es);
  const char *opname[] = {"sum", "min", "max", "prod"};
  if (b.rank == 0) {
    printf("# allreduce_bench: %d ranks, backend %s, %s, %d iterations (%d warm-up), best of %d\n",
           b.size, b.backend->name, inplace ? "in place" : "out of place", iters, warmup, reps);
    printf("#%11s%14s%10s%8s%9s%8s%8s%8s\n", "size", "count", "type", "redop", "time", "algbw",
           "busbw", "#wrong");
    fflush(stdout);
  }
  long total_wrong = 0;
  int failed = 0;
  for (double fb = (double)minb; fb <= (double)maxb * 1.0000001 && !failed; fb *= factor) {
    size_t count = (size_t)fb / es;
    if (count == 0) continue;
    size_t bytes = count * es;
    for (size_t i = 0; i < count; i++) coll_element_set(sendbuf, i, b.dtype, input(b.rank, i, b.size, b.op));
    void *rb = inplace ? (void *)sendbuf : (void *)recvbuf;
    double best = 1e30;
    for (int rep = 0; rep < reps && !failed; rep++) {
      for (int w = 0; w < warmup && !failed; w++)
        if (inplace) {
          for (size_t i = 0; i < count; i++) coll_element_set(sendbuf, i, b.dtype, input(b.rank, i, b.size, b.op));
          failed = b.backend->run(&b, sendbuf, rb, count, err, sizeof err);
        } else {
          failed = b.backend->run(&b, sendbuf, rb, count, err, sizeof err);
        }
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int it = 0; it < iters && !failed; it++)
        failed = b.backend->run(&b, sendbuf, rb, count, err, sizeof err);
      double t = (MPI_Wtime() - t0) / iters;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (t < best) best = t;
    }
    /* Check one fresh run (in place, the timed loop has reduced the result again). */
    if (!failed && inplace) {
      for (size_t i = 0; i < count; i++) coll_element_set(sendbuf, i, b.dtype, input(b.rank, i, b.size, b.op));
      failed = b.backend->run(&b, sendbuf, rb, count, err, sizeof err);
    }
    long wrong = 0;
    int left = (b.rank - 1 + b.size) % b.size;
    for (size_t i = 0; i < count && !failed; i++) {
      double want = b.backend->is_allreduce ? expected(i, b.size, b.op) : input(left, i, b.size, b.op);
      wrong += coll_element_get(rb, i, b.dtype) != want;
    }
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed) fprintf(stderr, "allreduce_bench: rank %d: %s\n", b.rank, err);
    failed = any_failed;
    if (failed) break;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    total_wrong += wrong;
    double algbw = (double)bytes / best / 1e9;
    double busbw = b.backend->is_allreduce ? algbw * 2.0 * (b.size - 1) / b.size : algbw;
    if (b.rank == 0) {
      printf("%12zu%14zu%10s%8s%9.1f%8.2f%8.2f%8ld\n", bytes, count, coll_dtype_name(b.dtype),
             opname[b.op], best * 1e6, algbw, busbw, wrong);
      fflush(stdout);
    }
  }
  if (b.backend->fini) b.backend->fini(&b);
  free(sendbuf);
  free(recvbuf);
  if (b.rank == 0 && !failed) printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  MPI_Finalize();
  return failed ? 2 : total_wrong ? 1 : 0;
}
