/* transform.h — per-sample transforms for the data pipeline: random crop with zero padding,
 * horizontal flip, a random affine warp with bilinear sampling, and normalization.
 *
 * Applied in this fixed order: crop -> flip -> affine -> normalize, so geometric transforms see
 * pixels in [0, 1] with 0 as the padding colour, and normalization comes last. Every random choice
 * is drawn from Philox keyed by the loader's seed with counter (epoch, sample index): the same
 * sample in the same epoch is augmented the same way whichever thread runs it and in whatever
 * order, which is what makes batches bit-identical across worker counts. Trade-off: the affine
 * warp is computed honestly per pixel (inverse map + bilinear tap of 4 neighbours), a few
 * microseconds per 28x28 sample; that is the "expensive augmentation" the loader's workers exist
 * to hide.
 *
 * Usage:
 *     mst_transform_config t = {.augment = MST_AUGMENT_HEAVY, .normalize = true,
 *                               .mean = MST_FASHION_MNIST_MEAN, .std = MST_FASHION_MNIST_STD, .seed = 7};
 *     float scratch[784];
 *     mst_transform_apply(&t, epoch, index, x, scratch, 1, 28, 28);   // x: (C, H, W), in place
 */
#ifndef MST_RUNTIME_DATA_TRANSFORM_H
#define MST_RUNTIME_DATA_TRANSFORM_H

#include <stdbool.h>
#include <stdint.h>

#define MST_FASHION_MNIST_MEAN 0.2860f
#define MST_FASHION_MNIST_STD  0.3530f

/* Augmentation presets. */
typedef enum {
    MST_AUGMENT_NONE,   /* no augmentation */
    MST_AUGMENT_LIGHT,  /* crop (pad MST_CROP_PAD) + horizontal flip (p = 0.5) */
    MST_AUGMENT_HEAVY,  /* LIGHT + random affine warp */
    MST_AUGMENT_COUNT
} mst_augment;

#define MST_CROP_PAD 2              /* zero padding of the random crop, pixels per side */
#define MST_FLIP_P 0.5f
#define MST_AFFINE_ROT_DEG 15.0f    /* rotation uniform in [-15, 15] degrees */
#define MST_AFFINE_SCALE_LO 0.9f    /* scale uniform in [0.9, 1.1] */
#define MST_AFFINE_SCALE_HI 1.1f
#define MST_AFFINE_TRANSLATE 2.0f   /* translation uniform in [-2, 2] pixels, x and y */
#define MST_AFFINE_SHEAR_DEG 5.0f   /* x-shear uniform in [-5, 5] degrees */

const char *mst_augment_name(mst_augment a);

typedef struct {
    mst_augment augment;
    bool normalize;
    float mean, std;        /* x -> (x - mean) / std when normalize */
    uint64_t seed;          /* all augmentation randomness derives from it */
} mst_transform_config;

/* Parameters of an affine warp about the image centre: the output at p is the input at
 * A^-1 (p - centre - t) + centre, A = scale * R(rot) * Shear_x(shear). */
typedef struct {
    float rot_deg, scale, tx, ty, shear_deg;
} mst_affine_params;

/* Every random choice for one sample, drawn before any pixel is touched. */
typedef struct {
    int crop_dx, crop_dy;   /* offsets in [0, 2 * MST_CROP_PAD] */
    bool flip;
    mst_affine_params affine;
} mst_transform_draw;

/* Draws the choices for (cfg->seed, epoch, index); fields the preset does not use are neutral
 * (crop offsets = pad, flip false, identity affine). */
void mst_transform_draw_for(const mst_transform_config *cfg, int64_t epoch, int64_t index, mst_transform_draw *out);

/* The stages, usable on their own. All images are (c, h, w) float, contiguous. */
/* out(y, x) = in(y + dy - pad, x + dx - pad), 0 outside; in != out. */
void mst_transform_crop(const float *in, float *out, int c, int h, int w, int pad, int dx, int dy);
/* Mirrors each row, in place. */
void mst_transform_flip(float *x, int c, int h, int w);
/* Bilinear warp, 0 outside the input; in != out. */
void mst_transform_affine(const float *in, float *out, int c, int h, int w, const mst_affine_params *p);
void mst_transform_normalize(float *x, int64_t n, float mean, float std);

/* All stages for one sample, in place on x; scratch holds c*h*w floats. */
void mst_transform_apply(const mst_transform_config *cfg, int64_t epoch, int64_t index, float *x, float *scratch,
                         int c, int h, int w);

#endif
