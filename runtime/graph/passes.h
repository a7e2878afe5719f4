/* passes.h — graph-mode rewrites over the IR (runtime/graph/ir.h), one file each.
 *
 * Every pass keeps program-order semantics: a rewrite never moves a read past an in-place update
 * of what it reads, never merges or drops random or mutating work that is needed, and never
 * changes bits except where fusion would reassociate (it does not: fused loops run the same
 * per-element expressions in the same order). Each returns how many nodes it changed.
 *
 *     mst_pass_stats st;
 *     mst_graph_optimize(g, &st);      // all of them, in the order below
 */
#ifndef MST_RUNTIME_GRAPH_PASSES_H
#define MST_RUNTIME_GRAPH_PASSES_H

#include "runtime/graph/ir.h"
#include "runtime/layout.h"

/* dce.c: drop nodes whose results nobody needs; keeps nodes that update persistent or input
 * values, feed outputs, or update a value a kept node reads. */
int mst_pass_dce(mst_graph *g);
/* cse.c: merge nodes with the same op, attributes and inputs; never random or mutating nodes,
 * never nodes reading or producing a value that is updated anywhere. */
int mst_pass_cse(mst_graph *g);
/* cast_fold.c: cast to the same dtype = identity; cast A->B->A with B wider = identity. */
int mst_pass_fold_casts(mst_graph *g);
/* epilogue.c: linear/conv2d/batchnorm followed by relu: the relu runs in place on the producer's
 * output, relu_grad(gy, x) becomes relu_grad(gy, y), and the pre-activation x dies there; after
 * any other relu the relu_grads read y too (*grads_from_output counts them; may be NULL). */
int mst_pass_relu_epilogue(mst_graph *g, int *grads_from_output);
/* fuse_pool_relu.c: relu_grad(maxpool2d_grad(gy, indices), y) over maxpool2d(y) becomes one
 * maxpool2d_grad that also reads the pooled values. */
int mst_pass_fuse_pool_relu(mst_graph *g);
/* fuse_pool_bn.c: batchnorm_grad(maxpool2d_grad(gy, indices[, pooled]), ...) becomes one
 * batchnorm_grad in its pooled form, which never writes the pooling's gradient out (f32). */
int mst_pass_fuse_pool_bn(mst_graph *g);
/* fuse_bn_pool.c: maxpool2d(batchnorm(x, ...)) becomes one batchnorm_maxpool, which never writes
 * batch norm's output out (f32, nothing else reading it). */
int mst_pass_fuse_bn_pool(mst_graph *g);
/* slice_sum.c: an add tree of slice_grads whose windows tile an axis becomes one slice_grad_sum. */
int mst_pass_slice_grad_sums(mst_graph *g);
/* fuse.c: chains of f32 elementwise ops with the same output shape become one loop. */
int mst_pass_fuse_elementwise(mst_graph *g);
/* fuse_optim.c: the updates of one optimizer (same op, same attributes but the parameter index)
 * become one fused node. */
int mst_pass_fuse_optimizer(mst_graph *g);
/* inplace.c: an elementwise op (or fused group) writes over an input that dies there. */
int mst_pass_inplace(mst_graph *g);
/* layout.c: the intermediates of convolution chains whose every reader and writer can take
 * oneDNN's nChw16c get it (mst_gvalue.layout), so no convolution reorders them. how_blocked(arg,
 * g, n) says how op node n's kernel meets the layout (NULL: as if every node whose descriptor
 * allows it took it). Last, and only where the kernels are the fast ones with oneDNN
 * (mst_layout_blocked_allowed); returns how many values it put in nChw16c. */
typedef mst_blocked_how (*mst_node_blocked_how_fn)(void *arg, const mst_graph *g, const mst_gnode *n);
int mst_pass_blocked_layout(mst_graph *g, mst_node_blocked_how_fn how_blocked, void *arg);

typedef struct {
    int dce, cse, casts, epilogues, relu_grads_from_output, fused_pool_relu, fused_pool_bn, fused_bn_pool, slice_sums, fused_elem,
        fused_optim, inplace;
} mst_pass_stats;

/* Fusion passes a caller may leave out (mst_graph_options.skip_passes); none changes the bits. */
enum { MST_PASS_EPILOGUE = 1u << 0, MST_PASS_FUSE_ELEM = 1u << 1, MST_PASS_FUSE_OPTIM = 1u << 2,
       MST_PASS_FUSE_POOL_RELU = 1u << 3, MST_PASS_BLOCKED_LAYOUT = 1u << 4, MST_PASS_SLICE_SUM = 1u << 5,
       MST_PASS_FUSE_POOL_BN = 1u << 6, MST_PASS_FUSE_BN_POOL = 1u << 7 };

void mst_graph_optimize(mst_graph *g, mst_pass_stats *st);
/* The same, leaving out the passes in skip (MST_PASS_* bits). */
void mst_graph_optimize_skipping(mst_graph *g, unsigned skip, mst_pass_stats *st);

/* ---- helpers shared by the passes (passes.c) ---- */
/* Replace every read of value `from` by `to` in live nodes at index >= start and in the outputs. */
void mst_graph_replace_uses(mst_graph *g, int from, int to, int start);
/* Index of the live node producing v (its out[] or relu_value); -1 for non-intermediates. */
int  mst_graph_producer(const mst_graph *g, int v);
/* Does live node n read value v (or a view of v, or v's base)? Counts fused members' reads. */
bool mst_gnode_reads_root(const mst_graph *g, const mst_gnode *n, int root);
/* Index of the last live node touching v's storage (read, update or definition); n_nodes for
 * graph outputs (they live to the end); -1 if nothing does. */
int  mst_graph_last_use(const mst_graph *g, int v);
bool mst_graph_is_output(const mst_graph *g, int v);
/* Does any value view v? */
bool mst_graph_has_views(const mst_graph *g, int v);
/* Is v an intermediate a pass may rewrite freely: not an output, no views, not updated in place? */
bool mst_graph_value_private(const mst_graph *g, int v);
/* Does a live node other than the one at index `except` read v (or its storage)? */
bool mst_graph_read_elsewhere(const mst_graph *g, int v, int except);

#endif
