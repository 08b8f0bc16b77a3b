/* bench/fma_peak.c: this machine's single-thread ceilings, measured rather than taken from
   a datasheet, for scripts/roofline.sh:
   - peak FLOP/s: a loop of independent fused multiply-adds, AVX-512 (when the CPU has
     it) and AVX2+FMA, each chosen at run time (__builtin_cpu_supports + target
     attributes, as nn/ does), so the portable build measures what the core can do;
   - memory bandwidth: STREAM's copy and triad on arrays several times the last-level
     cache, one thread.
   Prints one "name value unit" row per figure, then "peak" (the best FMA rate) and
   "bandwidth" (the best of copy and triad). Usage: fma_peak [--seconds S] [--reps N]
   [--stream-reps N] [--mib M] (--help). */
#include "util/clock.h"
#include "util/flags.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* FMA latency is 4-5 cycles and a core issues up to 2 per cycle, so at least 10 chains
   must be in flight to keep both units busy. AVX2 has 16 registers: 12 accumulators plus
   the two constants fit without spilling; AVX-512 has 32: 16 accumulators. Each
   accumulator converges to add/(1-mul), so nothing overflows or goes denormal. */
#define FMA4(op, v, m, a) v##0 = op(v##0, m, a); v##1 = op(v##1, m, a); \
  v##2 = op(v##2, m, a); v##3 = op(v##3, m, a)

__attribute__((target("avx2,fma"))) static double fma_avx2(long iters) {
  __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
  /* Distinct starting values: identical chains would be merged into one by the compiler. */
#define S256(i) _mm256_set1_ps(0.01f * (i))
  __m256 x0 = S256(1), x1 = S256(2), x2 = S256(3), x3 = S256(4);
  __m256 y0 = S256(5), y1 = S256(6), y2 = S256(7), y3 = S256(8);
  __m256 z0 = S256(9), z1 = S256(10), z2 = S256(11), z3 = S256(12);
  for (long i = 0; i < iters; i++) {
    FMA4(_mm256_fmadd_ps, x, m, a);
    FMA4(_mm256_fmadd_ps, y, m, a);
    FMA4(_mm256_fmadd_ps, z, m, a);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                           _mm256_add_ps(_mm256_add_ps(y0, y1), _mm256_add_ps(y2, y3)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(z0, z1), _mm256_add_ps(z2, z3)));
  float f[8];
  _mm256_storeu_ps(f, s);
  return f[0] + f[7];
}
#define AVX2_FLOPS_PER_ITER (12.0 * 8 * 2) /* 12 FMAs of 8 lanes, 2 FLOPs each */

__attribute__((target("avx512f"))) static double fma_avx512(long iters) {
  __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
#define S512(i) _mm512_set1_ps(0.01f * (i))
  __m512 x0 = S512(1), x1 = S512(2), x2 = S512(3), x3 = S512(4);
  __m512 y0 = S512(5), y1 = S512(6), y2 = S512(7), y3 = S512(8);
  __m512 z0 = S512(9), z1 = S512(10), z2 = S512(11), z3 = S512(12);
  __m512 w0 = S512(13), w1 = S512(14), w2 = S512(15), w3 = S512(16);
  for (long i = 0; i < iters; i++) {
    FMA4(_mm512_fmadd_ps, x, m, a);
    FMA4(_mm512_fmadd_ps, y, m, a);
    FMA4(_mm512_fmadd_ps, z, m, a);
    FMA4(_mm512_fmadd_ps, w, m, a);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                           _mm512_add_ps(_mm512_add_ps(y0, y1), _mm512_add_ps(y2, y3)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(z0, z1), _mm512_add_ps(z2, z3)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(w0, w1), _mm512_add_ps(w2, w3)));
  return _mm512_reduce_add_ps(s);
}
#define AVX512_FLOPS_PER_ITER (16.0 * 16 * 2)

/* The best GFLOP/s of reps runs of about `seconds` each: the machine is shared, and the
   fastest run is the one least disturbed. The sink keeps the result alive. */
static double best_gflops(double (*kernel)(long), double flops_per_iter, double seconds,
                          int reps, double *sink) {
  long iters = 1000;
  for (;;) { /* calibrate: grow until one run takes a tenth of the target */
    double t0 = util_now_s();
    *sink += kernel(iters);
    double dt = util_now_s() - t0;
    if (dt > seconds / 10) {
      iters = (long)(iters * seconds / dt) + 1;
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = util_now_s();
    *sink += kernel(iters);
    double g = flops_per_iter * (double)iters / (util_now_s() - t0) / 1e9;
    if (g > best) best = g;
  }
  return best;
}

/* STREAM triad a = b + s*c, vectorised by hand: the portable -O2 build would otherwise
   run it 4 floats at a time, which can understate what one core can pull from memory. */
__attribute__((target("avx2,fma"))) static void triad_avx2(float *a, const float *b,
                                                           const float *c, float s, size_t n) {
  __m256 vs = _mm256_set1_ps(s);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
  for (; i < n; i++) a[i] = b[i] + s * c[i];
}

static void triad_plain(float *a, const float *b, const float *c, float s, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* Default array size: four times the last-level cache (so every pass comes from DRAM),
   at least 256 MiB when the cache size is unknown. */
static size_t default_array_mib(void) {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  size_t mib = llc > 0 ? (size_t)llc * 4 >> 20 : 0;
  return mib < 256 ? 256 : mib;
}

int main(int argc, char **argv) {
  /* Many short FMA runs rather than a few long ones: on a shared machine a run of a few
     milliseconds often fits in one scheduler slice, and the best such run is what the
     core does when it is not interrupted (the best still moves by 10-20% with the host's
     load on a virtual machine: its turbo frequency depends on its neighbours). */
  double seconds = 0.001;
  int reps = 1000, stream_reps = 5, mib = 0;
  const util_flag_t table[] = {
      {"seconds", UTIL_FLAG_DOUBLE, &seconds, .min = 0.0005, .max = 60,
       .help = "length of one timed FMA run"},
      {"reps", UTIL_FLAG_INT, &reps, .min = 1, .max = 100000,
       .help = "timed FMA runs of each ISA (the best is kept)"},
      {"stream-reps", UTIL_FLAG_INT, &stream_reps, .min = 1, .max = 1000,
       .help = "timed passes of copy and of triad (the best is kept)"},
      {"mib", UTIL_FLAG_INT, &mib, .min = 1, .max = 1 << 20, .metavar = "M",
       .def = "4x the last-level cache, at least 256", .help = "MiB of each STREAM array"},
  };
  const util_flags_spec_t spec = {
      .prog = "fma_peak", .usage = "fma_peak [flags]", .flags = table,
      .nflags = UTIL_FLAGS_COUNT(table),
      .about = "Single-thread peak GFLOP/s (FMA, AVX-512 and AVX2) and memory GB/s "
               "(STREAM copy and triad).\n"};
  char err[512];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    util_flags_usage(&spec, stdout);
    return 0;
  }
  if (rc != UTIL_FLAGS_OK) {
    fprintf(stderr, "fma_peak: %s\n", err);
    return 2;
  }
  if (mib == 0) mib = (int)default_array_mib();

  __builtin_cpu_init();
  int has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int has_avx512 = __builtin_cpu_supports("avx512f");
  double sink = 0, peak = 0;
  const char *peak_isa = "none";
  printf("# fma_peak: 1 thread, best of %d FMA runs of %.1f ms, best of %d STREAM passes "
         "over arrays of %d MiB\n", reps, seconds * 1e3, stream_reps, mib);
  if (has_avx512) {
    double g = best_gflops(fma_avx512, AVX512_FLOPS_PER_ITER, seconds, reps, &sink);
    printf("fma_avx512 %.1f GFLOP/s\n", g);
    if (g > peak) peak = g, peak_isa = "avx512";
  } else {
    printf("# fma_avx512: the CPU has no AVX-512F\n");
  }
  if (has_avx2) {
    double g = best_gflops(fma_avx2, AVX2_FLOPS_PER_ITER, seconds, reps, &sink);
    printf("fma_avx2 %.1f GFLOP/s\n", g);
    if (g > peak) peak = g, peak_isa = "avx2";
  } else {
    printf("# fma_avx2: the CPU has no AVX2+FMA\n");
  }
  if (peak == 0) {
    fprintf(stderr, "fma_peak: neither AVX-512F nor AVX2+FMA on this CPU; nothing to "
                    "measure the peak with\n");
    return 1;
  }

  size_t n = ((size_t)mib << 20) / sizeof(float);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "fma_peak: cannot allocate 3 arrays of %d MiB; pass a smaller --mib\n",
            mib);
    return 1;
  }
  for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2; /* touch every page */
  double copy = 0, triad = 0;
  for (int r = 0; r < stream_reps; r++) {
    double t0 = util_now_s();
    memcpy(a, b, n * sizeof *a);
    double t1 = util_now_s();
    if (has_avx2) triad_avx2(a, b, c, 3.0f, n);
    else triad_plain(a, b, c, 3.0f, n);
    double t2 = util_now_s();
    /* STREAM's counting: copy moves 2 arrays, triad 3 (write-allocate not counted). */
    double gc = 2.0 * n * sizeof(float) / (t1 - t0) / 1e9;
    double gt = 3.0 * n * sizeof(float) / (t2 - t1) / 1e9;
    if (gc > copy) copy = gc;
    if (gt > triad) triad = gt;
  }
  sink += a[n / 2];
  free(a);
  free(b);
  free(c);
  printf("stream_copy %.1f GB/s\n", copy);
  printf("stream_triad %.1f GB/s\n", triad);
  printf("peak %.1f GFLOP/s %s\n", peak, peak_isa);
  printf("bandwidth %.1f GB/s %s\n", copy > triad ? copy : triad,
         copy > triad ? "copy" : "triad");
  /* The sink is finite by construction; printing it only in the impossible case keeps
     the compiler from dropping the kernels without cluttering the output. */
  if (sink != sink) printf("# sink %g\n", sink);
  return 0;
}
