/* shape.c — reshape (a view), permute/transpose, concat, slice, slice_grad and slice_grad_sum.
 *
 * Tensors are always contiguous, so reshape is the only op that can share storage; every other
 * op here copies into a fresh contiguous output. They move bytes and never look at values, so
 * each has one kernel written on the element size and registered for every dtype. Permute
 * copies the last two dims in cache-sized tiles when they swap (the matrix-transpose case);
 * other permutations walk the output in order with a strided gather of the input.
 */
#include "runtime/ops/common.h"

static int64_t cost_zero(const mst_op_call *c) { return 0; }

/* ---- reshape: attrs i[0] = rank, i[1..6] = dims (already resolved, no -1) ---- */

static mst_status infer_reshape(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x = c->in[0];
    int n = (int)c->attrs.i[0];
    if (c->attrs.i[0] < 0 || c->attrs.i[0] > MST_MAX_DIMS)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "target rank %lld is outside 0..%d", (long long)c->attrs.i[0], MST_MAX_DIMS);
    const int64_t *shape = &c->attrs.i[1];
    for (int d = 0; d < n; d++)
        if (shape[d] < 0)
            return mst_op_fail(ctx, c, MST_ERR_SHAPE, "target dim %d is %lld, expected a size >= 0", d, (long long)shape[d]);
    if (mst_shape_numel(n, shape) != x->numel) {
        char t[96];
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "cannot reshape %lld elements to %s, expected the same element count",
                           (long long)x->numel, mst_shape_str(n, shape, t, sizeof(t)));
    }
    out[0] = meta_make(x->dtype, n, shape);
    return MST_OK;
}

static mst_status reshape_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_reshape(ctx, gy[0], c->in[0]->ndim, c->in[0]->shape);
    return ctx->status;
}

const mst_op_desc mst_desc_reshape = {
    .name = "reshape", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_VIEW,
    .attr_i = {"rank", "d0", "d1", "d2", "d3", "d4", "d5"},
    .infer = infer_reshape, .backward = reshape_backward, .flops = cost_zero, .bytes = cost_zero,
};

/* Resolves one -1 from the element count. Returns x itself when the shape is unchanged. */
mst_tensor *mst_reshape(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape) {
    if (!x) return op_call1(ctx, MST_OP_RESHAPE, NULL, NULL, NULL, NULL);
    char xs[96], ts[96];
    if (ndim < 0 || ndim > MST_MAX_DIMS || (ndim > 0 && !shape)) {
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "reshape: target rank %d is outside 0..%d", ndim, MST_MAX_DIMS);
        return NULL;
    }
    mst_attrs a = {{0}};
    a.i[0] = ndim;
    int infer_at = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == -1) {
            if (infer_at >= 0) {
                mst_ctx_fail(ctx, MST_ERR_SHAPE, "reshape: %s has more than one -1, expected at most one inferred dim",
                             mst_shape_str(ndim, shape, ts, sizeof(ts)));
                return NULL;
            }
            infer_at = d;
        } else if (shape[d] < 0) {
            mst_ctx_fail(ctx, MST_ERR_SHAPE, "reshape: %s has a negative dim, expected sizes >= 0 or one -1",
                         mst_shape_str(ndim, shape, ts, sizeof(ts)));
            return NULL;
        } else {
            known *= shape[d];
        }
        a.i[1 + d] = shape[d];
    }
    if (infer_at >= 0) {
        if (known == 0 || x->numel % known != 0) {
            mst_ctx_fail(ctx, MST_ERR_SHAPE, "reshape: cannot infer the -1 in %s for %s, expected the other dims to divide %lld",
                         mst_shape_str(ndim, shape, ts, sizeof(ts)), mst_tensor_desc(x, xs, sizeof(xs)), (long long)x->numel);
            return NULL;
        }
        a.i[1 + infer_at] = x->numel / known;
    }
    if (mst_shape_equal(ndim, &a.i[1], x->ndim, x->shape)) return x;
    return op_call1(ctx, MST_OP_RESHAPE, x, NULL, NULL, &a);
}

/* ---- permute (MST_OP_TRANSPOSE): attrs i[0..rank-1] = perm, out dim d = in dim perm[d] ---- */

static mst_status infer_permute(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x = c->in[0];
    unsigned seen = 0;
    int64_t shape[MST_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        int64_t p = c->attrs.i[d];
        if (p < 0 || p >= x->ndim || (seen >> p & 1))
            return mst_op_fail(ctx, c, MST_ERR_ARG, "perm entry %d is %lld, expected a permutation of 0..%d",
                               d, (long long)p, x->ndim - 1);
        seen |= 1u << p;
        shape[d] = x->shape[p];
    }
    out[0] = meta_make(x->dtype, x->ndim, shape);
    return MST_OK;
}

/* The permutation with size-1 dims dropped and runs of input dims that stay adjacent and in
 * order in the output merged: out dim d has size size[d] and input stride stride[d]. */
typedef struct {
    int n;
    int64_t size[MST_MAX_DIMS], stride[MST_MAX_DIMS];
    int in_dim[MST_MAX_DIMS];   /* the merged input dim, in merged input numbering */
} permute_plan;

static void permute_plan_make(const mst_op_call *c, permute_plan *pl) {
    const mst_tensor *x = c->in[0];
    int kept[MST_MAX_DIMS], nk = 0;
    for (int d = 0; d < x->ndim; d++) {
        int p = (int)c->attrs.i[d];
        if (x->shape[p] != 1) kept[nk++] = p;
    }
    pl->n = 0;
    for (int k = 0; k < nk; k++) {
        int p = kept[k];
        if (pl->n > 0 && kept[k - 1] + 1 == p) {
            /* input dims p-1, p stay adjacent: merge (strides of size-1 dims in between don't exist) */
            pl->size[pl->n - 1] *= x->shape[p];
            pl->stride[pl->n - 1] = x->strides[p];
        } else {
            pl->size[pl->n] = x->shape[p];
            pl->stride[pl->n] = x->strides[p];
            pl->in_dim[pl->n] = p;
            pl->n++;
        }
    }
}

#define PERMUTE_TILE 32

/* A tile whose inner output dim has NIN (a constant) elements: NIN input rows of m elements,
 * interleaved (pixel shuffle's (.., w, r) from (.., r, .., w)): the constant lets the compiler
 * vectorize the interleave instead of running a 2-element loop per output pair. */
#define PERMUTE_INTERLEAVE(NIN)                                                                  \
    {                                                                                            \
        int64_t m = pl->size[r - 2];                                                             \
        for (int64_t i = 0; i < m; i++)                                                          \
            for (int j = 0; j < (NIN); j++) o[i * (NIN) + j] = in[i + j * sin];                  \
    }

/* The elements a gather block writes (contiguous in the output): a tile's when the next dim out
 * has unit input stride, else one run of the innermost dim. */
static int64_t permute_block(const permute_plan *pl) {
    int r = pl->n;
    return r >= 2 && pl->stride[r - 2] == 1 ? pl->size[r - 2] * pl->size[r - 1] : pl->size[r - 1];
}

/* The odometer over the plan's first `dims` dims set to the position of block b: idx[] and the
 * input offset it stands for (so a range of blocks can start anywhere). */
static int64_t permute_odometer_at(const permute_plan *pl, int dims, int64_t b, int64_t idx[]) {
    int64_t off = 0;
    for (int k = dims - 1; k >= 0; k--) {
        idx[k] = b % pl->size[k];
        b /= pl->size[k];
        off += idx[k] * pl->stride[k];
    }
    return off;
}

/* T is an unsigned integer type of the element's size: the copy never looks at values. Inner
 * strides of 2 and 4 (de-interleaves, the pixel shuffle's backward) are constants in their own
 * loops for the same reason. */
#define PERMUTE_BODY(T)                                                                          \
    {                                                                                            \
        const T *src = (const T *)s0;                                                            \
        T *dst = (T *)d0;                                                                        \
        int r = pl->n;                                                                           \
        int64_t nin = pl->size[r - 1], sin = pl->stride[r - 1];                                 \
        bool tile = r >= 2 && pl->stride[r - 2] == 1;                                            \
        int outer_dims = tile ? r - 2 : r - 1;                                                   \
        int64_t block = permute_block(pl);                                                       \
        int64_t idx[MST_MAX_DIMS], off = permute_odometer_at(pl, outer_dims, b0, idx);           \
        for (int64_t b = b0; b < b1; b++) {                                                      \
            T *o = dst + b * block;                                                              \
            const T *in = src + off;                                                             \
            if (tile && nin == 2) {                                                              \
                PERMUTE_INTERLEAVE(2)                                                            \
            } else if (tile && nin == 4) {                                                       \
                PERMUTE_INTERLEAVE(4)                                                            \
            } else if (tile) {                                                                   \
                /* out (m, nin) from in with unit stride along m, stride sin along nin */       \
                int64_t m = pl->size[r - 2];                                                     \
                for (int64_t i0 = 0; i0 < m; i0 += PERMUTE_TILE)                                 \
                    for (int64_t j0 = 0; j0 < nin; j0 += PERMUTE_TILE) {                         \
                        int64_t i1 = i0 + PERMUTE_TILE < m ? i0 + PERMUTE_TILE : m;             \
                        int64_t j1 = j0 + PERMUTE_TILE < nin ? j0 + PERMUTE_TILE : nin;         \
                        for (int64_t i = i0; i < i1; i++)                                        \
                            for (int64_t j = j0; j < j1; j++) o[i * nin + j] = in[i + j * sin];  \
                    }                                                                            \
            } else if (sin == 2) {                                                               \
                for (int64_t j = 0; j < nin; j++) o[j] = in[j * 2];                              \
            } else if (sin == 4) {                                                               \
                for (int64_t j = 0; j < nin; j++) o[j] = in[j * 4];                              \
            } else {                                                                             \
                for (int64_t j = 0; j < nin; j++) o[j] = in[j * sin];                            \
            }                                                                                    \
            op_odometer_next(outer_dims, pl->size, pl->stride, idx, &off);                      \
        }                                                                                        \
    }

/* Blocks [b0, b1) of the output. */
static void permute_gather(const permute_plan *pl, size_t esize, const void *s0, void *d0, int64_t b0, int64_t b1) {
    switch (esize) {
    case 1: PERMUTE_BODY(uint8_t) break;
    case 2: PERMUTE_BODY(uint16_t) break;
    case 4: PERMUTE_BODY(uint32_t) break;
    case 8: PERMUTE_BODY(uint64_t) break;
    default: MST_ASSERT(!"element size");
    }
}

/* n rows of row_bytes each, packed into dst, from src at a stride of in_step bytes. The
 * attention heads' permutes copy rows of 8 to 64 floats: a fixed-size memcpy is a few moves
 * inline, where a library call per 32-byte row cost more than the bytes (0.8 ms a step of the
 * transformer's 9.6 in 8 permutes, its profile). */
#define COPY_ROWS_FIXED(B)                                                                       \
    case B:                                                                                      \
        for (int64_t r = 0; r < n; r++) memcpy(dst + (size_t)r * (B), src + r * in_step, B);     \
        return;
static void copy_rows(char *dst, const char *src, int64_t n, size_t row_bytes, ptrdiff_t in_step) {
    switch (row_bytes) {
    COPY_ROWS_FIXED(4) COPY_ROWS_FIXED(8) COPY_ROWS_FIXED(16) COPY_ROWS_FIXED(32) COPY_ROWS_FIXED(64)
    COPY_ROWS_FIXED(128)
    default:
        for (int64_t r = 0; r < n; r++) memcpy(dst + (size_t)r * row_bytes, src + r * in_step, row_bytes);
    }
}

/* A permute's work as ranges over the pool: groups of whole rows (the innermost run contiguous) or
 * gather blocks, each writing its own contiguous part of the output, so the bytes do not depend on
 * the split; OP_MIN_SPLIT_ELEMS elements a chunk at least. The transformer's head permutes and the
 * super-resolution net's pixel shuffle ran on one thread (12-18 GB/s). */

typedef struct {
    permute_plan pl;
    size_t es;
    const char *src;
    char *dst;
    bool rows;      /* copy rows (innermost input stride 1), else gather blocks */
} permute_job;

static void permute_chunk(void *arg, int64_t b0, int64_t b1, int worker) {
    (void)worker;
    const permute_job *j = arg;
    const permute_plan *pl = &j->pl;
    if (!j->rows) {
        permute_gather(pl, j->es, j->src, j->dst, b0, b1);
        return;
    }
    /* the innermost run stays contiguous: copy whole rows, a run of `inner` rows (the next dim
     * out, at a fixed input stride) per step of the outer dims' odometer */
    const size_t row_bytes = (size_t)pl->size[pl->n - 1] * j->es;
    const int64_t inner = pl->size[pl->n - 2];
    const ptrdiff_t in_step = (ptrdiff_t)pl->stride[pl->n - 2] * (ptrdiff_t)j->es;
    int64_t idx[MST_MAX_DIMS], off = permute_odometer_at(pl, pl->n - 2, b0, idx);
    for (int64_t gi = b0; gi < b1; gi++) {
        copy_rows(j->dst + (size_t)gi * (size_t)inner * row_bytes, j->src + (size_t)off * j->es, inner, row_bytes, in_step);
        op_odometer_next(pl->n - 2, pl->size, pl->stride, idx, &off);
    }
}

static mst_status permute_fast(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *x = c->in[0];
    mst_tensor *y = c->out[0];
    if (y->numel == 0) return MST_OK;
    permute_job j = {.es = mst_dtype_size(x->dtype), .src = mst_tensor_data(x), .dst = mst_tensor_data(y)};
    permute_plan_make(c, &j.pl);
    if (j.pl.n <= 1) {
        memcpy(j.dst, j.src, mst_tensor_nbytes(x));
        return MST_OK;
    }
    j.rows = j.pl.stride[j.pl.n - 1] == 1;
    const int64_t block = j.rows ? j.pl.size[j.pl.n - 1] * j.pl.size[j.pl.n - 2] : permute_block(&j.pl);
    mst_parallel_for(ctx, y->numel / block, (OP_MIN_SPLIT_ELEMS + block - 1) / block, permute_chunk, &j);
    return MST_OK;
}

/* Reference: each output element's input offset from its multi-index. */
static mst_status permute_ref(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *x = c->in[0];
    mst_tensor *y = c->out[0];
    size_t es = mst_dtype_size(x->dtype);
    const char *src = mst_tensor_data(x);
    char *dst = mst_tensor_data(y);
    for (int64_t i = 0; i < y->numel; i++) {
        int64_t rem = i, off = 0;
        for (int d = y->ndim - 1; d >= 0; d--) {
            off += (rem % y->shape[d]) * x->strides[c->attrs.i[d]];
            rem /= y->shape[d];
        }
        memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
    }
    return MST_OK;
}

static mst_status permute_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    int inv[MST_MAX_DIMS];
    for (int d = 0; d < c->in[0]->ndim; d++) inv[c->attrs.i[d]] = d;
    gx[0] = mst_permute(ctx, gy[0], inv);
    return ctx->status;
}

const mst_op_desc mst_desc_transpose = {
    .name = "transpose", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .attr_i = {"p0", "p1", "p2", "p3", "p4", "p5"},
    .infer = infer_permute, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(permute_fast), .ref[MST_DEVICE_CPU] = ALL_DTYPES(permute_ref),
    .backward = permute_backward, .flops = cost_zero,
};

/* An identity permutation returns x itself. */
mst_tensor *mst_permute(mst_ctx *ctx, mst_tensor *x, const int *perm) {
    if (!x) return op_call1(ctx, MST_OP_TRANSPOSE, NULL, NULL, NULL, NULL);
    if (x->ndim > 0 && !perm) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "permute: perm is NULL, expected %d entries", x->ndim);
        return NULL;
    }
    mst_attrs a = {{0}};
    bool identity = true;
    for (int d = 0; d < x->ndim; d++) {
        a.i[d] = perm[d];
        identity &= perm[d] == d;
    }
    if (identity) return x;
    return op_call1(ctx, MST_OP_TRANSPOSE, x, NULL, NULL, &a);
}

/* Swap two dims (negative counts from the end). */
mst_tensor *mst_transpose(mst_ctx *ctx, mst_tensor *x, int dim0, int dim1) {
    if (!x) return op_call1(ctx, MST_OP_TRANSPOSE, NULL, NULL, NULL, NULL);
    int a = op_axis(dim0, x->ndim), b = op_axis(dim1, x->ndim);
    if (a < 0 || b < 0) {
        char t[96];
        mst_ctx_fail(ctx, MST_ERR_ARG, "transpose: dims (%d, %d) of %s, expected dims in -%d..%d", dim0, dim1,
                     mst_tensor_desc(x, t, sizeof(t)), x->ndim, x->ndim - 1);
        return NULL;
    }
    int perm[MST_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) perm[d] = d;
    perm[a] = b;
    perm[b] = a;
    return mst_permute(ctx, x, perm);
}

/* ---- helpers for the axis-block ops: shape = (outer, len on axis, inner) ---- */

static int64_t dims_product(const int64_t *shape, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= shape[d];
    return p;
}

/* ---- concat: inputs along attr i[0] = axis (negative counts from the end) ---- */

static mst_status infer_concat(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x0 = c->in[0];
    if (x0->ndim == 0) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "inputs have rank 0, expected rank >= 1");
    int axis = op_axis((int)c->attrs.i[0], x0->ndim);
    if (axis < 0 || c->attrs.i[0] != (int)c->attrs.i[0])
        return mst_op_fail(ctx, c, MST_ERR_ARG, "axis %lld is out of range, expected -%d..%d", (long long)c->attrs.i[0],
                           x0->ndim, x0->ndim - 1);
    int64_t shape[MST_MAX_DIMS];
    for (int d = 0; d < x0->ndim; d++) shape[d] = x0->shape[d];
    for (int i = 1; i < c->n_in; i++) {
        const mst_tensor *xi = c->in[i];
        mst_status s = op_require_same_dtype(ctx, c, 0, i);
        if (s != MST_OK) return s;
        bool ok = xi->ndim == x0->ndim;
        for (int d = 0; ok && d < x0->ndim; d++) ok = d == axis || xi->shape[d] == x0->shape[d];
        if (!ok)
            return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input %d does not match input 0, expected equal shapes except on axis %d",
                               i, axis);
        shape[axis] += xi->shape[axis];
    }
    out[0] = meta_make(x0->dtype, x0->ndim, shape);
    return MST_OK;
}

/* Place the inputs' rows along attr i[0] = axis of the output as concat does, each row of `bytes`
 * through place(dst, src, bytes): a copy for concat, x + 0 for slice_grad_sum. */
typedef void (*row_place_fn)(void *dst, const void *src, size_t bytes);
static void concat_rows(const mst_op_call *c, row_place_fn place) {
    mst_tensor *y = c->out[0];
    int axis = op_axis((int)c->attrs.i[0], y->ndim);
    size_t es = mst_dtype_size(y->dtype);
    int64_t outer = dims_product(y->shape, 0, axis), inner = dims_product(y->shape, axis + 1, y->ndim);
    size_t row = (size_t)(y->shape[axis] * inner) * es;   /* bytes of one outer index in y */
    char *dst = mst_tensor_data(y);
    size_t at = 0;
    for (int i = 0; i < c->n_in; i++) {
        const char *src = mst_tensor_data(c->in[i]);
        size_t chunk = (size_t)(c->in[i]->shape[axis] * inner) * es;
        for (int64_t o = 0; o < outer; o++) place(dst + (size_t)o * row + at, src + (size_t)o * chunk, chunk);
        at += chunk;
    }
}

static void place_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static mst_status concat_kernel(mst_ctx *ctx, const mst_op_call *c) {
    (void)ctx;
    concat_rows(c, place_copy);
    return MST_OK;
}

static mst_status concat_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    int axis = op_axis((int)c->attrs.i[0], c->in[0]->ndim);
    int64_t at = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t len = c->in[i]->shape[axis];
        if (c->in[i]->requires_grad) gx[i] = mst_slice(ctx, gy[0], axis, at, len);
        at += len;
    }
    return ctx->status;
}

const mst_op_desc mst_desc_concat = {
    .name = "concat", .min_inputs = 1, .max_inputs = MST_MAX_OP_INPUTS, .n_outputs = 1,
    .attr_i = {"axis"},
    .infer = infer_concat, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(concat_kernel),
    .backward = concat_backward, .flops = cost_zero,
};

mst_tensor *mst_concat(mst_ctx *ctx, int n, mst_tensor *const xs[], int axis) {
    if (n > 0 && !xs) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "concat: xs is NULL, expected %d tensors", n);
        return NULL;
    }
    mst_attrs a = {.i = {axis}};
    return mst_dispatch1(ctx, MST_OP_CONCAT, n, xs, &a);
}

/* ---- slice: attrs i[0] = axis, i[1] = start, i[2] = length ---- */
/* ---- slice_grad: attrs i[0] = axis, i[1] = start, i[2] = full_length ---- */

/* Shared checks: axis in range and [start, start + len) inside [0, full). */
static mst_status check_window(mst_ctx *ctx, const mst_op_call *c, int *axis, int64_t start, int64_t len, int64_t full) {
    const mst_tensor *x = c->in[0];
    if (x->ndim == 0) return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input has rank 0, expected rank >= 1");
    *axis = op_axis((int)c->attrs.i[0], x->ndim);
    if (*axis < 0 || c->attrs.i[0] != (int)c->attrs.i[0])
        return mst_op_fail(ctx, c, MST_ERR_ARG, "axis %lld is out of range, expected -%d..%d", (long long)c->attrs.i[0],
                           x->ndim, x->ndim - 1);
    if (start < 0 || len < 0 || full < 0 || start > full || len > full - start)
        return mst_op_fail(ctx, c, MST_ERR_ARG,
                           "window start %lld, length %lld is outside [0, %lld) on axis %d, expected 0 <= start <= start + length <= %lld",
                           (long long)start, (long long)len, (long long)full, *axis, (long long)full);
    return MST_OK;
}

static mst_status infer_slice(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x = c->in[0];
    int axis = 0;
    int a0 = op_axis((int)c->attrs.i[0], x->ndim);
    mst_status s = check_window(ctx, c, &axis, c->attrs.i[1], c->attrs.i[2], a0 >= 0 ? x->shape[a0] : 0);
    if (s != MST_OK) return s;
    out[0] = meta_like(x);
    out[0].shape[axis] = c->attrs.i[2];
    return MST_OK;
}

static mst_status infer_slice_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *gy = c->in[0];
    int axis = 0;
    int a0 = op_axis((int)c->attrs.i[0], gy->ndim);
    mst_status s = check_window(ctx, c, &axis, c->attrs.i[1], a0 >= 0 ? gy->shape[a0] : 0, c->attrs.i[2]);
    if (s != MST_OK) return s;
    out[0] = meta_like(gy);
    out[0].shape[axis] = c->attrs.i[2];
    return MST_OK;
}

/* Copy the window between the (outer, full, inner) tensor and the (outer, len, inner) one. */
static void window_copy(const mst_tensor *full_t, const mst_tensor *part, int axis, int64_t start, bool to_full) {
    size_t es = mst_dtype_size(part->dtype);
    int64_t outer = dims_product(part->shape, 0, axis), inner = dims_product(part->shape, axis + 1, part->ndim);
    size_t chunk = (size_t)(part->shape[axis] * inner) * es, row = (size_t)(full_t->shape[axis] * inner) * es;
    size_t at = (size_t)(start * inner) * es;
    char *f = mst_tensor_data(full_t), *p = mst_tensor_data(part);
    for (int64_t o = 0; o < outer; o++) {
        if (to_full) memcpy(f + (size_t)o * row + at, p + (size_t)o * chunk, chunk);
        else memcpy(p + (size_t)o * chunk, f + (size_t)o * row + at, chunk);
    }
}

static mst_status slice_kernel(mst_ctx *ctx, const mst_op_call *c) {
    if (c->out[0]->numel > 0)
        window_copy(c->in[0], c->out[0], op_axis((int)c->attrs.i[0], c->in[0]->ndim), c->attrs.i[1], false);
    return MST_OK;
}

static mst_status slice_grad_kernel(mst_ctx *ctx, const mst_op_call *c) {
    memset(mst_tensor_data(c->out[0]), 0, mst_tensor_nbytes(c->out[0]));
    if (c->in[0]->numel > 0)
        window_copy(c->out[0], c->in[0], op_axis((int)c->attrs.i[0], c->in[0]->ndim), c->attrs.i[1], true);
    return MST_OK;
}

static mst_status slice_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    int axis = op_axis((int)c->attrs.i[0], c->in[0]->ndim);
    gx[0] = mst_slice_grad(ctx, gy[0], axis, c->attrs.i[1], c->in[0]->shape[axis]);
    return ctx->status;
}

static mst_status slice_grad_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    int axis = op_axis((int)c->attrs.i[0], c->in[0]->ndim);
    gx[0] = mst_slice(ctx, gy[0], axis, c->attrs.i[1], c->in[0]->shape[axis]);
    return ctx->status;
}

/* slice reads only the window, slice_grad_sum each input once: twice the output's bytes */
static int64_t cost_out_bytes_twice(const mst_op_call *c) { return 2 * (int64_t)mst_tensor_nbytes(c->out[0]); }

const mst_op_desc mst_desc_slice = {
    .name = "slice", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .attr_i = {"axis", "start", "length"},
    .infer = infer_slice, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(slice_kernel),
    .backward = slice_backward, .flops = cost_zero, .bytes = cost_out_bytes_twice,
};

const mst_op_desc mst_desc_slice_grad = {
    .name = "slice_grad", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"axis", "start", "full_length"},
    .infer = infer_slice_grad, .kernels[MST_DEVICE_CPU] = ALL_DTYPES(slice_grad_kernel),
    .backward = slice_grad_backward, .flops = cost_zero,
};

/* ---- slice_grad_sum: inputs along attr i[0] = axis ----
 * The sum of slice_grad(x_k, axis, start_k, full) over windows that tile the axis in order (x_0 at
 * 0, x_1 right after it, ...): graph mode's rewrite of that add chain (runtime/graph/slice_sum.c),
 * which writes each window once instead of zero-filling and adding the whole tensor per window. Each
 * element is x + 0, the one nonzero term plus the zeros of the other windows as the chain adds
 * them, so -0 becomes +0 as there and every bit is the chain's. Floating point only: the chain's
 * half adds round through f32. */
static mst_status infer_slice_grad_sum(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    if (c->in[0]->dtype != MST_DTYPE_F32 && c->in[0]->dtype != MST_DTYPE_F64)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "inputs are %s, expected f32 or f64", mst_dtype_name(c->in[0]->dtype));
    return infer_concat(ctx, c, out);
}

/* Row placement for concat_rows: each element + 0 (so -0 lands as +0, as in the add chain). */
#define PLACE_ADD_ZERO(T)                                                                          \
    static void place_add_zero_##T(void *dst, const void *src, size_t bytes) {                    \
        T *d = dst;                                                                                \
        const T *x = src;                                                                          \
        for (size_t j = 0; j < bytes / sizeof(T); j++) d[j] = x[j] + (T)0;                         \
    }
PLACE_ADD_ZERO(float)
PLACE_ADD_ZERO(double)
#define SLICE_GRAD_SUM_BODY(T)                                                                     \
    {                                                                                              \
        (void)ctx;                                                                                 \
        concat_rows(c, _Generic((T)0, float: place_add_zero_float, double: place_add_zero_double)); \
        return MST_OK;                                                                             \
    }
FLOAT_KERNELS(slice_grad_sum, SLICE_GRAD_SUM_BODY)

const mst_op_desc mst_desc_slice_grad_sum = {
    .name = "slice_grad_sum", .min_inputs = 1, .max_inputs = MST_MAX_OP_INPUTS, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"axis"},
    .infer = infer_slice_grad_sum, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(slice_grad_sum),
    .backward = concat_backward, .flops = cost_zero, .bytes = cost_out_bytes_twice,
};

mst_tensor *mst_slice(mst_ctx *ctx, mst_tensor *x, int axis, int64_t start, int64_t length) {
    mst_attrs a = {.i = {axis, start, length}};
    return op_call1(ctx, MST_OP_SLICE, x, NULL, NULL, &a);
}

mst_tensor *mst_slice_grad(mst_ctx *ctx, mst_tensor *gy, int axis, int64_t start, int64_t full_length) {
    mst_attrs a = {.i = {axis, start, full_length}};
    return op_call1(ctx, MST_OP_SLICE_GRAD, gy, NULL, NULL, &a);
}
