/* fpu.c — flush-to-zero / denormals-are-zero per thread (MXCSR on x86, FPCR on AArch64). */
#include "runtime/fpu.h"

#include "runtime/context.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
enum { MXCSR_DAZ = 1u << 6, MXCSR_FTZ = 1u << 15 };

bool mst_fpu_set_flush(bool flush) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(flush ? csr | MXCSR_DAZ | MXCSR_FTZ : csr & ~(unsigned)(MXCSR_DAZ | MXCSR_FTZ));
    return true;
}

bool mst_fpu_flushing(void) { return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ); }

#elif defined(__aarch64__)
#include <stdint.h>
enum { FPCR_FZ = 1u << 24 };

static uint64_t fpcr_get(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}

bool mst_fpu_set_flush(bool flush) {
    uint64_t v = fpcr_get();
    v = flush ? v | FPCR_FZ : v & ~(uint64_t)FPCR_FZ;
    __asm__ volatile("msr fpcr, %0" : : "r"(v));
    return true;
}

bool mst_fpu_flushing(void) { return (fpcr_get() & FPCR_FZ) != 0; }

#else
bool mst_fpu_set_flush(bool flush) { return !flush; }
bool mst_fpu_flushing(void) { return false; }
#endif

void mst_fpu_apply(const mst_ctx *ctx) { mst_fpu_set_flush(ctx && ctx->flush_denormals); }
