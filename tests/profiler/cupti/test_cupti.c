/* test_cupti.c — the CUPTI collector: clock mapping, conversion of hand-built kernel, memcpy and
 * memset records, the per-stream decoder (thread names, time order, lanes, launch times), and
 * that mst_cupti_start either fails with a message (no driver or GPU) or starts and stops.
 * Built and registered only with MSTUNE_CUDA (from profiler/CMakeLists.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "profiler/cupti_collector.h"

/* ---- clock mapping ---- */

static void test_clock_offset(void **state) {
    mst_cupti_clock clk = {0};
    mst_cupti_clock_add(&clk, 1800000000000000000ull, 5000000);
    assert_int_equal(mst_cupti_clock_map(&clk, 1800000000000000000ull), 5000000);
    assert_int_equal(mst_cupti_clock_map(&clk, 1800000000000000123ull), 5000123);
    assert_int_equal(mst_cupti_clock_map(&clk, 1800000000000000000ull - 1000), 4999000);
    /* before the monotonic clock's origin: clamped, never wrapped */
    assert_int_equal(mst_cupti_clock_map(&clk, 1800000000000000000ull - 6000000), 0);
}

static void test_clock_linear_between_samples(void **state) {
    mst_cupti_clock clk = {0};
    const uint64_t c0 = 1800000000000000000ull, m0 = 10000000000ull;
    mst_cupti_clock_add(&clk, c0, m0);
    /* 1 s of CUPTI time is 1 s + 100 us of monotonic time: rate 1.0001 */
    mst_cupti_clock_add(&clk, c0 + 1000000000ull, m0 + 1000100000ull);
    assert_int_equal(clk.cupti0, c0);
    assert_int_equal(clk.mono0, m0);
    assert_int_equal(mst_cupti_clock_map(&clk, c0), m0);
    assert_int_equal(mst_cupti_clock_map(&clk, c0 + 1000000000ull), m0 + 1000100000ull);
    assert_int_equal(mst_cupti_clock_map(&clk, c0 + 500000000ull), m0 + 500050000ull);
    /* extrapolates on both sides with the same rate */
    assert_int_equal(mst_cupti_clock_map(&clk, c0 + 2000000000ull), m0 + 2000200000ull);
    assert_int_equal(mst_cupti_clock_map(&clk, c0 - 1000000000ull), m0 - 1000100000ull);
}

static void test_clock_short_span_uses_latest_offset(void **state) {
    mst_cupti_clock clk = {0};
    const uint64_t c0 = 1800000000000000000ull, m0 = 10000000000ull;
    mst_cupti_clock_add(&clk, c0, m0);
    mst_cupti_clock_add(&clk, c0 + 1000000ull, m0 + 1000300ull);    /* 1 ms: too short to fit */
    assert_int_equal(mst_cupti_clock_map(&clk, c0 + 1000000ull), m0 + 1000300ull);
    assert_int_equal(mst_cupti_clock_map(&clk, c0), m0 + 300);
}

static void test_clock_step_falls_back_to_offset(void **state) {
    mst_cupti_clock clk = {0};
    const uint64_t c0 = 1800000000000000000ull, m0 = 10000000000ull;
    mst_cupti_clock_add(&clk, c0, m0);
    /* the wall clock jumped 1 s forward during 1 s: rate 2, not a clock drift */
    mst_cupti_clock_add(&clk, c0 + 2000000000ull, m0 + 1000000000ull);
    assert_int_equal(mst_cupti_clock_map(&clk, c0 + 2000000500ull), m0 + 1000000500ull);
}

/* ---- record conversion ---- */

static mst_cupti_clock offset_clock(void) {
    mst_cupti_clock clk = {0};
    mst_cupti_clock_add(&clk, 1000000000000ull, 2000);  /* mono = cupti - 999999998000 */
    return clk;
}
#define CUPTI_T(mono) ((uint64_t)(mono) + 999999998000ull)

static mst_cupti_kernel_rec kernel_rec(uint32_t device, uint32_t stream, uint32_t corr, const char *name,
                                       uint64_t mono_start, uint64_t mono_end) {
    mst_cupti_kernel_rec k;
    memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.deviceId = device;
    k.streamId = stream;
    k.contextId = 1;
    k.correlationId = corr;
    k.name = name;
    k.gridX = 128;
    k.blockX = 256;
    k.start = CUPTI_T(mono_start);
    k.end = CUPTI_T(mono_end);
    return k;
}

static mst_cupti_memcpy_rec memcpy_rec(uint32_t device, uint32_t stream, uint8_t copy_kind, uint64_t bytes,
                                       uint64_t mono_start, uint64_t mono_end) {
    mst_cupti_memcpy_rec m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = copy_kind;
    m.bytes = bytes;
    m.deviceId = device;
    m.streamId = stream;
    m.correlationId = 90;
    m.runtimeCorrelationId = 91;
    m.copyCount = 1;
    m.start = CUPTI_T(mono_start);
    m.end = CUPTI_T(mono_end);
    return m;
}

static CUpti_ActivityAPI api_rec(CUpti_ActivityKind kind, uint32_t corr, uint64_t mono_start) {
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof(a));
    a.kind = kind;
    a.correlationId = corr;
    a.start = CUPTI_T(mono_start);
    a.end = CUPTI_T(mono_start + 3000);
    a.processId = 1;
    a.threadId = 2;
    return a;
}

static void test_convert_kernel(void **state) {
    mst_cupti_clock clk = offset_clock();
    mst_cupti_kernel_rec k = kernel_rec(1, 7, 42, "sgemm_128x64_nn", 50000, 80000);
    mst_cupti_range r;
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&k, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_int_equal(r.device, 1);
    assert_int_equal(r.stream, 7);
    assert_int_equal(r.correlation, 42);
    assert_int_equal(r.ev[0].kind, MST_EV_BEGIN);
    assert_int_equal(r.ev[1].kind, MST_EV_END);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r.ev[i].cat, MST_CAT_KERNEL);
        assert_int_equal(r.ev[i].op, -1);
        assert_string_equal(mst_prof_name(r.ev[i].name), "sgemm_128x64_nn");
    }
    assert_int_equal(r.ev[0].t_ns, 50000);
    assert_int_equal(r.ev[1].t_ns, 80000);
    assert_int_equal(r.ev[0].a, 42);            /* correlation id */
    assert_int_equal(r.ev[0].b, 0);             /* launch time: filled by the decoder */
    assert_int_equal(r.ev[1].a, 0);
    assert_int_equal(r.ev[1].b, 0);

    /* serialized kernels use the same record; a kernel without a name still gets one */
    k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
    k.name = NULL;
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&k, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_string_equal(mst_prof_name(r.ev[0].name), "kernel");
}

static void test_convert_memcpy_and_memset(void **state) {
    mst_cupti_clock clk = offset_clock();
    mst_cupti_memcpy_rec m = memcpy_rec(0, 3, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 4096, 1000, 1500);
    mst_cupti_range r;
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&m, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_int_equal(r.ev[0].cat, MST_CAT_MEMCPY);
    assert_int_equal(r.ev[1].cat, MST_CAT_MEMCPY);
    assert_string_equal(mst_prof_name(r.ev[0].name), "memcpy.htod");
    assert_int_equal(r.ev[0].t_ns, 1000);
    assert_int_equal(r.ev[1].t_ns, 1500);
    assert_int_equal(r.ev[1].b, 4096);          /* bytes on the end record */
    assert_int_equal(r.correlation, 90);
    assert_int_equal(r.correlation2, 91);
    assert_int_equal(r.stream, 3);

    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&m, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_string_equal(mst_prof_name(r.ev[0].name), "memcpy.dtoh");
    m.copyKind = 200;                           /* a kind this CUPTI does not know */
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&m, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_string_equal(mst_prof_name(r.ev[0].name), "memcpy.unknown");

    mst_cupti_memset_rec s;
    memset(&s, 0, sizeof(s));
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = 1 << 20;
    s.deviceId = 0;
    s.streamId = 3;
    s.correlationId = 12;
    s.start = CUPTI_T(3000);
    s.end = CUPTI_T(3200);
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&s, &clk, &r), MST_CUPTI_CONV_RANGE);
    assert_int_equal(r.ev[0].cat, MST_CAT_MEMCPY);
    assert_string_equal(mst_prof_name(r.ev[0].name), "memset");
    assert_int_equal(r.ev[1].b, 1 << 20);
    assert_int_equal(r.ev[0].a, 12);
}

static void test_convert_untimed_and_other(void **state) {
    mst_cupti_clock clk = offset_clock();
    mst_cupti_range r;
    mst_cupti_kernel_rec k = kernel_rec(0, 1, 5, "k", 100, 200);
    k.start = k.end = 0;                        /* CUPTI could not time it */
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&k, &clk, &r), MST_CUPTI_CONV_UNTIMED);
    k = kernel_rec(0, 1, 5, "k", 100, 200);
    k.end = 0;                                  /* flushed while still running */
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&k, &clk, &r), MST_CUPTI_CONV_UNTIMED);
    CUpti_ActivityAPI a = api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 5, 50);
    assert_int_equal(mst_cupti_convert((const CUpti_Activity *)&a, &clk, &r), MST_CUPTI_CONV_OTHER);
}

/* ---- the decoder ---- */

typedef struct {
    uint32_t tid;
    size_t n;
    mst_prof_event ev[32];
} chunk;

typedef struct {
    int n;
    chunk c[16];
} capture;

static void grab(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    capture *cap = user;
    assert_true(cap->n < 16);
    assert_true(n <= 32);
    chunk *c = &cap->c[cap->n++];
    c->tid = tid;
    c->n = n;
    memcpy(c->ev, ev, n * sizeof(*ev));
}

static const chunk *chunk_named(const capture *cap, const char *name) {
    for (int i = 0; i < cap->n; i++)
        if (cap->c[i].n > 0 && cap->c[i].ev[0].kind == MST_EV_THREAD_NAME &&
            strcmp(mst_prof_name(cap->c[i].ev[0].name), name) == 0)
            return &cap->c[i];
    return NULL;
}

/* A chunk's ranges are BEGIN/END pairs, disjoint and in time order, after an optional name. */
static void assert_well_formed(const chunk *c) {
    size_t i = c->n > 0 && c->ev[0].kind == MST_EV_THREAD_NAME ? 1 : 0;
    assert_int_equal((c->n - i) % 2, 0);
    uint64_t last = 0;
    for (; i < c->n; i += 2) {
        assert_int_equal(c->ev[i].kind, MST_EV_BEGIN);
        assert_int_equal(c->ev[i + 1].kind, MST_EV_END);
        assert_int_equal(c->ev[i].name, c->ev[i + 1].name);
        assert_true(c->ev[i].t_ns >= last);
        assert_true(c->ev[i + 1].t_ns >= c->ev[i].t_ns);
        last = c->ev[i + 1].t_ns;
    }
}

static void test_decoder_streams_order_and_launch_times(void **state) {
    mst_cupti_clock clk = offset_clock();
    capture cap = {0};
    mst_cupti_decoder *d = mst_cupti_decoder_new(grab, &cap);
    assert_non_null(d);
    /* one buffer as CUPTI might fill it: two streams interleaved, stream 7 out of order, the
     * launching API record of kernel 12 after the kernel itself */
    mst_cupti_kernel_rec k1 = kernel_rec(0, 7, 11, "conv_fwd", 5000, 6000);
    mst_cupti_kernel_rec k0 = kernel_rec(0, 7, 10, "gemm", 1000, 4000);
    mst_cupti_memcpy_rec m = memcpy_rec(0, 9, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 64, 2000, 2500);
    mst_cupti_kernel_rec k2 = kernel_rec(0, 7, 12, "relu", 6000, 6500);
    CUpti_ActivityAPI a10 = api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 10, 700);
    CUpti_ActivityAPI a11 = api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 11, 900);
    CUpti_ActivityAPI a11d = api_rec(CUPTI_ACTIVITY_KIND_DRIVER, 11, 950);      /* nested driver call */
    CUpti_ActivityAPI a12 = api_rec(CUPTI_ACTIVITY_KIND_DRIVER, 12, 1100);
    CUpti_ActivityAPI a91 = api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 91, 1500);     /* the memcpy's runtime id */
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a10, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a11, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a11d, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&k1, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&k0, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&m, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&k2, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a12, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a91, &clk);
    assert_int_equal(cap.n, 0);                 /* nothing leaves before emit */
    mst_cupti_decoder_emit(d);
    assert_int_equal(cap.n, 2);                 /* one chunk per stream */

    const chunk *s7 = chunk_named(&cap, "gpu.0.7");
    const chunk *s9 = chunk_named(&cap, "gpu.0.9");
    assert_non_null(s7);
    assert_non_null(s9);
    assert_int_not_equal(s7->tid, s9->tid);
    assert_true(s7->tid >= MST_CUPTI_TID_BASE);
    assert_true(s9->tid >= MST_CUPTI_TID_BASE);
    assert_well_formed(s7);
    assert_well_formed(s9);
    assert_int_equal(s7->n, 7);
    assert_int_equal(s7->ev[0].t_ns, 1000);     /* the name record carries the first range's start */
    assert_string_equal(mst_prof_name(s7->ev[1].name), "gemm");
    assert_string_equal(mst_prof_name(s7->ev[3].name), "conv_fwd");
    assert_string_equal(mst_prof_name(s7->ev[5].name), "relu");
    assert_int_equal(s7->ev[1].b, 700);         /* launch times: the API call's start */
    assert_int_equal(s7->ev[3].b, 900);         /* runtime call, not the nested driver call */
    assert_int_equal(s7->ev[5].b, 1100);        /* API record later in the same buffer */
    assert_int_equal(s9->n, 3);
    assert_int_equal(s9->ev[1].b, 1500);        /* found through the runtime correlation id */
    assert_int_equal(s9->ev[2].b, 64);

    /* the next buffer: same stream, same tid, no second name record */
    mst_cupti_kernel_rec k3 = kernel_rec(0, 7, 13, "gemm", 7000, 9000);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&k3, &clk);
    mst_cupti_decoder_emit(d);
    assert_int_equal(cap.n, 3);
    assert_int_equal(cap.c[2].tid, s7->tid);
    assert_int_equal(cap.c[2].n, 2);
    assert_int_equal(cap.c[2].ev[0].kind, MST_EV_BEGIN);
    assert_int_equal(cap.c[2].ev[0].b, 0);      /* its launch record was never seen */

    mst_cupti_decoder_emit(d);                  /* nothing pending: nothing emitted */
    assert_int_equal(cap.n, 3);

    mst_cupti_stats st = mst_cupti_decoder_stats(d);
    assert_int_equal(st.kernels, 4);
    assert_int_equal(st.memcpys, 1);
    assert_int_equal(st.memsets, 0);
    assert_int_equal(st.api_calls, 5);
    assert_int_equal(st.untimed, 0);
    assert_int_equal(st.lost, 0);
    mst_cupti_decoder_free(d);
}

static void test_decoder_overlap_goes_to_lanes(void **state) {
    mst_cupti_clock clk = offset_clock();
    capture cap = {0};
    mst_cupti_decoder *d = mst_cupti_decoder_new(grab, &cap);
    assert_non_null(d);
    /* graph branches on one stream: b overlaps a, c follows a */
    mst_cupti_kernel_rec a = kernel_rec(2, 4, 1, "branch_a", 1000, 3000);
    mst_cupti_kernel_rec b = kernel_rec(2, 4, 2, "branch_b", 2000, 4000);
    mst_cupti_kernel_rec c = kernel_rec(2, 4, 3, "join", 3000, 5000);
    mst_cupti_kernel_rec u = kernel_rec(2, 4, 4, "untimed", 0, 0);
    u.start = u.end = 0;
    CUpti_ActivityAPI other = api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 0, 10);
    other.kind = CUPTI_ACTIVITY_KIND_MARKER;
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&c, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&b, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&a, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&u, &clk);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&other, &clk);
    mst_cupti_decoder_emit(d);
    const chunk *l0 = chunk_named(&cap, "gpu.2.4");
    const chunk *l1 = chunk_named(&cap, "gpu.2.4.1");
    assert_non_null(l0);
    assert_non_null(l1);
    assert_well_formed(l0);
    assert_well_formed(l1);
    assert_int_equal(l0->n, 5);                 /* name, a, join */
    assert_string_equal(mst_prof_name(l0->ev[1].name), "branch_a");
    assert_string_equal(mst_prof_name(l0->ev[3].name), "join");
    assert_int_equal(l1->n, 3);                 /* name, b */
    assert_string_equal(mst_prof_name(l1->ev[1].name), "branch_b");

    /* a later buffer with a range starting before lane 0's last end lands on a free lane, so
     * each pseudo-thread stays disjoint and ordered across chunks */
    mst_cupti_kernel_rec late = kernel_rec(2, 4, 5, "late", 4500, 4800);
    mst_cupti_decoder_add(d, (const CUpti_Activity *)&late, &clk);
    mst_cupti_decoder_emit(d);
    assert_int_equal(cap.c[cap.n - 1].tid, l1->tid);
    assert_true(cap.c[cap.n - 1].ev[0].t_ns >= l1->ev[l1->n - 1].t_ns);

    mst_cupti_stats st = mst_cupti_decoder_stats(d);
    assert_int_equal(st.kernels, 4);
    assert_int_equal(st.untimed, 1);
    assert_int_equal(st.other, 1);
    mst_cupti_decoder_free(d);
}

/* ---- the collector on this machine: a GPU or not ---- */

static void count_emit(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    *(size_t *)user += n;
}

static void test_start_fails_cleanly_or_runs(void **state) {
    char err[512] = "unchanged";
    size_t events = 0;
    assert_int_equal(mst_cupti_start(NULL, NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "emit"));

    int rc = mst_cupti_start(count_emit, &events, err, sizeof(err));
    if (rc != 0) {
        /* no driver or no GPU: a message that says so, and the collector stays usable */
        print_message("mst_cupti_start: %s\n", err);
        assert_int_equal(rc, -1);
        assert_true(strlen(err) > 10);
        char last[512];
        mst_cupti_last_error(last, sizeof(last));
        assert_string_equal(last, err);
        assert_int_equal(mst_cupti_flush(), 0);         /* not running: nothing to do */
        mst_cupti_stop();
        char err2[512] = "";
        assert_int_equal(mst_cupti_start(count_emit, &events, err2, sizeof(err2)), -1);
        assert_string_equal(err2, err);                 /* fails the same way each time */
        assert_int_equal(events, 0);
        return;
    }
    print_message("mst_cupti_start: collecting on this machine's GPU\n");
    char err2[512] = "";
    assert_int_equal(mst_cupti_start(count_emit, &events, err2, sizeof(err2)), -1);
    assert_non_null(strstr(err2, "already running"));
    assert_int_equal(mst_cupti_flush(), 0);
    mst_cupti_stop();
    mst_cupti_stats st = mst_cupti_get_stats();
    assert_int_equal(st.lost, 0);
    mst_cupti_stop();                                   /* twice: no-op */
    /* restartable */
    assert_int_equal(mst_cupti_start(count_emit, &events, err, sizeof(err)), 0);
    mst_cupti_stop();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_offset),
        cmocka_unit_test(test_clock_linear_between_samples),
        cmocka_unit_test(test_clock_short_span_uses_latest_offset),
        cmocka_unit_test(test_clock_step_falls_back_to_offset),
        cmocka_unit_test(test_convert_kernel),
        cmocka_unit_test(test_convert_memcpy_and_memset),
        cmocka_unit_test(test_convert_untimed_and_other),
        cmocka_unit_test(test_decoder_streams_order_and_launch_times),
        cmocka_unit_test(test_decoder_overlap_goes_to_lanes),
        cmocka_unit_test(test_start_fails_cleanly_or_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
