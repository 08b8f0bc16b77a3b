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
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "hvd/hvd.h"
#include "util/flags.h"

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

/* ---- flags (nccl-tests' letters and long names) ---- */
typedef struct {
  size_t minb, maxb, chunk, small;
  double factor;
  int iters, warmup, reps, inplace;
  const char *dtype, *op, *backend;
} flags_t;

static const char *const OPS[] = {"sum", "min", "max", "prod", NULL};   /* coll_op_t order */
/* The choices of -d and --backend, in coll_dtype_t's and the table's order. */
static const char *dtype_names[COLL_INT64 + 2];
static const char *backend_names[NBACKENDS + 1];

enum { NFLAGS = 12 };
static void flag_table(flags_t *fl, util_flag_t table[NFLAGS]) {
  for (int d = COLL_FLOAT32; d <= COLL_INT64; d++) dtype_names[d] = coll_dtype_name((coll_dtype_t)d);
  /* The backends' names and help come from their table, so a new row shows here. */
  static char backend_help[1024];
  size_t used = 0;
  for (size_t k = 0; k < NBACKENDS; k++) {
    backend_names[k] = backends[k].name;
    if (used < sizeof backend_help)
      used += (size_t)snprintf(backend_help + used, sizeof backend_help - used, "%s%s: %s",
                               k ? "; " : "", backends[k].name, backends[k].help);
  }
  const util_flag_t t[] = {
      {"minbytes", UTIL_FLAG_SIZE, &fl->minb, .aliases = "-b", .min = 1, .max = INFINITY,
       .help = "smallest message in bytes"},
      {"maxbytes", UTIL_FLAG_SIZE, &fl->maxb, .aliases = "-e", .min = 1, .max = INFINITY,
       .help = "largest message in bytes"},
      {"stepfactor", UTIL_FLAG_DOUBLE, &fl->factor, .aliases = "-f", .min = 1.0000001,
       .max = INFINITY, .help = "multiply the size by this each row"},
      {"iters", UTIL_FLAG_INT, &fl->iters, .aliases = "-n", .min = 1, .max = INFINITY,
       .help = "timed iterations per size"},
      {"warmup_iters", UTIL_FLAG_INT, &fl->warmup, .aliases = "-w", .min = 0, .max = INFINITY,
       .help = "warm-up iterations per size"},
      {"reps", UTIL_FLAG_INT, &fl->reps, .aliases = "-r", .min = 1, .max = INFINITY,
       .help = "repeat the timed loop, report the best"},
      {"datatype", UTIL_FLAG_CHOICE, &fl->dtype, .aliases = "-d", .choices = dtype_names,
       .metavar = "DTYPE", .help = "element type"},
      {"op", UTIL_FLAG_CHOICE, &fl->op, .aliases = "-o", .choices = OPS, .help = "reduction"},
      {"inplace", UTIL_FLAG_BOOL, &fl->inplace,
       .help = "sendbuf == recvbuf (off: out of place)"},
      {"chunk", UTIL_FLAG_SIZE, &fl->chunk, .min = 1, .max = INFINITY,
       .help = "ring pipeline chunk (coll_set_chunk_bytes)"},
      {"small", UTIL_FLAG_SIZE, &fl->small,
       .help = "below this, recursive doubling (coll_set_small_message_bytes)"},
      {"backend", UTIL_FLAG_CHOICE, &fl->backend, .choices = backend_names, .metavar = "B",
       .help = backend_help},
  };
  _Static_assert(sizeof t / sizeof t[0] == NFLAGS, "NFLAGS is the number of flags");
  memcpy(table, t, sizeof t);
}

static flags_t default_flags(void) {
  return (flags_t){.minb = 8, .maxb = 128u << 20, .chunk = coll_chunk_bytes(),
                   .small = coll_small_message_bytes(), .factor = 2, .iters = 20,
                   .warmup = 5, .reps = 1, .dtype = "float", .op = "sum",
                   .backend = backends[0].name};
}

static util_flags_spec_t flag_spec(const util_flag_t *table) {
  return (util_flags_spec_t){
      .prog = "allreduce_bench", .usage = "mpirun -np N allreduce_bench [flags]",
      .flags = table, .nflags = NFLAGS,
      .footer = "Prints nccl-tests columns on rank 0; exits 1 when any #wrong > 0.\n"};
}

static void usage(FILE *f) {
  flags_t defaults = default_flags();
  util_flag_t table[NFLAGS];
  flag_table(&defaults, table);
  util_flags_spec_t spec = flag_spec(table);
  util_flags_usage(&spec, f);
}

/* Parses argv into fl: UTIL_FLAGS_OK, _HELP or _ERROR with the message in err. */
static int parse_flags(int argc, char **argv, flags_t *fl, char *err, size_t errlen) {
  util_flag_t table[NFLAGS];
  flag_table(fl, table);
  util_flags_spec_t spec = flag_spec(table);
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, errlen);
  if (rc == UTIL_FLAGS_OK && fl->minb > fl->maxb) {
    snprintf(err, errlen, "-b %zu is larger than -e %zu; see allreduce_bench --help", fl->minb,
             fl->maxb);
    return UTIL_FLAGS_ERROR;
  }
  return rc;
}

int main(int argc, char **argv) {
  /* The flags first (they need no MPI): the hvd backend's background thread calls MPI
     while main times with MPI_Barrier / MPI_Allreduce, which needs MPI_THREAD_MULTIPLE,
     asked only then. Only rank 0 reports a bad flag, once MPI says which rank this is. */
  flags_t fl = default_flags();
  char err[512] = "";
  const int parsed = parse_flags(argc, argv, &fl, err, sizeof err);
  int provided, want = MPI_THREAD_SERIALIZED;
  if (parsed == UTIL_FLAGS_OK && !strcmp(fl.backend, "hvd")) want = MPI_THREAD_MULTIPLE;
  MPI_Init_thread(&argc, &argv, want, &provided);
  if (provided < want) {
    fprintf(stderr, "allreduce_bench: MPI provides thread level %d, need %d\n", provided, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  bench_t b = {0};
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  if (parsed != UTIL_FLAGS_OK) {
    if (b.rank == 0 && parsed == UTIL_FLAGS_HELP) usage(stdout);
    else if (b.rank == 0) fprintf(stderr, "allreduce_bench: %s\n", err);
    MPI_Finalize();
    return parsed == UTIL_FLAGS_HELP ? 0 : 2;
  }
  const size_t minb = fl.minb, maxb = fl.maxb;
  const double factor = fl.factor;
  const int iters = fl.iters, warmup = fl.warmup, reps = fl.reps, inplace = fl.inplace;
  coll_set_chunk_bytes(fl.chunk);
  coll_set_small_message_bytes(fl.small);
  b.dtype = (coll_dtype_t)util_flags_choice(dtype_names, fl.dtype);
  b.op = (coll_op_t)util_flags_choice(OPS, fl.op);
  b.backend = &backends[util_flags_choice(backend_names, fl.backend)];
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
