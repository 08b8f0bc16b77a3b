/* nn/conv2d.c: 2-D convolution (CPU reference) as im2col + GEMM, per sample.

   Forward, per sample i:   col[K][P] = im2col(x_i)        K = c_in*kh*kw, P = h_out*w_out
                            y_i[c_out][P] = W[c_out][K] col (+ b)
   Backward, per sample i:  dW^T += col dy_i^T (added into dW at the end);  db += sum_p dy_i;
                            dcol = W^T dy_i;   dx_i += col2im(dcol)
   A 1x1 stride-1 unpadded convolution is a plain GEMM on x_i: no im2col, and dx_i is
   accumulated straight from W^T dy_i. Stride-1 convolutions with at most
   nn_conv2d_direct_max_channels channels each way (resnet20's 16- and 32-channel layers
   and first layer) compute y, dx and, for 3x3 kernels, dW by a direct register-blocked
   kernel (nn/conv_direct.c; AVX-512, chosen at run time) without an im2col buffer.
   Other 3x3 and 5x5 stride-1 convolutions with at least nn_conv2d_wino_min_channels
   channels each way compute y and dx by Winograd (nn/conv_winograd.c: 2.25x / 2.8x fewer
   multiplications) and dW through the same transforms.

   Threads: the batch is cut into contiguous chunks, one per worker, each running
   single-threaded OpenBLAS on its own im2col buffer (a slot of the caller's workspace).
   For these small per-sample GEMMs this beats letting OpenBLAS split each one. Weight
   gradients of chunk t go to the slot's private dW^T (and db for t > 0) and are summed
   into dw/db at the end in chunk order, so results depend only on the thread count, not on timing.
   With one sample, or more threads than slots, OpenBLAS threads each GEMM instead. */
#include "nn/nn.h"
#include "nn/backward_store_internal.h"
#include "nn/conv2d_internal.h"
#include "nn/simd_internal.h"
#include "nn/threads_internal.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>

/* Workspace slots: at most this many batch chunks run at once. */
#define CONV_MAX_SLOTS 8

nn_status_t nn_conv2d_shape(nn_conv2d_shape_t *s) {
  if (!s) return nn_set_error(NN_ERR_ARG, "nn_conv2d_shape: shape is NULL");
  if (s->n < 1 || s->c_in < 1 || s->h_in < 1 || s->w_in < 1 || s->c_out < 1 || s->kh < 1 ||
      s->kw < 1 || s->stride_h < 1 || s->stride_w < 1 || s->pad_h < 0 || s->pad_w < 0)
    return nn_set_error(NN_ERR_ARG,
                        "conv2d: bad shape n=%d c_in=%d h_in=%d w_in=%d c_out=%d kernel=%dx%d "
                        "stride=%dx%d pad=%dx%d (sizes and strides must be >= 1, pads >= 0)",
                        s->n, s->c_in, s->h_in, s->w_in, s->c_out, s->kh, s->kw, s->stride_h,
                        s->stride_w, s->pad_h, s->pad_w);
  if (s->h_in + 2 * s->pad_h < s->kh || s->w_in + 2 * s->pad_w < s->kw)
    return nn_set_error(NN_ERR_ARG,
                        "conv2d: kernel %dx%d larger than the padded input %dx%d: empty output",
                        s->kh, s->kw, s->h_in + 2 * s->pad_h, s->w_in + 2 * s->pad_w);
  s->h_out = (s->h_in + 2 * s->pad_h - s->kh) / s->stride_h + 1;
  s->w_out = (s->w_in + 2 * s->pad_w - s->kw) / s->stride_w + 1;
  return NN_OK;
}

static int conv_is_direct(const nn_conv2d_shape_t *s) {
  return s->kh == 1 && s->kw == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == 0 &&
         s->pad_w == 0;
}

static int conv_slots(const nn_conv2d_shape_t *s) {
  return s->n < CONV_MAX_SLOTS ? s->n : CONV_MAX_SLOTS;
}

/* Output rows per im2col block: the block's col buffer is kept near 192 KB so that it
   stays in the L2 cache between im2col and the GEMMs that read it (a whole sample's col
   for resnet20's first stage is 576 KB), but a block has at least 256 output positions:
   narrower GEMMs lose more to OpenBLAS's call and packing overhead than they gain. */
size_t nn_conv2d_block_bytes = 192u << 10;
int nn_conv2d_block_min_cols = 256;

static int conv_row_block(const nn_conv2d_shape_t *s) {
  size_t row_bytes = (size_t)s->c_in * s->kh * s->kw * s->w_out * sizeof(float);
  size_t rows = nn_conv2d_block_bytes / (row_bytes ? row_bytes : 1);
  size_t min_rows = ((size_t)nn_conv2d_block_min_cols + s->w_out - 1) / s->w_out;
  if (rows < min_rows) rows = min_rows;
  if (rows < 1) rows = 1;
  if (rows >= (size_t)s->h_out) return s->h_out;
  /* Equal blocks: 32 rows in blocks of 10 would leave a last GEMM of 2 rows, slow. */
  size_t blocks = (s->h_out + rows - 1) / rows;
  return (int)((s->h_out + blocks - 1) / blocks);
}

/* Floats of one slot: the im2col buffer (one block of output rows), then a private dW
   and db. */
static size_t conv_col_floats(const nn_conv2d_shape_t *s) {
  if (conv_is_direct(s)) return 0;
  return (size_t)s->c_in * s->kh * s->kw * (size_t)conv_row_block(s) * s->w_out;
}
/* 3x3 and 5x5 stride-1 convolutions run forward, input and weight gradient by Winograd
   F(2x2, 3x3) / F(2x2, 5x5) (nn/conv_winograd.c). */
int nn_conv2d_winograd = 1;
/* With few channels the transforms cost more than the GEMM time they save (resnet20's
   16-channel 32x32 layers run about 2x slower by Winograd), so it needs at least this
   many input and output channels. */
int nn_conv2d_wino_min_channels = 32;
/* Memory: every slot holds a group's transformed tiles and a transformed dW
   ((k+1)^2 c_in c_out floats), so Winograd is kept to at most 128 channels each way and
   to planes of at most nn_wino_group_tiles 2x2 tiles (resnet20's and lenet's layers fit,
   resnet50's 56x56 and 512-channel layers stay on im2col). */
int nn_conv2d_wino_max_channels = 128;

static int conv_direct_takes(const nn_conv2d_shape_t *s);

static int conv_is_wino(const nn_conv2d_shape_t *s) {
  int tiles = ((s->h_out + 1) / 2) * ((s->w_out + 1) / 2);
  return nn_conv2d_winograd && !(s->kh == 3 && conv_direct_takes(s)) &&
         (s->kh == 3 || s->kh == 5) && s->kw == s->kh && s->stride_h == 1 &&
         s->stride_w == 1 && s->pad_h < s->kh && s->pad_w < s->kw &&
         s->c_in >= nn_conv2d_wino_min_channels && s->c_out >= nn_conv2d_wino_min_channels &&
         s->c_in <= nn_conv2d_wino_max_channels && s->c_out <= nn_conv2d_wino_max_channels &&
         tiles <= nn_wino_group_tiles;
}
/* The direct kernel (nn/conv_direct.c): with 16 channels the GEMMs of im2col are too
   small for OpenBLAS to run near peak, and im2col writes 9x the input. Measured on
   resnet20's 16->16 32x32 layer (1 thread, batch 64, AVX-512): forward 1.4x and input
   gradient 1.6x faster than im2col + GEMM. Its first AVX2 form (8-float vectors, 4
   output channels a block) lost to OpenBLAS's AVX-512 GEMM on the same machine, and to
   OpenBLAS's AVX2 GEMM on AMD Zen 3; its 3x3 stride-1 block of 6 channels now wins
   where AVX2 is all there is (conv_direct_takes), so 1 takes stride-1 convolutions with
   AVX-512 or AVX2 and stride-2 forwards with AVX-512; 2 also the stride-2 forwards with
   AVX2 alone (for tests and measurements); 0 never. Planes narrower than 8 columns
   would leave most lanes idle, and fewer than 8 output channels leave the channel
   blocks mostly empty (the first layer's input gradient, lenet's 1-channel input). For
   3x3 kernels (the only ones measured) it also goes before Winograd: on resnet20's
   32->32 16x16 layer (1 thread, batch 64, AVX-512) forward 5.9 -> 4.4 ms and backward
   13.7 -> 10.8 ms against Winograd (nn_layer_bench, 3 A/B rounds; 2 x 31
   alternating reps of thread CPU time, loaded machine: 4.4 -> 3.8 and 11.0 -> 10.2).
   That was an Intel Xeon, whose AVX-512 units are full width. On AMD Zen 4, which runs
   each 512-bit FMA as two 256-bit halves, Winograd won the 32->32 layer (forward 3.42 ->
   2.68 ms, backward 7.81 -> 6.34, fastest of 30 reps, 4 alternating rounds) and the
   direct kernel still won the 16->16 one (forward 3.5 -> 4.5, backward 7.9 -> 10.6
   against Winograd): so the default (nn_conv2d_direct_max_channels 0) is 32 channels,
   16 where AVX-512 is half width or absent. */
int nn_conv2d_direct = 1;
int nn_conv2d_direct_max_channels = 0;

static int conv_direct_max_channels(void) {
  if (nn_conv2d_direct_max_channels > 0) return nn_conv2d_direct_max_channels;
  return nn_cpu_avx512_half_width() || nn_conv_direct_vec() == 8 ? 16 : 32;
}

/* The stride-1 shapes the direct kernel takes, before Winograd (see nn_conv2d_direct).
   With AVX2 alone, by default up to 16 channels: its 3x3 stride-1 block of 6 output
   channels x 2 vectors, measured on AMD Zen 3 (1 thread, batch 64, OpenBLAS's Zen
   kernels, nn_layer_bench --min, 15 reps): resnet20's 16->16 forward 6.96 ms by im2col,
   4.41 by the kernel, backward 11.7 -> 8.6 (dx); 3->16 forward 1.61 -> 1.47; 32->32 4.2
   -> 4.0 forward against Winograd but backward 7.9 -> 8.0, so not taken. */
static int conv_direct_takes(const nn_conv2d_shape_t *s) {
  int vec = nn_conv_direct_vec();
  return nn_conv2d_direct && (vec == 16 || vec == 8) &&
         s->stride_h == 1 && s->stride_w == 1 && !conv_is_direct(s) && s->pad_h < s->kh &&
         s->pad_w < s->kw && s->c_in <= conv_direct_max_channels() &&
         s->c_out <= conv_direct_max_channels() && s->w_out >= 8 && s->w_in >= 8;
}
static int conv_direct_ok(const nn_conv2d_shape_t *s) {
  return conv_direct_takes(s) && !conv_is_wino(s);
}
/* Stride-2 forward by the direct kernel on even and odd column planes (AVX-512 only,
   like the stride-1 default), up to nn_conv2d_direct_s2_max_channels channels each way;
   dx and dW of stride 2 stay on im2col. Measured (1 thread, batch 64, AVX-512, fastest
   of 4 x 9 alternating reps): resnet20's 16->32 3x3 s2 32x32 forward 3.7 -> 2.9 ms; but
   its 32->64 s2 16x16 (8 output columns: half of each vector idle) 3.1 -> 4.4 ms with 64
   channels allowed, and the 1x1 s2 downsample (im2col is a cheap subsample there)
   0.49 -> 1.45 ms: so at most 32 channels, and no 1x1 kernels. The 3x3 dW kernel run on
   the column planes (one output row at a time) lost to im2col + GEMM on the 16->32
   layer, 9.0 -> 10.1 ms of backward, so it was not kept. */
int nn_conv2d_direct_s2_max_channels = 32;

static int conv_direct_s2_fwd(const nn_conv2d_shape_t *s) {
  int vec = nn_conv_direct_vec();
  return nn_conv2d_direct && (vec == 16 || (vec == 8 && nn_conv2d_direct == 2)) &&
         s->stride_h == 2 && s->stride_w == 2 && s->kh * s->kw > 1 && s->pad_h < s->kh &&
         s->pad_w < s->kw && s->c_in <= nn_conv2d_direct_s2_max_channels &&
         s->c_out <= nn_conv2d_direct_s2_max_channels && s->c_out >= 8 && s->w_out >= 8;
}
static int conv_direct_fwd(const nn_conv2d_shape_t *s) {
  return (conv_direct_ok(s) && s->c_out >= 8) || conv_direct_s2_fwd(s);
}
static int conv_direct_dx(const nn_conv2d_shape_t *s) {
  return conv_direct_ok(s) && s->c_in >= 8;
}
/* dW by the direct kernel (nn/conv_direct.c: vectors over output channels, broadcast
   inputs): 3x3, stride 1 or 2, output channels a multiple of 16, on AVX-512, whatever
   runs the forward, up to nn_conv2d_direct_dw_max_channels channels each way. Measured
   against im2col + GEMM and Winograd's dW (1 thread, AMD Zen 5, nn_layer_bench
   --direct-dw-max, fastest reps; backward ms, dx included): resnet20 at batch 64 with
   OpenBLAS's Haswell kernels 16->16 6.1 -> 3.5, 32->32 5.3 -> 3.1, 64->64 (Winograd)
   4.2 -> 3.6, 16->32 s2 4.8 -> 3.4, 32->64 s2 4.0 -> 2.8; with its AVX-512 kernels
   5.5 -> 4.0, 4.2 -> 3.4, 3.0 -> 2.9, 3.8 -> 2.9, 2.9 -> 2.2. resnet50's 3x3 layers at
   batch 16: 64 to 256 channels 1-13% faster with either; 512 channels 21% faster with the
   Haswell kernels but 5% slower with the AVX-512 ones: so up to 256. */
int nn_conv2d_direct_dw_max_channels = 256;
/* Its AVX2 form (vectors over 8 output channels, output channels in 8s), up to
   nn_conv2d_direct_avx2_dw_max_in input channels. Measured on AMD Zen 3 (1 thread, batch
   64, OpenBLAS's Zen kernels, nn_layer_bench --min, 15 reps; backward ms, dx included)
   against im2col or Winograd's dW: resnet20's 3->16 3.76 -> 3.27, 16->16 16.4 -> 13.4,
   16->32 s2 7.78 -> 6.63, 32->32 (Winograd) 8.46 -> 7.85, 32->64 s2 5.97 -> 5.09; but
   64->64 8x8 (Winograd) 6.39 -> 6.86: so up to 32 input channels. */
int nn_conv2d_direct_avx2_dw_max_in = 32;

static int conv_direct_dw(const nn_conv2d_shape_t *s) {
  const int vec = nn_conv_direct_vec();
  if (!nn_conv2d_direct || vec == 0 || s->stride_h != s->stride_w ||
      s->c_in > nn_conv2d_direct_dw_max_channels || s->c_out > nn_conv2d_direct_dw_max_channels ||
      (vec == 8 && s->c_in > nn_conv2d_direct_avx2_dw_max_in))
    return 0;
  nn_conv_direct_t f;
  nn_conv_direct_plan(&f, s->c_in, s->c_out, s->h_in, s->w_in, s->kh, s->kw, s->pad_h,
                      s->pad_w, s->stride_h);
  return nn_conv_direct_dweight_ok(&f);
}
/* Forward plan, and the plan of the input gradient (stride 1 only): the same kernel on
   dy with the flipped, transposed weights and pad k-1 - pad. */
static void conv_direct_plans(const nn_conv2d_shape_t *s, nn_conv_direct_t *fwd,
                              nn_conv_direct_t *bwd) {
  nn_conv_direct_plan(fwd, s->c_in, s->c_out, s->h_in, s->w_in, s->kh, s->kw, s->pad_h,
                      s->pad_w, s->stride_h);
  nn_conv_direct_plan(bwd, s->c_out, s->c_in, s->h_out, s->w_out, s->kh, s->kw,
                      s->kh - 1 - s->pad_h, s->kw - 1 - s->pad_w, 1);
}

int nn_conv2d_direct_passes(const nn_conv2d_shape_t *s) {
  nn_conv2d_shape_t t = *s;
  if (nn_conv2d_shape(&t) != NN_OK) return 0;
  return (conv_direct_fwd(&t) ? 1 : 0) | (conv_direct_dx(&t) ? 2 : 0) |
         (conv_direct_dw(&t) ? 4 : 0);
}

/* Forward plan, and the plan of the input gradient: conv(dy, flipped w^T, pad k-1 - pad). */
static void conv_wino_plans(const nn_conv2d_shape_t *s, nn_wino_t *fwd, nn_wino_t *bwd) {
  const int r = s->kh;
  nn_wino_plan(fwd, r, s->n, s->c_in, s->c_out, s->h_in, s->w_in, s->pad_h, s->pad_w);
  nn_wino_plan(bwd, r, s->n, s->c_out, s->c_in, s->h_out, s->w_out, r - 1 - s->pad_h,
               r - 1 - s->pad_w);
}

static size_t conv_slot_floats(const nn_conv2d_shape_t *s) {
  size_t k = (size_t)s->c_in * s->kh * s->kw;
  size_t v = conv_col_floats(s) + (size_t)s->c_out * k + (size_t)s->c_out;
  if (conv_is_wino(s)) {
    nn_wino_t f, b;
    conv_wino_plans(s, &f, &b);
    if (nn_wino_slot_floats(&f) + nn_wino_du_floats(&f) > v)
      v = nn_wino_slot_floats(&f) + nn_wino_du_floats(&f);
    if (nn_wino_slot_floats(&b) > v) v = nn_wino_slot_floats(&b);
  }
  if (conv_direct_ok(s)) {
    nn_conv_direct_t f, b;
    conv_direct_plans(s, &f, &b);
    if (nn_conv_direct_plane_floats(&f) > v) v = nn_conv_direct_plane_floats(&f);
    if (nn_conv_direct_plane_floats(&b) > v) v = nn_conv_direct_plane_floats(&b);
  }
  if (conv_direct_s2_fwd(s)) {
    nn_conv_direct_t f, b;
    conv_direct_plans(s, &f, &b);
    if (nn_conv_direct_plane_floats(&f) > v) v = nn_conv_direct_plane_floats(&f);
  }
  if (conv_direct_dw(s)) { /* its sums, dy transposed and its padded plane */
    nn_conv_direct_t f, b;
    conv_direct_plans(s, &f, &b);
    if (nn_conv_direct_dweight_floats(&f) > v) v = nn_conv_direct_dweight_floats(&f);
  }
  return (v + 15) & ~(size_t)15;  /* keep every slot 64-byte aligned relative to the base */
}

/* After the slots: the Winograd-transformed weights or the direct kernel's flipped
   weights, shared by all slots. */
static float *conv_wino_u(const nn_conv2d_shape_t *s, float *ws) {
  return ws + (size_t)conv_slots(s) * conv_slot_floats(s);
}

size_t nn_conv2d_workspace_floats(const nn_conv2d_shape_t *s) {
  nn_conv2d_shape_t t = *s;
  if (nn_conv2d_shape(&t) != NN_OK) return 0;
  size_t u = 0;
  if (conv_is_wino(&t)) {
    nn_wino_t f, b;
    conv_wino_plans(&t, &f, &b);
    u = nn_wino_u_floats(&f);
  }
  if (conv_direct_ok(&t)) u = (size_t)t.c_out * t.c_in * t.kh * t.kw;
  return (size_t)conv_slots(&t) * conv_slot_floats(&t) + u;
}

/* Number of batch chunks to run in parallel (1: OpenBLAS threads each GEMM instead). */
int nn_conv2d_batch_split = 1;

static int conv_chunks(const nn_conv2d_shape_t *s) {
  if (!nn_conv2d_batch_split) return 1;
  int t = nn_parallel_workers(s->n);
  if (t > conv_slots(s)) return 1;
  return t;
}

/* Row helpers for im2col/col2im: the rows are short (8 to 32 floats in resnet20), so
   inline SSE copies beat calls to memcpy/memset. */
static inline void row_zero(float *d, int n) {
  const nn_v4f z = nn_v4_set1(0.0f);
  int i = 0;
  for (; i + 4 <= n; i += 4) nn_v4_store(d + i, z);
  for (; i < n; i++) d[i] = 0.0f;
}
static inline void row_copy(float *d, const float *s, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    nn_v4_store(d + i, nn_v4_load(s + i));
    nn_v4_store(d + i + 4, nn_v4_load(s + i + 4));
  }
  for (; i + 4 <= n; i += 4) nn_v4_store(d + i, nn_v4_load(s + i));
  for (; i < n; i++) d[i] = s[i];
}
static inline void row_add(float *d, const float *s, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) nn_v4_store(d + i, nn_v4_load(d + i) + nn_v4_load(s + i));
  for (; i < n; i++) d[i] += s[i];
}

/* col[(c*kh + i)*kw + j][(oh - oh0)*w_out + ow] = x[c][oh*sh - ph + i][ow*sw - pw + j] or 0,
   for the output rows oh in [oh0, oh1). */
static void im2col(const nn_conv2d_shape_t *s, const float *x, float *col, int oh0, int oh1) {
  const int H = s->h_in, W = s->w_in, Wo = s->w_out;
  const int sh = s->stride_h, sw = s->stride_w, ph = s->pad_h, pw = s->pad_w;
  const int flat = sh == 1 && sw == 1 && Wo == W;
  for (int c = 0; c < s->c_in; c++) {
    const float *xc = x + (size_t)c * H * W;
    for (int i = 0; i < s->kh; i++) {
      for (int j = 0; j < s->kw; j++) {
        /* Output columns whose input column is inside: ow in [lo, hi). */
        int lo = pw - j > 0 ? (pw - j + sw - 1) / sw : 0;
        int hi = (W - 1 + pw - j) >= 0 ? (W - 1 + pw - j) / sw + 1 : 0;
        if (hi > Wo) hi = Wo;
        if (lo > hi) lo = hi;
        if (flat) {
          /* Stride 1 and w_out == w_in: the rows oh in [oa, ob) that read inside the
             image are one shifted copy of the plane; the cells that wrapped around to a
             neighbouring row (ow outside [lo, hi)) are zeroed afterwards. */
          int oa = ph - i > oh0 ? ph - i : oh0, ob = H + ph - i < oh1 ? H + ph - i : oh1;
          if (ob < oa) ob = oa;
          if (oa > oh0) row_zero(col, (oa - oh0) * Wo);
          if (ob < oh1) row_zero(col + (size_t)(ob - oh0) * Wo, (oh1 - ob) * Wo);
          float *d = col + (size_t)(oa - oh0) * Wo;
          const float *src = xc + (ptrdiff_t)(oa - ph + i) * W;
          long n = (long)(ob - oa) * W, sk = j - pw;
          if (sk < 0) n += sk; else n -= sk;
          if (n > 0) row_copy(d + (sk < 0 ? -sk : 0), src + (sk > 0 ? sk : 0), (int)n);
          for (int oh = oa; oh < ob; oh++, d += Wo) {
            for (int ow = 0; ow < lo; ow++) d[ow] = 0.0f;
            for (int ow = hi; ow < Wo; ow++) d[ow] = 0.0f;
          }
          col += (size_t)(oh1 - oh0) * Wo;
          continue;
        }
        for (int oh = oh0; oh < oh1; oh++, col += Wo) {
          int ih = oh * sh - ph + i;
          if (ih < 0 || ih >= H) {
            row_zero(col, Wo);
            continue;
          }
          const float *xr = xc + (size_t)ih * W - pw + j;
          for (int ow = 0; ow < lo; ow++) col[ow] = 0.0f;
          if (sw == 1) {
            row_copy(col + lo, xr + lo, hi - lo);
          } else {
            int ow = lo;
            if (sw == 2) /* even lanes of 8; the last read stays before x[.][ih][2*(hi-1)] */
              for (; ow + 4 < hi; ow += 4) {
                const float *src = xr + (size_t)ow * 2;
                nn_v4_store(col + ow, NN_V4_EVENS(nn_v4_load(src), nn_v4_load(src + 4)));
              }
            for (; ow < hi; ow++) col[ow] = xr[(size_t)ow * sw];
          }
          for (int ow = hi; ow < Wo; ow++) col[ow] = 0.0f;
        }
      }
    }
  }
}

/* dx[c][ih][iw] += col[...] for every cell im2col copied (the transpose of im2col),
   output rows [oh0, oh1). Clobbers the cells of col that im2col zeroes. */
static void col2im_add(const nn_conv2d_shape_t *s, float *col, float *dx, int oh0, int oh1) {
  const int H = s->h_in, W = s->w_in, Wo = s->w_out;
  const int sh = s->stride_h, sw = s->stride_w, ph = s->pad_h, pw = s->pad_w;
  const int flat = sh == 1 && sw == 1 && Wo == W;
  for (int c = 0; c < s->c_in; c++) {
    float *dc = dx + (size_t)c * H * W;
    for (int i = 0; i < s->kh; i++) {
      for (int j = 0; j < s->kw; j++) {
        int lo = pw - j > 0 ? (pw - j + sw - 1) / sw : 0;
        int hi = (W - 1 + pw - j) >= 0 ? (W - 1 + pw - j) / sw + 1 : 0;
        if (hi > Wo) hi = Wo;
        if (lo > hi) lo = hi;
        if (flat) {
          /* The transpose of im2col's shifted copy: zero the wrapped cells of col, then
             one shifted add over the rows that lie inside the image. */
          int oa = ph - i > oh0 ? ph - i : oh0, ob = H + ph - i < oh1 ? H + ph - i : oh1;
          float *c0 = col + (size_t)(oa - oh0) * Wo;
          for (int oh = oa; oh < ob; oh++) {
            float *r = col + (size_t)(oh - oh0) * Wo;
            for (int ow = 0; ow < lo; ow++) r[ow] = 0.0f;
            for (int ow = hi; ow < Wo; ow++) r[ow] = 0.0f;
          }
          float *dst = dc + (ptrdiff_t)(oa - ph + i) * W;
          long n = (long)(ob - oa) * W, sk = j - pw;
          if (sk < 0) n += sk; else n -= sk;
          if (ob > oa && n > 0)
            row_add(dst + (sk > 0 ? sk : 0), c0 + (sk < 0 ? -sk : 0), (int)n);
          col += (size_t)(oh1 - oh0) * Wo;
          continue;
        }
        for (int oh = oh0; oh < oh1; oh++, col += Wo) {
          int ih = oh * sh - ph + i;
          if (ih < 0 || ih >= H) continue;
          float *dr = dc + (size_t)ih * W - pw + j;
          if (sw == 1) {
            row_add(dr + lo, col + lo, hi - lo);
          } else {
            for (int ow = lo; ow < hi; ow++) dr[(size_t)ow * sw] += col[ow];
          }
        }
      }
    }
  }
}

typedef struct {
  const nn_conv2d_shape_t *s;
  const float *x, *w, *b, *dy;
  float *y, *dx, *dw, *db, *ws;
  int chunks;
  int dx_add;   /* backward: add into dx (else store it) */
} conv_job_t;

static void conv_forward_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const conv_job_t *j = vjob;
  const nn_conv2d_shape_t *s = j->s;
  const int K = s->c_in * s->kh * s->kw, P = s->h_out * s->w_out;
  const size_t xs = (size_t)s->c_in * s->h_in * s->w_in, ys = (size_t)s->c_out * P;
  float *col = j->ws + (size_t)t * conv_slot_floats(s);
  const int direct = conv_is_direct(s), rb = conv_row_block(s);
  int i0 = (int)((long)s->n * t / j->chunks), i1 = (int)((long)s->n * (t + 1) / j->chunks);
  for (int i = i0; i < i1; i++) {
    const float *xi = j->x + (size_t)i * xs;
    float *yi = j->y + (size_t)i * ys;
    float beta = 0;
    if (j->b) {
      for (int c = 0; c < s->c_out; c++) {
        float bc = j->b[c];
        float *yr = yi + (size_t)c * P;
        for (int p = 0; p < P; p++) yr[p] = bc;
      }
      beta = 1;
    }
    if (direct) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->c_out, P, K, 1.0f, j->w, K, xi,
                  P, beta, yi, P);
      continue;
    }
    for (int oh0 = 0; oh0 < s->h_out; oh0 += rb) {
      int oh1 = oh0 + rb < s->h_out ? oh0 + rb : s->h_out, nb = (oh1 - oh0) * s->w_out;
      im2col(s, xi, col, oh0, oh1);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->c_out, nb, K, 1.0f, j->w, K,
                  col, nb, beta, yi + (size_t)oh0 * s->w_out, P);
    }
  }
}

typedef struct {
  const nn_wino_t *p;
  const float *x, *u, *b;
  float *y, *ws;
  size_t slot;
  int accumulate, chunks;
} wino_job_t;

static void conv_wino_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const wino_job_t *j = vjob;
  int i0 = (int)((long)j->p->n * t / j->chunks), i1 = (int)((long)j->p->n * (t + 1) / j->chunks);
  nn_wino_run(j->p, j->x, j->u, j->b, j->accumulate, j->y, j->ws + (size_t)t * j->slot, i0, i1);
}

/* y (+)= Winograd conv of x by u over the batch, split as the GEMM path splits it. */
static void conv_wino_parallel(const nn_conv2d_shape_t *s, const nn_wino_t *p, const float *x,
                               const float *u, const float *b, int accumulate, float *y,
                               float *ws) {
  wino_job_t job = {p, x, u, b, y, ws, conv_slot_floats(s), accumulate, conv_chunks(s)};
  if (job.chunks > 1) {
    nn_blas_single_begin();
    nn_parallel_for(job.chunks, conv_wino_chunk, &job);
    nn_blas_single_end();
  } else {
    conv_wino_chunk(&job, 0, 0);
  }
}

typedef struct {
  const nn_wino_t *p;
  const float *x, *dy;
  float *ws;
  size_t slot, du_off;
  int chunks;
} wino_dw_job_t;

/* Transformed weight gradient of chunk t into its slot (after the Winograd scratch). */
static void conv_wino_dw_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const wino_dw_job_t *j = vjob;
  int i0 = (int)((long)j->p->n * t / j->chunks), i1 = (int)((long)j->p->n * (t + 1) / j->chunks);
  float *slot = j->ws + (size_t)t * j->slot;
  nn_wino_dweight_run(j->p, j->x, j->dy, slot + j->du_off, slot, i0, i1);
}

typedef struct {
  const nn_conv_direct_t *d;
  const float *x, *w, *b;
  float *y, *ws;
  size_t slot;
  int accumulate, n, chunks;
} direct_job_t;

static void conv_direct_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const direct_job_t *j = vjob;
  int i0 = (int)((long)j->n * t / j->chunks), i1 = (int)((long)j->n * (t + 1) / j->chunks);
  nn_conv_direct_run(j->d, j->x, j->w, j->b, j->accumulate, j->y, j->ws + (size_t)t * j->slot,
                     i0, i1);
}

/* y (+)= the direct kernel's conv of x over the batch, split as the GEMM path splits it. */
static void conv_direct_parallel(const nn_conv2d_shape_t *s, const nn_conv_direct_t *d,
                                 const float *x, const float *w, const float *b,
                                 int accumulate, float *y, float *ws) {
  direct_job_t job = {d, x, w, b, y, ws, conv_slot_floats(s), accumulate, s->n,
                      conv_chunks(s)};
  if (job.chunks > 1)
    nn_parallel_for(job.chunks, conv_direct_chunk, &job);
  else
    conv_direct_chunk(&job, 0, 0);
}

typedef struct {
  const nn_conv_direct_t *d;
  const float *x, *dy;
  float *ws;
  size_t slot;
  int n, chunks;
} direct_dw_job_t;

/* Chunk t's weight-gradient sums into the start of its slot. */
static void conv_direct_dw_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const direct_dw_job_t *j = vjob;
  int i0 = (int)((long)j->n * t / j->chunks), i1 = (int)((long)j->n * (t + 1) / j->chunks);
  nn_conv_direct_dweight_run(j->d, j->x, j->dy, j->ws + (size_t)t * j->slot, i0, i1);
}

static nn_status_t conv_check(const nn_conv2d_shape_t *s, const char *what) {
  if (!s) return nn_set_error(NN_ERR_ARG, "%s: shape is NULL", what);
  nn_conv2d_shape_t t = *s;
  nn_status_t st = nn_conv2d_shape(&t);
  if (st != NN_OK) return st;
  if (t.h_out != s->h_out || t.w_out != s->w_out)
    return nn_set_error(NN_ERR_ARG, "%s: h_out/w_out %dx%d do not match the shape (%dx%d); "
                        "call nn_conv2d_shape first", what, s->h_out, s->w_out, t.h_out, t.w_out);
  return NN_OK;
}

nn_status_t nn_conv2d_forward(const nn_conv2d_shape_t *s, const float *x, const float *w,
                              const float *b, float *y, float *workspace) {
  nn_status_t st = conv_check(s, "nn_conv2d_forward");
  if (st != NN_OK) return st;
  if (!x || !w || !y || (!workspace && !conv_is_direct(s)))
    return nn_set_error(NN_ERR_ARG, "nn_conv2d_forward: x, w, y or workspace is NULL");
  if (conv_is_wino(s)) {
    nn_wino_t f, bw;
    conv_wino_plans(s, &f, &bw);
    float *u = conv_wino_u(s, workspace);
    nn_wino_filter(&f, w, 0, u);
    conv_wino_parallel(s, &f, x, u, b, 0, y, workspace);
    return NN_OK;
  }
  if (conv_direct_fwd(s)) {
    nn_conv_direct_t f, bw;
    conv_direct_plans(s, &f, &bw);
    conv_direct_parallel(s, &f, x, w, b, 0, y, workspace);
    return NN_OK;
  }
  conv_job_t job = {s, x, w, b, NULL, y, NULL, NULL, NULL, workspace, conv_chunks(s), 0};
  if (job.chunks > 1) {
    nn_blas_single_begin();
    nn_parallel_for(job.chunks, conv_forward_chunk, &job);
    nn_blas_single_end();
  } else {
    conv_forward_chunk(&job, 0, 0);
  }
  return NN_OK;
}

static void conv_backward_chunk(void *vjob, int t, int worker) {
  (void)worker;
  const conv_job_t *j = vjob;
  const nn_conv2d_shape_t *s = j->s;
  const int K = s->c_in * s->kh * s->kw, P = s->h_out * s->w_out, Co = s->c_out;
  const size_t xs = (size_t)s->c_in * s->h_in * s->w_in, ys = (size_t)Co * P;
  float *slot = j->ws ? j->ws + (size_t)t * conv_slot_floats(s) : NULL;
  float *col = slot;
  /* Every chunk accumulates the transposed weight gradient dW^T[K][Co] in its slot
     (col dy^T runs about twice as fast in OpenBLAS as dy col^T when c_out is small);
     the caller adds the transposes into dw. Chunk 0 adds db straight into db, the
     others into their slot. */
  float *priv = slot ? slot + conv_col_floats(s) : NULL;
  float *dwt = NULL, *db = j->db;
  if (j->dw) {
    dwt = priv;
    memset(dwt, 0, sizeof(float) * (size_t)Co * K);
  }
  if (t > 0 && db) {
    db = priv + (size_t)Co * K;
    memset(db, 0, sizeof(float) * (size_t)Co);
  }
  const int direct = conv_is_direct(s), rb = conv_row_block(s);
  int i0 = (int)((long)s->n * t / j->chunks), i1 = (int)((long)s->n * (t + 1) / j->chunks);
  for (int i = i0; i < i1; i++) {
    const float *xi = j->x + (size_t)i * xs;
    const float *dyi = j->dy + (size_t)i * ys;
    /* col2im adds: a stored dx starts from zero, cleared here while it is about to be
       used (in cache) rather than in a pass of its own. */
    if (j->dx && !j->dx_add && !direct) memset(j->dx + (size_t)i * xs, 0, sizeof(float) * xs);
    if (db) {
      for (int c = 0; c < Co; c++) {
        const float *r = dyi + (size_t)c * P;
        float acc = 0;
        for (int p = 0; p < P; p++) acc += r[p];
        db[c] += acc;
      }
    }
    if (direct) {
      if (dwt)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, K, Co, P, 1.0f, xi, P, dyi, P,
                    1.0f, dwt, Co);
      if (j->dx)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, Co, 1.0f, j->w, K, dyi, P,
                    j->dx_add ? 1.0f : 0.0f, j->dx + (size_t)i * xs, P);
      continue;
    }
    for (int oh0 = 0; oh0 < s->h_out; oh0 += rb) {
      int oh1 = oh0 + rb < s->h_out ? oh0 + rb : s->h_out, nb = (oh1 - oh0) * s->w_out;
      const float *dyb = dyi + (size_t)oh0 * s->w_out;
      if (dwt) {
        im2col(s, xi, col, oh0, oh1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, K, Co, nb, 1.0f, col, nb, dyb, P,
                    1.0f, dwt, Co);
      }
      if (j->dx) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, nb, Co, 1.0f, j->w, K, dyb, P,
                    0.0f, col, nb);
        col2im_add(s, col, j->dx + (size_t)i * xs, oh0, oh1);
      }
    }
  }
}

nn_status_t nn_conv2d_backward(const nn_conv2d_shape_t *s, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db,
                               float *workspace) {
  return nn_conv2d_backward_ex(s, x, w, dy, dx, 1, dw, db, workspace);
}

nn_status_t nn_conv2d_backward_ex(const nn_conv2d_shape_t *s, const float *x, const float *w,
                                  const float *dy, float *dx, int dx_add, float *dw, float *db,
                                  float *workspace) {
  nn_status_t st = conv_check(s, "nn_conv2d_backward");
  if (st != NN_OK) return st;
  if (!dy || (dw && !x) || (dx && !w))
    return nn_set_error(NN_ERR_ARG, "nn_conv2d_backward: dy, x (for dw) or w (for dx) is NULL");
  const int wino = conv_is_wino(s), direct = conv_direct_dx(s), direct_dw = conv_direct_dw(s);
  conv_job_t job = {s, x, w, NULL, dy, NULL, wino || direct ? NULL : dx,
                    wino || direct_dw ? NULL : dw, db, workspace, conv_chunks(s), dx_add};
  if (!workspace && (job.chunks > 1 || dw || (!conv_is_direct(s) && dx)))
    return nn_set_error(NN_ERR_ARG, "nn_conv2d_backward: workspace is NULL");
  if (job.chunks > 1) {
    nn_blas_single_begin();
    nn_parallel_for(job.chunks, conv_backward_chunk, &job);
    nn_blas_single_end();
  } else {
    conv_backward_chunk(&job, 0, 0);
  }
  /* Add each chunk's dW^T and db, in chunk order (deterministic for a thread count). */
  const int K = s->c_in * s->kh * s->kw, Co = s->c_out;
  for (int t = 0; t < job.chunks; t++) {
    const float *priv = workspace + (size_t)t * conv_slot_floats(s) + conv_col_floats(s);
    if (job.dw)
      for (int co = 0; co < Co; co++) {
        float *dr = dw + (size_t)co * K;
        for (int k = 0; k < K; k++) dr[k] += priv[(size_t)k * Co + co];
      }
    if (db && t > 0)
      for (int c = 0; c < Co; c++) db[c] += priv[(size_t)Co * K + c];
  }
  /* The Winograd passes come after the sums above: they reuse the slots. */
  nn_wino_t f, bw;
  if (wino) conv_wino_plans(s, &f, &bw);
  if (wino && dw && !direct_dw) {
    wino_dw_job_t dj = {&f, x, dy, workspace, conv_slot_floats(s), nn_wino_slot_floats(&f),
                        job.chunks};
    if (dj.chunks > 1) {
      nn_blas_single_begin();
      nn_parallel_for(dj.chunks, conv_wino_dw_chunk, &dj);
      nn_blas_single_end();
    } else {
      conv_wino_dw_chunk(&dj, 0, 0);
    }
    for (int t = 0; t < dj.chunks; t++)  /* chunk order: deterministic */
      nn_wino_dweight_finish(&f, workspace + (size_t)t * dj.slot + dj.du_off, dw);
  }
  if (wino && dx) {
    float *u = conv_wino_u(s, workspace);
    nn_wino_filter(&bw, w, 1, u);
    conv_wino_parallel(s, &bw, dy, u, NULL, dx_add, dx, workspace);
  }
  if (direct_dw && dw) {
    nn_conv_direct_t f, bw;
    conv_direct_plans(s, &f, &bw);
    direct_dw_job_t dj = {&f, x, dy, workspace, conv_slot_floats(s), s->n, job.chunks};
    if (dj.chunks > 1)
      nn_parallel_for(dj.chunks, conv_direct_dw_chunk, &dj);
    else
      conv_direct_dw_chunk(&dj, 0, 0);
    for (int t = 0; t < dj.chunks; t++)  /* chunk order: deterministic */
      nn_conv_direct_dweight_finish(&f, workspace + (size_t)t * dj.slot, dw);
  }
  if (direct && dx) {
    nn_conv_direct_t f, bw;
    conv_direct_plans(s, &f, &bw);
    float *wt = conv_wino_u(s, workspace);
    nn_conv_direct_flip(w, s->c_out, s->c_in, s->kh, s->kw, wt);
    conv_direct_parallel(s, &bw, dy, wt, NULL, dx_add, dx, workspace);
  }
  return NN_OK;
}
