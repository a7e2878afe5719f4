/* test_wordlist.c — the language-id source (runtime/data/wordlist.c) on small hand-made lists
 * in a temporary folder: lower-casing, letters-only filtering, words shared by two lists
 * dropped, duplicates inside a list collapsed, the Latin-1 list decoded, [CLS] + characters +
 * padding, truncation counted, determinism, a missing list named in the error; the loader
 * delivering token batches bit-identically for any worker count and refusing image transforms;
 * and, when Debian's lists are installed, the real dataset: balanced classes, disjoint splits. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/data/loader.h"
#include "runtime/data/source.h"

static char g_dir[256];

static void write_list(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/mst_wordlist_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    write_list("american-english", "Hello\nhello's\ntaxi\nRadio\ndon't\nA.D.\n");
    write_list("ngerman", "Haus\ntaxi\nStra\xc3\x9f" "e\n");
    write_list("french", "maison\n\xc3\xa9t\xc3\xa9\nRADIO\n");
    write_list("italian", "casa\n");
    write_list("spanish", "casa\r\n");
    write_list("portuguese", "cora\xc3\xa7\xc3\xa3o\n");
    write_list("dutch", "huis\nhuis\nHuis\n");
    write_list("swedish", "hus\n\xe4lg\n\xc5sa\n");      /* ISO-8859-1, as Debian ships it */
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int64_t count_label(const mst_source *s, int label) {
    int64_t n = 0;
    for (int64_t i = 0; i < mst_source_len(s); i++) {
        int32_t y;
        mst_source_get(s, i, NULL, &y);
        n += y == label;
    }
    return n;
}

static void test_rules(void **state) {
    (void)state;
    mst_source *tr, *te;
    char err[512];
    assert_int_equal(mst_source_langid_open(g_dir, 4, 1000, &tr, &te, err, sizeof(err)), 0);
    /* kept: en hello; de haus strasse; fr maison ete; pt coracao; nl huis; sv hus alg asa
     * dropped: hello's, don't, a.d. (not letters); taxi, radio, casa (in two lists) */
    assert_int_equal(mst_source_len(tr) + mst_source_len(te), 10);
    const int64_t want[MST_LANGID_CLASSES] = {1, 2, 2, 0, 0, 1, 1, 3};
    for (int l = 0; l < MST_LANGID_CLASSES; l++) assert_int_equal(count_label(tr, l) + count_label(te, l), want[l]);
    int64_t trunc_tr, trunc_te, shared;
    mst_source_text_stats(tr, &trunc_tr, &shared);
    assert_int_equal(shared, 3);
    mst_source_text_stats(te, &trunc_te, &shared);
    assert_int_equal(trunc_tr + trunc_te, 6);          /* longer than 3 characters: hello haus strasse maison coracao huis */
    int64_t shape[3];
    assert_int_equal(mst_source_shape(tr, shape), 1);
    assert_int_equal(shape[2], 4);
    assert_int_equal(mst_source_sample_type(tr), MST_SAMPLE_I32);
    assert_int_equal(mst_source_classes(tr), MST_LANGID_CLASSES);
    assert_true(mst_source_vocab(tr) > MST_TOKEN_FIRST_CHAR && mst_source_vocab(tr) == mst_source_vocab(te));
    for (int split = 0; split < 2; split++) {
        const mst_source *s = split ? te : tr;
        for (int64_t i = 0; i < mst_source_len(s); i++) {
            int32_t t[4], y;
            mst_source_get(s, i, (float *)(void *)t, &y);
            assert_int_equal(t[0], MST_TOKEN_CLS);
            for (int k = 1; k < 4; k++) assert_true(t[k] >= 0 && t[k] < mst_source_vocab(s));
            assert_true(t[1] != MST_TOKEN_PAD);      /* every kept word has a character */
            if (!split)
                for (int k = 1; k < 4; k++) assert_true(t[k] != MST_TOKEN_UNK);    /* the vocabulary comes from train */
            if (y == 7) assert_true(t[3] != MST_TOKEN_PAD);     /* the Latin-1 words read as 3 letters each */
        }
    }
    /* the same lists give the same bits */
    mst_source *tr2, *te2;
    assert_int_equal(mst_source_langid_open(g_dir, 4, 1000, &tr2, &te2, err, sizeof(err)), 0);
    assert_int_equal(mst_source_len(tr2), mst_source_len(tr));
    for (int64_t i = 0; i < mst_source_len(tr); i++) {
        int32_t a[4], b[4], ya, yb;
        mst_source_get(tr, i, (float *)(void *)a, &ya);
        mst_source_get(tr2, i, (float *)(void *)b, &yb);
        assert_memory_equal(a, b, sizeof(a));
        assert_int_equal(ya, yb);
    }
    /* a cap of one word per language keeps at most one */
    mst_source *tr1, *te1;
    assert_int_equal(mst_source_langid_open(g_dir, 4, 1, &tr1, &te1, err, sizeof(err)), 0);
    for (int l = 0; l < MST_LANGID_CLASSES; l++) assert_true(count_label(tr1, l) <= 1 && count_label(te1, l) <= 1);
    mst_source_free(tr1);
    mst_source_free(te1);
    mst_source_free(tr2);
    mst_source_free(te2);
    mst_source_free(tr);
    mst_source_free(te);
}

static void test_errors(void **state) {
    (void)state;
    mst_source *tr, *te;
    char err[512], dir[300];
    snprintf(dir, sizeof(dir), "%s/nowhere", g_dir);
    assert_int_equal(mst_source_langid_open(dir, 24, 100, &tr, &te, err, sizeof(err)), -1);
    assert_null(tr);
    assert_null(te);
    assert_non_null(strstr(err, "nowhere/american-english"));
    assert_int_equal(mst_source_langid_open(g_dir, 1, 100, &tr, &te, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max_len = 1"));
    assert_int_equal(mst_source_langid_open(g_dir, 8, 0, &tr, &te, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "per_language = 0"));
}

static void test_loader_tokens(void **state) {
    (void)state;
    mst_source *tr, *te;
    char err[512];
    assert_int_equal(mst_source_langid_open(g_dir, 6, 1000, &tr, &te, err, sizeof(err)), 0);
    mst_loader_config cfg = {.batch_size = 3, .shuffle = true, .seed = 7, .prefetch = 2, .augment = MST_AUGMENT_NONE};
    int32_t ref[64 * 6];
    int64_t n_ref = 0;
    for (int workers = 0; workers <= 2; workers++) {
        cfg.num_workers = workers;
        mst_loader *ld = mst_loader_new(tr, &cfg, err, sizeof(err));
        assert_non_null(ld);
        assert_int_equal(mst_loader_start_epoch(ld, 1, 0), 0);
        mst_batch b;
        int64_t k = 0;
        while (mst_loader_next(ld, &b) == 1) {
            assert_non_null(b.tokens);
            for (int64_t i = 0; i < b.size * 6; i++) {
                if (workers == 0) ref[k + i] = b.tokens[i];
                else assert_int_equal(b.tokens[i], ref[k + i]);
            }
            k += b.size * 6;
        }
        if (workers == 0) n_ref = k;
        assert_int_equal(k, n_ref);
        assert_int_equal(n_ref, mst_source_len(tr) * 6);
        mst_loader_free(ld);
    }
    cfg.normalize = true;
    cfg.std = 1;
    assert_null(mst_loader_new(tr, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "token ids"));
    mst_source_free(tr);
    mst_source_free(te);
}

/* Debian's lists, when installed: 8 balanced classes and disjoint splits. */
static void test_debian_lists(void **state) {
    (void)state;
    if (access(MST_DICT_DIR "/ngerman", R_OK) != 0 || access(MST_DICT_DIR "/swedish", R_OK) != 0) {
        print_message("skipped: Debian word lists not installed under %s\n", MST_DICT_DIR);
        skip();
    }
    mst_source *tr, *te;
    char err[512];
    assert_int_equal(mst_source_langid_open(MST_DICT_DIR, 24, 3000, &tr, &te, err, sizeof(err)), 0);
    assert_int_equal(mst_source_len(tr), 8 * 3000);
    assert_int_equal(mst_source_len(te), 8 * (3000 / 9));
    for (int l = 0; l < MST_LANGID_CLASSES; l++) {
        assert_int_equal(count_label(tr, l), 3000);
        assert_int_equal(count_label(te, l), 3000 / 9);
    }
    int64_t trunc, shared;
    mst_source_text_stats(tr, &trunc, &shared);
    print_message("vocabulary %d, %lld words dropped as shared, %lld train words truncated\n", mst_source_vocab(tr),
                  (long long)shared, (long long)trunc);
    assert_true(shared > 1000);      /* "hotel", "radio", ... exist in several languages */
    /* no sequence of train equals one of test (the split is by word) */
    int32_t a[24], b[24], y;
    int clashes = 0;
    for (int64_t i = 0; i < mst_source_len(te); i += 7) {
        mst_source_get(te, i, (float *)(void *)a, &y);
        for (int64_t j = 0; j < mst_source_len(tr); j += 1) {
            mst_source_get(tr, j, (float *)(void *)b, &y);
            if (memcmp(a, b, sizeof(a)) == 0 && a[23] == 0) clashes++;   /* untruncated words only */
        }
    }
    assert_int_equal(clashes, 0);
    mst_source_free(tr);
    mst_source_free(te);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_loader_tokens),
        cmocka_unit_test(test_debian_lists),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
