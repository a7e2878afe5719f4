/* cast_fold.c — cast folding.
 *
 * cast(x, dtype(x)) is x. cast(cast(x, B), A) with x of dtype A is x when B is strictly wider
 * than A (f16 -> f32 -> f16, bf16 -> f32 -> bf16, f32 -> f64 -> f32 are exact round trips). A
 * narrowing or same-width round trip (f32 -> f16 -> f32, f16 -> bf16 -> f16) rounds, so it
 * stays. Nothing folds across storage updated in place. The first cast of a pair is left for
 * dead-code elimination when nothing else reads it.
 */
#include "runtime/graph/passes.h"

static bool wider(mst_dtype b, mst_dtype a) {
    return mst_dtype_is_float(a) && mst_dtype_is_float(b) && mst_dtype_size(b) > mst_dtype_size(a);
}

int mst_pass_fold_casts(mst_graph *g) {
    int folded = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mst_gnode *n = &g->nodes[i];
        if (n->dead || n->kind != MST_GN_OP || n->op != MST_OP_CAST) continue;
        int x = n->in[0], y = n->out[0];
        if (mst_graph_value_mutated(g, x) || mst_graph_value_mutated(g, y)) continue;
        mst_dtype a = g->values[x].dtype, to = g->values[y].dtype;
        int replacement = -1;
        if (a == to) {
            replacement = x;
        } else {
            int p = mst_graph_producer(g, x);
            if (p >= 0 && g->nodes[p].kind == MST_GN_OP && g->nodes[p].op == MST_OP_CAST) {
                int src = g->nodes[p].in[0];
                if (g->values[src].dtype == to && wider(a, to) && !mst_graph_value_mutated(g, src)) replacement = src;
            }
        }
        if (replacement < 0) continue;
        mst_graph_replace_uses(g, y, replacement, i + 1);
        n->dead = true;
        folded++;
    }
    mst_graph_compact(g);
    return folded;
}
