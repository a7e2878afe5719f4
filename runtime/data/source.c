/* source.c — the accessors every source shares, and the per-kind dispatch of mst_source_get.
 *
 * Sources are immutable after construction, so nothing here locks: the loader's workers call
 * mst_source_get concurrently on the same source. IDX pixels are stored as u8 and widened to
 * float on the way out (p / 255 exactly, so 255 maps to 1.0f, not 0.99999994f). Token sources
 * copy their i32 ids into the caller's 4-byte slots (mst_source_sample_type says which).
 */
#include "runtime/data/source_impl.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/cpu_features.h"
#include "runtime/status.h"

_Static_assert(sizeof(int32_t) == sizeof(float), "token ids share the loader's float slots");

int64_t mst_source_len(const mst_source *src) { return src->n; }

int mst_source_shape(const mst_source *src, int64_t shape[3]) {
    shape[0] = src->c;
    shape[1] = src->h;
    shape[2] = src->w;
    return mst_source_rank(src);
}

int mst_source_rank(const mst_source *src) { return src->rank ? src->rank : 3; }

mst_sample_type mst_source_sample_type(const mst_source *src) {
    return src->kind == MST_SOURCE_TOKENS ? MST_SAMPLE_I32 : MST_SAMPLE_F32;
}

int mst_source_vocab(const mst_source *src) { return src->kind == MST_SOURCE_TOKENS ? src->vocab : 0; }

int64_t mst_source_target_numel(const mst_source *src) {
    return src->kind == MST_SOURCE_SR_PAIRS ? (int64_t)src->target_h * src->target_w : 0;
}

void mst_source_target_shape(const mst_source *src, int64_t shape[3]) {
    shape[0] = src->kind == MST_SOURCE_SR_PAIRS ? 1 : 0;
    shape[1] = src->kind == MST_SOURCE_SR_PAIRS ? src->target_h : 0;
    shape[2] = src->kind == MST_SOURCE_SR_PAIRS ? src->target_w : 0;
}

void mst_source_get_target(const mst_source *src, int64_t index, float *target_out) {
    MST_ASSERT(index >= 0 && index < src->n && src->kind == MST_SOURCE_SR_PAIRS);
    mst_sr_get(src, index, NULL, target_out, NULL);
}

void mst_source_text_stats(const mst_source *src, int64_t *truncated, int64_t *dropped_shared) {
    *truncated = src->kind == MST_SOURCE_TOKENS ? src->truncated : 0;
    *dropped_shared = src->kind == MST_SOURCE_TOKENS ? src->dropped_shared : 0;
}

int mst_source_classes(const mst_source *src) { return src->n_classes; }

int64_t mst_source_sample_numel(const mst_source *src) { return (int64_t)src->c * src->h * src->w; }

/* p / 255 per pixel. The division stays (p * (1 / 255.0f) rounds differently for some p), so the
 * loop is division-bound: compiled for AVX2 as well (8 lanes against the generic build's 4), with
 * the same bits, since each quotient is correctly rounded whatever the vector width. 16 shuffled
 * images (the mlp at batch 16): ~10 us generic, ~7 with AVX2, standalone. */
static inline __attribute__((always_inline)) void unit_from_u8_body(const uint8_t *p, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)p[i] / 255.0f;
}
static void unit_from_u8_portable(const uint8_t *p, float *x, size_t n) { unit_from_u8_body(p, x, n); }
__attribute__((target("avx2"))) static void unit_from_u8_avx2(const uint8_t *p, float *x, size_t n) {
    unit_from_u8_body(p, x, n);
}

static void idx_get(const mst_source *src, int64_t index, float *x_out, int32_t *label_out) {
    const size_t numel = (size_t)src->h * (size_t)src->w;
    const uint8_t *p = src->pixels + (size_t)index * numel;
    if (x_out) (mst_cpu_has(MST_CPU_AVX2) ? unit_from_u8_avx2 : unit_from_u8_portable)(p, x_out, numel);
    if (label_out) *label_out = src->labels[index];
}

void mst_source_prefetch(const mst_source *src, int64_t index) {
    if (src->kind != MST_SOURCE_IDX || index < 0 || index >= src->n) return;
    const size_t numel = (size_t)src->h * (size_t)src->w;
    const uint8_t *p = src->pixels + (size_t)index * numel;
    for (size_t off = 0; off < numel; off += 64) __builtin_prefetch(p + off);
    __builtin_prefetch(p + numel - 1);
}

void mst_source_get(const mst_source *src, int64_t index, float *x_out, int32_t *label_out) {
    MST_ASSERT(index >= 0 && index < src->n);
    switch (src->kind) {
    case MST_SOURCE_IDX: idx_get(src, index, x_out, label_out); return;
    case MST_SOURCE_SYNTHETIC: mst_synthetic_get(src, index, x_out, label_out); return;
    case MST_SOURCE_SR_PAIRS: mst_sr_get(src, index, x_out, NULL, label_out); return;
    case MST_SOURCE_TOKENS:
        if (x_out) memcpy(x_out, src->tokens + index * src->w, (size_t)src->w * sizeof(int32_t));
        if (label_out) *label_out = src->labels[index];
        return;
    }
    MST_ASSERT(!"unknown source kind");
}

void mst_source_free(mst_source *src) {
    if (!src) return;
    free(src->pixels);
    free(src->labels);
    free(src->protos);
    free(src->tokens);
    free(src);
}
