/* test_shape_key.c — the shape key and its map (runtime/backend/shape_key.h), which every op call
 * with a kernel choice looks up: keys that differ in any one field (an input's dimension, an
 * attribute, the op, the dtype, the thread budget) are distinct entries, found again after the map
 * grows; an absent key is not found and a lookup never inserts; a slot taken twice is one entry.
 * And the key's own hash, which the verdict file stores, stays FNV-1a over the key's bytes: a
 * change there would leave every machine's verdicts unread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/backend/shape_key.h"

enum { N_KEYS = 3000 };

/* Key i: one field moved at a time, through every kind of field. */
static void key_of(int i, mst_shape_key *k) {
    memset(k, 0, sizeof(*k));
    k->op = 7, k->dtype = 1, k->n_in = 2, k->threads = 2;
    k->ndim[0] = 2, k->ndim[1] = 2;
    k->shape[0][0] = 16, k->shape[0][1] = 784, k->shape[1][0] = 256, k->shape[1][1] = 784;
    const int field = i % 6, v = i / 6 + 1;
    switch (field) {
    case 0: k->shape[0][0] += v; break;                                     /* the batch */
    case 1: k->shape[1][1] += v; break;                                     /* a weight's width */
    case 2: k->attr_i[i % MST_MAX_ATTR_I] = v; break;                       /* an attribute */
    case 3: k->op += v; break;
    case 4: k->threads += v; break;
    default: k->shape[2][MST_MAX_DIMS - 1] = v, k->ndim[2] = MST_MAX_DIMS; break;   /* a third input's last dimension */
    }
}

static void test_distinct_keys_survive_growth(void **state) {
    (void)state;
    mst_shape_map m = {0};
    mst_shape_key k;
    for (int i = 0; i < N_KEYS; i++) {
        key_of(i, &k);
        void **slot = mst_shape_map_slot(&m, &k);
        assert_non_null(slot);
        assert_null(*slot);                     /* new: every key of the list differs from the others */
        *slot = (void *)(uintptr_t)(i + 1);
    }
    assert_int_equal(m.len, N_KEYS);
    assert_true(m.cap >= 2 * m.len);            /* grown at half load */
    for (int i = 0; i < N_KEYS; i++) {
        key_of(i, &k);
        assert_int_equal((uintptr_t)mst_shape_map_get(&m, &k), (uintptr_t)(i + 1));
        void **again = mst_shape_map_slot(&m, &k);
        assert_non_null(again);
        assert_int_equal((uintptr_t)*again, (uintptr_t)(i + 1));
    }
    assert_int_equal(m.len, N_KEYS);            /* taking a slot again adds nothing */
    key_of(0, &k);
    k.shape[0][1] = 785;                        /* a key never inserted */
    assert_null(mst_shape_map_get(&m, &k));
    assert_int_equal(m.len, N_KEYS);            /* and looking does not insert */
    mst_shape_map_free(&m);
    assert_null(mst_shape_map_get(&m, &k));     /* a freed (or never used) map finds nothing */
}

static void test_file_hash_is_fnv1a_of_the_bytes(void **state) {
    (void)state;
    mst_shape_key k;
    key_of(1, &k);
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)&k;
    for (size_t i = 0; i < sizeof(k); i++) h = (h ^ b[i]) * 1099511628211ull;
    assert_int_equal(mst_shape_key_hash(&k), h ? h : 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_keys_survive_growth),
        cmocka_unit_test(test_file_hash_is_fnv1a_of_the_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
