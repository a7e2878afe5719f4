/* sampler_delivery.c — what one stack-sampler delivery costs the wall clock of a parallel workload,
 * against what the sampler counts for it (its handler time plus the calibrated kernel round trip).
 *
 * The workload is a fork-join loop on the runtime's thread pool (every thread computes a chunk
 * and meets the others at the region's end, as a training step's kernels do), with the calling
 * thread sampled as `mstune profile` samples it. Blocks with the sampler at each rate and blocks
 * without it are interleaved; per rate it prints the median block time off and on, the wall cost
 * of one delivery (extra time / deliveries) and the counted cost of one delivery. The gap between
 * the two is what the profiler's overhead estimate does not see.
 *
 *     build/sampler_delivery [--blocks 15] [--region-us 200] [--threads 2] [--kib 256]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "profiler/sampler.h"
#include "runtime/threadpool.h"

typedef struct {
    float *buf;
    int64_t n;
    int reps;
} work;

/* A chunk of compute over a per-thread slice of an L2-sized buffer (caches matter: a delivery's
 * unwinding evicts some of it, as it evicts a kernel's tiles). */
static void chunk(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    work *w = arg;
    for (int r = 0; r < w->reps; r++)
        for (int64_t i = begin; i < end; i++) w->buf[i] = w->buf[i] * 0.999f + 0.001f * (float)r;
}

static void cpu_name(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    int blocks = 15, region_us = 200, threads = 2, kib = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--blocks") == 0) blocks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--region-us") == 0) region_us = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--kib") == 0) kib = atoi(argv[i + 1]);
    }
    if (blocks < 3 || blocks > 200 || region_us < 10 || threads < 1 || threads > 64 || kib < 4 || kib > 1 << 20) {
        fprintf(stderr, "usage: sampler_delivery [--blocks 3..200] [--region-us >=10] [--threads 1..64] [--kib 4..1048576]\n");
        return 2;
    }
    mst_threadpool *pool = mst_threadpool_new(threads);
    work w = {.n = (int64_t)kib * 256 * threads, .reps = 1};     /* kib KiB of floats per thread */
    w.buf = calloc((size_t)w.n, sizeof(float));
    if (!pool || !w.buf) return 1;
    /* size the region: reps so that one region takes about region_us */
    for (;;) {
        uint64_t t0 = mst_prof_now_ns();
        for (int k = 0; k < 20; k++) mst_threadpool_run(pool, w.n, 1024, chunk, &w);
        double us = (double)(mst_prof_now_ns() - t0) / 20e3;
        if (us >= region_us || w.reps > 1 << 20) break;
        w.reps = (int)fmax(w.reps + 1, w.reps * (double)region_us / fmax(us, 1.0));
    }
    const int rates[] = {0, 97, 997};
    enum { N_RATES = 3, REGIONS = 1000 };
    double t_ms[N_RATES][200], counted_ns[N_RATES][200], deliveries[N_RATES][200];
    for (int b = 0; b < blocks; b++)
        for (int r = 0; r < N_RATES; r++) {
            int rr = (r + b) % N_RATES;                 /* rotate the order within each round */
            mst_sampler *s = NULL;
            if (rates[rr]) {
                s = mst_sampler_new(rates[rr], 64, 1 << 16);
                if (!s || mst_sampler_add_thread(s) != 0 || mst_sampler_start(s) != 0) {
                    fprintf(stderr, "sampler_delivery: %s\n", s ? mst_sampler_error(s) : "out of memory");
                    return 1;
                }
            }
            uint64_t t0 = mst_prof_now_ns();
            for (int k = 0; k < REGIONS; k++) mst_threadpool_run(pool, w.n, 1024, chunk, &w);
            t_ms[rr][b] = (double)(mst_prof_now_ns() - t0) / 1e6;
            counted_ns[rr][b] = 0;
            deliveries[rr][b] = 0;
            if (s) {
                mst_sampler_stop(s);
                counted_ns[rr][b] = mst_sampler_cost_ns(s);
                deliveries[rr][b] = (double)mst_sampler_deliveries(s);
                mst_sampler_free(s);
            }
        }
    char cpu[256];
    cpu_name(cpu, sizeof(cpu));
    printf("cpu: %s; %d threads, %d KiB each, regions of ~%d us (%d reps), %d regions a block, %d blocks per rate, interleaved\n",
           cpu, threads, kib, region_us, w.reps, REGIONS, blocks);
    printf("\n| sampler | block ms (median) | deliveries a block | wall cost of one delivery (us) | counted per delivery (us) | counted / wall |\n");
    printf("|---|---|---|---|---|---|\n");
    double off = median(t_ms[0], blocks);
    printf("| off | %.2f | 0 | - | - | - |\n", off);
    for (int r = 1; r < N_RATES; r++) {
        double paired[200], cnt[200], dl[200];
        for (int b = 0; b < blocks; b++) {
            paired[b] = deliveries[r][b] > 0 ? 1e3 * (t_ms[r][b] - t_ms[0][b]) / deliveries[r][b] : 0;
            cnt[b] = deliveries[r][b] > 0 ? counted_ns[r][b] / deliveries[r][b] / 1e3 : 0;
            dl[b] = deliveries[r][b];
        }
        double on = median(t_ms[r], blocks), wall = median(paired, blocks), counted = median(cnt, blocks);
        printf("| %d Hz | %.2f | %.0f | %.1f | %.1f | %.2f |\n", rates[r], on, median(dl, blocks), wall, counted,
               wall > 0 ? counted / wall : NAN);
    }
    mst_threadpool_free(pool);
    free(w.buf);
    return 0;
}
