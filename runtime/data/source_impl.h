/* source_impl.h — the layout of mst_source, shared by the files that build sources (idx.c,
 * synthetic.c, wordlist.c) and the accessors in source.c. Not part of the public API.
 *
 * One struct with a kind tag rather than a table of function pointers: there are two kinds, both
 * read-only after construction, and a switch keeps mst_source_get inlinable per kind.
 */
#ifndef MST_RUNTIME_DATA_SOURCE_IMPL_H
#define MST_RUNTIME_DATA_SOURCE_IMPL_H

#include <stdint.h>

#include "runtime/data/source.h"

typedef enum { MST_SOURCE_IDX, MST_SOURCE_SYNTHETIC, MST_SOURCE_TOKENS, MST_SOURCE_SR_PAIRS } mst_source_kind;

struct mst_source {
    mst_source_kind kind;
    int64_t n;                  /* samples */
    int c, h, w;                /* sample shape */
    int n_classes;
    int rank;                   /* of a sample: 3 (C, H, W) for images, 1 (w) for token sequences; 0 counts as 3 */

    /* IDX */
    uint8_t *pixels;            /* (n, h, w), c == 1 */
    uint8_t *labels;            /* (n) */

    /* synthetic: keys derived from (seed, split), see synthetic.c */
    uint64_t key_proto, key_label, key_noise;
    float *protos;              /* (n_classes, c*h*w), or NULL when computed per sample */
    int64_t delay_ns;           /* testing knob: busy work per sample (mst_source_synthetic_set_delay_us) */

    /* super-resolution pairs (sr_pairs.c): IDX pixels at (target_h, target_w), input (h, w) = target / factor */
    int factor, target_h, target_w;

    /* tokens (wordlist.c): (n, w) i32 ids, labels in `labels` */
    int32_t *tokens;
    int vocab;                  /* ids are < vocab */
    int64_t truncated;          /* samples cut to w tokens */
    int64_t dropped_shared;     /* distinct words dropped for appearing in several lists */
};

/* Super-resolution pair (sr_pairs.c), called by mst_source_get and mst_source_get_target. */
void mst_sr_get(const mst_source *src, int64_t index, float *x_out, float *target_out, int32_t *label_out);

/* Synthetic sample generation (synthetic.c), called by mst_source_get. */
void mst_synthetic_get(const mst_source *src, int64_t index, float *x_out, int32_t *label_out);

#endif
