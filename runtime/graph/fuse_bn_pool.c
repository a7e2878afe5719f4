/* fuse_bn_pool.c — max pooling folded into the batch norm whose output it reads.
 *
 *     y, save_mean, save_invstd = batchnorm(x, gamma, beta, running_mean!, running_var!)
 *                                                     (y: with or without its relu epilogue)
 *     pooled, indices = maxpool2d(y)
 * becomes
 *     pooled, indices, save_mean, save_invstd = batchnorm_maxpool(x, gamma, beta, running_mean!, running_var!)
 *
 * batchnorm_maxpool (runtime/ops/norm.c) writes each 16-channel slab of y into a buffer and pools
 * it from there with maxpool2d's own slab loops, so y — the cnn stem's 6.4 MB, written once and
 * read once a step — never goes through memory; the bits are the two ops'. Applies to f32 y (the
 * fused kernel's dtype; other dtypes would only run the two ops in turn) read by nothing but the
 * pooling (fuse_pool_relu has already turned the backward's relu_grad into the pooling gradient's
 * select on the pooled values), with no view, no in-place update and not an output. Runs after
 * epilogue.c (the relu rides along as batch norm's in-kernel relu) and fuse_pool_relu.c (which
 * looks for the forward maxpool2d).
 */
#include <stdlib.h>

#include "runtime/graph/passes.h"

/* y's only reader is node `reader` (and, with an epilogue, the relu's value's too). */
static bool read_only_by(const mst_graph *g, int v, int reader) {
    return mst_graph_value_private(g, v) && !mst_graph_read_elsewhere(g, v, reader);
}

int mst_pass_fuse_bn_pool(mst_graph *g) {
    int fused = 0;
    for (int m = 0; m < g->n_nodes; m++) {
        mst_gnode *mp = &g->nodes[m];
        if (mp->dead || mp->kind != MST_GN_OP || mp->op != MST_OP_MAXPOOL2D || mp->relu_epilogue || mp->n_out != 2) continue;
        int v = mp->in[0], b = mst_graph_producer(g, v);
        if (b < 0) continue;
        mst_gnode *bn = &g->nodes[b];
        if (bn->kind != MST_GN_OP || bn->op != MST_OP_BATCHNORM || bn->n_in != 5 || bn->n_out != 3) continue;
        int y = bn->out[0];
        if (bn->relu_epilogue ? bn->relu_value != v : y != v) continue;
        if (g->values[v].dtype != MST_DTYPE_F32 || !read_only_by(g, v, m) || (y != v && !read_only_by(g, y, m))) continue;
        int *out = realloc(bn->out, 4 * sizeof(int));
        if (!out) continue;                 /* out of memory: leave the two ops as they are */
        out[3] = out[2], out[2] = out[1];   /* save_mean, save_invstd after the pooling's two */
        out[0] = mp->out[0], out[1] = mp->out[1];
        bn->out = out;
        bn->n_out = 4;
        bn->op = MST_OP_BATCHNORM_MAXPOOL;
        if (bn->relu_epilogue) bn->attrs.i[1] = 1;      /* the relu in the kernel's own apply */
        bn->relu_epilogue = false;
        bn->relu_value = -1;
        for (int k = 0; k < 6; k++) bn->attrs.i[2 + k] = mp->attrs.i[k];
        bn->mutates = mst_op_table[MST_OP_BATCHNORM_MAXPOOL]->mutates;
        for (int k = 0; k < MST_MAX_OP_OUTPUTS; k++) bn->inplace[k] = -1;
        mp->dead = true;
        fused++;
    }
    mst_graph_compact(g);
    return fused;
}
