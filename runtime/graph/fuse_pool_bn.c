/* fuse_pool_bn.c — max pooling's gradient folded into the batch-norm gradient after it.
 *
 *     v = maxpool2d_grad(gy, indices[, pooled])         (pooled: fuse_pool_relu.c's relu select)
 *     gx, ggamma, gbeta = batchnorm_grad(v, x, gamma, save_mean, save_invstd)
 * becomes
 *     gx, ggamma, gbeta = batchnorm_grad(gy, x, gamma, save_mean, save_invstd, indices[, pooled])
 *
 * batchnorm_grad's pooled form (runtime/ops/norm.c) builds each 16-channel slab of v in a buffer
 * with maxpool2d_grad's own slab loops and reads it there, twice (its sums, then gx), so v — the
 * pooling's (N, C, H, W) gradient, mostly zeros, four times the pooled size — is never written to
 * memory or read back. The bits are the two ops'. It pays where v is large: the cnn's stem
 * (64x32x28x28, 6.4 MB) passed through memory three times for it. Applies to f32 v (the fused
 * kernel's dtype; other calls would only run the two ops in turn) with no other reader, no view,
 * no in-place update and not an output, when maxpool2d_grad's inputs are updated nowhere (so
 * reading them later, at the batch norm, reads the same values).
 */
#include <stdlib.h>

#include "runtime/graph/passes.h"

int mst_pass_fuse_pool_bn(mst_graph *g) {
    int fused = 0;
    for (int b = 0; b < g->n_nodes; b++) {
        mst_gnode *bn = &g->nodes[b];
        if (bn->dead || bn->kind != MST_GN_OP || bn->op != MST_OP_BATCHNORM_GRAD || bn->n_in != 5) continue;
        int v = bn->in[0], m = mst_graph_producer(g, v);
        if (m < 0) continue;
        const mst_gnode *mg = &g->nodes[m];
        if (mg->kind != MST_GN_OP || mg->op != MST_OP_MAXPOOL2D_GRAD || mg->relu_epilogue || mg->out[0] != v) continue;
        if (g->values[v].dtype != MST_DTYPE_F32 || !mst_graph_value_private(g, v) || mst_graph_read_elsewhere(g, v, b)) continue;
        bool inputs_fixed = true;
        for (int i = 0; i < mg->n_in; i++) inputs_fixed &= mst_graph_value_private(g, mg->in[i]);
        if (!inputs_fixed) continue;
        int n_in = 5 + mg->n_in - 1;        /* + indices[, pooled] */
        int *grown = realloc(bn->in, (size_t)n_in * sizeof(int));
        if (!grown) continue;               /* out of memory: leave the two ops as they are */
        grown[0] = mg->in[0];
        for (int i = 1; i < mg->n_in; i++) grown[4 + i] = mg->in[i];
        bn->in = grown;
        bn->n_in = n_in;
        g->nodes[m].dead = true;
        fused++;
    }
    mst_graph_compact(g);
    return fused;
}
