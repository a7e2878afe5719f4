/* layout.c — the nChw16c pass: which intermediates of a convolution chain lie in oneDNN's blocked
 * layout (runtime/layout.h), so no convolution reorders them in or out.
 *
 * Every node position that may hold an nChw16c value says so in its op descriptor (blocked_in,
 * blocked_out; blocked_tied: positions that take one layout together) or is an elementwise op on
 * operands of one shape (layout-blind, all positions tied). Values are grouped by these ties
 * (union-find), with a relu epilogue's value tied to its producer's output and an in-place output
 * to the input it overwrites; a group goes blocked when every value in it can (an f32 or i32
 * intermediate of four dims whose channels are a multiple of 16, private to the graph: not an
 * output, viewed or updated in place; bf16 data too, O2's activations), every position touching it
 * allows it, it holds a data value (not only pooling indices), and the bytes it saves at positions
 * whose kernel would reorder a plain value (oneDNN's blocked kernels, MST_BLOCKED_REORDERS) are at
 * least the bytes it costs at positions whose kernel runs on plain copies (another provider's
 * convolution, MST_BLOCKED_COPIES); the caller's how_blocked says which, per node. Anything else
 * stays plain, so a kernel that cannot read the layout never sees it; the convolutions' positions
 * are not tied, so a chain's edges (the image, the weights' gradients) stay plain and oneDNN
 * reorders only there. Runs after the other passes (fused groups are final).
 */
#include <stdlib.h>

#include "runtime/graph/passes.h"
#include "runtime/layout.h"

typedef struct {
    int *parent;
    bool *plain;        /* the root's group must stay plain */
    double *saved;      /* per value, summed per root after the ties: bytes a blocked group saves (reorders
                           at oneDNN's blocked kernels) and costs (plain copies at other providers) */
    double *copied;
} groups;

static int find(groups *G, int v) {
    while (G->parent[v] != v) v = G->parent[v] = G->parent[G->parent[v]];
    return v;
}

static void tie(groups *G, int a, int b) {
    int ra = find(G, a), rb = find(G, b);
    if (ra == rb) return;
    G->parent[rb] = ra;
    G->plain[ra] |= G->plain[rb];
}

static void keep_plain(groups *G, int v) { G->plain[find(G, v)] = true; }

static bool same_shape(const mst_gvalue *a, const mst_gvalue *b) {
    return a->ndim == b->ndim && mst_shape_equal(a->ndim, a->shape, b->ndim, b->shape);
}

/* An elementwise node (or fused group): its values tie together when they all have its first
 * output's shape; a broadcast operand keeps everything plain. */
static void tie_elementwise(const mst_graph *g, groups *G, const mst_gnode *n) {
    const mst_gvalue *o = &g->values[n->out[0]];
    bool one_shape = true;
    for (int i = 0; i < n->n_in; i++) one_shape &= same_shape(&g->values[n->in[i]], o);
    for (int k = 0; k < n->n_out; k++) one_shape &= same_shape(&g->values[n->out[k]], o);
    for (int i = 0; i < n->n_in; i++) {
        if (one_shape) tie(G, n->out[0], n->in[i]);
        else keep_plain(G, n->in[i]);
    }
    for (int k = 0; k < n->n_out; k++) {
        if (one_shape) tie(G, n->out[0], n->out[k]);
        else keep_plain(G, n->out[k]);
    }
}

/* An op node: positions outside its descriptor's bits stay plain; tied ones join one group. Where
 * the kernel would run on plain copies (how MST_BLOCKED_COPIES), a blocked value there costs its
 * bytes; where a plain value would be reordered (MST_BLOCKED_REORDERS), a blocked one saves them. */
static void tie_op(const mst_graph *g, groups *G, const mst_gnode *n, mst_blocked_how how) {
    const mst_op_desc *d = mst_op_table[n->op];
    int first = -1;
    for (int pos = 0; pos < n->n_in + n->n_out; pos++) {
        bool in = pos < n->n_in;
        int v = in ? n->in[pos] : n->out[pos - n->n_in];
        uint32_t bits = in ? d->blocked_in : d->blocked_out;
        int bit = in ? pos : pos - n->n_in;
        if (!(bits >> bit & 1)) {
            keep_plain(G, v);
            continue;
        }
        double bytes = (double)mst_gvalue_bytes(&g->values[v]);
        if (how == MST_BLOCKED_COPIES) G->copied[v] += bytes;
        if (how == MST_BLOCKED_REORDERS) G->saved[v] += bytes;
        if (d->blocked_tied >> (in ? bit : MST_TIED_OUT + bit) & 1) {
            if (first < 0) first = v;
            else tie(G, first, v);
        }
    }
}

int mst_pass_blocked_layout(mst_graph *g, mst_node_blocked_how_fn how_blocked, void *arg) {
    size_t nv = (size_t)g->n_values;
    groups G = {malloc(nv * sizeof(int)), calloc(nv, sizeof(bool)), calloc(nv, sizeof(double)), calloc(nv, sizeof(double))};
    bool *has_data = calloc(nv, sizeof(bool));
    if (!G.parent || !G.plain || !G.saved || !G.copied || !has_data) {
        free(G.parent), free(G.plain), free(G.saved), free(G.copied), free(has_data);
        return 0;       /* no memory for the analysis: every value stays plain, which is always right */
    }
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x = &g->values[v];
        G.parent[v] = v;
        G.plain[v] = !mst_layout_blockable(x->dtype, x->ndim, x->shape) || !mst_graph_value_private(g, v);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        if (n->kind == MST_GN_FUSED_ELEM) tie_elementwise(g, &G, n);
        else if (n->kind == MST_GN_OP && (mst_op_table[n->op]->flags & MST_OPF_ELEMENTWISE) && n->n_out > 0) tie_elementwise(g, &G, n);
        else if (n->kind == MST_GN_OP) {
            const mst_op_desc *d = mst_op_table[n->op];
            tie_op(g, &G, n, (d->blocked_in | d->blocked_out) && how_blocked ? how_blocked(arg, g, n) : MST_BLOCKED_TAKES);
        }
        else {      /* fused optimizer updates: parameters and their gradients */
            for (int k = 0; k < n->n_in; k++) keep_plain(&G, n->in[k]);
            for (int k = 0; k < n->n_out; k++) keep_plain(&G, n->out[k]);
        }
        if (n->kind != MST_GN_OP) continue;
        if (n->relu_epilogue) tie(&G, n->out[0], n->relu_value);
        for (int k = 0; k < n->n_out; k++)
            if (n->inplace[k] >= 0) tie(&G, n->out[k], n->in[n->inplace[k]]);
    }
    for (int v = 0; v < g->n_values; v++) {
        int r = find(&G, v);
        if (g->values[v].dtype == MST_DTYPE_F32 || g->values[v].dtype == MST_DTYPE_BF16) has_data[r] = true;
        if (r != v) G.saved[r] += G.saved[v], G.copied[r] += G.copied[v];
    }
    int changed = 0;
    for (int v = 0; v < g->n_values; v++) {
        int r = find(&G, v);
        bool blocked = !G.plain[r] && has_data[r] && G.saved[r] >= G.copied[r];
        g->values[v].layout = blocked ? MST_LAYOUT_NCHW16C : MST_LAYOUT_PLAIN;
        changed += blocked;
    }
    free(G.parent), free(G.plain), free(G.saved), free(G.copied), free(has_data);
    return changed;
}
