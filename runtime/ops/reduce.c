/* reduce.c — sum and mean over a set of axes (attrs i[0] = axes bit mask, i[1] = keepdim).
 *
 * f32 accumulates in double and f64 in f64, into a scratch accumulator the size of the output.
 * The fast kernel first merges adjacent dims of the same kind (reduced or kept) and drops size-1
 * dims, so (N, C) over axis 0 becomes "reduce rows into a vector" and NCHW over 0, 2, 3 becomes
 * "sum each contiguous HW block into acc[c]"; the input is then read once, in memory order, with
 * a unit-stride inner loop; a kept inner dim is split by columns over the pool. The reference
 * kernel maps every element to its output index.
 */
#include "runtime/ops/common.h"

static mst_status infer_reduce(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0];
    int64_t mask = c->attrs.i[0];
    if (mask < 0 || (mask >> x->ndim) != 0)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "axes mask 0x%llx names a dim >= rank %d, expected bits below the rank",
                           (unsigned long long)mask, x->ndim);
    bool keepdim = c->attrs.i[1] != 0;
    int n = 0;
    int64_t shape[MST_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (mask >> d & 1) {
            if (keepdim) shape[n++] = 1;
        } else {
            shape[n++] = x->shape[d];
        }
    }
    out[0] = meta_make(x->dtype, n, shape);
    return MST_OK;
}

/* Product of the reduced dims: the divisor of mean. */
static int64_t reduce_count(const mst_op_call *c) {
    const mst_tensor *x = c->in[0];
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (c->attrs.i[0] >> d & 1) count *= x->shape[d];
    return count;
}

/* Merged view of the input: g dims, outermost first, each reduced or kept. */
typedef struct {
    int n;
    int64_t size[MST_MAX_DIMS];
    bool red[MST_MAX_DIMS];
} reduce_groups;

static void reduce_groups_make(const mst_tensor *x, int64_t mask, reduce_groups *g) {
    g->n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        bool r = mask >> d & 1;
        if (g->n > 0 && g->red[g->n - 1] == r) {
            g->size[g->n - 1] *= x->shape[d];
        } else {
            g->size[g->n] = x->shape[d];
            g->red[g->n] = r;
            g->n++;
        }
    }
}

/* The rows of the merged view, read in memory order into acc: each row's sum into its output
 * (inner reduced), or each row added into its run of outputs (inner kept), for the inner columns
 * [j0, j1) only. Split over columns, every output keeps its order of additions, so the bits do
 * not depend on the split; a reduced inner dim is one chunk. */
typedef struct {
    const void *x;
    double *acc;
    const reduce_groups *g;
    const int64_t *ostride;     /* output stride of each outer group (0 on reduced groups) */
    int64_t inner, rows;
    bool inner_red;
} reduce_job;

#define REDUCE_ROWS_CHUNK_BODY                                                                 \
    {                                                                                          \
        const reduce_job *jb = arg;                                                            \
        const T *x = jb->x;                                                                    \
        const reduce_groups *g = jb->g;                                                        \
        const int64_t inner = jb->inner;                                                       \
        int64_t idx[MST_MAX_DIMS] = {0}, o = 0;                                                \
        for (int64_t r = 0; r < jb->rows; r++) {                                               \
            const T *xr = x + r * inner;                                                       \
            if (jb->inner_red) {                                                               \
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                         \
                int64_t j = 0;                                                                 \
                for (; j + 4 <= inner; j += 4) {                                               \
                    s0 += xr[j]; s1 += xr[j + 1]; s2 += xr[j + 2]; s3 += xr[j + 3];            \
                }                                                                              \
                for (; j < inner; j++) s0 += xr[j];                                            \
                jb->acc[o] += (s0 + s1) + (s2 + s3);                                           \
            } else {                                                                           \
                double *ar = jb->acc + o;                                                      \
                for (int64_t j = j0; j < j1; j++) ar[j] += xr[j];                              \
            }                                                                                  \
            op_odometer_next(g->n - 1, g->size, jb->ostride, idx, &o);   /* the outer groups */    \
        }                                                                                      \
    }
FLOAT_CHUNKS(reduce_rows_chunk, REDUCE_ROWS_CHUNK_BODY, j0, j1)

/* A kept inner dim splits over the pool from OP_MIN_SPLIT_ELEMS elements a chunk, in runs of at
 * least 16 columns: the bias gradients of the transformer's (N L, D) activations ran on one
 * thread. */
enum { k_reduce_min_cols = 16 };

/* Accumulator type A: double for f32 and f64. `scale` is 1 for sum, 1/count for mean. */
#define REDUCE_FAST_BODY(T)                                                                    \
    {                                                                                          \
        const mst_tensor *X = c->in[0];                                                        \
        mst_tensor *Y = c->out[0];                                                             \
        T *y = (T *)mst_tensor_data(Y);                                                        \
        int64_t ny = Y->numel;                                                                 \
        double scale = c->op == MST_OP_MEAN ? 1.0 / (double)reduce_count(c) : 1.0;             \
        if (ny == 0) return MST_OK;                                                            \
        double *acc = mst_ctx_workspace(ctx, (size_t)ny * sizeof(double));                     \
        if (!acc) return ctx->status;                                                          \
        memset(acc, 0, (size_t)ny * sizeof(double));                                           \
        if (X->numel == 0) { for (int64_t i = 0; i < ny; i++) y[i] = (T)(0.0 * scale); return MST_OK; } \
        reduce_groups g;                                                                       \
        reduce_groups_make(X, c->attrs.i[0], &g);                                              \
        int64_t inner = g.n ? g.size[g.n - 1] : 1;                                             \
        bool inner_red = g.n ? g.red[g.n - 1] : false;                                         \
        int64_t ostride[MST_MAX_DIMS], os = inner_red ? 1 : inner;                             \
        for (int k = g.n - 2; k >= 0; k--) {                                                   \
            ostride[k] = g.red[k] ? 0 : os;                                                    \
            if (!g.red[k]) os *= g.size[k];                                                    \
        }                                                                                      \
        reduce_job job = {mst_tensor_data(X), acc, &g, ostride, inner, X->numel / inner, inner_red}; \
        if (inner_red) {                                                                       \
            FLOAT_CHUNK(reduce_rows_chunk, T)(&job, 0, inner, 0);                              \
        } else {                                                                               \
            int64_t per_col = (OP_MIN_SPLIT_ELEMS + job.rows - 1) / job.rows;                  \
            mst_parallel_for(ctx, inner, per_col > k_reduce_min_cols ? per_col : k_reduce_min_cols, \
                             FLOAT_CHUNK(reduce_rows_chunk, T), &job);                         \
        }                                                                                      \
        for (int64_t i = 0; i < ny; i++) y[i] = (T)(acc[i] * scale);                           \
        return MST_OK;                                                                         \
    }
FLOAT_KERNELS(reduce_fast, REDUCE_FAST_BODY)

/* Reference: every input element's output index from its multi-index. */
#define REDUCE_REF_BODY(T)                                                                     \
    {                                                                                          \
        const mst_tensor *X = c->in[0];                                                        \
        mst_tensor *Y = c->out[0];                                                             \
        const T *x = (const T *)mst_tensor_data(X);                                            \
        T *y = (T *)mst_tensor_data(Y);                                                        \
        int64_t mask = c->attrs.i[0];                                                          \
        double scale = c->op == MST_OP_MEAN ? 1.0 / (double)reduce_count(c) : 1.0;             \
        if (Y->numel == 0) return MST_OK;                                                      \
        double *acc = mst_ctx_workspace(ctx, (size_t)Y->numel * sizeof(double));              \
        if (!acc) return ctx->status;                                                          \
        for (int64_t i = 0; i < Y->numel; i++) acc[i] = 0;                                     \
        for (int64_t i = 0; i < X->numel; i++) {                                               \
            int64_t rem = i, o = 0, ostride = 1;                                               \
            for (int d = X->ndim - 1; d >= 0; d--) {                                           \
                int64_t id = rem % X->shape[d];                                                \
                rem /= X->shape[d];                                                            \
                if (!(mask >> d & 1)) {                                                        \
                    o += id * ostride;                                                         \
                    ostride *= X->shape[d];                                                    \
                }                                                                              \
            }                                                                                  \
            acc[o] += x[i];                                                                    \
        }                                                                                      \
        for (int64_t i = 0; i < Y->numel; i++) y[i] = (T)(acc[i] * scale);                     \
        return MST_OK;                                                                         \
    }
FLOAT_KERNELS(reduce_ref, REDUCE_REF_BODY)

/* gy in the keepdim shape, broadcast back to x's shape. */
static mst_tensor *expand_grad(mst_ctx *ctx, const mst_op_call *c, mst_tensor *gy) {
    const mst_tensor *x = c->in[0];
    int64_t shape[MST_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = (c->attrs.i[0] >> d & 1) ? 1 : x->shape[d];
    return mst_broadcast_to(ctx, mst_reshape(ctx, gy, x->ndim, shape), x->ndim, x->shape);
}

static mst_status sum_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = expand_grad(ctx, c, gy[0]);
    return ctx->status;
}

static mst_status mean_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    int64_t count = reduce_count(c);
    gx[0] = expand_grad(ctx, c, mst_scale(ctx, gy[0], count > 0 ? 1.0 / (double)count : 0.0));
    return ctx->status;
}

static int64_t cost_input_numel(const mst_op_call *c) { return c->in[0]->numel; }

#define REDUCE_DESC(NAME, BACKWARD)                                              \
    const mst_op_desc mst_desc_##NAME = {                                        \
        .name = #NAME, .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,         \
        .attr_i = {"axes", "keepdim"}, .amp_class = MST_AMP_CLASS_KEEP_F32,      \
        .infer = infer_reduce, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(reduce_fast),           \
        .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(reduce_ref),                               \
        .backward = BACKWARD, .flops = cost_input_numel,                         \
    };
REDUCE_DESC(sum, sum_backward)
REDUCE_DESC(mean, mean_backward)

/* axes == 0 means every axis; bits at or above x's rank are left for inference to reject. */
static mst_tensor *reduce_call(mst_ctx *ctx, mst_op op, mst_tensor *x, uint32_t axes, bool keepdim) {
    mst_attrs a = {{0}};
    a.i[0] = axes;
    if (axes == 0 && x) a.i[0] = (int64_t)((1u << x->ndim) - 1);
    a.i[1] = keepdim;
    return op_call1(ctx, op, x, NULL, NULL, &a);
}

mst_tensor *mst_sum(mst_ctx *ctx, mst_tensor *x, uint32_t axes, bool keepdim) {
    return reduce_call(ctx, MST_OP_SUM, x, axes, keepdim);
}

mst_tensor *mst_mean(mst_ctx *ctx, mst_tensor *x, uint32_t axes, bool keepdim) {
    return reduce_call(ctx, MST_OP_MEAN, x, axes, keepdim);
}
