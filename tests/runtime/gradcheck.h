/* gradcheck.h — table-driven gradient checks by central finite differences in f64, and
 * fast-vs-reference kernel comparisons, shared by the op family tests.
 *
 * A case names its inputs (shape, how to fill them, whether they get gradients) and a build
 * function that applies the op(s) under test. The checker computes L = sum(y * r) for a fixed
 * random r, backpropagates, and compares each analytic gradient element with
 * (L(x + h) - L(x - h)) / 2h. Seeds are printed on failure; MST_TEST_SEED overrides them.
 *
 *     static mst_tensor *build_relu(mst_ctx *ctx, mst_tensor *const in[], const void *arg) {
 *         return mst_relu(ctx, in[0]);
 *     }
 *     static const gc_case cases[] = {
 *         {"relu", build_relu, NULL, 1, {{2, {3, 4}, GC_AWAY_FROM_ZERO, true}}},
 *     };
 *     gc_check_all(cases, 1);      // cmocka assertions inside
 */
#ifndef MST_TESTS_GRADCHECK_H
#define MST_TESTS_GRADCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"

typedef enum {
    GC_RANDN,           /* N(0, 1) */
    GC_AWAY_FROM_ZERO,  /* |x| in [0.2, 1.2], random sign: keeps ReLU-like kinks out of reach of h */
    GC_POSITIVE,        /* U[0.5, 1.5] (divisors, variances) */
    GC_LABELS,          /* i32 in [0, range) */
    GC_ZEROS,
    GC_ONES,
    GC_DISTINCT,        /* a shuffled arithmetic sequence: no ties (max pooling) */
} gc_fill;

typedef struct {
    int ndim;
    int64_t shape[MST_MAX_DIMS];
    gc_fill fill;
    bool diff;          /* check the gradient of this input */
    int64_t range;      /* GC_LABELS: labels in [0, range) */
} gc_input;

typedef mst_tensor *(*gc_build_fn)(mst_ctx *ctx, mst_tensor *const in[], const void *arg);

typedef struct {
    const char *name;
    gc_build_fn build;
    const void *arg;
    int n_inputs;
    gc_input inputs[MST_MAX_OP_INPUTS];
    double tol;         /* 0: default 1e-6 relative + 1e-7 absolute */
} gc_case;

/* Gradient checks; fails the calling cmocka test on any mismatch. */
void gc_check_all(const gc_case *cases, int n);
/* Returns the worst relative error instead of asserting (for tests of the checker itself). */
double gc_check_one(const gc_case *c, uint64_t seed);

/* Run each case's build in f32 with fast and reference kernels and compare outputs elementwise. */
void gc_check_ref_all(const gc_case *cases, int n, double tol);

/* Inputs for a case, as the checker makes them (f64, or i32 labels), pooled in ctx. */
void gc_make_inputs(mst_ctx *ctx, const gc_case *c, mst_dtype float_dtype, mst_tensor *in[]);

uint64_t gc_seed(void);     /* MST_TEST_SEED, or 1234 */

/* Error-path checks: y must be NULL, the context's status `status`, and its message must contain
 * every needle; the error is cleared afterwards.
 *     GC_EXPECT_ERROR(ctx, mst_add(ctx, a, b), MST_ERR_SHAPE, "add", "broadcast");   */
void gc_expect_error(mst_ctx *ctx, const mst_tensor *y, mst_status status, const char *const needles[]);
#define GC_EXPECT_ERROR(ctx, y, status, ...) gc_expect_error(ctx, y, status, (const char *const[]){__VA_ARGS__, NULL})
/* A zero-filled pooled tensor; fails the test when it cannot be made. */
mst_tensor *gc_zeros(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape);

#endif
