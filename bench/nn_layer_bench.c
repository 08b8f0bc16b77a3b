/* bench/nn_layer_bench.c: times each CPU kernel on the layer shapes of resnet20 and lenet
   at a given batch, forward and backward, so kernel changes can be measured (and put side
   by side with bench/torch_layer_bench.py, the same shapes in PyTorch).
   Usage: nn_layer_bench [--threads N] [--batch N] [--reps N] [--filter SUBSTRING]
   [--min] [--warmup N] [--shapes FILE] [--winograd 0|1] [--wino-min C] [--wino-tiles N]
   [--direct 0|1|2] [--direct-max C] [--direct-s2-max C] [--direct-dw-max C]
   [--block-kb K] (--help)
   Prints the median milliseconds of forward and backward per layer (with --shapes also
   the fastest rep of each). Not a test.
   --shapes FILE times the layers listed in FILE instead of the built-in ones (the
   roofline report, scripts/roofline.py, writes it; torch_layer_bench.py reads the same
   file), one per line: ID KIND N C_IN H W C_OUT K STRIDE PAD [nodx], KIND one of conv,
   bn, relu, maxpool, gap (global average pool), fc, add; N is the batch of that line
   (--batch is ignored); nodx: a convolution whose input gradient is not wanted (a
   network's first layer). add is timed forward only (its backward is no kernel). */
#include "nn/nn.h"
#include "nn/conv2d_internal.h"
#include "util/clock.h"
#include "util/flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void *alloc_or_die(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "nn_layer_bench: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static float *rnd(size_t n) {
  float *p = alloc_or_die(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f;
  return p;
}

typedef struct {
  const char *name;
  char kind;  /* c conv, b batchnorm, m maxpool, r relu, l linear, g global avgpool, a add */
  int cin, h, w, cout, k, stride, pad;
  int n;      /* batch of a --shapes line; 0: --batch */
  int no_dx;  /* conv: the input gradient is not wanted (a network's first layer) */
} layer_t;

static const layer_t layers[] = {
  {"r20 conv1 3->16 3x3 32x32", 'c', 3, 32, 32, 16, 3, 1, 1, 0, 0},
  {"r20 conv 16->16 3x3 32x32", 'c', 16, 32, 32, 16, 3, 1, 1, 0, 0},
  {"r20 conv 16->32 3x3 s2 32x32", 'c', 16, 32, 32, 32, 3, 2, 1, 0, 0},
  {"r20 conv 16->32 1x1 s2 32x32", 'c', 16, 32, 32, 32, 1, 2, 0, 0, 0},
  {"r20 conv 32->32 3x3 16x16", 'c', 32, 16, 16, 32, 3, 1, 1, 0, 0},
  {"r20 conv 32->64 3x3 s2 16x16", 'c', 32, 16, 16, 64, 3, 2, 1, 0, 0},
  {"r20 conv 64->64 3x3 8x8", 'c', 64, 8, 8, 64, 3, 1, 1, 0, 0},
  {"r20 bn 16x32x32", 'b', 16, 32, 32, 0, 0, 0, 0, 0, 0},
  {"r20 bn 32x16x16", 'b', 32, 16, 16, 0, 0, 0, 0, 0, 0},
  {"r20 bn 64x8x8", 'b', 64, 8, 8, 0, 0, 0, 0, 0, 0},
  {"r20 relu 16x32x32", 'r', 16, 32, 32, 0, 0, 0, 0, 0, 0},
  {"lenet conv1 1->32 5x5 28x28", 'c', 1, 28, 28, 32, 5, 1, 2, 0, 0},
  {"lenet conv2 32->64 5x5 14x14", 'c', 32, 14, 14, 64, 5, 1, 2, 0, 0},
  {"lenet maxpool 32x28x28", 'm', 32, 28, 28, 0, 2, 2, 0, 0, 0},
  {"lenet fc1 3136->512", 'l', 3136, 1, 1, 512, 0, 0, 0, 0, 0},
  {"lenet fc2 512->10", 'l', 512, 1, 1, 10, 0, 0, 0, 0, 0},
};

/* Parses the flags into the locals of main and nn's conv2d knobs; exits on --help and on
   a bad flag. */
static void parse_flags(int argc, char **argv, int *threads, int *batch, int *reps,
                        const char **filter, int *use_min, int *warmup,
                        const char **shapes) {
  int block_kb = (int)(nn_conv2d_block_bytes >> 10);
  const util_flag_t table[] = {
      {"threads", UTIL_FLAG_INT, threads, .min = 1, .max = 4096, .help = "CPU threads"},
      {"batch", UTIL_FLAG_INT, batch, .min = 1, .max = 1 << 20, .help = "samples per layer call"},
      {"reps", UTIL_FLAG_INT, reps, .min = 1, .max = 1 << 20, .help = "timed repetitions"},
      {"filter", UTIL_FLAG_STRING, filter, .metavar = "SUBSTRING",
       .help = "only the layers whose name holds SUBSTRING"},
      {"min", UTIL_FLAG_BOOL, use_min,
       .help = "the fastest rep instead of the median (for a loaded machine)"},
      {"warmup", UTIL_FLAG_INT, warmup, .min = 0, .max = 1 << 20,
       .help = "untimed rounds before the timed ones, per layer"},
      {"shapes", UTIL_FLAG_STRING, shapes, .metavar = "FILE",
       .help = "time the layers of FILE (ID KIND N C_IN H W C_OUT K STRIDE PAD [nodx] per "
               "line) instead of the built-in ones"},
      {NULL, .help = "conv2d knobs (nn/conv2d_internal.h):"},
      {"winograd", UTIL_FLAG_INT, &nn_conv2d_winograd, .min = 0, .max = 1,
       .help = "1: 3x3 and 5x5 stride-1 convolutions by Winograd; 0: im2col + GEMM"},
      {"wino-min", UTIL_FLAG_INT, &nn_conv2d_wino_min_channels, .min = 0, .max = 1 << 20,
       .metavar = "C", .help = "Winograd only when c_in and c_out are both at least C"},
      {"wino-tiles", UTIL_FLAG_INT, &nn_wino_group_tiles, .min = 1, .max = 1 << 20,
       .help = "Winograd tiles per group of samples (the N of its GEMMs)"},
      {"direct", UTIL_FLAG_INT, &nn_conv2d_direct, .min = 0, .max = 2,
       .help = "1: the direct kernel for small stride-1 convolutions (AVX-512 or "
               "AVX2) and stride-2 forwards (AVX-512); 2: those also on AVX2; 0: off"},
      {"direct-max", UTIL_FLAG_INT, &nn_conv2d_direct_max_channels, .min = 0, .max = 1 << 20,
       .metavar = "C", .help = "stride-1 convolutions by the direct kernel up to C channels "
                                 "(0: by CPU, 32 or 16)"},
      {"direct-s2-max", UTIL_FLAG_INT, &nn_conv2d_direct_s2_max_channels, .min = 0,
       .max = 1 << 20, .metavar = "C",
       .help = "stride-2 forwards by the direct kernel up to C channels"},
      {"direct-dw-max", UTIL_FLAG_INT, &nn_conv2d_direct_dw_max_channels, .min = 0,
       .max = 1 << 20, .metavar = "C",
       .help = "3x3 weight gradients (stride 1 or 2) by the direct kernel up to C "
               "channels (0: none)"},
      {"direct-avx2-dw-max-in", UTIL_FLAG_INT, &nn_conv2d_direct_avx2_dw_max_in, .min = 0,
       .max = 1 << 20, .metavar = "C",
       .help = "AVX2 alone: 3x3 weight gradients by the direct kernel up to C input "
               "channels"},
      {"block-kb", UTIL_FLAG_INT, &block_kb, .min = 1, .max = 1 << 20, .metavar = "K",
       .help = "KiB of im2col columns per block"},
  };
  const util_flags_spec_t spec = {
      .prog = "nn_layer_bench", .usage = "nn_layer_bench [flags]", .flags = table,
      .nflags = UTIL_FLAGS_COUNT(table),
      .about = "Median ms of forward and backward per kernel on resnet20/lenet layer shapes.\n"};
  char err[512];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    util_flags_usage(&spec, stdout);
    exit(0);
  }
  if (rc != UTIL_FLAGS_OK) {
    fprintf(stderr, "nn_layer_bench: %s\n", err);
    exit(2);
  }
  nn_conv2d_block_bytes = (size_t)block_kb << 10;
}

/* Exits with the library's message when an nn call failed. */
static void check(nn_status_t st, const char *what, const char *layer) {
  if (st == NN_OK) return;
  fprintf(stderr, "nn_layer_bench: %s on layer %s: %s (%s)\n", what, layer,
          nn_status_string(st), nn_last_error());
  exit(1);
}

/* Reads a --shapes file (format in the header comment) into a new array; exits with the
   line and what was wrong on any error. */
static layer_t *read_shapes(const char *path, size_t *count) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    exit(2);
  }
  static const struct { const char *word; char kind; } kinds[] = {
      {"conv", 'c'}, {"bn", 'b'}, {"relu", 'r'}, {"maxpool", 'm'},
      {"gap", 'g'},  {"fc", 'l'}, {"add", 'a'}};
  layer_t *v = NULL;
  size_t n = 0, cap = 0;
  char line[512];
  for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
    char id[128], kw[16], flag[16] = "";
    layer_t L = {0};
    if (line[strspn(line, " \t\r\n")] == '\0' || line[strspn(line, " \t")] == '#') continue;
    int got = sscanf(line, "%127s %15s %d %d %d %d %d %d %d %d %15s", id, kw, &L.n, &L.cin,
                     &L.h, &L.w, &L.cout, &L.k, &L.stride, &L.pad, flag);
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
      if (got >= 2 && strcmp(kw, kinds[i].word) == 0) L.kind = kinds[i].kind;
    if (got < 10 || !L.kind || L.n < 1 || L.cin < 1 || L.h < 1 || L.w < 1 ||
        (got == 11 && strcmp(flag, "nodx") != 0)) {
      fprintf(stderr, "nn_layer_bench: %s:%d: expected ID KIND N C_IN H W C_OUT K STRIDE "
              "PAD [nodx] with KIND conv|bn|relu|maxpool|gap|fc|add and positive sizes, "
              "got: %s", path, lineno, line);
      exit(2);
    }
    L.no_dx = got == 11;
    char *name = malloc(strlen(id) + 1);
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      v = realloc(v, cap * sizeof *v); /* on failure the program ends just below */
    }
    if (!name || !v) {
      fprintf(stderr, "nn_layer_bench: out of memory reading %s\n", path);
      exit(1);
    }
    L.name = strcpy(name, id);
    v[n++] = L;
  }
  if (ferror(f) || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
  if (n == 0) {
    fprintf(stderr, "nn_layer_bench: %s lists no layer\n", path);
    exit(2);
  }
  *count = n;
  return v;
}

/* Times reps forward and backward passes of one layer (after warmup untimed ones) and
   leaves the median (or with use_min the fastest) in *fwd_ms and *bwd_ms, the fastest in
   *fwd_min and *bwd_min. */
static void time_layer(const layer_t *L, int batch, int reps, int warmup, int use_min,
                       double *fwd_ms, double *bwd_ms, double *fwd_min, double *bwd_min) {
  size_t nx = (size_t)batch * L->cin * L->h * L->w;
  float *x = rnd(nx), *dx = alloc_or_die(nx * sizeof(float));
  float *y = NULL, *dy = NULL, *w = NULL, *dw = NULL, *ws = NULL, *p1 = NULL, *p2 = NULL,
        *p3 = NULL, *p4 = NULL, *x2 = NULL;
  int32_t *am = NULL;
  /* Designated initialisers: a field nn.h may add later (say dilation) stays zero. */
  nn_conv2d_shape_t cs = {.n = batch, .c_in = L->cin, .h_in = L->h, .w_in = L->w,
                          .c_out = L->cout, .kh = L->k, .kw = L->k, .stride_h = L->stride,
                          .stride_w = L->stride, .pad_h = L->pad, .pad_w = L->pad};
  nn_batchnorm2d_shape_t bs = {.n = batch, .c = L->cin, .h = L->h, .w = L->w, .eps = 1e-5f,
                               .momentum = 0.1f};
  nn_pool2d_shape_t ps = {.n = batch, .c = L->cin, .h_in = L->h, .w_in = L->w, .kh = L->k,
                          .kw = L->k, .stride_h = L->stride, .stride_w = L->stride,
                          .pad_h = L->pad, .pad_w = L->pad};
  size_t ny = nx;
  if (L->kind == 'c') {
    check(nn_conv2d_shape(&cs), "nn_conv2d_shape", L->name);
    ny = (size_t)batch * L->cout * cs.h_out * cs.w_out;
    w = rnd((size_t)L->cout * L->cin * L->k * L->k);
    dw = alloc_or_die((size_t)L->cout * L->cin * L->k * L->k * sizeof(float));
    ws = alloc_or_die(nn_conv2d_workspace_floats(&cs) * sizeof(float) + 64);
  } else if (L->kind == 'm') {
    check(nn_pool2d_shape(&ps), "nn_pool2d_shape", L->name);
    ny = (size_t)batch * L->cin * ps.h_out * ps.w_out;
    am = alloc_or_die(ny * sizeof *am);
  } else if (L->kind == 'b') {
    p1 = rnd(L->cin); p2 = rnd(L->cin);
    p3 = alloc_or_die(L->cin * sizeof(float)); p4 = alloc_or_die(L->cin * sizeof(float));
    w = alloc_or_die(L->cin * sizeof(float)); dw = alloc_or_die(L->cin * sizeof(float));
  } else if (L->kind == 'l') {
    ny = (size_t)batch * L->cout;
    w = rnd((size_t)L->cout * L->cin);
    dw = alloc_or_die((size_t)L->cout * L->cin * sizeof(float));
    p1 = alloc_or_die(L->cout * sizeof(float));
  } else if (L->kind == 'g') {
    ny = (size_t)batch * L->cin;
  } else if (L->kind == 'a') {
    x2 = rnd(nx);
  }
  y = alloc_or_die(ny * sizeof(float));
  dy = rnd(ny);
  double *tf = alloc_or_die(reps * sizeof *tf), *tb = alloc_or_die(reps * sizeof *tb);
  float *dxp = L->no_dx ? NULL : dx;
  int hw = L->h * L->w;
  for (int r = -warmup; r < reps; r++) {
    double t0 = util_now_s();
    switch (L->kind) {
      case 'c': check(nn_conv2d_forward(&cs, x, w, NULL, y, ws), "conv forward", L->name); break;
      case 'b':
        check(nn_batchnorm2d_forward_train(&bs, x, p1, p2, w, dw, y, p3, p4), "bn forward",
              L->name);
        break;
      case 'm': check(nn_maxpool2d_forward(&ps, x, y, am), "maxpool forward", L->name); break;
      case 'r': nn_relu_forward(nx, x, y); break;
      case 'l':
        check(nn_linear_forward(batch, L->cin, L->cout, x, w, p1, y), "fc forward", L->name);
        break;
      case 'g': nn_global_avgpool_forward(batch, L->cin, hw, x, y); break;
      case 'a': nn_add_forward(nx, x, x2, y); break;
    }
    double t1 = util_now_s();
    switch (L->kind) {
      case 'c':
        check(nn_conv2d_backward(&cs, x, w, dy, dxp, dw, NULL, ws), "conv backward", L->name);
        break;
      case 'b': /* dgamma and dbeta land in p1 and p2: their values do not matter here */
        check(nn_batchnorm2d_backward(&bs, x, p1, p3, p4, dy, dx, p1, p2), "bn backward",
              L->name);
        break;
      case 'm': check(nn_maxpool2d_backward(&ps, am, dy, dx), "maxpool backward", L->name); break;
      case 'r': nn_relu_backward(nx, y, dy, dx); break;
      case 'l':
        check(nn_linear_backward(batch, L->cin, L->cout, x, w, dy, dx, dw, p1), "fc backward",
              L->name);
        break;
      case 'g': nn_global_avgpool_backward(batch, L->cin, hw, dy, dx); break;
      case 'a': break; /* the model adds dy into both inputs' gradients: no kernel of nn.h */
    }
    double t2 = util_now_s();
    if (r >= 0) {
      tf[r] = (t1 - t0) * 1e3;
      tb[r] = (t2 - t1) * 1e3;
    }
  }
  qsort(tf, reps, sizeof *tf, cmp_d);
  qsort(tb, reps, sizeof *tb, cmp_d);
  int at = use_min ? 0 : reps / 2;
  *fwd_ms = tf[at];
  *bwd_ms = tb[at];
  *fwd_min = tf[0];
  *bwd_min = tb[0];
  free(x); free(dx); free(y); free(dy); free(w); free(dw); free(ws); free(p1); free(p2);
  free(p3); free(p4); free(am); free(x2); free(tf); free(tb);
}

int main(int argc, char **argv) {
  if (nn_blas_fix_misdetected_core(argv) != NN_OK)
    fprintf(stderr, "nn_layer_bench: warning: %s\n", nn_last_error());
  int threads = 1, batch = 64, reps = 20, warmup = 2;
  const char *filter = NULL, *shapes = NULL;
  int use_min = 0; /* --min: fastest rep instead of the median (for a loaded machine) */
  parse_flags(argc, argv, &threads, &batch, &reps, &filter, &use_min, &warmup, &shapes);
  nn_set_threads(threads);
  const layer_t *list = layers;
  size_t count = sizeof layers / sizeof *layers;
  if (shapes) list = read_shapes(shapes, &count);
  const char *stat = use_min ? "fastest" : "median";
  if (shapes)
    printf("# threads %d, batch of each line of %s, reps %d (%s ms)\n", threads, shapes,
           reps, stat);
  else
    printf("# threads %d batch %d reps %d (%s ms)\n", threads, batch, reps, stat);
  printf("# BLAS: %s\n", nn_blas_kernels());
  /* A --shapes run adds the fastest rep of each (the report's % of peak: the peak too is
     a best run) and a fourth decimal for the small layers. */
  if (shapes)
    printf("%-32s %9s %9s %9s %9s\n", "layer", "forward", "backward", "fwd_min", "bwd_min");
  else
    printf("%-32s %9s %9s\n", "layer", "forward", "backward");
  double sum_f = 0, sum_b = 0;
  for (size_t li = 0; li < count; li++) {
    const layer_t *L = &list[li];
    if (filter && !strstr(L->name, filter)) continue;
    double f, b, fmin, bmin;
    time_layer(L, L->n ? L->n : batch, reps, warmup, use_min, &f, &b, &fmin, &bmin);
    if (shapes)
      printf("%-32s %9.4f %9.4f %9.4f %9.4f\n", L->name, f, b, fmin, bmin);
    else
      printf("%-32s %9.3f %9.3f\n", L->name, f, b);
    fflush(stdout); /* a reader of a pipe sees each layer as it ends */
    sum_f += f;
    sum_b += b;
  }
  printf("%-32s %9.3f %9.3f\n", "sum", sum_f, sum_b);
  return 0;
}
