/* test_source.c — sample sources: the IDX reader on the installed Fashion-MNIST files and on small
 * hand-made files (gzipped and raw, valid and broken in every way the reader checks), and the
 * synthetic source (determinism, splits, value range, learnability by a linear classifier). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "runtime/data/source.h"

#define FMNIST MST_FASHION_MNIST_DIR
#define ERRN 1024

/* ---- the real Fashion-MNIST ---- */

static void test_fashion_mnist_train(void **state) {
    char err[ERRN];
    mst_source *src = mst_source_idx_open(FMNIST, "train", err, sizeof err);
    if (!src) fail_msg("%s", err);
    assert_int_equal(mst_source_len(src), 60000);
    int64_t shape[3];
    assert_int_equal(mst_source_shape(src, shape), 3);
    assert_int_equal(shape[0], 1);
    assert_int_equal(shape[1], 28);
    assert_int_equal(shape[2], 28);
    assert_int_equal(mst_source_classes(src), 10);
    assert_int_equal(mst_source_sample_numel(src), 784);
    const int32_t first[12] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9};
    int64_t per_class[10] = {0};
    uint64_t checksum = 0, first_sum = 0;
    float x[784];
    for (int64_t i = 0; i < 60000; i++) {
        int32_t y;
        mst_source_get(src, i, x, &y);
        if (i < 12) assert_int_equal(y, first[i]);
        assert_in_range(y, 0, 9);
        per_class[y]++;
        for (int p = 0; p < 784; p++) {
            assert_true(x[p] >= 0.0f && x[p] <= 1.0f);
            long v = lrintf(x[p] * 255.0f);
            assert_true(fabsf(x[p] * 255.0f - (float)v) < 1e-3f);
            checksum += (uint64_t)v;
            if (i == 0) first_sum += (uint64_t)v;
        }
    }
    /* sums of all pixel bytes, computed once from the .gz files with Python's gzip module */
    assert_int_equal(checksum, 3431114169ull);
    assert_int_equal(first_sum, 76247);
    for (int k = 0; k < 10; k++) assert_int_equal(per_class[k], 6000);
    mst_source_free(src);
}

static void test_fashion_mnist_test(void **state) {
    char err[ERRN];
    mst_source *src = mst_source_idx_open(FMNIST, "test", err, sizeof err);
    if (!src) fail_msg("%s", err);
    assert_int_equal(mst_source_len(src), 10000);
    const int32_t first[12] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5};
    uint64_t checksum = 0;
    float x[784];
    for (int64_t i = 0; i < 10000; i++) {
        int32_t y;
        mst_source_get(src, i, x, &y);
        if (i < 12) assert_int_equal(y, first[i]);
        for (int p = 0; p < 784; p++) checksum += (uint64_t)lrintf(x[p] * 255.0f);
    }
    assert_int_equal(checksum, 573469082ull);
    /* label only, no pixels */
    int32_t y = -1;
    mst_source_get(src, 1, NULL, &y);
    assert_int_equal(y, 2);
    mst_source_free(src);
}

/* ---- hand-made IDX files in a temporary directory ---- */

typedef struct {
    char dir[64];
} tmpdir;

static void tmpdir_make(tmpdir *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/mstune_idx_XXXXXX");
    assert_non_null(mkdtemp(t->dir));
}

static void tmpdir_clear(tmpdir *t) {
    static const char *const names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char path[256];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", t->dir, names[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s.gz", t->dir, names[i]);
        unlink(path);
    }
}

static void tmpdir_remove(tmpdir *t) {
    tmpdir_clear(t);
    assert_int_equal(rmdir(t->dir), 0);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes `<dir>/<name>[.gz]`: magic, dims, then `nbytes` of body (pattern or `body`). */
static void write_idx(const tmpdir *t, const char *name, int gz, uint32_t magic, int ndims, const uint32_t *dims,
                      const uint8_t *body, size_t nbytes) {
    size_t hn = 4 + 4 * (size_t)ndims;
    uint8_t *buf = malloc(hn + nbytes + 1);
    assert_non_null(buf);
    put_be32(buf, magic);
    for (int i = 0; i < ndims; i++) put_be32(buf + 4 + 4 * i, dims[i]);
    for (size_t i = 0; i < nbytes; i++) buf[hn + i] = body ? body[i] : (uint8_t)(i * 7 + 3);
    char path[256];
    snprintf(path, sizeof path, "%s/%s%s", t->dir, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, buf, (unsigned)(hn + nbytes)), (int)(hn + nbytes));
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, hn + nbytes, f), hn + nbytes);
        assert_int_equal(fclose(f), 0);
    }
    free(buf);
}

/* A valid pair: n images of rows x cols, labels i % 10. */
static void write_images(const tmpdir *t, const char *prefix, int gz, uint32_t n, uint32_t rows, uint32_t cols) {
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    write_idx(t, name, gz, 0x803, 3, (uint32_t[]){n, rows, cols}, NULL, (size_t)n * rows * cols);
}

static void write_labels(const tmpdir *t, const char *prefix, int gz, uint32_t n) {
    char name[64];
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    uint8_t *lab = malloc(n);
    for (uint32_t i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
    write_idx(t, name, gz, 0x801, 1, (uint32_t[]){n}, lab, n);
    free(lab);
}

/* Opening fails, and the message names `file` (relative to the dir) and contains `what`. */
static void expect_error(const tmpdir *t, const char *split, const char *file, const char *what) {
    char err[ERRN] = "untouched";
    mst_source *src = mst_source_idx_open(t->dir, split, err, sizeof err);
    if (src) fail_msg("opened %s although it should fail with \"%s\"", t->dir, what);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", t->dir, file);
    if (!strstr(err, path)) fail_msg("message \"%s\" does not name \"%s\"", err, path);
    if (!strstr(err, what)) fail_msg("message \"%s\" does not say \"%s\"", err, what);
    /* a NULL message buffer is allowed */
    assert_null(mst_source_idx_open(t->dir, split, NULL, 0));
}

static void test_idx_small_valid(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    for (int mode = 0; mode < 3; mode++) {       /* both gz, both raw, images gz + labels raw */
        tmpdir_clear(&t);
        write_images(&t, "t10k", mode != 1, 5, 3, 4);
        write_labels(&t, "t10k", mode == 0, 5);
        char err[ERRN];
        mst_source *src = mst_source_idx_open(t.dir, "test", err, sizeof err);
        if (!src) fail_msg("mode %d: %s", mode, err);
        assert_int_equal(mst_source_len(src), 5);
        int64_t shape[3];
        mst_source_shape(src, shape);
        assert_int_equal(shape[0], 1);
        assert_int_equal(shape[1], 3);
        assert_int_equal(shape[2], 4);
        float x[12];
        int32_t y;
        mst_source_get(src, 4, x, &y);
        assert_int_equal(y, 4);
        for (int p = 0; p < 12; p++) {
            uint8_t byte = (uint8_t)((4 * 12 + p) * 7 + 3);
            assert_true(x[p] == (float)byte / 255.0f);
        }
        /* a hint only: any index, in range or not, reads and changes nothing (ASan checks the reads) */
        for (int64_t i = -2; i <= 6; i++) mst_source_prefetch(src, i);
        mst_source_get(src, 4, x, &y);
        assert_true(x[11] == (float)(uint8_t)((4 * 12 + 11) * 7 + 3) / 255.0f);
        mst_source_free(src);
    }
    tmpdir_remove(&t);
}

static void test_idx_missing_files(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "no such file");
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "dataset-fashion-mnist");
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "apt-get install dataset-fashion-mnist");
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", MST_FASHION_MNIST_DIR);
    /* images present, labels missing */
    write_images(&t, "train", 1, 5, 3, 4);
    expect_error(&t, "train", "train-labels-idx1-ubyte.gz", "no such file");
    /* the other split's files do not count */
    expect_error(&t, "test", "t10k-images-idx3-ubyte.gz", "no such file");
    /* a directory that does not exist at all */
    char err[ERRN];
    assert_null(mst_source_idx_open("/nonexistent/mstune", "train", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/mstune/train-images-idx3-ubyte.gz"));
    assert_non_null(strstr(err, "dataset-fashion-mnist"));
    tmpdir_remove(&t);
}

static void test_idx_bad_split(void **state) {
    char err[ERRN];
    assert_null(mst_source_idx_open(FMNIST, "validation", err, sizeof err));
    assert_non_null(strstr(err, "validation"));
    assert_non_null(strstr(err, FMNIST));
}

static void test_idx_bad_magic(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    for (int gz = 0; gz < 2; gz++) {
        const char *ext = gz ? ".gz" : "";
        char file[64];
        tmpdir_clear(&t);
        write_idx(&t, "train-images-idx3-ubyte", gz, 0x801, 3, (uint32_t[]){5, 3, 4}, NULL, 60);
        write_labels(&t, "train", gz, 5);
        snprintf(file, sizeof file, "train-images-idx3-ubyte%s", ext);
        expect_error(&t, "train", file, "bad magic 0x00000801, expected 0x00000803 (IDX3 unsigned-byte images)");

        tmpdir_clear(&t);
        write_images(&t, "train", gz, 5, 3, 4);
        write_idx(&t, "train-labels-idx1-ubyte", gz, 0x803, 1, (uint32_t[]){5}, NULL, 5);
        snprintf(file, sizeof file, "train-labels-idx1-ubyte%s", ext);
        expect_error(&t, "train", file, "bad magic 0x00000803, expected 0x00000801 (IDX1 unsigned-byte labels)");
    }
    tmpdir_remove(&t);
}

static void test_idx_truncated(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    for (int gz = 0; gz < 2; gz++) {
        const char *ext = gz ? ".gz" : "";
        char file[64];
        /* pixels: 5 x 28 x 28 declared, 1000 present */
        tmpdir_clear(&t);
        write_idx(&t, "train-images-idx3-ubyte", gz, 0x803, 3, (uint32_t[]){5, 28, 28}, NULL, 1000);
        write_labels(&t, "train", gz, 5);
        snprintf(file, sizeof file, "train-images-idx3-ubyte%s", ext);
        expect_error(&t, "train", file, "truncated: expected 3920 bytes of pixels, got 1000");

        /* labels: 5 declared, 3 present */
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 5, 3, 4);
        write_idx(&t, "train-labels-idx1-ubyte", gz, 0x801, 1, (uint32_t[]){5}, (const uint8_t[]){1, 2, 3}, 3);
        snprintf(file, sizeof file, "train-labels-idx1-ubyte%s", ext);
        expect_error(&t, "train", file, "truncated: expected 5 bytes of labels, got 3");

        /* header cut after the magic and one dimension */
        tmpdir_clear(&t);
        write_idx(&t, "train-images-idx3-ubyte", gz, 0x803, 1, (uint32_t[]){5}, NULL, 0);
        write_labels(&t, "train", gz, 5);
        snprintf(file, sizeof file, "train-images-idx3-ubyte%s", ext);
        expect_error(&t, "train", file, "truncated header: expected 16 bytes, got 8");

        /* an empty file (for .gz: a valid gzip stream of nothing) */
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 5, 3, 4);
        char path[256];
        snprintf(file, sizeof file, "train-labels-idx1-ubyte%s", ext);
        snprintf(path, sizeof path, "%s/%s", t.dir, file);
        if (gz) {
            gzFile f = gzopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(gzclose(f), Z_OK);
        } else {
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fclose(f), 0);
        }
        expect_error(&t, "train", file, "truncated header: expected 8 bytes, got 0");

        /* only part of the magic */
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 5, 3, 4);
        write_idx(&t, "train-labels-idx1-ubyte", gz, 0x801, 0, NULL, NULL, 0);
        expect_error(&t, "train", file, "truncated header: expected 8 bytes, got 4");
    }
    tmpdir_remove(&t);
}

/* A gzip stream cut short, and one with damaged compressed bytes. */
static void test_idx_damaged_gzip(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    char path[256];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", t.dir);

    write_images(&t, "train", 1, 200, 28, 28);
    write_labels(&t, "train", 1, 200);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    assert_true(size > 100);
    assert_int_equal(fclose(f), 0);

    assert_int_equal(truncate(path, size / 2), 0);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "truncated: expected 156800 bytes of pixels");

    /* the deflate data complete but the 8-byte trailer (CRC-32, length) cut: zlib's gzread
     * reports this only for some read patterns, so the reader either fails naming the file or
     * delivers exactly the bytes that were written (never garbage) */
    write_images(&t, "train", 1, 200, 28, 28);
    assert_int_equal(truncate(path, size - 3), 0);
    char err[ERRN];
    mst_source *src = mst_source_idx_open(t.dir, "train", err, sizeof err);
    if (src) {
        float x[784];
        for (int64_t i = 0; i < 200; i += 199) {
            mst_source_get(src, i, x, NULL);
            for (int p = 0; p < 784; p++) assert_true(x[p] == (float)(uint8_t)((i * 784 + p) * 7 + 3) / 255.0f);
        }
        mst_source_free(src);
    } else {
        assert_non_null(strstr(err, path));
    }

    /* a wrong CRC-32 in the trailer */
    write_images(&t, "train", 1, 200, 28, 28);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, size - 8, SEEK_SET);
    int crc0 = fgetc(f);
    fseek(f, size - 8, SEEK_SET);
    fputc(crc0 ^ 0xff, f);
    assert_int_equal(fclose(f), 0);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "156800 bytes of pixels");
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "incorrect data check");     /* zlib's words */

    /* damage the middle of the deflate stream: an inflate error or a CRC mismatch, never success */
    write_images(&t, "train", 1, 200, 28, 28);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, size / 2, SEEK_SET);
    uint8_t junk[16];
    memset(junk, 0xA5, sizeof junk);
    assert_int_equal(fwrite(junk, 1, sizeof junk, f), sizeof junk);
    assert_int_equal(fclose(f), 0);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "pixels");
    tmpdir_remove(&t);
}

static void test_idx_count_mismatch(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    for (int gz = 0; gz < 2; gz++) {
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 6, 3, 4);
        write_labels(&t, "train", gz, 5);
        char file[64];
        snprintf(file, sizeof file, "train-labels-idx1-ubyte%s", gz ? ".gz" : "");
        expect_error(&t, "train", file, "declares 5 labels but");
        expect_error(&t, "train", file, "declares 6 images");
    }
    tmpdir_remove(&t);
}

static void test_idx_bad_contents(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    for (int gz = 0; gz < 2; gz++) {
        const char *ext = gz ? ".gz" : "";
        char images[64], labels[64];
        snprintf(images, sizeof images, "train-images-idx3-ubyte%s", ext);
        snprintf(labels, sizeof labels, "train-labels-idx1-ubyte%s", ext);

        /* a label past the ten classes */
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 4, 3, 4);
        write_idx(&t, "train-labels-idx1-ubyte", gz, 0x801, 1, (uint32_t[]){4}, (const uint8_t[]){1, 9, 10, 2}, 4);
        expect_error(&t, "train", labels, "label 10 at index 2 is out of range, expected 0 to 9");

        /* bytes after the declared pixels */
        tmpdir_clear(&t);
        write_idx(&t, "train-images-idx3-ubyte", gz, 0x803, 3, (uint32_t[]){4, 3, 4}, NULL, 49);
        write_labels(&t, "train", gz, 4);
        expect_error(&t, "train", images, "trailing bytes after the declared 48 bytes of pixels");

        /* zero images, zero-sized images */
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 0, 3, 4);
        write_labels(&t, "train", gz, 0);
        expect_error(&t, "train", images, "declares 0 images");
        tmpdir_clear(&t);
        write_images(&t, "train", gz, 4, 0, 4);
        write_labels(&t, "train", gz, 4);
        expect_error(&t, "train", images, "bad image size 0x4");
    }
    tmpdir_remove(&t);
}

/* A header declaring 4 billion images backed by a few bytes fails as truncated, without trying
 * to allocate terabytes first. */
static void test_idx_huge_header(void **state) {
    tmpdir t;
    tmpdir_make(&t);
    write_idx(&t, "train-images-idx3-ubyte", 1, 0x803, 3, (uint32_t[]){2000000000u, 1000, 1000}, NULL, 100);
    write_labels(&t, "train", 1, 5);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "declares 5 labels");
    tmpdir_clear(&t);
    write_idx(&t, "train-images-idx3-ubyte", 1, 0x803, 3, (uint32_t[]){2000000000u, 4096, 4096}, NULL, 100);
    write_idx(&t, "train-labels-idx1-ubyte", 1, 0x801, 1, (uint32_t[]){2000000000u}, NULL, 100);
    expect_error(&t, "train", "train-images-idx3-ubyte.gz", "truncated: expected 33554432000000000 bytes of pixels, got 100");
    tmpdir_remove(&t);
}

/* ---- synthetic ---- */

static void test_synthetic_deterministic(void **state) {
    mst_source *a = mst_source_synthetic_new(100, 3, 8, 8, 5, 42, 0);
    mst_source *b = mst_source_synthetic_new(100, 3, 8, 8, 5, 42, 0);
    mst_source *test = mst_source_synthetic_new(100, 3, 8, 8, 5, 42, 1);
    mst_source *other = mst_source_synthetic_new(100, 3, 8, 8, 5, 43, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(test);
    assert_non_null(other);
    assert_int_equal(mst_source_len(a), 100);
    assert_int_equal(mst_source_classes(a), 5);
    int64_t shape[3];
    mst_source_shape(a, shape);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 8);
    assert_int_equal(shape[2], 8);
    float xa[192], xb[192], xt[192], xo[192];
    int counts[5] = {0};
    int same_split = 0, same_seed = 0;
    for (int64_t i = 0; i < 100; i++) {
        int32_t ya, yb, yt, yo;
        mst_source_get(a, i, xa, &ya);
        mst_source_get(b, i, xb, &yb);
        mst_source_get(test, i, xt, &yt);
        mst_source_get(other, i, xo, &yo);
        assert_memory_equal(xa, xb, sizeof xa);
        assert_int_equal(ya, yb);
        assert_in_range(ya, 0, 4);
        counts[ya]++;
        same_split += memcmp(xa, xt, sizeof xa) == 0;
        same_seed += memcmp(xa, xo, sizeof xa) == 0;
        for (int p = 0; p < 192; p++) assert_true(xa[p] >= 0.0f && xa[p] <= 1.0f);
    }
    assert_int_equal(same_split, 0);
    assert_int_equal(same_seed, 0);
    for (int k = 0; k < 5; k++) assert_in_range(counts[k], 5, 40);
    /* order of calls does not matter: sample 7 again, alone */
    int32_t y7;
    mst_source_get(a, 7, xb, &y7);
    mst_source_get(b, 7, xa, NULL);
    assert_memory_equal(xa, xb, sizeof xa);
    mst_source_free(a);
    mst_source_free(b);
    mst_source_free(test);
    mst_source_free(other);
}

/* Nearest class mean (a linear classifier) fitted on split 0 classifies split 1 well above the
 * 10% chance level. */
static void test_synthetic_learnable(void **state) {
    enum { N_TRAIN = 2000, N_TEST = 500, K = 10, D = 784 };
    mst_source *train = mst_source_synthetic_new(N_TRAIN, 1, 28, 28, K, 7, 0);
    mst_source *test = mst_source_synthetic_new(N_TEST, 1, 28, 28, K, 7, 1);
    double *mean = calloc((size_t)K * D, sizeof(double));
    int count[K] = {0};
    float x[D];
    for (int64_t i = 0; i < N_TRAIN; i++) {
        int32_t y;
        mst_source_get(train, i, x, &y);
        count[y]++;
        for (int p = 0; p < D; p++) mean[y * D + p] += x[p];
    }
    for (int k = 0; k < K; k++) {
        assert_true(count[k] > 0);
        for (int p = 0; p < D; p++) mean[k * D + p] /= count[k];
    }
    int correct = 0;
    for (int64_t i = 0; i < N_TEST; i++) {
        int32_t y;
        mst_source_get(test, i, x, &y);
        int best = -1;
        double best_d = INFINITY;
        for (int k = 0; k < K; k++) {
            double d = 0;
            for (int p = 0; p < D; p++) d += (x[p] - mean[k * D + p]) * (x[p] - mean[k * D + p]);
            if (d < best_d) { best_d = d; best = k; }
        }
        correct += best == y;
    }
    print_message("synthetic nearest-mean accuracy: %.3f\n", (double)correct / N_TEST);
    assert_true(correct > N_TEST * 6 / 10);
    free(mean);
    mst_source_free(train);
    mst_source_free(test);
}

/* Prototypes too big to cache (1000 classes of 3x80x80 > 64 MiB) are regenerated per sample. */
static void test_synthetic_large_shape(void **state) {
    mst_source *a = mst_source_synthetic_new(10, 3, 80, 80, 1000, 5, 0);
    assert_non_null(a);
    const size_t n = 3 * 80 * 80;
    float *x = malloc(n * sizeof(float)), *x2 = malloc(n * sizeof(float));
    int32_t y, y2;
    mst_source_get(a, 3, x, &y);
    mst_source_get(a, 3, x2, &y2);
    assert_int_equal(y, y2);
    assert_in_range(y, 0, 999);
    assert_memory_equal(x, x2, n * sizeof(float));
    double sum = 0;
    for (size_t p = 0; p < n; p++) {
        assert_true(x[p] >= 0.0f && x[p] <= 1.0f);
        sum += x[p];
    }
    assert_true(fabs(sum / (double)n - 0.5) < 0.05);
    free(x);
    free(x2);
    mst_source_free(a);
}

static void test_synthetic_bad_args(void **state) {
    assert_null(mst_source_synthetic_new(0, 1, 28, 28, 10, 0, 0));
    assert_null(mst_source_synthetic_new(10, 0, 28, 28, 10, 0, 0));
    assert_null(mst_source_synthetic_new(10, 1, -1, 28, 10, 0, 0));
    assert_null(mst_source_synthetic_new(10, 1, 28, 28, 0, 0, 0));
    assert_null(mst_source_synthetic_new(10, 1 << 20, 1 << 20, 28, 10, 0, 0));
    mst_source_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fashion_mnist_train),
        cmocka_unit_test(test_fashion_mnist_test),
        cmocka_unit_test(test_idx_small_valid),
        cmocka_unit_test(test_idx_missing_files),
        cmocka_unit_test(test_idx_bad_split),
        cmocka_unit_test(test_idx_bad_magic),
        cmocka_unit_test(test_idx_truncated),
        cmocka_unit_test(test_idx_damaged_gzip),
        cmocka_unit_test(test_idx_count_mismatch),
        cmocka_unit_test(test_idx_bad_contents),
        cmocka_unit_test(test_idx_huge_header),
        cmocka_unit_test(test_synthetic_deterministic),
        cmocka_unit_test(test_synthetic_learnable),
        cmocka_unit_test(test_synthetic_large_shape),
        cmocka_unit_test(test_synthetic_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
