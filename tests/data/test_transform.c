/* test_transform.c — the per-sample transforms: each stage against what it must do by hand
 * (identities, shifts, mirror, a 90 degree rotation, bilinear midpoints, normalize values), the
 * draws (deterministic in (seed, epoch, index), inside their documented ranges, neutral when the
 * preset does not use them), and mst_transform_apply as the composition of the stages. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/data/transform.h"
#include "runtime/rng.h"

#define SEED 20240611ull

/* Distinct, non-zero values so any misplaced pixel shows. */
static void fill(float *x, int n, uint64_t seed) {
    mst_rng r = mst_rng_make(seed, 0);
    for (int i = 0; i < n; i++) x[i] = 0.05f + 0.9f * (float)mst_rng_uniform(&r);
}

static void test_flip(void **state) {
    enum { C = 3, H = 5, W = 7, N = C * H * W };
    float a[N], b[N];
    fill(a, N, SEED);
    memcpy(b, a, sizeof a);
    mst_transform_flip(b, C, H, W);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) assert_true(b[(c * H + y) * W + x] == a[(c * H + y) * W + W - 1 - x]);
    mst_transform_flip(b, C, H, W);
    assert_memory_equal(a, b, sizeof a);
    /* even width too */
    float e[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, f[2 * 4] = {4, 3, 2, 1, 8, 7, 6, 5};
    mst_transform_flip(e, 1, 2, 4);
    assert_memory_equal(e, f, sizeof e);
}

static void test_crop(void **state) {
    enum { C = 2, H = 6, W = 5, N = C * H * W };
    float a[N], b[N];
    fill(a, N, SEED + 1);
    /* pad 0: the only crop is the image itself */
    mst_transform_crop(a, b, C, H, W, 0, 0, 0);
    assert_memory_equal(a, b, sizeof a);
    /* pad 2, centred offsets: identity as well */
    mst_transform_crop(a, b, C, H, W, 2, 2, 2);
    assert_memory_equal(a, b, sizeof a);
    /* every offset: out(y, x) = in(y + dy - pad, x + dx - pad), zero outside */
    for (int dy = 0; dy <= 4; dy++)
        for (int dx = 0; dx <= 4; dx++) {
            mst_transform_crop(a, b, C, H, W, 2, dx, dy);
            for (int c = 0; c < C; c++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) {
                        int sy = y + dy - 2, sx = x + dx - 2;
                        float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? a[(c * H + sy) * W + sx] : 0.0f;
                        assert_true(b[(c * H + y) * W + x] == want);
                    }
        }
    /* padding wider than the image: all zeros */
    mst_transform_crop(a, b, C, H, W, 8, 0, 0);
    for (int i = 0; i < N; i++) assert_true(b[i] == 0.0f);
}

static mst_affine_params identity(void) {
    return (mst_affine_params){.rot_deg = 0.0f, .scale = 1.0f, .tx = 0.0f, .ty = 0.0f, .shear_deg = 0.0f};
}

static void test_affine_identity_and_shift(void **state) {
    enum { C = 2, H = 28, W = 28, N = C * H * W };
    float a[N], b[N];
    fill(a, N, SEED + 2);
    mst_affine_params p = identity();
    mst_transform_affine(a, b, C, H, W, &p);
    /* identity lands on integer coordinates with zero fractional weights: exact */
    for (int i = 0; i < N; i++) assert_float_equal(a[i], b[i], 1e-6f);
    assert_memory_equal(a, b, sizeof a);

    /* whole-pixel translation: out(y, x) = in(y - 1, x + 2) */
    p.tx = -2.0f;
    p.ty = 1.0f;
    mst_transform_affine(a, b, C, H, W, &p);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sy = y - 1, sx = x + 2;
                float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? a[(c * H + sy) * W + sx] : 0.0f;
                assert_float_equal(b[(c * H + y) * W + x], want, 1e-6f);
            }

    /* half-pixel translation: bilinear midpoint of horizontal neighbours */
    p = identity();
    p.tx = 0.5f;
    mst_transform_affine(a, b, 1, H, W, &p);
    for (int y = 0; y < H; y++)
        for (int x = 1; x < W; x++)
            assert_float_equal(b[y * W + x], 0.5f * (a[y * W + x] + a[y * W + x - 1]), 1e-6f);
}

static void test_affine_rotate_90(void **state) {
    enum { H = 9, W = 9, N = H * W };
    float a[N], b[N];
    fill(a, N, SEED + 3);
    mst_affine_params p = identity();
    p.rot_deg = 90.0f;
    mst_transform_affine(a, b, 1, H, W, &p);
    /* out(q) = in(R^-1 (q - c) + c): out(y, x) = in(W - 1 - x, y) */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) assert_float_equal(b[y * W + x], a[(W - 1 - x) * W + y], 1e-4f);
    /* the centre pixel of an odd image is a fixed point of any rotation, scale and shear */
    p.rot_deg = 13.0f;
    p.scale = 1.07f;
    p.shear_deg = -4.0f;
    mst_transform_affine(a, b, 1, H, W, &p);
    assert_float_equal(b[4 * W + 4], a[4 * W + 4], 1e-5f);
}

static void test_affine_zoom_out_pads_zero(void **state) {
    enum { H = 28, W = 28, N = H * W };
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = 1.0f;
    mst_affine_params p = identity();
    p.scale = 0.5f;
    mst_transform_affine(a, b, 1, H, W, &p);
    assert_float_equal(b[0], 0.0f, 0.0f);                  /* corner maps outside the input */
    assert_float_equal(b[14 * W + 14], 1.0f, 1e-6f);       /* centre stays inside */
    float sum = 0.0f;
    for (int i = 0; i < N; i++) {
        assert_true(b[i] >= 0.0f && b[i] <= 1.0f + 1e-6f);
        sum += b[i];
    }
    assert_true(sum > 0.2f * N && sum < 0.3f * N);         /* about a quarter of the area */
}

static void test_normalize(void **state) {
    float x[4] = {0.0f, 1.0f, MST_FASHION_MNIST_MEAN, 0.5f};
    mst_transform_normalize(x, 4, MST_FASHION_MNIST_MEAN, MST_FASHION_MNIST_STD);
    assert_float_equal(x[0], -0.2860f / 0.3530f, 1e-6f);
    assert_float_equal(x[0], -0.810198f, 1e-5f);
    assert_float_equal(x[1], 2.022663f, 1e-5f);
    assert_float_equal(x[2], 0.0f, 0.0f);
    assert_float_equal(x[3], (0.5f - 0.2860f) / 0.3530f, 1e-6f);
}

/* Every element of a long run (the vector loop and its tail) is exactly (x - mean) / std, on the
 * AVX2 path and, under MSTUNE_CPU_MASK=avx2 (data.test_transform.noavx2), the portable one. */
static void test_normalize_bits(void **state) {
    enum { n = 1003 };
    float *x = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    assert_non_null(x);
    assert_non_null(want);
    for (int i = 0; i < n; i++) x[i] = (float)((i * 37) % 256) / 255.0f + (i % 5 == 0 ? 1e-38f : 0.0f);
    for (int i = 0; i < n; i++) {
        volatile float d = x[i] - MST_FASHION_MNIST_MEAN;       /* one scalar operation at a time */
        want[i] = d / MST_FASHION_MNIST_STD;
    }
    mst_transform_normalize(x, n, MST_FASHION_MNIST_MEAN, MST_FASHION_MNIST_STD);
    for (int i = 0; i < n; i++)
        if (memcmp(&x[i], &want[i], sizeof(float)) != 0) fail_msg("element %d: %a, expected %a", i, x[i], want[i]);
    free(x);
    free(want);
}

static void test_draws(void **state) {
    mst_transform_config heavy = {.augment = MST_AUGMENT_HEAVY, .seed = SEED};
    mst_transform_config light = {.augment = MST_AUGMENT_LIGHT, .seed = SEED};
    mst_transform_config none = {.augment = MST_AUGMENT_NONE, .seed = SEED};
    int crop_seen[5][5] = {{0}}, flips = 0, differ_epoch = 0, differ_seed = 0;
    float rot_min = 1e9f, rot_max = -1e9f;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        mst_transform_draw d, d2, dl, dn, de, ds;
        mst_transform_draw_for(&heavy, 3, i, &d);
        mst_transform_draw_for(&heavy, 3, i, &d2);
        assert_int_equal(d.crop_dx, d2.crop_dx);
        assert_int_equal(d.crop_dy, d2.crop_dy);
        assert_int_equal(d.flip, d2.flip);
        assert_memory_equal(&d.affine, &d2.affine, sizeof d.affine);
        mst_transform_draw_for(&light, 3, i, &dl);
        mst_transform_draw_for(&none, 3, i, &dn);
        /* LIGHT and HEAVY agree on what they share; LIGHT leaves the affine at identity */
        assert_int_equal(dl.crop_dx, d.crop_dx);
        assert_int_equal(dl.crop_dy, d.crop_dy);
        assert_int_equal(dl.flip, d.flip);
        assert_true(dl.affine.rot_deg == 0.0f && dl.affine.scale == 1.0f && dl.affine.tx == 0.0f &&
                    dl.affine.ty == 0.0f && dl.affine.shear_deg == 0.0f);
        assert_int_equal(dn.crop_dx, MST_CROP_PAD);
        assert_int_equal(dn.crop_dy, MST_CROP_PAD);
        assert_false(dn.flip);
        assert_in_range(d.crop_dx, 0, 2 * MST_CROP_PAD);
        assert_in_range(d.crop_dy, 0, 2 * MST_CROP_PAD);
        crop_seen[d.crop_dy][d.crop_dx]++;
        flips += d.flip;
        assert_true(fabsf(d.affine.rot_deg) <= MST_AFFINE_ROT_DEG);
        assert_true(d.affine.scale >= MST_AFFINE_SCALE_LO && d.affine.scale <= MST_AFFINE_SCALE_HI);
        assert_true(fabsf(d.affine.tx) <= MST_AFFINE_TRANSLATE && fabsf(d.affine.ty) <= MST_AFFINE_TRANSLATE);
        assert_true(fabsf(d.affine.shear_deg) <= MST_AFFINE_SHEAR_DEG);
        rot_min = fminf(rot_min, d.affine.rot_deg);
        rot_max = fmaxf(rot_max, d.affine.rot_deg);
        mst_transform_draw_for(&heavy, 4, i, &de);
        differ_epoch += memcmp(&d.affine, &de.affine, sizeof d.affine) != 0;
        mst_transform_config other = heavy;
        other.seed = SEED + 1;
        mst_transform_draw_for(&other, 3, i, &ds);
        differ_seed += memcmp(&d.affine, &ds.affine, sizeof d.affine) != 0;
    }
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 5; x++) assert_in_range(crop_seen[y][x], n / 25 / 2, n / 25 * 2);
    assert_in_range(flips, n / 2 - n / 25, n / 2 + n / 25);
    assert_true(rot_min < -14.0f && rot_max > 14.0f);
    assert_int_equal(differ_epoch, n);
    assert_int_equal(differ_seed, n);
}

static void test_apply_is_the_composition(void **state) {
    enum { C = 1, H = 28, W = 28, N = C * H * W };
    float src[N], x[N], want[N], tmp[N], scratch[N];
    fill(src, N, SEED + 4);
    for (int a = MST_AUGMENT_NONE; a < MST_AUGMENT_COUNT; a++)
        for (int norm = 0; norm < 2; norm++)
            for (int64_t index = 0; index < 50; index++) {
                mst_transform_config cfg = {.augment = (mst_augment)a, .normalize = norm, .mean = MST_FASHION_MNIST_MEAN,
                                            .std = MST_FASHION_MNIST_STD, .seed = SEED};
                memcpy(x, src, sizeof x);
                mst_transform_apply(&cfg, 2, index, x, scratch, C, H, W);
                mst_transform_draw d;
                mst_transform_draw_for(&cfg, 2, index, &d);
                memcpy(want, src, sizeof want);
                if (a >= MST_AUGMENT_LIGHT) {
                    mst_transform_crop(src, tmp, C, H, W, MST_CROP_PAD, d.crop_dx, d.crop_dy);
                    if (d.flip) mst_transform_flip(tmp, C, H, W);
                    if (a == MST_AUGMENT_HEAVY)
                        mst_transform_affine(tmp, want, C, H, W, &d.affine);
                    else
                        memcpy(want, tmp, sizeof want);
                }
                if (norm) mst_transform_normalize(want, N, cfg.mean, cfg.std);
                assert_memory_equal(x, want, sizeof x);
                if (a == MST_AUGMENT_NONE && !norm) assert_memory_equal(x, src, sizeof x);
                if (a == MST_AUGMENT_HEAVY) assert_memory_not_equal(x, src, sizeof x);
            }
    assert_string_equal(mst_augment_name(MST_AUGMENT_HEAVY), "heavy");
    assert_string_equal(mst_augment_name(MST_AUGMENT_COUNT), "?");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flip),
        cmocka_unit_test(test_crop),
        cmocka_unit_test(test_affine_identity_and_shift),
        cmocka_unit_test(test_affine_rotate_90),
        cmocka_unit_test(test_affine_zoom_out_pads_zero),
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_normalize_bits),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_apply_is_the_composition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
