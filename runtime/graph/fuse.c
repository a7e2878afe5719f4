/* fuse.c — elementwise fusion: chains of elementwise ops (add, mul, relu, relu_grad, ...) on f32,
 * f16 or bf16 values with one output shape become one node that the executor runs as one blocked
 * loop, composed from the op table's per-op block functions (mst_op_desc.elem_f32), not from
 * hand-written patterns; half values are widened per block and rounded where eager would store
 * them (exec.c), so amp O1-O3 steps fuse too. Values used only inside a group never get memory.
 *
 * A group runs where its last member was. A node joins a group that produces one of its inputs
 * when nothing between the group's last member and it reads a value the group makes (it would
 * be computed too late) or updates a value the group reads (the group would read it too late).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/graph/passes.h"

typedef struct {
    int *idx;           /* member node indices, in order */
    int n, cap;
    bool closed;
} group;

/* f32, or a half type the executor widens per block */
static bool fusable_dtype(mst_dtype dt) { return dt == MST_DTYPE_F32 || dt == MST_DTYPE_F16 || dt == MST_DTYPE_BF16; }

static bool eligible(const mst_graph *g, const mst_gnode *n) {
    if (n->dead || n->kind != MST_GN_OP || n->n_out != 1 || n->mutates || n->relu_epilogue) return false;
    const mst_op_desc *d = mst_op_table[n->op];
    if (!(d->flags & MST_OPF_ELEMENTWISE) || !d->elem_f32) return false;
    const mst_gvalue *o = &g->values[n->out[0]];
    if (o->kind != MST_GV_INTERMEDIATE || !fusable_dtype(o->dtype)) return false;
    for (int i = 0; i < n->n_in; i++)
        if (!fusable_dtype(g->values[n->in[i]].dtype)) return false;
    return !mst_graph_value_mutated(g, n->out[0]);
}

static bool in_group(const group *G, int i) {
    for (int k = 0; k < G->n; k++)
        if (G->idx[k] == i) return true;
    return false;
}

static bool same_shape(const mst_graph *g, int a, int b) {
    return mst_shape_equal(g->values[a].ndim, g->values[a].shape, g->values[b].ndim, g->values[b].shape);
}

/* May the group's work move from its last member to node `to`? */
static bool can_extend(const mst_graph *g, const group *G, int to) {
    int last = G->idx[G->n - 1];
    for (int k = last + 1; k < to; k++) {
        const mst_gnode *b = &g->nodes[k];
        if (b->dead) continue;
        for (int m = 0; m < G->n; m++) {
            const mst_gnode *mem = &g->nodes[G->idx[m]];
            if (mst_gnode_reads_root(g, b, mst_graph_root(g, mem->out[0]))) return false;
            for (int i = 0; i < mem->n_in; i++)
                if (mst_gnode_mutates_root(g, b, mst_graph_root(g, mem->in[i]))) return false;
        }
    }
    return true;
}

static void group_add(group *G, int i) {
    if (G->n == G->cap) {
        G->cap = G->cap ? 2 * G->cap : 8;
        G->idx = realloc(G->idx, (size_t)G->cap * sizeof(int));
        MST_ASSERT(G->idx);
    }
    G->idx[G->n++] = i;
}

static void push_unique(int *a, int *n, int v) {
    for (int k = 0; k < *n; k++)
        if (a[k] == v) return;
    a[(*n)++] = v;
}

/* Is v (made by a member) needed outside the group? */
static bool used_outside(const mst_graph *g, const group *G, int v) {
    if (mst_graph_is_output(g, v) || mst_graph_has_views(g, v)) return true;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !in_group(G, i) && mst_gnode_reads_root(g, &g->nodes[i], v)) return true;
    return false;
}

static void build(mst_graph *g, const group *G) {
    int cap = 0;
    for (int m = 0; m < G->n; m++) cap += g->nodes[G->idx[m]].n_in + 1;
    int *ext = malloc((size_t)cap * sizeof(int)), *outs = malloc((size_t)cap * sizeof(int));
    int *made = malloc((size_t)cap * sizeof(int));
    MST_ASSERT(ext && outs && made);
    int n_ext = 0, n_outs = 0, n_made = 0;
    for (int m = 0; m < G->n; m++) {
        const mst_gnode *mem = &g->nodes[G->idx[m]];
        for (int i = 0; i < mem->n_in; i++) {
            bool internal = false;
            for (int k = 0; k < n_made; k++) internal |= made[k] == mem->in[i];
            if (!internal) push_unique(ext, &n_ext, mem->in[i]);
        }
        made[n_made++] = mem->out[0];
    }
    for (int k = 0; k < n_made; k++)
        if (used_outside(g, G, made[k])) outs[n_outs++] = made[k];

    mst_gnode f;
    memset(&f, 0, sizeof(f));
    f.kind = MST_GN_FUSED_ELEM;
    int last = G->idx[G->n - 1];
    f.op = g->nodes[last].op;
    f.trace_index = g->nodes[last].trace_index;
    f.n_in = n_ext;
    f.in = ext;
    f.n_out = n_outs;
    f.out = outs;
    f.relu_value = -1;
    for (int k = 0; k < MST_MAX_OP_OUTPUTS; k++) f.inplace[k] = -1;
    f.members = malloc((size_t)G->n * sizeof(mst_gnode));
    MST_ASSERT(f.members);
    f.n_members = G->n;
    for (int m = 0; m < G->n; m++) {
        f.members[m] = g->nodes[G->idx[m]];      /* takes over its in/out arrays */
        g->nodes[G->idx[m]].in = g->nodes[G->idx[m]].out = NULL;
        g->nodes[G->idx[m]].dead = true;
    }
    g->nodes[last] = f;
    free(made);
}

int mst_pass_fuse_elementwise(mst_graph *g) {
    group *groups = calloc((size_t)g->n_nodes + 1, sizeof(group));
    int *group_of = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
    MST_ASSERT(groups && group_of);
    int n_groups = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        group_of[i] = -1;
        const mst_gnode *n = &g->nodes[i];
        if (!eligible(g, n)) continue;
        int join = -1;
        for (int j = 0; j < n->n_in && join < 0; j++) {
            int p = mst_graph_producer(g, n->in[j]);
            if (p < 0 || group_of[p] < 0) continue;
            group *G = &groups[group_of[p]];
            if (same_shape(g, g->nodes[G->idx[0]].out[0], n->out[0]) && can_extend(g, G, i)) join = group_of[p];
        }
        if (join < 0) join = n_groups++;
        group_add(&groups[join], i);
        group_of[i] = join;
    }
    int fused = 0;
    for (int k = 0; k < n_groups; k++) {
        if (groups[k].n >= 2) {
            build(g, &groups[k]);
            fused += groups[k].n;
        }
        free(groups[k].idx);
    }
    free(groups);
    free(group_of);
    mst_graph_compact(g);
    return fused;
}
