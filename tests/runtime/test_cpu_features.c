/* test_cpu_features.c — run-time CPU detection: every feature has a name that parses back, the
 * joined list is exactly the available set, no feature is available without its base (avx512_bf16
 * without avx512f would send a kernel into an illegal instruction), and MSTUNE_CPU_MASK hides a
 * feature and everything built on it while the detected set stays as found. The test sets the
 * mask itself before the first query, so it runs the same on any CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/cpu_features.h"

static void test_names(void **state) {
    (void)state;
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++) {
        const char *n = mst_cpu_feature_name((mst_cpu_feature)f);
        assert_string_not_equal(n, "?");
        assert_int_equal(mst_cpu_feature_parse(n), f);
    }
    assert_int_equal(mst_cpu_feature_parse("avx1024"), -1);
    assert_string_equal(mst_cpu_feature_name(MST_CPU_FEATURE_COUNT), "?");
}

static void test_list_matches(void **state) {
    (void)state;
    char buf[512];
    mst_cpu_features_str(buf, sizeof(buf), ",");
    int listed = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int f = mst_cpu_feature_parse(tok);
        assert_true(f >= 0);
        assert_true(mst_cpu_has((mst_cpu_feature)f));
        listed++;
    }
    int avail = 0;
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++) avail += mst_cpu_has((mst_cpu_feature)f);
    assert_int_equal(listed, avail);
    char tiny[4];   /* truncation stays terminated */
    mst_cpu_features_str(tiny, sizeof(tiny), ",");
    assert_true(strlen(tiny) < sizeof(tiny));
    assert_true(strlen(mst_cpu_info_get()->model) > 0);
}

static void test_bases(void **state) {
    (void)state;
    static const struct { mst_cpu_feature f, base; } rules[] = {
        {MST_CPU_AVX2, MST_CPU_AVX},          {MST_CPU_AVX512F, MST_CPU_AVX2},   {MST_CPU_AVX512BW, MST_CPU_AVX512F},
        {MST_CPU_AVX512_BF16, MST_CPU_AVX512F}, {MST_CPU_AMX_BF16, MST_CPU_AMX_TILE}, {MST_CPU_AMX_TILE, MST_CPU_AVX512F},
    };
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
        if (mst_cpu_has(rules[i].f)) assert_true(mst_cpu_has(rules[i].base));
}

/* The mask was set in main before the first query: avx2 and all above it are hidden. */
static void test_mask(void **state) {
    (void)state;
    const mst_cpu_info *ci = mst_cpu_info_get();
    assert_false(mst_cpu_has(MST_CPU_AVX2));
    assert_false(mst_cpu_has(MST_CPU_AVX512F));
    assert_false(mst_cpu_has(MST_CPU_AVX512_BF16));
    assert_false(mst_cpu_has(MST_CPU_AMX_BF16));
    assert_true(ci->masked >> MST_CPU_AVX2 & 1);
    assert_true(ci->masked >> MST_CPU_AMX_BF16 & 1);
    assert_false(ci->masked >> MST_CPU_AVX & 1);
    assert_int_equal(mst_cpu_has(MST_CPU_AVX), ci->detected >> MST_CPU_AVX & 1);
}

int main(void) {
    setenv("MSTUNE_CPU_MASK", "avx2", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names), cmocka_unit_test(test_list_matches),
        cmocka_unit_test(test_bases), cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
