/* bn_rows.h — batch norm's per-row sums and per-row applies, defined to the bit (internal to
 * runtime/ops).
 *
 * A channel's statistics sum one (image, channel) row of S f32 values at a time: sixteen partial
 * sums in double, partial k taking the elements i = k (mod 16) in order, added up by one fixed
 * tree ((p0 + p1) + (p2 + p3)) + ... . The AVX-512 path (two 8-lane accumulators, chosen at run
 * time, MSTUNE_CPU_MASK honoured) and the portable path give the same bits, for any thread
 * count. The applies (y from x; gx from gy and x) compute the f32 expressions of the comments
 * below, one rounding per operation in the order written, on both paths. The batch-norm kernels
 * of (N, C, H, W) f32 and half tensors (runtime/ops/norm.c; half rows widened first) go through
 * these.
 * Double adds cannot be reordered by the compiler; sixteen independent chains keep the adds from
 * waiting on each other.
 *
 *     double sum = mst_bn_row_sum(x + row, s);                 // sum of x
 *     double dev = mst_bn_row_sum_dev2(x + row, s, mean);      // sum of (x - mean)^2
 */
#ifndef MST_RUNTIME_OPS_BN_ROWS_H
#define MST_RUNTIME_OPS_BN_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/dtype.h"

/* What a row's sum adds per element: x; (x - m)^2; gy (x - m). */
typedef enum { MST_BN_SUM_X, MST_BN_SUM_DEV2, MST_BN_SUM_GYX } mst_bn_sum_kind;

/* The sum of kind k over elements [0, s) (gy only for MST_BN_SUM_GYX); vector = false forces the
 * portable path (tests). */
double mst_bn_row_sum_path(mst_bn_sum_kind k, const float *x, const float *gy, int64_t s, double m, bool vector);

static inline double mst_bn_row_sum(const float *x, int64_t s) { return mst_bn_row_sum_path(MST_BN_SUM_X, x, 0, s, 0, true); }
static inline double mst_bn_row_sum_dev2(const float *x, int64_t s, double m) {
    return mst_bn_row_sum_path(MST_BN_SUM_DEV2, x, 0, s, m, true);
}
static inline double mst_bn_row_sum_gyx(const float *gy, const float *x, int64_t s, double m) {
    return mst_bn_row_sum_path(MST_BN_SUM_GYX, x, gy, s, m, true);
}

/* y[i] = (x[i] - m) a + b, then 0 where relu and y[i] <= 0 (NaN kept); y may be x. */
void mst_bn_row_apply_path(const float *x, float *y, int64_t s, float m, float a, float b, bool relu, bool vector);
/* Training (x given): gx[i] = a ((gy[i] - mg) - (x[i] - m) q); evaluation (x NULL): gx[i] = a gy[i].
 * gx may be gy. */
void mst_bn_row_grad_apply_path(const float *gy, const float *x, float *gx, int64_t s, float a, float mg, float m,
                                float q, bool vector);

/* The same on half rows (dt f16 or bf16), widened exactly in registers instead of into a
 * buffer first: the sum is mst_bn_row_sum_path's on the widened row, bit for bit; the applies
 * write their f32 results (the caller rounds them to half). */
double mst_bn_row_sum_half_path(mst_bn_sum_kind k, mst_dtype dt, const uint16_t *x, const uint16_t *gy, int64_t s,
                                double m, bool vector);
void mst_bn_row_apply_half_path(mst_dtype dt, const uint16_t *x, float *y, int64_t s, float m, float a, float b,
                                bool relu, bool vector);
void mst_bn_row_grad_apply_half_path(mst_dtype dt, const uint16_t *gy, const uint16_t *x, float *gx, int64_t s,
                                     float a, float mg, float m, float q, bool vector);

static inline void mst_bn_row_apply(const float *x, float *y, int64_t s, float m, float a, float b, bool relu) {
    mst_bn_row_apply_path(x, y, s, m, a, b, relu, true);
}
static inline void mst_bn_row_grad_apply(const float *gy, const float *x, float *gx, int64_t s, float a, float mg,
                                         float m, float q) {
    mst_bn_row_grad_apply_path(gy, x, gx, s, a, mg, m, q, true);
}

/* nChw16c slabs (runtime/layout.h): 16 interleaved rows of s values, element i of lane l at
 * [16 i + l]. sums: out[l] = lane l's row sum of kind k (m[l] its mean), with the sixteen partials
 * above or, four_partials, the direct kernel's four (norm.c: planes under 64 values); applies: the
 * row applies above per lane, m, a, b, mg, q arrays of 16. Same bits as the row functions on the
 * same rows, on both paths. */
void mst_bn_slab_sums_path(mst_bn_sum_kind k, const float *x, const float *gy, int64_t s, const double *m, bool four_partials,
                           double *out, bool vector);
void mst_bn_slab_apply_path(const float *x, float *y, int64_t s, const float *m, const float *a, const float *b, bool relu,
                            bool vector);
void mst_bn_slab_grad_apply_path(const float *gy, const float *x, float *gx, int64_t s, const float *a, const float *mg,
                                 const float *m, const float *q, bool vector);
/* The same on f32 or (bf16) bf16 slabs, widened exactly in registers; the applies write f32 (the
 * caller rounds to bf16). */
void mst_bn_slab_sums_any(mst_bn_sum_kind k, bool bf16, const void *x, const void *gy, int64_t s, const double *m,
                          bool four_partials, double *out, bool vector);
/* Both sums of batch norm's gradient in one pass: sum_gy[l] = the MST_BN_SUM_X sum of gy's lane l,
 * sum_gyx[l] = the MST_BN_SUM_GYX sum of (x, gy): the two calls' bits, each row widened once. */
void mst_bn_slab_grad_sums_any(bool bf16, const void *x, const void *gy, int64_t s, const double *m, bool four_partials,
                               double *sum_gy, double *sum_gyx, bool vector);
void mst_bn_slab_apply_any(bool bf16, const void *x, float *y, int64_t s, const float *m, const float *a, const float *b,
                           bool relu, bool vector);
void mst_bn_slab_grad_apply_any(bool bf16, const void *gy, const void *x, float *gx, int64_t s, const float *a, const float *mg,
                                const float *m, const float *q, bool vector);

#endif
