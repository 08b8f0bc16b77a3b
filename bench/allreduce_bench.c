/* bench/allreduce_bench: allreduce bandwidth in nccl-tests' all_reduce_perf format
   (rank 0 prints).

     mpirun -np 2 build/allreduce_bench -b 8 -e 128M -f 2             # the hvd runtime
     mpirun -np 2 build/allreduce_bench -b 1M -e 256M --backend ring  # the bare ring

   What it prints, line for line as all_reduce_perf does: '#' lines with the parameters
   and the devices (plus one naming our backend), the column header over two lines and
   its units row, one row per size holding the out-of-place result (sendbuf != recvbuf)
   and then the in-place one (sendbuf == recvbuf), and at the end
   "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X".

   time = max over ranks of the mean time per iteration (us), the best of --reps timed
   loops (nccl-tests takes the mean over ranks by default; the max is the conservative
   figure, and the one this project's earlier tables used); algbw = bytes / time (GB/s,
   1e9 bytes); busbw = algbw * 2(n-1)/n; root is -1 (an allreduce has none). #wrong =
   elements, summed over ranks, that differ from the exactly known result of a fresh run
   after the timed loop (-c N: N such runs; -c 0: no check, N/A); inputs are small
   integers, so every result is exact in every dtype (check_input). Out of bounds values
   counts the (rank, size, placement) runs with any wrong element, as nccl-tests counts
   them. Avg bus bandwidth is the mean busbw over every row, both placements. The exit
   code is 1 when any #wrong > 0, 2 on a usage or setup error.

   Backends are rows of the table `backends`: hvd (the default: hvd_allreduce, the call
   a user makes), ring (coll_allreduce over the MPI transport, the bare algorithm), mpi
   (the MPI library's MPI_Allreduce), sendrecv (MPI_Sendrecv around the ring: the one-way
   bandwidth a copy can reach, for reference; busbw = algbw there). */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "hvd/hvd.h"
#include "util/flags.h"

/* nccl-tests' reductions, in its order. coll_op_t has no average (hvd divides after a
   SUM), so the benchmark keeps its own list and maps it per backend. */
typedef enum { BENCH_SUM, BENCH_PROD, BENCH_MAX, BENCH_MIN, BENCH_AVG } bench_op_t;
static const char *const OPS[] = {"sum", "prod", "max", "min", "avg", NULL};

typedef struct bench bench_t;

typedef struct {
  const char *name;
  const char *help;
  int is_allreduce; /* else a point-to-point shift: checks and busbw differ */
  int has_avg;      /* can reduce with BENCH_AVG */
  /* 0 on success; on failure fill err. */
  int (*init)(bench_t *b, char *err, size_t errlen);
  /* sendbuf == recvbuf: in place. */
  int (*run)(bench_t *b, const void *sendbuf, void *recvbuf, size_t count, char *err,
             size_t errlen);
  void (*fini)(bench_t *b);
} backend_t;

struct bench {
  int rank, size;
  coll_dtype_t dtype;
  bench_op_t op;
  const backend_t *backend;
  coll_transport_t *transport; /* ring */
};

static coll_op_t coll_op(bench_op_t op) {
  switch (op) {
    case BENCH_PROD: return COLL_PRODUCT;
    case BENCH_MAX: return COLL_MAX;
    case BENCH_MIN: return COLL_MIN;
    default: return COLL_SUM;   /* BENCH_AVG never reaches a backend without has_avg */
  }
}

/* ---- ring: our collectives over the MPI transport ---- */
static int ring_init(bench_t *b, char *err, size_t errlen) {
  MPI_Comm world = MPI_COMM_WORLD;
  coll_status_t st = coll_transport_mpi_create(&world, &b->transport);
  if (st != COLL_OK) snprintf(err, errlen, "coll_transport_mpi_create: %s", coll_status_string(st));
  return st != COLL_OK;
}
static int ring_run(bench_t *b, const void *s, void *r, size_t count, char *err, size_t errlen) {
  coll_status_t st = coll_allreduce(b->transport, s, r, count, b->dtype, coll_op(b->op));
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
static MPI_Op mpi_op(bench_op_t op) {
  switch (op) {
    case BENCH_PROD: return MPI_PROD;
    case BENCH_MAX: return MPI_MAX;
    case BENCH_MIN: return MPI_MIN;
    default: return MPI_SUM;
  }
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

/* ---- sendrecv: each rank sends to rank+1 and receives from rank-1 (in place:
   MPI_Sendrecv_replace, since one buffer cannot be both ends of MPI_Sendrecv) ---- */
static int sendrecv_run(bench_t *b, const void *s, void *r, size_t count, char *err,
                        size_t errlen) {
  size_t bytes = count * coll_dtype_size(b->dtype);
  if (bytes > INT_MAX) {
    snprintf(err, errlen, "MPI_Sendrecv: %zu bytes exceed INT_MAX", bytes);
    return 1;
  }
  int right = (b->rank + 1) % b->size, left = (b->rank - 1 + b->size) % b->size;
  int e = s == r ? MPI_Sendrecv_replace(r, (int)bytes, MPI_BYTE, right, 7, left, 7,
                                        MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                 : MPI_Sendrecv(s, (int)bytes, MPI_BYTE, right, 7, r, (int)bytes, MPI_BYTE,
                                left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
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
  /* coll_dtype_t has hvd_dtype_t's order; the ops are mapped in bench_op_t's order. */
  const hvd_op_t ops[] = {HVD_SUM, HVD_PRODUCT, HVD_MAX, HVD_MIN, HVD_AVERAGE};
  hvd_status_t st = hvd_allreduce("allreduce_bench", s, r, count, (hvd_dtype_t)b->dtype,
                                  ops[b->op]);
  if (st != HVD_OK) snprintf(err, errlen, "hvd_allreduce: %s", hvd_last_error());
  return st != HVD_OK;
}
static void hvd_backend_fini(bench_t *b) {
  (void)b;
  hvd_shutdown();
}

/* The first row is the default: the runtime a user calls. */
static const backend_t backends[] = {
    {"hvd", "hvd_allreduce through the hvd runtime (negotiation, fusion, background thread)",
     1, 1, hvd_backend_init, hvd_backend_run, hvd_backend_fini},
    {"ring", "coll_allreduce (recursive doubling / pipelined ring) over the MPI transport", 1,
     0, ring_init, ring_run, ring_fini},
    {"mpi", "the MPI library's MPI_Allreduce", 1, 0, mpi_init, mpi_run, NULL},
    {"sendrecv", "MPI_Sendrecv to rank+1 (one-way copy bandwidth, for reference)", 0, 1, NULL,
     sendrecv_run, NULL},
};
#define NBACKENDS (sizeof backends / sizeof *backends)

/* ---- inputs with exactly known results (the data check) ----
   Small integers, so that sums (at most 6n), products (2) and averages are exact in
   every dtype, float16 and bfloat16 included, and integer averages divide exactly:
   for avg rank r holds (i % 7) + 2r, which sums to n (i % 7) + n(n-1), a multiple of n.
   The integer types hold the results up to their range: int8 up to 21 ranks (sum) and
   7 ranks (avg). */
static double check_input(int r, size_t i, int n, bench_op_t op) {
  if (op == BENCH_PROD) return (size_t)r == i % (size_t)n ? 2 : 1;
  if (op == BENCH_AVG) return (double)(i % 7) + 2.0 * r;
  return (double)((r + i) % 7);
}
static double check_expected(size_t i, int n, bench_op_t op) {
  if (op == BENCH_AVG) return (double)(i % 7) + (n - 1);
  double acc = check_input(0, i, n, op);
  for (int r = 1; r < n; r++) {
    double v = check_input(r, i, n, op);
    if (op == BENCH_SUM) acc += v;
    else if (op == BENCH_PROD) acc *= v;
    else if (op == BENCH_MIN) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  return acc;
}
static void check_fill(void *buf, size_t count, coll_dtype_t dtype, int rank, int n,
                       bench_op_t op) {
  for (size_t i = 0; i < count; i++) coll_element_set(buf, i, dtype, check_input(rank, i, n, op));
}
/* Elements of buf[0..count) that are not what rank should hold after the collective:
   the allreduce's result, or (shift, the sendrecv backend) its left neighbour's input. */
static long check_count_wrong(const void *buf, size_t count, coll_dtype_t dtype, bench_op_t op,
                              int rank, int n, int shift) {
  const int left = (rank - 1 + n) % n;
  long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    double want = shift ? check_input(left, i, n, op) : check_expected(i, n, op);
    wrong += coll_element_get(buf, i, dtype) != want;
  }
  return wrong;
}

/* ---- flags (nccl-tests' letters and long names) ---- */
typedef struct {
  size_t minb, maxb, chunk, small, one_chunk;
  double factor;
  int iters, warmup, reps, check, ngpus, root;
  const char *dtype, *op, *backend;
} flags_t;

/* The choices of -d and --backend, in coll_dtype_t's and the table's order. */
static const char *dtype_names[COLL_INT64 + 2];
static const char *backend_names[NBACKENDS + 1];

enum { NFLAGS = 15 };
static void flag_table(flags_t *fl, util_flag_t table[NFLAGS]) {
  for (int d = COLL_FLOAT32; d <= COLL_INT64; d++)
    dtype_names[d] = coll_dtype_name((coll_dtype_t)d);
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
       .help = "timed iterations per size and placement"},
      {"warmup_iters", UTIL_FLAG_INT, &fl->warmup, .aliases = "-w", .min = 0, .max = INFINITY,
       .help = "warm-up iterations per size and placement"},
      {"check", UTIL_FLAG_INT, &fl->check, .aliases = "-c", .min = 0, .max = INFINITY,
       .help = "fresh runs checked against the exact result after each timed loop (0: no "
               "check, #wrong N/A)"},
      {"ngpus", UTIL_FLAG_INT, &fl->ngpus, .aliases = "-g", .min = 0, .max = INFINITY,
       .help = "devices per process: 1 (one rank per device, hvd's model; start more "
               "ranks for more)"},
      {"datatype", UTIL_FLAG_CHOICE, &fl->dtype, .aliases = "-d", .choices = dtype_names,
       .metavar = "DTYPE", .help = "element type"},
      {"op", UTIL_FLAG_CHOICE, &fl->op, .aliases = "-o", .choices = OPS,
       .help = "reduction (avg: --backend hvd only)"},
      {"root", UTIL_FLAG_INT, &fl->root, .aliases = "-r", .min = -1, .max = INFINITY,
       .help = "accepted for nccl-tests' command lines; an allreduce has no root (the "
               "root column shows -1, as all_reduce_perf's)"},
      {"reps", UTIL_FLAG_INT, &fl->reps, .min = 1, .max = INFINITY,
       .help = "repeat the timed loop, report the best"},
      {"chunk", UTIL_FLAG_SIZE, &fl->chunk, .min = 1, .max = INFINITY,
       .help = "ring pipeline chunk (coll_set_chunk_bytes)"},
      {"one_chunk", UTIL_FLAG_SIZE, &fl->one_chunk,
       .help = "on one host, ring collectives up to this size send each segment whole "
               "(coll_set_one_chunk_bytes; 0: always pipeline)"},
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
                   .one_chunk = coll_one_chunk_bytes(), .small = coll_small_message_bytes(),
                   .factor = 2, .iters = 20, .warmup = 5, .reps = 1, .check = 1, .ngpus = 1,
                   .dtype = "float", .op = "sum", .backend = backends[0].name};
}

static util_flags_spec_t flag_spec(const util_flag_t *table) {
  return (util_flags_spec_t){
      .prog = "allreduce_bench", .usage = "mpirun -np N allreduce_bench [flags]",
      .flags = table, .nflags = NFLAGS,
      .footer = "Prints nccl-tests' all_reduce_perf format on rank 0 (out-of-place and "
                "in-place); exits 1 when any #wrong > 0.\n"};
}

static void usage(FILE *f) {
  flags_t defaults = default_flags();
  util_flag_t table[NFLAGS];
  flag_table(&defaults, table);
  util_flags_spec_t spec = flag_spec(table);
  util_flags_usage(&spec, f);
}

/* Parses argv into fl: UTIL_FLAGS_OK, _HELP or _ERROR with the message in err. Also
   refuses what parses but cannot run, before MPI or any backend starts. */
static int parse_flags(int argc, char **argv, flags_t *fl, char *err, size_t errlen) {
  util_flag_t table[NFLAGS];
  flag_table(fl, table);
  util_flags_spec_t spec = flag_spec(table);
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, errlen);
  if (rc != UTIL_FLAGS_OK) return rc;
  if (fl->minb > fl->maxb) {
    snprintf(err, errlen, "-b %zu is larger than -e %zu; see allreduce_bench --help", fl->minb,
             fl->maxb);
    return UTIL_FLAGS_ERROR;
  }
  if (fl->ngpus != 1) {
    snprintf(err, errlen, "-g %d: one device per process only (hvd's model is one rank per "
             "device, and this bench reduces host memory); start N ranks instead: "
             "mpirun -np N allreduce_bench", fl->ngpus);
    return UTIL_FLAGS_ERROR;
  }
  const backend_t *be = &backends[util_flags_choice(backend_names, fl->backend)];
  if (util_flags_choice(OPS, fl->op) == BENCH_AVG && !be->has_avg) {
    snprintf(err, errlen, "-o avg: --backend %s has no average (sum, prod, max, min); "
             "use --backend hvd", be->name);
    return UTIL_FLAGS_ERROR;
  }
  return UTIL_FLAGS_OK;
}

/* nccl-tests' time column: 7 wide, fewer decimals as it grows. */
static void format_time(char *out, size_t len, double us) {
  snprintf(out, len, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

/* One placement of one size: warm-up, the timed loops, then -c checked runs. Returns
   0, or 1 with err set when the backend failed on this rank (the caller makes every
   rank agree). *time_s: max over ranks of the best loop's mean; *wrong: summed over
   ranks; *bad_runs: 1 when this rank saw a wrong element. */
static int bench_one(bench_t *b, const flags_t *fl, unsigned char *sendbuf,
                     unsigned char *recvbuf, size_t count, int inplace, double *time_s,
                     long *wrong, int *bad_runs, char *err, size_t errlen) {
  const void *sb = inplace ? recvbuf : sendbuf;
  check_fill(inplace ? recvbuf : sendbuf, count, b->dtype, b->rank, b->size, b->op);
  int failed = 0;
  double best = 1e30;
  for (int rep = 0; rep < fl->reps && !failed; rep++) {
    for (int w = 0; w < fl->warmup && !failed; w++)
      failed = b->backend->run(b, sb, recvbuf, count, err, errlen);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < fl->iters && !failed; it++)
      failed = b->backend->run(b, sb, recvbuf, count, err, errlen);
    double t = (MPI_Wtime() - t0) / fl->iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (t < best) best = t;
  }
  *time_s = best;
  *wrong = 0;
  *bad_runs = 0;
  /* Every rank checks, or none: the checked runs are collectives too. */
  int any_failed = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed) return failed;
  /* The timed loops have reduced (in place) or left (out of place) their results in
     recvbuf: check fresh runs, with the buffer the run must not read poisoned first: out
     of place recvbuf, so that a backend that does not write it cannot pass on what an
     earlier run left there; in place sendbuf, so that one reading it instead of recvbuf
     cannot pass on the inputs the out-of-place half left there. 0xFF bytes are NaN in
     the float types and -1 or 255 in the integer ones, never an expected value. */
  long local = 0;
  for (int c = 0; c < fl->check && !failed; c++) {
    if (inplace) {
      check_fill(recvbuf, count, b->dtype, b->rank, b->size, b->op);
      memset(sendbuf, 0xFF, count * coll_dtype_size(b->dtype));
    } else {
      check_fill(sendbuf, count, b->dtype, b->rank, b->size, b->op);
      memset(recvbuf, 0xFF, count * coll_dtype_size(b->dtype));
    }
    failed = b->backend->run(b, sb, recvbuf, count, err, errlen);
    if (!failed)
      local = check_count_wrong(recvbuf, count, b->dtype, b->op, b->rank, b->size,
                                !b->backend->is_allreduce);
    long sum = local;
    any_failed = failed;
    MPI_Allreduce(MPI_IN_PLACE, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_failed) break;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum) break;   /* as nccl-tests: the first wrong run is the one reported */
  }
  *wrong = local;
  *bad_runs = local > 0;
  return failed;
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
  coll_set_chunk_bytes(fl.chunk);
  coll_set_one_chunk_bytes(fl.one_chunk);
  coll_set_small_message_bytes(fl.small);
  b.dtype = (coll_dtype_t)util_flags_choice(dtype_names, fl.dtype);
  b.op = (bench_op_t)util_flags_choice(OPS, fl.op);
  b.backend = &backends[util_flags_choice(backend_names, fl.backend)];
  if (b.backend->init && b.backend->init(&b, err, sizeof err)) {
    if (b.rank == 0) fprintf(stderr, "allreduce_bench: %s\n", err);
    MPI_Finalize();
    return 2;
  }
  const size_t es = coll_dtype_size(b.dtype);
  unsigned char *sendbuf = malloc(fl.maxb + es), *recvbuf = malloc(fl.maxb + es);
  if (!sendbuf || !recvbuf) {
    fprintf(stderr, "allreduce_bench: rank %d cannot allocate 2 x %zu bytes\n", b.rank, fl.maxb);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(sendbuf, 0, fl.maxb + es); /* fault the pages in before anything is timed */
  memset(recvbuf, 0, fl.maxb + es);

  /* nccl-tests' header. Its "Using devices" names each rank's GPU; here each rank
     reduces host memory. */
  char line[320], host[256] = "?";
  gethostname(host, sizeof host - 1);
  snprintf(line, sizeof line, "#  Rank %2d Group %2d Pid %6d on %10s device cpu [host memory]\n",
           b.rank, 0, (int)getpid(), host);
  char *lines = b.rank == 0 ? malloc(sizeof line * (size_t)b.size) : NULL;
  MPI_Gather(line, (int)sizeof line, MPI_CHAR, lines, (int)sizeof line, MPI_CHAR, 0,
             MPI_COMM_WORLD);
  if (b.rank == 0) {
    printf("# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d "
           "iters: %d agg iters: 1 validation: %d graph: 0\n", fl.ngpus, fl.minb, fl.maxb,
           fl.factor, fl.warmup, fl.iters, fl.check);
    printf("#\n# Using devices\n");
    for (int r = 0; r < b.size && lines; r++) fputs(lines + sizeof line * (size_t)r, stdout);
    printf("#\n# allreduce_bench: %d ranks, backend %s, %s; time: max over ranks, best of %d "
           "timed loop(s)\n", b.size, b.backend->name, b.backend->help, fl.reps);
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place"
           "                       in-place          \n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }
  free(lines);

  long total_wrong = 0;
  int bad_runs = 0, failed = 0, rows = 0;
  double busbw_sum = 0;
  for (double fb = (double)fl.minb; fb <= (double)fl.maxb * 1.0000001 && !failed; fb *= fl.factor) {
    size_t count = (size_t)fb / es;
    if (count == 0) continue;
    size_t bytes = count * es;
    char row[256];
    int used = snprintf(row, sizeof row, "%12zu  %12zu  %8s  %6s  %6i", bytes, count,
                        coll_dtype_name(b.dtype), OPS[b.op], -1);
    for (int inplace = 0; inplace <= 1 && !failed; inplace++) {
      double t;
      long wrong;
      int bad;
      failed = bench_one(&b, &fl, sendbuf, recvbuf, count, inplace, &t, &wrong, &bad, err,
                         sizeof err);
      int any_failed = 0;
      MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (failed) fprintf(stderr, "allreduce_bench: rank %d: %s\n", b.rank, err);
      failed = any_failed;
      if (failed) break;
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wrong;
      bad_runs += bad;
      double algbw = (double)bytes / t / 1e9;
      double busbw = b.backend->is_allreduce ? algbw * 2.0 * (b.size - 1) / b.size : algbw;
      busbw_sum += busbw;
      rows++;
      char time_str[32], wrong_str[32];
      format_time(time_str, sizeof time_str, t * 1e6);
      if (fl.check) snprintf(wrong_str, sizeof wrong_str, "%5ld", wrong);
      else snprintf(wrong_str, sizeof wrong_str, "%5s", "N/A");
      if (used > 0 && (size_t)used < sizeof row)
        used += snprintf(row + used, sizeof row - (size_t)used, "  %7s  %6.2f  %6.2f  %5s",
                         time_str, algbw, busbw, wrong_str);
    }
    if (!failed && b.rank == 0) {
      printf("%s\n", row);
      fflush(stdout);
    }
  }
  if (b.backend->fini) b.backend->fini(&b);
  free(sendbuf);
  free(recvbuf);
  if (b.rank == 0 && !failed) {
    printf("# Out of bounds values : %d %s\n", bad_runs, bad_runs ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", rows ? busbw_sum / rows : 0.0);
    printf("#\n");
  }
  MPI_Finalize();
  return failed ? 2 : total_wrong ? 1 : 0;
}
