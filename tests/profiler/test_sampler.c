/* test_sampler.c — the SIGPROF sampler: rate, folded stacks, per-thread timers, stop restoring
 * the old disposition, ring overflow and stray signals counted, and the dispatch share of real
 * eager workloads (tiny elementwise ops: high; 512x512 matmuls: low) against the instrumented
 * ranges. Busy loops are bounded by the wall clock; no test sleeps. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "profiler/events.h"
#include "profiler/sampler.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/op.h"
#include "runtime/ops.h"

#define MS 1000000ull

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t gettid_u32(void) { return (uint32_t)syscall(SYS_gettid); }

/* Distinct, never inlined or cloned, so their names appear in the folded stacks. */
__attribute__((noinline, noclone)) static uint64_t spin_leaf(uint64_t ns) {
    volatile uint64_t x = 0;
    for (uint64_t t0 = now_ns(); now_ns() - t0 < ns;)
        for (int i = 0; i < 2000; i++) x += (uint64_t)i;
    return x;
}
__attribute__((noinline, noclone)) static uint64_t spin_a(uint64_t ns) { return spin_leaf(ns) + 1; }
__attribute__((noinline, noclone)) static uint64_t spin_b(uint64_t ns) { return spin_leaf(ns) + 2; }

/* ---- folded-stack helpers ---- */

typedef struct {
    uint32_t tid;           /* 0 = any */
    const char *needle;     /* a frame name */
    int64_t with, total;    /* samples whose stack has the frame; all samples seen */
    int64_t lines, bad_lines;
    char first[512];
} folded_probe;

static bool has_frame(const char *folded, const char *name) {
    size_t n = strlen(name);
    for (const char *p = folded; (p = strstr(p, name)); p += n) {
        bool start = p == folded || p[-1] == ';';
        bool end = p[n] == '\0' || p[n] == ';';
        if (start && end) return true;
    }
    return false;
}

static void probe(void *user, uint32_t tid, const char *folded, int64_t count) {
    folded_probe *fp = user;
    if (fp->tid && tid != fp->tid) return;
    fp->lines++;
    fp->total += count;
    if (count <= 0 || !folded[0] || strchr(folded, ' ') || strstr(folded, ";;")) fp->bad_lines++;
    if (fp->needle && has_frame(folded, fp->needle)) {
        fp->with += count;
        if (!fp->first[0]) snprintf(fp->first, sizeof(fp->first), "%s", folded);
    }
}

static folded_probe probe_run(mst_sampler *s, uint32_t tid, const char *needle) {
    folded_probe fp = {.tid = tid, .needle = needle};
    assert_int_equal(mst_sampler_foreach_folded(s, probe, &fp), 0);
    return fp;
}

/* ---- tests ---- */

static void test_rate_and_folded(void **state) {
    mst_sampler *s = mst_sampler_new(1000, 64, 1 << 14);
    assert_non_null(s);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_add_thread(s), 0);            /* second call: no-op */
    assert_int_equal(mst_sampler_start(s), 0);
    uint64_t t0 = now_ns();
    spin_leaf(300 * MS);
    double wall_s = (double)(now_ns() - t0) * 1e-9;
    mst_sampler_stop(s);

    mst_sampler_stats st = mst_sampler_stats_get(s, 0);
    double expect = wall_s * 1000;
    printf("# rate: %lld samples + %lld overruns in %.3f s at 1 kHz (expected %.0f), %lld truncated\n",
           (long long)st.samples, (long long)st.overruns, wall_s, expect, (long long)st.truncated);
    /* every expiration is either a sample or an overrun; coalescing happens when descheduled */
    assert_true(st.samples + st.overruns >= 0.8 * expect);
    assert_true(st.samples + st.overruns <= 1.1 * expect + 5);
    assert_true(st.samples >= 0.3 * expect);
    assert_int_equal(st.lost, 0);
    assert_int_equal(st.samples, st.outside);                  /* no op ran */
    /* the fast trace reaches plain C frames; MSTUNE_SAMPLER_UNWIND=step (the ctest variant) walks all */
    const char *unwind = getenv("MSTUNE_SAMPLER_UNWIND");
    assert_int_equal(st.step_walked, unwind && strcmp(unwind, "step") == 0 ? st.samples : 0);
    assert_int_equal(mst_sampler_count(s, gettid_u32()), st.samples);
    assert_true(mst_sampler_dispatch_share(s, 0) < 0);          /* nothing inside mst_dispatch */

    folded_probe fp = probe_run(s, 0, "spin_leaf");
    printf("# folded: %s\n", fp.first);
    assert_int_equal(fp.total, st.samples);
    assert_int_equal(fp.bad_lines, 0);
    assert_true(fp.with >= 0.9 * (double)st.samples);
    assert_true(has_frame(fp.first, "main"));
    assert_true(has_frame(fp.first, "test_rate_and_folded"));
    assert_non_null(strstr(fp.first, "main;"));                /* root first, leaf last */
    assert_true(strstr(fp.first, "main;") < strstr(fp.first, "spin_leaf"));
    mst_sampler_free(s);
}

typedef struct {
    mst_sampler *s;
    pthread_barrier_t *ready, *go;
    uint64_t (*fn)(uint64_t);
    uint32_t tid;
    int add_rc;
} spinner;

static void *spinner_main(void *arg) {
    spinner *sp = arg;
    sp->tid = gettid_u32();
    sp->add_rc = mst_sampler_add_thread(sp->s);
    pthread_barrier_wait(sp->ready);
    pthread_barrier_wait(sp->go);
    sp->fn(200 * MS);
    mst_sampler_remove_thread(sp->s);
    return NULL;
}

static void test_two_threads(void **state) {
    mst_sampler *s = mst_sampler_new(1000, 64, 1 << 14);
    pthread_barrier_t ready, go;
    pthread_barrier_init(&ready, NULL, 3);
    pthread_barrier_init(&go, NULL, 3);
    spinner sp[2] = {{s, &ready, &go, spin_a, 0, -1}, {s, &ready, &go, spin_b, 0, -1}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, spinner_main, &sp[i]), 0);
    pthread_barrier_wait(&ready);
    assert_int_equal(mst_sampler_start(s), 0);
    pthread_barrier_wait(&go);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    mst_sampler_stop(s);
    pthread_barrier_destroy(&ready);
    pthread_barrier_destroy(&go);

    for (int i = 0; i < 2; i++) assert_int_equal(sp[i].add_rc, 0);
    assert_int_not_equal(sp[0].tid, sp[1].tid);
    assert_int_equal(mst_sampler_count(s, gettid_u32()), 0);   /* main was not sampled */
    folded_probe a_in_a = probe_run(s, sp[0].tid, "spin_a"), b_in_a = probe_run(s, sp[0].tid, "spin_b");
    folded_probe b_in_b = probe_run(s, sp[1].tid, "spin_b"), a_in_b = probe_run(s, sp[1].tid, "spin_a");
    printf("# threads: %lld and %lld samples\n", (long long)a_in_a.total, (long long)b_in_b.total);
    for (int i = 0; i < 2; i++) assert_true(mst_sampler_count(s, sp[i].tid) >= 40);   /* 200 expected */
    assert_true(a_in_a.with >= 0.9 * (double)a_in_a.total);
    assert_true(b_in_b.with >= 0.9 * (double)b_in_b.total);
    assert_int_equal(b_in_a.with, 0);
    assert_int_equal(a_in_b.with, 0);
    assert_int_equal(mst_sampler_count(s, 0), a_in_a.total + b_in_b.total);
    mst_sampler_free(s);
}

static atomic_int g_prof_seen;
static void count_prof(int sig) { atomic_fetch_add(&g_prof_seen, 1); }

static int count_posix_timers(void) {
    FILE *f = fopen("/proc/self/timers", "r");
    if (!f) return -1;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "ID:", 3) == 0) n++;
    fclose(f);
    return n;
}

static void test_stop_restores(void **state) {
    struct sigaction mine, old, now;
    memset(&mine, 0, sizeof(mine));
    mine.sa_handler = count_prof;
    sigemptyset(&mine.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &mine, &old), 0);
    atomic_store(&g_prof_seen, 0);
    int timers_before = count_posix_timers();

    mst_sampler *s = mst_sampler_new(2000, 32, 1 << 12);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    for (int window = 0; window < 2; window++) {              /* restart accumulates */
        int64_t before = mst_sampler_count(s, 0);
        assert_int_equal(mst_sampler_start(s), 0);
        spin_leaf(50 * MS);
        mst_sampler_stop(s);
        assert_true(mst_sampler_count(s, 0) > before);
        assert_int_equal(sigaction(SIGPROF, NULL, &now), 0);
        assert_ptr_equal(now.sa_handler, count_prof);
        assert_false(now.sa_flags & SA_SIGINFO);
    }
    int64_t after = mst_sampler_count(s, 0);
    spin_leaf(50 * MS);                                         /* the disarmed timer sends nothing */
    assert_int_equal(atomic_load(&g_prof_seen), 0);
    assert_int_equal(mst_sampler_foreach_folded(s, probe, &(folded_probe){0}), 0);
    assert_int_equal(mst_sampler_count(s, 0), after);
    mst_sampler_free(s);
    if (timers_before >= 0) assert_int_equal(count_posix_timers(), timers_before);   /* deleted */
    spin_leaf(20 * MS);
    assert_int_equal(atomic_load(&g_prof_seen), 0);
    assert_int_equal(sigaction(SIGPROF, &old, NULL), 0);
}

/* Paused, the timers send nothing; resumed, the countdown goes on where the pause left it, so
 * recording windows shorter than the period still add up to samples (a window that re-armed a
 * full period each time would never fire: 8 windows of 30 ms at 10 Hz). */
static void test_pause_keeps_the_countdown(void **state) {
    mst_sampler *s = mst_sampler_new(10, 32, 1 << 10);
    assert_non_null(s);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    assert_int_equal(mst_sampler_pause(s, true), 0);
    spin_leaf(250 * MS);                                        /* 2.5 periods, paused */
    assert_int_equal(mst_sampler_deliveries(s), 0);
    for (int window = 0; window < 8; window++) {                /* 240 ms recording in all */
        assert_int_equal(mst_sampler_pause(s, false), 0);
        spin_leaf(30 * MS);
        assert_int_equal(mst_sampler_pause(s, true), 0);
        spin_leaf(10 * MS);
    }
    int64_t got = mst_sampler_deliveries(s);
    printf("# 8 windows of 30 ms at 10 Hz: %lld samples\n", (long long)got);
    assert_true(got >= 1);
    assert_true(got <= 4);                                      /* 2 expected: the paused time did not count */
    mst_sampler_stop(s);
    mst_sampler_free(s);
}

static void test_one_running_sampler(void **state) {
    mst_sampler *a = mst_sampler_new(0, 0, 16), *b = mst_sampler_new(0, 0, 16);
    assert_int_equal(mst_sampler_start(a), 0);
    assert_int_equal(mst_sampler_start(b), -1);
    assert_non_null(strstr(mst_sampler_error(b), "another sampler"));
    mst_sampler_stop(a);
    assert_int_equal(mst_sampler_start(b), 0);
    mst_sampler_stop(b);
    mst_sampler_free(a);
    mst_sampler_free(b);
}

/* Held twice (nested), spins for ns, releases both; true when a tick came while held. Not inlined
 * and no tail call to the release, so its frame is the one the release's sample starts at. */
__attribute__((noinline, noclone)) static bool held_spin(uint64_t ns, mst_sampler *s, int64_t deferred_before) {
    if (!mst_sampler_hold() || !mst_sampler_hold()) return false;
    spin_leaf(ns);
    mst_sampler_release();
    const bool deferred = mst_sampler_deferred(s) > deferred_before;
    mst_sampler_release();
    __asm__ volatile("" ::: "memory");
    return deferred;
}

/* A hold masks SIGPROF only while a sampler runs, and each one is counted into the sampler's cost
 * at its calibrated price; a tick that comes while held is delivered at the release. */
static void test_hold_counted_in_cost(void **state) {
    (void)state;
    assert_false(mst_sampler_hold());               /* no sampler: nothing held, nothing counted */
    mst_sampler *s = mst_sampler_new(1000, 32, 1 << 10);
    assert_non_null(s);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    assert_int_equal(mst_sampler_holds(), 0);
    assert_true(mst_sampler_hold_ns(s) > 0);
    double before = mst_sampler_cost_ns(s);
    for (int i = 0; i < 100; i++) {
        assert_true(mst_sampler_hold());
        mst_sampler_release();
    }
    assert_int_equal(mst_sampler_holds(), 100);
    assert_true(mst_sampler_cost_ns(s) - before >= 100 * mst_sampler_hold_ns(s));
    /* a tick's price: a timer's tick against a counted loop, never under a self-sent signal's */
    printf("# a timer tick costs %.0f ns besides the handler; a self-sent signal %.0f ns\n", mst_sampler_tick_ns(s),
           mst_sampler_self_signal_ns(s));
    assert_true(mst_sampler_self_signal_ns(s) > 0);
    assert_true(mst_sampler_tick_ns(s) >= mst_sampler_self_signal_ns(s));
    /* held (nested) across several periods: the ticks take no stack inside the held code, and one
     * is taken at the outer release, where the held code returned to its caller */
    int64_t deferred = mst_sampler_deferred(s);
    assert_true(held_spin(5 * MS, s, deferred));
    /* a queued SIGPROF that is not a held tick of this thread is stray, never a sample */
    int64_t stray = mst_sampler_stray(s);
    pthread_sigqueue(pthread_self(), SIGPROF, (union sigval){.sival_ptr = &stray});
    assert_int_equal(mst_sampler_stray(s), stray + 1);
    mst_sampler_stop(s);
    assert_int_equal(probe_run(s, 0, "spin_leaf").with, 0);
    folded_probe at_release = probe_run(s, 0, "held_spin");
    printf("# held 5 ms: %lld ticks deferred, %lld samples at the release: %s\n",
           (long long)(mst_sampler_deferred(s) - deferred), (long long)at_release.with, at_release.first);
    assert_true(at_release.with >= 1);
    /* the sample's leaf is the held code's caller: none of the sampler's own frames */
    const char *leaf = strrchr(at_release.first, ';');
    assert_non_null(leaf);
    assert_string_equal(leaf + 1, "held_spin");
    assert_int_equal(probe_run(s, 0, "mst_sampler_release").with, 0);
    assert_int_equal(probe_run(s, 0, "take_held_tick").with, 0);
    mst_sampler_free(s);
}

#if defined(__x86_64__)
/* Fills the 4 KiB below the red zone under the stack pointer, spins iters times, and counts the
 * words changed meanwhile: code that keeps data there loses it to a signal frame pushed on its
 * stack (what the cnn's profile inside oneDNN looked like). All in assembly, so no compiled code
 * moves the stack pointer. */
__attribute__((noinline, noclone)) static int64_t below_sp_changed(uint64_t iters) {
    int64_t bad;
    const uint64_t pattern = 0x5a5aa5a5c3c33c3cull;
    __asm__ volatile("mov %%rsp, %%rdx\n\t"
                     "sub $128, %%rdx\n\t"
                     "mov $-512, %%rcx\n"
                     "1: mov %%rcx, %%rax\n\t"
                     "xor %[pat], %%rax\n\t"
                     "mov %%rax, (%%rdx,%%rcx,8)\n\t"
                     "inc %%rcx\n\t"
                     "jnz 1b\n\t"
                     "mov %[iters], %%rsi\n"
                     "2: dec %%rsi\n\t"
                     "jnz 2b\n\t"
                     "xor %[bad], %[bad]\n\t"
                     "mov $-512, %%rcx\n"
                     "3: mov %%rcx, %%rax\n\t"
                     "xor %[pat], %%rax\n\t"
                     "cmp %%rax, (%%rdx,%%rcx,8)\n\t"
                     "je 4f\n\t"
                     "inc %[bad]\n"
                     "4: inc %%rcx\n\t"
                     "jnz 3b"
                     : [bad] "=&r"(bad)
                     : [pat] "r"(pattern), [iters] "r"(iters)
                     : "rax", "rcx", "rdx", "rsi", "memory", "cc");
    return bad;
}

/* The handler's frame never lands on the sampled thread's stack: below its stack pointer the
 * interrupted code's data survives the samples taken there (a signal stack per thread). */
static void test_handler_off_the_stack(void **state) {
    (void)state;
    mst_sampler *s = mst_sampler_new(1000, 32, 1 << 10);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    uint64_t t0 = now_ns();
    int64_t changed = below_sp_changed(200000000ull);
    double ms = (double)(now_ns() - t0) * 1e-6;
    mst_sampler_stop(s);
    folded_probe fp = probe_run(s, 0, "below_sp_changed");
    int64_t samples = fp.with;
    printf("# %.0f ms below the stack pointer: %lld samples there, %lld words changed\n", ms, (long long)samples,
           (long long)changed);
    assert_true(samples >= 3);
    assert_int_equal(changed, 0);
    mst_sampler_free(s);
}
#endif

#if defined(__x86_64__)
/* Code without unwind information, as a JIT writes it (oneDNN's kernels): a frame-pointer prologue
 * and a countdown loop, copied into an executable page. libgcc's trace stops in it; the sample
 * must then take libunwind's walk, which follows the frame pointer to the caller. */
typedef void (*jit_loop_fn)(uint64_t iters);

static jit_loop_fn jit_loop_new(void) {
    static const unsigned char code[] = {
        0x55,                   /* push %rbp */
        0x48, 0x89, 0xe5,       /* mov %rsp,%rbp */
        0x48, 0x89, 0xf8,       /* mov %rdi,%rax */
        0x48, 0xff, 0xc8,       /* 1: dec %rax */
        0x75, 0xfb,             /* jnz 1b */
        0x5d,                   /* pop %rbp */
        0xc3,                   /* ret */
    };
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memcpy(p, code, sizeof(code));
    if (mprotect(p, page, PROT_READ | PROT_EXEC) != 0) {
        munmap(p, page);
        return NULL;
    }
    jit_loop_fn fn;
    memcpy(&fn, &p, sizeof(fn));
    return fn;
}

__attribute__((noinline, noclone)) static void jit_caller(jit_loop_fn fn, uint64_t iters) {
    fn(iters);
    __asm__ volatile("" ::: "memory");      /* no tail call: this frame stays under the JIT code */
}

static void test_code_without_unwind_info(void **state) {
    (void)state;
    jit_loop_fn fn = jit_loop_new();
    assert_non_null(fn);
    mst_sampler *s = mst_sampler_new(1000, 32, 1 << 12);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    jit_caller(fn, 300000000ull);
    mst_sampler_stop(s);
    mst_sampler_stats st = mst_sampler_stats_get(s, 0);
    folded_probe fp = probe_run(s, 0, "jit_caller");
    printf("# JIT code: %lld samples, %lld walked with unw_step, %lld with the caller: %s\n", (long long)st.samples,
           (long long)st.step_walked, (long long)fp.with, fp.first);
    assert_true(st.samples >= 20);
    /* nearly every sample lands in the loop: its caller and the test above it are found */
    assert_true(fp.with >= 0.8 * (double)st.samples);
    assert_true(has_frame(fp.first, "test_code_without_unwind_info"));
    assert_true(st.step_walked >= 0.8 * (double)st.samples);
    mst_sampler_free(s);
    munmap((void *)(uintptr_t)fn, (size_t)sysconf(_SC_PAGESIZE));
}
#endif

static void test_ring_overflow_counted(void **state) {
    mst_sampler *s = mst_sampler_new(2000, 16, 4);
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    spin_leaf(100 * MS);
    mst_sampler_stop(s);
    mst_sampler_stats st = mst_sampler_stats_get(s, 0);
    printf("# overflow: kept %lld, lost %lld\n", (long long)st.samples, (long long)st.lost);
    assert_int_equal(st.samples, 4);
    assert_true(st.lost >= 20);                                 /* ~200 expirations */
    assert_int_equal(mst_sampler_lost(s), st.lost);
    /* the ring drains at stop: the next window has room again */
    assert_int_equal(mst_sampler_start(s), 0);
    spin_leaf(20 * MS);
    mst_sampler_stop(s);
    assert_int_equal(mst_sampler_count(s, 0), 8);
    mst_sampler_free(s);
}

static void test_drain_while_running(void **state) {
    mst_sampler *s = mst_sampler_new(1000, 32, 64);             /* 64 ms of samples per ring */
    assert_int_equal(mst_sampler_add_thread(s), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    uint64_t t0 = now_ns();
    for (int i = 0; i < 15; i++) {
        spin_leaf(20 * MS);
        assert_int_equal(mst_sampler_drain(s), 0);
        assert_true(mst_sampler_count(s, 0) > 0);              /* readable while running */
    }
    double expect = (double)(now_ns() - t0) * 1e-9 * 1000;
    assert_int_equal(mst_sampler_foreach_folded(s, probe, &(folded_probe){0}), -1);
    mst_sampler_stop(s);
    mst_sampler_stats st = mst_sampler_stats_get(s, 0);
    printf("# drained: %lld samples + %lld overruns (expected %.0f), %lld lost\n", (long long)st.samples,
           (long long)st.overruns, expect, (long long)st.lost);
    assert_int_equal(st.lost, 0);
    assert_true(st.samples + st.overruns >= 0.8 * expect);
    assert_true(probe_run(s, 0, "spin_leaf").with >= 0.9 * (double)st.samples);
    mst_sampler_free(s);
}

static void test_stray_signal_before_ring(void **state) {
    mst_sampler *s = mst_sampler_new(1000, 16, 64);
    assert_int_equal(mst_sampler_start(s), 0);                 /* running, this thread has no ring */
    assert_int_equal(pthread_kill(pthread_self(), SIGPROF), 0);
    assert_int_equal(mst_sampler_add_thread(s), 0);             /* armed at once while running */
    assert_int_equal(pthread_kill(pthread_self(), SIGPROF), 0); /* not the timer: ignored too */
    spin_leaf(30 * MS);
    mst_sampler_stop(s);
    assert_int_equal(mst_sampler_stray(s), 2);
    assert_true(mst_sampler_count(s, 0) > 0);
    mst_sampler_free(s);
}

/* ---- real eager workloads ---- */

static size_t op_table_kernels(const void **out, size_t cap) { return mst_op_kernel_addrs(out, cap); }

/* The instrumented split of the calling thread's op time: dispatch-exclusive / outermost dispatch. */
typedef struct {
    uint32_t tid;
    int disp_depth, kern_depth;
    uint64_t disp_t0, kern_t0, disp_ns, kern_ns;
} range_sum;

static void sum_ranges(void *user, uint32_t tid, const mst_prof_event *ev) {
    range_sum *r = user;
    if (tid != r->tid || (ev->kind != MST_EV_BEGIN && ev->kind != MST_EV_END)) return;
    int *depth = ev->cat == MST_CAT_DISPATCH ? &r->disp_depth : ev->cat == MST_CAT_KERNEL ? &r->kern_depth : NULL;
    if (!depth) return;
    uint64_t *t0 = ev->cat == MST_CAT_DISPATCH ? &r->disp_t0 : &r->kern_t0;
    uint64_t *sum = ev->cat == MST_CAT_DISPATCH ? &r->disp_ns : &r->kern_ns;
    if (ev->kind == MST_EV_BEGIN && (*depth)++ == 0) *t0 = ev->t_ns;
    if (ev->kind == MST_EV_END && --(*depth) == 0) *sum += ev->t_ns - *t0;
}

typedef enum { WORK_TINY, WORK_MATMUL } workload;

/* Run the workload for ns under the sampler (and the event profiler when `instrument`); returns
 * the calling thread's stats. The instrumented dispatch share is printed, never asserted: how
 * far the two measurements agree is a benchmark (docs/sampler.md), not a correctness property. */
static mst_sampler_stats run_workload(workload w, uint64_t ns, bool instrument, mst_sampler *s) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = w == WORK_TINY ? 1 : 0});
    /* the builtin kernels: the matmul case looks for their frame (matmul_f32) on the stack */
    mst_ctx_set_kernels(ctx, MST_KERNELS_BUILTIN);
    assert_non_null(ctx);
    int64_t n = w == WORK_TINY ? 8 : 512;
    mst_tensor *a = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){n, n}, 0, 1);
    mst_tensor *b = mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){n, n}, 0, 1);
    assert_non_null(a);
    assert_non_null(b);
    const void *kernels[2 * MST_OP_COUNT * MST_DTYPE_COUNT];
    size_t n_kernels = op_table_kernels(kernels, sizeof(kernels) / sizeof(kernels[0]));
    assert_int_equal(mst_sampler_set_kernel_addrs(s, kernels, n_kernels), 0);
    assert_int_equal(mst_sampler_add_thread(s), 0);

    mst_profiler *p = mst_profiler_new();                      /* level OPS: dispatch and kernel ranges */
    if (instrument) assert_int_equal(mst_profiler_start(p), 0);
    assert_int_equal(mst_sampler_start(s), 0);
    int64_t ops = 0;
    uint64_t t0 = now_ns(), t;
    while ((t = now_ns()) - t0 < ns) {
        mst_pool_push(ctx);
        if (w == WORK_TINY)
            for (int i = 0; i < 100; i++, ops += 2) assert_non_null(mst_relu(ctx, mst_add(ctx, a, b)));
        else
            assert_non_null(mst_matmul(ctx, a, b)), ops++;
        mst_pool_pop(ctx);
    }
    mst_sampler_stop(s);
    mst_profiler_stop(p);

    range_sum r = {.tid = gettid_u32()};
    mst_profiler_foreach(p, sum_ranges, &r);
    mst_sampler_stats st = mst_sampler_stats_get(s, gettid_u32());
    printf("# %s%s: %.0f ns/op; samples %lld = outside %lld + dispatch %lld + kernel %lld + profiler %lld "
           "(%lld truncated, %lld lost); dispatch share sampled %.3f",
           w == WORK_TINY ? "add+relu (8, 8)" : "matmul (512, 512)", instrument ? ", instrumented" : "",
           (double)(t - t0) / (double)ops, (long long)st.samples, (long long)st.outside, (long long)st.dispatch,
           (long long)st.kernel, (long long)st.profiler, (long long)st.truncated, (long long)st.lost,
           mst_sampler_dispatch_share(s, gettid_u32()));
    if (instrument) printf(", instrumented %.3f", r.disp_ns ? (double)(r.disp_ns - r.kern_ns) / (double)r.disp_ns : -1);
    printf("\n");
    assert_int_equal(st.lost, 0);
    assert_true(st.samples >= 0.3 * (double)ns * 1e-9 * 1000);
    /* the loop is almost all ops (or the recorder, when instrumented) */
    assert_true(st.dispatch + st.kernel + st.profiler >= 0.5 * (double)st.samples);
    assert_int_equal(st.profiler > 0, instrument);
    mst_profiler_free(p);
    mst_ctx_free(ctx);
    return st;
}

static void test_dispatch_share_tiny_ops(void **state) {
    for (int instrument = 0; instrument < 2; instrument++) {
        mst_sampler *s = mst_sampler_new(1000, 64, 1 << 14);
        run_workload(WORK_TINY, 300 * MS, instrument, s);
        /* 8-element kernels take a few ns; checks, inference, allocation and the tape far more
         * (0.75-0.9 optimized; 0.45-0.65 under AddressSanitizer, which checks every access of
         * the kernels' loops and broadcasting setup) */
#ifdef __SANITIZE_ADDRESS__
        assert_true(mst_sampler_dispatch_share(s, gettid_u32()) > 0.3);
#else
        assert_true(mst_sampler_dispatch_share(s, gettid_u32()) > 0.5);
#endif
        folded_probe fp = probe_run(s, gettid_u32(), "mst_dispatch");
        assert_true(fp.with > 0);
        mst_sampler_free(s);
    }
}

static void test_dispatch_share_matmul(void **state) {
    mst_sampler *s = mst_sampler_new(1000, 64, 1 << 14);
    mst_sampler_stats st = run_workload(WORK_MATMUL, 300 * MS, false, s);
    double share = mst_sampler_dispatch_share(s, gettid_u32());
    assert_true(share >= 0 && share < 0.1);
    assert_true(st.kernel > 0.8 * (double)st.samples);
    folded_probe fp = probe_run(s, gettid_u32(), "matmul_f32");
    printf("# e.g. %s\n", fp.first);
    assert_true(fp.with >= st.kernel / 2);                     /* the kernel frame is on the stack */
    mst_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_and_folded),         cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_stop_restores),           cmocka_unit_test(test_one_running_sampler),
        cmocka_unit_test(test_hold_counted_in_cost),
#if defined(__x86_64__)     /* the assembly that keeps data below its stack pointer */
        cmocka_unit_test(test_handler_off_the_stack), cmocka_unit_test(test_code_without_unwind_info),
#endif
        cmocka_unit_test(test_pause_keeps_the_countdown),
        cmocka_unit_test(test_ring_overflow_counted),   cmocka_unit_test(test_drain_while_running),
        cmocka_unit_test(test_stray_signal_before_ring),
        cmocka_unit_test(test_dispatch_share_tiny_ops), cmocka_unit_test(test_dispatch_share_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
