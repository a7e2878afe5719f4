/* fpu.h — the floating-point mode of a thread that computes: IEEE gradual underflow, or
 * flush-to-zero + denormals-are-zero (`runtime.flush_denormals`).
 *
 * Subnormal operands and results take a slow path on many CPUs (microcode assists), so a job
 * whose weights or gradients drift into the subnormal range (|x| < 2^-126 in f32) can run several
 * times slower at the same FLOPs. Flushing makes them zero: faster, and a change of the numerics,
 * which is why it is off by default (as in PyTorch, torch.set_flush_denormal) and the advisor
 * proposes it only as a trial verified against accuracy. The mode is per thread (x86: MXCSR FTZ
 * bit 15 and DAZ bit 6; AArch64: FPCR.FZ), so every thread that computes sets it at its start:
 * the main thread through mst_fpu_apply(ctx), pool and loader workers from the mode of the thread
 * that created them (read with mst_fpu_flushing when they are made).
 *
 *     mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.flush_denormals = true});   // applies it
 *     bool on = mst_fpu_flushing();                                                // true
 */
#ifndef MST_RUNTIME_FPU_H
#define MST_RUNTIME_FPU_H

#include <stdbool.h>

struct mst_ctx;

/* Set (flush) or clear flush-to-zero and denormals-are-zero on the calling thread. Returns false
 * where the architecture has no such mode (then nothing changes). */
bool mst_fpu_set_flush(bool flush);
/* Whether the calling thread flushes subnormals now. */
bool mst_fpu_flushing(void);
/* The context's setting (ctx->flush_denormals) on the calling thread. */
void mst_fpu_apply(const struct mst_ctx *ctx);
/* What subnormal arithmetic costs on this CPU, measured now on the calling thread with gradual
 * underflow (its mode restored after): the time of an update-like pass (two multiplies and an add
 * per element, the optimizer's loop on the path its updates take: AVX2 or the portable build; 16K
 * f32 values) whose products round into the subnormal range, over the same pass on normal values,
 * the median of 31 adjacent pairs. 1.5x (AVX2) and 3.3x (portable) on this project's Zen 5, tens
 * where microcode assists take over; NAN when it cannot be measured. About a tenth of a
 * millisecond. */
double mst_fpu_subnormal_penalty(void);
/* Which pass it times on this CPU (MSTUNE_CPU_MASK respected): "AVX2" or "portable" (the
 * compiler's code for the build's baseline). */
const char *mst_fpu_subnormal_pass(void);

#endif
