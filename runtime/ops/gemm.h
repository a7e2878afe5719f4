/* gemm.h — the row-major GEMM wrappers matmul, linear and conv2d share: OpenBLAS sgemm/dgemm
 * with the degenerate sizes (m, n or k of 0) handled, and the 32-bit bound BLAS dimensions obey.
 *
 * OpenBLAS runs single-threaded (mst_ctx_set_threads); op_gemm_par_* spread one product over the
 * context's pool instead, as independent column (or row) blocks of C, each one BLAS call on its
 * own thread — the mode OpenBLAS documents as safe for concurrent callers. Blocks are multiples of
 * 16 columns and at least k_par_min_chunk_flops of work, so small products stay on one thread,
 * and the split depends only on the shape and the thread count: the same bits run to run.
 *
 *     op_gemm_par_f32(ctx, false, true, m, n, k, 1, x, k, w, k, 0, y, n);   // y = x w^T
 */
#ifndef MST_RUNTIME_OPS_GEMM_H
#define MST_RUNTIME_OPS_GEMM_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mst_ctx mst_ctx;

/* C = alpha op(A) op(B) + beta C, row-major; k == 0 gives C = beta C (BLAS leaves lda = 0 undefined). */
void op_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void op_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/* The same product split over ctx's pool (inline when it is small, or called from a region). */
void op_gemm_par_f32(mst_ctx *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void op_gemm_par_f64(mst_ctx *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                     int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

#define GEMM(T) _Generic((T)0, float: op_gemm_f32, double: op_gemm_f64)
#define GEMM_PAR(T) _Generic((T)0, float: op_gemm_par_f32, double: op_gemm_par_f64)

/* The least work a chunk of a parallel region gets (matmul, linear, conv2d): about 35 us of one
 * core's sgemm. Opening a region costs the caller a futex wake (about 9 us on the 2-core VM of
 * bench/bench_core) and a sleeping worker 25-30 us more to start, so a 64x128x256 product (4 MFLOP)
 * split in two ran no faster than on one thread there (0.04 ms), while 64x256x784 (26 MFLOP) ran
 * 1.7x faster. */
static const double k_par_min_chunk_flops = 4.0e6;

/* Items per chunk when each item is item_flops of work: at least one. */
static inline int64_t par_min_items(double item_flops) {
    return (int64_t)(k_par_min_chunk_flops / (item_flops > 1 ? item_flops : 1)) + 1;
}

/* Every BLAS dimension and leading dimension must fit its 32-bit int. */
static inline bool blas_fits(int64_t v) { return v >= 0 && v < INT_MAX; }

#endif
