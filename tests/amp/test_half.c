/* test_half.c — the bulk half conversions and the generic half kernel.
 *
 * Conversions: every vector path available on this CPU against the scalar path, bit for bit, over
 * all 65536 f16 and bf16 patterns (widening), every f16 value plus the midpoints between
 * neighbours (ties), one ulp either side, subnormal and overflow boundaries and NaN payloads
 * (narrowing to f16), and a dense f32 sweep with ties and NaNs (narrowing to bf16); lengths and
 * offsets that leave vector tails. The scalar path itself is checked against an independent
 * oracle in tests/runtime/test_cast.c; here a few anchor values guard the direction of rounding.
 *
 * Half kernel: each forward op, and each grad op the cnn/mlp backward uses, run on f16 and bf16
 * inputs must give (a) exactly the f32 kernel's result on the widened inputs, rounded to nearest
 * even, and (b) results within half tolerance of f32 on the original inputs.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/half.h"
#include "tests/runtime/gradcheck.h"

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- conversions ---- */

/* Convert src (n f32) to `half` with every available path at a few offsets and compare with the
 * scalar path. */
static void check_narrow(mst_dtype half, const float *src, size_t n) {
    uint16_t *want = malloc(n * 2), *got = malloc(n * 2 + 64);
    mst_half_from_f32_path(MST_HALF_PATH_SCALAR, half, src, want, n);
    for (int p = MST_HALF_PATH_AVX2; p < MST_HALF_PATH_COUNT; p++) {
        if (!mst_half_path_available((mst_half_path)p)) { printf("path %s not available\n", mst_half_path_name(p)); continue; }
        for (size_t off = 0; off < 3; off++) {       /* unaligned starts and odd tails */
            size_t m = n - off;
            memset(got, 0xab, n * 2);
            mst_half_from_f32_path((mst_half_path)p, half, src + off, got, m);
            for (size_t i = 0; i < m; i++)
                if (got[i] != want[i + off])
                    fail_msg("%s f32->%s: 0x%08x -> 0x%04x, scalar 0x%04x", mst_half_path_name(p), mst_dtype_name(half),
                             f32_bits(src[i + off]), got[i], want[i + off]);
        }
    }
    free(want);
    free(got);
}

static void check_widen_all(mst_dtype half) {
    size_t n = 65536;
    uint16_t *h = malloc(n * 2);
    float *want = malloc(n * 4), *got = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    mst_half_to_f32_path(MST_HALF_PATH_SCALAR, half, h, want, n);
    for (int p = MST_HALF_PATH_AVX2; p < MST_HALF_PATH_COUNT; p++) {
        if (!mst_half_path_available((mst_half_path)p)) continue;
        for (size_t off = 0; off < 3; off++) {
            mst_half_to_f32_path((mst_half_path)p, half, h + off, got, n - off);
            for (size_t i = 0; i < n - off; i++)
                if (f32_bits(got[i]) != f32_bits(want[i + off]))
                    fail_msg("%s %s->f32: 0x%04x -> 0x%08x, scalar 0x%08x", mst_half_path_name(p), mst_dtype_name(half),
                             h[i + off], f32_bits(got[i]), f32_bits(want[i + off]));
        }
    }
    free(h);
    free(want);
    free(got);
}

static void test_f16_widen_all_patterns(void **state) {
    check_widen_all(MST_DTYPE_F16);
    /* exact values: the smallest subnormal, the largest normal; a signalling NaN comes back quiet */
    assert_int_equal(f32_bits(mst_f16_to_f32(0x0001)), f32_bits(0x1p-24f));
    assert_int_equal(f32_bits(mst_f16_to_f32(0x7bff)), f32_bits(65504.0f));
    assert_int_equal(f32_bits(mst_f16_to_f32(0x7c01)), 0x7fc02000u);
    assert_int_equal(f32_bits(mst_f16_to_f32(0xfe00)), 0xffc00000u);
}

static void test_bf16_widen_all_patterns(void **state) {
    check_widen_all(MST_DTYPE_BF16);
    for (uint32_t i = 0; i < 65536; i++) assert_int_equal(f32_bits(mst_bf16_to_f32((uint16_t)i)), i << 16);
}

static void test_f16_narrow(void **state) {
    /* every finite f16 value, the midpoint to its upper neighbour and one f32 ulp either side of it */
    size_t cap = 0x7c00 * 2 * 4 + 64, n = 0;
    float *v = malloc(cap * sizeof(float));
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float a = mst_f16_to_f32((uint16_t)h), b = mst_f16_to_f32((uint16_t)(h + 1));   /* 0x7c00 -> inf */
        float mid = h == 0x7bff ? 65520.0f : (float)(((double)a + (double)b) / 2);      /* exact in f32 */
        v[n++] = a;
        v[n++] = mid;
        v[n++] = nextafterf(mid, 0);
        v[n++] = nextafterf(mid, INFINITY);
    }
    for (size_t i = 0, m = n; i < m; i++) v[n++] = -v[i];
    const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0x7fbfffffu, 0xffc00001u,
                                0x7f802000u, 0x7fffe000u, 0x7f801fffu, 0x00000001u, 0x80000001u, 0x33000000u,
                                0x33000001u, 0x32ffffffu, 0x38800000u, 0x387fffffu, 0x477fefffu, 0x477ff000u,
                                0x47800000u, 0x7f7fffffu, 0xc77ff000u};
    float *all = malloc((n + 32) * sizeof(float));
    memcpy(all, v, n * sizeof(float));
    for (size_t i = 0; i < sizeof(special) / 4; i++) all[n++] = bits_f32(special[i]);
    check_narrow(MST_DTYPE_F16, all, n);
    /* anchors: ties to even, subnormal boundary, overflow at the tie past the largest normal, NaN quieting */
    assert_int_equal(mst_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);            /* tie, even below */
    assert_int_equal(mst_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);        /* tie, even above */
    assert_int_equal(mst_f32_to_f16(0x1p-25f), 0x0000);                   /* half the smallest subnormal: to even 0 */
    assert_int_equal(mst_f32_to_f16(bits_f32(0x33000001u)), 0x0001);
    assert_int_equal(mst_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(mst_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(mst_f32_to_f16(bits_f32(0x7f800001u)), 0x7e00);    /* payload only in dropped bits */
    assert_int_equal(mst_f32_to_f16(bits_f32(0xffffe000u)), 0xffff);
    free(v);
    free(all);
}

static void test_bf16_narrow(void **state) {
    /* a dense sweep of f32 patterns (a prime stride over all 2^32), every bf16 tie and its neighbours */
    size_t n = 0, cap = (1u << 20) + 65536 * 3 + 64;
    float *v = malloc(cap * sizeof(float));
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) v[n++] = bits_f32((uint32_t)u);
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t tie = h << 16 | 0x8000u;
        v[n++] = bits_f32(tie);
        v[n++] = bits_f32(tie - 1);
        v[n++] = bits_f32(tie + 1);
    }
    const uint32_t special[] = {0x7f800001u, 0x7f808000u, 0x7f80ffffu, 0xff800001u, 0x7fc00000u, 0x7fffffffu,
                                0xffffffffu, 0x7f7fffffu, 0x7f7f8000u, 0x00000001u, 0x00008000u, 0x80018000u};
    for (size_t i = 0; i < sizeof(special) / 4; i++) v[n++] = bits_f32(special[i]);
    check_narrow(MST_DTYPE_BF16, v, n);
    assert_int_equal(mst_f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);     /* tie, even below */
    assert_int_equal(mst_f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);     /* tie, even above */
    assert_int_equal(mst_f32_to_bf16(bits_f32(0x7f7f8000u)), 0x7f80);     /* rounds up to inf */
    assert_int_equal(mst_f32_to_bf16(bits_f32(0x7f800001u)), 0x7fc0);     /* NaN stays NaN, quiet */
    free(v);
}

/* The cast op takes the vector path, and force_ref the scalar one: same bits. */
/* Every length 0..40 (the padded-block tails of the AVX-512 paths, every remainder mod 16 and
 * the short rows the half kernels convert), both directions, both half types, every available
 * path: the scalar path's bits, and nothing written past the end. */
static void test_short_rows(void **state) {
    (void)state;
    enum { MAXN = 40, CANARY = 0x5a };
    float src[MAXN], wide[MAXN + 16], want_wide[MAXN];
    uint16_t h[MAXN], narrow[MAXN + 16], want_narrow[MAXN];
    for (int i = 0; i < MAXN; i++) {
        src[i] = (i % 5 == 4) ? bits_f32(0x00000100u + (uint32_t)i) : (float)(i * 0.731 - 11.3) * (i % 3 ? 1e-3f : 1e3f);
        h[i] = (uint16_t)(0x3c00 + i * 997);
    }
    const mst_dtype types[2] = {MST_DTYPE_F16, MST_DTYPE_BF16};
    for (int t = 0; t < 2; t++)
        for (int p = MST_HALF_PATH_AVX2; p < MST_HALF_PATH_COUNT; p++) {
            if (!mst_half_path_available((mst_half_path)p)) continue;
            for (size_t n = 0; n <= MAXN; n++) {
                mst_half_from_f32_path(MST_HALF_PATH_SCALAR, types[t], src, want_narrow, n);
                memset(narrow, CANARY, sizeof(narrow));
                mst_half_from_f32_path((mst_half_path)p, types[t], src, narrow, n);
                assert_memory_equal(narrow, want_narrow, n * 2);
                for (size_t i = n * 2; i < sizeof(narrow); i++) assert_int_equal(((unsigned char *)narrow)[i], CANARY);
                mst_half_to_f32_path(MST_HALF_PATH_SCALAR, types[t], h, want_wide, n);
                memset(wide, CANARY, sizeof(wide));
                mst_half_to_f32_path((mst_half_path)p, types[t], h, wide, n);
                assert_memory_equal(wide, want_wide, n * 4);
                for (size_t i = n * 4; i < sizeof(wide); i++) assert_int_equal(((unsigned char *)wide)[i], CANARY);
            }
        }
}

static void test_cast_op_paths_agree(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    int64_t n = 1003;
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &n, 0, 1000);
    for (int k = 0; k < 2; k++) {
        mst_dtype h = k ? MST_DTYPE_BF16 : MST_DTYPE_F16;
        mst_tensor *fast = mst_cast(ctx, x, h), *back = mst_cast(ctx, fast, MST_DTYPE_F32);
        mst_ctx_set_force_ref(ctx, true);
        mst_tensor *ref = mst_cast(ctx, x, h), *back_ref = mst_cast(ctx, ref, MST_DTYPE_F32);
        mst_ctx_set_force_ref(ctx, false);
        assert_non_null(back);
        assert_non_null(back_ref);
        assert_memory_equal(mst_tensor_data(fast), mst_tensor_data(ref), (size_t)n * 2);
        assert_memory_equal(mst_tensor_data(back), mst_tensor_data(back_ref), (size_t)n * 4);
    }
    mst_ctx_free(ctx);
}

/* ---- the half kernel ---- */

typedef struct {
    gc_case c;
    uint32_t keep_f32;      /* inputs left in f32 in the half run (batchnorm's running statistics) */
    double tol;             /* f16 tolerance, relative to max |y|; bf16 gets 8x */
} hk_case;

/* Builders. Inputs the op updates in place are cloned first, so every run starts from the same state. */
static mst_tensor *b_add(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_add(ctx, in[0], in[1]); }
static mst_tensor *b_sub(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_sub(ctx, in[0], in[1]); }
static mst_tensor *b_mul(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_mul(ctx, in[0], in[1]); }
static mst_tensor *b_div(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_div(ctx, in[0], in[1]); }
static mst_tensor *b_scale(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_scale(ctx, in[0], -1.5); }
static mst_tensor *b_relu(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_relu(ctx, in[0]); }
static mst_tensor *b_gelu(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_gelu(ctx, in[0]); }
static mst_tensor *b_tanh(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_tanh(ctx, in[0]); }
static mst_tensor *b_sigmoid(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_sigmoid(ctx, in[0]); }
static mst_tensor *b_matmul(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_matmul(ctx, in[0], in[1]); }
static mst_tensor *b_linear(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_linear(ctx, in[0], in[1], in[2]); }
static mst_tensor *b_conv(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_conv2d(ctx, in[0], in[1], in[2], 1, 1, 1, 1);
}
static mst_tensor *b_conv_s2(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_conv2d(ctx, in[0], in[1], NULL, 2, 2, 0, 0);
}
/* y, or with arg "stats" the updated running variance */
static mst_tensor *b_batchnorm(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    mst_tensor *rm = mst_tensor_clone(ctx, in[3]), *rv = mst_tensor_clone(ctx, in[4]);
    mst_tensor *y = mst_batchnorm(ctx, in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5);
    return a ? (y ? rv : NULL) : y;
}
static mst_tensor *b_layernorm(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_layernorm(ctx, in[0], in[1], in[2], 1e-5);
}
static mst_tensor *b_maxpool(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_maxpool2d(ctx, in[0], 2, 2, 2, 2, 0, 0); }
static mst_tensor *b_avgpool(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_avgpool2d(ctx, in[0], 3, 3, 2, 2, 1, 1); }
static mst_tensor *b_gap(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_global_avgpool(ctx, in[0]); }
static mst_tensor *b_softmax(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_softmax(ctx, in[0], -1); }
static mst_tensor *b_log_softmax(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_log_softmax(ctx, in[0], 1); }
static mst_tensor *b_xent(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_cross_entropy(ctx, in[0], in[1]); }
static mst_tensor *b_embedding(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_embedding(ctx, in[0], in[1]); }
static mst_tensor *b_dropout(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_dropout(ctx, in[0], 0.3, true); }
static mst_tensor *b_sum(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_sum(ctx, in[0], 1u << 1, false); }
static mst_tensor *b_mean(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_mean(ctx, in[0], 0, false); }
static mst_tensor *b_sum_to(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_sum_to(ctx, in[0], 2, (int64_t[]){1, 7});
}
static mst_tensor *b_broadcast_to(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_broadcast_to(ctx, in[0], 3, (int64_t[]){4, 3, 7});
}
/* grad ops the cnn/mlp backward uses */
static mst_tensor *b_relu_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_relu_grad(ctx, in[0], in[1]); }
static mst_tensor *b_conv_gi(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_conv2d_grad_input(ctx, in[0], in[1], 6, 6, 1, 1, 1, 1);
}
static mst_tensor *b_conv_gw(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_conv2d_grad_weight(ctx, in[0], in[1], 3, 3, 1, 1, 1, 1);
}
static mst_tensor *b_bn_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    mst_tensor *out[3] = {0};
    mst_batchnorm_grad(ctx, in[0], in[1], in[2], in[3], in[4], true, out);
    return out[*(const int *)a];
}
static mst_tensor *b_maxpool_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    mst_attrs at = {.i = {2, 2, 2, 2, 0, 0}};
    if (mst_dispatch(ctx, MST_OP_MAXPOOL2D, 1, in, &at, out) != MST_OK) return NULL;
    return mst_maxpool2d_grad(ctx, in[1], out[1], (int)in[0]->shape[2], (int)in[0]->shape[3]);
}
static mst_tensor *b_avgpool_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_avgpool2d_grad(ctx, in[0], 6, 6, 3, 3, 2, 2, 1, 1);
}
static mst_tensor *b_xent_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_cross_entropy_grad(ctx, in[0], in[1], in[2]);
}
static mst_tensor *b_softmax_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_softmax_grad(ctx, in[0], in[1], 1);
}
static mst_tensor *b_log_softmax_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) {
    return mst_log_softmax_grad(ctx, in[0], in[1], 1);
}
static mst_tensor *b_gelu_grad(mst_ctx *ctx, mst_tensor *const in[], const void *a) { return mst_gelu_grad(ctx, in[0], in[1]); }

static const int k0 = 0, k1 = 1, k2 = 2;
#define IN(nd, ...) {nd, {__VA_ARGS__}, GC_RANDN, false, 0}
#define IN_F(fill, nd, ...) {nd, {__VA_ARGS__}, fill, false, 0}
#define LABELS(range, nd, ...) {nd, {__VA_ARGS__}, GC_LABELS, false, range}

static const hk_case cases[] = {
    {{"add", b_add, NULL, 2, {IN(2, 4, 7), IN(1, 7)}}, 0, 0},
    {{"sub", b_sub, NULL, 2, {IN(2, 4, 7), IN(2, 4, 7)}}, 0, 0},
    {{"mul", b_mul, NULL, 2, {IN(3, 2, 3, 5), IN(2, 3, 5)}}, 0, 0},
    {{"div", b_div, NULL, 2, {IN(2, 4, 7), IN_F(GC_POSITIVE, 2, 4, 7)}}, 0, 0},
    {{"scale", b_scale, NULL, 1, {IN(2, 5, 9)}}, 0, 0},
    {{"relu", b_relu, NULL, 1, {IN(2, 5, 9)}}, 0, 0},
    {{"gelu", b_gelu, NULL, 1, {IN(2, 5, 9)}}, 0, 0},
    {{"tanh", b_tanh, NULL, 1, {IN(2, 5, 9)}}, 0, 0},
    {{"sigmoid", b_sigmoid, NULL, 1, {IN(2, 5, 9)}}, 0, 0},
    {{"matmul", b_matmul, NULL, 2, {IN(2, 9, 33), IN(2, 33, 17)}}, 0, 0},
    {{"linear", b_linear, NULL, 3, {IN(2, 8, 40), IN(2, 12, 40), IN(1, 12)}}, 0, 0},
    {{"conv2d", b_conv, NULL, 3, {IN(4, 2, 3, 6, 6), IN(4, 4, 3, 3, 3), IN(1, 4)}}, 0, 0},
    {{"conv2d stride 2", b_conv_s2, NULL, 2, {IN(4, 2, 3, 7, 7), IN(4, 4, 3, 3, 3)}}, 0, 0},
    {{"batchnorm (f32 stats)", b_batchnorm, NULL, 5,
      {IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 1u << 3 | 1u << 4, 0},
    {{"batchnorm running var (f32)", b_batchnorm, "stats", 5,
      {IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 1u << 3 | 1u << 4, 0},
    /* amp O2: half x, f32 parameters and statistics (the native half kernels of norm.c) */
    {{"batchnorm (half x, f32 params)", b_batchnorm, NULL, 5,
      {IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0x1e, 0},
    {{"batchnorm running var (half x, f32 params)", b_batchnorm, "stats", 5,
      {IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0x1e, 0},
    {{"batchnorm_grad gx (half x, f32 params)", b_bn_grad, &k0, 5,
      {IN(4, 3, 4, 5, 7), IN(4, 3, 4, 5, 7), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0x1c, 0},
    {{"batchnorm_grad ggamma (half x, f32 params)", b_bn_grad, &k1, 5,
      {IN(4, 3, 4, 5, 7), IN(4, 3, 4, 5, 7), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0x1c, 0},
    {{"batchnorm_grad gbeta (half x, f32 params)", b_bn_grad, &k2, 5,
      {IN(4, 3, 4, 5, 7), IN(4, 3, 4, 5, 7), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0x1c, 0},
    {{"batchnorm (half x, f32 params, many channels)", b_batchnorm, NULL, 5,
      {IN(4, 8, 64, 16, 16), IN_F(GC_POSITIVE, 1, 64), IN(1, 64), IN(1, 64), IN_F(GC_POSITIVE, 1, 64)}}, 0x1e, 0},
    {{"batchnorm_grad gx (half x, f32 params, many channels)", b_bn_grad, &k0, 5,
      {IN(4, 8, 64, 16, 16), IN(4, 8, 64, 16, 16), IN_F(GC_POSITIVE, 1, 64), IN(1, 64), IN_F(GC_POSITIVE, 1, 64)}}, 0x1c, 0},
    {{"batchnorm (all half)", b_batchnorm, NULL, 5,
      {IN(2, 16, 6), IN_F(GC_POSITIVE, 1, 6), IN(1, 6), IN(1, 6), IN_F(GC_POSITIVE, 1, 6)}}, 0, 0},
    {{"batchnorm running var (half)", b_batchnorm, "stats", 5,
      {IN(2, 16, 6), IN_F(GC_POSITIVE, 1, 6), IN(1, 6), IN(1, 6), IN_F(GC_POSITIVE, 1, 6)}}, 0, 0},
    {{"layernorm", b_layernorm, NULL, 3, {IN(3, 2, 3, 16), IN_F(GC_POSITIVE, 1, 16), IN(1, 16)}}, 0, 0},
    {{"maxpool2d", b_maxpool, NULL, 1, {IN_F(GC_DISTINCT, 4, 2, 3, 6, 6)}}, 0, 0},
    {{"avgpool2d", b_avgpool, NULL, 1, {IN(4, 2, 3, 6, 6)}}, 0, 0},
    {{"global_avgpool", b_gap, NULL, 1, {IN(4, 2, 3, 6, 6)}}, 0, 0},
    {{"softmax", b_softmax, NULL, 1, {IN(2, 6, 10)}}, 0, 0},
    {{"log_softmax", b_log_softmax, NULL, 1, {IN(2, 6, 10)}}, 0, 0},
    {{"cross_entropy", b_xent, NULL, 2, {IN(2, 8, 10), LABELS(10, 1, 8)}}, 0, 0},
    {{"embedding", b_embedding, NULL, 2, {LABELS(11, 2, 3, 4), IN(2, 11, 5)}}, 0, 0},
    {{"dropout", b_dropout, NULL, 1, {IN(2, 16, 16)}}, 0, 0},
    {{"sum", b_sum, NULL, 1, {IN(3, 3, 40, 2)}}, 0, 0},
    {{"mean", b_mean, NULL, 1, {IN(2, 30, 20)}}, 0, 0},
    {{"sum_to", b_sum_to, NULL, 1, {IN(3, 4, 3, 7)}}, 0, 0},
    {{"broadcast_to", b_broadcast_to, NULL, 1, {IN(2, 3, 1)}}, 0, 0},
    {{"relu_grad", b_relu_grad, NULL, 2, {IN(2, 5, 9), IN(2, 5, 9)}}, 0, 0},
    {{"gelu_grad", b_gelu_grad, NULL, 2, {IN(2, 5, 9), IN(2, 5, 9)}}, 0, 0},
    {{"conv2d_grad_input", b_conv_gi, NULL, 2, {IN(4, 2, 4, 6, 6), IN(4, 4, 3, 3, 3)}}, 0, 0},
    {{"conv2d_grad_weight", b_conv_gw, NULL, 2, {IN(4, 2, 4, 6, 6), IN(4, 2, 3, 6, 6)}}, 0, 0},
    {{"batchnorm_grad gx", b_bn_grad, &k0, 5,
      {IN(4, 3, 4, 5, 5), IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0, 0},
    {{"batchnorm_grad ggamma", b_bn_grad, &k1, 5,
      {IN(4, 3, 4, 5, 5), IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0, 0},
    {{"batchnorm_grad gbeta", b_bn_grad, &k2, 5,
      {IN(4, 3, 4, 5, 5), IN(4, 3, 4, 5, 5), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0, 0},
    {{"maxpool2d_grad", b_maxpool_grad, NULL, 2, {IN_F(GC_DISTINCT, 4, 2, 3, 6, 6), IN(4, 2, 3, 3, 3)}}, 0, 0},
    {{"avgpool2d_grad", b_avgpool_grad, NULL, 1, {IN(4, 2, 3, 3, 3)}}, 0, 0},
    /* large enough for the half kernel's slices: elementwise ops in several 64K-element chunks,
     * batch norm in one-channel ranges (307200 elements a channel) */
    {{"add (flat chunks)", b_add, NULL, 2, {IN(2, 300, 300), IN(2, 300, 300)}}, 0, 0},
    /* too many values to stay distinct in half: rounding makes ties that move the maxima, so only
     * (a), the bits against the f32 kernel on the same half inputs, is meaningful here */
    {{"maxpool2d_grad (planes over threads)", b_maxpool_grad, NULL, 2, {IN_F(GC_DISTINCT, 4, 4, 32, 28, 28), IN(4, 4, 32, 14, 14)}},
     0, 1e9},
    {{"maxpool2d (planes over threads)", b_maxpool, NULL, 1, {IN_F(GC_DISTINCT, 4, 4, 32, 28, 28)}}, 0, 1e9},
    {{"relu_grad (flat chunks)", b_relu_grad, NULL, 2, {IN(2, 300, 300), IN(2, 300, 300)}}, 0, 0},
    {{"batchnorm (channel slices)", b_batchnorm, NULL, 5,
      {IN(4, 3, 4, 320, 320), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 1u << 3 | 1u << 4, 0},
    {{"batchnorm_grad gx (channel slices)", b_bn_grad, &k0, 5,
      {IN(4, 3, 4, 320, 320), IN(4, 3, 4, 320, 320), IN_F(GC_POSITIVE, 1, 4), IN(1, 4), IN_F(GC_POSITIVE, 1, 4)}}, 0, 0},
    /* the forward outputs these take (probabilities, log-probabilities) are inputs here, so the f32
     * and half runs see the same values */
    {{"cross_entropy_grad", b_xent_grad, NULL, 3, {IN(0, 0), IN_F(GC_POSITIVE, 2, 8, 10), LABELS(10, 1, 8)}}, 0, 0},
    {{"softmax_grad", b_softmax_grad, NULL, 2, {IN(2, 6, 10), IN_F(GC_POSITIVE, 2, 6, 10)}}, 0, 0},
    {{"log_softmax_grad", b_log_softmax_grad, NULL, 2, {IN(2, 6, 10), IN(2, 6, 10)}}, 0, 0},
};

/* Inputs of the half run: float inputs cast to `half` except those in keep_f32. */
static void to_half(mst_ctx *ctx, const hk_case *hc, mst_tensor *const in[], mst_dtype half, mst_tensor *out[]) {
    for (int i = 0; i < hc->c.n_inputs; i++)
        out[i] = mst_dtype_is_float(in[i]->dtype) && !(hc->keep_f32 >> i & 1) ? mst_cast(ctx, in[i], half) : in[i];
}

static mst_tensor *run(mst_ctx *ctx, const hk_case *hc, mst_tensor *const in[], mst_rng rng) {
    ctx->rng = rng;     /* random ops (dropout) draw the same mask every run */
    mst_tensor *y = hc->c.build(ctx, in, hc->c.arg);
    if (!y) fail_msg("%s: %s", hc->c.name, mst_ctx_error(ctx));
    return y;
}

static void check_case(const hk_case *hc, mst_dtype half, bool force_ref, uint64_t seed, int threads) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = seed, .n_threads = threads});
    mst_grad_set_enabled(ctx, false);
    mst_ctx_set_force_ref(ctx, force_ref);
    mst_tensor *in[MST_MAX_OP_INPUTS] = {0}, *hin[MST_MAX_OP_INPUTS] = {0}, *win[MST_MAX_OP_INPUTS] = {0};
    gc_make_inputs(ctx, &hc->c, MST_DTYPE_F32, in);
    mst_rng rng = ctx->rng;
    to_half(ctx, hc, in, half, hin);
    for (int i = 0; i < hc->c.n_inputs; i++) win[i] = mst_cast(ctx, hin[i], in[i]->dtype);   /* widened */
    mst_tensor *y32 = run(ctx, hc, in, rng), *yw = run(ctx, hc, win, rng), *yh = run(ctx, hc, hin, rng);
    bool half_out = yh->dtype == half;
    assert_true(half_out || yh->dtype == MST_DTYPE_F32);
    /* (a) exactly the f32 kernel on the widened inputs, rounded to nearest even */
    mst_tensor *want = half_out ? mst_cast(ctx, yw, half) : yw;
    assert_int_equal(want->numel, yh->numel);
    if (memcmp(mst_tensor_data(want), mst_tensor_data(yh), mst_tensor_nbytes(yh)) != 0)
        for (int64_t k = 0; k < yh->numel; k++)
            if (mst_tensor_get(want, k) != mst_tensor_get(yh, k))
                fail_msg("%s %s%s (seed %llu): element %lld is %.9g, f32 kernel on the same inputs gives %.9g", hc->c.name,
                         mst_dtype_name(half), force_ref ? " ref" : "", (unsigned long long)seed, (long long)k,
                         mst_tensor_get(yh, k), mst_tensor_get(want, k));
    /* (b) within half tolerance of f32 on the original inputs (relative to the largest output) */
    double scale = 0, err = 0;
    for (int64_t k = 0; k < y32->numel; k++) scale = fmax(scale, fabs(mst_tensor_get(y32, k)));
    for (int64_t k = 0; k < y32->numel; k++) err = fmax(err, fabs(mst_tensor_get(yh, k) - mst_tensor_get(y32, k)));
    double tol = (hc->tol > 0 ? hc->tol : 1e-2) * (half == MST_DTYPE_BF16 ? 8 : 1);
    if (err > tol * fmax(scale, 1e-3))
        fail_msg("%s %s (seed %llu): max error %.3g against f32 (max |y| %.3g, tolerance %.3g)", hc->c.name,
                 mst_dtype_name(half), (unsigned long long)seed, err, scale, tol);
    mst_ctx_free(ctx);
}

static void test_half_kernel_ops(void **state) {
    uint64_t seed = gc_seed();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        printf("half kernel %-30s seed %llu\n", cases[i].c.name, (unsigned long long)seed);
        for (int force_ref = 0; force_ref < 2; force_ref++) {
            check_case(&cases[i], MST_DTYPE_F16, force_ref, seed, 1);
            check_case(&cases[i], MST_DTYPE_BF16, force_ref, seed, 1);
        }
        /* two threads: the fast kernels' ranges and blocks split over the pool, same bits */
        check_case(&cases[i], MST_DTYPE_BF16, false, seed, 2);
    }
}

/* The half kernel's scratch is workspace memory, grow-only: a repeated call allocates nothing. */
static void test_half_kernel_scratch(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 1});
    mst_grad_set_enabled(ctx, false);
    int64_t xs[4] = {4, 3, 8, 8}, ws[4] = {8, 3, 3, 3};
    mst_tensor *x = mst_cast(ctx, mst_tensor_randn(ctx, MST_DTYPE_F32, 4, xs, 0, 1), MST_DTYPE_F16);
    mst_tensor *w = mst_cast(ctx, mst_tensor_randn(ctx, MST_DTYPE_F32, 4, ws, 0, 1), MST_DTYPE_F16);
    int64_t before = mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE];
    for (int step = 0; step < 3; step++) {
        mst_pool_push(ctx);
        uint64_t sys = mst_ctx_mem(ctx)->n_system;
        mst_tensor *y = mst_relu(ctx, mst_conv2d(ctx, x, w, NULL, 1, 1, 1, 1));
        assert_non_null(y);
        assert_int_equal(y->dtype, MST_DTYPE_F16);
        if (step > 0) assert_int_equal(mst_ctx_mem(ctx)->n_system, sys);
        mst_pool_pop(ctx);
    }
    /* the scratch holds x, w and y in f32 at least */
    assert_true(mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE] - before >= (int64_t)(4 * 3 * 64 + 8 * 27 + 4 * 8 * 64) * 4);
    mst_ctx_free(ctx);
}

/* relu and relu_grad on half tensors select on the bits (runtime/ops/activation.c): every pattern
 * of each half type, NaNs and signed zeros included, against widen + the f32 select + round. The
 * tensors are large enough to split over two threads. */
static void test_half_relu_all_patterns(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed(), .n_threads = 2});
    mst_grad_set_enabled(ctx, false);
    const mst_dtype types[2] = {MST_DTYPE_F16, MST_DTYPE_BF16};
    const int64_t n = 4 * 65536;
    for (int t = 0; t < 2; t++) {
        mst_tensor *x = mst_tensor_new(ctx, types[t], 1, &n), *g = mst_tensor_new(ctx, types[t], 1, &n);
        uint16_t *xv = mst_tensor_data(x), *gv = mst_tensor_data(g);
        for (int64_t i = 0; i < n; i++) {
            xv[i] = (uint16_t)i;
            gv[i] = (uint16_t)(i * 40503u + 17);
        }
        mst_tensor *y = mst_relu(ctx, x), *gx = mst_relu_grad(ctx, g, x);
        assert_non_null(y);
        assert_non_null(gx);
        const uint16_t *yv = mst_tensor_data(y), *gxv = mst_tensor_data(gx);
        for (int64_t i = 0; i < n; i++) {
            float xf, gf, r, rg;
            mst_half_to_f32_path(MST_HALF_PATH_SCALAR, types[t], &xv[i], &xf, 1);
            mst_half_to_f32_path(MST_HALF_PATH_SCALAR, types[t], &gv[i], &gf, 1);
            r = xf <= 0 ? 0.0f : xf;
            rg = xf > 0 ? gf : 0.0f;
            uint16_t want, want_g;
            mst_half_from_f32_path(MST_HALF_PATH_SCALAR, types[t], &r, &want, 1);
            mst_half_from_f32_path(MST_HALF_PATH_SCALAR, types[t], &rg, &want_g, 1);
            if (yv[i] != want) fail_msg("%s relu(0x%04x) = 0x%04x, want 0x%04x", mst_dtype_name(types[t]), xv[i], yv[i], want);
            if (gxv[i] != want_g)
                fail_msg("%s relu_grad(g 0x%04x, x 0x%04x) = 0x%04x, want 0x%04x", mst_dtype_name(types[t]), gv[i], xv[i],
                         gxv[i], want_g);
        }
    }
    mst_ctx_free(ctx);
}

/* An op with no f32 kernel gets no half kernel: the error names the dtype. */
static void test_half_kernel_applies(void **state) {
    assert_true(mst_half_kernel_applies(mst_op_table[MST_OP_CONV2D], MST_DTYPE_F16));
    assert_true(mst_half_kernel_applies(mst_op_table[MST_OP_CONV2D], MST_DTYPE_BF16));
    assert_false(mst_half_kernel_applies(mst_op_table[MST_OP_CONV2D], MST_DTYPE_F32));
    assert_false(mst_half_kernel_applies(mst_op_table[MST_OP_CONV2D], MST_DTYPE_I32));
    assert_true(mst_half_path_available(MST_HALF_PATH_SCALAR));
    printf("conversion path: %s\n", mst_half_path_name(mst_half_best_path()));
}

/* batchnorm accepts half x/gamma/beta with f32 running statistics (O3) and no other mix. */
static void test_batchnorm_dtype_mix(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    int64_t xs[2] = {4, 3}, cs = 3;
    mst_tensor *f32[5], *f16[5];
    for (int i = 0; i < 5; i++) {
        f32[i] = mst_tensor_full(ctx, MST_DTYPE_F32, i ? 1 : 2, i ? &cs : xs, i == 4 ? 1.0 : 0.5);
        f16[i] = mst_cast(ctx, f32[i], MST_DTYPE_F16);
    }
    mst_tensor *y = mst_batchnorm(ctx, f16[0], f16[1], f16[2], f32[3], f32[4], true, 0.1, 1e-5);
    assert_non_null(y);
    assert_int_equal(y->dtype, MST_DTYPE_F16);
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, f32[0], f32[1], f32[2], f16[3], f16[4], true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, f16[0], f32[1], f16[2], f32[3], f32[4], true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm");
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, f16[0], f16[1], f16[2], f32[3], f16[4], true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm");
    mst_tensor *f64 = mst_cast(ctx, f32[3], MST_DTYPE_F64);
    GC_EXPECT_ERROR(ctx, mst_batchnorm(ctx, f16[0], f16[1], f16[2], f64, f64, true, 0.1, 1e-5), MST_ERR_DTYPE, "batchnorm");
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_widen_all_patterns), cmocka_unit_test(test_bf16_widen_all_patterns),
        cmocka_unit_test(test_f16_narrow),             cmocka_unit_test(test_bf16_narrow),
        cmocka_unit_test(test_cast_op_paths_agree),    cmocka_unit_test(test_half_kernel_ops),
        cmocka_unit_test(test_half_kernel_scratch),    cmocka_unit_test(test_half_kernel_applies), cmocka_unit_test(test_half_relu_all_patterns),
        cmocka_unit_test(test_batchnorm_dtype_mix),     cmocka_unit_test(test_short_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
