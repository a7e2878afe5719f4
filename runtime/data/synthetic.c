/* synthetic.c — a seeded synthetic classification source of any shape.
 *
 * Class k has a prototype image with pixels uniform in [0.25, 0.75]; sample i of a split is its
 * class prototype plus N(0, 0.35^2) noise per pixel, clamped to [0, 1]. Everything is a pure
 * function of Philox counters, so no per-sample state is stored and any thread may generate any
 * sample:  prototype pixel  = Philox(key_proto, class, pixel / 4)
 *          label            = Philox(key_label, index, 0)
 *          noise            = Philox(key_noise, index, pixel / 4), Box-Muller on pairs
 * key_proto depends on the seed only (train and test share classes); the label and noise keys
 * also mix in the split, so splits never share samples. Trade-off: prototypes are cached as a
 * table when it fits in 64 MiB, and recomputed per sample otherwise (same values, slower), so a
 * huge shape costs time rather than memory.
 */
#include <math.h>
#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/data/source_impl.h"
#include "runtime/rng.h"

#define PROTO_TABLE_MAX_BYTES ((size_t)64 << 20)
#define PROTO_LO 0.25f
#define PROTO_SPAN 0.5f
#define NOISE_STD 0.35f

/* Domain tags so the three streams never share a key. */
#define TAG_PROTO 0x70726f746fULL   /* "proto" */
#define TAG_LABEL 0x6c6162656cULL   /* "label" */
#define TAG_NOISE 0x6e6f697365ULL   /* "noise" */

static uint64_t derive_key(uint64_t seed, uint64_t tag, uint64_t split) {
    return mst_hash64(seed ^ mst_hash64(tag ^ mst_hash64(split)));
}

/* Prototype pixels [p0, p1) of class k. */
static void proto_fill(uint64_t key, int k, int64_t p0, int64_t p1, float *out) {
    for (int64_t p = p0; p < p1;) {
        mst_philox_out r = mst_philox(key, (uint64_t)k, (uint64_t)p >> 2);
        for (int j = (int)(p & 3); j < 4 && p < p1; j++, p++)
            out[p - p0] = PROTO_LO + PROTO_SPAN * mst_u32_to_unit(r.v[j]);
    }
}

mst_source *mst_source_synthetic_new(int64_t n, int c, int h, int w, int n_classes, uint64_t seed, int split) {
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || n_classes <= 0) return NULL;
    if ((int64_t)c * h > INT32_MAX || (int64_t)c * h * w > INT32_MAX) return NULL;
    mst_source *src = calloc(1, sizeof(*src));
    if (!src) return NULL;
    src->kind = MST_SOURCE_SYNTHETIC;
    src->n = n;
    src->c = c;
    src->h = h;
    src->w = w;
    src->n_classes = n_classes;
    src->key_proto = derive_key(seed, TAG_PROTO, 0);
    src->key_label = derive_key(seed, TAG_LABEL, (uint64_t)(int64_t)split);
    src->key_noise = derive_key(seed, TAG_NOISE, (uint64_t)(int64_t)split);
    const int64_t numel = (int64_t)c * h * w;
    if ((uint64_t)n_classes * (uint64_t)numel * sizeof(float) <= PROTO_TABLE_MAX_BYTES) {
        src->protos = malloc((size_t)n_classes * (size_t)numel * sizeof(float));
        if (!src->protos) { free(src); return NULL; }
        for (int k = 0; k < n_classes; k++) proto_fill(src->key_proto, k, 0, numel, src->protos + (size_t)k * numel);
    }
    return src;
}

static inline float clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

void mst_source_synthetic_set_delay_us(mst_source *src, int us) {
    if (src->kind == MST_SOURCE_SYNTHETIC) src->delay_ns = (int64_t)us * 1000;
}

/* Busy work, not a sleep: the injected cost occupies the reading thread's core as real
 * decoding or augmentation would. */
static void spin_for(int64_t ns) {
    uint64_t end = mst_prof_now_ns() + (uint64_t)ns;
    while (mst_prof_now_ns() < end) {}
}

void mst_synthetic_get(const mst_source *src, int64_t index, float *x_out, int32_t *label_out) {
    if (src->delay_ns > 0 && x_out) spin_for(src->delay_ns);
    mst_philox_out lr = mst_philox(src->key_label, (uint64_t)index, 0);
    const int32_t label = (int32_t)(((uint64_t)lr.v[0] * (uint64_t)src->n_classes) >> 32);
    if (label_out) *label_out = label;
    if (!x_out) return;
    const int64_t numel = (int64_t)src->c * src->h * src->w;
    /* prototype first (from the table or regenerated in place), then noise on top */
    if (src->protos) {
        const float *proto = src->protos + (size_t)label * (size_t)numel;
        for (int64_t p = 0; p < numel; p++) x_out[p] = proto[p];
    } else {
        proto_fill(src->key_proto, label, 0, numel, x_out);
    }
    const float two_pi = 6.2831853071795864f;
    for (int64_t p = 0; p < numel; p += 4) {
        mst_philox_out r = mst_philox(src->key_noise, (uint64_t)index, (uint64_t)p >> 2);
        float nz[4];
        for (int j = 0; j < 4; j += 2) {
            /* u1 in (0, 1] so the log is finite */
            float u1 = (float)((r.v[j] >> 8) + 1) * (1.0f / 16777216.0f);
            float u2 = mst_u32_to_unit(r.v[j + 1]);
            float rad = sqrtf(-2.0f * logf(u1));
            nz[j] = rad * cosf(two_pi * u2);
            nz[j + 1] = rad * sinf(two_pi * u2);
        }
        for (int j = 0; j < 4 && p + j < numel; j++) x_out[p + j] = clamp01(x_out[p + j] + NOISE_STD * nz[j]);
    }
}
