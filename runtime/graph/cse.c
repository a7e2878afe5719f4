/* cse.c — common subexpression elimination: a later node with the same op, attributes and
 * inputs as an earlier one reuses its outputs.
 *
 * Never merged: random ops (two dropouts draw two masks), nodes that update anything, and nodes
 * that read or produce storage updated anywhere in the graph (the two reads might see different
 * values). Views are merged like any op: two reshapes of one value to one shape are one view.
 */
#include <string.h>

#include "runtime/graph/passes.h"

static bool candidate(const mst_graph *g, const mst_gnode *n) {
    if (n->dead || n->kind != MST_GN_OP || n->mutates) return false;
    const mst_op_desc *d = mst_op_table[n->op];
    if (d->flags & MST_OPF_RANDOM) return false;
    for (int i = 0; i < n->n_in; i++)
        if (mst_graph_value_mutated(g, n->in[i])) return false;
    for (int k = 0; k < n->n_out; k++)
        if (mst_graph_value_mutated(g, n->out[k])) return false;
    return true;
}

static bool same(const mst_gnode *a, const mst_gnode *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out) return false;
    if (memcmp(a->in, b->in, (size_t)a->n_in * sizeof(int)) != 0) return false;
    return memcmp(&a->attrs, &b->attrs, sizeof(a->attrs)) == 0;
}

int mst_pass_cse(mst_graph *g) {
    int merged = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mst_gnode *n = &g->nodes[i];
        if (!candidate(g, n)) continue;
        for (int j = 0; j < i; j++) {
            mst_gnode *e = &g->nodes[j];
            if (!same(e, n) || !candidate(g, e)) continue;
            for (int k = 0; k < n->n_out; k++) mst_graph_replace_uses(g, n->out[k], e->out[k], i + 1);
            n->dead = true;
            merged++;
            break;
        }
    }
    mst_graph_compact(g);
    return merged;
}
