/* slice_sum.c — a sum of slice gradients that tile an axis becomes one slice_grad_sum.
 *
 * Where a forward value is cut into windows along an axis (the attention's q, k and v out of one
 * projection), autograd accumulates their gradients as
 *     s1 = add(slice_grad(g2, start 2), slice_grad(g1, start 1))
 *     s2 = add(s1, slice_grad(g0, start 0))
 * which zero-fills the whole tensor once per window and then reads and writes it once per add.
 * When the windows tile the axis exactly (each element lies in one window), every element of the
 * sum is that window's value plus zeros, so the tree becomes
 *     s2 = slice_grad_sum(g0, g1, g2)
 * which writes each window once; its kernel adds +0 to each element as the chain does (-0 becomes
 * +0), so the bits are the chain's (runtime/ops/shape.c). Applies to f32/f64 trees of plain adds
 * (same shape in and out, no epilogue) whose inner sums and slice gradients have no other reader,
 * no view and no in-place update and are not outputs, and whose windows' values are never updated
 * in place (they are now read at the root); the root's value keeps its readers. Runs
 * before elementwise fusion, which would otherwise take the adds.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/graph/passes.h"
#include "runtime/tensor.h"

enum { k_max_windows = MST_MAX_OP_INPUTS };

typedef struct {
    int node;           /* the slice_grad node */
    int64_t start, length;
} window;

typedef struct {
    window w[k_max_windows];
    int n_windows;
    int adds[k_max_windows];    /* the tree's inner add nodes (the root excluded) */
    int n_adds;
    int axis;
    int64_t full;
} tree;

static bool same_shape(const mst_gvalue *a, const mst_gvalue *b) {
    return a->dtype == b->dtype && mst_shape_equal(a->ndim, a->shape, b->ndim, b->shape);
}

/* A plain add of two operands of its output's shape. */
static bool plain_add(const mst_graph *g, const mst_gnode *n) {
    return n->kind == MST_GN_OP && n->op == MST_OP_ADD && !n->relu_epilogue && n->n_in == 2 && n->n_out == 1 &&
           same_shape(&g->values[n->in[0]], &g->values[n->out[0]]) && same_shape(&g->values[n->in[1]], &g->values[n->out[0]]);
}

/* Value v (read by node `reader` alone) as part of the tree: a slice gradient (a window) or an inner
 * add whose operands are parts too. */
static bool collect(const mst_graph *g, int v, int reader, tree *t) {
    if (!mst_graph_value_private(g, v) || mst_graph_read_elsewhere(g, v, reader)) return false;
    int p = mst_graph_producer(g, v);
    if (p < 0) return false;
    const mst_gnode *n = &g->nodes[p];
    if (n->kind == MST_GN_OP && n->op == MST_OP_SLICE_GRAD && n->n_out == 1 && n->out[0] == v && !n->relu_epilogue) {
        const mst_gvalue *x = &g->values[n->in[0]];
        int axis = (int)n->attrs.i[0] < 0 ? (int)n->attrs.i[0] + x->ndim : (int)n->attrs.i[0];
        if (t->n_windows == k_max_windows || axis < 0 || axis >= x->ndim) return false;
        if (t->n_windows == 0) {
            t->axis = axis;
            t->full = n->attrs.i[2];
        } else if (axis != t->axis || n->attrs.i[2] != t->full) {
            return false;
        }
        t->w[t->n_windows++] = (window){.node = p, .start = n->attrs.i[1], .length = x->shape[axis]};
        return true;
    }
    if (!plain_add(g, n) || n->out[0] != v || t->n_adds == k_max_windows) return false;
    t->adds[t->n_adds++] = p;
    return collect(g, n->in[0], p, t) && collect(g, n->in[1], p, t);
}

static int by_start(const void *a, const void *b) {
    int64_t x = ((const window *)a)->start, y = ((const window *)b)->start;
    return (x > y) - (x < y);
}

/* The windows, sorted, cover [0, full) with no gap or overlap. */
static bool tiles(tree *t) {
    qsort(t->w, (size_t)t->n_windows, sizeof(window), by_start);
    int64_t at = 0;
    for (int k = 0; k < t->n_windows; k++) {
        if (t->w[k].start != at) return false;
        at += t->w[k].length;
    }
    return at == t->full;
}

int mst_pass_slice_grad_sums(mst_graph *g) {
    int rewritten = 0;
    for (int r = g->n_nodes - 1; r >= 0; r--) {     /* from the end: a tree's root comes before its parts */
        mst_gnode *root = &g->nodes[r];
        if (root->dead || !plain_add(g, root)) continue;
        mst_dtype dt = g->values[root->out[0]].dtype;
        if (dt != MST_DTYPE_F32 && dt != MST_DTYPE_F64) continue;
        tree t = {0};
        if (!collect(g, root->in[0], r, &t) || !collect(g, root->in[1], r, &t) || !tiles(&t)) continue;
        bool moved_read_safe = true;        /* the windows' values are read at the root now, later than before */
        for (int k = 0; k < t.n_windows; k++)
            moved_read_safe &= !mst_graph_value_mutated(g, g->nodes[t.w[k].node].in[0]);
        if (!moved_read_safe) continue;
        int *in = malloc((size_t)t.n_windows * sizeof(int));
        if (!in) continue;                  /* out of memory: leave the adds as they are */
        for (int k = 0; k < t.n_windows; k++) {
            in[k] = g->nodes[t.w[k].node].in[0];
            g->nodes[t.w[k].node].dead = true;
        }
        for (int k = 0; k < t.n_adds; k++) g->nodes[t.adds[k]].dead = true;
        free(root->in);
        root->in = in;
        root->n_in = t.n_windows;
        root->op = MST_OP_SLICE_GRAD_SUM;
        memset(&root->attrs, 0, sizeof(root->attrs));
        root->attrs.i[0] = t.axis;
        root->mutates = 0;
        root->inplace[0] = -1;
        rewritten++;
    }
    mst_graph_compact(g);
    return rewritten;
}
