/* subnormal_penalty.c — what mst_fpu_subnormal_penalty (runtime/fpu.h) reads, call after call, in
 * one process: the advisor's denormals rule weighs a count of subnormal values by it, so a reading
 * that moves between calls moves the rule between proposing FTZ/DAZ and not. Prints every reading,
 * their median, min and max, and the pass timed (MSTUNE_CPU_MASK hides wider ones). Builds
 * before the pass was named print "-" for it (the same program linked against an older
 * runtime: bench/builds_ab.sh style).
 *
 *     build/subnormal_penalty [--calls 15]
 *     MSTUNE_CPU_MASK=avx512f build/subnormal_penalty
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fpu.h"

__attribute__((weak)) const char *mst_fpu_subnormal_pass(void);

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int calls = 15;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--calls N]\n", argv[0]);
            return 2;
        }
    }
    if (calls < 1 || calls > 1000) {
        fprintf(stderr, "%s: --calls %d, expected 1 to 1000\n", argv[0], calls);
        return 2;
    }
    double *v = malloc(sizeof(double) * (size_t)calls);
    if (!v) return 1;
    printf("pass %s; readings:", mst_fpu_subnormal_pass ? mst_fpu_subnormal_pass() : "-");
    for (int i = 0; i < calls; i++) {
        v[i] = mst_fpu_subnormal_penalty();
        printf(" %.3f", v[i]);
    }
    qsort(v, (size_t)calls, sizeof(double), cmp);
    printf("\nmedian %.3f, min %.3f, max %.3f over %d calls\n", v[calls / 2], v[0], v[calls - 1], calls);
    free(v);
    return 0;
}
