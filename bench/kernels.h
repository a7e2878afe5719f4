/* kernels.h — GEMM-bound kernel throughput (linear, matmul, conv2d and its gradient ops) next
 * to the raw OpenBLAS sgemm rate of the GEMM shapes each one issues, measured in the same run.
 *
 *     bench_kernels(stdout, 0);     // full: 7 timed repeats per figure after warm-up
 *     bench_kernels(stdout, 1);     // quick: 3 repeats
 */
#ifndef MST_BENCH_KERNELS_H
#define MST_BENCH_KERNELS_H

#include <stdio.h>

/* Prints one table: per op, the GEMM shape(s) it issues, the raw sgemm GFLOP/s on them, the op's
 * own time and GFLOP/s through the eager dispatcher (f32), and the op/sgemm ratio. */
void bench_kernels(FILE *out, int quick);

#endif
