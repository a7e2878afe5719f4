/* epilogue.c — bias/normalization + ReLU epilogues.
 *
 * An op whose descriptor says MST_OPF_RELU_EPILOGUE (linear, conv2d, batchnorm) followed by relu: the relu runs in place on the producer's output
 * right after its kernel (one profiler range, no extra buffer). The backward's relu_grad(gy, x)
 * becomes relu_grad(gy, y): relu(x) > 0 exactly when x > 0 (NaN included: both false), so the
 * bits are unchanged and the pre-activation x dies at the relu instead of living until backward.
 * Applies only when x has no other reader, no view, no in-place update and is not an output, and
 * when x and y are counted under one memory category (they share a buffer, and a buffer is
 * counted under one category while live: plan.h).
 *
 * A relu whose producer has no epilogue (the residual add before a block's last relu) keeps its
 * own node, but the same rewrite applies on the same conditions but the category: x then dies at
 * the relu (inside an elementwise fusion, never written at all) instead of living until backward.
 * On the cnn at batch 64 that is two activations (64x32x14x14 and 64x64x7x7) of the arena and one
 * write of each a step.
 */
#include "runtime/graph/passes.h"

static bool producer_ok(const mst_gnode *p) {
    return p->kind == MST_GN_OP && !p->relu_epilogue && (mst_op_table[p->op]->flags & MST_OPF_RELU_EPILOGUE);
}

/* x's readers are the relu at index `relu` and relu_grad nodes reading it as their second input. */
static bool readers_ok(const mst_graph *g, int x, int relu) {
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead || i == relu || !mst_gnode_reads_root(g, n, x)) continue;
        if (n->kind != MST_GN_OP || n->op != MST_OP_RELU_GRAD || n->in[0] == x || n->in[1] != x) return false;
    }
    return true;
}

/* relu_grad(gy, x) after relu node i reads y = relu(x) instead; returns how many were rewritten. */
static int grads_read_output(mst_graph *g, int i, int x, int y) {
    int rewritten = 0;
    for (int j = i + 1; j < g->n_nodes; j++) {
        mst_gnode *r = &g->nodes[j];
        if (!r->dead && r->kind == MST_GN_OP && r->op == MST_OP_RELU_GRAD && r->in[1] == x) {
            r->in[1] = y;
            rewritten++;
        }
    }
    return rewritten;
}

int mst_pass_relu_epilogue(mst_graph *g, int *grads_from_output) {
    int fused = 0, from_y = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mst_gnode *n = &g->nodes[i];
        if (n->dead || n->kind != MST_GN_OP || n->op != MST_OP_RELU) continue;
        int x = n->in[0], y = n->out[0];
        if (!mst_graph_value_private(g, x) || mst_graph_value_mutated(g, y) || !readers_ok(g, x, i)) continue;
        int pi = mst_graph_producer(g, x);
        if (pi < 0 || !producer_ok(&g->nodes[pi]) || g->nodes[pi].out[0] != x || g->values[x].cat != g->values[y].cat) {
            from_y += grads_read_output(g, i, x, y);    /* the relu stays; its input dies at it */
            continue;
        }
        grads_read_output(g, i, x, y);
        g->nodes[pi].relu_epilogue = true;
        g->nodes[pi].relu_value = y;
        n->dead = true;
        fused++;
    }
    mst_graph_compact(g);
    if (grads_from_output) *grads_from_output = from_y;
    return fused;
}
