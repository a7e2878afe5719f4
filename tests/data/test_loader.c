/* test_loader.c — the data loader: config validation naming the field, batch counts with and
 * without drop_remainder and limit, in-order delivery, shuffles that are permutations and change
 * per epoch, bit-identical batches for every num_workers / prefetch (HEAVY augmentation, shuffle),
 * resuming at first_batch, restarting and freeing mid-epoch with workers running, workers that
 * block the stop signals, the consumer and workers bound to CPUs of their own when they fit, the real
 * Fashion-MNIST through the whole pipeline, and the profiler ranges and counters it emits.
 * The seed is printed at start and can be overridden with MSTUNE_TEST_SEED. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "profiler/events.h"
#include "runtime/cpu_pin.h"
#include "runtime/data/loader.h"

static uint64_t g_seed = 1234;

static mst_loader_config base_config(int batch_size, int workers, int prefetch) {
    return (mst_loader_config){.batch_size = batch_size, .shuffle = true, .seed = g_seed, .num_workers = workers,
                               .prefetch = prefetch, .augment = MST_AUGMENT_HEAVY, .normalize = true,
                               .mean = MST_FASHION_MNIST_MEAN, .std = MST_FASHION_MNIST_STD};
}

static mst_loader *loader_or_fail(const mst_source *src, const mst_loader_config *cfg) {
    char err[256];
    mst_loader *ld = mst_loader_new(src, cfg, err, sizeof err);
    if (!ld) fail_msg("mst_loader_new: %s", err);
    return ld;
}

/* Every batch of one epoch, copied out. */
typedef struct {
    int64_t n;                  /* batches */
    int64_t numel;              /* floats per sample */
    int64_t *size, *index;      /* (n) */
    float *x;                   /* (samples, C, H, W) */
    int32_t *y;                 /* (samples) */
    int64_t samples;
} epoch_rec;

static void record_epoch(mst_loader *ld, const mst_source *src, int64_t epoch, int64_t first, epoch_rec *r) {
    const int64_t cap = mst_loader_batches_per_epoch(ld), numel = mst_source_sample_numel(src);
    const int64_t max_samples = mst_loader_num_samples(ld);
    *r = (epoch_rec){.numel = numel};
    r->size = malloc((size_t)(cap + 1) * sizeof(int64_t));
    r->index = malloc((size_t)(cap + 1) * sizeof(int64_t));
    r->x = malloc((size_t)(max_samples * numel + 1) * sizeof(float));
    r->y = malloc((size_t)(max_samples + 1) * sizeof(int32_t));
    assert_int_equal(mst_loader_start_epoch(ld, epoch, first), 0);
    mst_batch b;
    int rc;
    while ((rc = mst_loader_next(ld, &b)) == 1) {
        assert_true(r->n < cap);
        assert_true(r->samples + b.size <= max_samples);
        r->size[r->n] = b.size;
        r->index[r->n] = b.index;
        memcpy(r->x + r->samples * numel, b.x, (size_t)(b.size * numel) * sizeof(float));
        memcpy(r->y + r->samples, b.y, (size_t)b.size * sizeof(int32_t));
        r->samples += b.size;
        r->n++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(mst_loader_next(ld, &b), 0);      /* stays finished */
}

static void epoch_free(epoch_rec *r) {
    free(r->size);
    free(r->index);
    free(r->x);
    free(r->y);
}

static bool epoch_equal(const epoch_rec *a, const epoch_rec *b) {
    return a->n == b->n && a->samples == b->samples &&
           memcmp(a->size, b->size, (size_t)a->n * sizeof(int64_t)) == 0 &&
           memcmp(a->index, b->index, (size_t)a->n * sizeof(int64_t)) == 0 &&
           memcmp(a->y, b->y, (size_t)a->samples * sizeof(int32_t)) == 0 &&
           memcmp(a->x, b->x, (size_t)(a->samples * a->numel) * sizeof(float)) == 0;
}

/* ---- configuration ---- */

static void expect_config_error(const mst_source *src, const mst_loader_config *cfg, const char *field) {
    char err[256] = "";
    mst_loader *ld = mst_loader_new(src, cfg, err, sizeof err);
    if (ld) fail_msg("config with a bad %s was accepted", field);
    if (!strstr(err, field)) fail_msg("message \"%s\" does not name %s", err, field);
    assert_null(mst_loader_new(src, cfg, NULL, 0));
}

static void test_config_errors(void **state) {
    mst_source *src = mst_source_synthetic_new(10, 1, 4, 4, 3, 1, 0);
    mst_loader_config c = base_config(4, 1, 1);
    c.batch_size = 0;
    expect_config_error(src, &c, "batch_size = 0");
    c = base_config(4, -1, 1);
    expect_config_error(src, &c, "num_workers = -1");
    c = base_config(4, MST_LOADER_MAX_WORKERS + 1, 1);
    expect_config_error(src, &c, "num_workers");
    c = base_config(4, 2, 0);
    expect_config_error(src, &c, "prefetch = 0");
    c = base_config(4, 0, 1);
    c.augment = (mst_augment)7;
    expect_config_error(src, &c, "augment = 7");
    c = base_config(4, 0, 1);
    c.std = 0.0f;
    expect_config_error(src, &c, "std = 0");
    c.std = NAN;
    expect_config_error(src, &c, "std");
    c = base_config(4, 0, 1);
    c.mean = INFINITY;
    expect_config_error(src, &c, "mean");
    c = base_config(4, 0, 1);
    c.limit = -3;
    expect_config_error(src, &c, "limit = -3");
    expect_config_error(NULL, &c, "source");
    expect_config_error(src, NULL, "config");
    /* std is not looked at without normalize */
    c = base_config(4, 0, 1);
    c.normalize = false;
    c.std = 0.0f;
    mst_loader_free(loader_or_fail(src, &c));
    mst_loader_free(NULL);
    mst_source_free(src);
}

static void test_batch_counts(void **state) {
    mst_source *src = mst_source_synthetic_new(103, 1, 3, 3, 4, 2, 0);
    struct { int bs; bool drop; int64_t limit; int64_t batches, last; } cases[] = {
        {10, false, 0, 11, 3},  {10, true, 0, 10, 10},  {103, false, 0, 1, 103}, {103, true, 0, 1, 103},
        {200, false, 0, 1, 103}, {200, true, 0, 0, 0},  {1, true, 0, 103, 1},    {10, false, 25, 3, 5},
        {10, true, 25, 2, 10},  {10, false, 500, 11, 3}, {10, true, 103, 10, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int workers = 0; workers <= 2; workers += 2) {
            mst_loader_config c = base_config(cases[i].bs, workers, 2);
            c.drop_remainder = cases[i].drop;
            c.limit = cases[i].limit;
            mst_loader *ld = loader_or_fail(src, &c);
            assert_int_equal(mst_loader_batches_per_epoch(ld), cases[i].batches);
            epoch_rec r;
            record_epoch(ld, src, 0, 0, &r);
            assert_int_equal(r.n, cases[i].batches);
            for (int64_t b = 0; b < r.n; b++) {
                assert_int_equal(r.index[b], b);
                assert_int_equal(r.size[b], b + 1 < r.n ? cases[i].bs : cases[i].last);
            }
            /* with a limit, only the first `limit` samples appear (shuffled among themselves) */
            if (cases[i].limit > 0 && cases[i].limit < 103) {
                assert_int_equal(mst_loader_num_samples(ld), cases[i].limit);
                int seen[103] = {0};
                mst_loader_config plain = c;
                plain.shuffle = false;
                plain.augment = MST_AUGMENT_NONE;
                plain.normalize = false;
                plain.drop_remainder = false;
                mst_loader *pl = loader_or_fail(src, &plain);
                epoch_rec p;
                record_epoch(pl, src, 0, 0, &p);
                assert_int_equal(p.samples, cases[i].limit);
                float x[9];
                for (int64_t s = 0; s < p.samples; s++)
                    for (int64_t k = 0; k < 103; k++) {
                        mst_source_get(src, k, x, NULL);
                        if (memcmp(x, p.x + s * 9, sizeof x) == 0) seen[k]++;
                    }
                for (int64_t k = 0; k < 103; k++) assert_int_equal(seen[k], k < cases[i].limit ? 1 : 0);
                epoch_free(&p);
                mst_loader_free(pl);
            }
            epoch_free(&r);
            mst_loader_free(ld);
        }
    mst_source_free(src);
}

/* No shuffle, no augmentation: batch b holds samples b*bs .. b*bs+size-1 exactly as the source
 * gives them; API misuse is an error, not a crash. */
static void test_in_order_and_misuse(void **state) {
    mst_source *src = mst_source_synthetic_new(50, 2, 5, 5, 4, 3, 0);
    for (int workers = 0; workers <= 3; workers += 3) {
        mst_loader_config c = base_config(8, workers, 2);
        c.shuffle = false;
        c.augment = MST_AUGMENT_NONE;
        c.normalize = false;
        mst_loader *ld = loader_or_fail(src, &c);
        mst_batch b;
        assert_int_equal(mst_loader_next(ld, &b), -1);
        assert_non_null(strstr(mst_loader_error(ld), "start_epoch"));
        assert_int_equal(mst_loader_start_epoch(ld, -1, 0), -1);
        assert_non_null(strstr(mst_loader_error(ld), "epoch = -1"));
        assert_int_equal(mst_loader_start_epoch(ld, 0, 8), -1);
        assert_non_null(strstr(mst_loader_error(ld), "first_batch = 8"));
        assert_int_equal(mst_loader_start_epoch(ld, 0, -1), -1);
        epoch_rec r;
        record_epoch(ld, src, 0, 0, &r);
        assert_int_equal(r.samples, 50);
        float x[50];
        for (int64_t i = 0; i < 50; i++) {
            int32_t y;
            mst_source_get(src, i, x, &y);
            assert_memory_equal(r.x + i * 50, x, sizeof x);
            assert_int_equal(r.y[i], y);
        }
        epoch_free(&r);
        mst_loader_free(ld);
    }
    mst_source_free(src);
}

/* Position of each delivered sample in the source, found by content. */
static void sample_order(const mst_source *src, const epoch_rec *r, int64_t *order) {
    const int64_t n = mst_source_len(src), numel = mst_source_sample_numel(src);
    float *all = malloc((size_t)(n * numel) * sizeof(float));
    for (int64_t k = 0; k < n; k++) mst_source_get(src, k, all + k * numel, NULL);
    for (int64_t s = 0; s < r->samples; s++) {
        order[s] = -1;
        for (int64_t k = 0; k < n; k++)
            if (memcmp(all + k * numel, r->x + s * numel, (size_t)numel * sizeof(float)) == 0) { order[s] = k; break; }
    }
    free(all);
}

static void test_shuffle_permutations(void **state) {
    enum { N = 200 };
    mst_source *src = mst_source_synthetic_new(N, 1, 4, 4, 5, 4, 0);
    mst_loader_config c = base_config(32, 2, 3);
    c.augment = MST_AUGMENT_NONE;
    c.normalize = false;
    mst_loader *ld = loader_or_fail(src, &c);
    int64_t order[3][N];
    for (int e = 0; e < 3; e++) {
        epoch_rec r;
        record_epoch(ld, src, e < 2 ? e : 0, 0, &r);     /* epochs 0, 1, then 0 again */
        assert_int_equal(r.samples, N);
        sample_order(src, &r, order[e]);
        int seen[N] = {0}, fixed = 0;
        for (int s = 0; s < N; s++) {
            assert_in_range(order[e][s], 0, N - 1);
            seen[order[e][s]]++;
            fixed += order[e][s] == s;
        }
        for (int k = 0; k < N; k++) assert_int_equal(seen[k], 1);
        assert_true(fixed < N / 10);
        epoch_free(&r);
    }
    assert_memory_not_equal(order[0], order[1], sizeof order[0]);
    assert_memory_equal(order[0], order[2], sizeof order[0]);
    mst_loader_free(ld);
    mst_source_free(src);
}

/* The core promise: the same bits whatever the number of workers and the prefetch depth. */
static void test_bit_identical_across_workers(void **state) {
    mst_source *src = mst_source_synthetic_new(300, 1, 28, 28, 10, 5, 0);
    const mst_loader_config ref_cfg = base_config(16, 0, 1);
    mst_loader *ref = loader_or_fail(src, &ref_cfg);
    epoch_rec want[2];
    for (int e = 0; e < 2; e++) record_epoch(ref, src, e, 0, &want[e]);
    assert_int_equal(want[0].n, 19);                   /* 18 full batches and one of 12 */
    assert_int_equal(want[0].size[18], 12);
    assert_memory_not_equal(want[0].y, want[1].y, 300 * sizeof(int32_t));
    const int variants[][2] = {{0, 1}, {0, 4}, {1, 1}, {1, 3}, {2, 2}, {4, 1}, {4, 2}, {4, 8}, {3, 30}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        mst_loader_config c = base_config(16, variants[v][0], variants[v][1]);
        mst_loader *ld = loader_or_fail(src, &c);
        for (int e = 0; e < 2; e++) {
            epoch_rec got;
            record_epoch(ld, src, e, 0, &got);
            if (!epoch_equal(&got, &want[e]))
                fail_msg("num_workers %d prefetch %d epoch %d differs from num_workers 0 (seed %llu)", variants[v][0],
                         variants[v][1], e, (unsigned long long)g_seed);
            epoch_free(&got);
        }
        mst_loader_free(ld);
    }
    /* another seed: other batches */
    mst_loader_config c = base_config(16, 2, 2);
    c.seed = g_seed + 1;
    mst_loader *other = loader_or_fail(src, &c);
    epoch_rec got;
    record_epoch(other, src, 0, 0, &got);
    assert_false(epoch_equal(&got, &want[0]));
    epoch_free(&got);
    mst_loader_free(other);
    for (int e = 0; e < 2; e++) epoch_free(&want[e]);
    mst_loader_free(ref);
    mst_source_free(src);
}

/* Data-parallel shards: for N ranks of per-rank batch b, rank 0's batch k, then rank 1's, ...
 * is exactly the unsharded batch k of size N*b (same samples, same augmentation bits), for any
 * worker count; a partial last batch is split evenly, and one smaller than N is dropped. */
static void test_shards(void **state) {
    mst_source *src = mst_source_synthetic_new(300, 1, 28, 28, 10, 5, 0);
    const int64_t numel = mst_source_sample_numel(src);
    for (int ranks = 2; ranks <= 3; ranks++) {
        mst_loader_config gc = base_config(16 * ranks, 0, 1);
        mst_loader *whole = loader_or_fail(src, &gc);
        epoch_rec want;
        record_epoch(whole, src, 1, 0, &want);
        epoch_rec got[3];
        for (int r = 0; r < ranks; r++) {
            mst_loader_config c = base_config(16, r == 1 ? 2 : 0, 2);
            c.shard_rank = r;
            c.shard_count = ranks;
            mst_loader *ld = loader_or_fail(src, &c);
            assert_int_equal(mst_loader_batches_per_epoch(ld), mst_loader_batches_per_epoch(whole));
            record_epoch(ld, src, 1, 0, &got[r]);
            mst_loader_free(ld);
        }
        int64_t off[3] = {0, 0, 0}, wo = 0;
        for (int64_t k = 0; k < want.n; k++) {
            int64_t sum = 0;
            for (int r = 0; r < ranks; r++) {
                const int64_t n = got[r].size[k];
                assert_true(n >= want.size[k] / ranks && n <= want.size[k] / ranks + 1);
                if (memcmp(got[r].y + off[r], want.y + wo + sum, (size_t)n * sizeof(int32_t)) != 0 ||
                    memcmp(got[r].x + off[r] * numel, want.x + (wo + sum) * numel, (size_t)(n * numel) * sizeof(float)) != 0)
                    fail_msg("%d ranks: rank %d batch %lld is not its share of the global batch (seed %llu)", ranks, r,
                             (long long)k, (unsigned long long)g_seed);
                off[r] += n;
                sum += n;
            }
            assert_int_equal(sum, want.size[k]);
            wo += sum;
        }
        assert_int_equal(wo, 300);      /* every sample exactly once */
        for (int r = 0; r < ranks; r++) epoch_free(&got[r]);
        epoch_free(&want);
        mst_loader_free(whole);
    }
    /* a last global batch of one sample cannot feed two ranks: dropped */
    mst_loader_config c = base_config(16, 0, 1);
    c.shard_count = 2;
    c.shard_rank = 1;
    c.limit = 289;
    mst_loader *ld = loader_or_fail(src, &c);
    assert_int_equal(mst_loader_batches_per_epoch(ld), 9);
    mst_loader_free(ld);
    c.shard_rank = 2;
    expect_config_error(src, &c, "shard_rank");
    mst_source_free(src);
}

/* Resuming at first_batch gives exactly the tail of the uninterrupted epoch. */
static void test_first_batch_resume(void **state) {
    mst_source *src = mst_source_synthetic_new(130, 1, 12, 12, 10, 6, 0);
    for (int workers = 0; workers <= 3; workers += 3) {
        mst_loader_config c = base_config(16, workers, 2);
        mst_loader *ld = loader_or_fail(src, &c);
        epoch_rec full;
        record_epoch(ld, src, 2, 0, &full);
        assert_int_equal(full.n, 9);
        const int64_t firsts[] = {1, 4, 8, 9};
        for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++) {
            const int64_t k = firsts[i];
            epoch_rec tail;
            record_epoch(ld, src, 2, k, &tail);
            assert_int_equal(tail.n, full.n - k);
            const int64_t skip = k * 16 < full.samples ? k * 16 : full.samples;
            assert_int_equal(tail.samples, full.samples - skip);
            assert_memory_equal(tail.index, full.index + k, (size_t)tail.n * sizeof(int64_t));
            assert_memory_equal(tail.size, full.size + k, (size_t)tail.n * sizeof(int64_t));
            assert_memory_equal(tail.y, full.y + skip, (size_t)tail.samples * sizeof(int32_t));
            assert_memory_equal(tail.x, full.x + skip * full.numel, (size_t)(tail.samples * full.numel) * sizeof(float));
            epoch_free(&tail);
        }
        epoch_free(&full);
        mst_loader_free(ld);
    }
    mst_source_free(src);
}

/* start_epoch in the middle of an epoch discards what is in flight and starts clean. */
static void test_restart_mid_epoch(void **state) {
    mst_source *src = mst_source_synthetic_new(200, 1, 28, 28, 10, 7, 0);
    const mst_loader_config ref_cfg = base_config(10, 0, 1);
    mst_loader *ref = loader_or_fail(src, &ref_cfg);
    epoch_rec want0, want1;
    record_epoch(ref, src, 0, 0, &want0);
    record_epoch(ref, src, 1, 0, &want1);
    for (int workers = 0; workers <= 4; workers += 2) {
        mst_loader_config c = base_config(10, workers, 3);
        mst_loader *ld = loader_or_fail(src, &c);
        for (int round = 0; round < 5; round++) {
            mst_batch b;
            assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0);
            for (int k = 0; k < round; k++) assert_int_equal(mst_loader_next(ld, &b), 1);
            epoch_rec got;
            record_epoch(ld, src, round % 2, 0, &got);
            assert_true(epoch_equal(&got, round % 2 ? &want1 : &want0));
            epoch_free(&got);
        }
        mst_loader_free(ld);
    }
    epoch_free(&want0);
    epoch_free(&want1);
    mst_loader_free(ref);
    mst_source_free(src);
}

/* Freeing at any point joins the workers promptly; ASan checks nothing leaks. */
static void test_free_mid_epoch(void **state) {
    mst_source *src = mst_source_synthetic_new(2000, 1, 28, 28, 10, 8, 0);
    for (int round = 0; round < 12; round++) {
        mst_loader_config c = base_config(32, 1 + round % 4, 1 + round % 8);
        mst_loader *ld = loader_or_fail(src, &c);
        mst_batch b;
        switch (round % 3) {
        case 0: break;                                          /* never started */
        case 1: assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0); break;   /* started, nothing taken */
        case 2:
            assert_int_equal(mst_loader_start_epoch(ld, round, 0), 0);
            for (int k = 0; k < round; k++) {
                assert_int_equal(mst_loader_next(ld, &b), 1);
                assert_int_equal(b.index, k);
            }
            break;
        }
        mst_loader_free(ld);
    }
    mst_source_free(src);
}

/* SigBlk of thread `tid` from /proc (a hex mask, bit n-1 = signal n); -1 when unreadable. */
/* The value after "KEY:" in /proc/self/task/TID/status, blanks trimmed, into out; false when the
 * thread is gone or the line is not there. */
static bool task_status(const char *tid, const char *key, char *out, size_t n) {
    char path[300], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const size_t k = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') {
            const char *v = line + k + 1 + strspn(line + k + 1, " \t");
            snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
            found = true;
        }
    fclose(f);
    return found;
}

/* The thread ids of this process's loader workers (named mst-loader.N as each starts), at most
 * cap; their count. */
static int loader_tids(char tids[][32], int cap) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "mst-loader.", 11) == 0) snprintf(tids[n++], 32, "%.31s", e->d_name);
    }
    closedir(d);
    return n;
}

static long long thread_blocked_mask(const char *tid) {
    char v[64];
    return task_status(tid, "SigBlk", v, sizeof v) ? strtoll(v, NULL, 16) : -1;
}

/* The workers run with the program's stop signals blocked (as the kernel pool's threads do), so a
 * Ctrl-C reaches the training thread; the creating thread's own mask is left as it was. */
static void test_workers_block_stop_signals(void **state) {
    mst_source *src = mst_source_synthetic_new(512, 1, 28, 28, 10, 8, 0);
    sigset_t before, after;
    pthread_sigmask(SIG_SETMASK, NULL, &before);
    mst_loader_config c = base_config(32, 3, 2);
    mst_loader *ld = loader_or_fail(src, &c);
    pthread_sigmask(SIG_SETMASK, NULL, &after);
    assert_int_equal(sigismember(&after, SIGINT), sigismember(&before, SIGINT));
    assert_int_equal(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
    int workers = 0;
    for (int tries = 0; tries < 200 && workers < 3; tries++) {   /* the names are set as each starts */
        char tids[8][32];
        const int n = loader_tids(tids, 8);
        workers = 0;
        for (int i = 0; i < n; i++) {
            long long mask = thread_blocked_mask(tids[i]);
            if (mask < 0) continue;       /* exited meanwhile */
            if (!(mask & (1LL << (SIGINT - 1))) || !(mask & (1LL << (SIGTERM - 1))))
                fail_msg("loader worker thread %s does not block SIGINT/SIGTERM (SigBlk %llx)", tids[i], mask);
            workers++;
        }
        if (workers < 3) usleep(5000);
    }
    assert_int_equal(workers, 3);
    mst_loader_free(ld);
    mst_source_free(src);
}

/* The CPUs thread `tid` may run on (its Cpus_allowed_list), counted; *first: the lowest. -1 when
 * unreadable. */
static int task_cpus(const char *tid, int *first) {
    char v[256];
    if (!task_status(tid, "Cpus_allowed_list", v, sizeof v)) return -1;
    int n = 0;
    *first = -1;
    for (char *p = v; *p;) {
        char *end;
        long a = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        long b = a;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        if (*first < 0) *first = (int)a;
        n += (int)(b - a + 1);
        p = end;
    }
    return n;
}

/* Every loader worker's CPU (their count in *n); -1 each when a worker is not bound to one. */
static void worker_cpus(int *cpus, int *n) {
    for (int tries = 0; tries < 200; tries++) {
        char tids[8][32];
        *n = loader_tids(tids, 8);
        bool settled = *n > 0;
        for (int i = 0; i < *n; i++) {
            int first = -1, k = task_cpus(tids[i], &first);
            cpus[i] = k == 1 ? first : -1;
            settled &= k == 1;
        }
        if (settled) return;
        usleep(5000);           /* a worker binds itself as it starts */
    }
}

/* A loader whose consumer and workers fit the CPUs binds each to a CPU of its own (a woken worker
 * was often put on its consumer's CPU, and the two took turns on it: runtime/data/loader.c), and
 * lets the consumer go when freed; more threads than CPUs, or a data-parallel shard, bind nothing. */
static void test_threads_bound_when_they_fit(void **state) {
    (void)state;
    const int ncpu = mst_cpu_pin_count();
    mst_source *src = mst_source_synthetic_new(256, 1, 8, 8, 10, 8, 0);
    mst_batch b;
    assert_int_equal(mst_cpu_pinned_self(), -1);
    mst_loader_config c = base_config(32, 1, 2);
    mst_loader *ld = loader_or_fail(src, &c);
    assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0);
    assert_int_equal(mst_loader_next(ld, &b), 1);
    fprintf(stderr, "%d CPUs to bind to; consumer on %d\n", ncpu, mst_cpu_pinned_self());
    if (ncpu >= 2) {
        const int mine = mst_cpu_pinned_self();
        assert_true(mine >= 0);
        assert_int_equal(sched_getcpu(), mine);
        int cpus[8], n = 0;
        worker_cpus(cpus, &n);
        assert_int_equal(n, 1);
        assert_true(cpus[0] >= 0);
        assert_int_not_equal(cpus[0], mine);
    } else {
        assert_int_equal(mst_cpu_pinned_self(), -1);
    }
    mst_loader_free(ld);
    assert_int_equal(mst_cpu_pinned_self(), -1);
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    if (ncpu >= 2) assert_int_equal(CPU_COUNT(&set), ncpu);      /* every CPU again */

    if (ncpu >= 2) {          /* made on the second CPU: the consumer stays there, the worker takes another */
        const int second = mst_cpu_pin_self(1);
        assert_true(second >= 0);
        ld = loader_or_fail(src, &c);
        mst_cpu_unpin_self();
        assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0);
        assert_int_equal(mst_loader_next(ld, &b), 1);
        assert_int_equal(mst_cpu_pinned_self(), second);
        int cpus[8], n = 0;
        worker_cpus(cpus, &n);
        assert_int_equal(n, 1);
        assert_true(cpus[0] >= 0 && cpus[0] != second);
        mst_loader_free(ld);
        assert_int_equal(mst_cpu_pinned_self(), -1);
    }

    c = base_config(32, ncpu > 1 ? ncpu : 1, 2);                  /* a worker per CPU: no room for the consumer */
    ld = loader_or_fail(src, &c);
    assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0);
    assert_int_equal(mst_loader_next(ld, &b), 1);
    assert_int_equal(mst_cpu_pinned_self(), -1);
    mst_loader_free(ld);

    c = base_config(32, 1, 2);
    c.shard_count = 2;
    c.shard_rank = 1;
    ld = loader_or_fail(src, &c);
    assert_int_equal(mst_loader_start_epoch(ld, 0, 0), 0);
    assert_int_equal(mst_loader_next(ld, &b), 1);
    assert_int_equal(mst_cpu_pinned_self(), -1);
    mst_loader_free(ld);
    mst_source_free(src);
}

/* The installed Fashion-MNIST through the whole pipeline. */
static void test_real_fashion_mnist(void **state) {
    char err[512];
    mst_source *src = mst_source_idx_open(MST_FASHION_MNIST_DIR, "train", err, sizeof err);
    if (!src) fail_msg("%s", err);
    mst_loader_config c = base_config(64, 0, 1);
    c.limit = 1000;
    mst_loader *ref = loader_or_fail(src, &c);
    epoch_rec want;
    record_epoch(ref, src, 0, 0, &want);
    assert_int_equal(want.n, 16);
    assert_int_equal(want.size[15], 1000 - 15 * 64);
    const float lo = (0.0f - MST_FASHION_MNIST_MEAN) / MST_FASHION_MNIST_STD;
    const float hi = (1.0f - MST_FASHION_MNIST_MEAN) / MST_FASHION_MNIST_STD;
    double sum = 0;
    for (int64_t i = 0; i < want.samples * want.numel; i++) {
        assert_true(want.x[i] >= lo - 1e-5f && want.x[i] <= hi + 1e-5f);
        sum += want.x[i];
    }
    /* normalized with the dataset's own statistics: mean near 0 (augmentation adds black borders) */
    assert_true(fabs(sum / (double)(want.samples * want.numel)) < 0.25);
    for (int64_t i = 0; i < want.samples; i++) assert_in_range(want.y[i], 0, 9);
    for (int workers = 2; workers <= 4; workers += 2) {
        mst_loader_config cw = c;
        cw.num_workers = workers;
        cw.prefetch = 2;
        mst_loader *ld = loader_or_fail(src, &cw);
        epoch_rec got;
        record_epoch(ld, src, 0, 0, &got);
        assert_true(epoch_equal(&got, &want));
        epoch_free(&got);
        mst_loader_free(ld);
    }
    epoch_free(&want);
    mst_loader_free(ref);
    mst_source_free(src);
}

/* ---- profiler ---- */

typedef struct {
    uint32_t main_tid;
    uint32_t wait, produce, depth;
    int wait_begin, wait_end, produce_begin, produce_end, counters, on_wrong_thread, other, named;
    int64_t max_depth, min_depth;
    uint32_t worker_tids[8];
    int n_worker_tids;
} prof_tally;

static void tally(void *user, uint32_t tid, const mst_prof_event *ev) {
    prof_tally *t = user;
    if (ev->name == t->wait && (ev->kind == MST_EV_BEGIN || ev->kind == MST_EV_END)) {
        assert_int_equal(ev->cat, MST_CAT_DATA);
        t->on_wrong_thread += tid != t->main_tid;
        if (ev->kind == MST_EV_BEGIN) t->wait_begin++; else t->wait_end++;
    } else if (ev->name == t->produce && (ev->kind == MST_EV_BEGIN || ev->kind == MST_EV_END)) {
        assert_int_equal(ev->cat, MST_CAT_DATA);
        t->on_wrong_thread += tid == t->main_tid;
        if (ev->kind == MST_EV_BEGIN) t->produce_begin++; else t->produce_end++;
        bool known = false;
        for (int i = 0; i < t->n_worker_tids; i++) known |= t->worker_tids[i] == tid;
        if (!known && t->n_worker_tids < 8) t->worker_tids[t->n_worker_tids++] = tid;
    } else if (ev->kind == MST_EV_THREAD_NAME) {            /* workers name themselves */
        assert_int_equal(strncmp(mst_prof_name(ev->name), "loader.worker.", 14), 0);
        t->on_wrong_thread += tid == t->main_tid;
        t->named++;
    } else if (ev->name == t->depth && ev->kind == MST_EV_COUNTER) {
        t->on_wrong_thread += tid != t->main_tid;
        t->counters++;
        if (ev->a > t->max_depth) t->max_depth = ev->a;
        if (ev->a < t->min_depth) t->min_depth = ev->a;
    } else {
        t->other++;
    }
}

static void test_profiler_events(void **state) {
    mst_source *src = mst_source_synthetic_new(256, 1, 28, 28, 10, 9, 0);
    for (int workers = 0; workers <= 2; workers += 2) {
        mst_profiler *p = mst_profiler_new();
        assert_int_equal(mst_profiler_start(p), 0);
        mst_loader_config c = base_config(32, workers, 3);
        mst_loader *ld = loader_or_fail(src, &c);
        epoch_rec r;
        record_epoch(ld, src, 0, 0, &r);
        assert_int_equal(r.n, 8);
        epoch_free(&r);
        mst_loader_free(ld);                            /* workers flush their records as they exit */
        mst_profiler_stop(p);
        prof_tally t = {.main_tid = (uint32_t)syscall(SYS_gettid), .wait = mst_prof_intern("loader.wait"),
                        .produce = mst_prof_intern("loader.produce"), .depth = mst_prof_intern("loader.queue_depth"),
                        .min_depth = INT64_MAX, .max_depth = -1};
        mst_profiler_foreach(p, tally, &t);
        assert_int_equal(t.wait_begin, 8);              /* one per delivered batch, none for the end */
        assert_int_equal(t.wait_end, 8);
        assert_int_equal(t.counters, workers ? 8 : 0);      /* no queue without workers, no depth */
        assert_int_equal(t.produce_begin, workers ? 8 : 0);
        assert_int_equal(t.produce_end, workers ? 8 : 0);
        assert_int_equal(t.on_wrong_thread, 0);
        assert_int_equal(t.other, 0);
        assert_int_equal(t.named, t.n_worker_tids);
        assert_true(t.min_depth >= 0 && t.max_depth <= (workers ? 3 : 0));
        assert_in_range(t.n_worker_tids, workers ? 1 : 0, workers);
        mst_profiler_free(p);
    }
    mst_source_free(src);
}

int main(void) {
    const char *env = getenv("MSTUNE_TEST_SEED");
    if (env && *env) g_seed = strtoull(env, NULL, 0);
    print_message("test_loader seed %llu (set MSTUNE_TEST_SEED to override)\n", (unsigned long long)g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_batch_counts),
        cmocka_unit_test(test_in_order_and_misuse),
        cmocka_unit_test(test_shuffle_permutations),
        cmocka_unit_test(test_bit_identical_across_workers),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_first_batch_resume),
        cmocka_unit_test(test_restart_mid_epoch),
        cmocka_unit_test(test_free_mid_epoch),
        cmocka_unit_test(test_workers_block_stop_signals),
        cmocka_unit_test(test_threads_bound_when_they_fit),
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test(test_profiler_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
