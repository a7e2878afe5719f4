/* test_sr_pairs.c — the super-resolution pairs (runtime/data/sr_pairs.c) on the real
 * Fashion-MNIST: the input is the exact 2x2 box mean of the target, shapes (1, 14, 14) and
 * (1, 28, 28), the loader delivers inputs and targets bit-identically for any worker count and
 * refuses transforms that would break the pairing; bad factors are refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/data/loader.h"
#include "runtime/data/source.h"

static void test_pairs(void **state) {
    (void)state;
    char err[512];
    mst_source *s = mst_source_sr_open(MST_FASHION_MNIST_DIR, "test", 2, err, sizeof(err));
    assert_non_null(s);
    int64_t ls[3], hs[3];
    assert_int_equal(mst_source_shape(s, ls), 3);
    mst_source_target_shape(s, hs);
    assert_true(ls[0] == 1 && ls[1] == 14 && ls[2] == 14);
    assert_true(hs[0] == 1 && hs[1] == 28 && hs[2] == 28);
    assert_int_equal(mst_source_target_numel(s), 784);
    assert_int_equal(mst_source_len(s), 10000);
    float lo[196], hi[784];
    for (int64_t i = 0; i < 10000; i += 997) {
        int32_t y;
        mst_source_get(s, i, lo, &y);
        mst_source_get_target(s, i, hi);
        assert_true(y >= 0 && y < 10);
        for (int r = 0; r < 14; r++)
            for (int c = 0; c < 14; c++) {
                double m = (hi[2 * r * 28 + 2 * c] + hi[2 * r * 28 + 2 * c + 1] + hi[(2 * r + 1) * 28 + 2 * c] +
                            hi[(2 * r + 1) * 28 + 2 * c + 1]) / 4.0;
                assert_float_equal(lo[r * 14 + c], m, 1e-6);
            }
    }
    mst_source_free(s);
    assert_null(mst_source_sr_open(MST_FASHION_MNIST_DIR, "test", 3, err, sizeof(err)));
    assert_non_null(strstr(err, "do not divide by the super-resolution factor 3"));
    assert_null(mst_source_sr_open(MST_FASHION_MNIST_DIR, "test", 0, err, sizeof(err)));
    assert_non_null(strstr(err, "factor = 0"));
}

static void test_loader_pairs(void **state) {
    (void)state;
    char err[512];
    mst_source *s = mst_source_sr_open(MST_FASHION_MNIST_DIR, "test", 2, err, sizeof(err));
    assert_non_null(s);
    static float ref_x[640 * 196], ref_t[640 * 784];
    mst_loader_config cfg = {.batch_size = 64, .shuffle = true, .seed = 3, .prefetch = 2, .limit = 640};
    for (int workers = 0; workers <= 2; workers += 2) {
        cfg.num_workers = workers;
        mst_loader *ld = mst_loader_new(s, &cfg, err, sizeof(err));
        assert_non_null(ld);
        assert_int_equal(mst_loader_start_epoch(ld, 2, 0), 0);
        mst_batch b;
        int64_t k = 0;
        while (mst_loader_next(ld, &b) == 1) {
            assert_non_null(b.target);
            assert_null(b.tokens);
            if (workers == 0) {
                memcpy(ref_x + k * 196, b.x, sizeof(float) * (size_t)(b.size * 196));
                memcpy(ref_t + k * 784, b.target, sizeof(float) * (size_t)(b.size * 784));
            } else {
                assert_memory_equal(ref_x + k * 196, b.x, sizeof(float) * (size_t)(b.size * 196));
                assert_memory_equal(ref_t + k * 784, b.target, sizeof(float) * (size_t)(b.size * 784));
            }
            k += b.size;
        }
        assert_int_equal(k, 640);
        mst_loader_free(ld);
    }
    cfg.augment = MST_AUGMENT_LIGHT;
    assert_null(mst_loader_new(s, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "paired target"));
    mst_source_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_loader_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
