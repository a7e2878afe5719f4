/* pool_slab.h — max pooling and its gradient on one nChw16c slab, for kernels that produce or
 * consume a slab without writing it out (internal to runtime/ops).
 *
 * Graph mode's batchnorm_maxpool (runtime/ops/norm.c, fuse_bn_pool) pools each slab of batch norm's
 * output from a buffer with maxpool2d's own slab loops, so the pooled values and indices are its
 * bits and the (N, C, H, W) output is never written. Batch norm's gradient with the pooling gradient folded in (runtime/ops/norm.c, graph mode's
 * fuse_pool_bn) builds each slab of its gy here, in a buffer, instead of reading a whole
 * maxpool2d_grad output from memory; these are maxpool2d_grad's own slab loops, so the values are
 * its bits.
 *
 *     int64_t bad = mst_maxpool_grad_slab_f32(gy, pooled, idx, gx_slab, P, Q, H, W);
 */
#ifndef MST_RUNTIME_OPS_POOL_SLAB_H
#define MST_RUNTIME_OPS_POOL_SLAB_H

#include <stdint.h>

#include "runtime/op.h"

/* One slab (16 channels) of maxpool2d in f32: x is H x W x 16, y and the indices ip P x Q x 16;
 * pool holds maxpool2d's attributes (k_h, k_w, stride_h, stride_w, pad_h, pad_w in i[0..5]). */
void mst_maxpool_slab_f32(const float *x, int64_t H, int64_t W, float *y, int32_t *ip, int64_t P, int64_t Q,
                          const mst_attrs *pool);

/* One slab (16 channels) of maxpool2d_grad in f32: gy, pooled (NULL: no relu select) and the
 * indices ip are P x Q x 16, gx H x W x 16, all written. Returns -1, or the first index outside
 * the H x W plane as lane * P * Q + position. */
int64_t mst_maxpool_grad_slab_f32(const float *gy, const float *pooled, const int32_t *ip, float *gx, int64_t P, int64_t Q,
                                  int64_t H, int64_t W);
/* maxpool2d_grad's error for index k at (plain) position pos outside a plane of hw values, on call c. */
mst_status mst_maxpool_grad_bad_index(mst_ctx *ctx, const mst_op_call *c, int64_t k, int64_t pos, int64_t hw);

#endif
