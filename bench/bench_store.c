/* bench_store.c — what the profile store costs per training step, without a training step around
 * it: a synthetic record stream shaped like one thread's steps (step markers, a data wait, the loss
 * and lr values, a loader counter, and OPS ops of four records each: dispatch and kernel ranges)
 * is handed to mst_store_sink one step at a time, as the trainer does, and the process's CPU time
 * per step (the recording thread and the store's writer together; the close's finalisation not) is
 * reported. The stream without ops is what a level-0 step stores; the default is the mlp's 25 ops.
 * The two alternate over repeats, and each once more without the loader's queue-depth counter (a
 * loader without workers records none); each figure is the median over repeats.
 *
 * With a fourth argument, the totals-only stream is also stored with that many steps a commit at
 * most (store.h's commit_steps), alternated with the default.
 *
 *     build/bench_store [steps=4000] [repeats=5] [ops=25] [commit_steps]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/timing.h"
#include "profiler/events.h"
#include "profiler/store.h"

static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static mst_prof_event ev(uint64_t *t, mst_prof_kind kind, mst_prof_cat cat, uint32_t name, int op, int64_t a, int64_t b) {
    *t += 1000;     /* 1 us apart: the ranges have length, the attribution has work to do */
    return (mst_prof_event){.t_ns = *t, .a = a, .b = b, .name = name, .op = (int16_t)op, .kind = (uint8_t)kind, .cat = (uint8_t)cat};
}

enum { N_FIXED = 4, N_OP_NAMES = 8 };

/* One step's records into buf; returns how many. names: N_FIXED fixed names, then N_OP_NAMES op
 * names, then N_OP_NAMES signatures. */
static size_t make_step(mst_prof_event *buf, uint64_t *t, int64_t step, int ops, bool counter, const uint32_t *names) {
    size_t n = 0;
    buf[n++] = ev(t, MST_EV_STEP_BEGIN, MST_CAT_OTHER, 0, -1, step, 0);
    buf[n++] = ev(t, MST_EV_BEGIN, MST_CAT_DATA, names[0], -1, 0, 0);
    buf[n++] = ev(t, MST_EV_END, MST_CAT_DATA, names[0], -1, 0, 0);
    if (counter) buf[n++] = ev(t, MST_EV_COUNTER, MST_CAT_OTHER, names[1], -1, 3, 0);
    for (int i = 0; i < ops; i++) {
        const int k = i % N_OP_NAMES;
        const uint32_t op_name = names[N_FIXED + k], sig = names[N_FIXED + N_OP_NAMES + k];
        buf[n++] = ev(t, MST_EV_BEGIN, MST_CAT_DISPATCH, op_name, k, 0, 0);
        buf[n++] = ev(t, MST_EV_BEGIN, MST_CAT_KERNEL, op_name, k, sig, i + 1);
        buf[n++] = ev(t, MST_EV_END, MST_CAT_KERNEL, op_name, k, 1000000, 40000);
        buf[n++] = ev(t, MST_EV_END, MST_CAT_DISPATCH, op_name, k, 0, 0);
    }
    const double loss = 0.5, lr = 0.05;
    int64_t loss_bits, lr_bits;
    memcpy(&loss_bits, &loss, sizeof(loss_bits));
    memcpy(&lr_bits, &lr, sizeof(lr_bits));
    buf[n++] = ev(t, MST_EV_VALUE, MST_CAT_OTHER, names[2], -1, loss_bits, 0);
    buf[n++] = ev(t, MST_EV_VALUE, MST_CAT_OTHER, names[3], -1, lr_bits, 0);
    buf[n++] = ev(t, MST_EV_STEP_END, MST_CAT_OTHER, 0, -1, step, 0);
    return n;
}

/* CPU ns per step of storing `steps` steps of `ops` ops each, with the loader's queue-depth counter
 * or without it (a loader without workers records none); commit_steps 0 = the store's default. */
static double run(int steps, int ops, bool counter, const uint32_t *names, int commit_steps) {
    char db[256], err[512];
    snprintf(db, sizeof(db), "/tmp/mstune-bench-store-%d.db", (int)getpid());
    mst_prof_config cfg = {.level = ops ? MST_PROF_LEVEL_OPS : MST_PROF_LEVEL_STEPS};
    const mst_store_options opt = {.commit_steps = commit_steps};
    mst_store *st = mst_store_open_opts(db, &cfg, 0, &opt, err, sizeof(err));
    if (!st) {
        fprintf(stderr, "bench_store: %s\n", err);
        exit(1);
    }
    mst_prof_event *buf = malloc(sizeof(*buf) * (size_t)(8 + 4 * ops));
    if (!buf) abort();
    uint64_t t = 1000000;
    mst_prof_event thread_name = {.t_ns = t, .name = mst_prof_intern("main"), .op = -1, .kind = MST_EV_THREAD_NAME};
    mst_store_sink(st, 1, &thread_name, 1);
    /* In a run the recording thread writes the queue at a hand-off once its oldest item is 200 ms
     * old (the store's stale rule), every few hundred steps. Blocks of STEPS_PER_DRAIN steps and a
     * pause past 200 ms keep it that way here: the queue never fills, so the store's writer thread
     * never races the recording thread for it. The pause is off the CPU, so it is not counted. */
    enum { STEPS_PER_DRAIN = 400 };
    const struct timespec pause = {0, 210000000};
    const double c0 = cpu_ns();
    for (int s = 0; s < steps; s++) {
        mst_store_sink(st, 1, buf, make_step(buf, &t, s, ops, counter, names));
        if ((s + 1) % STEPS_PER_DRAIN == 0 || s + 1 == steps) {
            nanosleep(&pause, NULL);
            mst_store_sink(st, 1, buf, 0);      /* the hand-off that finds the queue stale */
        }
    }
    const double c1 = cpu_ns();
    if (mst_store_close(st, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_store: %s\n", err);
        exit(1);
    }
    free(buf);
    unlink(db);
    return (c1 - c0) / steps;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 4000;
    const int repeats = argc > 2 ? atoi(argv[2]) : 5;
    const int ops = argc > 3 ? atoi(argv[3]) : 25, commit_steps = argc > 4 ? atoi(argv[4]) : 0;
    if (steps <= 0 || repeats <= 0 || repeats > BENCH_MAX_REPEATS || ops <= 0 || ops > 1000 || commit_steps < 0) {
        fprintf(stderr, "usage: bench_store [steps > 0] [repeats 1..%d] [ops 1..1000] [commit_steps >= 0]\n", BENCH_MAX_REPEATS);
        return 2;
    }
    uint32_t names[N_FIXED + 2 * N_OP_NAMES];
    const char *fixed[N_FIXED] = {"data.wait", "loader.queue_depth", "loss", "lr"};
    for (int i = 0; i < N_FIXED; i++) names[i] = mst_prof_intern(fixed[i]);
    for (int i = 0; i < N_OP_NAMES; i++) {
        char nm[48];
        snprintf(nm, sizeof(nm), "op%d", i);
        names[N_FIXED + i] = mst_prof_intern(nm);
        snprintf(nm, sizeof(nm), "[[64,%d]]|f32", 100 + i);
        names[N_FIXED + N_OP_NAMES + i] = mst_prof_intern(nm);
    }
    double totals[BENCH_MAX_REPEATS] = {0}, with_ops[BENCH_MAX_REPEATS] = {0}, totals_commit[BENCH_MAX_REPEATS] = {0};
    double no_counter[BENCH_MAX_REPEATS] = {0}, ops_no_counter[BENCH_MAX_REPEATS] = {0};
    run(steps / 10 + 1, ops, true, names, 0);     /* warm-up: the page cache, SQLite's first pages */
    for (int r = 0; r < repeats; r++) {
        totals[r] = run(steps, 0, true, names, 0);
        with_ops[r] = run(steps, ops, true, names, 0);
        no_counter[r] = run(steps, 0, false, names, 0);
        ops_no_counter[r] = run(steps, ops, false, names, 0);
        if (commit_steps) totals_commit[r] = run(steps, 0, true, names, commit_steps);
    }
    const double m0 = bench_median(totals, repeats), m1 = bench_median(with_ops, repeats);
    printf("bench_store: %d steps x %d repeats; CPU time per step (recording thread + store writer), median\n", steps, repeats);
    printf("  %-30s %8.2f us\n", "totals only (level 0)", m0 / 1e3);
    printf("  %-30s %8.2f us   (%d ops: %.1f ns a record)\n", "with op ranges (level 1)", m1 / 1e3, ops, (m1 - m0) / (4.0 * ops));
    printf("  %-30s %8.2f us\n", "totals, no loader counter", bench_median(no_counter, repeats) / 1e3);
    printf("  %-30s %8.2f us\n", "op ranges, no loader counter", bench_median(ops_no_counter, repeats) / 1e3);
    if (commit_steps) {
        char label[64];
        snprintf(label, sizeof(label), "totals, <= %d steps a commit", commit_steps);
        printf("  %-30s %8.2f us\n", label, bench_median(totals_commit, repeats) / 1e3);
    }
    return 0;
}
