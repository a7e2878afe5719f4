/* fuse_optim.c — one fused node for an optimizer's updates over all parameters.
 *
 * Updates are the ops whose descriptor says MST_OPF_PARAM_UPDATE; they group by op and
 * attributes, ignoring the slot the descriptor names as the parameter's index (each update of one
 * optimizer differs only there), so the pass needs no knowledge of SGD or Adam. The fused node
 * runs where the group's last update was, as one profiler range; the executor splits the elements
 * of all its parameters evenly over the pool when that measured faster (exec.c). A group
 * closes when something between two of its updates reads or updates what the group updates, or
 * updates what it reads (moving the earlier updates later would change what that node sees).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/graph/passes.h"

static bool is_update(const mst_gnode *n) {
    return !n->dead && n->kind == MST_GN_OP && (mst_op_table[n->op]->flags & MST_OPF_PARAM_UPDATE);
}

static bool same_key(const mst_gnode *a, const mst_gnode *b) {
    if (a->op != b->op || a->n_in != b->n_in) return false;
    const mst_op_desc *d = mst_op_table[a->op];
    for (int k = 0; k < MST_MAX_ATTR_I; k++) {
        if (k != d->param_index_attr - 1 && a->attrs.i[k] != b->attrs.i[k]) return false;
    }
    return memcmp(a->attrs.f, b->attrs.f, sizeof(a->attrs.f)) == 0;
}

/* Can updates m (already in the group) run later, at node `to`? */
static bool can_move(const mst_graph *g, const int *members, int n_members, int to) {
    for (int k = members[0] + 1; k < to; k++) {
        const mst_gnode *b = &g->nodes[k];
        bool member = false;
        for (int m = 0; m < n_members; m++) member |= members[m] == k;
        if (b->dead || member) continue;
        for (int m = 0; m < n_members; m++) {
            if (members[m] > k) break;
            const mst_gnode *u = &g->nodes[members[m]];
            for (int i = 0; i < u->n_in; i++) {
                int r = mst_graph_root(g, u->in[i]);
                if ((u->mutates >> i & 1) && mst_gnode_reads_root(g, b, r)) return false;
                if (mst_gnode_mutates_root(g, b, r)) return false;
            }
        }
    }
    return true;
}

static void build(mst_graph *g, const int *members, int n) {
    int cap = 0;
    for (int m = 0; m < n; m++) cap += g->nodes[members[m]].n_in;
    int *in = malloc((size_t)cap * sizeof(int));
    MST_ASSERT(in);
    int n_in = 0;
    for (int m = 0; m < n; m++) {
        const mst_gnode *u = &g->nodes[members[m]];
        for (int i = 0; i < u->n_in; i++) {
            bool seen = false;
            for (int k = 0; k < n_in; k++) seen |= in[k] == u->in[i];
            if (!seen) in[n_in++] = u->in[i];
        }
    }
    int last = members[n - 1];
    mst_gnode f;
    memset(&f, 0, sizeof(f));
    f.kind = MST_GN_FUSED_OPTIM;
    f.op = g->nodes[last].op;
    f.attrs = g->nodes[last].attrs;
    f.trace_index = g->nodes[last].trace_index;
    f.n_in = n_in;
    f.in = in;
    f.out = malloc(sizeof(int));
    MST_ASSERT(f.out);
    f.relu_value = -1;
    for (int k = 0; k < MST_MAX_OP_OUTPUTS; k++) f.inplace[k] = -1;
    f.members = malloc((size_t)n * sizeof(mst_gnode));
    MST_ASSERT(f.members);
    f.n_members = n;
    for (int m = 0; m < n; m++) {
        f.members[m] = g->nodes[members[m]];
        g->nodes[members[m]].in = g->nodes[members[m]].out = NULL;
        g->nodes[members[m]].dead = true;
    }
    g->nodes[last] = f;
}

int mst_pass_fuse_optimizer(mst_graph *g) {
    int *members = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
    MST_ASSERT(members);
    int fused = 0;
    for (int start = 0; start < g->n_nodes; start++) {
        if (!is_update(&g->nodes[start])) continue;
        int n = 0;
        members[n++] = start;
        for (int i = start + 1; i < g->n_nodes; i++) {
            if (!is_update(&g->nodes[i]) || !same_key(&g->nodes[start], &g->nodes[i])) continue;
            if (!can_move(g, members, n, i)) break;
            members[n++] = i;
        }
        if (n >= 2) {
            build(g, members, n);
            fused += n;
        }
    }
    free(members);
    mst_graph_compact(g);
    return fused;
}
