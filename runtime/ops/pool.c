/* pool.c — 2-D max and average pooling over NCHW planes, global average pooling, and the
 * gradient ops their backward rules call.
 *
 * Windows are clipped to the input rather than read from a padded copy: no scratch, and the
 * padding never takes part (max: as if -inf, never selected; average: counted in the divisor,
 * k_h k_w always, PyTorch's count_include_pad = true). Output sizes use floor division
 * (ceil_mode = false), and PyTorch's rule pad <= kernel / 2 guarantees every window holds at
 * least one real element. Max pooling also returns the argmax as an i32 flat index h * W + w
 * within its (H, W) plane (the first maximum in row-major window order wins ties; NaN
 * propagates); its backward scatter-adds through those indices. The plain loops here are the
 * reference kernels; the one thing that made max pooling slow, a data-dependent branch, is written
 * out of them. Max pooling's f32 fast kernel runs the cnn's 2x2 stride-2 windows 16 outputs at a
 * time with AVX-512 when the CPU has it (run-time check, MSTUNE_CPU_MASK honoured), the same
 * comparisons in the same order, so values and indices are bitwise the reference's. Its f16/bf16
 * kernel runs those windows on the half values widened in registers, and any other geometry on
 * each plane widened into a cached buffer (exact either way: a maximum is one of the inputs).
 * Reference: torch.nn.functional.max_pool2d / avg_pool2d.
 */
#include <math.h>

#include "runtime/amp/half.h"
#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "runtime/ops/common.h"
#include "runtime/ops/pool_slab.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MST_POOL_X86 1
#else
#define MST_POOL_X86 0
#endif

/* meta_make with every dim slot set: meta_make leaves the unused slots uninitialized, which
 * gcc's -Wmaybe-uninitialized reports when the struct is copied out. */
static mst_meta meta_full(mst_dtype dtype, int ndim, const int64_t *shape) {
    mst_meta m = {.dtype = dtype, .ndim = ndim};
    for (int d = 0; d < ndim; d++) m.shape[d] = shape[d];
    return m;
}

/* Window geometry from attrs i[0..5] = k_h, k_w, stride_h, stride_w, pad_h, pad_w. */
typedef struct {
    int64_t kh, kw, sh, sw, ph, pw;
} pool_geom;

static pool_geom pool_geom_of(const mst_attrs *a) {
    return (pool_geom){a->i[0], a->i[1], a->i[2], a->i[3], a->i[4], a->i[5]};
}

/* Validate the window against an (h, w) plane and give the output size (p, q). */
static mst_status pool_check(mst_ctx *ctx, const mst_op_call *c, pool_geom g, int64_t h, int64_t w, int64_t *p,
                             int64_t *q) {
    if (g.kh < 1 || g.kw < 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "kernel size must be >= 1, got %lldx%lld", (long long)g.kh, (long long)g.kw);
    if (g.sh < 1 || g.sw < 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "stride must be >= 1, got %lldx%lld", (long long)g.sh, (long long)g.sw);
    if (g.ph < 0 || g.pw < 0 || g.ph > g.kh / 2 || g.pw > g.kw / 2)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "padding must be in [0, kernel / 2], got pad %lldx%lld for kernel %lldx%lld",
                           (long long)g.ph, (long long)g.pw, (long long)g.kh, (long long)g.kw);
    if (h + 2 * g.ph < g.kh || w + 2 * g.pw < g.kw)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE,
                           "output size must be >= 1: kernel %lldx%lld is larger than the padded input %lldx%lld",
                           (long long)g.kh, (long long)g.kw, (long long)(h + 2 * g.ph), (long long)(w + 2 * g.pw));
    *p = (h + 2 * g.ph - g.kh) / g.sh + 1;
    *q = (w + 2 * g.pw - g.kw) / g.sw + 1;
    return MST_OK;
}

/* Error unless input i is a rank-4 float tensor (N, C, H, W). */
static mst_status require_nchw(mst_ctx *ctx, const mst_op_call *c, int i, const char *what) {
    mst_status s = op_require_float(ctx, c, i);
    if (s != MST_OK) return s;
    if (c->in[i]->ndim != 4)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "%s must have rank 4 (N, C, H, W), got rank %d", what, c->in[i]->ndim);
    return MST_OK;
}

/* Clip window [p s - pad, p s - pad + k) to [0, n): the first index and one past the last. */
static inline void window(int64_t p, int64_t s, int64_t pad, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t a = p * s - pad, b = a + k;
    *lo = a > 0 ? a : 0;
    *hi = b < n ? b : n;
}

/* Runs the statements after it for every output (p, q) of a P x Q pooling with geometry g over an
 * H x W plane, with [h0, h1) x [w0, w1) its window clipped to the plane. */
#define FOR_EACH_WINDOW(g, H, W, P, Q, ...)                                                          \
    for (int64_t p = 0; p < (P); p++) {                                                              \
        int64_t h0, h1;                                                                              \
        window(p, (g).sh, (g).ph, (g).kh, (H), &h0, &h1);                                            \
        for (int64_t q = 0; q < (Q); q++) {                                                          \
            int64_t w0, w1;                                                                          \
            window(q, (g).sw, (g).pw, (g).kw, (W), &w0, &w1);                                        \
            __VA_ARGS__                                                                              \
        }                                                                                            \
    }

/* ---- maxpool2d: x (N, C, H, W) -> y (N, C, P, Q), indices i32 (N, C, P, Q) ---- */

static mst_status infer_pool(mst_ctx *ctx, const mst_op_call *c, mst_meta out[], bool with_indices) {
    mst_status s = require_nchw(ctx, c, 0, "x");
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0];
    if (x->shape[2] < 1 || x->shape[3] < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "input H and W must be >= 1, got %lldx%lld", (long long)x->shape[2],
                           (long long)x->shape[3]);
    int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
    if ((s = pool_check(ctx, c, pool_geom_of(&c->attrs), x->shape[2], x->shape[3], &shape[2], &shape[3])) != MST_OK)
        return s;
    if (with_indices && x->shape[2] * x->shape[3] > INT32_MAX)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "an input plane H*W must hold at most 2^31 - 1 elements for i32 indices");
    out[0] = meta_full(x->dtype, 4, shape);
    if (with_indices) out[1] = meta_full(MST_DTYPE_I32, 4, shape);
    return MST_OK;
}

static mst_status infer_maxpool2d(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) { return infer_pool(ctx, c, out, true); }
static mst_status infer_avgpool2d(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) { return infer_pool(ctx, c, out, false); }

/* The reference loop on one plane xp (H x W) into yp and ip (P x Q), per element type:
 * maxpool_plane_ref_f32 / _f64. */
#define MAXPOOL_PLANE_REF(T, SUF)                                                                    \
    static void maxpool_plane_ref_##SUF(const T *xp, int64_t H, int64_t W, T *yp, int32_t *ip, int64_t P, int64_t Q, \
                                        pool_geom g) {                                               \
        FOR_EACH_WINDOW(g, H, W, P, Q, {                                                             \
            /* written branch-free (maxss + cmov): the data decide v > best at random, and a branch  \
             * there mispredicts about half the time (4x slower measured) */                         \
            int64_t best_i = h0 * W + w0, nan_i = -1;                                                \
            T best = xp[best_i];                                                                     \
            for (int64_t h = h0; h < h1; h++)                                                        \
                for (int64_t k = h * W + w0; k < h * W + w1; k++) {                                  \
                    T v = xp[k];                                                                     \
                    int gt = v > best;                                                               \
                    best_i = gt ? k : best_i;                                                        \
                    best = gt ? v : best;                                                            \
                    nan_i = ((v != v) & (nan_i < 0)) ? k : nan_i;                                    \
                }                                                                                    \
            if (nan_i >= 0) { best_i = nan_i; best = xp[nan_i]; }  /* the first NaN wins */          \
            yp[p * Q + q] = best;                                                                    \
            ip[p * Q + q] = (int32_t)best_i;                                                         \
        })                                                                                           \
    }
MAXPOOL_PLANE_REF(float, f32)
MAXPOOL_PLANE_REF(double, f64)
#define MAXPOOL_PLANE(T) _Generic((T)0, float: maxpool_plane_ref_f32, double: maxpool_plane_ref_f64)

/* Planes [pl0, pl1) of the call `arg`. */
#define MAXPOOL_CHUNK_BODY                                                                           \
    {                                                                                                \
        const mst_op_call *c = arg;                                                                  \
        const mst_tensor *X = c->in[0], *Y = c->out[0];                                              \
        int64_t H = X->shape[2], W = X->shape[3], P = Y->shape[2], Q = Y->shape[3];                  \
        const T *x = (const T *)mst_tensor_data(X);                                                  \
        T *y = (T *)mst_tensor_data(Y);                                                              \
        int32_t *idx = mst_tensor_i32(c->out[1]);                                                    \
        for (int64_t pl = pl0; pl < pl1; pl++)                                                       \
            MAXPOOL_PLANE(T)(x + pl * H * W, H, W, y + pl * P * Q, idx + pl * P * Q, P, Q, pool_geom_of(&c->attrs)); \
    }
FLOAT_CHUNKS(maxpool2d_chunk, MAXPOOL_CHUNK_BODY, pl0, pl1)

#if MST_POOL_X86
/* Output row p of a 2x2 stride-2 unpadded window over plane xp (W wide), outputs [0, Q) in
 * blocks of 16, the last one masked (the cnn's 28-wide planes pool to rows of 14): the four window
 * elements in the reference's order (row 2p: 2q, 2q+1; row 2p+1: 2q, 2q+1), strict > to replace
 * the best, the first NaN winning. */
__attribute__((target("avx512f"))) static void maxpool_2x2_row_avx512(const float *xp, int64_t W, int64_t p, int64_t Q,
                                                                      float *yp, int32_t *ip) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i none = _mm512_set1_epi32(-1);
    const float *r0 = xp + 2 * p * W, *r1 = r0 + W;
    for (int64_t q = 0; q < Q; q += 16) {
        int64_t n_out = Q - q < 16 ? Q - q : 16, n_in = 2 * n_out;     /* inputs [2q, 2q + n_in) of each row */
        __mmask16 out_m = (__mmask16)((1u << n_out) - 1), lo_m = (__mmask16)(n_in >= 16 ? 0xffff : (1u << n_in) - 1);
        __mmask16 hi_m = (__mmask16)(n_in >= 32 ? 0xffff : n_in > 16 ? (1u << (n_in - 16)) - 1 : 0);
        __m512 a = _mm512_maskz_loadu_ps(lo_m, r0 + 2 * q), b = _mm512_maskz_loadu_ps(hi_m, r0 + 2 * q + 16);
        __m512 c = _mm512_maskz_loadu_ps(lo_m, r1 + 2 * q), d = _mm512_maskz_loadu_ps(hi_m, r1 + 2 * q + 16);
        __m512 v[4] = {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b),
                       _mm512_permutex2var_ps(c, even, d), _mm512_permutex2var_ps(c, odd, d)};
        __m512i k0 = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * p * W + 2 * q)), even);
        __m512i k[4] = {k0, _mm512_add_epi32(k0, _mm512_set1_epi32(1)), _mm512_add_epi32(k0, _mm512_set1_epi32((int32_t)W)),
                        _mm512_add_epi32(k0, _mm512_set1_epi32((int32_t)W + 1))};
        __m512 best = v[0];
        __m512i best_i = k[0], nan_i = none;
        for (int e = 0; e < 4; e++) {
            __mmask16 gt = _mm512_cmp_ps_mask(v[e], best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, gt, v[e]);
            best_i = _mm512_mask_mov_epi32(best_i, gt, k[e]);
            __mmask16 first_nan = _mm512_cmp_ps_mask(v[e], v[e], _CMP_UNORD_Q) & _mm512_cmpeq_epi32_mask(nan_i, none);
            nan_i = _mm512_mask_mov_epi32(nan_i, first_nan, k[e]);
        }
        __mmask16 has_nan = _mm512_cmpneq_epi32_mask(nan_i, none) & out_m;
        best_i = _mm512_mask_mov_epi32(best_i, has_nan, nan_i);
        best = _mm512_mask_i32gather_ps(best, has_nan, nan_i, xp, 4);
        _mm512_mask_storeu_ps(yp + p * Q + q, out_m, best);
        _mm512_mask_storeu_epi32(ip + p * Q + q, out_m, best_i);
    }
}

/* 16 half values (f16 or bf16) widened to f32: exact. */
__attribute__((target("avx512f"))) static inline __m512 half16_to_ps(bool f16, __m256i h) {
    return f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* maxpool_2x2_row_avx512 on a half plane: the same comparisons on the widened values, the maxima
 * stored back exactly (each is one of the inputs); a last block shorter than 16 loads and stores
 * under masks. A block holding a NaN stops the vector path there (returned as q_end) and the
 * caller finishes the row element by element, as the half-via-f32 kernel would compute it. */
__attribute__((target("avx512f"))) static int64_t maxpool_2x2_row_half_avx512(bool f16, const uint16_t *xp, int64_t W, int64_t p,
                                                                              int64_t Q, uint16_t *yp, int32_t *ip) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const uint16_t *r0 = xp + 2 * p * W, *r1 = r0 + W;
    for (int64_t q = 0; q < Q; q += 16) {
        int64_t n_out = Q - q < 16 ? Q - q : 16;
        /* the 2 n_out inputs of each row are n_out 32-bit words: one masked load (AVX-512F) */
        __mmask16 words = (__mmask16)((1u << n_out) - 1);
        __m512i x0 = _mm512_maskz_loadu_epi32(words, r0 + 2 * q), x1 = _mm512_maskz_loadu_epi32(words, r1 + 2 * q);
        __m512 a = half16_to_ps(f16, _mm512_castsi512_si256(x0)), b = half16_to_ps(f16, _mm512_extracti64x4_epi64(x0, 1));
        __m512 c = half16_to_ps(f16, _mm512_castsi512_si256(x1)), d = half16_to_ps(f16, _mm512_extracti64x4_epi64(x1, 1));
        __m512 v[4] = {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b),
                       _mm512_permutex2var_ps(c, even, d), _mm512_permutex2var_ps(c, odd, d)};
        __mmask16 nan = 0;
        for (int e = 0; e < 4; e++) nan |= _mm512_cmp_ps_mask(v[e], v[e], _CMP_UNORD_Q);
        if (nan) return q;
        __m512i k0 = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * p * W + 2 * q)), even);
        __m512i k[4] = {k0, _mm512_add_epi32(k0, _mm512_set1_epi32(1)), _mm512_add_epi32(k0, _mm512_set1_epi32((int32_t)W)),
                        _mm512_add_epi32(k0, _mm512_set1_epi32((int32_t)W + 1))};
        __m512 best = v[0];
        __m512i best_i = k[0];
        for (int e = 1; e < 4; e++) {
            __mmask16 gt = _mm512_cmp_ps_mask(v[e], best, _CMP_GT_OQ);
            best = _mm512_mask_mov_ps(best, gt, v[e]);
            best_i = _mm512_mask_mov_epi32(best_i, gt, k[e]);
        }
        __m256i h = f16 ? _mm512_cvtps_ph(best, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(best), 16));
        if (n_out == 16) {
            _mm256_storeu_si256((__m256i *)(yp + p * Q + q), h);
        } else if (n_out % 2 == 0) {
            _mm512_mask_storeu_epi32(yp + p * Q + q, (__mmask16)((1u << (n_out / 2)) - 1), _mm512_castsi256_si512(h));
        } else {
            uint16_t out[16];
            _mm256_storeu_si256((__m256i *)out, h);
            memcpy(yp + p * Q + q, out, (size_t)n_out * sizeof(uint16_t));
        }
        _mm512_mask_storeu_epi32(ip + p * Q + q, (__mmask16)((1u << n_out) - 1), best_i);
    }
    return Q;
}
#endif

/* Whether the planes' windows take the vector rows: 2x2 stride 2 unpadded, and AVX-512F. */
static bool maxpool_vector_2x2(pool_geom g) {
#if MST_POOL_X86
    return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && mst_cpu_has(MST_CPU_AVX512F);
#else
    (void)g;
    return false;
#endif
}

/* One f32 plane: the vector rows (vector2x2, maxpool_vector_2x2) or the reference's loop; the
 * same comparisons in the same order either way. */
static void maxpool_plane_f32(const float *xp, int64_t H, int64_t W, float *yp, int32_t *ip, int64_t P, int64_t Q,
                              pool_geom g, bool vector2x2) {
#if MST_POOL_X86
    if (vector2x2) {
        for (int64_t p = 0; p < P; p++) maxpool_2x2_row_avx512(xp, W, p, Q, yp, ip);
        return;
    }
#endif
    (void)vector2x2;
    maxpool_plane_ref_f32(xp, H, W, yp, ip, P, Q, g);
}

typedef struct {
    const mst_op_call *c;
    float *buf;             /* half: per worker, H*W + P*Q floats */
} maxpool_job;

/* The f32 fast chunk and the half one, planes [pl0, pl1). A half plane is widened into a buffer
 * that stays in cache, pooled in f32 and its maxima rounded back: exact (a maximum is one of the
 * plane's half values), so values and indices are those of the half-via-f32 kernel, without its
 * passes over the whole tensor (that kernel ran the cnn's max pool 3x slower than f32 on 2
 * threads, bench_amp_kernels). */
static void maxpool2d_chunk_fast(void *arg, int64_t pl0, int64_t pl1, int worker) {
    const maxpool_job *j = arg;
    const mst_op_call *c = j->c;
    pool_geom g = pool_geom_of(&c->attrs);
    const bool vector2x2 = maxpool_vector_2x2(g);
    const mst_tensor *X = c->in[0], *Y = c->out[0];
    int64_t H = X->shape[2], W = X->shape[3], P = Y->shape[2], Q = Y->shape[3];
    int32_t *idx = mst_tensor_i32(c->out[1]);
    if (!mst_dtype_is_half(X->dtype)) {
        for (int64_t pl = pl0; pl < pl1; pl++)
            maxpool_plane_f32(mst_tensor_f32(X) + pl * H * W, H, W, mst_tensor_f32(Y) + pl * P * Q, idx + pl * P * Q, P, Q, g,
                              vector2x2);
        return;
    }
#if MST_POOL_X86
    if (vector2x2) {
        bool f16 = X->dtype == MST_DTYPE_F16;
        for (int64_t pl = pl0; pl < pl1; pl++) {
            const uint16_t *xp = (const uint16_t *)mst_tensor_data(X) + pl * H * W;
            uint16_t *yp = (uint16_t *)mst_tensor_data(Y) + pl * P * Q;
            int32_t *ipl = idx + pl * P * Q;
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = maxpool_2x2_row_half_avx512(f16, xp, W, p, Q, yp, ipl); q < Q; q++) {
                    /* after a NaN: the reference's four comparisons on the widened values */
                    int64_t k0 = 2 * p * W + 2 * q, ks[4] = {k0, k0 + 1, k0 + W, k0 + W + 1};
                    float v[4];
                    for (int e = 0; e < 4; e++) v[e] = f16 ? mst_f16_to_f32(xp[ks[e]]) : mst_bf16_to_f32(xp[ks[e]]);
                    int best = 0, nan = -1;
                    for (int e = 1; e < 4; e++) best = v[e] > v[best] ? e : best;
                    for (int e = 3; e >= 0; e--) nan = v[e] != v[e] ? e : nan;
                    if (nan >= 0) best = nan;
                    yp[p * Q + q] = f16 ? mst_f32_to_f16(v[best]) : mst_f32_to_bf16(v[best]);
                    ipl[p * Q + q] = (int32_t)ks[best];
                }
        }
        return;
    }
#endif
    float *xb = j->buf + (size_t)worker * (size_t)(H * W + P * Q), *yb = xb + H * W;
    for (int64_t pl = pl0; pl < pl1; pl++) {
        mst_half_to_f32(X->dtype, (const uint16_t *)mst_tensor_data(X) + pl * H * W, xb, (size_t)(H * W));
        maxpool_plane_f32(xb, H, W, yb, idx + pl * P * Q, P, Q, g, false);
        mst_half_from_f32(Y->dtype, yb, (uint16_t *)mst_tensor_data(Y) + pl * P * Q, (size_t)(P * Q));
    }
}

/* Threads: the planes split into ranges over the context's pool (each output element is computed
 * alone, so the bits do not depend on the split), at least k_pool_min_chunk window reads a range
 * (about 50 us of one core) so that small inputs stay on the calling thread. */
enum { k_pool_min_chunk = 1 << 17 };

#define MAXPOOL_BODY(T)                                                                              \
    {                                                                                                \
        const mst_tensor *X = c->in[0], *Y = c->out[0];                                              \
        int64_t per_plane = Y->shape[2] * Y->shape[3] * c->attrs.i[0] * c->attrs.i[1];               \
        if (per_plane < 1) per_plane = 1;                                                            \
        mst_parallel_for(ctx, X->shape[0] * X->shape[1], (k_pool_min_chunk + per_plane - 1) / per_plane, \
                         FLOAT_CHUNK(maxpool2d_chunk, T), (void *)c);                                    \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(maxpool2d_ref, MAXPOOL_BODY)

static mst_status maxpool2d_slabs(mst_ctx *ctx, const mst_op_call *c);

static mst_status maxpool2d_fast(mst_ctx *ctx, const mst_op_call *c) {
    bool xb = mst_tensor_blocked(c->in[0]), yb = mst_tensor_blocked(c->out[0]);
    if (yb) return maxpool2d_slabs(ctx, c);                   /* x either way */
    if (xb) return mst_layout_run_plain(ctx, c, maxpool2d_fast);
    const mst_tensor *X = c->in[0], *Y = c->out[0];
    int64_t per_plane = Y->shape[2] * Y->shape[3] * c->attrs.i[0] * c->attrs.i[1];
    if (per_plane < 1) per_plane = 1;
    int64_t planes = X->shape[0] * X->shape[1], min_chunk = (k_pool_min_chunk + per_plane - 1) / per_plane;
    maxpool_job job = {.c = c};
    if (mst_dtype_is_half(X->dtype)) {
        int workers = mst_parallel_chunks_ctx(ctx, planes, min_chunk);
        job.buf = mst_ctx_workspace(ctx, (size_t)workers * (size_t)(X->shape[2] * X->shape[3] + Y->shape[2] * Y->shape[3]) * sizeof(float));
        if (!job.buf) return ctx->status;
    }
    mst_parallel_for(ctx, planes, min_chunk, maxpool2d_chunk_fast, &job);
    return MST_OK;
}

static mst_status maxpool2d_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (!gy[0]) return MST_OK;
    const mst_tensor *x = c->in[0];
    gx[0] = mst_maxpool2d_grad(ctx, gy[0], c->out[1], (int)x->shape[2], (int)x->shape[3]);
    return ctx->status;
}

/* one comparison per window element */
static int64_t pool_flops(const mst_op_call *c) { return c->out[0]->numel * c->attrs.i[0] * c->attrs.i[1]; }

#define POOL_ATTRS {"k_h", "k_w", "stride_h", "stride_w", "pad_h", "pad_w"}

const mst_op_desc mst_desc_maxpool2d = {
    .name = "maxpool2d", .min_inputs = 1, .max_inputs = 1, .n_outputs = 2,
    .amp_class = MST_AMP_CLASS_HALF,
    .attr_i = POOL_ATTRS,
    .infer = infer_maxpool2d,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = maxpool2d_fast, [MST_DTYPE_F64] = maxpool2d_ref_f64,
                                [MST_DTYPE_F16] = maxpool2d_fast, [MST_DTYPE_BF16] = maxpool2d_fast},
    /* the references: the plain loops, the half kernel around the f32 one */
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = maxpool2d_ref_f32, [MST_DTYPE_F64] = maxpool2d_ref_f64,
                            [MST_DTYPE_F16] = mst_half_kernel, [MST_DTYPE_BF16] = mst_half_kernel},
    .backward = maxpool2d_backward, .flops = pool_flops,
    /* y and the indices in one layout, x in either (the cnn's stem pools a plain plane into the
     * blocked chain) */
    .blocked_in = 1u << 0, .blocked_out = 1u << 0 | 1u << 1, .blocked_tied = 1u << MST_TIED_OUT | 1u << (MST_TIED_OUT + 1),
};

/* ---- maxpool2d_grad: gy (N, C, P, Q), indices i32 (N, C, P, Q)[, pooled (N, C, P, Q)]; attrs in_h, in_w
 *      -> gx (N, C, in_h, in_w) ----
 * With pooled (maxpool2d's values over y; graph mode's fusion, runtime/graph/fuse_pool_relu.c)
 * the result is relu_grad(maxpool2d_grad(gy, indices), y): a window's gradient is kept only where
 * its pooled value is > 0. Max pooling's output is its input at its index, and every window that
 * chose an element saw the same y there, so this is relu_grad's select on y, without the pass. */

static mst_status infer_maxpool2d_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_nchw(ctx, c, 0, "gy");
    if (s != MST_OK) return s;
    const mst_tensor *gy = c->in[0], *ind = c->in[1];
    if (ind->dtype != MST_DTYPE_I32)
        return mst_op_fail(ctx, c, MST_ERR_DTYPE, "indices must be i32, got %s", mst_dtype_name(ind->dtype));
    if ((s = op_require_same_shape(ctx, c, 0, 1)) != MST_OK) return s;
    if (c->n_in > 2 && ((s = op_require_same_shape(ctx, c, 0, 2)) != MST_OK || (s = op_require_same_dtype(ctx, c, 0, 2)) != MST_OK))
        return s;
    int64_t h = c->attrs.i[0], w = c->attrs.i[1];
    if (h < 1 || w < 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "input size must be >= 1, got %lldx%lld", (long long)h, (long long)w);
    int64_t shape[4] = {gy->shape[0], gy->shape[1], h, w};
    out[0] = meta_full(gy->dtype, 4, shape);
    return MST_OK;
}

/* The error for index k at flat position pos of the indices, outside a plane of hw elements. */
mst_status mst_maxpool_grad_bad_index(mst_ctx *ctx, const mst_op_call *c, int64_t k, int64_t pos, int64_t hw) {
    return mst_op_fail(ctx, c, MST_ERR_ARG, "index %lld at position %lld is outside [0, %lld) (in_h * in_w)", (long long)k,
                       (long long)pos, (long long)hw);
}

/* Scatter-add: overlapping windows that chose the same element add up. */
#define MAXPOOL_GRAD_BODY(T)                                                                         \
    {                                                                                                \
        const mst_tensor *GY = c->in[0];                                                             \
        mst_tensor *GX = c->out[0];                                                                  \
        int64_t planes = GY->shape[0] * GY->shape[1], PQ = GY->shape[2] * GY->shape[3];              \
        int64_t HW = GX->shape[2] * GX->shape[3];                                                    \
        const T *gy = (const T *)mst_tensor_data(GY);                                                \
        const int32_t *idx = mst_tensor_i32(c->in[1]);                                               \
        T *gx = (T *)mst_tensor_data(GX);                                                            \
        const T *pooled = c->n_in > 2 ? (const T *)mst_tensor_data(c->in[2]) : NULL;                 \
        memset(gx, 0, mst_tensor_nbytes(GX));                                                        \
        for (int64_t pl = 0; pl < planes; pl++) {                                                    \
            const T *gyp = gy + pl * PQ;                                                             \
            const int32_t *ip = idx + pl * PQ;                                                       \
            T *gxp = gx + pl * HW;                                                                   \
            for (int64_t j = 0; j < PQ; j++) {                                                       \
                int64_t k = ip[j];                                                                   \
                if (k < 0 || k >= HW) return mst_maxpool_grad_bad_index(ctx, c, k, pl * PQ + j, HW);       \
                if (pooled && !(pooled[pl * PQ + j] > 0)) continue;      /* relu_grad's select */     \
                gxp[k] += gyp[j];                                                                    \
            }                                                                                        \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(maxpool2d_grad, MAXPOOL_GRAD_BODY)

/* The fast f32 and half kernels: planes spread over the pool, each plane's scatter-add in the
 * reference order. A half plane is accumulated in an f32 buffer of H*W values that stays in cache
 * (zeroed, gy's plane added in widened, rounded once into gx), which is what the half-via-f32
 * kernel computes (f32 zeros plus f32 gy values, rounded) without its passes over the whole
 * tensor. An index outside the plane is found by position; the earliest is reported. */
typedef struct {
    const mst_op_call *c;
    float *buf;             /* half: per worker, P*Q + H*W floats */
    int64_t *bad_pos;       /* per chunk: the first position with a bad index, or -1 */
    int64_t *bad_k;         /* nChw16c: per chunk, the bad index itself */
} mpg_job;

/* A half plane where no two nonzero gradients meet (max pooling's windows do not overlap: the
 * cnn's 2x2 stride 2): each gx element is +0 or one gy value, and what the f32 accumulation
 * computes for it, +0 + g rounded back to half, is g's own bits except that -0 becomes +0 and a
 * NaN comes back quiet; a zero meeting anything adds nothing. Those bits are written directly,
 * without widening gy, accumulating H*W floats and rounding them (which ran the cnn's pooling
 * gradient 2.9x slower than f32, bench_amp_kernels). Returns false, with the plane half written,
 * at the first index out of the plane or the first nonzero value landing on a nonzero one: the
 * caller redoes the plane the general way (which also finds the bad index). */
/* A half value's bits are > 0: sign clear, not zero, not NaN (inf is > 0). */
static inline bool half_positive(mst_dtype dt, uint16_t b) {
    return !(b & 0x8000) && b != 0 && b <= (dt == MST_DTYPE_F16 ? 0x7c00 : 0x7f80);
}

static bool maxpool_grad_plane_half_direct(mst_dtype dt, const uint16_t *gy, const uint16_t *pooled, const int32_t *ip,
                                           uint16_t *gx, int64_t PQ, int64_t HW) {
    const uint16_t exp = dt == MST_DTYPE_F16 ? 0x7c00 : 0x7f80, quiet = dt == MST_DTYPE_F16 ? 0x0200 : 0x0040;
    memset(gx, 0, (size_t)HW * sizeof(uint16_t));
    for (int64_t q = 0; q < PQ; q++) {
        int64_t k = ip[q];
        if (k < 0 || k >= HW) return false;
        if (pooled && !half_positive(dt, pooled[q])) continue;      /* relu_grad's select: +0 */
        uint16_t v = gy[q];
        if ((v & 0x7fff) == 0) continue;    /* +-0: gx stays +0, or keeps the value it has */
        if ((v & exp) == exp && (v & (uint16_t)~(exp | 0x8000))) v |= quiet;
        if (gx[k]) return false;
        gx[k] = v;
    }
    return true;
}

/* Bits of v where keep, else +0, without a branch: the indices decide it at random, and a branch
 * per element mispredicts half the time (a branchy version of the plane below ran 5x slower). */
static inline float select_or_zero(bool keep, float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof(b));
    b &= 0u - (uint32_t)keep;
    memcpy(&v, &b, sizeof(v));
    return v;
}

/* An f32 plane of 2x2 windows (H = 2P, W = 2Q) with every index inside its own window: rows 2p
 * and 2p+1 from pooled row p, each element written once, +0 + gy at the index (-0 becomes +0, a
 * NaN comes back quiet: what the scatter-add onto zeros computes) and +0 elsewhere, instead of
 * zeroing the plane and scattering into it (read-modify-writes). Returns false, the plane partly
 * written, at an index outside its window: the caller redoes the plane the general way. */
static bool maxpool_grad_plane_2x2(const float *gy, const float *pooled, const int32_t *ip, float *gx, int64_t P,
                                   int64_t Q, int64_t W) {
    for (int64_t p = 0; p < P; p++)
        for (int64_t r = 0; r < 2; r++) {
            int64_t row0 = (2 * p + r) * W;
            for (int64_t q = 0; q < Q; q++) {
                int64_t k = ip[p * Q + q] - row0 - 2 * q;
                if (r == 0 && !(k == 0 || k == 1 || k == W || k == W + 1)) return false;
                float v = select_or_zero(!pooled || pooled[p * Q + q] > 0, 0.0f + gy[p * Q + q]);
                gx[row0 + 2 * q] = select_or_zero(k == 0, v);
                gx[row0 + 2 * q + 1] = select_or_zero(k == 1, v);
            }
        }
    return true;
}

#if MST_POOL_X86
/* The same, sixteen pooled values a step: even and odd columns selected under masks, interleaved
 * (permutex2var) and stored under masks. */
__attribute__((target("avx512f"))) static bool maxpool_grad_plane_2x2_avx512(const float *gy, const float *pooled,
                                                                             const int32_t *ip, float *gx, int64_t P,
                                                                             int64_t Q, int64_t W) {
    const __m512i lane2 = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    const __m512i zero_i = _mm512_setzero_si512(), one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32((int)W);
    const __m512i w1 = _mm512_set1_epi32((int)W + 1);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t p = 0; p < P; p++)
        for (int64_t r = 0; r < 2; r++) {
            int64_t row0 = (2 * p + r) * W;
            for (int64_t q0 = 0; q0 < Q; q0 += 16) {
                int64_t n = Q - q0 < 16 ? Q - q0 : 16, at = p * Q + q0, tot = 2 * n;
                __mmask16 m = (__mmask16)((1u << n) - 1);
                __m512i k = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, ip + at), _mm512_set1_epi32((int)(row0 + 2 * q0)));
                k = _mm512_sub_epi32(k, lane2);
                if (r == 0) {
                    __mmask16 ok = _mm512_cmpeq_epi32_mask(k, zero_i) | _mm512_cmpeq_epi32_mask(k, one) |
                                   _mm512_cmpeq_epi32_mask(k, wv) | _mm512_cmpeq_epi32_mask(k, w1);
                    if ((ok & m) != m) return false;
                }
                __mmask16 keep = pooled ? _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, pooled + at), zero, _CMP_GT_OQ) : m;
                __m512 v = _mm512_maskz_add_ps(keep, zero, _mm512_maskz_loadu_ps(m, gy + at));
                __m512 ev = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, zero_i), v);
                __m512 od = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, one), v);
                float *out = gx + row0 + 2 * q0;
                _mm512_mask_storeu_ps(out, tot >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tot) - 1),
                                      _mm512_permutex2var_ps(ev, lo, od));
                if (tot > 16)
                    _mm512_mask_storeu_ps(out + 16, (__mmask16)((1u << (tot - 16)) - 1), _mm512_permutex2var_ps(ev, hi, od));
            }
        }
    return true;
}
#endif

static bool maxpool_grad_plane_2x2_best(bool vector, const float *gy, const float *pooled, const int32_t *ip, float *gx,
                                        int64_t P, int64_t Q, int64_t W) {
#if MST_POOL_X86
    if (vector) return maxpool_grad_plane_2x2_avx512(gy, pooled, ip, gx, P, Q, W);
#endif
    (void)vector;
    return maxpool_grad_plane_2x2(gy, pooled, ip, gx, P, Q, W);
}

/* One f32 plane's gradient into gxp: the write-once 2x2 path where it applies, else zeros and the
 * scatter-add in index order. Returns the first position whose index is outside the plane, or -1. */
static int64_t maxpool_grad_plane_f32(const float *gyp, const float *pooled, const int32_t *ip, float *gxp, int64_t P,
                                      int64_t Q, int64_t HW, int64_t W, bool windows_2x2) {
    if (windows_2x2 && maxpool_grad_plane_2x2_best(mst_cpu_has(MST_CPU_AVX512F), gyp, pooled, ip, gxp, P, Q, W)) return -1;
    memset(gxp, 0, (size_t)HW * sizeof(float));
    for (int64_t q = 0; q < P * Q; q++) {
        int64_t k = ip[q];
        if (k < 0 || k >= HW) return q;
        if (pooled && !(pooled[q] > 0)) continue;
        gxp[k] += gyp[q];
    }
    return -1;
}

static void maxpool_grad_chunk(void *arg, int64_t pl0, int64_t pl1, int worker) {
    mpg_job *j = arg;
    const mst_op_call *c = j->c;
    const mst_tensor *gyt = c->in[0], *gxt = c->out[0];
    int64_t PQ = gyt->shape[2] * gyt->shape[3], HW = gxt->shape[2] * gxt->shape[3];
    bool half = mst_dtype_is_half(gyt->dtype);
    const int32_t *idx = mst_tensor_i32(c->in[1]);
    float *buf = half ? j->buf + (size_t)worker * (size_t)(PQ + HW) : NULL;
    j->bad_pos[worker] = -1;
    int64_t P = gyt->shape[2], Q = gyt->shape[3], W = gxt->shape[3];
    bool windows_2x2 = !half && gxt->shape[2] == 2 * P && W == 2 * Q;
    const mst_tensor *pt = c->n_in > 2 ? c->in[2] : NULL;     /* pooled: relu_grad's select folded in */
    for (int64_t pl = pl0; pl < pl1; pl++) {
        const int32_t *ip = idx + pl * PQ;
        const uint16_t *pooled16 = pt && half ? (const uint16_t *)mst_tensor_data(pt) + pl * PQ : NULL;
        const float *pooled = pt && !half ? mst_tensor_f32(pt) + pl * PQ : NULL;
        const float *gyp;
        float *gxp;
        if (half && maxpool_grad_plane_half_direct(gyt->dtype, (const uint16_t *)mst_tensor_data(gyt) + pl * PQ, pooled16,
                                                   ip, (uint16_t *)mst_tensor_data(gxt) + pl * HW, PQ, HW))
            continue;
        if (half) {
            mst_half_to_f32(gyt->dtype, (const uint16_t *)mst_tensor_data(gyt) + pl * PQ, buf, (size_t)PQ);
            gyp = buf;
            gxp = buf + PQ;
        } else {
            int64_t bad = maxpool_grad_plane_f32(mst_tensor_f32(gyt) + pl * PQ, pooled, ip, mst_tensor_f32(gxt) + pl * HW, P, Q,
                                                 HW, W, windows_2x2);
            if (bad >= 0) {
                j->bad_pos[worker] = pl * PQ + bad;
                return;
            }
            continue;
        }
        memset(gxp, 0, (size_t)HW * sizeof(float));
        for (int64_t q = 0; q < PQ; q++) {
            int64_t k = ip[q];
            if (k < 0 || k >= HW) {
                j->bad_pos[worker] = pl * PQ + q;
                return;
            }
            if (pooled16 && !half_positive(gyt->dtype, pooled16[q])) continue;
            gxp[k] += gyp[q];
        }
        if (half) mst_half_from_f32(gxt->dtype, gxp, (uint16_t *)mst_tensor_data(gxt) + pl * HW, (size_t)HW);
    }
}


/* ---- nChw16c slabs (graph mode's blocked chains, runtime/layout.h): f32 max pooling, its
 * gradient and global average pooling on S x 16 slabs, each lane (channel) doing exactly what the
 * plain plane code does — the same comparisons in window order, the same scatter order, the same
 * double sum — so values, indices (flat h W + w in the plane, stored in the slab's order) and bits
 * are the plain kernels'. One generic body per kernel, compiled twice: the AVX-512 clone
 * vectorizes across the 16 lanes, which changes no lane's operations. ---- */

enum { L = MST_NCHW16C_BLOCK };

__attribute__((always_inline)) static inline void maxpool_slab_body(const float *x, int64_t H, int64_t W, float *y,
                                                                    int32_t *ip, int64_t P, int64_t Q, pool_geom g) {
    FOR_EACH_WINDOW(g, H, W, P, Q, {
        float best[L], nan_v[L];
        int32_t best_i[L], nan_i[L];
        int64_t k0 = h0 * W + w0;
        for (int l = 0; l < L; l++) best[l] = x[k0 * L + l], best_i[l] = (int32_t)k0, nan_i[l] = -1, nan_v[l] = 0;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t k = h * W + w0; k < h * W + w1; k++)
                for (int l = 0; l < L; l++) {
                    float v = x[k * L + l];
                    int gt = v > best[l], first_nan = (v != v) & (nan_i[l] < 0);
                    best_i[l] = gt ? (int32_t)k : best_i[l];
                    best[l] = gt ? v : best[l];
                    nan_i[l] = first_nan ? (int32_t)k : nan_i[l];
                    nan_v[l] = first_nan ? v : nan_v[l];
                }
        for (int l = 0; l < L; l++) {
            y[(p * Q + q) * L + l] = nan_i[l] >= 0 ? nan_v[l] : best[l];        /* the first NaN wins */
            ip[(p * Q + q) * L + l] = nan_i[l] >= 0 ? nan_i[l] : best_i[l];
        }
    })
}

/* 2x2 windows (H = 2P, W = 2Q) whose indices all lie in their own window: each gx element written
 * once (maxpool_grad_plane_2x2's values); false, the slab partly written, otherwise. */
__attribute__((always_inline)) static inline bool maxpool_grad_slab_2x2_body(const float *gy, const float *pooled,
                                                                             const int32_t *ip, float *gx, int64_t P,
                                                                             int64_t Q, int64_t W) {
    for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < Q; q++) {
            int64_t j = (p * Q + q) * L, row0 = 2 * p * W + 2 * q;
            int bad = 0;
            for (int l = 0; l < L; l++) {
                int64_t k = ip[j + l] - row0;
                bad |= !(k == 0 || k == 1 || k == W || k == W + 1);
            }
            if (bad) return false;
            for (int l = 0; l < L; l++) {
                int64_t k = ip[j + l] - row0;
                float v = select_or_zero(!pooled || pooled[j + l] > 0, 0.0f + gy[j + l]);
                gx[row0 * L + l] = select_or_zero(k == 0, v);
                gx[(row0 + 1) * L + l] = select_or_zero(k == 1, v);
                gx[(row0 + W) * L + l] = select_or_zero(k == W, v);
                gx[(row0 + W + 1) * L + l] = select_or_zero(k == W + 1, v);
            }
        }
    return true;
}

/* The general scatter-add onto a zeroed slab, window order per lane; returns the first (lane,
 * position) index outside the plane as l * PQ + j, or -1. */
__attribute__((always_inline)) static inline int64_t maxpool_grad_slab_body(const float *gy, const float *pooled,
                                                                            const int32_t *ip, float *gx, int64_t PQ,
                                                                            int64_t HW) {
    memset(gx, 0, (size_t)(HW * L) * sizeof(float));
    int64_t bad = -1;
    for (int64_t j = 0; j < PQ; j++)
        for (int l = 0; l < L; l++) {
            int64_t k = ip[j * L + l];
            if (k < 0 || k >= HW) {
                if (bad < 0 || l * PQ + j < bad) bad = l * PQ + j;
                continue;
            }
            if (pooled && !(pooled[j * L + l] > 0)) continue;
            gx[k * L + l] += gy[j * L + l];
        }
    return bad;
}

__attribute__((always_inline)) static inline void global_avgpool_slab_body(const float *x, int64_t HW, float *y) {
    double acc[L] = {0};
    for (int64_t k = 0; k < HW; k++)
        for (int l = 0; l < L; l++) acc[l] += x[k * L + l];
    for (int l = 0; l < L; l++) y[l] = (float)(acc[l] / (double)HW);
}

#define POOL_SLAB_FUNCS(SUF, ATTR)                                                                   \
    ATTR static void maxpool_slab_##SUF(const float *x, int64_t H, int64_t W, float *y, int32_t *ip, int64_t P, int64_t Q, \
                                        pool_geom g) {                                               \
        maxpool_slab_body(x, H, W, y, ip, P, Q, g);                                                  \
    }                                                                                                \
    ATTR static int64_t maxpool_grad_slab_##SUF(const float *gy, const float *pooled, const int32_t *ip, float *gx, \
                                                int64_t PQ, int64_t HW) {                            \
        return maxpool_grad_slab_body(gy, pooled, ip, gx, PQ, HW);                                   \
    }                                                                                                \
    ATTR static void global_avgpool_slab_##SUF(const float *x, int64_t HW, float *y) { global_avgpool_slab_body(x, HW, y); }
POOL_SLAB_FUNCS(portable, )
#if MST_POOL_X86
POOL_SLAB_FUNCS(avx512, __attribute__((target("avx512f"))))
#define POOL_SLAB(name) (mst_cpu_has(MST_CPU_AVX512F) ? name##_avx512 : name##_portable)
#else
#define POOL_SLAB(name) name##_portable
#endif

#if MST_POOL_X86
/* 16 lanes of a slab element at p (f32, or bf16 widened exactly: a 16-bit shift). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 lanes_load(const void *p, int64_t e, bool bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)p + e * L);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + e * L));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 f32 lanes into slab element e of p: f32 as they are; bf16 for values that are widened bf16
 * (or +0 + one: the low 16 bits stay zero), so the shift back is exact, except that a NaN comes
 * back quiet — mst_f32_to_bf16's rounding of them. */
__attribute__((target("avx512f"), always_inline)) static inline void lanes_store(void *p, int64_t e, __m512 v, bool bf16) {
    if (!bf16) {
        _mm512_storeu_ps((float *)p + e * L, v);
        return;
    }
    __m512i b = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
    b = _mm512_mask_or_epi32(b, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), b, _mm512_set1_epi32(0x0040));
    _mm256_storeu_si256((__m256i *)((uint16_t *)p + e * L), _mm512_cvtepi32_epi16(b));
}

/* 2x2 stride-2 unpadded windows on a slab, all 16 lanes in one register: the four window elements
 * in the reference's order, strict > to replace the best, the first NaN winning (its value and
 * index kept). bf16 slabs are read widened in registers and the maxima stored back exactly. */
__attribute__((target("avx512f"), always_inline)) static inline void maxpool_slab_2x2_body(const void *x, int64_t W, void *y,
                                                                                         int32_t *ip, int64_t P, int64_t Q,
                                                                                         bool bf16) {
    const __m512i none = _mm512_set1_epi32(-1);
    for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < Q; q++) {
            int64_t k0 = 2 * p * W + 2 * q, ks[4] = {k0, k0 + 1, k0 + W, k0 + W + 1};
            __m512 best = lanes_load(x, ks[0], bf16), nan_v = _mm512_setzero_ps();
            __m512i best_i = _mm512_set1_epi32((int32_t)ks[0]), nan_i = none;
            for (int e = 0; e < 4; e++) {
                __m512 v = e ? lanes_load(x, ks[e], bf16) : best;
                __m512i k = _mm512_set1_epi32((int32_t)ks[e]);
                __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, gt, v);
                best_i = _mm512_mask_mov_epi32(best_i, gt, k);
                __mmask16 first_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmpeq_epi32_mask(nan_i, none);
                nan_i = _mm512_mask_mov_epi32(nan_i, first_nan, k);
                nan_v = _mm512_mask_mov_ps(nan_v, first_nan, v);
            }
            __mmask16 has_nan = _mm512_cmpneq_epi32_mask(nan_i, none);
            lanes_store(y, p * Q + q, _mm512_mask_mov_ps(best, has_nan, nan_v), bf16);
            _mm512_storeu_si512(ip + (p * Q + q) * L, _mm512_mask_mov_epi32(best_i, has_nan, nan_i));
        }
}

/* maxpool_grad_slab_2x2_body, 16 lanes in one register: +0 + gy where kept (-0 becomes +0, a NaN
 * comes back quiet: the half kernels' bits for bf16), +0 elsewhere. */
__attribute__((target("avx512f"), always_inline)) static inline bool maxpool_grad_slab_2x2_vbody(const void *gy, const void *pooled,
                                                                                                const int32_t *ip, void *gx,
                                                                                                int64_t P, int64_t Q, int64_t W,
                                                                                                bool bf16) {
    const __m512i zero_i = _mm512_setzero_si512(), one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32((int)W);
    const __m512i w1 = _mm512_set1_epi32((int)W + 1);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < Q; q++) {
            int64_t j = p * Q + q, row0 = 2 * p * W + 2 * q;
            __m512i k = _mm512_sub_epi32(_mm512_loadu_si512(ip + j * L), _mm512_set1_epi32((int32_t)row0));
            __mmask16 e0 = _mm512_cmpeq_epi32_mask(k, zero_i), e1 = _mm512_cmpeq_epi32_mask(k, one);
            __mmask16 e2 = _mm512_cmpeq_epi32_mask(k, wv), e3 = _mm512_cmpeq_epi32_mask(k, w1);
            if ((__mmask16)(e0 | e1 | e2 | e3) != (__mmask16)0xffff) return false;
            __mmask16 keep = pooled ? _mm512_cmp_ps_mask(lanes_load(pooled, j, bf16), zero, _CMP_GT_OQ) : (__mmask16)0xffff;
            __m512 v = _mm512_maskz_add_ps(keep, zero, lanes_load(gy, j, bf16));
            lanes_store(gx, row0, _mm512_maskz_mov_ps(e0, v), bf16);
            lanes_store(gx, row0 + 1, _mm512_maskz_mov_ps(e1, v), bf16);
            lanes_store(gx, row0 + W, _mm512_maskz_mov_ps(e2, v), bf16);
            lanes_store(gx, row0 + W + 1, _mm512_maskz_mov_ps(e3, v), bf16);
        }
    return true;
}

__attribute__((target("avx512f"))) static void maxpool_slab_2x2_avx512(const float *x, int64_t W, float *y, int32_t *ip,
                                                                       int64_t P, int64_t Q) {
    maxpool_slab_2x2_body(x, W, y, ip, P, Q, false);
}
__attribute__((target("avx512f"))) static void maxpool_slab_2x2_bf16_avx512(const uint16_t *x, int64_t W, uint16_t *y,
                                                                            int32_t *ip, int64_t P, int64_t Q) {
    maxpool_slab_2x2_body(x, W, y, ip, P, Q, true);
}
__attribute__((target("avx512f"))) static bool maxpool_grad_slab_2x2_avx512(const float *gy, const float *pooled,
                                                                            const int32_t *ip, float *gx, int64_t P,
                                                                            int64_t Q, int64_t W) {
    return maxpool_grad_slab_2x2_vbody(gy, pooled, ip, gx, P, Q, W, false);
}
__attribute__((target("avx512f"))) static bool maxpool_grad_slab_2x2_bf16_avx512(const uint16_t *gy, const uint16_t *pooled,
                                                                                 const int32_t *ip, uint16_t *gx, int64_t P,
                                                                                 int64_t Q, int64_t W) {
    return maxpool_grad_slab_2x2_vbody(gy, pooled, ip, gx, P, Q, W, true);
}
#endif

static bool maxpool_grad_slab_2x2_portable(const float *gy, const float *pooled, const int32_t *ip, float *gx, int64_t P,
                                           int64_t Q, int64_t W) {
    return maxpool_grad_slab_2x2_body(gy, pooled, ip, gx, P, Q, W);
}

int64_t mst_maxpool_grad_slab_f32(const float *gy, const float *pooled, const int32_t *ip, float *gx, int64_t P, int64_t Q,
                                  int64_t H, int64_t W) {
    if (H == 2 * P && W == 2 * Q && POOL_SLAB(maxpool_grad_slab_2x2)(gy, pooled, ip, gx, P, Q, W)) return -1;
    return POOL_SLAB(maxpool_grad_slab)(gy, pooled, ip, gx, P * Q, H * W);
}

void mst_maxpool_slab_f32(const float *x, int64_t H, int64_t W, float *y, int32_t *ip, int64_t P, int64_t Q,
                          const mst_attrs *pool) {
    pool_geom g = pool_geom_of(pool);
#if MST_POOL_X86
    if (maxpool_vector_2x2(g)) {
        maxpool_slab_2x2_avx512(x, W, y, ip, P, Q);
        return;
    }
#endif
    POOL_SLAB(maxpool_slab)(x, H, W, y, ip, P, Q, g);
}

static void maxpool2d_slabs_chunk(void *arg, int64_t s0, int64_t s1, int worker) {
    const maxpool_job *j = arg;
    const mst_op_call *c = j->c;
    const mst_tensor *X = c->in[0], *Y = c->out[0];
    int64_t H = X->shape[2], W = X->shape[3], P = Y->shape[2], Q = Y->shape[3];
    pool_geom g = pool_geom_of(&c->attrs);
    bool vector2x2 = maxpool_vector_2x2(g);
    bool half = mst_dtype_is_half(X->dtype);
    for (int64_t sl = s0; sl < s1; sl++) {
        int32_t *ip = mst_tensor_i32(c->out[1]) + sl * P * Q * L;
        if (half) {     /* widened exactly into a buffer, pooled in f32, the maxima rounded back (exact) */
            float *xw = j->buf + (size_t)worker * (size_t)((2 * H * W + P * Q) * L), *yw = xw + H * W * L;
            const uint16_t *x16 = (const uint16_t *)mst_tensor_data(X) + sl * H * W * L;
            if (!mst_tensor_blocked(X)) {   /* the slab's 16 plain planes, transposed through a staging slab */
                uint16_t *stage = (uint16_t *)(yw + P * Q * L);
                mst_nchw16c_rows_to_slab(x16, stage, H * W, 2);
                x16 = stage;
            }
#if MST_POOL_X86
            if (vector2x2 && X->dtype == MST_DTYPE_BF16) {    /* widened in registers */
                maxpool_slab_2x2_bf16_avx512(x16, W, (uint16_t *)mst_tensor_data(Y) + sl * P * Q * L, ip, P, Q);
                continue;
            }
#endif
            mst_half_to_f32(X->dtype, x16, xw, (size_t)(H * W * L));
#if MST_POOL_X86
            if (vector2x2) maxpool_slab_2x2_avx512(xw, W, yw, ip, P, Q);
            else
#endif
                POOL_SLAB(maxpool_slab)(xw, H, W, yw, ip, P, Q, g);
            mst_half_from_f32(Y->dtype, yw, (uint16_t *)mst_tensor_data(Y) + sl * P * Q * L, (size_t)(P * Q * L));
            continue;
        }
        const float *x = mst_tensor_f32(X) + sl * H * W * L;
        float *y = mst_tensor_f32(Y) + sl * P * Q * L;
        if (!mst_tensor_blocked(X)) {
            /* plain planes in (the slab's 16 are consecutive): the plain plane code into rows,
             * then into the slab */
            float *yr = j->buf + (size_t)worker * (size_t)(2 * P * Q * L);
            int32_t *ir = (int32_t *)(yr + P * Q * L);
            for (int l = 0; l < L; l++) maxpool_plane_f32(x + l * H * W, H, W, yr + l * P * Q, ir + l * P * Q, P, Q, g, vector2x2);
            mst_nchw16c_rows_to_slab(yr, y, P * Q, 4);
            mst_nchw16c_rows_to_slab(ir, ip, P * Q, 4);
            continue;
        }
        mst_maxpool_slab_f32(x, H, W, y, ip, P, Q, &c->attrs);
    }
}

static mst_status maxpool2d_slabs(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *X = c->in[0], *Y = c->out[0];
    int64_t per_slab = Y->shape[2] * Y->shape[3] * c->attrs.i[0] * c->attrs.i[1] * L;
    if (per_slab < 1) per_slab = 1;
    int64_t slabs = X->shape[0] * X->shape[1] / L, min_chunk = (k_pool_min_chunk + per_slab - 1) / per_slab;
    maxpool_job job = {.c = c};
    bool half = mst_dtype_is_half(X->dtype);
    if (half || !mst_tensor_blocked(X)) {   /* per worker: a half slab widened, or a plain slab's output and index rows */
        int workers = mst_parallel_chunks_ctx(ctx, slabs, min_chunk);
        int64_t PQ = Y->shape[2] * Y->shape[3], floats = half ? (2 * X->shape[2] * X->shape[3] + PQ) * L : 2 * PQ * L;
        job.buf = mst_ctx_workspace(ctx, (size_t)workers * (size_t)floats * sizeof(float));
        if (!job.buf) return ctx->status;
    }
    mst_parallel_for(ctx, slabs, min_chunk, maxpool2d_slabs_chunk, &job);
    return MST_OK;
}

static void maxpool_grad_slabs_chunk(void *arg, int64_t s0, int64_t s1, int worker) {
    mpg_job *j = arg;
    const mst_op_call *c = j->c;
    const mst_tensor *gyt = c->in[0], *gxt = c->out[0];
    int64_t P = gyt->shape[2], Q = gyt->shape[3], PQ = P * Q, W = gxt->shape[3], HW = gxt->shape[2] * W;
    bool windows_2x2 = gxt->shape[2] == 2 * P && W == 2 * Q, half = mst_dtype_is_half(gyt->dtype);
    j->bad_pos[worker] = -1;
    for (int64_t sl = s0; sl < s1; sl++) {
        const int32_t *ip = mst_tensor_i32(c->in[1]) + sl * PQ * L;
        const float *gy, *pooled = NULL;
        float *gx;
#if MST_POOL_X86
        if (half && windows_2x2 && gyt->dtype == MST_DTYPE_BF16 && mst_tensor_blocked(gxt) && mst_cpu_has(MST_CPU_AVX512F) &&
            maxpool_grad_slab_2x2_bf16_avx512((const uint16_t *)mst_tensor_data(gyt) + sl * PQ * L,
                                              c->n_in > 2 ? (const uint16_t *)mst_tensor_data(c->in[2]) + sl * PQ * L : NULL, ip,
                                              (uint16_t *)mst_tensor_data(gxt) + sl * HW * L, P, Q, W))
            continue;   /* bf16 2x2 windows in registers; an index outside its window redoes the slab below */
#endif
        if (half) {     /* gy and pooled widened, the gradient in f32, rounded once: the half-via-f32 kernel's bits */
            float *gyw = j->buf + (size_t)worker * (size_t)((2 * PQ + 2 * HW) * L), *pw = gyw + PQ * L;
            mst_half_to_f32(gyt->dtype, (const uint16_t *)mst_tensor_data(gyt) + sl * PQ * L, gyw, (size_t)(PQ * L));
            if (c->n_in > 2) mst_half_to_f32(gyt->dtype, (const uint16_t *)mst_tensor_data(c->in[2]) + sl * PQ * L, pw, (size_t)(PQ * L));
            gy = gyw, pooled = c->n_in > 2 ? pw : NULL, gx = pw + PQ * L;
        } else {
            gy = mst_tensor_f32(gyt) + sl * PQ * L, pooled = c->n_in > 2 ? mst_tensor_f32(c->in[2]) + sl * PQ * L : NULL;
            gx = mst_tensor_f32(gxt) + sl * HW * L;
        }
        if (!half && !mst_tensor_blocked(gxt)) {
            /* plain planes out: the slab's rows, then the plain plane code into each plane */
            float *gyr = j->buf + (size_t)worker * (size_t)(3 * PQ * L), *pr = pooled ? gyr + PQ * L : NULL;
            int32_t *ir = (int32_t *)(gyr + 2 * PQ * L);
            mst_nchw16c_slab_to_rows(gy, gyr, PQ, 4);
            mst_nchw16c_slab_to_rows(ip, ir, PQ, 4);
            if (pooled) mst_nchw16c_slab_to_rows(pooled, pr, PQ, 4);
            for (int l = 0; l < L; l++) {
                int64_t bad = maxpool_grad_plane_f32(gyr + l * PQ, pr ? pr + l * PQ : NULL, ir + l * PQ, gx + l * HW, P, Q, HW, W,
                                                     windows_2x2);
                if (bad >= 0 && j->bad_pos[worker] < 0) {
                    j->bad_pos[worker] = (sl * L + l) * PQ + bad;
                    j->bad_k[worker] = ir[l * PQ + bad];
                }
            }
            continue;
        }
        int64_t bad = mst_maxpool_grad_slab_f32(gy, pooled, ip, gx, P, Q, gxt->shape[2], W);
        if (bad >= 0 && j->bad_pos[worker] < 0) {      /* the plain position: plane (slab's first + lane), element */
            int64_t C = gyt->shape[1], n = sl / (C / L), ch = (sl % (C / L)) * L + bad / PQ;
            j->bad_pos[worker] = (n * C + ch) * PQ + bad % PQ;
            j->bad_k[worker] = ip[(bad % PQ) * L + bad / PQ];
        }
        if (half && bad < 0) {  /* rounded into gx's slab, or through a staging slab into its plain planes */
            uint16_t *gx16 = (uint16_t *)mst_tensor_data(gxt) + sl * HW * L;
            if (mst_tensor_blocked(gxt)) {
                mst_half_from_f32(gxt->dtype, gx, gx16, (size_t)(HW * L));
            } else {
                uint16_t *stage = (uint16_t *)(gx + HW * L);
                mst_half_from_f32(gxt->dtype, gx, stage, (size_t)(HW * L));
                mst_nchw16c_slab_to_rows(stage, gx16, HW, 2);
            }
        }
    }
}

static mst_status maxpool2d_grad_slabs(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *gyt = c->in[0], *gxt = c->out[0];
    int64_t per_slab = (gyt->shape[2] * gyt->shape[3] + gxt->shape[2] * gxt->shape[3]) * L;
    int64_t slabs = gyt->shape[0] * gyt->shape[1] / L, min_chunk = (k_pool_min_chunk + per_slab - 1) / per_slab;
    int workers = mst_parallel_chunks_ctx(ctx, slabs, min_chunk);
    int64_t PQ = gyt->shape[2] * gyt->shape[3], HW = gxt->shape[2] * gxt->shape[3];
    size_t rows = mst_dtype_is_half(gyt->dtype) ? (size_t)workers * (size_t)((2 * PQ + 2 * HW) * L)  /* widened gy, pooled, gx, stage */
                  : mst_tensor_blocked(gxt)     ? 0
                                                : (size_t)workers * (size_t)(3 * PQ * L);     /* gy, pooled, index rows */
    int64_t *bad_pos = mst_ctx_workspace(ctx, 2 * (size_t)workers * sizeof(int64_t) + rows * sizeof(float));
    if (!bad_pos) return ctx->status;
    mpg_job job = {.c = c, .bad_pos = bad_pos, .bad_k = bad_pos + workers, .buf = (float *)(bad_pos + 2 * workers)};
    mst_parallel_for(ctx, slabs, min_chunk, maxpool_grad_slabs_chunk, &job);
    int w_bad = -1;
    for (int w = 0; w < workers; w++)
        if (job.bad_pos[w] >= 0 && (w_bad < 0 || job.bad_pos[w] < job.bad_pos[w_bad])) w_bad = w;
    return w_bad >= 0 ? mst_maxpool_grad_bad_index(ctx, c, job.bad_k[w_bad], job.bad_pos[w_bad], gxt->shape[2] * gxt->shape[3])
                      : MST_OK;
}

static mst_status maxpool2d_grad_fast(mst_ctx *ctx, const mst_op_call *c) {
    if (mst_tensor_blocked(c->in[0])) return maxpool2d_grad_slabs(ctx, c);    /* gx either way */
    if (mst_tensor_blocked(c->out[0])) return mst_layout_run_plain(ctx, c, maxpool2d_grad_fast);
    const mst_tensor *gyt = c->in[0], *gxt = c->out[0];
    int64_t planes = gyt->shape[0] * gyt->shape[1], PQ = gyt->shape[2] * gyt->shape[3], HW = gxt->shape[2] * gxt->shape[3];
    int64_t per_plane = PQ + HW > 0 ? PQ + HW : 1, min_chunk = (k_pool_min_chunk + per_plane - 1) / per_plane;
    int workers = mst_parallel_chunks_ctx(ctx, planes, min_chunk);
    size_t buf_floats = mst_dtype_is_half(gyt->dtype) ? (size_t)workers * (size_t)(PQ + HW) : 0;
    int64_t *bad_pos = mst_ctx_workspace(ctx, (size_t)workers * sizeof(int64_t) + buf_floats * sizeof(float));
    if (!bad_pos) return ctx->status;
    mpg_job job = {.c = c, .buf = (float *)(bad_pos + workers), .bad_pos = bad_pos};
    mst_parallel_for(ctx, planes, min_chunk, maxpool_grad_chunk, &job);
    int64_t bad = -1;
    for (int w = 0; w < workers; w++)
        if (job.bad_pos[w] >= 0 && (bad < 0 || job.bad_pos[w] < bad)) bad = job.bad_pos[w];
    return bad >= 0 ? mst_maxpool_grad_bad_index(ctx, c, mst_tensor_i32(c->in[1])[bad], bad, HW) : MST_OK;
}

static int64_t maxpool2d_grad_flops(const mst_op_call *c) { return c->in[0]->numel; }

const mst_op_desc mst_desc_maxpool2d_grad = {
    .name = "maxpool2d_grad", .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .nondiff = 1u << 1 | 1u << 2,
    .attr_i = {"in_h", "in_w"},
    .infer = infer_maxpool2d_grad,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = maxpool2d_grad_fast, [MST_DTYPE_F64] = maxpool2d_grad_f64,
                                [MST_DTYPE_F16] = maxpool2d_grad_fast, [MST_DTYPE_BF16] = maxpool2d_grad_fast},
    /* the references: the serial f32/f64 kernel, the half kernel around the f32 one */
    .ref[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = maxpool2d_grad_f32, [MST_DTYPE_F64] = maxpool2d_grad_f64,
                            [MST_DTYPE_F16] = mst_half_kernel, [MST_DTYPE_BF16] = mst_half_kernel},
    .flops = maxpool2d_grad_flops,
    /* gy, the indices and pooled in one layout, gx in either */
    .blocked_in = 1u << 0 | 1u << 1 | 1u << 2, .blocked_out = 1u << 0, .blocked_tied = 1u << 0 | 1u << 1 | 1u << 2,
};

/* ---- avgpool2d: x (N, C, H, W) -> (N, C, P, Q), divisor k_h k_w ---- */

#define AVGPOOL_BODY(T)                                                                              \
    {                                                                                                \
        const mst_tensor *X = c->in[0], *Y = c->out[0];                                              \
        pool_geom g = pool_geom_of(&c->attrs);                                                       \
        int64_t planes = X->shape[0] * X->shape[1], H = X->shape[2], W = X->shape[3];                \
        int64_t P = Y->shape[2], Q = Y->shape[3];                                                    \
        const T *x = (const T *)mst_tensor_data(X);                                                  \
        T *y = (T *)mst_tensor_data(Y);                                                              \
        T inv = (T)(1.0 / (double)(g.kh * g.kw));                                                    \
        for (int64_t pl = 0; pl < planes; pl++) {                                                    \
            const T *xp = x + pl * H * W;                                                            \
            T *yp = y + pl * P * Q;                                                                  \
            FOR_EACH_WINDOW(g, H, W, P, Q, {                                                         \
                T sum = 0;                                                                           \
                for (int64_t h = h0; h < h1; h++)                                                    \
                    for (int64_t w = w0; w < w1; w++) sum += xp[h * W + w];                          \
                yp[p * Q + q] = sum * inv;                                                           \
            })                                                                                       \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(avgpool2d, AVGPOOL_BODY)

static mst_status avgpool2d_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    const mst_tensor *x = c->in[0];
    const int64_t *a = c->attrs.i;
    gx[0] = mst_avgpool2d_grad(ctx, gy[0], (int)x->shape[2], (int)x->shape[3], (int)a[0], (int)a[1], (int)a[2], (int)a[3],
                               (int)a[4], (int)a[5]);
    return ctx->status;
}

const mst_op_desc mst_desc_avgpool2d = {
    .name = "avgpool2d", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_HALF,
    .attr_i = POOL_ATTRS,
    .infer = infer_avgpool2d, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(avgpool2d),
    .backward = avgpool2d_backward, .flops = pool_flops,
};

/* ---- avgpool2d_grad: gy (N, C, P, Q); attrs as the forward + i[6] in_h, i[7] in_w ---- */

static mst_status infer_avgpool2d_grad(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_nchw(ctx, c, 0, "gy");
    if (s != MST_OK) return s;
    const mst_tensor *gy = c->in[0];
    int64_t h = c->attrs.i[6], w = c->attrs.i[7], p = 0, q = 0;
    if (h < 1 || w < 1)
        return mst_op_fail(ctx, c, MST_ERR_ARG, "input size must be >= 1, got %lldx%lld", (long long)h, (long long)w);
    if ((s = pool_check(ctx, c, pool_geom_of(&c->attrs), h, w, &p, &q)) != MST_OK) return s;
    if (gy->shape[2] != p || gy->shape[3] != q)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "gy must be %lldx%lld spatially (the pooled size of a %lldx%lld input), got %lldx%lld",
                           (long long)p, (long long)q, (long long)h, (long long)w, (long long)gy->shape[2], (long long)gy->shape[3]);
    int64_t shape[4] = {gy->shape[0], gy->shape[1], h, w};
    out[0] = meta_full(gy->dtype, 4, shape);
    return MST_OK;
}

/* Each output's gradient, divided by k_h k_w, spread over the real elements of its window. */
#define AVGPOOL_GRAD_BODY(T)                                                                         \
    {                                                                                                \
        const mst_tensor *GY = c->in[0];                                                             \
        mst_tensor *GX = c->out[0];                                                                  \
        pool_geom g = pool_geom_of(&c->attrs);                                                       \
        int64_t planes = GY->shape[0] * GY->shape[1], P = GY->shape[2], Q = GY->shape[3];            \
        int64_t H = GX->shape[2], W = GX->shape[3];                                                  \
        const T *gy = (const T *)mst_tensor_data(GY);                                                \
        T *gx = (T *)mst_tensor_data(GX);                                                            \
        T inv = (T)(1.0 / (double)(g.kh * g.kw));                                                    \
        memset(gx, 0, mst_tensor_nbytes(GX));                                                        \
        for (int64_t pl = 0; pl < planes; pl++) {                                                    \
            const T *gyp = gy + pl * P * Q;                                                          \
            T *gxp = gx + pl * H * W;                                                                \
            FOR_EACH_WINDOW(g, H, W, P, Q, {                                                         \
                T v = gyp[p * Q + q] * inv;                                                          \
                for (int64_t h = h0; h < h1; h++)                                                    \
                    for (int64_t w = w0; w < w1; w++) gxp[h * W + w] += v;                           \
            })                                                                                       \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(avgpool2d_grad, AVGPOOL_GRAD_BODY)

static int64_t avgpool2d_grad_flops(const mst_op_call *c) { return c->in[0]->numel * c->attrs.i[0] * c->attrs.i[1]; }

const mst_op_desc mst_desc_avgpool2d_grad = {
    .name = "avgpool2d_grad", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .flags = MST_OPF_GRAD_OP,
    .attr_i = {"k_h", "k_w", "stride_h", "stride_w", "pad_h", "pad_w", "in_h", "in_w"},
    .infer = infer_avgpool2d_grad, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(avgpool2d_grad), .flops = avgpool2d_grad_flops,
};

/* ---- global_avgpool: (N, C, H, W) -> (N, C), the plane mean accumulated in double ---- */

static mst_status infer_global_avgpool(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = require_nchw(ctx, c, 0, "x");
    if (s != MST_OK) return s;
    const mst_tensor *x = c->in[0];
    if (x->shape[2] < 1 || x->shape[3] < 1)
        return mst_op_fail(ctx, c, MST_ERR_SHAPE, "spatial size H x W must be at least 1x1, got %lldx%lld",
                           (long long)x->shape[2], (long long)x->shape[3]);
    out[0] = meta_full(x->dtype, 2, x->shape);
    return MST_OK;
}

#define GLOBAL_AVGPOOL_BODY(T)                                                                       \
    {                                                                                                \
        const mst_tensor *X = c->in[0];                                                              \
        int64_t planes = X->shape[0] * X->shape[1], HW = X->shape[2] * X->shape[3];                  \
        const T *x = (const T *)mst_tensor_data(X);                                                  \
        T *y = (T *)mst_tensor_data(c->out[0]);                                                      \
        for (int64_t pl = 0; pl < planes; pl++) {                                                    \
            const T *xp = x + pl * HW;                                                               \
            double sum = 0;                                                                          \
            for (int64_t k = 0; k < HW; k++) sum += xp[k];                                           \
            y[pl] = (T)(sum / (double)HW);                                                           \
        }                                                                                            \
        return MST_OK;                                                                               \
    }
FLOAT_KERNELS(global_avgpool, GLOBAL_AVGPOOL_BODY)

/* f32, the input in nChw16c or plain */
static mst_status global_avgpool_fast_f32(mst_ctx *ctx, const mst_op_call *c) {
    const mst_tensor *X = c->in[0];
    if (!mst_tensor_blocked(X)) return global_avgpool_f32(ctx, c);
    int64_t slabs = X->shape[0] * X->shape[1] / L, HW = X->shape[2] * X->shape[3];
    for (int64_t sl = 0; sl < slabs; sl++)      /* y (N, C): slab (n, cb)'s 16 channels are contiguous */
        POOL_SLAB(global_avgpool_slab)(mst_tensor_f32(X) + sl * HW * L, HW, mst_tensor_f32(c->out[0]) + sl * L);
    return MST_OK;
}

/* gx = broadcast(gy as (N, C, 1, 1)) / (H W) */
static mst_status global_avgpool_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    const mst_tensor *x = c->in[0];
    int64_t shape[4] = {x->shape[0], x->shape[1], 1, 1};
    mst_tensor *g = mst_reshape(ctx, gy[0], 4, shape);
    gx[0] = mst_scale(ctx, mst_broadcast_to(ctx, g, 4, x->shape), 1.0 / (double)(x->shape[2] * x->shape[3]));
    return ctx->status;
}

static int64_t global_avgpool_flops(const mst_op_call *c) { return c->in[0]->numel; }

const mst_op_desc mst_desc_global_avgpool = {
    .name = "global_avgpool", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .amp_class = MST_AMP_CLASS_HALF,
    .infer = infer_global_avgpool,
    .kernels[MST_DEVICE_CPU] = {[MST_DTYPE_F32] = global_avgpool_fast_f32, [MST_DTYPE_F64] = global_avgpool_f64},
    .ref[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(global_avgpool),
    .backward = global_avgpool_backward, .flops = global_avgpool_flops,
    .blocked_in = 1u << 0,
};

/* ---- public constructors ---- */

mst_tensor *mst_maxpool2d(mst_ctx *ctx, mst_tensor *x, int k_h, int k_w, int stride_h, int stride_w, int pad_h, int pad_w) {
    mst_attrs a = {.i = {k_h, k_w, stride_h, stride_w, pad_h, pad_w}};
    return op_call1(ctx, MST_OP_MAXPOOL2D, x, NULL, NULL, &a);
}

mst_tensor *mst_avgpool2d(mst_ctx *ctx, mst_tensor *x, int k_h, int k_w, int stride_h, int stride_w, int pad_h, int pad_w) {
    mst_attrs a = {.i = {k_h, k_w, stride_h, stride_w, pad_h, pad_w}};
    return op_call1(ctx, MST_OP_AVGPOOL2D, x, NULL, NULL, &a);
}

mst_tensor *mst_global_avgpool(mst_ctx *ctx, mst_tensor *x) {
    return op_call1(ctx, MST_OP_GLOBAL_AVGPOOL, x, NULL, NULL, NULL);
}

mst_tensor *mst_maxpool2d_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *indices, int in_h, int in_w) {
    mst_tensor *in[2] = {gy, indices};
    mst_attrs a = {.i = {in_h, in_w}};
    return mst_dispatch1(ctx, MST_OP_MAXPOOL2D_GRAD, 2, in, &a);
}

mst_tensor *mst_avgpool2d_grad(mst_ctx *ctx, mst_tensor *gy, int in_h, int in_w, int k_h, int k_w,
                               int stride_h, int stride_w, int pad_h, int pad_w) {
    mst_attrs a = {.i = {k_h, k_w, stride_h, stride_w, pad_h, pad_w, in_h, in_w}};
    return op_call1(ctx, MST_OP_AVGPOOL2D_GRAD, gy, NULL, NULL, &a);
}
