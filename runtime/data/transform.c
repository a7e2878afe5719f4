/* transform.c — crop, flip, affine warp and normalize for one (C, H, W) sample.
 *
 * All eight random numbers a sample can need come from two Philox calls keyed by the seed with
 * counter (epoch, index), drawn whatever the preset: LIGHT and HEAVY then agree on crop and flip,
 * and a sample's augmentation never depends on which thread or in what order it was produced.
 * The affine warp maps every output pixel back through the inverse matrix and samples bilinearly
 * (4 taps, zero outside); identity parameters reproduce the input exactly because the inverse map
 * then lands on integer coordinates with zero fractional weights.
 */
#include "runtime/data/transform.h"

#include <math.h>
#include <string.h>

#include "runtime/cpu_features.h"
#include "runtime/rng.h"
#include "runtime/status.h"

#define TAG_AUGMENT 0x6175676d656e74ULL     /* "augment" */

static const char *const k_augment_names[MST_AUGMENT_COUNT] = {
    [MST_AUGMENT_NONE] = "none", [MST_AUGMENT_LIGHT] = "light", [MST_AUGMENT_HEAVY] = "heavy",
};
_Static_assert(MST_AUGMENT_COUNT == 3, "a new augmentation preset needs a name in k_augment_names");

const char *mst_augment_name(mst_augment a) { return (unsigned)a < MST_AUGMENT_COUNT ? k_augment_names[a] : "?"; }

static float uniform(uint32_t bits, float lo, float hi) { return lo + (hi - lo) * mst_u32_to_unit(bits); }

void mst_transform_draw_for(const mst_transform_config *cfg, int64_t epoch, int64_t index, mst_transform_draw *out) {
    const uint64_t key = mst_hash64(cfg->seed ^ TAG_AUGMENT);
    mst_philox_out a = mst_philox(key, (uint64_t)epoch, (uint64_t)index << 1);
    mst_philox_out b = mst_philox(key, (uint64_t)epoch, (uint64_t)index << 1 | 1);
    mst_transform_draw d = {.crop_dx = MST_CROP_PAD, .crop_dy = MST_CROP_PAD, .flip = false,
                            .affine = {.rot_deg = 0.0f, .scale = 1.0f, .tx = 0.0f, .ty = 0.0f, .shear_deg = 0.0f}};
    if (cfg->augment >= MST_AUGMENT_LIGHT) {
        const uint64_t span = 2 * MST_CROP_PAD + 1;
        d.crop_dx = (int)(((uint64_t)a.v[0] * span) >> 32);
        d.crop_dy = (int)(((uint64_t)a.v[1] * span) >> 32);
        d.flip = mst_u32_to_unit(a.v[2]) < MST_FLIP_P;
    }
    if (cfg->augment >= MST_AUGMENT_HEAVY) {
        d.affine.rot_deg = uniform(a.v[3], -MST_AFFINE_ROT_DEG, MST_AFFINE_ROT_DEG);
        d.affine.scale = uniform(b.v[0], MST_AFFINE_SCALE_LO, MST_AFFINE_SCALE_HI);
        d.affine.tx = uniform(b.v[1], -MST_AFFINE_TRANSLATE, MST_AFFINE_TRANSLATE);
        d.affine.ty = uniform(b.v[2], -MST_AFFINE_TRANSLATE, MST_AFFINE_TRANSLATE);
        d.affine.shear_deg = uniform(b.v[3], -MST_AFFINE_SHEAR_DEG, MST_AFFINE_SHEAR_DEG);
    }
    *out = d;
}

void mst_transform_crop(const float *in, float *out, int c, int h, int w, int pad, int dx, int dy) {
    const int ox = dx - pad, oy = dy - pad;     /* input coordinate = output coordinate + offset */
    for (int ch = 0; ch < c; ch++) {
        const float *src = in + (size_t)ch * h * w;
        float *dst = out + (size_t)ch * h * w;
        for (int y = 0; y < h; y++) {
            float *row = dst + (size_t)y * w;
            const int sy = y + oy;
            if (sy < 0 || sy >= h) {
                memset(row, 0, (size_t)w * sizeof(float));
                continue;
            }
            /* columns x with 0 <= x + ox < w */
            const int x0 = ox < 0 ? -ox : 0, x1 = ox > 0 ? w - ox : w;
            for (int x = 0; x < x0 && x < w; x++) row[x] = 0.0f;
            if (x1 > x0) memcpy(row + x0, src + (size_t)sy * w + x0 + ox, (size_t)(x1 - x0) * sizeof(float));
            for (int x = x1 > x0 ? x1 : x0; x < w; x++) row[x] = 0.0f;
        }
    }
}

void mst_transform_flip(float *x, int c, int h, int w) {
    for (int r = 0; r < c * h; r++) {
        float *row = x + (size_t)r * w;
        for (int i = 0, j = w - 1; i < j; i++, j--) {
            float t = row[i];
            row[i] = row[j];
            row[j] = t;
        }
    }
}

void mst_transform_affine(const float *in, float *out, int c, int h, int w, const mst_affine_params *p) {
    /* forward A = scale * R(rot) * Shear_x(shear); sample the input at A^-1 (q - centre - t) + centre */
    const double deg = 3.14159265358979323846 / 180.0;
    const double cr = cos(p->rot_deg * deg), sr = sin(p->rot_deg * deg), tsh = tan(p->shear_deg * deg);
    const double a00 = p->scale * cr, a01 = p->scale * (cr * tsh - sr);
    const double a10 = p->scale * sr, a11 = p->scale * (sr * tsh + cr);
    const double det = a00 * a11 - a01 * a10;
    MST_ASSERT(det != 0.0 && isfinite(det));
    const float i00 = (float)(a11 / det), i01 = (float)(-a01 / det);
    const float i10 = (float)(-a10 / det), i11 = (float)(a00 / det);
    const float cx = 0.5f * (float)(w - 1), cy = 0.5f * (float)(h - 1);
    const size_t plane = (size_t)h * w;
    for (int y = 0; y < h; y++) {
        const float fy = (float)y - cy - p->ty;
        for (int x = 0; x < w; x++) {
            const float fx = (float)x - cx - p->tx;
            const float sx = i00 * fx + i01 * fy + cx;
            const float sy = i10 * fx + i11 * fy + cy;
            const size_t o = (size_t)y * w + x;
            /* outside by a whole pixel or more: no tap contributes */
            if (!(sx > -1.0f && sx < (float)w && sy > -1.0f && sy < (float)h)) {
                for (int ch = 0; ch < c; ch++) out[ch * plane + o] = 0.0f;
                continue;
            }
            const float x0f = floorf(sx), y0f = floorf(sy);
            const int x0 = (int)x0f, y0 = (int)y0f;
            const float wx = sx - x0f, wy = sy - y0f;
            const float w00 = (1.0f - wx) * (1.0f - wy), w01 = wx * (1.0f - wy);
            const float w10 = (1.0f - wx) * wy, w11 = wx * wy;
            const bool in_x0 = x0 >= 0, in_x1 = x0 + 1 < w, in_y0 = y0 >= 0, in_y1 = y0 + 1 < h;
            for (int ch = 0; ch < c; ch++) {
                const float *src = in + ch * plane;
                float v = 0.0f;
                if (in_y0) {
                    const float *row = src + (size_t)y0 * w;
                    if (in_x0) v += w00 * row[x0];
                    if (in_x1) v += w01 * row[x0 + 1];
                }
                if (in_y1) {
                    const float *row = src + (size_t)(y0 + 1) * w;
                    if (in_x0) v += w10 * row[x0];
                    if (in_x1) v += w11 * row[x0 + 1];
                }
                out[ch * plane + o] = v;
            }
        }
    }
}

/* A subtraction and a division per element, compiled for AVX2 as well (8 lanes of vdivps against
 * the generic build's 4): the same bits, each result correctly rounded whatever the width. */
static inline __attribute__((always_inline)) void normalize_body(float *x, int64_t n, float mean, float std) {
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] - mean) / std;
}
static void normalize_portable(float *x, int64_t n, float mean, float std) { normalize_body(x, n, mean, std); }
__attribute__((target("avx2"))) static void normalize_avx2(float *x, int64_t n, float mean, float std) {
    normalize_body(x, n, mean, std);
}

void mst_transform_normalize(float *x, int64_t n, float mean, float std) {
    (mst_cpu_has(MST_CPU_AVX2) ? normalize_avx2 : normalize_portable)(x, n, mean, std);
}

void mst_transform_apply(const mst_transform_config *cfg, int64_t epoch, int64_t index, float *x, float *scratch,
                         int c, int h, int w) {
    const size_t numel = (size_t)c * h * w;
    if (cfg->augment >= MST_AUGMENT_LIGHT) {
        mst_transform_draw d;
        mst_transform_draw_for(cfg, epoch, index, &d);
        mst_transform_crop(x, scratch, c, h, w, MST_CROP_PAD, d.crop_dx, d.crop_dy);
        if (d.flip) mst_transform_flip(scratch, c, h, w);
        if (cfg->augment >= MST_AUGMENT_HEAVY)
            mst_transform_affine(scratch, x, c, h, w, &d.affine);
        else
            memcpy(x, scratch, numel * sizeof(float));
    }
    if (cfg->normalize) mst_transform_normalize(x, (int64_t)numel, cfg->mean, cfg->std);
}
