/* matmul.c — matrix products through OpenBLAS: matmul (2-D, batched 3-D, or one operand shared
 * across the batch, with optional transposes) and linear (x w^T + bias over any leading dims).
 *
 * Transposes go to sgemm/dgemm as flags and are never materialized. A batched product is a loop
 * of GEMMs, one per batch item, except a 3-D a (not transposed) times a shared b, which is one
 * GEMM on a viewed as (B*M, K); the trade-off is one BLAS call per batch item (small batches of
 * small matrices are call-bound) in exchange for no copies. Linear folds every leading dim into
 * M for one GEMM and adds the bias by broadcasting it into the output first and running the GEMM
 * with beta = 1, so no second pass over the output follows the GEMM. Reference kernels are
 * triple loops accumulating in double.
 *
 * Threads: a single GEMM splits into column (or row) blocks over the context's pool
 * (op_gemm_par); a batch of products is split by batch items instead, each item one whole GEMM
 * on one thread, when the batch gives every thread enough work (fewer, larger BLAS calls than
 * splitting every item), and otherwise each item's GEMM splits itself.
 *
 * Shapes (the last two dims are the matrices; trans_a / trans_b apply to them):
 *   (M, K) @ (K, N)        -> (M, N)
 *   (B, M, K) @ (B, K, N)  -> (B, M, N)
 *   (B, M, K) @ (K, N)     -> (B, M, N)     b shared by every batch item
 *   (M, K) @ (B, K, N)     -> (B, M, N)     a shared; what the backward of a trans_a product
 *                                           with a shared b needs, so it is accepted too
 */
#include <cblas.h>
#include <limits.h>

#include "runtime/ops/common.h"
#include "runtime/ops/gemm.h"



/* ---- matmul: attrs i[0] = trans_a, i[1] = trans_b ---- */

typedef struct {
    int64_t batch;              /* 1 for 2-D @ 2-D */
    int64_t m, n, k;
    int64_t lda, ldb;           /* row lengths of a and b as stored */
    int64_t stride_a, stride_b; /* elements between batch items; 0 for a shared operand */
    bool ta, tb;
} mm_geom;

static mm_geom mm_geom_of(const mst_op_call *c) {
    const mst_tensor *a = c->in[0], *b = c->in[1];
    mm_geom g;
    g.ta = c->attrs.i[0] != 0;
    g.tb = c->attrs.i[1] != 0;
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    g.m = g.ta ? ac : ar;
    g.k = g.ta ? ar : ac;
    g.n = g.tb ? br : bc;
    g.lda = ac;
    g.ldb = bc;
    g.batch = a->ndim == 3 ? a->shape[0] : b->ndim == 3 ? b->shape[0] : 1;
    g.stride_a = a->ndim == 3 ? ar * ac : 0;
    g.stride_b = b->ndim == 3 ? br * bc : 0;
    return g;
}

static mst_status infer_matmul(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    typedef long long ll;
    const mst_tensor *a = c->in[0], *b = c->in[1];
    mst_status s = op_require_float(ctx, c, 0);
    if (s == MST_OK) s = op_require_same_dtype(ctx, c, 0, 1);
    if (s != MST_OK) return s;
    for (int i = 0; i < 2; i++)
        if (c->in[i]->ndim != 2 && c->in[i]->ndim != 3)
            return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                               "input %d must be a matrix (rank 2) or a batch of matrices (rank 3), got rank %d", i,
                               c->in[i]->ndim);
    for (int i = 0; i < 2; i++)
        if (c->attrs.i[i] != 0 && c->attrs.i[i] != 1)
            return mst_op_fail(ctx, c, MST_ERR_ARG, "%s must be 0 or 1, got %lld", i ? "trans_b" : "trans_a",
                               (ll)c->attrs.i[i]);
    if (a->ndim == 3 && b->ndim == 3 && a->shape[0] != b->shape[0])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "batch sizes differ (%lld vs %lld); a rank-2 operand is shared by the batch instead",
                           (ll)a->shape[0], (ll)b->shape[0]);
    mm_geom g = mm_geom_of(c);
    int64_t kb = g.tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    if (g.k != kb)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "inner dimensions differ: a%s gives (%lld, %lld) but b%s gives (%lld, %lld); "
                           "expected a's columns == b's rows",
                           g.ta ? "^T" : "", (ll)g.m, (ll)g.k, g.tb ? "^T" : "", (ll)kb, (ll)g.n);
    if (!blas_fits(g.m) || !blas_fits(g.n) || !blas_fits(g.k) || !blas_fits(g.batch * g.m))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "matrix dimensions exceed the BLAS 32-bit limit");
    if (a->ndim == 2 && b->ndim == 2) out[0] = (mst_meta){.dtype = a->dtype, .ndim = 2, .shape = {g.m, g.n}};
    else out[0] = (mst_meta){.dtype = a->dtype, .ndim = 3, .shape = {g.batch, g.m, g.n}};
    return MST_OK;
}

/* Batch items [begin, end), one GEMM each on the calling thread (or split, when the region runs
 * inline as one chunk). */
typedef struct {
    mst_ctx *ctx;
    const mm_geom *g;
    const void *a, *b;
    void *y;
} mm_job;

#define MATMUL_ITEMS_BODY                                                                           \
    {                                                                                               \
        const mm_job *j = arg;                                                                      \
        const mm_geom *g = j->g;                                                                    \
        const T *a = j->a, *b = j->b;                                                               \
        T *y = j->y;                                                                                \
        for (int64_t i = begin; i < end; i++)                                                       \
            GEMM_PAR(T)(j->ctx, g->ta, g->tb, g->m, g->n, g->k, 1, a + i * g->stride_a, g->lda, b + i * g->stride_b, \
                        g->ldb, 0, y + i * g->m * g->n, g->n);                                      \
    }
static void matmul_items_f32(void *arg, int64_t begin, int64_t end, int worker) {
    typedef float T;
    MATMUL_ITEMS_BODY
}
static void matmul_items_f64(void *arg, int64_t begin, int64_t end, int worker) {
    typedef double T;
    MATMUL_ITEMS_BODY
}
#define MATMUL_ITEMS(T) _Generic((T)0, float: matmul_items_f32, double: matmul_items_f64)

/* Batch items per chunk: enough that a chunk is worth a region (as for a split GEMM). */
static int64_t min_items(const mm_geom *g) { return par_min_items(2.0 * (double)g->m * (double)g->n * (double)g->k); }

#define MATMUL_BODY(T)                                                                              \
    {                                                                                               \
        mm_geom g = mm_geom_of(c);                                                                  \
        const T *a = (const T *)mst_tensor_data(c->in[0]), *b = (const T *)mst_tensor_data(c->in[1]); \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                     \
        if (g.stride_b == 0 && !g.ta) { /* (B, M, K) is (B*M, K): one GEMM */                       \
            GEMM_PAR(T)(ctx, false, g.tb, g.batch * g.m, g.n, g.k, 1, a, g.lda, b, g.ldb, 0, y, g.n); \
            return MST_OK;                                                                          \
        }                                                                                           \
        mm_job job = {ctx, &g, a, b, y};                                                            \
        mst_parallel_for(ctx, g.batch, min_items(&g), MATMUL_ITEMS(T), &job);                       \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(matmul, MATMUL_BODY)

#define MATMUL_REF_BODY(T)                                                                          \
    {                                                                                               \
        mm_geom g = mm_geom_of(c);                                                                  \
        const T *a = (const T *)mst_tensor_data(c->in[0]), *b = (const T *)mst_tensor_data(c->in[1]); \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                     \
        for (int64_t bi = 0; bi < g.batch; bi++) {                                                  \
            const T *ab = a + bi * g.stride_a, *bb = b + bi * g.stride_b;                           \
            for (int64_t i = 0; i < g.m; i++)                                                       \
                for (int64_t j = 0; j < g.n; j++) {                                                 \
                    double acc = 0;                                                                 \
                    for (int64_t p = 0; p < g.k; p++)                                               \
                        acc += (g.ta ? ab[p * g.lda + i] : ab[i * g.lda + p]) *                     \
                               (g.tb ? bb[j * g.ldb + p] : bb[p * g.ldb + j]);                      \
                    y[(bi * g.m + i) * g.n + j] = (T)acc;                                           \
                }                                                                                   \
        }                                                                                           \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(matmul_ref, MATMUL_REF_BODY)

/* op(x) op(y), summed over the batch when the product is batched but the input it is the
 * gradient of (`like`) is a shared rank-2 operand. When the contraction runs over the rows of
 * two batched operands (x^T y), the batch folds into those rows: one GEMM, no (B, ., .) temporary. */
static mst_tensor *grad_product(mst_ctx *ctx, mst_tensor *x, mst_tensor *y, bool tx, bool ty, const mst_tensor *like) {
    bool batched = x->ndim == 3 || y->ndim == 3;
    if (!batched || like->ndim == 3) return mst_matmul_t(ctx, x, y, tx, ty);
    if (x->ndim == 3 && y->ndim == 3 && tx && !ty) {
        int64_t rows = x->shape[0] * x->shape[1];
        mst_tensor *x2 = mst_reshape(ctx, x, 2, (int64_t[]){rows, x->shape[2]});
        mst_tensor *y2 = mst_reshape(ctx, y, 2, (int64_t[]){rows, y->shape[2]});
        return mst_matmul_t(ctx, x2, y2, true, false);
    }
    return mst_sum(ctx, mst_matmul_t(ctx, x, y, tx, ty), 1u, false);
}

/* C = op(A) op(B):  d op(A) = gC op(B)^T,  d op(B) = op(A)^T gC, then transposed back where the
 * input was used transposed, e.g. trans_a: dA = op(B) gC^T. */
static mst_status matmul_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    mst_tensor *a = c->in[0], *b = c->in[1], *g = gy[0];
    bool ta = c->attrs.i[0] != 0, tb = c->attrs.i[1] != 0;
    if (a->requires_grad) gx[0] = ta ? grad_product(ctx, b, g, tb, true, a) : grad_product(ctx, g, b, false, !tb, a);
    if (b->requires_grad) gx[1] = tb ? grad_product(ctx, g, a, true, ta, b) : grad_product(ctx, a, g, !ta, false, b);
    return ctx->status;
}

static int64_t matmul_flops(const mst_op_call *c) {
    mm_geom g = mm_geom_of(c);
    return 2 * g.batch * g.m * g.n * g.k;
}

const mst_op_desc mst_desc_matmul = {
    .name = "matmul", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .flags = MST_OPF_PROMOTE,
    .amp_class = MST_AMP_CLASS_ALLOW,
    .attr_i = {"trans_a", "trans_b"},
    .infer = infer_matmul, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(matmul), .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(matmul_ref),
    .backward = matmul_backward, .flops = matmul_flops,
};

mst_tensor *mst_matmul_t(mst_ctx *ctx, mst_tensor *a, mst_tensor *b, bool trans_a, bool trans_b) {
    mst_attrs at = {.i = {trans_a, trans_b}};
    return mst_dispatch1(ctx, MST_OP_MATMUL, 2, (mst_tensor *[]){a, b}, &at);
}

mst_tensor *mst_matmul(mst_ctx *ctx, mst_tensor *a, mst_tensor *b) { return mst_matmul_t(ctx, a, b, false, false); }

/* ---- linear: x (..., in), w (out, in), bias (out) -> (..., out) ---- */

/* Rows of the flattened input: the product of x's leading dims. */
static int64_t linear_rows(const mst_tensor *x) {
    int64_t m = 1;
    for (int d = 0; d < x->ndim - 1; d++) m *= x->shape[d];
    return m;
}

static mst_status infer_linear(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x = c->in[0], *w = c->in[1];
    mst_status s = op_require_float(ctx, c, 0);
    for (int i = 1; s == MST_OK && i < c->n_in; i++) s = op_require_same_dtype(ctx, c, 0, i);
    if (s != MST_OK) return s;
    if (x->ndim < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input must have rank >= 1 with features last, got a scalar");
    if (w->ndim != 2)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "weight must be (out_features, in_features), got rank %d", w->ndim);
    if (w->shape[1] != x->shape[x->ndim - 1])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "weight expects %lld input features, input's last dim is %lld",
                           (long long)w->shape[1], (long long)x->shape[x->ndim - 1]);
    if (c->n_in == 3) {
        const mst_tensor *bias = c->in[2];
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return mst_op_fail(ctx, c, MST_ERR_SHAPE, "bias must be (%lld) to match the weight's out_features",
                               (long long)w->shape[0]);
    }
    if (!blas_fits(linear_rows(x)) || !blas_fits(w->shape[0]) || !blas_fits(w->shape[1]))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "matrix dimensions exceed the BLAS 32-bit limit");
    out[0] = (mst_meta){.dtype = x->dtype, .ndim = x->ndim};
    for (int d = 0; d < x->ndim - 1; d++) out[0].shape[d] = x->shape[d];
    out[0].shape[x->ndim - 1] = w->shape[0];
    return MST_OK;
}

#define LINEAR_BODY(T)                                                                              \
    {                                                                                               \
        const mst_tensor *X = c->in[0], *W = c->in[1];                                              \
        int64_t m = linear_rows(X), n = W->shape[0], k = W->shape[1];                               \
        const T *x = (const T *)mst_tensor_data(X), *w = (const T *)mst_tensor_data(W);             \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                     \
        T beta = 0;                                                                                 \
        if (c->n_in == 3) { /* bias broadcast into y, then accumulated onto by the GEMM */          \
            const T *bias = (const T *)mst_tensor_data(c->in[2]);                                   \
            for (int64_t i = 0; i < m; i++) memcpy(y + i * n, bias, (size_t)n * sizeof(T));         \
            beta = 1;                                                                               \
        }                                                                                           \
        GEMM_PAR(T)(ctx, false, true, m, n, k, 1, x, k, w, k, beta, y, n);                          \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(linear, LINEAR_BODY)

#define LINEAR_REF_BODY(T)                                                                          \
    {                                                                                               \
        const mst_tensor *X = c->in[0], *W = c->in[1];                                              \
        int64_t m = linear_rows(X), n = W->shape[0], k = W->shape[1];                               \
        const T *x = (const T *)mst_tensor_data(X), *w = (const T *)mst_tensor_data(W);             \
        const T *bias = c->n_in == 3 ? (const T *)mst_tensor_data(c->in[2]) : NULL;                 \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                     \
        for (int64_t i = 0; i < m; i++)                                                             \
            for (int64_t j = 0; j < n; j++) {                                                       \
                double acc = 0;                                                                     \
                for (int64_t p = 0; p < k; p++) acc += x[i * k + p] * w[j * k + p];                 \
                y[i * n + j] = (T)(acc + (bias ? bias[j] : 0));                                     \
            }                                                                                       \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(linear_ref, LINEAR_REF_BODY)

/* With gy and x seen as 2-D (rows = all leading dims): gx = gy w, gw = gy^T x, gb = sum of gy's rows. */
static mst_status linear_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    mst_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in == 3 ? c->in[2] : NULL;
    int64_t m = linear_rows(x), n = w->shape[0], k = w->shape[1];
    bool flat = x->ndim == 2;
    mst_tensor *gy2 = flat ? gy[0] : mst_reshape(ctx, gy[0], 2, (int64_t[]){m, n});
    if (x->requires_grad) {
        mst_tensor *g = mst_matmul(ctx, gy2, w);
        gx[0] = flat ? g : mst_reshape(ctx, g, x->ndim, x->shape);
    }
    if (w->requires_grad) {
        mst_tensor *x2 = flat ? x : mst_reshape(ctx, x, 2, (int64_t[]){m, k});
        gx[1] = mst_matmul_t(ctx, gy2, x2, true, false);
    }
    if (bias && bias->requires_grad) gx[2] = mst_sum(ctx, gy2, 1u, false);
    return ctx->status;
}

static int64_t linear_flops(const mst_op_call *c) {
    return 2 * linear_rows(c->in[0]) * c->in[1]->shape[0] * c->in[1]->shape[1];
}

const mst_op_desc mst_desc_linear = {
    .name = "linear", .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_PROMOTE | MST_OPF_RELU_EPILOGUE,
    .amp_class = MST_AMP_CLASS_ALLOW,
    .infer = infer_linear, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(linear), .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(linear_ref),
    .backward = linear_backward, .flops = linear_flops,
};

mst_tensor *mst_linear(mst_ctx *ctx, mst_tensor *x, mst_tensor *w, mst_tensor *bias) {
    return mst_dispatch1(ctx, MST_OP_LINEAR, bias ? 3 : 2, (mst_tensor *[]){x, w, bias}, NULL);
}
