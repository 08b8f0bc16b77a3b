/* nn/backward_store_internal.h: the backward kernels' forms for the model walk, which pick
   whether the input gradient is added into (dx += ..., the public kernels' convention,
   nn.h) or stored (dx = ...). The walk stores the gradient that a layer writes first in
   the backward pass (nn_layer_t.dx_first), so it need not zero every activation
   gradient beforehand and no kernel reads a gradient that is still all zeros: a pass
   over memory less per layer. Parameter gradients are always added into. Internal. */
#ifndef NN_BACKWARD_STORE_INTERNAL_H
#define NN_BACKWARD_STORE_INTERNAL_H

#include "nn/nn.h"

/* 1 (default): a model built from now on stores the input gradients its layers write
   first (on a backend that can); 0: it zeroes every gradient before the pass and every
   layer adds, as the public kernels do (for tests and measurements). */
extern int nn_backward_store;

/* nn_conv2d_backward, dx added into when dx_add, else stored. */
nn_status_t nn_conv2d_backward_ex(const nn_conv2d_shape_t *s, const float *x, const float *w,
                                  const float *dy, float *dx, int dx_add, float *dw, float *db,
                                  float *workspace);
/* nn_batchnorm2d_backward, dx added into when dx_add, else stored. */
nn_status_t nn_batchnorm2d_backward_ex(const nn_batchnorm2d_shape_t *s, const float *x,
                                       const float *gamma, const float *save_mean,
                                       const float *save_invstd, const float *dy, float *dx,
                                       int dx_add, float *dgamma, float *dbeta);
/* dx = dy where y > 0, else 0 (nn_relu_backward stores instead of adding); dx may be dy
   (an in-place relu masks its gradient). */
void nn_relu_backward_store(size_t count, const float *y, const float *dy, float *dx);

/* Backward of a residual add y = a + b, one pass over dy: da += dy, or (a_add 0) da = dy,
   and the same for db. da may be db (y = x + x): da is written before db is read. */
void nn_add_backward_ex(size_t count, const float *dy, float *da, int a_add, float *db,
                        int b_add);

#endif /* NN_BACKWARD_STORE_INTERNAL_H */
