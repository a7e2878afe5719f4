/* bn_rows.c — batch norm's per-row sums and applies: the portable and AVX-512 paths of one
 * definition (runtime/ops/bn_rows.h). */
#include "runtime/ops/bn_rows.h"

#include <string.h>

#include "runtime/amp/half.h"
#include "runtime/cpu_features.h"

enum { k_lanes = 16 };

static double lanes_total(const double a[k_lanes]) {
    double s8[8], s4[4];
    for (int k = 0; k < 8; k++) s8[k] = a[2 * k] + a[2 * k + 1];
    for (int k = 0; k < 4; k++) s4[k] = s8[2 * k] + s8[2 * k + 1];
    return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

static inline double term(mst_bn_sum_kind k, const float *x, const float *gy, int64_t i, double m) {
    switch (k) {
    case MST_BN_SUM_X: return (double)x[i];
    case MST_BN_SUM_DEV2: return ((double)x[i] - m) * ((double)x[i] - m);
    default: return (double)gy[i] * ((double)x[i] - m);
    }
}

/* Whole blocks of 16 into sixteen locals the compiler keeps in registers (an array indexed by
 * i & 15 measured 2.2 ns an element against 0.06 for the AVX-512 path), then the tail. */
static double row_sum_portable(mst_bn_sum_kind k, const float *x, const float *gy, int64_t s, double m) {
    double a[k_lanes] = {0};
    int64_t i = 0;
    for (; i + k_lanes <= s; i += k_lanes) {
        double b0 = term(k, x, gy, i, m), b1 = term(k, x, gy, i + 1, m), b2 = term(k, x, gy, i + 2, m);
        double b3 = term(k, x, gy, i + 3, m), b4 = term(k, x, gy, i + 4, m), b5 = term(k, x, gy, i + 5, m);
        double b6 = term(k, x, gy, i + 6, m), b7 = term(k, x, gy, i + 7, m), b8 = term(k, x, gy, i + 8, m);
        double b9 = term(k, x, gy, i + 9, m), b10 = term(k, x, gy, i + 10, m), b11 = term(k, x, gy, i + 11, m);
        double b12 = term(k, x, gy, i + 12, m), b13 = term(k, x, gy, i + 13, m), b14 = term(k, x, gy, i + 14, m);
        double b15 = term(k, x, gy, i + 15, m);
        a[0] += b0, a[1] += b1, a[2] += b2, a[3] += b3, a[4] += b4, a[5] += b5, a[6] += b6, a[7] += b7;
        a[8] += b8, a[9] += b9, a[10] += b10, a[11] += b11, a[12] += b12, a[13] += b13, a[14] += b14, a[15] += b15;
    }
    for (; i < s; i++) a[i & (k_lanes - 1)] += term(k, x, gy, i, m);
    return lanes_total(a);
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static inline __m512d load8(const float *p, int64_t i) {
    return _mm512_cvtps_pd(_mm256_loadu_ps(p + i));
}

__attribute__((target("avx512f"), always_inline)) static inline __m512d term8(mst_bn_sum_kind k, const float *x,
                                                                              const float *gy, int64_t i, __m512d m) {
    if (k == MST_BN_SUM_X) return load8(x, i);
    __m512d d = _mm512_sub_pd(load8(x, i), m);
    return k == MST_BN_SUM_DEV2 ? _mm512_mul_pd(d, d) : _mm512_mul_pd(load8(gy, i), d);
}

/* Inlined into one function per kind (below), so the loop carries no switch. */
__attribute__((target("avx512f"), always_inline)) static inline double row_sum_avx512(mst_bn_sum_kind k, const float *x,
                                                                                      const float *gy, int64_t s, double m) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd(), mv = _mm512_set1_pd(m);
    int64_t i = 0;
    for (; i + k_lanes <= s; i += k_lanes) {
        lo = _mm512_add_pd(lo, term8(k, x, gy, i, mv));
        hi = _mm512_add_pd(hi, term8(k, x, gy, i + 8, mv));
    }
    double a[k_lanes];
    _mm512_storeu_pd(a, lo);
    _mm512_storeu_pd(a + 8, hi);
    for (; i < s; i++) a[i & (k_lanes - 1)] += term(k, x, gy, i, m);
    return lanes_total(a);
}

__attribute__((target("avx512f"))) static double row_sum_x_avx512(const float *x, int64_t s) {
    return row_sum_avx512(MST_BN_SUM_X, x, 0, s, 0);
}
__attribute__((target("avx512f"))) static double row_sum_dev2_avx512(const float *x, int64_t s, double m) {
    return row_sum_avx512(MST_BN_SUM_DEV2, x, 0, s, m);
}
__attribute__((target("avx512f"))) static double row_sum_gyx_avx512(const float *x, const float *gy, int64_t s, double m) {
    return row_sum_avx512(MST_BN_SUM_GYX, x, gy, s, m);
}
#endif

double mst_bn_row_sum_path(mst_bn_sum_kind k, const float *x, const float *gy, int64_t s, double m, bool vector) {
#if defined(__x86_64__)
    if (vector && mst_cpu_has(MST_CPU_AVX512F)) {
        switch (k) {
        case MST_BN_SUM_X: return row_sum_x_avx512(x, s);
        case MST_BN_SUM_DEV2: return row_sum_dev2_avx512(x, s, m);
        default: return row_sum_gyx_avx512(x, gy, s, m);
        }
    }
#endif
    return row_sum_portable(k, x, gy, s, m);
}

/* ---- applies ---- */

static void row_apply_portable(const float *x, float *y, int64_t s, float m, float a, float b, bool relu) {
    for (int64_t i = 0; i < s; i++) {
        float v = (x[i] - m) * a + b;
        y[i] = relu && v <= 0 ? 0.0f : v;
    }
}

static void row_grad_apply_portable(const float *gy, const float *x, float *gx, int64_t s, float a, float mg, float m,
                                    float q) {
    if (!x) {
        for (int64_t i = 0; i < s; i++) gx[i] = a * gy[i];
        return;
    }
    for (int64_t i = 0; i < s; i++) gx[i] = a * ((gy[i] - mg) - (x[i] - m) * q);
}

#if defined(__x86_64__)
/* Sixteen lanes a step, the last partial step under a mask; the operations of the portable loop
 * one by one (the build never contracts a*b+c into an FMA). */
__attribute__((target("avx512f"))) static void row_apply_avx512(const float *x, float *y, int64_t s, float m, float a,
                                                                float b, bool relu) {
    __m512 mv = _mm512_set1_ps(m), av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < s; i += 16) {
        __mmask16 k = s - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (s - i)) - 1);
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv), av), bv);
        if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), zero);
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

__attribute__((target("avx512f"))) static void row_grad_apply_avx512(const float *gy, const float *x, float *gx,
                                                                     int64_t s, float a, float mg, float m, float q) {
    __m512 av = _mm512_set1_ps(a), mgv = _mm512_set1_ps(mg), mv = _mm512_set1_ps(m), qv = _mm512_set1_ps(q);
    for (int64_t i = 0; i < s; i += 16) {
        __mmask16 k = s - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (s - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(k, gy + i), v;
        if (x)
            v = _mm512_mul_ps(av, _mm512_sub_ps(_mm512_sub_ps(g, mgv),
                                                _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv), qv)));
        else
            v = _mm512_mul_ps(av, g);
        _mm512_mask_storeu_ps(gx + i, k, v);
    }
}
#endif

void mst_bn_row_apply_path(const float *x, float *y, int64_t s, float m, float a, float b, bool relu, bool vector) {
#if defined(__x86_64__)
    if (vector && mst_cpu_has(MST_CPU_AVX512F)) {
        row_apply_avx512(x, y, s, m, a, b, relu);
        return;
    }
#endif
    row_apply_portable(x, y, s, m, a, b, relu);
}

void mst_bn_row_grad_apply_path(const float *gy, const float *x, float *gx, int64_t s, float a, float mg, float m,
                                float q, bool vector) {
#if defined(__x86_64__)
    if (vector && mst_cpu_has(MST_CPU_AVX512F)) {
        row_grad_apply_avx512(gy, x, gx, s, a, mg, m, q);
        return;
    }
#endif
    row_grad_apply_portable(gy, x, gx, s, a, mg, m, q);
}

/* ---- half rows ----
 *
 * The portable path widens 16 values at a time into a small buffer (mst_half_to_f32: exact on
 * every path) and runs the f32 row function on it piece by piece, so its lanes see the elements
 * a whole-row call would: a block of 16 starts at a multiple of 16, where partial k takes
 * element i = k (mod 16). The AVX-512 path widens in registers (bf16: a 16-bit shift; f16:
 * vcvtph2ps, as half.c's AVX-512 path). */

enum { k_half_piece = 256 };    /* a multiple of 16: pieces keep the lanes' element order */

static double half_sum_pieces(mst_bn_sum_kind k, mst_dtype dt, const uint16_t *x, const uint16_t *gy, int64_t s,
                              double m) {
    double a[k_lanes] = {0};
    float xf[k_half_piece], gf[k_half_piece];
    for (int64_t i0 = 0; i0 < s; i0 += k_half_piece) {
        int64_t n = s - i0 < k_half_piece ? s - i0 : k_half_piece;
        mst_half_to_f32(dt, x + i0, xf, (size_t)n);
        if (gy) mst_half_to_f32(dt, gy + i0, gf, (size_t)n);
        for (int64_t i = 0; i < n; i++) a[i & (k_lanes - 1)] += term(k, xf, gf, i, m);
    }
    return lanes_total(a);
}

static void half_apply_pieces(mst_dtype dt, const uint16_t *x, float *y, int64_t s, float m, float a, float b,
                              bool relu) {
    for (int64_t i0 = 0; i0 < s; i0 += k_half_piece) {
        int64_t n = s - i0 < k_half_piece ? s - i0 : k_half_piece;
        mst_half_to_f32(dt, x + i0, y + i0, (size_t)n);
        row_apply_portable(y + i0, y + i0, n, m, a, b, relu);
    }
}

static void half_grad_apply_pieces(mst_dtype dt, const uint16_t *gy, const uint16_t *x, float *gx, int64_t s, float a,
                                   float mg, float m, float q) {
    float xf[k_half_piece];
    for (int64_t i0 = 0; i0 < s; i0 += k_half_piece) {
        int64_t n = s - i0 < k_half_piece ? s - i0 : k_half_piece;
        mst_half_to_f32(dt, gy + i0, gx + i0, (size_t)n);
        if (x) mst_half_to_f32(dt, x + i0, xf, (size_t)n);
        row_grad_apply_portable(gx + i0, x ? xf : NULL, gx + i0, n, a, mg, m, q);
    }
}

#if defined(__x86_64__)
/* The half paths load 16-bit lanes under a mask (AVX512BW/VL). */
#define HALF_TARGET "avx512f,avx512bw,avx512vl"

/* 16 half values (masked: the lanes outside k read as +0, unread) widened to f32. */
__attribute__((target(HALF_TARGET), always_inline)) static inline __m512 widen16(mst_dtype dt, const uint16_t *p,
                                                                                 __mmask16 k) {
    __m256i h = _mm256_maskz_loadu_epi16(k, p);
    if (dt == MST_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

__attribute__((target(HALF_TARGET), always_inline)) static inline __m512d lo8(__m512 v) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
__attribute__((target(HALF_TARGET), always_inline)) static inline __m512d hi8(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

__attribute__((target(HALF_TARGET), always_inline)) static inline double half_sum_avx512(
    mst_bn_sum_kind k, mst_dtype dt, const uint16_t *x, const uint16_t *gy, int64_t s, double m) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd(), mv = _mm512_set1_pd(m);
    int64_t i = 0;
    for (; i + k_lanes <= s; i += k_lanes) {
        __m512 xv = widen16(dt, x + i, 0xffff);
        __m512d xl = lo8(xv), xh = hi8(xv);
        if (k == MST_BN_SUM_X) {
            lo = _mm512_add_pd(lo, xl);
            hi = _mm512_add_pd(hi, xh);
        } else {
            __m512d dl = _mm512_sub_pd(xl, mv), dh = _mm512_sub_pd(xh, mv);
            if (k == MST_BN_SUM_DEV2) {
                lo = _mm512_add_pd(lo, _mm512_mul_pd(dl, dl));
                hi = _mm512_add_pd(hi, _mm512_mul_pd(dh, dh));
            } else {
                __m512 gv = widen16(dt, gy + i, 0xffff);
                lo = _mm512_add_pd(lo, _mm512_mul_pd(lo8(gv), dl));
                hi = _mm512_add_pd(hi, _mm512_mul_pd(hi8(gv), dh));
            }
        }
    }
    double a[k_lanes];
    _mm512_storeu_pd(a, lo);
    _mm512_storeu_pd(a + 8, hi);
    if (i < s) {
        __mmask16 km = (__mmask16)((1u << (s - i)) - 1);
        float xf[k_lanes], gf[k_lanes];
        _mm512_storeu_ps(xf, widen16(dt, x + i, km));
        if (gy) _mm512_storeu_ps(gf, widen16(dt, gy + i, km));
        for (int64_t t = 0; t < s - i; t++) a[t] += term(k, xf, gf, t, m);
    }
    return lanes_total(a);
}

__attribute__((target(HALF_TARGET))) static double half_sum_x_avx512(mst_dtype dt, const uint16_t *x, int64_t s) {
    return half_sum_avx512(MST_BN_SUM_X, dt, x, 0, s, 0);
}
__attribute__((target(HALF_TARGET))) static double half_sum_dev2_avx512(mst_dtype dt, const uint16_t *x, int64_t s,
                                                                      double m) {
    return half_sum_avx512(MST_BN_SUM_DEV2, dt, x, 0, s, m);
}
__attribute__((target(HALF_TARGET))) static double half_sum_gyx_avx512(mst_dtype dt, const uint16_t *x,
                                                                     const uint16_t *gy, int64_t s, double m) {
    return half_sum_avx512(MST_BN_SUM_GYX, dt, x, gy, s, m);
}

__attribute__((target(HALF_TARGET))) static void half_apply_avx512(mst_dtype dt, const uint16_t *x, float *y, int64_t s,
                                                                 float m, float a, float b, bool relu) {
    __m512 mv = _mm512_set1_ps(m), av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < s; i += 16) {
        __mmask16 k = s - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (s - i)) - 1);
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(widen16(dt, x + i, k), mv), av), bv);
        if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), zero);
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

__attribute__((target(HALF_TARGET))) static void half_grad_apply_avx512(mst_dtype dt, const uint16_t *gy,
                                                                      const uint16_t *x, float *gx, int64_t s, float a,
                                                                      float mg, float m, float q) {
    __m512 av = _mm512_set1_ps(a), mgv = _mm512_set1_ps(mg), mv = _mm512_set1_ps(m), qv = _mm512_set1_ps(q);
    for (int64_t i = 0; i < s; i += 16) {
        __mmask16 k = s - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (s - i)) - 1);
        __m512 g = widen16(dt, gy + i, k), v;
        if (x)
            v = _mm512_mul_ps(av, _mm512_sub_ps(_mm512_sub_ps(g, mgv),
                                                _mm512_mul_ps(_mm512_sub_ps(widen16(dt, x + i, k), mv), qv)));
        else
            v = _mm512_mul_ps(av, g);
        _mm512_mask_storeu_ps(gx + i, k, v);
    }
}
#endif

#if defined(__x86_64__)
static bool half_vector_ok(void) {
    return mst_cpu_has(MST_CPU_AVX512F) && mst_cpu_has(MST_CPU_AVX512BW) && mst_cpu_has(MST_CPU_AVX512VL);
}
#endif

double mst_bn_row_sum_half_path(mst_bn_sum_kind k, mst_dtype dt, const uint16_t *x, const uint16_t *gy, int64_t s,
                                double m, bool vector) {
#if defined(__x86_64__)
    if (vector && half_vector_ok()) {
        switch (k) {
        case MST_BN_SUM_X: return half_sum_x_avx512(dt, x, s);
        case MST_BN_SUM_DEV2: return half_sum_dev2_avx512(dt, x, s, m);
        default: return half_sum_gyx_avx512(dt, x, gy, s, m);
        }
    }
#endif
    return half_sum_pieces(k, dt, x, k == MST_BN_SUM_GYX ? gy : NULL, s, m);
}

void mst_bn_row_apply_half_path(mst_dtype dt, const uint16_t *x, float *y, int64_t s, float m, float a, float b,
                                bool relu, bool vector) {
#if defined(__x86_64__)
    if (vector && half_vector_ok()) {
        half_apply_avx512(dt, x, y, s, m, a, b, relu);
        return;
    }
#endif
    half_apply_pieces(dt, x, y, s, m, a, b, relu);
}

void mst_bn_row_grad_apply_half_path(mst_dtype dt, const uint16_t *gy, const uint16_t *x, float *gx, int64_t s,
                                     float a, float mg, float m, float q, bool vector) {
#if defined(__x86_64__)
    if (vector && half_vector_ok()) {
        half_grad_apply_avx512(dt, gy, x, gx, s, a, mg, m, q);
        return;
    }
#endif
    half_grad_apply_pieces(dt, gy, x, gx, s, a, mg, m, q);
}

/* ---- nChw16c slabs (runtime/layout.h) ----
 *
 * A slab holds the rows of 16 channels interleaved: element i of lane l at x[16 i + l]. Each
 * lane's sum is its row's sum with the plain kernels' partials — sixteen (i = k mod 16, added by
 * lanes_total's tree: the rows above) or, with four_partials, four (i = k mod 4 over whole groups
 * of four, the rest into partial 0, added as (p0 + p1) + (p2 + p3): norm.c's direct kernel, which
 * planes under 64 values keep) — so a blocked tensor's statistics are the plain tensor's, to the
 * bit. The generic bodies below are the portable path; the AVX-512 path after them computes each
 * lane's operations in the same order. */

typedef struct {
    double p[k_lanes][k_lanes];     /* [partial][lane] */
} slab_partials;

/* Element i of a slab of f32 values or, bf16, of bf16 values widened exactly (a 16-bit shift):
 * the same f32 value the widened copy would hold. */
__attribute__((always_inline)) static inline float slab_ld(const void *p, int64_t i, bool bf16) {
    if (!bf16) return ((const float *)p)[i];
    uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

__attribute__((always_inline)) static inline double slab_term(mst_bn_sum_kind k, const void *x, const void *gy, int64_t at,
                                                              double m, bool bf16) {
    switch (k) {
    case MST_BN_SUM_X: return (double)slab_ld(x, at, bf16);
    case MST_BN_SUM_DEV2: {
        double d = (double)slab_ld(x, at, bf16) - m;
        return d * d;
    }
    default: return (double)slab_ld(gy, at, bf16) * ((double)slab_ld(x, at, bf16) - m);
    }
}

__attribute__((always_inline)) static inline void slab_sums_body(mst_bn_sum_kind k, const void *x, const void *gy, int64_t s,
                                                                 const double *m, bool four, double *out, bool bf16) {
    slab_partials a;
    memset(&a, 0, sizeof(a));
    int64_t i = 0;
    if (four) {
        for (int64_t whole = s / 4 * 4; i < whole; i++)
            for (int l = 0; l < k_lanes; l++) a.p[i & 3][l] += slab_term(k, x, gy, i * k_lanes + l, m[l], bf16);
        for (; i < s; i++)
            for (int l = 0; l < k_lanes; l++) a.p[0][l] += slab_term(k, x, gy, i * k_lanes + l, m[l], bf16);
        for (int l = 0; l < k_lanes; l++) out[l] = (a.p[0][l] + a.p[1][l]) + (a.p[2][l] + a.p[3][l]);
        return;
    }
    for (; i < s; i++)
        for (int l = 0; l < k_lanes; l++) a.p[i & (k_lanes - 1)][l] += slab_term(k, x, gy, i * k_lanes + l, m[l], bf16);
    for (int l = 0; l < k_lanes; l++) {
        double s8[8], s4[4];
        for (int q = 0; q < 8; q++) s8[q] = a.p[2 * q][l] + a.p[2 * q + 1][l];
        for (int q = 0; q < 4; q++) s4[q] = s8[2 * q] + s8[2 * q + 1];
        out[l] = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    }
}

__attribute__((always_inline)) static inline void slab_apply_body(const void *x, float *y, int64_t s, const float *m,
                                                                  const float *a, const float *b, bool relu, bool bf16) {
    for (int64_t i = 0; i < s; i++)
        for (int l = 0; l < k_lanes; l++) {
            float v = (slab_ld(x, i * k_lanes + l, bf16) - m[l]) * a[l] + b[l];
            y[i * k_lanes + l] = relu && v <= 0 ? 0.0f : v;
        }
}

__attribute__((always_inline)) static inline void slab_grad_apply_body(const void *gy, const void *x, float *gx, int64_t s,
                                                                       const float *a, const float *mg, const float *m,
                                                                       const float *q, bool bf16) {
    if (!x) {
        for (int64_t i = 0; i < s * k_lanes; i++) gx[i] = a[i & (k_lanes - 1)] * slab_ld(gy, i, bf16);
        return;
    }
    for (int64_t i = 0; i < s; i++)
        for (int l = 0; l < k_lanes; l++) {
            int64_t e = i * k_lanes + l;
            gx[e] = a[l] * ((slab_ld(gy, e, bf16) - mg[l]) - (slab_ld(x, e, bf16) - m[l]) * q[l]);
        }
}

/* The bodies per kind and element type (so no loop carries a switch), portable and AVX-512. */
#define SLAB_FUNCS(SUF, ATTR, BF16)                                                                  \
    ATTR static void slab_sums_x_##SUF(const void *x, int64_t s, bool four, double *out) {           \
        static const double zero[k_lanes];                                                           \
        slab_sums_body(MST_BN_SUM_X, x, 0, s, zero, four, out, BF16);                                \
    }                                                                                                \
    ATTR static void slab_sums_dev2_##SUF(const void *x, int64_t s, const double *m, bool four, double *out) { \
        slab_sums_body(MST_BN_SUM_DEV2, x, 0, s, m, four, out, BF16);                                \
    }                                                                                                \
    ATTR static void slab_sums_gyx_##SUF(const void *x, const void *gy, int64_t s, const double *m, bool four, \
                                         double *out) {                                              \
        slab_sums_body(MST_BN_SUM_GYX, x, gy, s, m, four, out, BF16);                                \
    }                                                                                                \
    ATTR static void slab_apply_##SUF(const void *x, float *y, int64_t s, const float *m, const float *a, \
                                      const float *b, bool relu) {                                   \
        slab_apply_body(x, y, s, m, a, b, relu, BF16);                                               \
    }                                                                                                \
    ATTR static void slab_grad_apply_##SUF(const void *gy, const void *x, float *gx, int64_t s, const float *a, \
                                           const float *mg, const float *m, const float *q) {        \
        slab_grad_apply_body(gy, x, gx, s, a, mg, m, q, BF16);                                       \
    }
SLAB_FUNCS(portable, , false)
SLAB_FUNCS(bf16_portable, , true)

/* The gradient's two sums (gy; gy (x - m)) in one call: by definition the two calls above. */
static void slab_grad_sums_portable(const void *x, const void *gy, int64_t s, const double *m, bool four, double *sum_gy,
                                    double *sum_gyx) {
    slab_sums_x_portable(gy, s, four, sum_gy);
    slab_sums_gyx_portable(x, gy, s, m, four, sum_gyx);
}
static void slab_grad_sums_bf16_portable(const void *x, const void *gy, int64_t s, const double *m, bool four,
                                         double *sum_gy, double *sum_gyx) {
    slab_sums_x_bf16_portable(gy, s, four, sum_gy);
    slab_sums_gyx_bf16_portable(x, gy, s, m, four, sum_gyx);
}

#if defined(__x86_64__)
/* The AVX-512 path: a slab's element row (16 lanes) is one register, the per-lane parameters stay
 * in registers, and each lane's operations are the generic body's, in its order (the generic body
 * compiled for AVX-512 re-checked its pointers for overlap on every row).
 *
 * The sums go partial by partial: partial k's rows (i = k, k + 16, ... or, four, k, k + 4, ...
 * then the rest into partial 0) are added in their order with the partial in registers, where the
 * row-by-row order kept all sixteen partials in memory. The gradient's two sums share each row's
 * widening to double (most of a sum's work on Zen 5). On the cnn's batch-64 shapes with the data in
 * cache (bench_amp_kernels section 4, alternated with the generic body, 2 threads, Zen 5) batch
 * norm ran 1.2-1.6x and its gradient 1.35-2.5x as fast; in the training step, where the 28x28
 * tensors come from memory, the kernels gained a few percent (docs/benchmarks.md). */

enum { k_slab_chunk = 128 };    /* a multiple of sixteen and of four */

/* Row i (16 lanes) of a slab of f32 or bf16 values, widened exactly to f32. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 slab_row(const void *p, int64_t i, bool bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)p + i * k_lanes);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i * k_lanes));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The row widened to double: lanes 0-7 and 8-15. */
typedef struct {
    __m512d lo, hi;
} slab_row_pd;

__attribute__((target("avx512f"), always_inline)) static inline slab_row_pd slab_row_double(const void *p, int64_t i,
                                                                                            bool bf16) {
    __m512 v = slab_row(p, i, bf16);
    return (slab_row_pd){_mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                         _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))};
}

/* Partial sums of each kind a call adds: one for the sums, two (gy, gy (x - m)) for the gradient's. */
typedef struct {
    slab_row_pd p[k_lanes];
} slab_partials_pd;

/* kind GYX with both set adds gy to *a and gy (x - m) to *b; otherwise the kind's term to *a. */
__attribute__((target("avx512f"), always_inline)) static inline void slab_add_row(mst_bn_sum_kind k, bool both, const void *x,
                                                                                 const void *gy, int64_t i, slab_row_pd m,
                                                                                 slab_row_pd *a, slab_row_pd *b, bool bf16) {
    slab_row_pd v = slab_row_double(k == MST_BN_SUM_GYX ? gy : x, i, bf16);
    if (k == MST_BN_SUM_X) {
        a->lo = _mm512_add_pd(a->lo, v.lo), a->hi = _mm512_add_pd(a->hi, v.hi);
        return;
    }
    if (k == MST_BN_SUM_DEV2) {
        __m512d dl = _mm512_sub_pd(v.lo, m.lo), dh = _mm512_sub_pd(v.hi, m.hi);
        a->lo = _mm512_add_pd(a->lo, _mm512_mul_pd(dl, dl)), a->hi = _mm512_add_pd(a->hi, _mm512_mul_pd(dh, dh));
        return;
    }
    slab_row_pd xv = slab_row_double(x, i, bf16);
    __m512d tl = _mm512_mul_pd(v.lo, _mm512_sub_pd(xv.lo, m.lo)), th = _mm512_mul_pd(v.hi, _mm512_sub_pd(xv.hi, m.hi));
    if (both) {
        a->lo = _mm512_add_pd(a->lo, v.lo), a->hi = _mm512_add_pd(a->hi, v.hi);
        b->lo = _mm512_add_pd(b->lo, tl), b->hi = _mm512_add_pd(b->hi, th);
    } else {
        a->lo = _mm512_add_pd(a->lo, tl), a->hi = _mm512_add_pd(a->hi, th);
    }
}

/* The partials' total per lane: sixteen by lanes_total's tree, four as (p0 + p1) + (p2 + p3). */
__attribute__((target("avx512f"), always_inline)) static inline void slab_total(const slab_partials_pd *a, bool four,
                                                                               double *out) {
    __m512d lo, hi;
    if (four) {
        lo = _mm512_add_pd(_mm512_add_pd(a->p[0].lo, a->p[1].lo), _mm512_add_pd(a->p[2].lo, a->p[3].lo));
        hi = _mm512_add_pd(_mm512_add_pd(a->p[0].hi, a->p[1].hi), _mm512_add_pd(a->p[2].hi, a->p[3].hi));
    } else {
        __m512d l8[8], h8[8], l4[4], h4[4];
        for (int q = 0; q < 8; q++)
            l8[q] = _mm512_add_pd(a->p[2 * q].lo, a->p[2 * q + 1].lo), h8[q] = _mm512_add_pd(a->p[2 * q].hi, a->p[2 * q + 1].hi);
        for (int q = 0; q < 4; q++)
            l4[q] = _mm512_add_pd(l8[2 * q], l8[2 * q + 1]), h4[q] = _mm512_add_pd(h8[2 * q], h8[2 * q + 1]);
        lo = _mm512_add_pd(_mm512_add_pd(l4[0], l4[1]), _mm512_add_pd(l4[2], l4[3]));
        hi = _mm512_add_pd(_mm512_add_pd(h4[0], h4[1]), _mm512_add_pd(h4[2], h4[3]));
    }
    _mm512_storeu_pd(out, lo);
    _mm512_storeu_pd(out + 8, hi);
}

__attribute__((target("avx512f"), always_inline)) static inline void slab_sums_avx512_body(mst_bn_sum_kind k, bool both,
                                                                                          const void *x, const void *gy,
                                                                                          int64_t s, const double *m,
                                                                                          bool four, double *out,
                                                                                          double *out_b, bool bf16) {
    slab_partials_pd a, b;
    slab_row_pd mv = {_mm512_loadu_pd(m), _mm512_loadu_pd(m + 8)}, zero = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    int period = four ? 4 : k_lanes;
    int64_t whole = four ? s / 4 * 4 : s;
    for (int p = 0; p < period; p++) a.p[p] = b.p[p] = zero;
    /* chunks of k_slab_chunk rows (8 KB of f32 per operand), so the partial-by-partial order reads
     * the rows from L1; the next chunk is prefetched in order meanwhile (read in the partials' order
     * from memory, 28x28 f32 slabs ran at half the speed) */
    const void *ops[2] = {x, gy};
    int n_ops = k == MST_BN_SUM_GYX ? 2 : 1, row_bytes = bf16 ? 2 * k_lanes : 4 * k_lanes;
    for (int64_t c0 = 0; c0 < whole; c0 += k_slab_chunk) {
        int64_t c1 = c0 + k_slab_chunk < whole ? c0 + k_slab_chunk : whole, ahead = k_slab_chunk / period;
        for (int p = 0; p < period; p++) {
            for (int64_t r = c1 + p * ahead; r < c1 + (p + 1) * ahead && r < s; r++)
                for (int o = 0; o < n_ops; o++)
                    _mm_prefetch((const char *)ops[o] + r * row_bytes, _MM_HINT_T0);
            slab_row_pd pa = a.p[p], pb = b.p[p];
            for (int64_t i = c0 + p; i < c1; i += period) slab_add_row(k, both, x, gy, i, mv, &pa, &pb, bf16);
            a.p[p] = pa, b.p[p] = pb;
        }
    }
    for (int64_t i = whole; i < s; i++) slab_add_row(k, both, x, gy, i, mv, &a.p[0], &b.p[0], bf16);
    slab_total(&a, four, out);
    if (both) slab_total(&b, four, out_b);
}

__attribute__((target("avx512f"), always_inline)) static inline void slab_apply_avx512_body(const void *x, float *y, int64_t s,
                                                                                           const float *m, const float *a,
                                                                                           const float *b, bool relu,
                                                                                           bool bf16) {
    __m512 mv = _mm512_loadu_ps(m), av = _mm512_loadu_ps(a), bv = _mm512_loadu_ps(b), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < s; i++) {
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(slab_row(x, i, bf16), mv), av), bv);
        if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), zero);
        _mm512_storeu_ps(y + i * k_lanes, v);
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void slab_grad_apply_avx512_body(
    const void *gy, const void *x, float *gx, int64_t s, const float *a, const float *mg, const float *m, const float *q,
    bool bf16) {
    __m512 av = _mm512_loadu_ps(a), mgv = _mm512_loadu_ps(mg), mv = _mm512_loadu_ps(m), qv = _mm512_loadu_ps(q);
    for (int64_t i = 0; i < s; i++) {
        __m512 g = slab_row(gy, i, bf16), v;
        if (x)
            v = _mm512_mul_ps(av, _mm512_sub_ps(_mm512_sub_ps(g, mgv), _mm512_mul_ps(_mm512_sub_ps(slab_row(x, i, bf16), mv), qv)));
        else
            v = _mm512_mul_ps(av, g);
        _mm512_storeu_ps(gx + i * k_lanes, v);
    }
}

#define SLAB_AVX512_FUNCS(SUF, BF16)                                                                                   \
    __attribute__((target("avx512f"))) static void slab_sums_x_##SUF(const void *x, int64_t s, bool four, double *out) { \
        static const double zero[k_lanes];                                                                             \
        slab_sums_avx512_body(MST_BN_SUM_X, false, x, 0, s, zero, four, out, 0, BF16);                                 \
    }                                                                                                                  \
    __attribute__((target("avx512f"))) static void slab_sums_dev2_##SUF(const void *x, int64_t s, const double *m,     \
                                                                        bool four, double *out) {                      \
        slab_sums_avx512_body(MST_BN_SUM_DEV2, false, x, 0, s, m, four, out, 0, BF16);                                 \
    }                                                                                                                  \
    __attribute__((target("avx512f"))) static void slab_sums_gyx_##SUF(const void *x, const void *gy, int64_t s,       \
                                                                       const double *m, bool four, double *out) {      \
        slab_sums_avx512_body(MST_BN_SUM_GYX, false, x, gy, s, m, four, out, 0, BF16);                                 \
    }                                                                                                                  \
    __attribute__((target("avx512f"))) static void slab_grad_sums_##SUF(const void *x, const void *gy, int64_t s,      \
                                                                        const double *m, bool four, double *sum_gy,    \
                                                                        double *sum_gyx) {                             \
        slab_sums_avx512_body(MST_BN_SUM_GYX, true, x, gy, s, m, four, sum_gy, sum_gyx, BF16);                         \
    }                                                                                                                  \
    __attribute__((target("avx512f"))) static void slab_apply_##SUF(const void *x, float *y, int64_t s, const float *m, \
                                                                    const float *a, const float *b, bool relu) {       \
        slab_apply_avx512_body(x, y, s, m, a, b, relu, BF16);                                                          \
    }                                                                                                                  \
    __attribute__((target("avx512f"))) static void slab_grad_apply_##SUF(const void *gy, const void *x, float *gx,     \
                                                                         int64_t s, const float *a, const float *mg,   \
                                                                         const float *m, const float *q) {             \
        slab_grad_apply_avx512_body(gy, x, gx, s, a, mg, m, q, BF16);                                                  \
    }
SLAB_AVX512_FUNCS(avx512, false)
SLAB_AVX512_FUNCS(bf16_avx512, true)
#define SLAB_VECTOR(vector) ((vector) && mst_cpu_has(MST_CPU_AVX512F))
#define SLAB_FN(name, v, bf16) ((v) ? ((bf16) ? name##_bf16_avx512 : name##_avx512) : ((bf16) ? name##_bf16_portable : name##_portable))
#else
#define SLAB_VECTOR(vector) false
#define SLAB_FN(name, v, bf16) ((bf16) ? name##_bf16_portable : name##_portable)
#endif

void mst_bn_slab_sums_path(mst_bn_sum_kind k, const float *x, const float *gy, int64_t s, const double *m, bool four_partials,
                           double *out, bool vector) {
    mst_bn_slab_sums_any(k, false, x, gy, s, m, four_partials, out, vector);
}

void mst_bn_slab_sums_any(mst_bn_sum_kind k, bool bf16, const void *x, const void *gy, int64_t s, const double *m,
                          bool four_partials, double *out, bool vector) {
    bool v = SLAB_VECTOR(vector);
    switch (k) {
    case MST_BN_SUM_X: SLAB_FN(slab_sums_x, v, bf16)(x, s, four_partials, out); return;
    case MST_BN_SUM_DEV2: SLAB_FN(slab_sums_dev2, v, bf16)(x, s, m, four_partials, out); return;
    default: SLAB_FN(slab_sums_gyx, v, bf16)(x, gy, s, m, four_partials, out); return;
    }
}

void mst_bn_slab_grad_sums_any(bool bf16, const void *x, const void *gy, int64_t s, const double *m, bool four_partials,
                               double *sum_gy, double *sum_gyx, bool vector) {
    SLAB_FN(slab_grad_sums, SLAB_VECTOR(vector), bf16)(x, gy, s, m, four_partials, sum_gy, sum_gyx);
}

void mst_bn_slab_apply_path(const float *x, float *y, int64_t s, const float *m, const float *a, const float *b, bool relu,
                            bool vector) {
    mst_bn_slab_apply_any(false, x, y, s, m, a, b, relu, vector);
}

void mst_bn_slab_apply_any(bool bf16, const void *x, float *y, int64_t s, const float *m, const float *a, const float *b,
                           bool relu, bool vector) {
    SLAB_FN(slab_apply, SLAB_VECTOR(vector), bf16)(x, y, s, m, a, b, relu);
}

void mst_bn_slab_grad_apply_path(const float *gy, const float *x, float *gx, int64_t s, const float *a, const float *mg,
                                 const float *m, const float *q, bool vector) {
    mst_bn_slab_grad_apply_any(false, gy, x, gx, s, a, mg, m, q, vector);
}

void mst_bn_slab_grad_apply_any(bool bf16, const void *gy, const void *x, float *gx, int64_t s, const float *a, const float *mg,
                                const float *m, const float *q, bool vector) {
    SLAB_FN(slab_grad_apply, SLAB_VECTOR(vector), bf16)(gy, x, gx, s, a, mg, m, q);
}
