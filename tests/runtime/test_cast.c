/* test_cast.c — the cast op against independent oracles: every f16 and bf16 bit pattern round
 * trips through f32, f32 -> f16/bf16 rounds to nearest even (ties built explicitly, random
 * patterns checked against a brute-force nearest-value search), overflow, subnormals, NaN
 * handling, i32 <-> float values, and the cast's backward rule. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/runtime/gradcheck.h"

/* ---- independent references (no code shared with runtime/dtype.c) ---- */

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* The value an f16 pattern stands for; 0x7c00 reads as 2^16, the next step past the largest
 * finite value had the exponent not run out (what rounding to "inf" compares against). */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : 65536.0) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Nearest of lo and lo + 1 (values vlo < a <= vhi), ties to the even pattern. */
static uint16_t pick_nearest(uint16_t lo, double vlo, double vhi, double a) {
    double dlo = a - vlo, dhi = vhi - a;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return (uint16_t)(lo + 1);
    return (lo & 1) ? (uint16_t)(lo + 1) : lo;
}

/* f32 -> f16 by searching the positive patterns for the nearest value. */
static uint16_t f16_oracle(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return 0x7e00;
    double a = fabs((double)f);
    if (isinf(f) || a >= 65536.0) return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7c00;       /* largest pattern with value <= a, by bisection */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_value(mid) <= a) lo = mid; else hi = mid;
    }
    if (f16_value(lo) == a) return sign | lo;
    return sign | pick_nearest(lo, f16_value(lo), f16_value((uint16_t)(lo + 1)), a);
}

/* f32 -> bf16: the two candidates are the f32 patterns with the low 16 bits cleared and the next. */
static uint16_t bf16_oracle(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    double a = fabs((double)f);
    if (isinf(f)) return sign | 0x7f80;
    uint16_t lo = (uint16_t)((x & 0x7fffffff) >> 16);
    double vlo = bits_f32((uint32_t)lo << 16);
    if (vlo == a) return sign | lo;
    double vhi = lo == 0x7f7f ? ldexp(1.0, 128) : bits_f32((uint32_t)(lo + 1) << 16);
    return sign | pick_nearest(lo, vlo, vhi, a);
}

static uint64_t rng_state;
static uint64_t next_u64(void) {     /* xorshift64*, seeded from MST_TEST_SEED */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* ---- helpers: run the cast op over a vector ---- */

static mst_tensor *vec_f32(mst_ctx *ctx, const float *v, int64_t n) {
    mst_tensor *t = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, &n, v);
    assert_non_null(t);
    return t;
}

static mst_tensor *cast_ok(mst_ctx *ctx, mst_tensor *x, mst_dtype to) {
    mst_tensor *y = mst_cast(ctx, x, to);
    if (!y) fail_msg("cast to %s: %s", mst_dtype_name(to), mst_ctx_error(ctx));
    assert_int_equal(y->dtype, to);
    assert_int_equal(y->numel, x->numel);
    return y;
}

/* Cast every value of v to `to` (f16 or bf16) and compare with the oracle. */
static void check_half_rounding(mst_ctx *ctx, const float *v, int64_t n, mst_dtype to) {
    const uint16_t *h = mst_tensor_data(cast_ok(ctx, vec_f32(ctx, v, n), to));
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = to == MST_DTYPE_F16 ? f16_oracle(v[i]) : bf16_oracle(v[i]);
        if (isnan(v[i])) {
            bool nan = to == MST_DTYPE_F16 ? f16_is_nan(h[i]) : bf16_is_nan(h[i]);
            if (!nan) fail_msg("%s: NaN 0x%08x became 0x%04x", mst_dtype_name(to), f32_bits(v[i]), h[i]);
            if ((h[i] ^ (f32_bits(v[i]) >> 16)) & 0x8000) fail_msg("%s: NaN sign lost", mst_dtype_name(to));
        } else if (h[i] != want) {
            fail_msg("%s: %.9g (0x%08x) -> 0x%04x, expected 0x%04x", mst_dtype_name(to), (double)v[i], f32_bits(v[i]), h[i], want);
        }
    }
}

/* ---- f16 ---- */

static void test_f16_roundtrip_all(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    uint16_t *bits = malloc(65536 * sizeof(uint16_t));
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    mst_tensor *h = mst_tensor_from_data(ctx, MST_DTYPE_F16, 1, (int64_t[]){65536}, bits);
    mst_tensor *f = cast_ok(ctx, h, MST_DTYPE_F32);
    const uint16_t *back = mst_tensor_data(cast_ok(ctx, f, MST_DTYPE_F16));
    int quieted = 0;
    for (int i = 0; i < 65536; i++) {
        float v = mst_tensor_f32(f)[i];
        if (f16_is_nan((uint16_t)i)) {
            if (!isnan(v) || !f16_is_nan(back[i])) fail_msg("f16 NaN 0x%04x did not stay NaN (0x%04x)", i, back[i]);
            if ((back[i] ^ i) & 0x8000) fail_msg("f16 NaN 0x%04x lost its sign", i);
            if (i & 0x200) assert_int_equal(back[i], i);      /* quiet NaNs keep their payload */
            else quieted++;                                    /* signaling ones come back quiet */
            continue;
        }
        double want = (i & 0x7fff) == 0x7c00 ? ((i & 0x8000) ? -INFINITY : INFINITY) : f16_value((uint16_t)i);
        if ((double)v != want || (signbit(v) != 0) != ((i & 0x8000) != 0))
            fail_msg("f16 0x%04x -> f32 %.9g, expected %.9g", i, (double)v, want);
        if (back[i] != i) fail_msg("f16 0x%04x -> f32 -> f16 gave 0x%04x", i, back[i]);
    }
    assert_int_equal(quieted, 2 * 511);
    free(bits);
    mst_ctx_free(ctx);
}

static void test_f16_ties_round_to_even(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    /* hand-built ties: 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd) */
    const float ties[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 2048.0f + 1.0f, 2048.0f + 3.0f, -(1.0f + 0x1p-11f),
                          0x1p-25f, 3 * 0x1p-25f, 0x1p-14f - 0x1p-25f};
    const uint16_t want[] = {0x3c00, 0x3c02, 0x6800, 0x6802, 0xbc00, 0x0000, 0x0002, 0x0400};
    const uint16_t *h = mst_tensor_data(cast_ok(ctx, vec_f32(ctx, ties, 8), MST_DTYPE_F16));
    for (int i = 0; i < 8; i++)
        if (h[i] != want[i]) fail_msg("tie %d: %.9g -> 0x%04x, expected 0x%04x", i, (double)ties[i], h[i], want[i]);

    /* every midpoint between neighbouring positive and negative f16 values, and one f32 step
     * either side of it */
    int64_t n = 0;
    float *v = malloc(6 * 0x7c00 * sizeof(float));
    for (int k = 0; k < 0x7c00; k++) {
        double mid = (f16_value((uint16_t)k) + f16_value((uint16_t)(k + 1))) / 2;
        float m = (float)mid;
        assert_true((double)m == mid);      /* f16 midpoints are exact in f32 */
        for (int s = 0; s < 2; s++) {
            float ms = s ? -m : m;
            v[n++] = ms;
            v[n++] = nextafterf(ms, 0.0f);
            v[n++] = nextafterf(ms, s ? -INFINITY : INFINITY);
        }
        uint16_t got = f16_oracle(m);
        assert_int_equal(got & 1, 0);       /* the oracle itself resolves ties to even */
    }
    check_half_rounding(ctx, v, n, MST_DTYPE_F16);
    free(v);
    mst_ctx_free(ctx);
}

static void test_f16_random(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    rng_state = gc_seed() * 2654435761u + 1;
    const int64_t n = 1 << 20;
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        /* exponents concentrated around the f16 range (2^-30 .. 2^20) plus any pattern */
        uint32_t u = (uint32_t)next_u64();
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(97 + (next_u64() % 51)) << 23);
        v[i] = bits_f32(u);
    }
    check_half_rounding(ctx, v, n, MST_DTYPE_F16);
    free(v);
    mst_ctx_free(ctx);
}

static void test_f16_overflow_and_subnormals(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const float v[] = {65504.0f, nextafterf(65520.0f, 0.0f), 65520.0f, 65536.0f, 1e10f, FLT_MAX, INFINITY,
                       -65520.0f, -INFINITY, 0x1p-24f, -0x1p-24f, nextafterf(0x1p-25f, 1.0f), 0x1p-26f, 0.0f, -0.0f,
                       1023 * 0x1p-24f, 0x1p-14f, NAN, bits_f32(0x7f800001u), bits_f32(0xff800001u)};
    const uint16_t want[] = {0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0xfc00, 0xfc00, 0x0001, 0x8001,
                             0x0001, 0x0000, 0x0000, 0x8000, 0x03ff, 0x0400};
    int n = (int)(sizeof(v) / sizeof(v[0]));
    const uint16_t *h = mst_tensor_data(cast_ok(ctx, vec_f32(ctx, v, n), MST_DTYPE_F16));
    for (int i = 0; i < 17; i++)
        if (h[i] != want[i]) fail_msg("case %d: %.9g -> 0x%04x, expected 0x%04x", i, (double)v[i], h[i], want[i]);
    /* NaNs stay NaN with their sign, even when the payload sits only in bits f16 drops */
    for (int i = 17; i < n; i++) {
        if (!f16_is_nan(h[i])) fail_msg("NaN 0x%08x -> 0x%04x, not a NaN", f32_bits(v[i]), h[i]);
        assert_int_equal(h[i] >> 15, f32_bits(v[i]) >> 31);
    }
    /* every subnormal k 2^-24 converts exactly both ways */
    float sub[1023];
    for (int k = 1; k <= 1023; k++) sub[k - 1] = (float)k * 0x1p-24f;
    mst_tensor *hs = cast_ok(ctx, vec_f32(ctx, sub, 1023), MST_DTYPE_F16);
    const float *fs = mst_tensor_f32(cast_ok(ctx, hs, MST_DTYPE_F32));
    for (int k = 1; k <= 1023; k++) {
        assert_int_equal(((const uint16_t *)mst_tensor_data(hs))[k - 1], k);
        assert_true(fs[k - 1] == sub[k - 1]);
    }
    mst_ctx_free(ctx);
}

/* ---- bf16 ---- */

static void test_bf16_roundtrip_all(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    uint16_t *bits = malloc(65536 * sizeof(uint16_t));
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    mst_tensor *h = mst_tensor_from_data(ctx, MST_DTYPE_BF16, 1, (int64_t[]){65536}, bits);
    mst_tensor *f = cast_ok(ctx, h, MST_DTYPE_F32);
    const uint16_t *back = mst_tensor_data(cast_ok(ctx, f, MST_DTYPE_BF16));
    for (int i = 0; i < 65536; i++) {
        uint32_t fb = f32_bits(mst_tensor_f32(f)[i]);
        if (fb != (uint32_t)i << 16) fail_msg("bf16 0x%04x -> f32 0x%08x, expected the same high bits", i, fb);
        if (bf16_is_nan((uint16_t)i)) {
            if (!bf16_is_nan(back[i])) fail_msg("bf16 NaN 0x%04x came back as 0x%04x", i, back[i]);
            if ((back[i] ^ i) & 0x8000) fail_msg("bf16 NaN 0x%04x lost its sign", i);
            if (i & 0x40) assert_int_equal(back[i], i);       /* quiet NaNs keep their payload */
            continue;
        }
        if (back[i] != i) fail_msg("bf16 0x%04x -> f32 -> bf16 gave 0x%04x", i, back[i]);
    }
    free(bits);
    mst_ctx_free(ctx);
}

static void test_bf16_rounding(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    /* hand-built: the tie 0x3f80_8000 (1 + 2^-8) goes to even 0x3f80, 0x3f81_8000 up to 0x3f82 */
    const float ties[] = {bits_f32(0x3f808000u), bits_f32(0x3f818000u), bits_f32(0x3f808001u), bits_f32(0x3f807fffu),
                          bits_f32(0x7f7f8000u), bits_f32(0x7f7f7fffu), FLT_MAX, bits_f32(0x00008000u), bits_f32(0x80018000u)};
    const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x3f80, 0x7f80, 0x7f7f, 0x7f80, 0x0000, 0x8002};
    const uint16_t *h = mst_tensor_data(cast_ok(ctx, vec_f32(ctx, ties, 9), MST_DTYPE_BF16));
    for (int i = 0; i < 9; i++)
        if (h[i] != want[i]) fail_msg("case %d: 0x%08x -> 0x%04x, expected 0x%04x", i, f32_bits(ties[i]), h[i], want[i]);

    /* a tie and its two neighbours at every finite bf16 pattern, then random patterns */
    rng_state = gc_seed() * 40503u + 7;
    int64_t n = 0, cap = 3 * 65536 + (1 << 20);
    float *v = malloc((size_t)cap * sizeof(float));
    for (uint32_t k = 0; k < 65536; k++) {
        if ((k & 0x7f80) == 0x7f80) continue;
        uint32_t tie = (k << 16) | 0x8000;
        v[n++] = bits_f32(tie);
        v[n++] = bits_f32(tie - 1);
        v[n++] = bits_f32(tie + 1);
    }
    while (n < cap) v[n++] = bits_f32((uint32_t)next_u64());
    check_half_rounding(ctx, v, n, MST_DTYPE_BF16);
    free(v);

    /* NaN never becomes inf, whatever bits its payload uses */
    const uint32_t nans[] = {0x7f800001u, 0x7f808000u, 0x7f80ffffu, 0xff800001u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu};
    float nv[7];
    for (int i = 0; i < 7; i++) nv[i] = bits_f32(nans[i]);
    const uint16_t *hn = mst_tensor_data(cast_ok(ctx, vec_f32(ctx, nv, 7), MST_DTYPE_BF16));
    for (int i = 0; i < 7; i++) {
        if (!bf16_is_nan(hn[i])) fail_msg("NaN 0x%08x -> bf16 0x%04x, not a NaN", nans[i], hn[i]);
        assert_int_equal(hn[i] >> 15, nans[i] >> 31);
    }
    mst_ctx_free(ctx);
}

/* f16 <-> bf16 go through f32, where f16 is exact: one rounding, as the oracle says. */
static void test_f16_bf16(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    uint16_t *bits = malloc(65536 * sizeof(uint16_t));
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    mst_tensor *h = mst_tensor_from_data(ctx, MST_DTYPE_F16, 1, (int64_t[]){65536}, bits);
    const uint16_t *b = mst_tensor_data(cast_ok(ctx, h, MST_DTYPE_BF16));
    for (int i = 0; i < 65536; i++) {
        if (f16_is_nan((uint16_t)i)) { assert_true(bf16_is_nan(b[i])); continue; }
        float f = (i & 0x7fff) == 0x7c00 ? ((i & 0x8000) ? -INFINITY : INFINITY) : (float)f16_value((uint16_t)i);
        if (b[i] != bf16_oracle(f)) fail_msg("f16 0x%04x -> bf16 0x%04x, expected 0x%04x", i, b[i], bf16_oracle(f));
    }
    free(bits);
    mst_ctx_free(ctx);
}

/* ---- integers ---- */

static void test_int_float(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    /* float -> i32 truncates toward zero */
    const float fv[] = {-3.7f, -0.5f, 0.0f, 2.9f, 1e6f, 2147483520.0f, -2147483648.0f, 16777217.0f};
    const int32_t iw[] = {-3, 0, 0, 2, 1000000, 2147483520, INT32_MIN, 16777216};
    mst_tensor *i = cast_ok(ctx, vec_f32(ctx, fv, 8), MST_DTYPE_I32);
    assert_memory_equal(mst_tensor_i32(i), iw, sizeof(iw));
    /* i32 -> f32 rounds to nearest even past 2^24; i32 -> f64 is exact */
    const int32_t iv[] = {0, -5, 16777217, 16777219, INT32_MAX, INT32_MIN, 123456789};
    mst_tensor *it = mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){7}, iv);
    const float fw[] = {0.0f, -5.0f, 16777216.0f, 16777220.0f, 2147483648.0f, -2147483648.0f, 123456792.0f};
    assert_memory_equal(mst_tensor_f32(cast_ok(ctx, it, MST_DTYPE_F32)), fw, sizeof(fw));
    const double *dw = mst_tensor_f64(cast_ok(ctx, it, MST_DTYPE_F64));
    for (int k = 0; k < 7; k++) assert_true(dw[k] == (double)iv[k]);
    /* and back from f64 */
    assert_memory_equal(mst_tensor_i32(cast_ok(ctx, cast_ok(ctx, it, MST_DTYPE_F64), MST_DTYPE_I32)), iv, sizeof(iv));
    /* i32 -> f16: 2049 is a tie between 2048 and 2050 */
    mst_tensor *ih = cast_ok(ctx, mst_tensor_from_data(ctx, MST_DTYPE_I32, 1, (int64_t[]){3}, (int32_t[]){2049, 2051, -7}),
                             MST_DTYPE_F16);
    assert_memory_equal(mst_tensor_data(ih), ((uint16_t[]){0x6800, 0x6802, 0xc700}), 6);
    /* u8 <-> f32 */
    mst_tensor *u = cast_ok(ctx, vec_f32(ctx, (float[]){0.0f, 1.9f, 200.7f, 255.0f}, 4), MST_DTYPE_U8);
    assert_memory_equal(mst_tensor_data(u), ((uint8_t[]){0, 1, 200, 255}), 4);
    assert_memory_equal(mst_tensor_f32(cast_ok(ctx, u, MST_DTYPE_F32)), ((float[]){0, 1, 200, 255}), 16);
    mst_ctx_free(ctx);
}

/* ---- backward ---- */

/* x (f64) -> f32 -> f64: the gradient arrives in f64, rounded once through f32. */
static void test_backward_f64_f32(void **state) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed()});
    mst_tensor *x = mst_tensor_randn(ctx, MST_DTYPE_F64, 2, (int64_t[]){3, 5}, 0, 1);
    x->requires_grad = true;
    mst_tensor *y = cast_ok(ctx, x, MST_DTYPE_F32);
    assert_true(y->requires_grad);
    mst_tensor *z = cast_ok(ctx, y, MST_DTYPE_F64);
    for (int64_t k = 0; k < x->numel; k++) assert_true(mst_tensor_f64(z)[k] == (double)(float)mst_tensor_f64(x)[k]);
    mst_tensor *gz = mst_tensor_randn(ctx, MST_DTYPE_F64, 2, (int64_t[]){3, 5}, 0, 1);
    assert_int_equal(mst_backward_seeded(ctx, z, gz), MST_OK);
    assert_non_null(x->grad);
    assert_int_equal(x->grad->dtype, MST_DTYPE_F64);
    for (int64_t k = 0; k < x->numel; k++) assert_true(mst_tensor_f64(x->grad)[k] == (double)(float)mst_tensor_f64(gz)[k]);
    mst_ctx_free(ctx);
}

/* The AMP path: an f32 parameter used in f16 or bf16 gets an f32 gradient of the rounded upstream one. */
static void test_backward_half(void **state) {
    static const mst_dtype halves[] = {MST_DTYPE_F16, MST_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = gc_seed()});
        mst_tensor *w = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){64}, 0, 1);
        w->requires_grad = true;
        mst_tensor *wh = cast_ok(ctx, w, halves[k]);
        mst_tensor *back = cast_ok(ctx, wh, MST_DTYPE_F32);
        mst_tensor *g = mst_tensor_randn(ctx, MST_DTYPE_F32, 1, (int64_t[]){64}, 0, 1);
        assert_int_equal(mst_backward_seeded(ctx, back, g), MST_OK);
        assert_int_equal(w->grad->dtype, MST_DTYPE_F32);
        for (int64_t i = 0; i < 64; i++) {
            float gi = mst_tensor_f32(g)[i];
            float want = halves[k] == MST_DTYPE_F16 ? (float)f16_value(f16_oracle(gi)) : bits_f32((uint32_t)bf16_oracle(gi) << 16);
            assert_true(mst_tensor_f32(w->grad)[i] == want);
        }
        mst_ctx_free(ctx);
    }
}

/* A cast to an integer type ends the gradient path: nothing is recorded for it. */
static void test_backward_int_stops(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, 2.5);
    x->requires_grad = true;
    size_t before = mst_tape_length(ctx);
    mst_tensor *i = cast_ok(ctx, x, MST_DTYPE_I32);
    assert_false(i->requires_grad);
    mst_tensor *f = cast_ok(ctx, i, MST_DTYPE_F32);
    assert_false(f->requires_grad);
    assert_true(mst_tape_length(ctx) <= before + 1);
    mst_ctx_free(ctx);
}

/* f64 -> half rounds once: values just above a tie must round up, which a plain f64 -> f32 -> f16
 * double rounding gets wrong; out-of-range floats saturate into integer types. */
static void test_f64_to_half_and_saturation(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    const double v[] = {1 + 0x1p-11 + 0x1p-40, -(1 + 0x1p-11 + 0x1p-40), 1 + 0x1p-11, 1 + 0x1p-8 + 0x1p-35};
    mst_tensor *x = mst_tensor_from_data(ctx, MST_DTYPE_F64, 1, (int64_t[]){4}, v);
    mst_tensor *h = mst_cast(ctx, x, MST_DTYPE_F16);
    assert_int_equal(((uint16_t *)mst_tensor_data(h))[0], 0x3c01);
    assert_int_equal(((uint16_t *)mst_tensor_data(h))[1], 0xbc01);
    assert_int_equal(((uint16_t *)mst_tensor_data(h))[2], 0x3c00);     /* an exact tie goes to even */
    mst_tensor *bh = mst_cast(ctx, x, MST_DTYPE_BF16);
    assert_int_equal(((uint16_t *)mst_tensor_data(bh))[3], 0x3f81);    /* 1 + 2^-8 + tiny rounds up */
    const float big[] = {3e9f, -3e9f, NAN, 300.0f};
    mst_tensor *f = mst_tensor_from_data(ctx, MST_DTYPE_F32, 1, (int64_t[]){4}, big);
    mst_tensor *i = mst_cast(ctx, f, MST_DTYPE_I32);
    assert_int_equal(mst_tensor_i32(i)[0], INT32_MAX);
    assert_int_equal(mst_tensor_i32(i)[1], INT32_MIN);
    assert_int_equal(mst_tensor_i32(i)[2], 0);
    mst_tensor *u = mst_cast(ctx, f, MST_DTYPE_U8);
    assert_int_equal(((uint8_t *)mst_tensor_data(u))[3], 255);
    assert_int_equal(((uint8_t *)mst_tensor_data(u))[1], 0);
    mst_ctx_free(ctx);
}

static void test_same_dtype_and_errors(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){3});
    assert_ptr_equal(mst_cast(ctx, x, MST_DTYPE_F32), x);
    assert_null(mst_cast(ctx, x, (mst_dtype)99));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_DTYPE);
    assert_non_null(strstr(mst_ctx_error(ctx), "unknown target dtype 99"));
    mst_ctx_clear_error(ctx);
    assert_null(mst_cast(ctx, x, (mst_dtype)-1));
    assert_int_equal(mst_ctx_status(ctx), MST_ERR_DTYPE);
    mst_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all),   cmocka_unit_test(test_f16_ties_round_to_even),
        cmocka_unit_test(test_f16_random),          cmocka_unit_test(test_f16_overflow_and_subnormals),
        cmocka_unit_test(test_bf16_roundtrip_all),  cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_bf16),            cmocka_unit_test(test_int_float),
        cmocka_unit_test(test_backward_f64_f32),    cmocka_unit_test(test_backward_half),
        cmocka_unit_test(test_backward_int_stops),  cmocka_unit_test(test_same_dtype_and_errors),
        cmocka_unit_test(test_f64_to_half_and_saturation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
