/* nn/conv2d_internal.h: tuning knobs of the CPU convolution, exposed so that tests can
   shrink the im2col blocks and reach the multi-block paths on small shapes. Internal. */
#ifndef NN_CONV2D_INTERNAL_H
#define NN_CONV2D_INTERNAL_H

#include "nn/nn.h"

#include <stddef.h>

/* im2col is done in blocks of whole output rows: about this many bytes of col per block,
   but at least nn_conv2d_block_min_cols output positions (small GEMMs run slowly). */
extern size_t nn_conv2d_block_bytes;
extern int nn_conv2d_block_min_cols;

/* 1 (default): split the batch over nn's threads, each GEMM single-threaded; 0: one
   sample at a time with OpenBLAS threading each GEMM (kept for measurements). */
extern int nn_conv2d_batch_split;

/* Winograd F(2x2, 3x3) and F(2x2, 5x5) for stride-1 convolutions (nn/conv_winograd.c).
   A plan is a convolution of n samples x[ci][h][w] padded by ph/pw with an r x r kernel
   (r = 3 or 5) into y[co][ho][wo]. */
typedef struct {
  int r, n, ci, co, h, w, ph, pw, ho, wo;
  int th, tw, tw4, hp, wp; /* tiles; the padded plane's size */
  int g;                   /* samples per group (one set of (r+1)^2 GEMMs) */
} nn_wino_t;

/* 1 (default): 3x3 and 5x5 stride-1 convs (pad < kernel) run forward and input gradient
   by Winograd; 0: im2col + GEMM. */
extern int nn_conv2d_winograd;
/* ... when c_in and c_out are both at least this (fewer: the transforms dominate). */
extern int nn_conv2d_wino_min_channels;
/* ... and at most this many (memory), on planes of at most nn_wino_group_tiles tiles. */
extern int nn_conv2d_wino_max_channels;
/* Tiles per group of samples: the N dimension of the 16 GEMMs. */
extern int nn_wino_group_tiles;

void nn_wino_plan(nn_wino_t *p, int r, int n, int ci, int co, int h, int w, int ph, int pw);
/* Floats of one thread's scratch. */
size_t nn_wino_slot_floats(const nn_wino_t *p);
/* Floats of the transformed weights (and of a transformed dW). */
size_t nn_wino_u_floats(const nn_wino_t *p);
/* Transformed weights u[(r+1)^2][co][ci] from w[co][ci][r][r], or with flip = 1 from the
   flipped, transposed w[ci][co][r][r] (for the input gradient). */
void nn_wino_filter(const nn_wino_t *p, const float *w, int flip, float *u);
/* y[i] (+)= conv(x[i]) (+ bias) for the samples i in [i0, i1); ws: one slot. */
void nn_wino_run(const nn_wino_t *p, const float *x, const float *u, const float *bias,
                 int accumulate, float *y, float *ws, int i0, int i1);
/* Weight gradient (plan of the forward conv): du (nn_wino_du_floats) = the transformed
   dW of samples [i0, i1) of x and dy; nn_wino_dweight_finish adds its inverse into
   dw[co][ci][r][r]. */
size_t nn_wino_du_floats(const nn_wino_t *p);
void nn_wino_dweight_run(const nn_wino_t *p, const float *x, const float *dy, float *du,
                         float *ws, int i0, int i1);
void nn_wino_dweight_finish(const nn_wino_t *p, const float *du, float *dw);

/* Direct convolution (nn/conv_direct.c) for few channels: forward and input gradient of
   stride 1, forward of stride 2, one sample at a time through a zero-padded copy of its
   input planes (for stride 2 split into even and odd columns). */
typedef struct {
  int ci, co, h, w, kh, kw, ph, pw, ho, wo;
  int stride;    /* 1 or 2, both ways */
  int vec;       /* floats per vector: 16 (AVX-512), 8 (AVX2), 0 (no kernel on this CPU) */
  int nvec;      /* vectors per output row */
  int hp, wp;    /* the padded plane (stride 2: each column plane) */
  size_t phase;  /* hp * wp: floats of one (column) plane */
} nn_conv_direct_t;

/* 1 (default): stride-1 convolutions other than the 1x1 GEMM with at most
   nn_conv2d_direct_max_channels channels each way (before Winograd), and the forward of
   stride-2 ones with at most nn_conv2d_direct_s2_max_channels, run by the direct kernel
   where the CPU has AVX-512, the stride-1 ones also with AVX2 + FMA alone (2: the
   stride-2 forwards too); 0: im2col + GEMM or Winograd. */
extern int nn_conv2d_direct;
/* 0 (default): 32, or 16 where AVX-512 is half width or absent (nn/conv2d.c says why). */
extern int nn_conv2d_direct_max_channels;
/* Stride-2 forward by the direct kernel: at most this many channels each way. */
extern int nn_conv2d_direct_s2_max_channels;
/* Weight gradients of 3x3 convolutions (stride 1 or 2, output channels a multiple of
   the vector: 16 with AVX-512, 8 with AVX2) by the direct kernel, whatever runs their
   forward: at most this many channels each way (0: none), and with AVX2 at most
   nn_conv2d_direct_avx2_dw_max_in input channels. */
extern int nn_conv2d_direct_dw_max_channels;
extern int nn_conv2d_direct_avx2_dw_max_in;
/* Which passes of the convolution s the direct kernel runs now: 1 forward, 2 input
   gradient, 4 weight gradient (or-ed; 0 for a bad shape). For tests. */
int nn_conv2d_direct_passes(const nn_conv2d_shape_t *s);

/* Floats per vector of the direct kernel on this CPU (16, 8, or 0: none). */
int nn_conv_direct_vec(void);
void nn_conv_direct_plan(nn_conv_direct_t *d, int ci, int co, int h, int w, int kh, int kw,
                         int ph, int pw, int stride);
/* stride: 1, or 2 (both ways; the forward only). Floats of one thread's padded plane: */
size_t nn_conv_direct_plane_floats(const nn_conv_direct_t *d);
/* wt[ci][co][kh][kw] = w[co][ci][kh-1-y][kw-1-x]: the weights of the input gradient. */
void nn_conv_direct_flip(const float *w, int co, int ci, int kh, int kw, float *wt);
/* y[i] (+)= conv(x[i], w) (+ bias) for the samples i in [i0, i1); plane: scratch of
   nn_conv_direct_plane_floats. Needs nn_conv_direct_vec() > 0. */
void nn_conv_direct_run(const nn_conv_direct_t *d, const float *x, const float *w,
                        const float *bias, int accumulate, float *y, float *plane, int i0,
                        int i1);
/* Weight gradient of 3x3 kernels, stride 1 or 2, output channels a multiple of 16, on
   AVX-512 (nn_conv_direct_dweight_ok; d: the forward plan): the start of scratch
   (nn_conv_direct_dweight_floats, which also holds dy transposed and a padded plane) =
   the sums of samples [i0, i1) of x and dy; nn_conv_direct_dweight_finish adds them
   into dw[co][ci][3][3]. */
int nn_conv_direct_dweight_ok(const nn_conv_direct_t *d);
size_t nn_conv_direct_dweight_floats(const nn_conv_direct_t *d);
void nn_conv_direct_dweight_run(const nn_conv_direct_t *d, const float *x, const float *dy,
                                float *scratch, int i0, int i1);
void nn_conv_direct_dweight_finish(const nn_conv_direct_t *d, const float *scratch,
                                   float *dw);

#endif
