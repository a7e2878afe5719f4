/* test_graph_passes.c — each graph pass on small hand-built graphs (before/after node lists),
 * fused vs unfused execution bit for bit, and the memory planner: no two buffers live at the same
 * time overlap, checked independently of the planner's own validator on random graphs that are
 * also executed and compared with eager mode. Seeded; the seed is printed on failure. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/graph/exec.h"
#include "runtime/graph/passes.h"
#include "runtime/graph/plan.h"
#include "runtime/graph/trace.h"
#include "runtime/ops.h"
#include "runtime/rng.h"

static int val(mst_graph *g, mst_gvalue_kind k, mst_dtype dt, int64_t rows, int64_t cols) {
    return mst_graph_add_value(g, k, dt, 2, (int64_t[]){rows, cols});
}

static int node1(mst_graph *g, mst_op op, const mst_attrs *a, int n_in, const int *in, int out) {
    return mst_graph_add_node(g, op, a, n_in, in, 1, &out);
}

static bool has_op(const mst_graph *g, mst_op op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].kind == MST_GN_OP && g->nodes[i].op == op) return true;
    return false;
}

static mst_graph *input_graph(int *x) {
    mst_graph *g = mst_graph_new("t");
    *x = val(g, MST_GV_INPUT, MST_DTYPE_F32, 4, 8);
    g->values[*x].input_index = 0;
    g->n_inputs = 1;
    return g;
}

static void test_dce(void **state) {
    (void)state;
    int x;
    mst_graph *g = input_graph(&x);
    int a = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), b = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    node1(g, MST_OP_RELU, NULL, 1, &x, a);                       /* dead: nobody reads a */
    node1(g, MST_OP_TANH, NULL, 1, &x, b);
    mst_graph_add_output(g, b);
    assert_int_equal(mst_pass_dce(g), 1);
    assert_int_equal(g->n_nodes, 1);
    assert_false(has_op(g, MST_OP_RELU));
    mst_graph_free(g);
}

static void test_cse(void **state) {
    (void)state;
    int x;
    mst_graph *g = input_graph(&x);
    int a = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), b = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    int c = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), d1 = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    int m1 = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), d2 = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    int m2 = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), s = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    node1(g, MST_OP_RELU, NULL, 1, &x, a);
    node1(g, MST_OP_RELU, NULL, 1, &x, b);                       /* same as a */
    node1(g, MST_OP_ADD, NULL, 2, (int[]){a, b}, c);
    mst_attrs seed = {.i = {7}, .f = {0.5}};
    mst_graph_add_node(g, MST_OP_DROPOUT, &seed, 1, &c, 2, (int[]){d1, m1});
    mst_graph_add_node(g, MST_OP_DROPOUT, &seed, 1, &c, 2, (int[]){d2, m2});   /* random: never merged */
    node1(g, MST_OP_ADD, NULL, 2, (int[]){d1, d2}, s);
    mst_graph_add_output(g, s);
    assert_int_equal(mst_pass_cse(g), 1);
    assert_int_equal(g->n_nodes, 5);
    assert_int_equal(g->nodes[1].in[0], a);                     /* add(a, a) now */
    assert_int_equal(g->nodes[1].in[1], a);
    mst_graph_free(g);
}

static void test_cast_fold(void **state) {
    (void)state;
    mst_graph *g = mst_graph_new("casts");
    int h = mst_graph_add_value(g, MST_GV_INPUT, MST_DTYPE_F16, 1, (int64_t[]){8});
    int f = val(g, MST_GV_INPUT, MST_DTYPE_F32, 1, 8);
    g->values[h].input_index = 0;
    g->values[f].input_index = 1;
    g->n_inputs = 2;
    int h32 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 1, (int64_t[]){8});
    int h16 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F16, 1, (int64_t[]){8});
    int f16 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F16, 1, (int64_t[]){8});
    int f32 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 1, (int64_t[]){8});
    int same = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 1, (int64_t[]){8});
    node1(g, MST_OP_CAST, &(mst_attrs){.i = {MST_DTYPE_F32}}, 1, &h, h32);   /* f16 -> f32 -> f16: exact, folds */
    node1(g, MST_OP_CAST, &(mst_attrs){.i = {MST_DTYPE_F16}}, 1, &h32, h16);
    node1(g, MST_OP_CAST, &(mst_attrs){.i = {MST_DTYPE_F16}}, 1, &f, f16);   /* f32 -> f16 -> f32: rounds, stays */
    node1(g, MST_OP_CAST, &(mst_attrs){.i = {MST_DTYPE_F32}}, 1, &f16, f32);
    node1(g, MST_OP_CAST, &(mst_attrs){.i = {MST_DTYPE_F32}}, 1, &f32, same); /* to its own dtype: identity */
    mst_graph_add_output(g, h16);
    mst_graph_add_output(g, same);
    assert_int_equal(mst_pass_fold_casts(g), 2);
    assert_int_equal(g->outputs[0], h);
    assert_int_equal(g->outputs[1], f32);
    mst_pass_dce(g);
    assert_int_equal(g->n_nodes, 2);                            /* the narrowing round trip */
    mst_graph_free(g);
}

/* linear -> relu -> ... relu_grad(gy, pre): relu becomes the epilogue, relu_grad reads y. */
static void test_relu_epilogue(void **state) {
    (void)state;
    int x;
    mst_graph *g = input_graph(&x);
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    mst_tensor *w = mst_param_new(ctx, "w", MST_DTYPE_F32, 2, (int64_t[]){6, 8});
    int wv = val(g, MST_GV_PERSISTENT, MST_DTYPE_F32, 6, 8);
    g->values[wv].tensor = mst_tensor_retain(w);
    int pre = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 6), y = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 6);
    int gx = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 6);
    node1(g, MST_OP_LINEAR, NULL, 2, (int[]){x, wv}, pre);
    node1(g, MST_OP_RELU, NULL, 1, &pre, y);
    node1(g, MST_OP_RELU_GRAD, NULL, 2, (int[]){y, pre}, gx);
    mst_graph_add_output(g, gx);
    int from_y = -1;
    assert_int_equal(mst_pass_relu_epilogue(g, &from_y), 1);
    assert_int_equal(from_y, 0);
    assert_int_equal(g->n_nodes, 2);
    assert_true(g->nodes[0].relu_epilogue);
    assert_int_equal(g->nodes[0].relu_value, y);
    assert_int_equal(g->nodes[1].in[1], y);
    mst_graph_plan p;
    mst_graph_plan_build(g, &p);
    assert_int_equal(p.offset[pre], p.offset[y]);                /* one buffer */
    mst_graph_plan_free(&p);
    mst_graph_free(g);
    mst_tensor_release(w);
    mst_ctx_free(ctx);
}

/* add -> relu (a residual block's end: add has no epilogue) ... relu_grad(gy, pre): the relu stays
 * a node of its own, but relu_grad reads its output, so pre dies at the relu (its buffer free for
 * others from there); with a second reader of pre, nothing changes. */
static void test_relu_grad_reads_output(void **state) {
    (void)state;
    for (int other_reader = 0; other_reader < 2; other_reader++) {
        int x;
        mst_graph *g = input_graph(&x);
        int pre = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), y = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
        int gx = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), s = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
        node1(g, MST_OP_ADD, NULL, 2, (int[]){x, x}, pre);
        node1(g, MST_OP_RELU, NULL, 1, &pre, y);
        node1(g, MST_OP_RELU_GRAD, NULL, 2, (int[]){y, pre}, gx);
        mst_graph_add_output(g, gx);
        if (other_reader) {
            node1(g, MST_OP_SCALE, &(mst_attrs){.f = {2.0}}, 1, &pre, s);
            mst_graph_add_output(g, s);
        }
        int from_y = -1;
        assert_int_equal(mst_pass_relu_epilogue(g, &from_y), 0);
        assert_int_equal(from_y, other_reader ? 0 : 1);
        assert_int_equal(g->n_nodes, other_reader ? 4 : 3);
        assert_int_equal(g->nodes[1].op, MST_OP_RELU);
        assert_int_equal(g->nodes[2].in[1], other_reader ? pre : y);
        if (!other_reader) assert_int_equal(mst_graph_last_use(g, pre), 1);
        mst_graph_free(g);
    }
}

/* ---- tracing helpers: real graphs from small functions ---- */

typedef mst_tensor *(*fn1)(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed);

static mst_graph *trace_fn(mst_ctx *ctx, fn1 f, mst_tensor *const real_in[], int n_in, uint64_t seed) {
    mst_graph *g = mst_graph_new("traced");
    mst_tracer *tr = mst_tracer_new(ctx, g);
    mst_pool_push(ctx);
    mst_tensor *in[5];
    for (int i = 0; i < n_in; i++) {
        in[i] = mst_tensor_meta_new(ctx, real_in[i]->dtype, real_in[i]->ndim, real_in[i]->shape);
        mst_trace_bind_input(tr, in[i], i);
    }
    ctx->tracer = tr;
    mst_tensor *y = f(ctx, in, seed);
    assert_non_null(y);
    mst_graph_add_output(g, mst_trace_value_of(tr, y));
    mst_pool_pop(ctx);
    ctx->tracer = NULL;
    mst_tracer_free(tr);
    return g;
}

/* Executes g on in[]; returns a malloc'd copy of output 0. */
static float *exec_graph(mst_ctx *ctx, const mst_graph *g, mst_tensor *const in[], int n_in, int64_t *n) {
    mst_graph_plan p;
    mst_graph_plan_build(g, &p);
    assert_int_equal(mst_graph_plan_check(g, &p), 0);
    mst_graph_exec *ex = mst_graph_exec_new(ctx, g, &p, -1);
    assert_non_null(ex);
    assert_int_equal(mst_graph_exec_run(ex, in, n_in), MST_OK);
    mst_tensor *y = mst_graph_exec_value(ex, g->outputs[0]);
    *n = y->numel;
    float *copy = malloc(mst_tensor_nbytes(y));
    memcpy(copy, mst_tensor_data(y), mst_tensor_nbytes(y));
    mst_graph_exec_free(ex);
    mst_graph_plan_free(&p);
    return copy;
}

/* A rewritten graph's output (after) against the graph's before the rewrite and eager's, bit for
 * bit; frees both copies. */
static void expect_rewrite_bits(float *before, int64_t n_before, float *after, int64_t n_after, const mst_tensor *eager) {
    assert_int_equal(n_before, n_after);
    assert_memory_equal(before, after, (size_t)n_before * sizeof(float));
    assert_non_null(eager);
    assert_memory_equal(mst_tensor_data(eager), after, (size_t)n_before * sizeof(float));
    free(before);
    free(after);
}

/* bias-add, relu, mul, scale, sub with a broadcast row: one fused group. */
static mst_tensor *chain(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    (void)seed;
    mst_tensor *h = mst_relu(ctx, mst_add(ctx, in[0], in[1]));
    h = mst_scale(ctx, mst_mul(ctx, h, in[0]), 0.5);
    return mst_sub(ctx, mst_sigmoid(ctx, h), in[1]);
}

static void test_fusion_matches_unfused(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 2});
    mst_pool_push(ctx);
    mst_tensor *in[2] = {mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){300, 301}, 0, 1),
                         mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){301}, 0, 1)};
    mst_graph *g = trace_fn(ctx, chain, in, 2, 0);
    assert_int_equal(g->n_nodes, 6);
    int64_t n1, n2;
    float *unfused = exec_graph(ctx, g, in, 2, &n1);
    assert_int_equal(mst_pass_fuse_elementwise(g), 6);
    assert_int_equal(g->n_nodes, 1);
    assert_int_equal(g->nodes[0].kind, MST_GN_FUSED_ELEM);
    assert_int_equal(g->nodes[0].n_out, 1);                     /* intermediates stay inside */
    float *fused = exec_graph(ctx, g, in, 2, &n2);
    expect_rewrite_bits(unfused, n1, fused, n2, chain(ctx, in, 0));
    mst_graph_free(g);
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
}

/* The attention's q, k, v gradients: three windows of axis 0 summed as slice_grads in the order
 * autograd accumulates them. The pass turns the add tree into one slice_grad_sum whose output has
 * the chain's bits, -0 turned to +0 and NaN kept included (the unoptimized graph, the rewritten one
 * and eager agree); a gap in the windows, an extra reader of a window and an f16 tree stay as they
 * are. */
static mst_tensor *qkv_grads(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    (void)seed;
    static const int64_t starts[3] = {2, 1, 0};
    mst_tensor *s = NULL;
    for (int k = 0; k < 3; k++) {
        mst_tensor *w = mst_slice_grad(ctx, in[k], 0, starts[k], 3);
        s = s ? mst_add(ctx, s, w) : w;
    }
    return s;
}

/* add(add(slice_grad(x0), slice_grad(x1)), slice_grad(x2)) over windows of length 1 at starts[k] of
 * an axis of length full, each x (1, 64, 40); *w gets the slice_grads' values. */
static mst_graph *slice_sum_graph(mst_dtype dt, const int64_t starts[3], int64_t full, int w[3]) {
    mst_graph *g = mst_graph_new("slice sums");
    const int64_t part[3] = {1, 64, 40}, whole[3] = {full, 64, 40};
    for (int k = 0; k < 3; k++) {
        int x = mst_graph_add_value(g, MST_GV_INPUT, dt, 3, part);
        g->values[x].input_index = k;
        w[k] = mst_graph_add_value(g, MST_GV_INTERMEDIATE, dt, 3, whole);
        node1(g, MST_OP_SLICE_GRAD, &(mst_attrs){.i = {0, starts[k], full}}, 1, &x, w[k]);
    }
    g->n_inputs = 3;
    int s1 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, dt, 3, whole), s2 = mst_graph_add_value(g, MST_GV_INTERMEDIATE, dt, 3, whole);
    node1(g, MST_OP_ADD, NULL, 2, (int[]){w[0], w[1]}, s1);
    node1(g, MST_OP_ADD, NULL, 2, (int[]){s1, w[2]}, s2);
    mst_graph_add_output(g, s2);
    return g;
}

static void test_slice_grad_sum(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 2});
    mst_pool_push(ctx);
    const int64_t shape[3] = {1, 64, 40};
    mst_tensor *in[3];
    for (int k = 0; k < 3; k++) in[k] = mst_tensor_randn(ctx, MST_DTYPE_F32, 3, shape, 0, 1);
    mst_tensor_f32(in[0])[5] = -0.0f;
    mst_tensor_f32(in[1])[7] = -0.0f;
    mst_tensor_f32(in[2])[0] = -0.0f;
    mst_tensor_f32(in[1])[9] = NAN;
    mst_graph *g = trace_fn(ctx, qkv_grads, in, 3, 0);
    int64_t n1, n2;
    float *chain_bits = exec_graph(ctx, g, in, 3, &n1);
    assert_int_equal(mst_pass_slice_grad_sums(g), 1);
    assert_int_equal(g->n_nodes, 1);
    assert_int_equal(g->nodes[0].op, MST_OP_SLICE_GRAD_SUM);
    assert_int_equal(g->nodes[0].n_in, 3);
    float *sum_bits = exec_graph(ctx, g, in, 3, &n2);
    assert_int_equal(n1, n2);
    assert_int_equal(n1, 3 * 64 * 40);
    assert_memory_equal(chain_bits, sum_bits, (size_t)n1 * sizeof(float));
    mst_tensor *eager = qkv_grads(ctx, in, 0);
    assert_memory_equal(mst_tensor_data(eager), sum_bits, (size_t)n1 * sizeof(float));
    /* -0 + 0 is +0 in the chain, so in the sum too: window 2 holds in[0] */
    assert_false(signbit(sum_bits[2 * 64 * 40 + 5]));
    free(chain_bits);
    free(sum_bits);
    mst_graph_free(g);

    int w[3];
    /* a gap: windows 3, 1 and 2 of a length-4 axis */
    g = slice_sum_graph(MST_DTYPE_F32, (const int64_t[]){3, 1, 2}, 4, w);
    assert_int_equal(mst_pass_slice_grad_sums(g), 0);
    mst_graph_free(g);
    /* windows tiling 0..2, but window 1 also read by a relu */
    g = slice_sum_graph(MST_DTYPE_F32, (const int64_t[]){0, 1, 2}, 3, w);
    int extra = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 3, (int64_t[]){3, 64, 40});
    node1(g, MST_OP_RELU, NULL, 1, &w[1], extra);
    mst_graph_add_output(g, extra);
    assert_int_equal(mst_pass_slice_grad_sums(g), 0);
    mst_graph_free(g);
    /* the same without the relu tiles */
    g = slice_sum_graph(MST_DTYPE_F32, (const int64_t[]){0, 1, 2}, 3, w);
    assert_int_equal(mst_pass_slice_grad_sums(g), 1);
    mst_graph_free(g);
    /* f16: no slice_grad_sum kernel, the chain stays */
    g = slice_sum_graph(MST_DTYPE_F16, (const int64_t[]){0, 1, 2}, 3, w);
    assert_int_equal(mst_pass_slice_grad_sums(g), 0);
    mst_graph_free(g);
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
}

/* The same chain on bf16 and f16 operands (amp's half values): one fused group whose every member
 * rounds where eager's half kernel stores, so fused, unfused and eager agree bit for bit; a
 * broadcast half operand and a scalar one take the gather paths. */
static mst_tensor *half_chain(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    (void)seed;
    mst_tensor *h = mst_relu(ctx, mst_add(ctx, in[0], in[1]));
    h = mst_mul(ctx, mst_sub(ctx, h, in[2]), in[0]);
    return mst_relu_grad(ctx, h, mst_add(ctx, h, in[1]));
}

static void test_half_fusion_matches_eager(void **state) {
    (void)state;
    static const mst_dtype dts[] = {MST_DTYPE_BF16, MST_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 2});
        mst_pool_push(ctx);
        mst_dtype dt = dts[d];
        mst_tensor *in[3] = {mst_cast(ctx, mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){257, 300}, 0, 1), dt),
                             mst_cast(ctx, mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){300}, 0, 1), dt),
                             mst_cast(ctx, mst_tensor_randn(ctx, MST_DTYPE_F32, 0, (int64_t[]){0}, 0, 1), dt)};
        mst_graph *g = trace_fn(ctx, half_chain, in, 3, 0);
        int before = g->n_nodes;
        mst_tensor *eager = half_chain(ctx, in, 0);
        assert_int_equal(eager->dtype, dt);
        size_t bytes = mst_tensor_nbytes(eager);
        int64_t n1, n2;
        float *unfused = exec_graph(ctx, g, in, 3, &n1);
        assert_int_equal(mst_pass_fuse_elementwise(g), before);
        assert_int_equal(g->n_nodes, 1);
        assert_int_equal(g->nodes[0].kind, MST_GN_FUSED_ELEM);
        float *fused = exec_graph(ctx, g, in, 3, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(mst_tensor_data(eager), unfused, bytes);
        assert_memory_equal(mst_tensor_data(eager), fused, bytes);
        free(unfused);
        free(fused);
        mst_graph_free(g);
        mst_pool_pop(ctx);
        mst_ctx_free(ctx);
    }
}

/* maxpool2d(relu(x)) and its gradient into batch norm's: fuse_pool_bn folds the pooling gradient
 * into batchnorm_grad (7 inputs), and the graph gives the same bits before and after, and eager's;
 * with the pooling gradient also read by an add (seed 1), nothing changes. */
static mst_tensor *pool_bn_grad(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    mst_tensor *mp[2], *g[3];
    mst_attrs pa = {.i = {2, 2, 2, 2, 0, 0}}, ga = {.i = {8, 8}};
    if (mst_dispatch(ctx, MST_OP_MAXPOOL2D, 1, (mst_tensor *[]){mst_relu(ctx, in[0])}, &pa, mp) != MST_OK) return NULL;
    mst_tensor *gy = mst_scale(ctx, in[2], 0.5);
    mst_tensor *v = mst_dispatch1(ctx, MST_OP_MAXPOOL2D_GRAD, 3, (mst_tensor *[]){gy, mp[1], mp[0]}, &ga);
    if (mst_batchnorm_grad(ctx, v, in[0], in[1], in[3], in[3], true, g) != MST_OK) return NULL;
    return seed == 1 ? mst_add(ctx, g[0], v) : g[0];
}

static void test_pool_bn_fold(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 9, .n_threads = 2});
    mst_pool_push(ctx);
    mst_tensor *in[4] = {mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 16, 8, 8}, 0, 1),
                         mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}, 1, 0.3),
                         mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 16, 4, 4}, 0, 1),
                         mst_tensor_rand(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}, 0.5, 1.5)};
    for (uint64_t seed = 0; seed < 2; seed++) {
        mst_graph *g = trace_fn(ctx, pool_bn_grad, in, 4, seed);
        int64_t n1, n2;
        float *unfused = exec_graph(ctx, g, in, 4, &n1);
        int nodes = g->n_nodes;
        assert_int_equal(mst_pass_fuse_pool_bn(g), seed == 0 ? 1 : 0);
        assert_int_equal(g->n_nodes, seed == 0 ? nodes - 1 : nodes);
        assert_int_equal(has_op(g, MST_OP_MAXPOOL2D_GRAD), seed == 1);
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == MST_OP_BATCHNORM_GRAD) assert_int_equal(g->nodes[i].n_in, seed == 0 ? 7 : 5);
        float *fused = exec_graph(ctx, g, in, 4, &n2);
        expect_rewrite_bits(unfused, n1, fused, n2, pool_bn_grad(ctx, in, seed));
        mst_graph_free(g);
    }
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
}

/* maxpool2d(batchnorm(x)) with the relu between (seed 0, an epilogue by then) or without (seed 1):
 * fuse_bn_pool makes one batchnorm_maxpool, and the graph gives the same bits before and after, and
 * eager's; with batch norm's output also read by an add (seed 2), nothing changes. */
static mst_tensor *bn_pool(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    mst_tensor *mp[2];
    mst_attrs pa = {.i = {2, 2, 2, 2, 0, 0}};
    mst_tensor *y = mst_batchnorm(ctx, in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
    if (!y) return NULL;
    mst_tensor *r = seed == 0 ? mst_relu(ctx, y) : y;
    if (mst_dispatch(ctx, MST_OP_MAXPOOL2D, 1, (mst_tensor *[]){r}, &pa, mp) != MST_OK) return NULL;
    return seed == 2 ? mst_add(ctx, mst_sum(ctx, y, 1u << 2 | 1u << 3, false), mst_sum(ctx, mp[0], 1u << 2 | 1u << 3, false)) : mp[0];
}

static void test_bn_pool_fold(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 11, .n_threads = 2});
    mst_pool_push(ctx);
    mst_tensor *in[5] = {mst_tensor_randn(ctx, MST_DTYPE_F32, 4, (int64_t[]){2, 16, 8, 8}, 0.5, 1),
                         mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}, 1, 0.3),
                         mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}, 0, 0.3),
                         mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}),
                         mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){16}, 1.0)};
    for (uint64_t seed = 0; seed < 3; seed++) {
        mst_graph *g = trace_fn(ctx, bn_pool, in, 5, seed);
        int64_t n1, n2;
        float *unfused = exec_graph(ctx, g, in, 5, &n1);
        assert_int_equal(mst_pass_relu_epilogue(g, NULL), seed == 0 ? 1 : 0);
        int nodes = g->n_nodes;
        assert_int_equal(mst_pass_fuse_bn_pool(g), seed < 2 ? 1 : 0);
        assert_int_equal(g->n_nodes, seed < 2 ? nodes - 1 : nodes);
        assert_int_equal(has_op(g, MST_OP_BATCHNORM_MAXPOOL), seed < 2);
        assert_int_equal(has_op(g, MST_OP_MAXPOOL2D), seed == 2);
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == MST_OP_BATCHNORM_MAXPOOL) {
                assert_int_equal(g->nodes[i].n_out, 4);
                assert_int_equal(g->nodes[i].attrs.i[1], seed == 0);    /* the relu, in the kernel */
                assert_false(g->nodes[i].relu_epilogue);
            }
        float *fused = exec_graph(ctx, g, in, 5, &n2);
        expect_rewrite_bits(unfused, n1, fused, n2, bn_pool(ctx, in, seed));
        mst_graph_free(g);
    }
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
}

static void test_inplace(void **state) {
    (void)state;
    int x;
    mst_graph *g = input_graph(&x);
    int a = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8), b = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    int c = val(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 4, 8);
    node1(g, MST_OP_TANH, NULL, 1, &x, a);
    node1(g, MST_OP_RELU, NULL, 1, &a, b);                       /* a dies here: in place */
    node1(g, MST_OP_ADD, NULL, 2, (int[]){b, x}, c);             /* b dies here: in place; x is an input: never */
    mst_graph_add_output(g, c);
    assert_int_equal(mst_pass_inplace(g), 2);
    assert_int_equal(g->nodes[0].inplace[0], -1);
    assert_int_equal(g->nodes[1].inplace[0], 0);
    assert_int_equal(g->nodes[2].inplace[0], 0);
    mst_graph_plan p;
    mst_graph_plan_build(g, &p);
    assert_int_equal(p.offset[a], p.offset[c]);
    assert_int_equal(p.arena_bytes, 4 * 8 * 4 + 0);
    mst_graph_plan_free(&p);
    mst_graph_free(g);
}

/* ---- planner on random graphs ---- */

/* Independent check: value-level liveness from the node list, aliasing only along views,
 * in-place edges and relu epilogues; every other pair live at once must not overlap. */
static void check_plan_independently(const mst_graph *g, const mst_graph_plan *p) {
    int nv = g->n_values;
    int *first = malloc((size_t)nv * sizeof(int)), *last = malloc((size_t)nv * sizeof(int));
    for (int v = 0; v < nv; v++) first[v] = last[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        int ids[256], k = 0;
        for (int j = 0; j < n->n_in; j++) ids[k++] = n->in[j];
        for (int j = 0; j < n->n_out; j++) ids[k++] = n->out[j];
        for (int j = 0; j < k; j++) {
            int r = mst_graph_root(g, ids[j]);
            if (first[r] < 0) first[r] = i;
            last[r] = i;
        }
    }
    for (int k = 0; k < g->n_outputs; k++) last[mst_graph_root(g, g->outputs[k])] = g->n_nodes;
    for (int a = 0; a < nv; a++)
        for (int b = a + 1; b < nv; b++) {
            if (p->offset[a] < 0 || p->offset[b] < 0 || p->buffer[a] == p->buffer[b]) continue;
            if (g->values[a].kind == MST_GV_VIEW || g->values[b].kind == MST_GV_VIEW) continue;
            if (first[a] < 0 || first[b] < 0 || first[a] > last[b] || first[b] > last[a]) continue;
            int64_t ea = p->offset[a] + mst_gvalue_bytes(&g->values[a]), eb = p->offset[b] + mst_gvalue_bytes(&g->values[b]);
            if (p->offset[a] < eb && p->offset[b] < ea) fail_msg("values %%%d and %%%d are live together and overlap", a, b);
        }
    free(first);
    free(last);
}

/* A random DAG of elementwise ops, matmuls and reshapes over (16, 16) values. */
static mst_tensor *rand_fn(mst_ctx *ctx, mst_tensor *const in[], uint64_t seed) {
    mst_rng r = mst_rng_make(seed, 0);
    mst_tensor *pool[64];
    int n = 2;
    pool[0] = in[0];
    pool[1] = in[1];
    for (int k = 0; k < 40; k++) {
        mst_tensor *a = pool[mst_rng_u64(&r) % (uint64_t)n], *b = pool[mst_rng_u64(&r) % (uint64_t)n], *y;
        switch (mst_rng_u64(&r) % 6) {
        case 0: y = mst_add(ctx, a, b); break;
        case 1: y = mst_mul(ctx, a, b); break;
        case 2: y = mst_relu(ctx, a); break;
        case 3: y = mst_tanh(ctx, mst_scale(ctx, a, 0.25)); break;
        case 4: y = mst_matmul(ctx, a, b); break;
        default: y = mst_reshape(ctx, mst_sigmoid(ctx, a), 2, (int64_t[]){16, 16}); break;
        }
        pool[n++] = y;
    }
    mst_tensor *sum = pool[n - 1];
    for (int k = n - 8; k < n - 1; k++) sum = mst_add(ctx, sum, pool[k]);
    return sum;
}

static void test_planner_random_graphs(void **state) {
    (void)state;
    uint64_t base = getenv("MST_TEST_SEED") ? strtoull(getenv("MST_TEST_SEED"), NULL, 10) : 20240601;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = base, .n_threads = 1});
    for (int trial = 0; trial < 25; trial++) {
        uint64_t seed = base + (uint64_t)trial;
        mst_pool_push(ctx);
        mst_tensor *in[2] = {mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){16, 16}, 0, 1),
                             mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){16, 16}, 0, 1)};
        mst_graph *g = trace_fn(ctx, rand_fn, in, 2, seed);
        if (trial % 2) mst_graph_optimize(g, NULL);
        mst_graph_plan p;
        mst_graph_plan_build(g, &p);
        if (mst_graph_plan_check(g, &p) != 0) fail_msg("seed %llu: planner validator found overlaps", (unsigned long long)seed);
        check_plan_independently(g, &p);
        assert_true(p.arena_bytes <= p.intermediate_bytes + MST_GRAPH_ALIGN);
        mst_graph_plan_free(&p);
        int64_t n;
        float *got = exec_graph(ctx, g, in, 2, &n);
        mst_tensor *want = rand_fn(ctx, in, seed);
        if (memcmp(mst_tensor_data(want), got, (size_t)n * sizeof(float)) != 0)
            fail_msg("seed %llu: graph result differs from eager", (unsigned long long)seed);
        free(got);
        mst_graph_free(g);
        mst_pool_pop(ctx);
    }
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dce),
        cmocka_unit_test(test_cse),
        cmocka_unit_test(test_cast_fold),
        cmocka_unit_test(test_relu_epilogue), cmocka_unit_test(test_relu_grad_reads_output),
        cmocka_unit_test(test_fusion_matches_unfused),
        cmocka_unit_test(test_slice_grad_sum),
        cmocka_unit_test(test_half_fusion_matches_eager),
        cmocka_unit_test(test_pool_bn_fold),
        cmocka_unit_test(test_bn_pool_fold),
        cmocka_unit_test(test_inplace),
        cmocka_unit_test(test_planner_random_graphs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
