/* conv_direct.h — direct convolution for inputs of few channels (a network's stem), on AVX-512
 * (internal to runtime/ops; conv.c calls it from its builtin kernels).
 *
 * im2col + GEMM runs a 1-channel 3x3 convolution as a GEMM of inner dimension 9: the cnn's stem
 * (64x1x28x28 -> 32 channels) took 412 us at 70 GFLOP/s, most of it writing and reading the
 * column matrix. Here each output pixel is computed for 16 output channels at once (one vector
 * lane each) from the C*R*S <= 27 weight vectors held in registers, the input plane zero-padded
 * into a buffer first, and the output written as nChw16c slabs — into the tensor when it is in
 * that layout (graph mode's blocked chains: no reorder after the stem), through a transpose into
 * its rows when it is plain; the weight gradient sums gy (16 channels a vector, either layout)
 * times the input the same way. Every output element is one fused multiply-add chain in a fixed
 * order (forward: c, r, s, then + bias; weight gradient: n, p, q), whatever the layout or thread
 * count. Chosen per shape by the kernel choice like any builtin kernel.
 *
 *     if (mst_conv_direct_applies(c, &g)) return mst_conv_direct_forward(ctx, c, &g);
 */
#ifndef MST_RUNTIME_OPS_CONV_DIRECT_H
#define MST_RUNTIME_OPS_CONV_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"

/* A convolution's geometry: input (N, C, H, W), weight (K, C, R, S), output (N, K, P, Q). */
typedef struct {
    int64_t n, c, h, w;
    int64_t k, r, s;
    int64_t p, q;
    int64_t sh, sw, ph, pw;
} mst_conv_geom;

/* conv2d or conv2d_grad_weight on f32 with C < 16, C*R*S <= 27 and K a multiple of 16, on a CPU
 * with AVX-512 (MSTUNE_CPU_MASK honoured); the input x plain, the output (forward) or gy (weight
 * gradient) in either layout. */
bool mst_conv_direct_applies(const mst_op_call *c, const mst_conv_geom *g);
mst_status mst_conv_direct_forward(mst_ctx *ctx, const mst_op_call *c, const mst_conv_geom *g);
mst_status mst_conv_direct_grad_weight(mst_ctx *ctx, const mst_op_call *c, const mst_conv_geom *g);

#endif
