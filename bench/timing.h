/* timing.h — what every bench program shares: a monotonic clock, repeat counts and the median. */
#ifndef MST_BENCH_TIMING_H
#define MST_BENCH_TIMING_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#define BENCH_MAX_REPEATS 64

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts a copy). */
static inline double bench_median(const double *v, int n) {
    if (n <= 0) return 0;
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) abort();
    for (int i = 0; i < n; i++) s[i] = v[i];
    qsort(s, (size_t)n, sizeof(double), bench_cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

#endif
