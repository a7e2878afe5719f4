/* passes.c — the pass pipeline and the use/def queries the passes share.
 *
 * Queries walk the node list (O(nodes) each); graphs are hundreds of nodes and passes run once
 * per signature, so clarity wins over index structures here.
 */
#include "runtime/graph/passes.h"

void mst_graph_optimize(mst_graph *g, mst_pass_stats *st) { mst_graph_optimize_skipping(g, 0, st); }

void mst_graph_optimize_skipping(mst_graph *g, unsigned skip, mst_pass_stats *st) {
    mst_pass_stats s = {0};
    s.casts = mst_pass_fold_casts(g);
    s.cse = mst_pass_cse(g);
    s.dce = mst_pass_dce(g);
    if (!(skip & MST_PASS_EPILOGUE)) s.epilogues = mst_pass_relu_epilogue(g, &s.relu_grads_from_output);
    if (!(skip & MST_PASS_FUSE_POOL_RELU)) s.fused_pool_relu = mst_pass_fuse_pool_relu(g);
    if (!(skip & MST_PASS_FUSE_POOL_BN)) s.fused_pool_bn = mst_pass_fuse_pool_bn(g);
    if (!(skip & MST_PASS_FUSE_BN_POOL)) s.fused_bn_pool = mst_pass_fuse_bn_pool(g);
    if (!(skip & MST_PASS_SLICE_SUM)) s.slice_sums = mst_pass_slice_grad_sums(g);
    if (!(skip & MST_PASS_FUSE_ELEM)) s.fused_elem = mst_pass_fuse_elementwise(g);
    if (!(skip & MST_PASS_FUSE_OPTIM)) s.fused_optim = mst_pass_fuse_optimizer(g);
    s.inplace = mst_pass_inplace(g);
    if (st) *st = s;
}

static void replace_in_node(mst_gnode *n, int from, int to) {
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] == from) n->in[i] = to;
    for (int m = 0; m < n->n_members; m++) replace_in_node(&n->members[m], from, to);
}

void mst_graph_replace_uses(mst_graph *g, int from, int to, int start) {
    for (int i = start; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) replace_in_node(&g->nodes[i], from, to);
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == from) g->outputs[k] = to;
    /* views of `from` now view `to` */
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].kind == MST_GV_VIEW && g->values[v].view_of == from) g->values[v].view_of = to;
}

int mst_graph_producer(const mst_graph *g, int v) {
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] == v) return i;
        if (n->relu_epilogue && n->relu_value == v) return i;
    }
    return -1;
}

bool mst_gnode_reads_root(const mst_graph *g, const mst_gnode *n, int root) {
    for (int i = 0; i < n->n_in; i++)
        if (mst_graph_root(g, n->in[i]) == root) return true;
    for (int m = 0; m < n->n_members; m++)
        if (mst_gnode_reads_root(g, &n->members[m], root)) return true;
    return false;
}

bool mst_graph_is_output(const mst_graph *g, int v) {
    for (int k = 0; k < g->n_outputs; k++)
        if (mst_graph_root(g, g->outputs[k]) == mst_graph_root(g, v)) return true;
    return false;
}

bool mst_graph_has_views(const mst_graph *g, int v) {
    for (int w = 0; w < g->n_values; w++)
        if (g->values[w].kind == MST_GV_VIEW && g->values[w].view_of == v) return true;
    return false;
}

int mst_graph_last_use(const mst_graph *g, int v) {
    int root = mst_graph_root(g, v);
    if (mst_graph_is_output(g, v)) return g->n_nodes;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        if (mst_gnode_reads_root(g, n, root)) return i;
        for (int k = 0; k < n->n_out; k++)
            if (mst_graph_root(g, n->out[k]) == root) return i;
    }
    return -1;
}

bool mst_graph_value_private(const mst_graph *g, int v) {
    return g->values[v].kind == MST_GV_INTERMEDIATE && !mst_graph_is_output(g, v) && !mst_graph_has_views(g, v) &&
           !mst_graph_value_mutated(g, v);
}

bool mst_graph_read_elsewhere(const mst_graph *g, int v, int except) {
    for (int i = 0; i < g->n_nodes; i++)
        if (i != except && !g->nodes[i].dead && mst_gnode_reads_root(g, &g->nodes[i], v)) return true;
    return false;
}
