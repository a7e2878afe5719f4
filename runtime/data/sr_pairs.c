/* sr_pairs.c — super-resolution pairs derived from an IDX image source: the input is the image
 * downsampled by an integer factor with a box filter (the mean of each factor x factor block,
 * as PIL's BOX and OpenCV's INTER_AREA at integer factors), the target is the image itself, both
 * in [0, 1]. Fashion-MNIST at factor 2 gives (1, 14, 14) -> (1, 28, 28).
 *
 * Trade-off: the low-resolution input is computed per read (a 784-pixel pass) instead of stored,
 * so the source keeps the u8 pixels only and any worker can read any sample; the pair is a pure
 * function of the stored image, hence identical for any worker count.
 */
#include <stdlib.h>

#include "runtime/data/source_impl.h"
#include "runtime/status.h"

mst_source *mst_source_sr_open(const char *dir, const char *split, int factor, char *err, size_t errn) {
    if (factor < 1 || factor > 8) {
        mst_errf(err, errn, "super-resolution: factor = %d, expected 1..8", factor);
        return NULL;
    }
    mst_source *s = mst_source_idx_open(dir, split, err, errn);
    if (!s) return NULL;
    if (s->h % factor != 0 || s->w % factor != 0) {
        mst_errf(err, errn, "%s: %dx%d images do not divide by the super-resolution factor %d", dir, s->h, s->w, factor);
        mst_source_free(s);
        return NULL;
    }
    s->kind = MST_SOURCE_SR_PAIRS;
    s->factor = factor;
    s->target_h = s->h;
    s->target_w = s->w;
    s->h /= factor;
    s->w /= factor;
    return s;
}

void mst_sr_get(const mst_source *src, int64_t index, float *x_out, float *target_out, int32_t *label_out) {
    const int f = src->factor, th = src->target_h, tw = src->target_w;
    const uint8_t *p = src->pixels + (size_t)index * (size_t)th * (size_t)tw;
    if (target_out)
        for (int i = 0; i < th * tw; i++) target_out[i] = (float)p[i] / 255.0f;
    if (x_out)
        for (int y = 0; y < src->h; y++)
            for (int x = 0; x < src->w; x++) {
                int sum = 0;        /* exact in int, then one rounding */
                for (int dy = 0; dy < f; dy++)
                    for (int dx = 0; dx < f; dx++) sum += p[(y * f + dy) * tw + x * f + dx];
                x_out[y * src->w + x] = (float)sum / (255.0f * (float)(f * f));
            }
    if (label_out) *label_out = src->labels[index];
}
