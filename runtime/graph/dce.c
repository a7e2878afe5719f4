/* dce.c — dead-code elimination, walking the nodes backwards.
 *
 * A node is kept when it produces a needed value, updates a persistent or input value (the
 * optimizer step, batch-norm running statistics), or updates the storage of a needed value
 * (an in-place unscale of gradients the kept optimizer reads). Keeping a node makes its inputs
 * and their bases needed.
 */
#include <stdlib.h>

#include "runtime/graph/passes.h"

static void need(const mst_graph *g, bool *needed, int v) {
    needed[v] = true;
    needed[mst_graph_root(g, v)] = true;
}

static bool keeps(const mst_graph *g, const mst_gnode *n, const bool *needed) {
    for (int k = 0; k < n->n_out; k++)
        if (needed[n->out[k]]) return true;
    if (n->relu_epilogue && needed[n->relu_value]) return true;
    for (int i = 0; i < n->n_in; i++) {
        int r = mst_graph_root(g, n->in[i]);
        bool updates = n->kind == MST_GN_OP ? (n->mutates >> i & 1) : mst_gnode_mutates_root(g, n, r);
        mst_gvalue_kind k = g->values[r].kind;
        if (updates && (k == MST_GV_PERSISTENT || k == MST_GV_INPUT || needed[r])) return true;
    }
    return false;
}

int mst_pass_dce(mst_graph *g) {
    bool *needed = calloc((size_t)g->n_values + 1, sizeof(bool));
    MST_ASSERT(needed);
    for (int k = 0; k < g->n_outputs; k++) need(g, needed, g->outputs[k]);
    int removed = 0;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        if (!keeps(g, n, needed)) {
            n->dead = true;
            removed++;
            continue;
        }
        for (int j = 0; j < n->n_in; j++) need(g, needed, n->in[j]);
    }
    free(needed);
    mst_graph_compact(g);
    return removed;
}
