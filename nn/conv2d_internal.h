/* nn/conv2d_internal.h: tuning knobs of the CPU convolution, exposed so that tests can
   shrink the im2col blocks and reach the multi-block paths on small shapes. Internal. */
#ifndef NN_CONV2D_INTERNAL_H
#define NN_CONV2D_INTERNAL_H

#include <stddef.h>

/* im2col is done in blocks of whole output rows: about this many bytes of col per block,
   but at least nn_conv2d_block_min_cols output positions (small GEMMs run slowly). */
extern size_t nn_conv2d_block_bytes;
extern int nn_conv2d_block_min_cols;

/* 1 (default): split the batch over nn's threads, each GEMM single-threaded; 0: one
   sample at a time with OpenBLAS threading each GEMM (kept for measurements). */
extern int nn_conv2d_batch_split;

#endif
