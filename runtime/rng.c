/* rng.c — Philox4x32-10 and the streams built on it. */
#include "runtime/rng.h"

#include <math.h>

mst_philox_out mst_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    mst_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

uint64_t mst_rng_u64(mst_rng *r) {
    mst_philox_out o = mst_philox(r->key, r->stream, r->counter++);
    return ((uint64_t)o.v[0] << 32) | o.v[1];
}

double mst_rng_uniform(mst_rng *r) { return mst_u64_to_unit(mst_rng_u64(r)); }

double mst_rng_normal(mst_rng *r) {
    double u1 = mst_rng_uniform(r), u2 = mst_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t mst_hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
