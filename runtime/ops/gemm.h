/* gemm.h — the row-major GEMM wrappers matmul, linear and conv2d share: OpenBLAS sgemm/dgemm
 * with the degenerate sizes (m, n or k of 0) handled, and the 32-bit bound BLAS dimensions obey. */
#ifndef MST_RUNTIME_OPS_GEMM_H
#define MST_RUNTIME_OPS_GEMM_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* C = alpha op(A) op(B) + beta C, row-major; k == 0 gives C = beta C (BLAS leaves lda = 0 undefined). */
void op_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void op_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

#define GEMM(T) _Generic((T)0, float: op_gemm_f32, double: op_gemm_f64)

/* Every BLAS dimension and leading dimension must fit its 32-bit int. */
static inline bool blas_fits(int64_t v) { return v >= 0 && v < INT_MAX; }

#endif
