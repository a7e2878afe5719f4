/* conv.c — 2-D convolution (NCHW, zero padding) and the two gradient ops its backward rule uses.
 *
 * im2col + GEMM: an image's receptive fields are unrolled into a (C*R*S, P*Q) column matrix in
 * the context workspace, and the weight seen as (K, C*R*S) times it lands in the output's NCHW
 * layout directly. The trade-off is memory traffic: the column matrix is R*S times the input, so
 * its cost shows most when the GEMM is small. What keeps it near the sgemm rate (bench/kernels.c
 * measures it):
 *   - the batch is split between the context's threads, each unrolling its own images into its
 *     own slice of the workspace and running single-threaded GEMMs on them, so im2col and
 *     col2im run on every core (see "the split over the pool" below);
 *   - "same" stride-1 convolutions unroll each column-matrix row as one shifted copy of the
 *     input plane, not one short copy per output row;
 *   - small images share a GEMM (their column blocks side by side) so the GEMM gets a wide
 *     enough matrix, at the price of copying the output tile back to NCHW;
 *   - the bias rides in the GEMM as one more row of ones instead of a second pass;
 *   - 1x1 stride-1 unpadded convolutions skip im2col.
 * grad_input computes w^T gy into columns and folds them back (col2im, accumulating);
 * grad_weight sums gy col^T over the images. Reference kernels are direct loops.
 * Reference: Chellapilla, Puri, Simard, "High Performance Convolutional Neural Networks for
 * Document Processing" (2006); Caffe's im2col.
 */
#include <cblas.h>
#include <limits.h>

#include "runtime/layout.h"
#include "runtime/ops/common.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/gemm.h"


/* y += x over n elements (col2im's long spans), in pieces small enough that OpenBLAS runs each on
 * the calling thread even when a program gives it more than the one thread the runtime sets (it
 * threads axpy above 10,000 elements): col2im issues thousands of these per image, too short to
 * pay for waking a pool. */
enum { k_axpy_chunk = 8192 };
static void axpy_f32(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i += k_axpy_chunk)
        cblas_saxpy((int)(n - i < k_axpy_chunk ? n - i : k_axpy_chunk), 1.0f, x + i, 1, y + i, 1);
}
static void axpy_f64(int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i += k_axpy_chunk)
        cblas_daxpy((int)(n - i < k_axpy_chunk ? n - i : k_axpy_chunk), 1.0, x + i, 1, y + i, 1);
}
#define AXPY(T) _Generic((T)0, float: axpy_f32, double: axpy_f64)

/* a (m, n) += x y^T: the bias, with y a row of ones. */
static void ger_f32(int64_t m, int64_t n, const float *x, const float *y, float *a, int64_t lda) {
    if (m > 0 && n > 0) cblas_sger(CblasRowMajor, (int)m, (int)n, 1.0f, x, 1, y, 1, a, (int)lda);
}
static void ger_f64(int64_t m, int64_t n, const double *x, const double *y, double *a, int64_t lda) {
    if (m > 0 && n > 0) cblas_dger(CblasRowMajor, (int)m, (int)n, 1.0, x, 1, y, 1, a, (int)lda);
}
#define GER(T) _Generic((T)0, float: ger_f32, double: ger_f64)

/* ---- geometry, shared by the three ops ---- */

typedef mst_conv_geom conv_geom;      /* input (N, C, H, W), weight (K, C, R, S), output (N, K, P, Q) */

static int64_t out_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
    return (in + 2 * pad - kernel) / stride + 1;
}

/* conv2d reads (x, w); grad_input (gy, w) and the input size from i[4..5]; grad_weight (gy, x)
 * and the kernel size from i[4..5]. Attributes i[0..3] are stride_h, stride_w, pad_h, pad_w. */
static conv_geom conv_geom_of(const mst_op_call *c) {
    const int64_t *a = c->attrs.i;
    const mst_tensor *t0 = c->in[0], *t1 = c->in[1];
    conv_geom g = {.sh = a[0], .sw = a[1], .ph = a[2], .pw = a[3]};
    if (c->op == MST_OP_CONV2D) {
        g.n = t0->shape[0], g.c = t0->shape[1], g.h = t0->shape[2], g.w = t0->shape[3];
        g.k = t1->shape[0], g.r = t1->shape[2], g.s = t1->shape[3];
        g.p = g.sh > 0 ? out_extent(g.h, g.r, g.sh, g.ph) : 0;
        g.q = g.sw > 0 ? out_extent(g.w, g.s, g.sw, g.pw) : 0;
    } else if (c->op == MST_OP_CONV2D_GRAD_INPUT) {
        g.n = t0->shape[0], g.k = t0->shape[1], g.p = t0->shape[2], g.q = t0->shape[3];
        g.c = t1->shape[1], g.r = t1->shape[2], g.s = t1->shape[3];
        g.h = a[4], g.w = a[5];
    } else {
        g.n = t0->shape[0], g.k = t0->shape[1], g.p = t0->shape[2], g.q = t0->shape[3];
        g.c = t1->shape[1], g.h = t1->shape[2], g.w = t1->shape[3];
        g.r = a[4], g.s = a[5];
    }
    return g;
}


/* Attribute ranges, kernel-fits-input, and (for the gradient ops) that gy has the size a forward
 * convolution of this geometry produces. */
static mst_status check_geom(mst_ctx *ctx, const mst_op_call *c, const conv_geom *g) {
    typedef long long ll;
    if (g->sh < 1 || g->sw < 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "stride must be >= 1, got (%lld, %lld)", (ll)g->sh, (ll)g->sw);
    if (g->ph < 0 || g->pw < 0)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "padding must be >= 0, got (%lld, %lld)", (ll)g->ph, (ll)g->pw);
    if (g->h < 1 || g->w < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input height and width must be positive, got %lldx%lld", (ll)g->h,
                           (ll)g->w);
    if (g->r < 1 || g->s < 1 || g->c < 1 || g->k < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "kernel (K, C, R, S) = (%lld, %lld, %lld, %lld) must have positive dims",
                           (ll)g->k, (ll)g->c, (ll)g->r, (ll)g->s);
    if (g->r > g->h + 2 * g->ph || g->s > g->w + 2 * g->pw)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "kernel %lldx%lld is larger than the padded input %lldx%lld (input %lldx%lld, padding %lld, %lld)",
                           (ll)g->r, (ll)g->s, (ll)(g->h + 2 * g->ph), (ll)(g->w + 2 * g->pw), (ll)g->h, (ll)g->w,
                           (ll)g->ph, (ll)g->pw);
    int64_t p = out_extent(g->h, g->r, g->sh, g->ph), q = out_extent(g->w, g->s, g->sw, g->pw);
    if (c->op != MST_OP_CONV2D && (p != g->p || q != g->q))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "gy is %lldx%lld but a %lldx%lld input with a %lldx%lld kernel gives %lldx%lld",
                           (ll)g->p, (ll)g->q, (ll)g->h, (ll)g->w, (ll)g->r, (ll)g->s, (ll)p, (ll)q);
    /* each factor is checked before the product, so the products cannot overflow */
    bool fits = blas_fits(g->c) && blas_fits(g->r) && blas_fits(g->s) && blas_fits(g->k) && blas_fits(p) &&
                blas_fits(q);
    if (!fits || !blas_fits(g->c * g->r) || !blas_fits(g->c * g->r * g->s + 1) || !blas_fits(p * q))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "convolution matrices exceed the BLAS 32-bit limit");
    return MST_OK;
}

static mst_status check_floats(mst_ctx *ctx, const mst_op_call *c) {
    mst_status s = op_require_float(ctx, c, 0);
    for (int i = 1; s == MST_OK && i < c->n_in; i++) s = op_require_same_dtype(ctx, c, 0, i);
    return s;
}

static mst_status require_rank4(mst_ctx *ctx, const mst_op_call *c, int i, const char *what) {
    if (c->in[i]->ndim == 4) return MST_OK;
    return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s must have rank 4, got rank %d", what, c->in[i]->ndim);
}

static mst_status infer_conv2d(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *x = c->in[0], *w = c->in[1];
    mst_status s = check_floats(ctx, c);
    if (s == MST_OK) s = require_rank4(ctx, c, 0, "input (N, C, H, W)");
    if (s == MST_OK) s = require_rank4(ctx, c, 1, "weight (K, C, R, S)");
    if (s != MST_OK) return s;
    if (w->shape[1] != x->shape[1])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "weight expects %lld input channels, input has %lld",
                           (long long)w->shape[1], (long long)x->shape[1]);
    if (c->n_in == 3 && (c->in[2]->ndim != 1 || c->in[2]->shape[0] != w->shape[0]))
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "bias must be (%lld), one per output channel", (long long)w->shape[0]);
    conv_geom g = conv_geom_of(c);
    if ((s = check_geom(ctx, c, &g)) != MST_OK) return s;
    out[0] = (mst_meta){.dtype = x->dtype, .ndim = 4, .shape = {g.n, g.k, g.p, g.q}};
    return MST_OK;
}

static mst_status infer_conv2d_grad_input(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *gy = c->in[0], *w = c->in[1];
    mst_status s = check_floats(ctx, c);
    if (s == MST_OK) s = require_rank4(ctx, c, 0, "gy (N, K, P, Q)");
    if (s == MST_OK) s = require_rank4(ctx, c, 1, "weight (K, C, R, S)");
    if (s != MST_OK) return s;
    if (gy->shape[1] != w->shape[0])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "gy has %lld channels, the weight has %lld output channels",
                           (long long)gy->shape[1], (long long)w->shape[0]);
    conv_geom g = conv_geom_of(c);
    if ((s = check_geom(ctx, c, &g)) != MST_OK) return s;
    out[0] = (mst_meta){.dtype = gy->dtype, .ndim = 4, .shape = {g.n, g.c, g.h, g.w}};
    return MST_OK;
}

static mst_status infer_conv2d_grad_weight(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    const mst_tensor *gy = c->in[0], *x = c->in[1];
    mst_status s = check_floats(ctx, c);
    if (s == MST_OK) s = require_rank4(ctx, c, 0, "gy (N, K, P, Q)");
    if (s == MST_OK) s = require_rank4(ctx, c, 1, "input (N, C, H, W)");
    if (s != MST_OK) return s;
    if (gy->shape[0] != x->shape[0])
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "gy has batch %lld, the input has batch %lld", (long long)gy->shape[0],
                           (long long)x->shape[0]);
    conv_geom g = conv_geom_of(c);
    if ((s = check_geom(ctx, c, &g)) != MST_OK) return s;
    out[0] = (mst_meta){.dtype = gy->dtype, .ndim = 4, .shape = {g.k, g.c, g.r, g.s}};
    return MST_OK;
}

/* ---- im2col / col2im ---- */

/* Output columns q whose input column q*sw - pw + s lies inside [0, W): [*q0, *q1). */
static void valid_cols(const conv_geom *g, int64_t s, int64_t *q0, int64_t *q1) {
    int64_t off = s - g->pw;
    int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t hi = g->w - off > 0 ? (g->w - off - 1) / g->sw + 1 : 0;
    if (lo > g->q) lo = g->q;
    if (hi > g->q) hi = g->q;
    if (hi < lo) hi = lo;
    *q0 = lo;
    *q1 = hi;
}

/* Output rows p whose input row p*sh - ph + r lies inside [0, H): [*p0, *p1). */
static void valid_rows(const conv_geom *g, int64_t r, int64_t *p0, int64_t *p1) {
    int64_t off = r - g->ph;
    int64_t lo = off >= 0 ? 0 : (-off + g->sh - 1) / g->sh;
    int64_t hi = g->h - off > 0 ? (g->h - off - 1) / g->sh + 1 : 0;
    if (lo > g->p) lo = g->p;
    if (hi > g->p) hi = g->p;
    if (hi < lo) hi = lo;
    *p0 = lo;
    *p1 = hi;
}

/* Stride 1 with the output as wide as the input (a "same" convolution, the common case): the
 * output rows of one column-matrix row read consecutive rows of the input plane, so the whole
 * row is the plane shifted by off = (r - ph) W + (s - pw) — one long copy (or axpy) instead of
 * one short one per output row. Where the window hangs over the left or right padding the shifted
 * index wraps into the neighbouring input row; those few entries are fixed up separately. */
static bool is_flat(const conv_geom *g) { return g->sh == 1 && g->sw == 1 && g->q == g->w; }

/* Flat case: the shift for row (r, s), and the span [*a, *b) of column indices that lie on
 * valid output rows and whose shifted index stays inside the plane. */
static int64_t flat_span(const conv_geom *g, int64_t r, int64_t s, int64_t *a, int64_t *b) {
    int64_t p0, p1, off = (r - g->ph) * g->w + (s - g->pw);
    valid_rows(g, r, &p0, &p1);
    int64_t lo = p0 * g->q, hi = p1 * g->q;
    if (lo < -off) lo = -off;
    if (hi > g->h * g->w - off) hi = g->h * g->w - off;
    if (hi < lo) lo = hi = p0 * g->q;   /* no valid rows: nothing to copy, all padding */
    *a = lo;
    *b = hi;
    return off;
}

/* Column matrix row (ci, r, s) holds x[ci, p*sh - ph + r, q*sw - pw + s] over (p, q), zero in the
 * padding. `ld` is the row length, so several images can sit side by side. */
#define IM2COL_BODY                                                                                 \
    {                                                                                               \
        bool flat = is_flat(g);                                                                     \
        for (int64_t ci = 0; ci < g->c; ci++)                                                       \
            for (int64_t r = 0; r < g->r; r++)                                                      \
                for (int64_t s = 0; s < g->s; s++) {                                                \
                    T *dst = col + ((ci * g->r + r) * g->s + s) * ld;                               \
                    const T *plane = x + ci * g->h * g->w;                                          \
                    int64_t q0, q1, p0, p1;                                                         \
                    valid_cols(g, s, &q0, &q1);                                                     \
                    valid_rows(g, r, &p0, &p1);                                                     \
                    if (flat) {                                                                     \
                        int64_t a, b, off = flat_span(g, r, s, &a, &b);                             \
                        memset(dst, 0, (size_t)a * sizeof(T));                                      \
                        memcpy(dst + a, plane + a + off, (size_t)(b - a) * sizeof(T));              \
                        memset(dst + b, 0, (size_t)(g->p * g->q - b) * sizeof(T));                  \
                        for (int64_t p = p0; p < p1; p++) { /* the wrapped entries: padding */      \
                            for (int64_t q = 0; q < q0; q++) dst[p * g->q + q] = 0;                 \
                            for (int64_t q = q1; q < g->q; q++) dst[p * g->q + q] = 0;              \
                        }                                                                           \
                        continue;                                                                   \
                    }                                                                               \
                    memset(dst, 0, (size_t)(p0 * g->q) * sizeof(T));                                \
                    memset(dst + p1 * g->q, 0, (size_t)((g->p - p1) * g->q) * sizeof(T));           \
                    int64_t off = s - g->pw;                                                        \
                    for (int64_t p = p0; p < p1; p++) {                                             \
                        T *d = dst + p * g->q;                                                      \
                        const T *row = plane + (p * g->sh - g->ph + r) * g->w;                      \
                        for (int64_t q = 0; q < q0; q++) d[q] = 0;                                  \
                        if (g->sw == 1) memcpy(d + q0, row + q0 + off, (size_t)(q1 - q0) * sizeof(T)); \
                        else for (int64_t q = q0; q < q1; q++) d[q] = row[q * g->sw + off];         \
                        for (int64_t q = q1; q < g->q; q++) d[q] = 0;                               \
                    }                                                                               \
                }                                                                                   \
    }

/* The adjoint of im2col: add every column entry back into the input position it came from.
 * The flat case zeroes the entries that belong to the padding first (col is scratch), so one
 * axpy over the shifted plane adds nothing where the index wraps. */
#define COL2IM_BODY                                                                                 \
    {                                                                                               \
        bool flat = is_flat(g);                                                                     \
        for (int64_t ci = 0; ci < g->c; ci++)                                                       \
            for (int64_t r = 0; r < g->r; r++)                                                      \
                for (int64_t s = 0; s < g->s; s++) {                                                \
                    T *src = col + ((ci * g->r + r) * g->s + s) * ld;                               \
                    T *plane = x + ci * g->h * g->w;                                                \
                    int64_t q0, q1, p0, p1;                                                         \
                    valid_cols(g, s, &q0, &q1);                                                     \
                    valid_rows(g, r, &p0, &p1);                                                     \
                    if (flat) {                                                                     \
                        int64_t a, b, off = flat_span(g, r, s, &a, &b);                             \
                        for (int64_t p = p0; p < p1; p++) {                                         \
                            for (int64_t q = 0; q < q0; q++) src[p * g->q + q] = 0;                 \
                            for (int64_t q = q1; q < g->q; q++) src[p * g->q + q] = 0;              \
                        }                                                                           \
                        AXPY(T)(b - a, src + a, plane + a + off);                                   \
                        continue;                                                                   \
                    }                                                                               \
                    int64_t off = s - g->pw;                                                        \
                    for (int64_t p = p0; p < p1; p++) {                                             \
                        const T *sr = src + p * g->q;                                               \
                        T *row = plane + (p * g->sh - g->ph + r) * g->w;                            \
                        for (int64_t q = q0; q < q1; q++) row[q * g->sw + off] += sr[q];            \
                    }                                                                               \
                }                                                                                   \
    }

static void im2col_f32(const conv_geom *g, const float *x, float *col, int64_t ld) { typedef float T; IM2COL_BODY }
static void im2col_f64(const conv_geom *g, const double *x, double *col, int64_t ld) { typedef double T; IM2COL_BODY }
static void col2im_f32(const conv_geom *g, float *col, int64_t ld, float *x) { typedef float T; COL2IM_BODY }
static void col2im_f64(const conv_geom *g, double *col, int64_t ld, double *x) { typedef double T; COL2IM_BODY }
#define IM2COL(T) _Generic((T)0, float: im2col_f32, double: im2col_f64)
#define COL2IM(T) _Generic((T)0, float: col2im_f32, double: col2im_f64)

/* A 1x1 stride-1 unpadded convolution is a plain GEMM on the image seen as (C, H*W). */
static bool is_pointwise(const conv_geom *g) {
    return g->r == 1 && g->s == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Images per GEMM: as many whole images as fit in k_group_cols columns, within k_group_bytes of
 * scratch, and no more than `cap` (the images of one chunk). A GEMM on one 14x14 image (196
 * columns) runs about 10% below the rate of a wider one even on one thread, so small images share
 * one; the price is copying the output tile back to NCHW (or gathering gy), which costs most when
 * C*R*S is small, and images of 512+ columns (28x28 and up) go one at a time with the GEMM
 * writing NCHW in place. Measured in bench/kernels.c. */
enum { k_group_cols = 1024 };
static const size_t k_group_bytes = (size_t)16 << 20;

static int64_t group_size(const conv_geom *g, size_t esz, int64_t cap) {
    int64_t pq = g->p * g->q, nb = k_group_cols / pq;
    if (nb > cap) nb = cap;
    size_t per_image = (size_t)((g->c * g->r * g->s + 1 + g->k) * pq) * esz;
    while (nb > 1 && (size_t)nb * per_image > k_group_bytes) nb--;
    return nb < 1 ? 1 : nb;
}

/* ---- the split over the pool ----
 *
 * All three ops split the batch into contiguous ranges of images, one range per pool thread;
 * each thread unrolls (or folds back) its own images in its own slice of the workspace and runs
 * single-threaded GEMMs on them. Splitting the batch rather than each GEMM puts im2col and col2im
 * on every core too, where OpenBLAS's own threading left them on one, and it keeps each GEMM as
 * wide as the grouping makes it. The price is in grad_weight: every range sums into its own
 * (K, C*R*S) partial, added up afterwards in range order — the same bits for the same thread
 * count, within rounding of other counts. A range holds at least k_par_min_chunk_flops of work
 * (gemm.h), so small convolutions run inline; when the whole batch is one range (batch 1, or one
 * thread) the GEMMs split themselves over the pool instead (op_gemm_par). */
static int64_t min_images(const conv_geom *g) {
    return par_min_items(2.0 * (double)(g->k * g->p * g->q) * (double)(g->c * g->r * g->s));
}

/* One call as its chunks see it. Chunk `worker` owns per_chunk elements of scratch from
 * scratch + worker * per_chunk: the column matrix (col), the tile (tile), then grad_weight's
 * partial sum. Everything else in the workspace is shared and read-only during the region. */
typedef struct {
    mst_ctx *ctx;               /* for op_gemm_par, which stays on its thread inside a region */
    const conv_geom *g;
    const void *in0, *in1;      /* forward: x, the weight (with the bias column when rows > C*R*S);
                                 * grad_input: gy, w; grad_weight: gy, x */
    const void *bias, *ones;    /* pointwise forward with bias: the rank-1 update's operands */
    void *out;
    void *scratch;
    size_t col, tile, per_chunk;
    int64_t nb, rows;
} conv_job;

/* Elements rounded up to a 64-byte line, so that two chunks' scratch never share one. */
static size_t line_round(size_t n, size_t esz) {
    size_t line = 64 / esz;
    return (n + line - 1) / line * line;
}

/* NULL with the error in ctx when the workspace cannot grow; a non-NULL dummy when none is needed. */
static void *scratch_get(mst_ctx *ctx, size_t elems, size_t esz) {
    return elems ? mst_ctx_workspace(ctx, elems * esz) : (void *)ctx;
}

/* ---- conv2d ---- */

/* With a bias, the column matrix gets a row of ones and the weight the bias as an extra column,
 * so the GEMM adds the bias while it writes the output, instead of a second pass over it (a
 * separate rank-1 update cost about 30% of the GEMM time for a 1-channel stem convolution). A
 * pointwise convolution multiplies the input directly and adds the bias with that rank-1 update.
 * Images [begin, end) of the batch, nb to a GEMM. */
#define CONV2D_CHUNK_BODY                                                                           \
    {                                                                                               \
        const conv_job *j = arg;                                                                    \
        const conv_geom *g = j->g;                                                                  \
        const T *x = j->in0, *wm = j->in1, *bias = j->bias, *ones = j->ones;                        \
        T *y = j->out, *col = (T *)j->scratch + (size_t)worker * j->per_chunk, *tile = col + j->col; \
        int64_t crs = g->c * g->r * g->s, pq = g->p * g->q, chw = g->c * g->h * g->w, kpq = g->k * pq; \
        bool direct = is_pointwise(g); /* y_n (K, HW) = w (K, C) x_n (C, HW) */                     \
        for (int64_t n0 = begin; n0 < end; n0 += j->nb) {                                           \
            int64_t cnt = end - n0 < j->nb ? end - n0 : j->nb, ld = cnt * pq;                       \
            /* one image: straight into NCHW; several: a (K, cnt*PQ) tile, image i in block i */    \
            T *dst = cnt == 1 ? y + n0 * kpq : tile;                                                \
            for (int64_t i = 0; !direct && i < cnt; i++) IM2COL(T)(g, x + (n0 + i) * chw, col + i * pq, ld); \
            for (int64_t c2 = 0; j->rows > crs && c2 < ld; c2++) col[crs * ld + c2] = 1;            \
            GEMM_PAR(T)(j->ctx, false, false, g->k, ld, j->rows, 1, wm, j->rows, direct ? x + n0 * chw : col, ld, \
                        0, dst, ld);                                                                \
            if (bias) GER(T)(g->k, ld, bias, ones, dst, ld);                                        \
            for (int64_t i = 0; cnt > 1 && i < cnt; i++)                                            \
                for (int64_t k = 0; k < g->k; k++)                                                  \
                    memcpy(y + (n0 + i) * kpq + k * pq, tile + k * ld + i * pq, (size_t)pq * sizeof(T)); \
        }                                                                                           \
    }
FLOAT_CHUNKS(conv2d_chunk, CONV2D_CHUNK_BODY, begin, end)

#define CONV2D_BODY(T)                                                                              \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        const T *x = (const T *)mst_tensor_data(c->in[0]), *w = (const T *)mst_tensor_data(c->in[1]); \
        const T *bias = c->n_in == 3 ? (const T *)mst_tensor_data(c->in[2]) : NULL;                 \
        int64_t crs = g.c * g.r * g.s, pq = g.p * g.q;                                              \
        if (g.n == 0) return MST_OK;                                                                \
        bool direct = is_pointwise(&g);                                                             \
        int64_t min_n = min_images(&g);                                                             \
        int chunks = mst_parallel_chunks_ctx(ctx, g.n, min_n);                                      \
        int64_t nb = direct ? 1 : group_size(&g, sizeof(T), (g.n + chunks - 1) / chunks), cols = nb * pq; \
        int64_t rows = crs + (bias && !direct); /* GEMM inner dimension */                          \
        size_t col_n = direct ? 0 : (size_t)(rows * cols), tile_n = nb > 1 ? (size_t)(g.k * cols) : 0; \
        size_t per = line_round(col_n + tile_n, sizeof(T));                                         \
        size_t wb_n = bias && !direct ? (size_t)(g.k * rows) : 0, ones_n = bias && direct ? (size_t)cols : 0; \
        T *ws = (T *)scratch_get(ctx, (size_t)chunks * per + wb_n + ones_n, sizeof(T));             \
        if (!ws) return ctx->status;                                                                \
        T *wb = ws + (size_t)chunks * per, *ones = wb + wb_n;                                       \
        const T *wm = w;                                                                            \
        if (wb_n) { /* (K, CRS | bias) */                                                           \
            for (int64_t k = 0; k < g.k; k++) {                                                     \
                memcpy(wb + k * rows, w + k * crs, (size_t)crs * sizeof(T));                        \
                wb[k * rows + crs] = bias[k];                                                       \
            }                                                                                       \
            wm = wb;                                                                                \
        }                                                                                           \
        for (size_t i = 0; i < ones_n; i++) ones[i] = 1;                                            \
        conv_job job = {ctx, &g, x, wm, ones_n ? bias : NULL, ones, mst_tensor_data(c->out[0]), ws, col_n, tile_n, \
                        per, nb, rows};                                                             \
        mst_parallel_for(ctx, g.n, min_n, FLOAT_CHUNK(conv2d_chunk, T), &job);                      \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d, CONV2D_BODY)

#define CONV2D_REF_BODY(T)                                                                          \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        const T *x = (const T *)mst_tensor_data(c->in[0]), *w = (const T *)mst_tensor_data(c->in[1]); \
        const T *bias = c->n_in == 3 ? (const T *)mst_tensor_data(c->in[2]) : NULL;                 \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                     \
        for (int64_t n = 0; n < g.n; n++)                                                           \
            for (int64_t k = 0; k < g.k; k++)                                                       \
                for (int64_t p = 0; p < g.p; p++)                                                   \
                    for (int64_t q = 0; q < g.q; q++) {                                             \
                        double acc = 0;                                                             \
                        for (int64_t ci = 0; ci < g.c; ci++)                                        \
                            for (int64_t r = 0; r < g.r; r++)                                       \
                                for (int64_t s = 0; s < g.s; s++) {                                 \
                                    int64_t ih = p * g.sh - g.ph + r, iw = q * g.sw - g.pw + s;     \
                                    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;       \
                                    acc += x[((n * g.c + ci) * g.h + ih) * g.w + iw] *              \
                                           w[((k * g.c + ci) * g.r + r) * g.s + s];                 \
                                }                                                                   \
                        y[((n * g.k + k) * g.p + p) * g.q + q] = (T)(acc + (bias ? bias[k] : 0));   \
                    }                                                                               \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d_ref, CONV2D_REF_BODY)

static mst_status conv2d_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    mst_tensor *x = c->in[0], *w = c->in[1];
    const int64_t *a = c->attrs.i;
    int sh = (int)a[0], sw = (int)a[1], ph = (int)a[2], pw = (int)a[3];
    if (x->requires_grad)
        gx[0] = mst_conv2d_grad_input(ctx, gy[0], w, (int)x->shape[2], (int)x->shape[3], sh, sw, ph, pw);
    if (w->requires_grad)
        gx[1] = mst_conv2d_grad_weight(ctx, gy[0], x, (int)w->shape[2], (int)w->shape[3], sh, sw, ph, pw);
    if (c->n_in == 3 && c->in[2]->requires_grad) gx[2] = mst_sum(ctx, gy[0], 1u | 4u | 8u, false);
    return ctx->status;
}

/* The same count for all three ops: each is one GEMM of K x (C*R*S) x (P*Q) per image. */
static int64_t conv_flops(const mst_op_call *c) {
    conv_geom g = conv_geom_of(c);
    return 2 * g.n * g.k * g.p * g.q * g.c * g.r * g.s;
}

/* The builtin f32 kernels: the direct path for inputs of few channels (conv_direct.h), which takes
 * nChw16c operands as they are; im2col + GEMM otherwise, on plain copies of any nChw16c operand. */
static bool conv_builtin_takes_blocked(const mst_op_call *c) {
    conv_geom g = conv_geom_of(c);
    return mst_conv_direct_applies(c, &g);
}

static mst_status conv2d_builtin_f32(mst_ctx *ctx, const mst_op_call *c) {
    conv_geom g = conv_geom_of(c);
    if (mst_conv_direct_applies(c, &g)) return mst_conv_direct_forward(ctx, c, &g);
    return mst_call_has_blocked(c) ? mst_layout_run_plain(ctx, c, conv2d_f32) : conv2d_f32(ctx, c);
}

const mst_op_desc mst_desc_conv2d = {
    .name = "conv2d", .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_PROMOTE | MST_OPF_RELU_EPILOGUE,
    .amp_class = MST_AMP_CLASS_ALLOW,
    .attr_i = {"stride_h", "stride_w", "pad_h", "pad_w"},
    .infer = infer_conv2d, .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = conv2d_builtin_f32, [MST_DTYPE_F64] = conv2d_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(conv2d_ref),
    .backward = conv2d_backward, .flops = conv_flops,
    .blocked_in = 1u << 0, .blocked_out = 1u << 0, .builtin_takes_blocked = conv_builtin_takes_blocked,
};

/* ---- conv2d_grad_input: gy (N, K, P, Q), w -> gx (N, C, H, W) ---- */

/* Images [begin, end): gx_n = col2im(w^T gy_n), nb images to a GEMM with gy gathered side by side. */
#define CONV2D_GRAD_INPUT_CHUNK_BODY                                                                \
    {                                                                                               \
        const conv_job *j = arg;                                                                    \
        const conv_geom *g = j->g;                                                                  \
        const T *gy = j->in0, *w = j->in1;                                                          \
        T *gx = j->out, *col = (T *)j->scratch + (size_t)worker * j->per_chunk, *tile = col + j->col; \
        int64_t crs = g->c * g->r * g->s, pq = g->p * g->q, chw = g->c * g->h * g->w, kpq = g->k * pq; \
        if (is_pointwise(g)) { /* gx_n (C, HW) = w^T (C, K) gy_n (K, HW) */                        \
            for (int64_t n = begin; n < end; n++)                                                   \
                GEMM_PAR(T)(j->ctx, true, false, g->c, pq, g->k, 1, w, g->c, gy + n * kpq, pq, 0, gx + n * chw, pq); \
            return;                                                                                 \
        }                                                                                           \
        for (int64_t n0 = begin; n0 < end; n0 += j->nb) {                                           \
            int64_t cnt = end - n0 < j->nb ? end - n0 : j->nb, ld = cnt * pq;                       \
            const T *src = gy + n0 * kpq;                                                           \
            if (cnt > 1) { /* gather gy's images side by side: (K, cnt*PQ) */                       \
                for (int64_t i = 0; i < cnt; i++)                                                   \
                    for (int64_t k = 0; k < g->k; k++)                                              \
                        memcpy(tile + k * ld + i * pq, gy + (n0 + i) * kpq + k * pq, (size_t)pq * sizeof(T)); \
                src = tile;                                                                         \
            }                                                                                       \
            GEMM_PAR(T)(j->ctx, true, false, crs, ld, g->k, 1, w, crs, src, ld, 0, col, ld);        \
            /* zeroed here rather than up front, so col2im finds the images in cache */             \
            memset(gx + n0 * chw, 0, (size_t)(cnt * chw) * sizeof(T));                              \
            for (int64_t i = 0; i < cnt; i++) COL2IM(T)(g, col + i * pq, ld, gx + (n0 + i) * chw);  \
        }                                                                                           \
    }
FLOAT_CHUNKS(grad_input_chunk, CONV2D_GRAD_INPUT_CHUNK_BODY, begin, end)

#define CONV2D_GRAD_INPUT_BODY(T)                                                                   \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        int64_t crs = g.c * g.r * g.s, pq = g.p * g.q;                                              \
        if (g.n == 0) return MST_OK;                                                                \
        bool direct = is_pointwise(&g);                                                             \
        int64_t min_n = min_images(&g);                                                             \
        int chunks = mst_parallel_chunks_ctx(ctx, g.n, min_n);                                      \
        int64_t nb = direct ? 1 : group_size(&g, sizeof(T), (g.n + chunks - 1) / chunks);           \
        size_t col_n = direct ? 0 : (size_t)(crs * nb * pq), tile_n = nb > 1 ? (size_t)(g.k * nb * pq) : 0; \
        size_t per = line_round(col_n + tile_n, sizeof(T));                                         \
        T *ws = (T *)scratch_get(ctx, (size_t)chunks * per, sizeof(T));                             \
        if (!ws) return ctx->status;                                                                \
        conv_job job = {ctx, &g, mst_tensor_data(c->in[0]), mst_tensor_data(c->in[1]), NULL, NULL,  \
                        mst_tensor_data(c->out[0]), ws, col_n, tile_n, per, nb, 0};                 \
        mst_parallel_for(ctx, g.n, min_n, FLOAT_CHUNK(grad_input_chunk, T), &job);                  \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d_grad_input, CONV2D_GRAD_INPUT_BODY)

#define CONV2D_GRAD_INPUT_REF_BODY(T)                                                               \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        const T *gy = (const T *)mst_tensor_data(c->in[0]), *w = (const T *)mst_tensor_data(c->in[1]); \
        T *gx = (T *)mst_tensor_data(c->out[0]);                                                    \
        memset(gx, 0, mst_tensor_nbytes(c->out[0]));                                                \
        for (int64_t n = 0; n < g.n; n++)                                                           \
            for (int64_t k = 0; k < g.k; k++)                                                       \
                for (int64_t p = 0; p < g.p; p++)                                                   \
                    for (int64_t q = 0; q < g.q; q++) {                                             \
                        T gv = gy[((n * g.k + k) * g.p + p) * g.q + q];                             \
                        for (int64_t ci = 0; ci < g.c; ci++)                                        \
                            for (int64_t r = 0; r < g.r; r++)                                       \
                                for (int64_t s = 0; s < g.s; s++) {                                 \
                                    int64_t ih = p * g.sh - g.ph + r, iw = q * g.sw - g.pw + s;     \
                                    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;       \
                                    gx[((n * g.c + ci) * g.h + ih) * g.w + iw] +=                   \
                                        gv * w[((k * g.c + ci) * g.r + r) * g.s + s];               \
                                }                                                                   \
                    }                                                                               \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d_grad_input_ref, CONV2D_GRAD_INPUT_REF_BODY)

const mst_op_desc mst_desc_conv2d_grad_input = {
    .name = "conv2d_grad_input", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .flags = MST_OPF_GRAD_OP | MST_OPF_PROMOTE,
    .attr_i = {"stride_h", "stride_w", "pad_h", "pad_w", "in_h", "in_w"},
    .infer = infer_conv2d_grad_input, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(conv2d_grad_input),
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(conv2d_grad_input_ref), .flops = conv_flops,
    .blocked_in = 1u << 0, .blocked_out = 1u << 0,
};

/* ---- conv2d_grad_weight: gy (N, K, P, Q), x (N, C, H, W) -> gw (K, C, R, S) ---- */

/* Images [begin, end) summed into this chunk's partial (chunk 0: gw itself):
 * acc (K, CRS) += gy (K, cnt*PQ) col^T (cnt*PQ, CRS), nb images to a GEMM. */
#define CONV2D_GRAD_WEIGHT_CHUNK_BODY                                                               \
    {                                                                                               \
        const conv_job *j = arg;                                                                    \
        const conv_geom *g = j->g;                                                                  \
        const T *gy = j->in0, *x = j->in1;                                                          \
        T *col = (T *)j->scratch + (size_t)worker * j->per_chunk, *tile = col + j->col;             \
        int64_t crs = g->c * g->r * g->s, pq = g->p * g->q, chw = g->c * g->h * g->w, kpq = g->k * pq; \
        T *acc = worker == 0 ? (T *)j->out : tile + j->tile;                                        \
        memset(acc, 0, (size_t)(g->k * crs) * sizeof(T));                                           \
        if (is_pointwise(g)) { /* acc (K, C) += gy_n (K, HW) x_n^T (HW, C) */                      \
            for (int64_t n = begin; n < end; n++)                                                   \
                GEMM_PAR(T)(j->ctx, false, true, g->k, g->c, pq, 1, gy + n * kpq, pq, x + n * chw, pq, 1, acc, g->c); \
            return;                                                                                 \
        }                                                                                           \
        for (int64_t n0 = begin; n0 < end; n0 += j->nb) {                                           \
            int64_t cnt = end - n0 < j->nb ? end - n0 : j->nb, ld = cnt * pq;                       \
            const T *src = gy + n0 * kpq;                                                           \
            for (int64_t i = 0; i < cnt; i++) IM2COL(T)(g, x + (n0 + i) * chw, col + i * pq, ld);   \
            if (cnt > 1) {                                                                          \
                for (int64_t i = 0; i < cnt; i++)                                                   \
                    for (int64_t k = 0; k < g->k; k++)                                              \
                        memcpy(tile + k * ld + i * pq, gy + (n0 + i) * kpq + k * pq, (size_t)pq * sizeof(T)); \
                src = tile;                                                                         \
            }                                                                                       \
            GEMM_PAR(T)(j->ctx, false, true, g->k, crs, ld, 1, src, ld, col, ld, 1, acc, crs);      \
        }                                                                                           \
    }
FLOAT_CHUNKS(grad_weight_chunk, CONV2D_GRAD_WEIGHT_CHUNK_BODY, begin, end)

#define CONV2D_GRAD_WEIGHT_BODY(T)                                                                  \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        T *gw = (T *)mst_tensor_data(c->out[0]);                                                    \
        int64_t crs = g.c * g.r * g.s, pq = g.p * g.q, kcrs = g.k * crs;                            \
        if (g.n == 0) {                                                                             \
            memset(gw, 0, mst_tensor_nbytes(c->out[0]));                                            \
            return MST_OK;                                                                          \
        }                                                                                           \
        bool direct = is_pointwise(&g);                                                             \
        int64_t min_n = min_images(&g);                                                             \
        int chunks = mst_parallel_chunks_ctx(ctx, g.n, min_n);                                      \
        int64_t nb = direct ? 1 : group_size(&g, sizeof(T), (g.n + chunks - 1) / chunks);           \
        size_t col_n = direct ? 0 : (size_t)(crs * nb * pq), tile_n = nb > 1 ? (size_t)(g.k * nb * pq) : 0; \
        size_t per = line_round(col_n + tile_n + (chunks > 1 ? (size_t)kcrs : 0), sizeof(T));      \
        T *ws = (T *)scratch_get(ctx, (size_t)chunks * per, sizeof(T));                             \
        if (!ws) return ctx->status;                                                                \
        conv_job job = {ctx, &g, mst_tensor_data(c->in[0]), mst_tensor_data(c->in[1]), NULL, NULL, gw, ws, col_n, \
                        tile_n, per, nb, 0};                                                        \
        mst_parallel_for(ctx, g.n, min_n, FLOAT_CHUNK(grad_weight_chunk, T), &job);                 \
        /* partials in chunk order: the same sum for the same thread count */                       \
        for (int w = 1; w < chunks; w++) {                                                          \
            const T *part = ws + (size_t)w * per + col_n + tile_n;                                  \
            for (int64_t i = 0; i < kcrs; i++) gw[i] += part[i];                                    \
        }                                                                                           \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d_grad_weight, CONV2D_GRAD_WEIGHT_BODY)

#define CONV2D_GRAD_WEIGHT_REF_BODY(T)                                                              \
    {                                                                                               \
        conv_geom g = conv_geom_of(c);                                                              \
        const T *gy = (const T *)mst_tensor_data(c->in[0]), *x = (const T *)mst_tensor_data(c->in[1]); \
        T *gw = (T *)mst_tensor_data(c->out[0]);                                                    \
        for (int64_t k = 0; k < g.k; k++)                                                           \
            for (int64_t ci = 0; ci < g.c; ci++)                                                    \
                for (int64_t r = 0; r < g.r; r++)                                                   \
                    for (int64_t s = 0; s < g.s; s++) {                                             \
                        double acc = 0;                                                             \
                        for (int64_t n = 0; n < g.n; n++)                                           \
                            for (int64_t p = 0; p < g.p; p++)                                       \
                                for (int64_t q = 0; q < g.q; q++) {                                 \
                                    int64_t ih = p * g.sh - g.ph + r, iw = q * g.sw - g.pw + s;     \
                                    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;       \
                                    acc += gy[((n * g.k + k) * g.p + p) * g.q + q] *                \
                                           x[((n * g.c + ci) * g.h + ih) * g.w + iw];               \
                                }                                                                   \
                        gw[((k * g.c + ci) * g.r + r) * g.s + s] = (T)acc;                          \
                    }                                                                               \
        return MST_OK;                                                                              \
    }
FLOAT_KERNELS(conv2d_grad_weight_ref, CONV2D_GRAD_WEIGHT_REF_BODY)

static mst_status conv2d_grad_weight_builtin_f32(mst_ctx *ctx, const mst_op_call *c) {
    conv_geom g = conv_geom_of(c);
    if (mst_conv_direct_applies(c, &g)) return mst_conv_direct_grad_weight(ctx, c, &g);
    return mst_call_has_blocked(c) ? mst_layout_run_plain(ctx, c, conv2d_grad_weight_f32) : conv2d_grad_weight_f32(ctx, c);
}

const mst_op_desc mst_desc_conv2d_grad_weight = {
    .name = "conv2d_grad_weight", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .flags = MST_OPF_GRAD_OP | MST_OPF_PROMOTE,
    .attr_i = {"stride_h", "stride_w", "pad_h", "pad_w", "k_h", "k_w"},
    .infer = infer_conv2d_grad_weight,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = conv2d_grad_weight_builtin_f32, [MST_DTYPE_F64] = conv2d_grad_weight_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(conv2d_grad_weight_ref), .flops = conv_flops,
    .blocked_in = 1u << 0 | 1u << 1, .builtin_takes_blocked = conv_builtin_takes_blocked,
};

/* ---- public constructors ---- */

mst_tensor *mst_conv2d(mst_ctx *ctx, mst_tensor *x, mst_tensor *w, mst_tensor *bias, int stride_h, int stride_w,
                       int pad_h, int pad_w) {
    mst_attrs a = {.i = {stride_h, stride_w, pad_h, pad_w}};
    return mst_dispatch1(ctx, MST_OP_CONV2D, bias ? 3 : 2, (mst_tensor *[]){x, w, bias}, &a);
}

mst_tensor *mst_conv2d_grad_input(mst_ctx *ctx, mst_tensor *gy, mst_tensor *w, int in_h, int in_w, int stride_h,
                                  int stride_w, int pad_h, int pad_w) {
    mst_attrs a = {.i = {stride_h, stride_w, pad_h, pad_w, in_h, in_w}};
    return mst_dispatch1(ctx, MST_OP_CONV2D_GRAD_INPUT, 2, (mst_tensor *[]){gy, w}, &a);
}

mst_tensor *mst_conv2d_grad_weight(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, int k_h, int k_w, int stride_h,
                                   int stride_w, int pad_h, int pad_w) {
    mst_attrs a = {.i = {stride_h, stride_w, pad_h, pad_w, k_h, k_w}};
    return mst_dispatch1(ctx, MST_OP_CONV2D_GRAD_WEIGHT, 2, (mst_tensor *[]){gy, x}, &a);
}
