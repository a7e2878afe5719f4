/* rng.h — counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * A value is a pure function of (key, counter): the same seed gives the same numbers whatever
 * thread or order asks for them. Dropout masks, parameter init and the data pipeline's
 * per-sample randomness (seed, epoch, index) all derive from it.
 */
#ifndef MST_RUNTIME_RNG_H
#define MST_RUNTIME_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } mst_philox_out;

mst_philox_out mst_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

/* Sixteen consecutive counters at once: out[w][j] = mst_philox(key, 0, counter_lo + j).v[w] for
 * j < 16 (AVX-512F where the CPU has it and counter_lo + 15 stays below 2^32, else one at a time;
 * the same bits either way). Dropout's mask (runtime/ops/dropout.c). */
void mst_philox16(uint64_t key, uint64_t counter_lo, uint32_t out[4][16]);

/* Uniform float in [0, 1) from 24 random bits. */
static inline float mst_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
/* Uniform double in [0, 1) from 53 random bits. */
static inline double mst_u64_to_unit(uint64_t x) { return (double)(x >> 11) * (1.0 / 9007199254740992.0); }

/* A stateful stream over Philox: (key, stream) fixed, the counter advances. */
typedef struct { uint64_t key, stream, counter; } mst_rng;

static inline mst_rng mst_rng_make(uint64_t seed, uint64_t stream) { mst_rng r = {seed, stream, 0}; return r; }
uint64_t mst_rng_u64(mst_rng *r);
double   mst_rng_uniform(mst_rng *r);           /* [0, 1) */
double   mst_rng_normal(mst_rng *r);            /* N(0, 1), Box-Muller */

/* Mix a 64-bit value into a well-spread key (splitmix64 finalizer). */
uint64_t mst_hash64(uint64_t x);

#endif
