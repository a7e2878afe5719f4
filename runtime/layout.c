/* layout.c — nChw16c slabs, whole-tensor conversions and the plain fallback (runtime/layout.h). */
#include "runtime/layout.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/device.h"
#include "runtime/threadpool.h"

enum { B = MST_NCHW16C_BLOCK };

bool mst_layout_blockable(mst_dtype dtype, int ndim, const int64_t *shape) {
    return (dtype == MST_DTYPE_F32 || dtype == MST_DTYPE_I32 || dtype == MST_DTYPE_BF16) && ndim == 4 && shape[1] > 0 &&
           shape[1] % B == 0 &&
           shape[0] > 0 && shape[2] > 0 && shape[3] > 0;
}

/* A transpose of S x 16 values of elem bytes (4 or 2) into 16 x S (to_rows) or back: whole
 * tiles of 16 positions through sixteen AVX-512 registers where the CPU has it (two-byte values
 * zero-extended to 32-bit lanes and narrowed back), the rest element by element. Pure data
 * movement: both paths give the same bytes. */
static void transpose_scalar(const void *src, void *dst, int64_t s, int64_t i0, size_t elem, bool to_rows) {
    for (int64_t i = i0; i < s; i++)
        for (int l = 0; l < B; l++) {
            size_t slab_at = (size_t)(i * B + l) * elem, row_at = (size_t)(l * s + i) * elem;
            memcpy((char *)dst + (to_rows ? row_at : slab_at), (const char *)src + (to_rows ? slab_at : row_at), elem);
        }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* r[k] = row k of a 16x16 tile of 32-bit values -> r[k] = column k: three rounds of interleaves
 * (32-bit, 64-bit, 128-bit lanes) and one of 256-bit halves. */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        r[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        r[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        r[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        r[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    /* r[4a + b] now holds, in each 128-bit lane j, elements 4j..4j+3 of column (b + 4 * lane-group)
     * for rows 4a..4a+3; gather the 128-bit lanes */
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_i32x4(r[k], r[k + 4], 0x88);
        t[k + 4] = _mm512_shuffle_i32x4(r[k], r[k + 4], 0xdd);
        t[k + 8] = _mm512_shuffle_i32x4(r[k + 8], r[k + 12], 0x88);
        t[k + 12] = _mm512_shuffle_i32x4(r[k + 8], r[k + 12], 0xdd);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0xdd);
        r[k + 4] = _mm512_shuffle_i32x4(t[k + 4], t[k + 12], 0x88);
        r[k + 12] = _mm512_shuffle_i32x4(t[k + 4], t[k + 12], 0xdd);
    }
}

/* 16 values of elem bytes at p as 32-bit lanes, and back. */
__attribute__((target("avx512f"), always_inline)) static inline __m512i lanes_in(const void *p, size_t elem) {
    return elem == 4 ? _mm512_loadu_si512(p) : _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
}
__attribute__((target("avx512f"), always_inline)) static inline void lanes_out(void *p, __m512i v, size_t elem) {
    if (elem == 4) _mm512_storeu_si512(p, v);
    else _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v));
}

__attribute__((target("avx512f"), always_inline)) static inline void transpose_avx512_body(const char *src, char *dst, int64_t s,
                                                                                         size_t elem, bool to_rows) {
    int64_t i0 = 0;
    for (; i0 + B <= s; i0 += B) {
        __m512i r[16];
        for (int k = 0; k < 16; k++)    /* to_rows: k is a position of the slab; else a row */
            r[k] = lanes_in(src + (to_rows ? (size_t)((i0 + k) * B) : (size_t)(k * s + i0)) * elem, elem);
        transpose16(r);
        for (int k = 0; k < 16; k++)
            lanes_out(dst + (to_rows ? (size_t)(k * s + i0) : (size_t)((i0 + k) * B)) * elem, r[k], elem);
    }
    transpose_scalar(src, dst, s, i0, elem, to_rows);
}

__attribute__((target("avx512f"))) static void transpose_avx512_4(const char *src, char *dst, int64_t s, bool to_rows) {
    transpose_avx512_body(src, dst, s, 4, to_rows);
}
__attribute__((target("avx512f"))) static void transpose_avx512_2(const char *src, char *dst, int64_t s, bool to_rows) {
    transpose_avx512_body(src, dst, s, 2, to_rows);
}
#endif

static void transpose(const void *src, void *dst, int64_t s, size_t elem, bool to_rows) {
#if defined(__x86_64__)
    if (mst_cpu_has(MST_CPU_AVX512F)) {
        (elem == 4 ? transpose_avx512_4 : transpose_avx512_2)(src, dst, s, to_rows);
        return;
    }
#endif
    transpose_scalar(src, dst, s, 0, elem, to_rows);
}

void mst_nchw16c_slab_to_rows(const void *slab, void *rows, int64_t s, size_t elem) { transpose(slab, rows, s, elem, true); }
void mst_nchw16c_rows_to_slab(const void *rows, void *slab, int64_t s, size_t elem) { transpose(rows, slab, s, elem, false); }

/* Whole tensors a run of slabs per pool worker (each slab is independent data movement). */
typedef struct {
    const char *src;
    char *dst;
    int64_t s;
    size_t elem;
    bool to_rows;
} convert_job;

static void convert_slabs(void *arg, int64_t k0, int64_t k1, int worker) {
    (void)worker;
    const convert_job *j = arg;
    size_t slab = (size_t)(B * j->s) * j->elem;
    for (int64_t k = k0; k < k1; k++) transpose(j->src + (size_t)k * slab, j->dst + (size_t)k * slab, j->s, j->elem, j->to_rows);
}

static void convert(mst_ctx *ctx, const void *src, void *dst, int64_t n, int64_t c, int64_t s, size_t elem, bool to_rows) {
    convert_job j = {src, dst, s, elem, to_rows};
    int64_t slabs = n * (c / B), slab_bytes = B * s * (int64_t)elem;
    if (!ctx) {
        convert_slabs(&j, 0, slabs, 0);
        return;
    }
    /* at least 64 KiB a chunk: below that a wake-up of the pool costs more than it moves */
    int64_t min_chunk = (65536 + slab_bytes - 1) / slab_bytes;
    mst_parallel_for(ctx, slabs, min_chunk, convert_slabs, &j);
}

void mst_nchw16c_from_plain(mst_ctx *ctx, const void *plain, void *blocked, int64_t n, int64_t c, int64_t s, size_t elem) {
    convert(ctx, plain, blocked, n, c, s, elem, false);
}

void mst_nchw16c_to_plain(mst_ctx *ctx, const void *blocked, void *plain, int64_t n, int64_t c, int64_t s, size_t elem) {
    convert(ctx, blocked, plain, n, c, s, elem, true);
}

enum { MAX_POS = MST_MAX_OP_INPUTS + MST_MAX_OP_OUTPUTS };

/* Position p of c: its inputs, then its outputs. */
static const mst_tensor *pos_tensor(const mst_op_call *c, int p) { return p < c->n_in ? c->in[p] : c->out[p - c->n_in]; }

/* Bytes the twins of c's picked positions take, each 64-byte aligned. */
static size_t twins_bytes(const mst_op_call *c, const bool *pick) {
    size_t total = 0;
    for (int p = 0; p < c->n_in + c->n_out; p++)
        if (pick[p]) total += (mst_tensor_nbytes(pos_tensor(c, p)) + 63) & ~(size_t)63;
    return total;
}

void mst_layout_twin_header(const mst_tensor *t, mst_layout layout, void *data, mst_tensor *h, mst_storage *st) {
    *st = (mst_storage){.data = data, .nbytes = mst_tensor_nbytes(t), .refcount = 1 << 30, .cat = t->storage->cat,
                        .device = t->storage->device, .ctx = t->storage->ctx};
    *h = *t;
    h->layout = (uint8_t)layout;
    h->storage = st;
    h->offset = 0;
    h->refcount = 1 << 30;
    h->grad = NULL;
}

/* *call = c with every picked position p replaced by twin[p]: c's tensor's header in `layout`
 * over memory at base (in position order), its storage in st[p] (never freed through it). Input
 * twins hold c's values converted to the layout; output twins are left for the kernel to write. */
static void twin_call(mst_ctx *ctx, const mst_op_call *c, const bool *pick, mst_layout layout, char *base, mst_op_call *call,
                      mst_tensor *twin, mst_storage *st) {
    *call = *c;
    for (int p = 0; p < c->n_in + c->n_out; p++) {
        if (!pick[p]) continue;
        const mst_tensor *t = pos_tensor(c, p);
        mst_tensor *h = &twin[p];
        mst_layout_twin_header(t, layout, base, h, &st[p]);
        base += (mst_tensor_nbytes(t) + 63) & ~(size_t)63;
        if (p >= c->n_in) {
            call->out[p - c->n_in] = h;
            continue;
        }
        call->in[p] = h;
        (layout == MST_LAYOUT_NCHW16C ? mst_nchw16c_from_plain : mst_nchw16c_to_plain)(
            ctx, mst_tensor_data(t), st[p].data, t->shape[0], t->shape[1], t->shape[2] * t->shape[3], mst_dtype_size(t->dtype));
    }
}

bool mst_blocked_call_make(mst_ctx *ctx, const mst_op_call *c, mst_blocked_call *b) {
    const mst_op_desc *d = mst_op_table[c->op];
    bool pick[MAX_POS] = {false}, any = false;
    for (int p = 0; p < c->n_in + c->n_out; p++) {
        const mst_tensor *t = pos_tensor(c, p);
        uint32_t allowed = p < c->n_in ? d->blocked_in >> p & 1 : d->blocked_out >> (p - c->n_in) & 1;
        pick[p] = allowed && t && !mst_tensor_blocked(t) && mst_layout_blockable(t->dtype, t->ndim, t->shape);
        any |= pick[p];
    }
    if (!any) return false;
    b->mem = aligned_alloc(64, twins_bytes(c, pick));
    if (!b->mem) return false;
    twin_call(ctx, c, pick, MST_LAYOUT_NCHW16C, b->mem, &b->call, b->twin, b->storage);
    return true;
}

void mst_blocked_call_free(mst_blocked_call *b) {
    free(b->mem);
    b->mem = NULL;
}

bool mst_layout_blocked_allowed(const mst_ctx *ctx) {
    return ctx->backend->kind == MST_DEVICE_CPU && !ctx->force_ref && ctx->kernels == MST_KERNELS_AUTO && mst_onednn_available();
}

mst_blocked_how mst_layout_call_blocked_how(mst_ctx *ctx, const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_dtype key = c->n_in > 0 ? c->in[d->dtype_arg]->dtype : c->out[0]->dtype;
    if (!mst_kernel_choice_applies(c->op, key)) return MST_BLOCKED_TAKES;     /* not the kernel choice's */
    mst_provider p = mst_kernel_provider(ctx, c);
    if (p == MST_PROVIDER_ONEDNN_BLOCKED || p == MST_PROVIDER_ONEDNN_WINOGRAD || p == MST_PROVIDER_ONEDNN_F32) return MST_BLOCKED_REORDERS;
    return p == MST_PROVIDER_BUILTIN && mst_builtin_takes_blocked(c) ? MST_BLOCKED_TAKES : MST_BLOCKED_COPIES;
}

bool mst_builtin_takes_blocked(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    return d->builtin_takes_blocked && d->builtin_takes_blocked(c);
}

bool mst_call_has_blocked(const mst_op_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (mst_tensor_blocked(c->in[i])) return true;
    for (int k = 0; k < c->n_out; k++)
        if (mst_tensor_blocked(c->out[k])) return true;
    return false;
}

/* The plain copies' memory: one buffer per thread, grown to the largest call and kept (a fresh
 * malloc of the cnn stem's 6 MiB output per call cost more than the convolution: each one mapped
 * and faulted in new pages). */
static _Thread_local struct {
    void *data;
    size_t cap;
} scratch;

static void *scratch_get(size_t bytes) {
    if (bytes <= scratch.cap) return scratch.data;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) return NULL;
    free(scratch.data);
    scratch.data = p;
    scratch.cap = bytes;
    return p;
}

mst_status mst_layout_run_plain(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn k) {
    bool pick[MAX_POS] = {false};
    for (int p = 0; p < c->n_in + c->n_out; p++) pick[p] = mst_tensor_blocked(pos_tensor(c, p));
    size_t total = twins_bytes(c, pick);
    char *base = scratch_get(total);
    if (!base) return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: %zu bytes of plain copies of nChw16c tensors", total);
    mst_op_call pc;
    mst_tensor twin[MAX_POS];
    mst_storage st[MAX_POS];
    twin_call(ctx, c, pick, MST_LAYOUT_PLAIN, base, &pc, twin, st);
    mst_status s = k(ctx, &pc);
    for (int o = 0; s == MST_OK && o < c->n_out; o++) {       /* the blocked outputs from their plain twins */
        const mst_tensor *t = c->out[o];
        if (pick[c->n_in + o])
            mst_nchw16c_from_plain(ctx, st[c->n_in + o].data, mst_tensor_data(t), t->shape[0], t->shape[1],
                                   t->shape[2] * t->shape[3], mst_dtype_size(t->dtype));
    }
    return s;
}
