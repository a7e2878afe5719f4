/* conv_direct.c — see conv_direct.h: direct convolution and its weight gradient for inputs of few
 * channels, 16 output channels a vector, on AVX-512. */
#include "runtime/ops/conv_direct.h"

#include <string.h>

#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "runtime/ops/common.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MST_DIRECT_X86 1
#else
#define MST_DIRECT_X86 0
#endif

enum { L = MST_NCHW16C_BLOCK, k_max_crs = 27 };

bool mst_conv_direct_applies(const mst_op_call *c, const mst_conv_geom *g) {
    if (!MST_DIRECT_X86 || !mst_cpu_has(MST_CPU_AVX512F)) return false;
    if (c->op != MST_OP_CONV2D && c->op != MST_OP_CONV2D_GRAD_WEIGHT) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->dtype != MST_DTYPE_F32) return false;
    if (c->out[0]->dtype != MST_DTYPE_F32) return false;
    const mst_tensor *x = c->in[c->op == MST_OP_CONV2D ? 0 : 1];
    if (mst_tensor_blocked(x) || (c->op == MST_OP_CONV2D_GRAD_WEIGHT && mst_tensor_blocked(c->out[0]))) return false;
    return g->c < L && g->c * g->r * g->s <= k_max_crs && g->k % L == 0 && g->k > 0 && g->n > 0 && g->p > 0 && g->q > 0;
}

/* Image x's C planes zero-padded into xp: (H + 2 ph) x (W + 2 pw) each. */
static void pad_image(const mst_conv_geom *g, const float *x, float *xp) {
    int64_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;
    memset(xp, 0, (size_t)(g->c * hp * wp) * sizeof(float));
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t h = 0; h < g->h; h++)
            memcpy(xp + (ci * hp + h + g->ph) * wp + g->pw, x + (ci * g->h + h) * g->w, (size_t)g->w * sizeof(float));
}

typedef struct {
    const mst_conv_geom *g;
    const float *x, *wpack, *bias;      /* wpack: per 16-channel block, CRS vectors of 16 */
    const float *gy;
    float *out;                         /* y, or gw */
    bool out_blocked, gy_blocked;
    float *ws;
    size_t per_worker;                  /* floats: a padded image, then an nChw16c slab */
} direct_job;

#if MST_DIRECT_X86
/* off[i]: where tap i = (c, r, s) of output pixel (0, 0) reads the padded image. */
static void tap_offsets(const mst_conv_geom *g, int64_t *off) {
    int64_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw, i = 0;
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t r = 0; r < g->r; r++)
            for (int64_t s = 0; s < g->s; s++) off[i++] = (ci * hp + r) * wp + s;
}

/* The output slabs of `blocks` (1 or 2, a constant where inlined) 16-channel blocks from the
 * padded image xp: out0 block kb, out1 block kb + 1. Each element is the chain acc = fma(x, w, acc)
 * over (c, r, s) from 0, then + bias, whatever `blocks`; with two, each input value is broadcast
 * once for both, four pixels a pass (8 accumulators beside 2 x crs weight vectors), with one eight.
 * crs a constant where the caller inlines it (the stem's 9: weights and accumulators in registers). */
__attribute__((target("avx512f"), always_inline)) static inline void fwd_body(const mst_conv_geom *g, const float *xp,
                                                                              const float *wk, const float *bias, float *out0,
                                                                              float *out1, int64_t crs, int blocks) {
    const int qb = blocks == 2 ? 4 : 8;
    const int64_t wp = g->w + 2 * g->pw, sw = g->sw;
    int64_t off[k_max_crs];
    tap_offsets(g, off);
    __m512 w[2][k_max_crs], b[2];
    float *out[2] = {out0, out1};
    for (int k = 0; k < blocks; k++) {
        for (int64_t i = 0; i < crs; i++) w[k][i] = _mm512_loadu_ps(wk + (k * crs + i) * L);
        b[k] = bias ? _mm512_loadu_ps(bias + k * L) : _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < g->p; p++) {
        const float *xrow = xp + p * g->sh * wp;
        int64_t q0 = 0;
        for (; q0 + qb <= g->q; q0 += qb) {
            __m512 acc[2][8];
            for (int k = 0; k < blocks; k++)
                for (int j = 0; j < qb; j++) acc[k][j] = _mm512_setzero_ps();
            for (int64_t i = 0; i < crs; i++) {
                const float *tap = xrow + off[i] + q0 * sw;
                for (int j = 0; j < qb; j++) {
                    const __m512 v = _mm512_set1_ps(tap[j * sw]);
                    for (int k = 0; k < blocks; k++) acc[k][j] = _mm512_fmadd_ps(v, w[k][i], acc[k][j]);
                }
            }
            for (int k = 0; k < blocks; k++)
                for (int j = 0; j < qb; j++)
                    _mm512_storeu_ps(out[k] + (p * g->q + q0 + j) * L, bias ? _mm512_add_ps(acc[k][j], b[k]) : acc[k][j]);
        }
        for (; q0 < g->q; q0++) {     /* the row's tail: the same chains, one pixel at a time */
            __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int64_t i = 0; i < crs; i++) {
                const __m512 v = _mm512_set1_ps(xrow[off[i] + q0 * sw]);
                for (int k = 0; k < blocks; k++) acc[k] = _mm512_fmadd_ps(v, w[k][i], acc[k]);
            }
            for (int k = 0; k < blocks; k++)
                _mm512_storeu_ps(out[k] + (p * g->q + q0) * L, bias ? _mm512_add_ps(acc[k], b[k]) : acc[k]);
        }
    }
}

/* One block's slab (out1 unused) or two blocks' (fwd_body). */
__attribute__((target("avx512f"))) static void fwd_blocks(const mst_conv_geom *g, const float *xp, const float *wk,
                                                         const float *bias, float *out0, float *out1, int blocks) {
    int64_t crs = g->c * g->r * g->s;
    if (blocks == 2) {
        if (crs == 9) fwd_body(g, xp, wk, bias, out0, out1, 9, 2);
        else fwd_body(g, xp, wk, bias, out0, out1, crs, 2);
    } else {
        if (crs == 9) fwd_body(g, xp, wk, bias, out0, out1, 9, 1);
        else fwd_body(g, xp, wk, bias, out0, out1, crs, 1);
    }
}

/* acc[i] (16 output channels) += sum over the slab's pixels of gy(p, q) x(c, p sh + r, q sw + s),
 * pixel by pixel in (p, q) order; i = (c, r, s). */
__attribute__((target("avx512f"), always_inline)) static inline void gw_slab_body(const mst_conv_geom *g, const float *xp,
                                                                                  const float *gy, __m512 *acc, int64_t crs) {
    const int64_t wp = g->w + 2 * g->pw, sw = g->sw;
    int64_t off[k_max_crs];
    tap_offsets(g, off);
    __m512 a[k_max_crs];
    for (int64_t i = 0; i < crs; i++) a[i] = acc[i];
    for (int64_t p = 0; p < g->p; p++) {
        const float *xrow = xp + p * g->sh * wp;
        for (int64_t q = 0; q < g->q; q++) {
            const __m512 gv = _mm512_loadu_ps(gy + (p * g->q + q) * L);
            for (int64_t i = 0; i < crs; i++) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(xrow[off[i] + q * sw]), gv, a[i]);
        }
    }
    for (int64_t i = 0; i < crs; i++) acc[i] = a[i];
}

__attribute__((target("avx512f"))) static void gw_slab(const mst_conv_geom *g, const float *xp, const float *gy, __m512 *acc) {
    if (g->c * g->r * g->s == 9) gw_slab_body(g, xp, gy, acc, 9);
    else gw_slab_body(g, xp, gy, acc, g->c * g->r * g->s);
}

/* Units [u0, u1) of (image n, pair of blocks kb, kb + 1; a last odd block alone), n-major: each
 * image padded once per worker range. */
__attribute__((target("avx512f"))) static void fwd_chunk(void *arg, int64_t u0, int64_t u1, int worker) {
    const direct_job *j = arg;
    const mst_conv_geom *g = j->g;
    int64_t kbs = g->k / L, pairs = (kbs + 1) / 2, crs = g->c * g->r * g->s, pq = g->p * g->q, padded = -1;
    float *xp = j->ws + (size_t)worker * j->per_worker, *slab = xp + g->c * (g->h + 2 * g->ph) * (g->w + 2 * g->pw);
    slab = (float *)(((uintptr_t)slab + 63) & ~(uintptr_t)63);
    float *slab1 = slab + pq * L;
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = u / pairs, kb = 2 * (u % pairs);
        if (n != padded) pad_image(g, j->x + n * g->c * g->h * g->w, xp), padded = n;
        float *at = j->out + (n * g->k + kb * L) * pq, *at1 = at + pq * L;     /* the slabs' places, in either layout */
        const float *bias = j->bias ? j->bias + kb * L : NULL;
        int blocks = kb + 1 < kbs ? 2 : 1;
        fwd_blocks(g, xp, j->wpack + kb * crs * L, bias, j->out_blocked ? at : slab, j->out_blocked ? at1 : slab1, blocks);
        if (!j->out_blocked) {
            mst_nchw16c_slab_to_rows(slab, at, pq, sizeof(float));
            if (blocks == 2) mst_nchw16c_slab_to_rows(slab1, at1, pq, sizeof(float));
        }
    }
}

/* Blocks [b0, b1) of 16 output channels, each summed over every image in order. */
__attribute__((target("avx512f"))) static void gw_chunk(void *arg, int64_t b0, int64_t b1, int worker) {
    const direct_job *j = arg;
    const mst_conv_geom *g = j->g;
    int64_t crs = g->c * g->r * g->s, pq = g->p * g->q;
    float *xp = j->ws + (size_t)worker * j->per_worker, *slab = xp + g->c * (g->h + 2 * g->ph) * (g->w + 2 * g->pw);
    slab = (float *)(((uintptr_t)slab + 63) & ~(uintptr_t)63);
    for (int64_t kb = b0; kb < b1; kb++) {
        __m512 acc[k_max_crs];
        for (int64_t i = 0; i < crs; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t n = 0; n < g->n; n++) {
            pad_image(g, j->x + n * g->c * g->h * g->w, xp);
            const float *gy = j->gy + (n * g->k + kb * L) * pq;
            if (!j->gy_blocked) mst_nchw16c_rows_to_slab(gy, slab, pq, sizeof(float)), gy = slab;
            gw_slab(g, xp, gy, acc);
        }
        float lanes[L];
        for (int64_t i = 0; i < crs; i++) {
            _mm512_storeu_ps(lanes, acc[i]);
            for (int l = 0; l < L; l++) j->out[(kb * L + l) * crs + i] = lanes[l];
        }
    }
}
#endif

/* The workspace: the packed weights (forward), then per worker a padded image and two slabs. */
static float *direct_workspace(mst_ctx *ctx, const mst_conv_geom *g, int workers, size_t packed, size_t *per_worker) {
    size_t pad = (size_t)(g->c * (g->h + 2 * g->ph) * (g->w + 2 * g->pw)), slab = (size_t)(g->p * g->q * L);
    *per_worker = ((pad + 16 + 2 * slab) + 15) & ~(size_t)15;     /* the forward's pair: two slabs */
    float *ws = mst_ctx_workspace(ctx, (packed + (size_t)workers * *per_worker + 16) * sizeof(float));
    return ws ? (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63) : NULL;
}

#if !MST_DIRECT_X86
/* Never reached: mst_conv_direct_applies answers false off x86-64. */
static mst_status no_direct_path(mst_ctx *ctx, const mst_op_call *c, const mst_conv_geom *g) {
    (void)g;
    return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "direct convolution needs x86-64");
}
#endif

mst_status mst_conv_direct_forward(mst_ctx *ctx, const mst_op_call *c, const mst_conv_geom *g) {
#if MST_DIRECT_X86
    int64_t kbs = g->k / L, crs = g->c * g->r * g->s, units = g->n * ((kbs + 1) / 2);
    int workers = mst_parallel_chunks_ctx(ctx, units, 1);
    size_t per_worker, packed = (size_t)(g->k * crs);
    float *ws = direct_workspace(ctx, g, workers, packed, &per_worker);
    if (!ws) return ctx->status;
    const float *w = mst_tensor_f32(c->in[1]);
    for (int64_t kb = 0; kb < kbs; kb++)       /* block kb: CRS vectors of its 16 channels' weights */
        for (int64_t i = 0; i < crs; i++)
            for (int l = 0; l < L; l++) ws[(kb * crs + i) * L + l] = w[(kb * L + l) * crs + i];
    direct_job job = {.g = g, .x = mst_tensor_f32(c->in[0]), .wpack = ws, .bias = c->n_in > 2 ? mst_tensor_f32(c->in[2]) : NULL,
                      .out = mst_tensor_f32(c->out[0]), .out_blocked = mst_tensor_blocked(c->out[0]), .ws = ws + packed,
                      .per_worker = per_worker};
    mst_parallel_for(ctx, units, 1, fwd_chunk, &job);
    return MST_OK;
#else
    return no_direct_path(ctx, c, g);
#endif
}

mst_status mst_conv_direct_grad_weight(mst_ctx *ctx, const mst_op_call *c, const mst_conv_geom *g) {
#if MST_DIRECT_X86
    int64_t kbs = g->k / L;
    int workers = mst_parallel_chunks_ctx(ctx, kbs, 1);
    size_t per_worker;
    float *ws = direct_workspace(ctx, g, workers, 0, &per_worker);
    if (!ws) return ctx->status;
    direct_job job = {.g = g, .x = mst_tensor_f32(c->in[1]), .gy = mst_tensor_f32(c->in[0]), .gy_blocked = mst_tensor_blocked(c->in[0]),
                      .out = mst_tensor_f32(c->out[0]), .ws = ws, .per_worker = per_worker};
    mst_parallel_for(ctx, kbs, 1, gw_chunk, &job);
    return MST_OK;
#else
    return no_direct_path(ctx, c, g);
#endif
}
