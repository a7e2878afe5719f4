/* test_events.c — the profiler event API: nothing recorded when off, nested dispatch/kernel
 * ranges from the dispatcher, multi-threaded recording past one chunk, flush on thread exit,
 * name interning, the schedule's off steps and its phase hook, sampled record preparation. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "profiler/events.h"
#include "runtime/context.h"
#include "runtime/ops.h"

typedef struct {
    int n;
    mst_prof_event ev[64];
    uint32_t tid[64];
} capture;

static void grab(void *user, uint32_t tid, const mst_prof_event *ev) {
    capture *c = user;
    if (c->n < 64) { c->tid[c->n] = tid; c->ev[c->n++] = *ev; }
}

static void test_off_records_nothing(void **state) {
    mst_profiler *p = mst_profiler_new();
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){8});
    assert_non_null(mst_add(ctx, a, a));        /* no profiler running */
    assert_int_equal(mst_prof_enabled, 0);
    mst_profiler_start(p);
    mst_profiler_stop(p);
    assert_int_equal(mst_profiler_event_count(p), 0);
    mst_ctx_free(ctx);
    mst_profiler_free(p);
}

static void test_dispatch_ranges_nest(void **state) {
    mst_ctx *ctx = mst_ctx_new(NULL);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){8});
    mst_tensor *b = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){8});
    mst_profiler *p = mst_profiler_new();
    assert_int_equal(mst_profiler_start(p), 0);
    mst_prof_step_begin(5);
    assert_non_null(mst_add(ctx, a, b));
    mst_prof_step_end(5);
    mst_profiler_stop(p);
    capture c = {0};
    mst_profiler_foreach(p, grab, &c);
    /* step begin, dispatch begin, counter (output allocation), kernel begin, kernel end, dispatch end, step end */
    int k = 0;
    assert_int_equal(c.ev[k].kind, MST_EV_STEP_BEGIN);
    assert_int_equal(c.ev[k++].a, 5);
    assert_int_equal(c.ev[k].kind, MST_EV_BEGIN);
    assert_int_equal(c.ev[k].cat, MST_CAT_DISPATCH);
    assert_int_equal(c.ev[k].op, MST_OP_ADD);
    assert_string_equal(mst_prof_name(c.ev[k++].name), "add");
    while (c.ev[k].kind == MST_EV_COUNTER) {
        assert_string_equal(mst_prof_name(c.ev[k].name), "mem.activations");
        k++;
    }
    assert_int_equal(c.ev[k].kind, MST_EV_BEGIN);
    assert_int_equal(c.ev[k++].cat, MST_CAT_KERNEL);
    assert_int_equal(c.ev[k].kind, MST_EV_END);
    assert_int_equal(c.ev[k].cat, MST_CAT_KERNEL);
    assert_int_equal(c.ev[k].a, 8);             /* FLOPs: one add per element */
    assert_int_equal(c.ev[k++].b, 3 * 8 * 4);   /* bytes: two inputs and one output */
    assert_int_equal(c.ev[k].kind, MST_EV_END);
    assert_int_equal(c.ev[k++].cat, MST_CAT_DISPATCH);
    assert_int_equal(c.ev[k++].kind, MST_EV_STEP_END);
    assert_int_equal(c.n, k);
    for (int i = 1; i < c.n; i++) assert_true(c.ev[i].t_ns >= c.ev[i - 1].t_ns);
    mst_profiler_free(p);
    mst_ctx_free(ctx);
}

#define PER_THREAD 10000    /* more than one chunk per thread */

static void *worker(void *arg) {
    uint32_t name = *(uint32_t *)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        mst_prof_begin(MST_CAT_DATA, name, -1);
        mst_prof_end(MST_CAT_DATA, name, -1);
    }
    return NULL;    /* the thread's partial chunk is flushed at exit */
}

typedef struct {
    uint32_t tids[8];
    int n_tids;
    uint64_t count[8], last_t[8];
    int out_of_order;
} per_thread;

static void tally(void *user, uint32_t tid, const mst_prof_event *ev) {
    per_thread *pt = user;
    int i = 0;
    while (i < pt->n_tids && pt->tids[i] != tid) i++;
    if (i == pt->n_tids) { assert_true(pt->n_tids < 8); pt->tids[pt->n_tids++] = tid; }
    if (ev->t_ns < pt->last_t[i]) pt->out_of_order++;
    pt->last_t[i] = ev->t_ns;
    pt->count[i]++;
}

static void test_threads(void **state) {
    mst_profiler *p = mst_profiler_new();
    uint32_t name = mst_prof_intern("loader.produce");
    assert_int_equal(mst_profiler_start(p), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, &name);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    mst_profiler_stop(p);
    assert_int_equal(mst_profiler_event_count(p), 4 * 2 * PER_THREAD);
    assert_int_equal(mst_profiler_dropped(p), 0);
    per_thread pt = {0};
    mst_profiler_foreach(p, tally, &pt);
    assert_int_equal(pt.n_tids, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(pt.count[i], 2 * PER_THREAD);
    assert_int_equal(pt.out_of_order, 0);
    mst_profiler_free(p);
}

static void test_one_active_profiler(void **state) {
    mst_profiler *p = mst_profiler_new(), *q = mst_profiler_new();
    assert_int_equal(mst_profiler_start(p), 0);
    assert_int_equal(mst_profiler_start(q), -1);
    mst_profiler_stop(p);
    assert_int_equal(mst_profiler_start(q), 0);     /* restart on another profiler */
    mst_prof_instant(mst_prof_intern("mark"), 1, 2);
    mst_profiler_stop(q);
    assert_int_equal(mst_profiler_event_count(p), 0);
    assert_int_equal(mst_profiler_event_count(q), 1);
    mst_profiler_free(p);
    mst_profiler_free(q);
}

static void test_intern(void **state) {
    uint32_t a = mst_prof_intern("conv2d"), b = mst_prof_intern("conv2d"), c = mst_prof_intern("relu");
    assert_int_equal(a, b);
    assert_int_not_equal(a, c);
    assert_string_equal(mst_prof_name(c), "relu");
    char name[32];
    for (int i = 0; i < 2000; i++) {        /* grows the table several times */
        snprintf(name, sizeof(name), "n%d", i);
        assert_int_equal(mst_prof_intern(name), mst_prof_intern(name));
    }
    assert_int_equal(mst_prof_intern("conv2d"), a);
    assert_string_equal(mst_prof_name(mst_prof_intern("n1999")), "n1999");
    assert_string_equal(mst_prof_cat_name(MST_CAT_COMPILE), "compile");
}

/* Cycles of wait off, warmup and active steps after skip; repeat bounds the cycles. */
static void test_schedule_wait(void **state) {
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .skip = 1, .warmup = 1, .active = 2, .repeat = 2, .wait = 3};
    const char *want = "O" "OOOWAA" "OOOWAA" "OOO";     /* O off, W warmup, A active */
    for (int step = 0; want[step]; step++) {
        mst_prof_phase ph = mst_prof_schedule_phase(&c, step);
        char got = ph == MST_PROF_STEP_OFF ? 'O' : ph == MST_PROF_STEP_WARMUP ? 'W' : 'A';
        assert_int_equal(got, want[step]);
    }
}

/* op_every: one kept step in N records its ops, counted from each window's first kept step; the
 * others record totals only (T), at level STEPS; level STEPS itself has no such steps. */
static void test_schedule_op_every(void **state) {
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .skip = 1, .warmup = 1, .active = 5, .wait = 2, .op_every = 3};
    const char *want = "O" "OOWATTAT" "OOWATTAT";
    for (int step = 0; want[step]; step++) {
        mst_prof_phase ph = mst_prof_schedule_phase(&c, step);
        char got = ph == MST_PROF_STEP_OFF ? 'O' : ph == MST_PROF_STEP_WARMUP ? 'W' : ph == MST_PROF_STEP_TOTALS ? 'T' : 'A';
        assert_int_equal(got, want[step]);
    }
    mst_prof_config every = {.level = MST_PROF_LEVEL_DETAIL, .warmup = 2, .op_every = 4};     /* active 0: one window */
    const char *want_every = "WWATTTATTTA";
    for (int step = 0; want_every[step]; step++) {
        mst_prof_phase ph = mst_prof_schedule_phase(&every, step);
        assert_int_equal(ph == MST_PROF_STEP_WARMUP ? 'W' : ph == MST_PROF_STEP_TOTALS ? 'T' : 'A', want_every[step]);
    }
    every.level = MST_PROF_LEVEL_STEPS;
    for (int step = 2; step < 12; step++) assert_int_equal(mst_prof_schedule_phase(&every, step), MST_PROF_STEP_ACTIVE);

    /* the recorder follows: a totals step keeps level STEPS records and drops the per-op ones */
    mst_profiler *p = mst_profiler_new();
    mst_prof_config one_in_two = {.level = MST_PROF_LEVEL_OPS, .op_every = 2};
    mst_profiler_configure(p, &one_in_two);
    assert_int_equal(mst_profiler_start(p), 0);
    for (int step = 0; step < 4; step++) {
        mst_profiler_step(p, step);
        assert_true(mst_prof_on(MST_PROF_LEVEL_STEPS));
        assert_int_equal(mst_prof_on(MST_PROF_LEVEL_OPS) != 0, step % 2 == 0);
    }
    mst_profiler_stop(p);
    mst_profiler_free(p);
}

/* A sink that counts its calls and notes whether the recorder was on at each (an off step's
 * hand-off would find it off). */
typedef struct {
    int calls, while_off;
    size_t records;
} handoff_log;

static void counting_sink(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    (void)tid, (void)ev;
    handoff_log *h = user;
    h->calls++;
    h->while_off += !mst_prof_on(MST_PROF_LEVEL_STEPS);
    h->records += n;
}

/* The step-marking thread hands its records over at the end of a recorded step only: at the end
 * of its window, or once MST_PROF_HANDOFF_NS passed since the last; never in an off step; and
 * every record reaches the sink by the pause (evaluation) or the stop. */
static void test_handoff_when_due(void **state) {
    (void)state;
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .active = 3, .wait = 2};     /* OOAAA OOAAA ... */
    const uint64_t t = 1000000000ull, soon = 1000, late = MST_PROF_HANDOFF_NS;
    assert_false(mst_prof_handoff_due(&c, 0, t + late, t));        /* off: never, however late */
    assert_false(mst_prof_handoff_due(&c, 1, t + late, t));
    assert_false(mst_prof_handoff_due(&c, 2, t + soon, t));        /* recorded, window goes on, soon */
    assert_true(mst_prof_handoff_due(&c, 2, t + late, t));         /* ... or late */
    assert_false(mst_prof_handoff_due(&c, 3, t + soon, t));
    assert_true(mst_prof_handoff_due(&c, 4, t + soon, t));         /* the window's last step */
    assert_true(mst_prof_handoff_due(&c, 9, t + soon, t));
    mst_prof_config always = {.level = MST_PROF_LEVEL_OPS};          /* every step recorded */
    assert_false(mst_prof_handoff_due(&always, 100, t + late - 1, t));
    assert_true(mst_prof_handoff_due(&always, 100, t + late, t));

    mst_profiler *p = mst_profiler_new();
    mst_profiler_configure(p, &c);
    handoff_log h = {0};
    mst_profiler_set_sink(p, counting_sink, &h);
    assert_int_equal(mst_profiler_start(p), 0);
    size_t made = 0;
    int handed = 0;
    for (int64_t step = 0; step < 10; step++) {
        mst_profiler_step(p, step);
        for (int k = 0; k < 3; k++)
            if (mst_prof_on(MST_PROF_LEVEL_STEPS)) made += mst_prof_record_(MST_EV_INSTANT, MST_CAT_OTHER, 0, -1, step, k) != NULL;
        handed += mst_profiler_step_done(p, step);
    }
    /* 2 windows of 3 recorded steps: the first step of each hands over (the first, since no hand-off
     * yet; the second only if 20 ms passed), and the last step of each */
    assert_int_equal(made, 2 * 3 * 3);
    assert_true(handed >= 3 && handed <= 4);
    assert_int_equal(h.calls, handed);
    assert_int_equal(h.while_off, 0);
    assert_int_equal(h.records, made);
    mst_profiler_step(p, 10);                                       /* off: nothing recorded */
    mst_profiler_step(p, 12);
    assert_true(mst_prof_on(MST_PROF_LEVEL_STEPS));
    made += mst_prof_record_(MST_EV_INSTANT, MST_CAT_OTHER, 0, -1, 12, 0) != NULL;
    assert_false(mst_profiler_step_done(p, 12));                    /* recorded, window goes on, soon */
    assert_int_equal(h.records, made - 1);
    mst_profiler_pause(p);                                          /* evaluation: handed over now */
    assert_int_equal(h.records, made);
    mst_profiler_stop(p);
    mst_profiler_free(p);
}

typedef struct {
    int calls;
    bool last;
} hook_log;

static void on_phase(void *user, bool recording) {
    hook_log *h = user;
    h->calls++;
    h->last = recording;
}

/* The hook fires when recording turns on or off between steps, never for a step that keeps it. */
static void test_phase_hook(void **state) {
    mst_profiler *p = mst_profiler_new();
    mst_prof_config c = {.level = MST_PROF_LEVEL_OPS, .active = 2, .wait = 2};
    mst_profiler_configure(p, &c);
    hook_log h = {0};
    mst_profiler_set_phase_hook(p, on_phase, &h);
    assert_int_equal(mst_profiler_start(p), 0);      /* recording from start */
    mst_profiler_step(p, 0);                         /* off */
    assert_int_equal(h.calls, 1);
    assert_false(h.last);
    assert_false(mst_prof_on(MST_PROF_LEVEL_STEPS));
    mst_profiler_step(p, 1);
    assert_int_equal(h.calls, 1);
    mst_profiler_step(p, 2);                         /* active */
    assert_int_equal(h.calls, 2);
    assert_true(h.last);
    assert_true(mst_prof_on(MST_PROF_LEVEL_OPS));
    mst_profiler_step(p, 3);
    mst_profiler_step(p, 4);                         /* off again */
    assert_int_equal(h.calls, 3);
    assert_false(h.last);
    mst_profiler_stop(p);
    mst_profiler_free(p);
}

/* One bracket in MST_PROF_PREP_EVERY is timed; every bracket counts at the mean of the timed ones
 * that were not interrupted (a timed bracket over MST_PROF_PREP_MAX_NS is left out); none once the
 * profiler stopped. The brackets spin 1 us, or 50 us on the first timed one (an interruption). */
static void test_prep_sampled(void **state) {
    mst_profiler *p = mst_profiler_new();
    assert_int_equal(mst_profiler_start(p), 0);
    mst_prof_instant(mst_prof_intern("first"), 0, 0);       /* the thread's buffer */
    int timed = 0;
    for (int i = 0; i < 3 * MST_PROF_PREP_EVERY; i++) {
        uint64_t t0 = mst_prof_prep_begin();
        timed += t0 != 0;
        uint64_t spin = t0 && timed == 1 ? 50000 : 1000;
        for (uint64_t s = mst_prof_now_ns(); mst_prof_now_ns() - s < spin;) {}
        mst_prof_prep_end(t0);
    }
    assert_int_equal(timed, 3);
    mst_profiler_stop(p);
    mst_prof_overhead o = mst_profiler_overhead(p);
    printf("# 48 brackets of 1 us, one timed one interrupted: prep %.1f us\n", o.prep_ns / 1e3);
    printf("# an empty timed bracket reads %.1f ns\n", o.bracket_ns);
    assert_true(o.bracket_ns >= 0 && o.bracket_ns < 1000);       /* 0 where the clock is coarser than a read */
    /* a spin never ends early; what timing a bracket adds is taken off */
    assert_true(o.prep_ns >= (uint64_t)(3.0 * MST_PROF_PREP_EVERY * (1000 - o.bracket_ns)));
    assert_true(o.prep_ns < 3ull * MST_PROF_PREP_EVERY * 1000 + 50000); /* the interrupted one left out */
    assert_true(mst_prof_overhead_ns(&o) >= (double)o.prep_ns + (double)o.records * o.record_ns);
    for (int i = 0; i < 2 * MST_PROF_PREP_EVERY; i++) assert_int_equal(mst_prof_prep_begin(), 0);   /* stopped */
    mst_profiler_free(p);
}

/* A signature builder that counts its calls and spins 5 us (snprintf of a long signature and the
 * intern take 1-3 us). */
static int g_builds;
static void spin_build(const void *arg, char *buf, size_t n) {
    g_builds++;
    for (uint64_t s = mst_prof_now_ns(); mst_prof_now_ns() - s < 5000;) {}
    snprintf(buf, n, "sig-%llu", (unsigned long long)(uintptr_t)arg);
}

/* Two signatures whose keys meet in one set of the cache both stay in it (one slot a set made
 * every call of the dispatch_bound step a miss), and a miss's time reaches the estimate whole:
 * every call below misses and takes over MST_PROF_PREP_MAX_NS inside a preparation bracket,
 * where the sampled timing would drop it as an interruption. */
static void test_sig_cache(void **state) {
    (void)state;
    mst_profiler *p = mst_profiler_new();
    assert_int_equal(mst_profiler_start(p), 0);
    mst_prof_instant(mst_prof_intern("first"), 0, 0);       /* the thread's buffer */
    const uint64_t a = 0x5005, b = 0x5005 + 4096;             /* one set of 128: the low bits agree */
    g_builds = 0;
    uint32_t ia = 0, ib = 0;
    for (int i = 0; i < 100; i++) {
        ia = mst_prof_intern_sig(a, spin_build, (const void *)(uintptr_t)1);
        ib = mst_prof_intern_sig(b, spin_build, (const void *)(uintptr_t)2);
    }
    assert_int_equal(g_builds, 2);
    assert_string_equal(mst_prof_name(ia), "sig-1");
    assert_string_equal(mst_prof_name(ib), "sig-2");
    mst_profiler_stop(p);
    const uint64_t before = mst_profiler_overhead(p).prep_ns;
    mst_profiler_free(p);

    p = mst_profiler_new();
    assert_int_equal(mst_profiler_start(p), 0);
    mst_prof_instant(mst_prof_intern("first"), 0, 0);
    g_builds = 0;
    for (int i = 0; i < 2 * MST_PROF_PREP_EVERY; i++) {
        uint64_t t0 = mst_prof_prep_begin();
        mst_prof_intern_sig(0x9000 + (uint64_t)i * 7919, spin_build, (const void *)(uintptr_t)(100 + i));
        mst_prof_prep_end(t0);
    }
    assert_int_equal(g_builds, 2 * MST_PROF_PREP_EVERY);
    mst_profiler_stop(p);
    mst_prof_overhead o = mst_profiler_overhead(p);
    printf("# %d misses of 5 us in brackets: prep %.1f us (the first profiler's 2 misses: %.1f us)\n", g_builds, o.prep_ns / 1e3,
           before / 1e3);
    assert_true(before >= 2 * 5000ull);
    assert_true(o.prep_ns >= 2ull * MST_PROF_PREP_EVERY * 5000);     /* every miss counted once, whole */
    mst_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_wait),       cmocka_unit_test(test_schedule_op_every),       cmocka_unit_test(test_phase_hook),
        cmocka_unit_test(test_prep_sampled),        cmocka_unit_test(test_handoff_when_due),
        cmocka_unit_test(test_off_records_nothing), cmocka_unit_test(test_dispatch_ranges_nest),
        cmocka_unit_test(test_threads),             cmocka_unit_test(test_one_active_profiler),
        cmocka_unit_test(test_intern),              cmocka_unit_test(test_sig_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
