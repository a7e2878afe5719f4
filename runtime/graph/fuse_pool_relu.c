/* fuse_pool_relu.c — relu_grad folded into the max-pooling gradient before it.
 *
 *     indices, pooled = maxpool2d(y)                  (y: a relu's output, after epilogue.c)
 *     v1 = maxpool2d_grad(gy, indices)
 *     v2 = relu_grad(v1, y)
 * becomes
 *     v2 = maxpool2d_grad(gy, indices, pooled)
 *
 * The pooling gradient keeps a window's gradient only where its pooled value is > 0, which is
 * relu_grad's select on y (runtime/ops/pool.c says why: the pooled value is y at the index), so
 * the bits are the same and relu_grad's pass over the H*W gradient goes; y is no longer read by the
 * backward and dies at the pooling. Applies when v1 has no other reader, no view and no in-place
 * update and is not an output.
 */
#include <stdlib.h>

#include "runtime/graph/passes.h"

/* The live OP node producing v as out[out_index] with op `op` and no epilogue; -1 otherwise. */
static int producer_of(const mst_graph *g, int v, mst_op op, int out_index) {
    int i = mst_graph_producer(g, v);
    if (i < 0) return -1;
    const mst_gnode *n = &g->nodes[i];
    if (n->kind != MST_GN_OP || n->op != op || n->relu_epilogue || n->n_out <= out_index || n->out[out_index] != v) return -1;
    return i;
}

int mst_pass_fuse_pool_relu(mst_graph *g) {
    int fused = 0;
    for (int r = 0; r < g->n_nodes; r++) {
        mst_gnode *rg = &g->nodes[r];
        if (rg->dead || rg->kind != MST_GN_OP || rg->op != MST_OP_RELU_GRAD) continue;
        int m = producer_of(g, rg->in[0], MST_OP_MAXPOOL2D_GRAD, 0);
        if (m < 0 || g->nodes[m].n_in != 2) continue;
        int f = producer_of(g, g->nodes[m].in[1], MST_OP_MAXPOOL2D, 1);
        if (f < 0 || mst_graph_root(g, g->nodes[f].in[0]) != mst_graph_root(g, rg->in[1])) continue;
        int v1 = rg->in[0], v2 = rg->out[0], pooled = g->nodes[f].out[0];
        if (!mst_graph_value_private(g, v1) || mst_graph_read_elsewhere(g, v1, r) || g->values[v2].dtype != g->values[v1].dtype ||
            g->values[pooled].dtype != g->values[v1].dtype)
            continue;
        mst_gnode *mg = &g->nodes[m];
        int *grown = realloc(mg->in, 3 * sizeof(int));
        if (!grown) continue;               /* out of memory: leave the two ops as they are */
        grown[2] = pooled;
        mg->in = grown;
        mg->n_in = 3;
        mg->out[0] = v2;                    /* writes relu_grad's result directly; v1 goes unused */
        rg->dead = true;
        fused++;
    }
    mst_graph_compact(g);
    return fused;
}
