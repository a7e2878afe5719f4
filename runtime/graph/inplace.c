/* inplace.c — in-place rewrites: an elementwise op (or fused group) writes its output over an
 * input of the same dtype and shape that dies there, so the two share one arena slot.
 *
 * Safe because elementwise kernels read element i before writing element i (the fused loop
 * reads a whole block before writing it). Only arena intermediates qualify: never inputs,
 * persistent or constant values, views or values with views, or graph outputs; and only within
 * one memory category (mst_gvalue.cat): a buffer is counted under one category while live
 * (plan.h), so a gradient written over a dying activation would have to be counted as one or the
 * other.
 */
#include "runtime/graph/passes.h"

static bool elementwise(const mst_gnode *n) {
    if (n->kind == MST_GN_FUSED_ELEM) return true;
    return n->kind == MST_GN_OP && !n->mutates && mst_op_table[n->op]->elem_f32 != NULL;
}

int mst_pass_inplace(mst_graph *g) {
    int rewritten = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mst_gnode *n = &g->nodes[i];
        if (n->dead || !elementwise(n)) continue;
        for (int k = 0; k < n->n_out && k < MST_MAX_OP_OUTPUTS; k++) {
            const mst_gvalue *o = &g->values[n->out[k]];
            if (o->kind != MST_GV_INTERMEDIATE || mst_graph_has_views(g, n->out[k])) continue;
            for (int j = 0; j < n->n_in; j++) {
                int e = n->in[j];
                const mst_gvalue *x = &g->values[e];
                bool taken = false;
                for (int q = 0; q < MST_MAX_OP_OUTPUTS; q++) taken |= n->inplace[q] == j;
                if (taken || x->kind != MST_GV_INTERMEDIATE || x->dtype != o->dtype || x->cat != o->cat ||
                    !mst_shape_equal(x->ndim, x->shape, o->ndim, o->shape) || mst_graph_has_views(g, e) ||
                    mst_graph_last_use(g, e) != i)
                    continue;
                n->inplace[k] = j;
                rewritten++;
                break;
            }
        }
    }
    return rewritten;
}
