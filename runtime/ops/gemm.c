/* gemm.c — see gemm.h. */
#include "runtime/ops/gemm.h"

#include <cblas.h>

#include "runtime/threadpool.h"

void op_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

void op_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* ---- split over the pool ---- */

/* Blocks are whole multiples of this many columns (rows): a 64-byte line of f32 per row of C. */
enum { k_gemm_unit = 16 };

typedef struct {
    bool f64, ta, tb, split_n;      /* split_n: blocks of C's columns, else of its rows */
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const void *a, *b;
    void *c;
} gemm_job;

/* Units [u0, u1) of 16 columns (rows) of C: the same product on the matching slices. Column j of
 * C needs column j of op(B): b + j when B is (K, N), row j (b + j ldb) when it is transposed; row
 * i of C needs row i of op(A) likewise. */
static void gemm_block(void *arg, int64_t u0, int64_t u1, int worker) {
    const gemm_job *g = arg;
    int64_t len = g->split_n ? g->n : g->m, lo = u0 * k_gemm_unit, hi = u1 * k_gemm_unit;
    if (hi > len) hi = len;
    int64_t m = g->m, n = g->n, a_off = 0, b_off = 0, c_off;
    if (g->split_n) {
        n = hi - lo;
        b_off = g->tb ? lo * g->ldb : lo;
        c_off = lo;
    } else {
        m = hi - lo;
        a_off = g->ta ? lo : lo * g->lda;
        c_off = lo * g->ldc;
    }
    if (g->f64)
        op_gemm_f64(g->ta, g->tb, m, n, g->k, g->alpha, (const double *)g->a + a_off, g->lda,
                    (const double *)g->b + b_off, g->ldb, g->beta, (double *)g->c + c_off, g->ldc);
    else
        op_gemm_f32(g->ta, g->tb, m, n, g->k, (float)g->alpha, (const float *)g->a + a_off, g->lda,
                    (const float *)g->b + b_off, g->ldb, (float)g->beta, (float *)g->c + c_off, g->ldc);
}

/* Split the larger of M and N: every block packs all of the other operand, so this keeps the
 * repeated packing smallest. False when the product is too small to split. */
static bool gemm_plan(mst_ctx *ctx, gemm_job *g, int64_t *units, int64_t *min_chunk) {
    if (g->m == 0 || g->n == 0 || g->k == 0) return false;
    g->split_n = g->n >= g->m;
    int64_t len = g->split_n ? g->n : g->m, other = g->split_n ? g->m : g->n;
    double unit_flops = 2.0 * k_gemm_unit * (double)other * (double)g->k;
    *units = (len + k_gemm_unit - 1) / k_gemm_unit;
    *min_chunk = par_min_items(unit_flops);
    return mst_parallel_chunks_ctx(ctx, *units, *min_chunk) > 1;
}

void op_gemm_par_f32(mst_ctx *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    gemm_job g = {false, ta, tb, false, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
    int64_t units, min_chunk;
    if (gemm_plan(ctx, &g, &units, &min_chunk)) mst_parallel_for(ctx, units, min_chunk, gemm_block, &g);
    else op_gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void op_gemm_par_f64(mst_ctx *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                     int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    gemm_job g = {true, ta, tb, false, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
    int64_t units, min_chunk;
    if (gemm_plan(ctx, &g, &units, &min_chunk)) mst_parallel_for(ctx, units, min_chunk, gemm_block, &g);
    else op_gemm_f64(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
