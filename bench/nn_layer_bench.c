/* bench/nn_layer_bench.c: times each CPU kernel on the layer shapes of resnet20 and lenet
   at a given batch, forward and backward, so kernel changes can be measured (and put side
   by side with bench/torch_layer_bench.py, the same shapes in PyTorch).
   Usage: nn_layer_bench [--threads N] [--batch N] [--reps N] [--filter SUBSTRING]
   [--min] [--winograd 0|1] [--wino-min C] [--wino-tiles N] [--block-kb K] (--help)
   Prints the median milliseconds of forward and backward per layer. Not a test. */
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

static float *rnd(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f;
  return p;
}

typedef struct {
  const char *name;
  char kind;  /* c conv, b batchnorm, m maxpool, r relu, l linear */
  int cin, h, w, cout, k, stride, pad;
} layer_t;

static const layer_t layers[] = {
  {"r20 conv1 3->16 3x3 32x32", 'c', 3, 32, 32, 16, 3, 1, 1},
  {"r20 conv 16->16 3x3 32x32", 'c', 16, 32, 32, 16, 3, 1, 1},
  {"r20 conv 16->32 3x3 s2 32x32", 'c', 16, 32, 32, 32, 3, 2, 1},
  {"r20 conv 16->32 1x1 s2 32x32", 'c', 16, 32, 32, 32, 1, 2, 0},
  {"r20 conv 32->32 3x3 16x16", 'c', 32, 16, 16, 32, 3, 1, 1},
  {"r20 conv 32->64 3x3 s2 16x16", 'c', 32, 16, 16, 64, 3, 2, 1},
  {"r20 conv 64->64 3x3 8x8", 'c', 64, 8, 8, 64, 3, 1, 1},
  {"r20 bn 16x32x32", 'b', 16, 32, 32, 0, 0, 0, 0},
  {"r20 bn 32x16x16", 'b', 32, 16, 16, 0, 0, 0, 0},
  {"r20 bn 64x8x8", 'b', 64, 8, 8, 0, 0, 0, 0},
  {"r20 relu 16x32x32", 'r', 16, 32, 32, 0, 0, 0, 0},
  {"lenet conv1 1->32 5x5 28x28", 'c', 1, 28, 28, 32, 5, 1, 2},
  {"lenet conv2 32->64 5x5 14x14", 'c', 32, 14, 14, 64, 5, 1, 2},
  {"lenet maxpool 32x28x28", 'm', 32, 28, 28, 0, 2, 2, 0},
  {"lenet fc1 3136->512", 'l', 3136, 1, 1, 512, 0, 0, 0},
  {"lenet fc2 512->10", 'l', 512, 1, 1, 10, 0, 0, 0},
};

/* Parses the flags into the locals of main and nn's conv2d knobs; exits on --help and on
   a bad flag. */
static void parse_flags(int argc, char **argv, int *threads, int *batch, int *reps,
                        const char **filter, int *use_min) {
  int block_kb = (int)(nn_conv2d_block_bytes >> 10);
  const util_flag_t table[] = {
      {"threads", UTIL_FLAG_INT, threads, .min = 1, .max = 4096, .help = "CPU threads"},
      {"batch", UTIL_FLAG_INT, batch, .min = 1, .max = 1 << 20, .help = "samples per layer call"},
      {"reps", UTIL_FLAG_INT, reps, .min = 1, .max = 1 << 20, .help = "timed repetitions"},
      {"filter", UTIL_FLAG_STRING, filter, .metavar = "SUBSTRING",
       .help = "only the layers whose name holds SUBSTRING"},
      {"min", UTIL_FLAG_BOOL, use_min,
       .help = "the fastest rep instead of the median (for a loaded machine)"},
      {NULL, .help = "conv2d knobs (nn/conv2d_internal.h):"},
      {"winograd", UTIL_FLAG_INT, &nn_conv2d_winograd, .min = 0, .max = 1,
       .help = "1: 3x3 and 5x5 stride-1 convolutions by Winograd; 0: im2col + GEMM"},
      {"wino-min", UTIL_FLAG_INT, &nn_conv2d_wino_min_channels, .min = 0, .max = 1 << 20,
       .metavar = "C", .help = "Winograd only when c_in and c_out are both at least C"},
      {"wino-tiles", UTIL_FLAG_INT, &nn_wino_group_tiles, .min = 1, .max = 1 << 20,
       .help = "Winograd tiles per group of samples (the N of its GEMMs)"},
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

int main(int argc, char **argv) {
  int threads = 1, batch = 64, reps = 20;
  const char *filter = NULL;
  int use_min = 0; /* --min: fastest rep instead of the median (for a loaded machine) */
  parse_flags(argc, argv, &threads, &batch, &reps, &filter, &use_min);
  if (reps < 1) reps = 1;
  nn_set_threads(threads);
  printf("# threads %d batch %d reps %d (median ms)\n", threads, batch, reps);
  printf("%-32s %9s %9s\n", "layer", "forward", "backward");
  double *tf = malloc(reps * sizeof *tf), *tb = malloc(reps * sizeof *tb);
  double sum_f = 0, sum_b = 0;
  for (size_t li = 0; li < sizeof layers / sizeof *layers; li++) {
    const layer_t *L = &layers[li];
    if (filter && !strstr(L->name, filter)) continue;
    size_t nx = (size_t)batch * L->cin * L->h * L->w;
    float *x = rnd(nx), *dx = calloc(nx, sizeof(float));
    float *y = NULL, *dy = NULL, *w = NULL, *dw = NULL, *ws = NULL, *p1 = NULL, *p2 = NULL,
          *p3 = NULL, *p4 = NULL;
    int32_t *am = NULL;
    nn_conv2d_shape_t cs = {batch, L->cin, L->h, L->w, L->cout, L->k, L->k, L->stride,
                            L->stride, L->pad, L->pad, 0, 0};
    nn_batchnorm2d_shape_t bs = {batch, L->cin, L->h, L->w, 1e-5f, 0.1f};
    nn_pool2d_shape_t ps = {batch, L->cin, L->h, L->w, L->k, L->k, L->stride, L->stride,
                            L->pad, L->pad, 0, 0};
    size_t ny = nx;
    if (L->kind == 'c') {
      nn_conv2d_shape(&cs);
      ny = (size_t)batch * L->cout * cs.h_out * cs.w_out;
      w = rnd((size_t)L->cout * L->cin * L->k * L->k);
      dw = calloc((size_t)L->cout * L->cin * L->k * L->k, sizeof(float));
      ws = malloc(nn_conv2d_workspace_floats(&cs) * sizeof(float) + 64);
    } else if (L->kind == 'm') {
      nn_pool2d_shape(&ps);
      ny = (size_t)batch * L->cin * ps.h_out * ps.w_out;
      am = malloc(ny * sizeof *am);
    } else if (L->kind == 'b') {
      p1 = rnd(L->cin); p2 = rnd(L->cin); p3 = calloc(L->cin, 4); p4 = calloc(L->cin, 4);
      w = calloc(L->cin, 4); dw = calloc(L->cin, 4);
    } else if (L->kind == 'l') {
      ny = (size_t)batch * L->cout;
      w = rnd((size_t)L->cout * L->cin);
      dw = calloc((size_t)L->cout * L->cin, sizeof(float));
      p1 = calloc(L->cout, 4);
    }
    y = calloc(ny, sizeof(float));
    dy = rnd(ny);
    for (int r = -2; r < reps; r++) {  /* two warm-up rounds */
      double t0 = util_now_s();
      switch (L->kind) {
        case 'c': nn_conv2d_forward(&cs, x, w, NULL, y, ws); break;
        case 'b': nn_batchnorm2d_forward_train(&bs, x, p1, p2, w, dw, y, p3, p4); break;
        case 'm': nn_maxpool2d_forward(&ps, x, y, am); break;
        case 'r': nn_relu_forward(nx, x, y); break;
        case 'l': nn_linear_forward(batch, L->cin, L->cout, x, w, p1, y); break;
      }
      double t1 = util_now_s();
      switch (L->kind) {
        case 'c': nn_conv2d_backward(&cs, x, w, dy, dx, dw, NULL, ws); break;
        case 'b': nn_batchnorm2d_backward(&bs, x, p1, p3, p4, dy, dx, p1 + 0 * 0, p2); break;
        case 'm': nn_maxpool2d_backward(&ps, am, dy, dx); break;
        case 'r': nn_relu_backward(nx, y, dy, dx); break;
        case 'l': nn_linear_backward(batch, L->cin, L->cout, x, w, dy, dx, dw, p1); break;
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
    printf("%-32s %9.3f %9.3f\n", L->name, tf[at], tb[at]);
    sum_f += tf[at];
    sum_b += tb[at];
    free(x); free(dx); free(y); free(dy); free(w); free(dw); free(ws); free(p1); free(p2);
    free(p3); free(p4); free(am);
  }
  printf("%-32s %9.3f %9.3f\n", "sum", sum_f, sum_b);
  free(tf);
  free(tb);
  return 0;
}
