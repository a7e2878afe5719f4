/* bench_profiler.c — what profiling costs: training-step time with the profiler off and at
 * levels 0, 1, 2, and at level 1 with the stack sampler, on the mlp (batch 64) and the cnn
 * (batch 32), in one run. Recording goes to the real SQLite store, as `mstune profile` does.
 * Modes are interleaved over repeats so machine drift hits all of them alike; each figure is the
 * median over repeats of the median step of a block of steps.
 *
 *     build/bench_profiler [--quick] [--off-only]
 * The disabled path is compared with a build whose record sites are compiled out
 * (-DMSTUNE_PROFILING=OFF) by bench/profiler_overhead.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench/step.h"
#include "bench/timing.h"
#include "profiler/sampler.h"
#include "profiler/store.h"
#include "runtime/op.h"

typedef struct {
    const char *name;
    int level;          /* -1 = off */
    int sampler_hz;     /* 0 = no sampler */
} mode;

/* 29 Hz is `mstune profile`'s default (profile.sample_hz); 97 and 997 Hz earlier ones */
static const mode k_modes[] = {{"off", -1, 0},           {"level 0", 0, 0},
                               {"level 1", 1, 0},        {"level 2", 2, 0},
                               {"level 1 + sampler 29 Hz", 1, 29}, {"level 1 + sampler 97 Hz", 1, 97},
                               {"level 1 + sampler 997 Hz", 1, 997}};
enum { N_MODES = sizeof(k_modes) / sizeof(k_modes[0]) };

static double run_block(bench_step *b, const mode *m, int steps, int64_t *step_no) {
    char db[256], err[512];
    snprintf(db, sizeof(db), "/tmp/mstune-bench-profiler-%d.db", (int)getpid());
    mst_profiler *p = NULL;
    mst_store *st = NULL;
    mst_sampler *sm = NULL;
    if (m->level >= 0) {
        mst_prof_config pc = {(mst_prof_level)m->level, 0, 0, 0, 0};
        p = mst_profiler_new();
        mst_profiler_configure(p, &pc);
        if (!(st = mst_store_open(db, &pc, 5, err, sizeof(err)))) { fprintf(stderr, "bench: %s\n", err); exit(1); }
        mst_profiler_set_sink(p, mst_store_sink, st);
        if (m->sampler_hz) {
            static const void *addrs[MST_OP_COUNT * MST_DTYPE_COUNT * 2 + 8];
            size_t n = mst_op_kernel_addrs(addrs, sizeof(addrs) / sizeof(addrs[0]));
            sm = mst_sampler_new(m->sampler_hz, 64, 1 << 16);
            mst_sampler_set_kernel_addrs(sm, addrs, n);
            mst_sampler_add_thread(sm);
            mst_sampler_start(sm);
        }
        mst_profiler_start(p);
    }
    double *t = malloc(sizeof(double) * (size_t)steps);
    if (!t) abort();
    uint32_t loss = mst_prof_intern("loss");
    for (int k = 0; k < steps; k++) {
        int64_t s = (*step_no)++;
        if (p) mst_profiler_step(p, s);
        uint64_t t0 = mst_prof_now_ns();
        mst_prof_step_begin(s);
        bench_step_run(b);
        mst_prof_value(loss, 1.0);
        mst_prof_step_end(s);
        if (p) mst_prof_thread_flush();
        t[k] = (double)(mst_prof_now_ns() - t0) / 1e6;
    }
    if (p) {
        mst_profiler_stop(p);
        if (sm) { mst_sampler_stop(sm); mst_sampler_free(sm); }
        if (mst_store_close(st, err, sizeof(err)) != 0) { fprintf(stderr, "bench: %s\n", err); exit(1); }
        mst_profiler_free(p);
        unlink(db);
    }
    double med = bench_median(t, steps);
    free(t);
    return med;
}

static int g_modes = N_MODES;      /* --off-only: just the first mode */

static void bench_workload(const char *model, int batch, int steps, int repeats) {
    bench_step b;
    bench_step_init(&b, model, batch, 0);
    int64_t step_no = 0;
    for (int k = 0; k < 3; k++) bench_step_run(&b);
    double med[N_MODES][BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats; r++)
        for (int m = 0; m < g_modes; m++) med[m][r] = run_block(&b, &k_modes[m], steps, &step_no);
    double off = bench_median(med[0], repeats);
    printf("%s batch %d (%d steps x %d repeats):\n", model, batch, steps, repeats);
    printf("  %-26s %10s %10s\n", "mode", "ms/step", "vs off");
    for (int m = 0; m < g_modes; m++) {
        double v = bench_median(med[m], repeats);
        printf("  %-26s %10.4f %+9.2f%%\n", k_modes[m].name, v, 100 * (v / off - 1));
    }
    bench_step_free(&b);
}

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--off-only") == 0) g_modes = 1;
        else {
            fprintf(stderr, "usage: bench_profiler [--quick] [--off-only]\n");
            return 2;
        }
    }
    printf("mstune bench_profiler%s — step time with profiling off, at each level, and with the sampler\n\n",
           quick ? " (quick)" : "");
    bench_workload("mlp", 64, quick ? 100 : 400, quick ? 3 : 9);
    bench_workload("cnn", 32, quick ? 10 : 30, quick ? 3 : 7);
    return 0;
}
