/* elementwise.c — add, sub, mul, div with NumPy broadcasting, scale, and the broadcast pair
 * (sum_to reduces a broadcast gradient back to its operand's shape; broadcast_to expands).
 *
 * Same-shape operands (or a scalar b) take a flat loop the compiler vectorizes, split over the
 * context's pool for large tensors; otherwise rows of the last dimension are walked with
 * per-operand strides (0 on broadcast dims), which keeps the common bias-add case, (N, C) + (C),
 * a unit-stride inner loop.
 */
#include "runtime/layout.h"
#include "runtime/ops/common.h"

/* ---- binary ops ---- */

static mst_status infer_binary(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *a = c->in[0], *b = c->in[1];
    /* the dispatcher promoted both to one dtype */
    if (!mst_dtype_is_float(a->dtype))
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "operands must be float tensors, got %s", mst_dtype_name(a->dtype));
    int n;
    int64_t shape[MST_MAX_DIMS];
    if (!op_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &n, shape))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "shapes cannot be broadcast together (trailing dimensions must match or be 1)");
    out[0] = meta_make(a->dtype, n, shape);
    return MST_OK;
}

/* Same-shape operands, or a scalar b: contiguous ranges of elements over the context's pool from
 * OP_MIN_SPLIT_ELEMS a chunk, each element computed alone, so the bits do not depend on the split.
 * These ran on one thread before: the cnn's residual gradient sum (64x32x14x14) took 211 us of a
 * 12 ms graph step, at 23 GB/s. */

#define BINARY_FLAT_CHUNK(T, EXPR)                                                          \
    {                                                                                       \
        const mst_op_call *c = arg;                                                         \
        const T *a = (const T *)mst_tensor_data(c->in[0]), *b = (const T *)mst_tensor_data(c->in[1]); \
        T *y = (T *)mst_tensor_data(c->out[0]);                                             \
        if (c->in[1]->numel == c->out[0]->numel) {                                          \
            for (int64_t i = begin; i < end; i++) { T x1 = a[i], x2 = b[i]; y[i] = (EXPR); } \
        } else {                                                                            \
            T x2 = b[0];                                                                    \
            for (int64_t i = begin; i < end; i++) { T x1 = a[i]; y[i] = (EXPR); }           \
        }                                                                                   \
    }

#define BINARY_BODY(T, FLAT_CHUNK, EXPR)                                                \
    {                                                                                   \
        const mst_tensor *A = c->in[0], *B = c->in[1];                                  \
        mst_tensor *Y = c->out[0];                                                      \
        const T *a = (const T *)mst_tensor_data(A), *b = (const T *)mst_tensor_data(B); \
        T *y = (T *)mst_tensor_data(Y);                                                 \
        int64_t n = Y->numel;                                                           \
        if (A->numel == n && (B->numel == n || B->numel == 1)) {                        \
            mst_parallel_for(ctx, n, OP_MIN_SPLIT_ELEMS, FLOAT_CHUNK(FLAT_CHUNK, T), (void *)c); \
            return MST_OK;                                                              \
        }                                                                               \
        if (n == 0) return MST_OK;                                                      \
        op_bcast it;                                                                    \
        const mst_tensor *ops_[2] = {A, B};                                             \
        op_bcast_init(&it, Y->ndim, Y->shape, 2, ops_);                                 \
        int64_t inner = Y->ndim ? Y->shape[Y->ndim - 1] : 1;                            \
        int64_t sa = Y->ndim ? it.stride[0][Y->ndim - 1] : 0;                           \
        int64_t sb = Y->ndim ? it.stride[1][Y->ndim - 1] : 0;                           \
        for (int64_t row = 0; row < n / inner; row++) {                                 \
            int64_t off[3];                                                             \
            op_bcast_row(&it, row, off);                                                \
            const T *ar = a + off[0], *br = b + off[1];                                 \
            T *yr = y + row * inner;                                                    \
            for (int64_t j = 0; j < inner; j++) { T x1 = ar[j * sa], x2 = br[j * sb]; yr[j] = (EXPR); } \
        }                                                                               \
        return MST_OK;                                                                  \
    }

/* NAME_f32 and NAME_f64, with their flat chunks. */
#define BINARY_KERNELS(NAME, EXPR)                                                      \
    FLOAT_CHUNKS_AVX2(NAME##_flat_chunk, BINARY_FLAT_CHUNK(T, EXPR), begin, end)       \
    static mst_status NAME##_f32(mst_ctx *ctx, const mst_op_call *c) { typedef float T; BINARY_BODY(T, NAME##_flat_chunk, EXPR) } \
    static mst_status NAME##_f64(mst_ctx *ctx, const mst_op_call *c) { typedef double T; BINARY_BODY(T, NAME##_flat_chunk, EXPR) }

BINARY_KERNELS(add, x1 + x2)
BINARY_KERNELS(sub, x1 - x2)
BINARY_KERNELS(mul, x1 * x2)
BINARY_KERNELS(div, x1 / x2)

static mst_status add_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (c->in[0]->requires_grad) gx[0] = op_grad_like(ctx, gy[0], c->in[0]);
    if (c->in[1]->requires_grad) gx[1] = op_grad_like(ctx, gy[0], c->in[1]);
    return ctx->status;
}

static mst_status sub_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (c->in[0]->requires_grad) gx[0] = op_grad_like(ctx, gy[0], c->in[0]);
    if (c->in[1]->requires_grad) gx[1] = op_grad_like(ctx, mst_scale(ctx, gy[0], -1.0), c->in[1]);
    return ctx->status;
}

static mst_status mul_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (c->in[0]->requires_grad) gx[0] = op_grad_like(ctx, mst_mul(ctx, gy[0], c->in[1]), c->in[0]);
    if (c->in[1]->requires_grad) gx[1] = op_grad_like(ctx, mst_mul(ctx, gy[0], c->in[0]), c->in[1]);
    return ctx->status;
}

/* y = a / b:  da = gy / b,  db = -gy a / b^2 = -gy y / b */
static mst_status div_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (c->in[0]->requires_grad) gx[0] = op_grad_like(ctx, mst_div(ctx, gy[0], c->in[1]), c->in[0]);
    if (c->in[1]->requires_grad)
        gx[1] = op_grad_like(ctx, mst_scale(ctx, mst_div(ctx, mst_mul(ctx, gy[0], c->out[0]), c->in[1]), -1.0), c->in[1]);
    return ctx->status;
}

/* Block functions for graph-mode fusion: the kernels' expressions on pre-broadcast operands. */
#define BINARY_ELEM(NAME, EXPR)                                                                      \
    OP_AVX2_CLONE(NAME##_elem_f32, (float *y, const float *const x[], int64_t n, const mst_attrs *attrs), (y, x, n, attrs), { \
        (void)attrs;                                                                                 \
        const float *a = x[0], *b = x[1];                                                            \
        for (int64_t i = 0; i < n; i++) { float x1 = a[i], x2 = b[i]; y[i] = (EXPR); }              \
    })
BINARY_ELEM(add, x1 + x2)
BINARY_ELEM(sub, x1 - x2)
BINARY_ELEM(mul, x1 * x2)
BINARY_ELEM(div, x1 / x2)

#define BINARY_DESC(NAME, BACKWARD)                                             \
    const mst_op_desc mst_desc_##NAME = {                                       \
        .name = #NAME, .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,        \
        .flags = MST_OPF_ELEMENTWISE | MST_OPF_PROMOTE,                         \
        .amp_class = MST_AMP_CLASS_HALF,                                        \
        .infer = infer_binary, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(NAME),                 \
        .backward = BACKWARD, .flops = op_cost_numel,                           \
        .elem_f32 = NAME##_elem_f32,                                            \
    };
BINARY_DESC(add, add_backward)
BINARY_DESC(sub, sub_backward)
BINARY_DESC(mul, mul_backward)
BINARY_DESC(div, div_backward)

mst_tensor *mst_add(mst_ctx *ctx, mst_tensor *a, mst_tensor *b) {
    return mst_dispatch1(ctx, MST_OP_ADD, 2, (mst_tensor *[]){a, b}, NULL);
}
mst_tensor *mst_sub(mst_ctx *ctx, mst_tensor *a, mst_tensor *b) {
    return mst_dispatch1(ctx, MST_OP_SUB, 2, (mst_tensor *[]){a, b}, NULL);
}
mst_tensor *mst_mul(mst_ctx *ctx, mst_tensor *a, mst_tensor *b) {
    return mst_dispatch1(ctx, MST_OP_MUL, 2, (mst_tensor *[]){a, b}, NULL);
}
mst_tensor *mst_div(mst_ctx *ctx, mst_tensor *a, mst_tensor *b) {
    return mst_dispatch1(ctx, MST_OP_DIV, 2, (mst_tensor *[]){a, b}, NULL);
}

/* ---- scale: y = s x (attr f[0]) ---- */

#define SCALE_CHUNK_BODY                                                   \
    {                                                                      \
        const mst_op_call *c = arg;                                        \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                 \
        T *y = (T *)mst_tensor_data(c->out[0]);                            \
        T s = (T)c->attrs.f[0];                                            \
        for (int64_t i = begin; i < end; i++) y[i] = s * x[i];             \
    }
FLOAT_CHUNKS_AVX2(scale_chunk, SCALE_CHUNK_BODY, begin, end)
#define SCALE_BODY(T)                                                                                      \
    {                                                                                                      \
        mst_parallel_for(ctx, c->out[0]->numel, OP_MIN_SPLIT_ELEMS, FLOAT_CHUNK(scale_chunk, T), (void *)c); \
        return MST_OK;                                                                                     \
    }
FLOAT_KERNELS(scale, SCALE_BODY)

static mst_status scale_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_scale(ctx, gy[0], c->attrs.f[0]);
    return ctx->status;
}

OP_AVX2_CLONE(scale_elem_f32, (float *y, const float *const x[], int64_t n, const mst_attrs *attrs), (y, x, n, attrs), {
    const float s = (float)attrs->f[0], *xs = x[0];
    for (int64_t i = 0; i < n; i++) y[i] = s * xs[i];
})

const mst_op_desc mst_desc_scale = {
    .name = "scale", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_ELEMENTWISE,
    .amp_class = MST_AMP_CLASS_HALF,
    .attr_f = {"scale"},
    .infer = op_infer_like_input0, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(scale),
    .backward = scale_backward, .flops = op_cost_numel, .elem_f32 = scale_elem_f32,
};

mst_tensor *mst_scale(mst_ctx *ctx, mst_tensor *x, double s) {
    mst_attrs a = {.f = {s}};
    return op_call1(ctx, MST_OP_SCALE, x, NULL, NULL, &a);
}

/* ---- sum_to / broadcast_to: target shape in attrs i[0] = rank, i[1..6] = dims ---- */

static void shape_to_attrs(mst_attrs *a, int ndim, const int64_t *shape) {
    a->i[0] = ndim;
    for (int d = 0; d < ndim; d++) a->i[1 + d] = shape[d];
}

static mst_status infer_target(mst_ctx *ctx, const mst_op_call *c, mst_meta out[], bool reduce) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    int n = (int)c->attrs.i[0];
    if (n < 0 || n > MST_MAX_DIMS) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "target rank %d is outside 0..%d", n, MST_MAX_DIMS);
    const int64_t *target = &c->attrs.i[1];
    const mst_tensor *x = c->in[0];
    /* broadcasting `small` to `big` must give `big` back */
    int nb = reduce ? x->ndim : n, ns = reduce ? n : x->ndim;
    const int64_t *big = reduce ? x->shape : target, *small = reduce ? target : x->shape;
    int nout;
    int64_t bshape[MST_MAX_DIMS];
    if (ns > nb || !op_broadcast_shape(nb, big, ns, small, &nout, bshape) || !mst_shape_equal(nout, bshape, nb, big)) {
        char t[96];
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s does not broadcast to %s", reduce ? mst_shape_str(n, target, t, sizeof(t)) : "the input",
                           reduce ? "the input" : mst_shape_str(n, target, t, sizeof(t)));
    }
    out[0] = meta_make(x->dtype, n, target);
    return MST_OK;
}

static mst_status infer_sum_to(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) { return infer_target(ctx, c, out, true); }
static mst_status infer_broadcast_to(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) { return infer_target(ctx, c, out, false); }

/* When small, right-aligned against big, equals big's leading dims and is 1 on all the trailing
 * ones (the (N, C, 1, 1) -> (N, C, H, W) of a global pooling's gradient), each of its elements
 * fills a contiguous run of big: returns that run's length, else 0. The general walk below pays
 * index arithmetic per row of big's last dim (7 values there: 0.18 ms for the cnn's 64x64x7x7). */
static int64_t bcast_trailing_repeat(const mst_tensor *small, const mst_tensor *big) {
    int lead = big->ndim - small->ndim, k = big->ndim;
    while (k > lead && small->shape[k - 1 - lead] == 1) k--;        /* small's trailing ones */
    for (int d = lead; d < k; d++)
        if (small->shape[d - lead] != big->shape[d]) return 0;
    if (lead > 0 && k > lead) return 0;                             /* big has leading dims small lacks */
    int64_t rep = 1;
    for (int d = k; d < big->ndim; d++) rep *= big->shape[d];
    if (lead > 0) rep = big->numel;                                 /* small is all ones: one value everywhere */
    return small->numel > 0 && small->numel * rep == big->numel ? rep : 0;
}

/* Walk the big shape; `small` is read (broadcast_to) or accumulated into (sum_to) through
 * strides that are 0 on its broadcast dims. Accumulation is in T, in index order. */
#define BCAST_PAIR_BODY(T, REDUCE)                                                          \
    {                                                                                       \
        const mst_tensor *X = c->in[0];                                                     \
        mst_tensor *Y = c->out[0];                                                          \
        const mst_tensor *big = REDUCE ? X : Y, *small = REDUCE ? Y : X;                    \
        T *s = (T *)mst_tensor_data(small);                                                 \
        T *b = (T *)mst_tensor_data(big);                                                   \
        if (REDUCE) memset(s, 0, mst_tensor_nbytes(small));                                 \
        if (big->numel == 0) return MST_OK;                                                 \
        int64_t rep_ = REDUCE ? 0 : bcast_trailing_repeat(small, big);                      \
        if (rep_ > 0) {                                                                     \
            for (int64_t i_ = 0; i_ < small->numel; i_++)                                   \
                for (int64_t j = 0; j < rep_; j++) b[i_ * rep_ + j] = s[i_];                \
            return MST_OK;                                                                  \
        }                                                                                   \
        op_bcast it;                                                                        \
        const mst_tensor *ops_[1] = {small};                                                \
        op_bcast_init(&it, big->ndim, big->shape, 1, ops_);                                 \
        int64_t inner = big->ndim ? big->shape[big->ndim - 1] : 1;                          \
        int64_t ss = big->ndim ? it.stride[0][big->ndim - 1] : 0;                           \
        for (int64_t row = 0; row < big->numel / inner; row++) {                            \
            int64_t off[3];                                                                 \
            op_bcast_row(&it, row, off);                                                    \
            T *sr = s + off[0], *br = b + row * inner;                                      \
            if (REDUCE) {                                                                   \
                if (ss == 0) { T acc = 0; for (int64_t j = 0; j < inner; j++) acc += br[j]; sr[0] += acc; } \
                else for (int64_t j = 0; j < inner; j++) sr[j] += br[j];                    \
            } else {                                                                        \
                for (int64_t j = 0; j < inner; j++) br[j] = sr[j * ss];                     \
            }                                                                               \
        }                                                                                   \
        return MST_OK;                                                                      \
    }
#define SUM_TO_BODY(T) BCAST_PAIR_BODY(T, 1)
#define BROADCAST_TO_BODY(T) BCAST_PAIR_BODY(T, 0)
FLOAT_KERNELS(sum_to, SUM_TO_BODY)
FLOAT_KERNELS(broadcast_to, BROADCAST_TO_BODY)

/* f32 into a plain or an nChw16c output (graph mode, runtime/layout.h): an (N, C, 1, 1) operand
 * fills each slab position with its 16 channels' values; other operands go through a plain copy. */
static mst_status broadcast_to_fast_f32(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *X = c->in[0], *Y = c->out[0];
    if (!mst_tensor_blocked(Y)) return broadcast_to_f32(ctx, c);
    int64_t S = Y->shape[2] * Y->shape[3], slabs = Y->shape[0] * Y->shape[1] / MST_NCHW16C_BLOCK;
    if (X->numel != Y->shape[0] * Y->shape[1] || bcast_trailing_repeat(X, Y) != S) return mst_layout_run_plain(ctx, c, broadcast_to_f32);
    const float *x = mst_tensor_f32(X);
    float *y = mst_tensor_f32(Y);
    for (int64_t sl = 0; sl < slabs; sl++)
        for (int64_t i = 0; i < S; i++)
            for (int l = 0; l < MST_NCHW16C_BLOCK; l++) y[(sl * S + i) * MST_NCHW16C_BLOCK + l] = x[sl * MST_NCHW16C_BLOCK + l];
    return MST_OK;
}

static mst_status sum_to_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_broadcast_to(ctx, gy[0], c->in[0]->ndim, c->in[0]->shape);
    return ctx->status;
}

static mst_status broadcast_to_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_sum_to(ctx, gy[0], c->in[0]->ndim, c->in[0]->shape);
    return ctx->status;
}

static int64_t cost_input_numel(const mst_op_call *c) { return c->in[0]->numel; }

const mst_op_desc mst_desc_sum_to = {
    .name = "sum_to", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_HALF,
    .attr_i = {"rank", "d0", "d1", "d2", "d3", "d4", "d5"},
    .infer = infer_sum_to, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(sum_to),
    .backward = sum_to_backward, .flops = cost_input_numel,
};

const mst_op_desc mst_desc_broadcast_to = {
    .name = "broadcast_to", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_HALF,
    .attr_i = {"rank", "d0", "d1", "d2", "d3", "d4", "d5"},
    .infer = infer_broadcast_to,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = broadcast_to_fast_f32, [MST_DTYPE_F64] = broadcast_to_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(broadcast_to),
    .backward = broadcast_to_backward,
    .blocked_out = 1u << 0,
};

/* Both return x itself when it already has the target shape: no copy, nothing on the tape. */
mst_tensor *mst_sum_to(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape) {
    if (x && mst_shape_equal(x->ndim, x->shape, ndim, shape)) return x;
    if (ndim < 0 || ndim > MST_MAX_DIMS) {
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "sum_to: target rank %d is outside 0..%d", ndim, MST_MAX_DIMS);
        return NULL;
    }
    mst_attrs a = {{0}};
    shape_to_attrs(&a, ndim, shape);
    return op_call1(ctx, MST_OP_SUM_TO, x, NULL, NULL, &a);
}

mst_tensor *mst_broadcast_to(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape) {
    if (x && mst_shape_equal(x->ndim, x->shape, ndim, shape)) return x;
    if (ndim < 0 || ndim > MST_MAX_DIMS) {
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "broadcast_to: target rank %d is outside 0..%d", ndim, MST_MAX_DIMS);
        return NULL;
    }
    mst_attrs a = {{0}};
    shape_to_attrs(&a, ndim, shape);
    return op_call1(ctx, MST_OP_BROADCAST_TO, x, NULL, NULL, &a);
}
