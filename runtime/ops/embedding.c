/* embedding.c — table lookup: indices i32 (any shape, rank <= 5) into weight (V, D) gives
 * (indices..., D), and its gradient, a scatter-add of the output gradient rows into (V, D).
 *
 * The forward is one row copy per index. The gradient walks the indices in order and adds each
 * gy row into its table row: a repeated index accumulates, and the order (hence the rounding) is
 * fixed, so results are bit-reproducible; a parallel version would need per-thread tables or a
 * sort by index to stay so. Indices are data, so the kernels (not the inference) check that
 * they lie in [0, V). A dense (V, D) gradient is what PyTorch's default (sparse=False) returns.
 */
#include "runtime/ops/common.h"

/* Indices are data: checked where they are read. */
static mst_status check_indices(mst_ctx *ctx, const mst_op_call *c, const mst_tensor *indices, int64_t n_rows) {
    const int32_t *ix = mst_tensor_i32(indices);
    for (int64_t k = 0; k < indices->numel; k++)
        if (ix[k] < 0 || ix[k] >= n_rows)
            return mst_op_fail(ctx, c, MST_ERR_ARG, "index %d at position %lld is outside [0, %lld)", ix[k], (long long)k,
                               (long long)n_rows);
    return MST_OK;
}

static mst_status require_indices(mst_ctx *ctx, const mst_op_call *c, int i) {
    const mst_tensor *ix = c->in[i];
    if (ix->dtype != MST_DTYPE_I32)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "indices must be i32, got %s", mst_dtype_name(ix->dtype));
    if (ix->ndim > MST_MAX_DIMS - 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "indices must have rank <= %d (the output adds a dimension), got rank %d",
                           MST_MAX_DIMS - 1, ix->ndim);
    return MST_OK;
}

/* ---- embedding: (indices, weight (V, D)) -> (indices..., D) ---- */

static mst_status infer_embedding(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_indices(ctx, c, 0);
    if (s != MST_OK) return s;
    const mst_tensor *ix = c->in[0], *w = c->in[1];
    if (!mst_dtype_is_float(w->dtype))
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "weight must be a float tensor, got %s", mst_dtype_name(w->dtype));
    if (w->ndim != 2) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "weight must have rank 2 (V, D), got rank %d", w->ndim);
    out[0] = meta_make(w->dtype, ix->ndim, ix->shape);
    out[0].ndim = ix->ndim + 1;
    out[0].shape[ix->ndim] = w->shape[1];
    return MST_OK;
}

/* Row copies are dtype-agnostic: one kernel on the element size, registered for the half types
 * too since copying needs no arithmetic. */
static mst_status embedding_rows(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *ix = c->in[0], *w = c->in[1];
    mst_status s = check_indices(ctx, c, ix, w->shape[0]);
    if (s != MST_OK) return s;
    size_t row = (size_t)w->shape[1] * mst_dtype_size(w->dtype);
    if (row == 0) return MST_OK;
    const int32_t *idx = mst_tensor_i32(ix);
    const char *src = mst_tensor_data(w);
    char *dst = mst_tensor_data(c->out[0]);
    for (int64_t k = 0; k < ix->numel; k++) memcpy(dst + (size_t)k * row, src + (size_t)idx[k] * row, row);
    return MST_OK;
}

static mst_status embedding_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[1] = mst_embedding_grad(ctx, gy[0], c->in[0], c->in[1]->shape[0]);
    return ctx->status;
}

/* Reads one weight row per index, not the whole table. */
static int64_t bytes_embedding(const mst_op_call *c) {
    return (int64_t)mst_tensor_nbytes(c->in[0]) + 2 * (int64_t)mst_tensor_nbytes(c->out[0]);
}

static int64_t cost_zero(const mst_op_call *c) { return 0; }

const mst_op_desc mst_desc_embedding = {
    .name = "embedding", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_HALF,
    .nondiff = 1u << 0,         /* indices */
    .dtype_arg = 1,             /* the weight selects the kernel */
    .infer = infer_embedding,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = embedding_rows, [MST_DTYPE_F64] = embedding_rows,
            [MST_DTYPE_F16] = embedding_rows, [MST_DTYPE_BF16] = embedding_rows},
    .backward = embedding_backward, .flops = cost_zero, .bytes = bytes_embedding,
};

/* ---- embedding_grad: (gy (indices..., D), indices) -> (V, D), V = attrs i[0] ---- */

static mst_status infer_embedding_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s == MST_OK) s = require_indices(ctx, c, 1);
    if (s != MST_OK) return s;
    const mst_tensor *g = c->in[0], *ix = c->in[1];
    if (g->ndim != ix->ndim + 1 || !mst_shape_equal(ix->ndim, ix->shape, ix->ndim, g->shape))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "the gradient must have the indices' shape plus one trailing dimension (D)");
    int64_t v = c->attrs.i[0];
    if (v < 0) return mst_op_fail(ctx, c, MST_ERR_ARG, "num_embeddings is %lld, expected >= 0", (long long)v);
    out[0].dtype = g->dtype;        /* set field by field: meta_make would copy unset dims */
    out[0].ndim = 2;
    out[0].shape[0] = v;
    out[0].shape[1] = g->shape[g->ndim - 1];
    return MST_OK;
}

#define EMBEDDING_GRAD_BODY(T)                                                      \
    {                                                                               \
        const mst_tensor *G = c->in[0], *IX = c->in[1];                             \
        mst_tensor *W = c->out[0];                                                  \
        mst_status st = check_indices(ctx, c, IX, W->shape[0]);                     \
        if (st != MST_OK) return st;                                                \
        T *gw = (T *)mst_tensor_data(W);                                            \
        memset(gw, 0, mst_tensor_nbytes(W));                                        \
        const T *g = (const T *)mst_tensor_data(G);                                 \
        const int32_t *idx = mst_tensor_i32(IX);                                    \
        int64_t d = W->shape[1];                                                    \
        for (int64_t k = 0; k < IX->numel; k++) {                                   \
            const T *gr = g + k * d;                                                \
            T *wr = gw + (int64_t)idx[k] * d;                                       \
            for (int64_t j = 0; j < d; j++) wr[j] += gr[j];                         \
        }                                                                           \
        return MST_OK;                                                              \
    }
FLOAT_KERNELS(embedding_grad, EMBEDDING_GRAD_BODY)

static int64_t cost_embedding_grad(const mst_op_call *c) { return c->in[0]->numel; }

/* Zero fill of the table, then each gy row read once and its table row read and written. */
static int64_t bytes_embedding_grad(const mst_op_call *c) {
    return (int64_t)mst_tensor_nbytes(c->out[0]) + 3 * (int64_t)mst_tensor_nbytes(c->in[0]) +
           (int64_t)mst_tensor_nbytes(c->in[1]);
}

const mst_op_desc mst_desc_embedding_grad = {
    .name = "embedding_grad", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"num_embeddings"},
    .infer = infer_embedding_grad, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(embedding_grad),
    .flops = cost_embedding_grad, .bytes = bytes_embedding_grad,
};

/* ---- public constructors ---- */

mst_tensor *mst_embedding(mst_ctx *ctx, mst_tensor *indices, mst_tensor *weight) {
    return mst_dispatch1(ctx, MST_OP_EMBEDDING, 2, (mst_tensor *[]){indices, weight}, NULL);
}

mst_tensor *mst_embedding_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *indices, int64_t num_embeddings) {
    if (num_embeddings < 0) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "embedding_grad: num_embeddings is %lld, expected >= 0", (long long)num_embeddings);
        return NULL;
    }
    mst_attrs a = {.i = {num_embeddings}};
    return mst_dispatch1(ctx, MST_OP_EMBEDDING_GRAD, 2, (mst_tensor *[]){gy, indices}, &a);
}
