/* test_attribution.c — step partition by innermost range on hand-built streams (nesting,
 * back-to-back, clipping at both edges, gaps, unmatched records), exact sums and a brute-force
 * reference over thousands of random well-nested streams, hidden time as a union per category,
 * the many-window sweep against the one-window function, histogram bounds and op percentiles.
 * Random tests print their seed; MST_TEST_SEED overrides it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "profiler/attribution.h"
#include "profiler/events.h"

/* ---- stream building ---- */

typedef struct {
    mst_prof_event ev[4096];
    size_t n;
} stream;

static void put(stream *s, mst_prof_kind kind, mst_prof_cat cat, uint32_t name, uint64_t t) {
    assert_true(s->n < sizeof(s->ev) / sizeof(s->ev[0]));
    mst_prof_event *e = &s->ev[s->n++];
    memset(e, 0, sizeof(*e));
    e->t_ns = t;
    e->kind = (uint8_t)kind;
    e->cat = (uint8_t)cat;
    e->name = name;
    e->op = -1;
}
static void B(stream *s, mst_prof_cat cat, uint32_t name, uint64_t t) { put(s, MST_EV_BEGIN, cat, name, t); }
static void E(stream *s, mst_prof_cat cat, uint32_t name, uint64_t t) { put(s, MST_EV_END, cat, name, t); }

static uint64_t sum_ns(const mst_attr_result *r) {
    uint64_t t = 0;
    for (int c = 0; c < MST_CAT_COUNT; c++) t += r->ns[c];
    return t;
}

/* xorshift64*, seeded from MST_TEST_SEED or a fixed default; printed so a failure can be replayed */
static uint64_t g_rng;
static void seed_rng(const char *test) {
    const char *env = getenv("MST_TEST_SEED");
    g_rng = env ? strtoull(env, NULL, 0) : 0x9e3779b97f4a7c15ull;
    if (!g_rng) g_rng = 1;
    printf("%s: seed %llu (set MST_TEST_SEED to replay)\n", test, (unsigned long long)g_rng);
}
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- hand-built streams ---- */

static void test_nesting(void **state) {
    stream s = {0};
    B(&s, MST_CAT_DISPATCH, 1, 10);
    B(&s, MST_CAT_KERNEL, 1, 30);
    E(&s, MST_CAT_KERNEL, 1, 70);
    E(&s, MST_CAT_DISPATCH, 1, 100);
    mst_attr_result r;
    mst_attr_partition(0, 120, s.ev, s.n, &r);
    assert_int_equal(r.ns[MST_CAT_OTHER], 10 + 20);
    assert_int_equal(r.ns[MST_CAT_DISPATCH], 20 + 30);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 40);
    assert_int_equal(sum_ns(&r), 120);
    assert_int_equal(r.unmatched_end, 0);
    assert_int_equal(r.open_at_end, 0);
}

static void test_back_to_back(void **state) {
    stream s = {0};
    B(&s, MST_CAT_DATA, 1, 0);
    E(&s, MST_CAT_DATA, 1, 50);
    B(&s, MST_CAT_DISPATCH, 2, 50);
    B(&s, MST_CAT_KERNEL, 2, 50);     /* zero dispatch before the kernel */
    E(&s, MST_CAT_KERNEL, 2, 80);
    E(&s, MST_CAT_DISPATCH, 2, 80);
    B(&s, MST_CAT_COMPILE, 3, 80);
    E(&s, MST_CAT_COMPILE, 3, 100);
    mst_attr_result r;
    mst_attr_partition(0, 100, s.ev, s.n, &r);
    assert_int_equal(r.ns[MST_CAT_DATA], 50);
    assert_int_equal(r.ns[MST_CAT_DISPATCH], 0);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 30);
    assert_int_equal(r.ns[MST_CAT_COMPILE], 20);
    assert_int_equal(r.ns[MST_CAT_OTHER], 0);
    assert_int_equal(sum_ns(&r), 100);
}

static void test_clip_both_edges(void **state) {
    stream s = {0};
    B(&s, MST_CAT_MEMCPY, 1, 5);      /* opens before the window */
    E(&s, MST_CAT_MEMCPY, 1, 40);
    B(&s, MST_CAT_COMM, 2, 60);
    E(&s, MST_CAT_COMM, 2, 150);      /* closes after it */
    B(&s, MST_CAT_DATA, 3, 160);      /* entirely after: ignored */
    E(&s, MST_CAT_DATA, 3, 170);
    mst_attr_result r;
    mst_attr_partition(20, 100, s.ev, s.n, &r);
    assert_int_equal(r.ns[MST_CAT_MEMCPY], 20);
    assert_int_equal(r.ns[MST_CAT_OTHER], 20);
    assert_int_equal(r.ns[MST_CAT_COMM], 40);
    assert_int_equal(r.ns[MST_CAT_DATA], 0);
    assert_int_equal(sum_ns(&r), 80);
    assert_int_equal(r.open_at_end, 1);    /* comm continues past the window */
    /* a range covering the whole window, opened and closed outside it */
    stream w = {0};
    B(&w, MST_CAT_KERNEL, 1, 0);
    E(&w, MST_CAT_KERNEL, 1, 1000);
    mst_attr_partition(100, 200, w.ev, w.n, &r);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 100);
    assert_int_equal(sum_ns(&r), 100);
    /* a range entirely before the window leaves nothing open */
    mst_attr_partition(2000, 2100, w.ev, w.n, &r);
    assert_int_equal(r.ns[MST_CAT_OTHER], 100);
}

static void test_gaps_are_other(void **state) {
    stream s = {0};
    B(&s, MST_CAT_KERNEL, 1, 100);
    E(&s, MST_CAT_KERNEL, 1, 200);
    B(&s, MST_CAT_KERNEL, 1, 300);
    E(&s, MST_CAT_KERNEL, 1, 400);
    mst_attr_result r;
    mst_attr_partition(0, 500, s.ev, s.n, &r);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 200);
    assert_int_equal(r.ns[MST_CAT_OTHER], 300);
    mst_attr_partition(0, 1000, NULL, 0, &r);    /* no records at all */
    assert_int_equal(r.ns[MST_CAT_OTHER], 1000);
    mst_attr_partition(50, 50, s.ev, s.n, &r);   /* empty window */
    assert_int_equal(sum_ns(&r), 0);
    mst_attr_partition(60, 50, s.ev, s.n, &r);   /* reversed window: empty, not negative */
    assert_int_equal(sum_ns(&r), 0);
    assert_int_equal(r.t_end, r.t_begin);
}

static void test_unmatched_records(void **state) {
    stream s = {0};
    E(&s, MST_CAT_KERNEL, 9, 10);           /* closes nothing */
    B(&s, MST_CAT_DISPATCH, 1, 20);
    B(&s, MST_CAT_KERNEL, 2, 30);
    E(&s, MST_CAT_DISPATCH, 1, 40);         /* closes the outer range; the kernel stays open */
    E(&s, MST_CAT_DATA, 1, 50);             /* right name, wrong category: closes nothing */
    B(&s, MST_CAT_COMM, 3, 60);             /* never closed: extends to the window end */
    mst_attr_result r;
    mst_attr_partition(0, 100, s.ev, s.n, &r);
    assert_int_equal(r.ns[MST_CAT_OTHER], 20);
    assert_int_equal(r.ns[MST_CAT_DISPATCH], 10);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 10 + 20);
    assert_int_equal(r.ns[MST_CAT_COMM], 40);
    assert_int_equal(sum_ns(&r), 100);
    assert_int_equal(r.unmatched_end, 2);
    assert_int_equal(r.open_at_end, 2);

    /* deeper than the tracker: the extra BEGINs are dropped and counted, never a crash */
    stream d = {0};
    for (int i = 0; i < 100; i++) B(&d, MST_CAT_DISPATCH, (uint32_t)i + 1, (uint64_t)i);
    for (int i = 99; i >= 0; i--) E(&d, MST_CAT_DISPATCH, (uint32_t)i + 1, 200 - (uint64_t)i);
    mst_attr_partition(0, 300, d.ev, d.n, &r);
    assert_int_equal(r.too_deep, 100 - MST_ATTR_MAX_DEPTH);
    assert_int_equal(r.unmatched_end, 100 - MST_ATTR_MAX_DEPTH);
    assert_int_equal(sum_ns(&r), 300);

    /* time running backwards is clamped and counted */
    stream o = {0};
    B(&o, MST_CAT_KERNEL, 1, 50);
    E(&o, MST_CAT_KERNEL, 1, 40);
    mst_attr_partition(0, 100, o.ev, o.n, &r);
    assert_int_equal(r.out_of_order, 1);
    assert_int_equal(r.ns[MST_CAT_KERNEL], 0);
    assert_int_equal(sum_ns(&r), 100);

    /* a category outside the enum counts as other */
    stream b = {0};
    B(&b, (mst_prof_cat)200, 1, 10);
    E(&b, (mst_prof_cat)200, 1, 20);
    mst_attr_partition(0, 30, b.ev, b.n, &r);
    assert_int_equal(r.ns[MST_CAT_OTHER], 30);
}

/* Generate a random well-nested stream over [0, horizon) with equal timestamps allowed. */
static void random_nested(stream *s, uint64_t horizon, int max_ranges) {
    s->n = 0;
    uint64_t t = rnd_below(20);
    struct { mst_prof_cat cat; uint32_t name; } open[16];
    int depth = 0, made = 0;
    while (t < horizon) {
        int can_open = made < max_ranges && depth < 16, can_close = depth > 0;
        if (can_open && (!can_close || rnd_below(2))) {
            open[depth].cat = (mst_prof_cat)rnd_below(MST_CAT_COUNT);
            open[depth].name = (uint32_t)rnd_below(5) + 1;
            B(s, open[depth].cat, open[depth].name, t);
            depth++;
            made++;
        } else if (can_close) {
            depth--;
            E(s, open[depth].cat, open[depth].name, t);
        } else {
            break;
        }
        t += rnd_below(4) == 0 ? 0 : rnd_below(horizon / 10 + 1);
    }
    while (depth > 0 && rnd_below(3)) {     /* sometimes leave ranges open at the end */
        depth--;
        E(s, open[depth].cat, open[depth].name, t);
    }
}

/* Reference: at each nanosecond t, the innermost range is the one begun last among those with
 * begin <= t < end (ranges are well nested, so that is the innermost). */
static void reference(const stream *s, uint64_t tb, uint64_t te, uint64_t out[MST_CAT_COUNT]) {
    typedef struct { uint64_t t0, t1; mst_prof_cat cat; } rg;
    rg ranges[2048];
    int n = 0, stack[64], depth = 0;
    for (size_t i = 0; i < s->n; i++) {
        const mst_prof_event *e = &s->ev[i];
        if (e->kind == MST_EV_BEGIN) {
            ranges[n] = (rg){e->t_ns, UINT64_MAX, (mst_prof_cat)e->cat};
            stack[depth++] = n++;
        } else {
            ranges[stack[--depth]].t1 = e->t_ns;
        }
    }
    memset(out, 0, sizeof(uint64_t) * MST_CAT_COUNT);
    for (uint64_t t = tb; t < te; t++) {
        int best = -1;
        for (int k = 0; k < n; k++)
            if (ranges[k].t0 <= t && t < ranges[k].t1) best = k;
        out[best < 0 ? MST_CAT_OTHER : ranges[best].cat]++;
    }
}

static void test_random_streams_sum_exactly(void **state) {
    seed_rng("test_random_streams_sum_exactly");
    for (int iter = 0; iter < 3000; iter++) {
        stream s;
        const uint64_t horizon = 200 + rnd_below(600);
        random_nested(&s, horizon, 30);
        uint64_t tb = rnd_below(horizon), te = tb + rnd_below(horizon);
        if (iter % 7 == 0) tb = 0, te = horizon + 50;    /* covers everything */
        mst_attr_result r;
        mst_attr_partition(tb, te, s.ev, s.n, &r);
        assert_int_equal(sum_ns(&r), te - tb);
        assert_int_equal(r.unmatched_end, 0);
        uint64_t ref[MST_CAT_COUNT];
        reference(&s, tb, te, ref);
        for (int c = 0; c < MST_CAT_COUNT; c++) {
            if (r.ns[c] != ref[c]) fail_msg("iteration %d, category %s: %llu != reference %llu", iter,
                                            mst_prof_cat_name((mst_prof_cat)c), (unsigned long long)r.ns[c],
                                            (unsigned long long)ref[c]);
        }
    }
}

static void test_streaming_matches_batch(void **state) {
    /* the store's way: one tracker across consecutive windows, each window fed as records arrive */
    seed_rng("test_streaming_matches_batch");
    for (int iter = 0; iter < 200; iter++) {
        stream s;
        random_nested(&s, 5000, 200);
        mst_attr_tracker tr;
        memset(&tr, 0, sizeof(tr));
        uint64_t bounds[6] = {0, 700, 1500, 1500, 3100, 5200};
        size_t i = 0;
        for (int w = 0; w + 1 < 6; w++) {
            mst_attr_window win;
            while (i < s.n && s.ev[i].t_ns < bounds[w]) mst_attr_track(&tr, &s.ev[i++], NULL);
            mst_attr_window_begin(&win, &tr, bounds[w]);
            while (i < s.n && s.ev[i].t_ns <= bounds[w + 1]) {
                mst_attr_window_advance(&win, &tr, s.ev[i].t_ns);
                mst_attr_track(&tr, &s.ev[i++], NULL);
            }
            mst_attr_result a, b;
            mst_attr_window_end(&win, &tr, bounds[w + 1], &a);
            mst_attr_partition(bounds[w], bounds[w + 1], s.ev, s.n, &b);
            for (int c = 0; c < MST_CAT_COUNT; c++) assert_int_equal(a.ns[c], b.ns[c]);
        }
    }
}

/* ---- hidden time ---- */

static void test_hidden_union(void **state) {
    mst_attr_interval iv[] = {
        {10, 50, MST_CAT_DATA},       /* thread A */
        {30, 80, MST_CAT_DATA},       /* thread B, overlapping A: counted once */
        {0, 5, MST_CAT_KERNEL},       /* before the window */
        {25, 35, MST_CAT_KERNEL},
        {33, 45, MST_CAT_KERNEL},     /* overlaps the previous kernel range */
        {60, 200, MST_CAT_COMM},      /* clipped at the end */
        {90, 95, MST_CAT_DATA},       /* after the window */
    };
    uint64_t h[MST_CAT_COUNT];
    mst_attr_hidden(20, 70, iv, sizeof(iv) / sizeof(iv[0]), h);
    assert_int_equal(h[MST_CAT_DATA], 50);
    assert_int_equal(h[MST_CAT_KERNEL], 20);
    assert_int_equal(h[MST_CAT_COMM], 10);
    assert_int_equal(h[MST_CAT_DISPATCH], 0);
    assert_int_equal(h[MST_CAT_OTHER], 0);
}

static void test_hidden_from_two_threads(void **state) {
    /* two loader workers with overlapping produce ranges, each built from its own record stream */
    stream a = {0}, b = {0};
    B(&a, MST_CAT_DATA, 1, 100);
    E(&a, MST_CAT_DATA, 1, 300);
    B(&a, MST_CAT_DATA, 1, 500);
    E(&a, MST_CAT_DATA, 1, 650);
    B(&b, MST_CAT_DATA, 1, 200);
    E(&b, MST_CAT_DATA, 1, 400);
    B(&b, MST_CAT_KERNEL, 2, 420);
    E(&b, MST_CAT_KERNEL, 2, 460);
    mst_attr_interval iv[8];
    size_t n = 0;
    const stream *threads[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        mst_attr_tracker tr;
        memset(&tr, 0, sizeof(tr));
        for (size_t i = 0; i < threads[k]->n; i++) {
            mst_attr_range r;
            if (mst_attr_track(&tr, &threads[k]->ev[i], &r)) iv[n++] = (mst_attr_interval){r.t0, r.t1, r.cat};
        }
    }
    uint64_t h[MST_CAT_COUNT];
    mst_attr_hidden(150, 600, iv, n, h);
    assert_int_equal(h[MST_CAT_DATA], (400 - 150) + (600 - 500));
    assert_int_equal(h[MST_CAT_KERNEL], 40);
}

static void test_sweep_matches_single_windows(void **state) {
    seed_rng("test_sweep_matches_single_windows");
    enum { W = 40, N = 600 };
    for (int iter = 0; iter < 50; iter++) {
        uint64_t tb[W], te[W], t = rnd_below(100);
        for (int w = 0; w < W; w++) {       /* disjoint, sorted, sometimes touching, sometimes empty */
            tb[w] = t;
            te[w] = t + rnd_below(200);
            t = te[w] + (rnd_below(3) ? rnd_below(50) : 0);
        }
        mst_attr_interval iv[N], sorted[N];
        for (int i = 0; i < N; i++) {
            uint64_t a = rnd_below(t + 100), len = rnd_below(4) ? rnd_below(60) : rnd_below(800);
            iv[i] = (mst_attr_interval){a, a + len, (uint8_t)rnd_below(MST_CAT_COUNT)};
        }
        memcpy(sorted, iv, sizeof(iv));
        uint64_t h1[MST_CAT_COUNT];
        mst_attr_hidden(0, 1, sorted, N, h1);    /* sorts by (category, t0) */
        uint64_t hidden[W][MST_CAT_COUNT];
        memset(hidden, 0, sizeof(hidden));
        mst_attr_sweep sw;
        mst_attr_sweep_init(&sw, W, tb, te, hidden);
        for (int i = 0; i < N; i++)
            assert_int_equal(mst_attr_sweep_add(&sw, (mst_prof_cat)sorted[i].cat, sorted[i].t0, sorted[i].t1), 0);
        mst_attr_sweep_finish(&sw);
        for (int w = 0; w < W; w++) {
            mst_attr_interval copy[N];
            memcpy(copy, iv, sizeof(iv));
            uint64_t h[MST_CAT_COUNT];
            mst_attr_hidden(tb[w], te[w], copy, N, h);
            for (int c = 0; c < MST_CAT_COUNT; c++) {
                assert_int_equal(hidden[w][c], h[c]);
                assert_true(h[c] <= te[w] - tb[w]);
            }
        }
    }
    /* unsorted input to the sweep is refused, not silently miscounted */
    uint64_t b = 0, e = 100, hid[1][MST_CAT_COUNT] = {{0}};
    mst_attr_sweep sw;
    mst_attr_sweep_init(&sw, 1, &b, &e, hid);
    assert_int_equal(mst_attr_sweep_add(&sw, MST_CAT_DATA, 50, 60), 0);
    assert_int_equal(mst_attr_sweep_add(&sw, MST_CAT_DATA, 10, 20), -1);
    assert_int_equal(mst_attr_sweep_add(&sw, MST_CAT_KERNEL, 10, 20), 0);    /* other category: fine */
    mst_attr_sweep_finish(&sw);
    assert_int_equal(hid[0][MST_CAT_DATA], 10);
    assert_int_equal(hid[0][MST_CAT_KERNEL], 10);
}

/* ---- per-op statistics ---- */

static void test_hist_buckets(void **state) {
    seed_rng("test_hist_buckets");
    for (uint64_t v = 0; v < 5000; v++) {
        uint64_t lo, hi;
        unsigned b = mst_attr_hist_bucket(v);
        mst_attr_hist_range(b, &lo, &hi);
        assert_true(lo <= v && v < hi);
        if (v > 0) assert_true(b >= mst_attr_hist_bucket(v - 1));    /* monotone */
    }
    for (int i = 0; i < 100000; i++) {
        uint64_t v = rnd() >> rnd_below(64);
        uint64_t lo, hi;
        unsigned b = mst_attr_hist_bucket(v);
        assert_true(b < MST_ATTR_HIST_BUCKETS);
        mst_attr_hist_range(b, &lo, &hi);
        assert_true(lo <= v && (v < hi || hi == UINT64_MAX));
        if (v >= MST_ATTR_HIST_SUB) assert_true((double)(hi - lo) <= (double)lo / MST_ATTR_HIST_SUB);
    }
    assert_int_equal(mst_attr_hist_bucket(UINT64_MAX), MST_ATTR_HIST_BUCKETS - 1);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_op_percentiles(void **state) {
    seed_rng("test_op_percentiles");
    enum { N = 20000 };
    static uint64_t conv[N], relu[N];
    mst_attr_ops *ops = mst_attr_ops_new();
    assert_non_null(ops);
    int64_t flops = 0, bytes = 0;
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        /* log-uniform between 100 ns and 10 ms, and a narrow cluster around 3 us */
        conv[i] = (uint64_t)(100.0 * pow(1e5, (double)rnd_below(1000000) / 1e6));
        relu[i] = 3000 + rnd_below(64);
        assert_int_equal(mst_attr_ops_add(ops, 7, 3, conv[i], 1000, 48), 0);
        assert_int_equal(mst_attr_ops_add(ops, 9, 4, relu[i], 10, 8), 0);
        flops += 1000;
        bytes += 48;
        total += conv[i];
    }
    assert_int_equal(mst_attr_ops_count(ops), 2);
    qsort(conv, N, sizeof(conv[0]), cmp_u64);
    qsort(relu, N, sizeof(relu[0]), cmp_u64);
    const double ps[] = {0.01, 0.5, 0.9, 0.95, 0.99, 1.0};
    for (size_t k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
        size_t rank = (size_t)ceil(ps[k] * N);
        double exact_c = (double)conv[rank - 1], exact_r = (double)relu[rank - 1];
        double got_c = mst_attr_ops_percentile(ops, 0, ps[k]), got_r = mst_attr_ops_percentile(ops, 1, ps[k]);
        if (fabs(got_c - exact_c) > MST_ATTR_PCT_REL_ERROR * exact_c || fabs(got_r - exact_r) > MST_ATTR_PCT_REL_ERROR * exact_r)
            fail_msg("p%.0f: conv %.1f vs exact %.1f, relu %.1f vs exact %.1f", 100 * ps[k], got_c, exact_c, got_r, exact_r);
    }
    mst_attr_op_summary s;
    mst_attr_ops_summary(ops, 0, &s);
    assert_int_equal(s.name, 7);
    assert_int_equal(s.op, 3);
    assert_int_equal(s.calls, N);
    assert_int_equal(s.total_ns, total);
    assert_int_equal(s.min_ns, conv[0]);
    assert_int_equal(s.max_ns, conv[N - 1]);
    assert_int_equal(s.flops, flops);
    assert_int_equal(s.bytes, bytes);
    assert_true(fabs(s.gflops - (double)flops / (double)total) < 1e-12);
    assert_true(fabs(s.gbps - (double)bytes / (double)total) < 1e-12);
    assert_true(fabs(s.mean_ns - (double)total / N) < 1e-6);
    mst_attr_ops_free(ops);
}

static void test_ops_bounded(void **state) {
    mst_attr_ops *ops = mst_attr_ops_new();
    for (uint32_t name = 1; name <= MST_ATTR_MAX_OPS + 100; name++)
        mst_attr_ops_add(ops, name, -1, name, 0, 0);
    assert_int_equal(mst_attr_ops_count(ops), MST_ATTR_MAX_OPS);
    assert_int_equal(mst_attr_ops_untracked(ops), 100);
    assert_int_equal(mst_attr_ops_add(ops, 5, -1, 1, 0, 0), 0);     /* a tracked name still counts */
    mst_attr_op_summary s;
    mst_attr_ops_summary(ops, 4, &s);
    assert_int_equal(s.name, 5);
    assert_int_equal(s.calls, 2);
    assert_int_equal(s.gflops, 0);
    mst_attr_ops_free(ops);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_back_to_back),
        cmocka_unit_test(test_clip_both_edges),
        cmocka_unit_test(test_gaps_are_other),
        cmocka_unit_test(test_unmatched_records),
        cmocka_unit_test(test_random_streams_sum_exactly),
        cmocka_unit_test(test_streaming_matches_batch),
        cmocka_unit_test(test_hidden_union),
        cmocka_unit_test(test_hidden_from_two_threads),
        cmocka_unit_test(test_sweep_matches_single_windows),
        cmocka_unit_test(test_hist_buckets),
        cmocka_unit_test(test_op_percentiles),
        cmocka_unit_test(test_ops_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
