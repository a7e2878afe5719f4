/* srnet.c — a small ESRGAN-style super-resolution network (Wang et al., 2018, without the GAN
 * stage and with plain residual blocks in place of residual-in-residual dense blocks, as EDSR):
 *
 *   stem:      conv3x3(C_in -> w)
 *   body:      `blocks` residual blocks  h += 0.2 conv3x3(ReLU(conv3x3(h)))   (no batch norm)
 *              conv3x3, plus the stem's output (the trunk's long skip)
 *   upsampler: conv3x3(w -> 4 w), pixel shuffle x2, ReLU, conv3x3(w -> C_in)
 *   output:    that, plus the input upsampled x2 by nearest neighbour (the net learns a residual)
 * Residual scaling 0.2 is ESRGAN's (and EDSR's) remedy for training deep BN-free bodies. Loss:
 * L1 (ESRGAN's PSNR-oriented stage) or MSE (model.loss). Input (N, C, H, W) in [0, 1], output
 * (N, C, 2H, 2W); evaluation reports PSNR. Init as PyTorch's conv default, U(+-g/sqrt(fan_in)). */
#include <math.h>
#include <stdlib.h>

#include "runtime/ops.h"
#include "workloads/zoo.h"

#define MAX_BLOCKS 32
#define RES_SCALE 0.2

typedef struct {
    mst_tensor *w, *b;
} conv;

typedef struct {
    conv stem, trunk, up, last;
    conv blocks[MAX_BLOCKS][2];
    int n_blocks;
    bool mse;
} srnet;

static mst_tensor *conv3(mst_ctx *ctx, const conv *c, mst_tensor *x) { return mst_conv2d(ctx, x, c->w, c->b, 1, 1, 1, 1); }

static mst_tensor *srnet_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    (void)training;
    const srnet *p = m->impl;
    mst_tensor *fea = conv3(ctx, &p->stem, x), *h = fea;
    for (int i = 0; i < p->n_blocks; i++) {
        mst_tensor *r = conv3(ctx, &p->blocks[i][1], mst_relu(ctx, conv3(ctx, &p->blocks[i][0], h)));
        h = mst_add(ctx, h, mst_scale(ctx, r, RES_SCALE));
    }
    h = mst_add(ctx, fea, conv3(ctx, &p->trunk, h));
    h = mst_relu(ctx, mst_pixel_shuffle(ctx, conv3(ctx, &p->up, h), 2));
    mst_tensor *y = conv3(ctx, &p->last, h);
    mst_tensor *near = mst_pixel_shuffle(ctx, mst_concat(ctx, 4, (mst_tensor *[]){x, x, x, x}, 1), 2);   /* nearest x2 */
    return mst_add(ctx, y, near);
}

static mst_tensor *srnet_loss(mst_model *m, mst_ctx *ctx, mst_tensor *out, mst_tensor *target) {
    const srnet *p = m->impl;
    return p->mse ? mst_mse_loss(ctx, out, target) : mst_l1_loss(ctx, out, target);
}

static void conv_init(mst_model *m, mst_ctx *ctx, conv *c, const char *name, int cin, int cout, double gain) {
    char n[48];
    double bound = gain / sqrt((double)cin * 9);
    snprintf(n, sizeof(n), "%s.weight", name);
    c->w = mst_model_param(m, ctx, n, 4, (int64_t[]){cout, cin, 3, 3}, bound);
    snprintf(n, sizeof(n), "%s.bias", name);
    c->b = mst_model_param(m, ctx, n, 1, (int64_t[]){cout}, bound);
}

mst_model *mst_srnet_new(mst_ctx *ctx, const mst_model_spec *spec) {
    mst_model *m = calloc(1, sizeof(*m));
    srnet *p = calloc(1, sizeof(*p));
    if (!m || !p) {
        free(m);
        free(p);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory building srnet");
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "srnet");
    m->impl = p;
    m->forward = srnet_forward;
    m->loss = srnet_loss;
    m->metric = MST_METRIC_PSNR;
    const int w = spec->width, c = spec->in_c;
    const double gain = spec->init_gain > 0 ? spec->init_gain : 1.0;
    p->n_blocks = spec->blocks;
    p->mse = spec->mse_loss;
    conv_init(m, ctx, &p->stem, "stem", c, w, gain);
    for (int i = 0; i < p->n_blocks; i++) {
        char n[32];
        snprintf(n, sizeof(n), "block%d.conv1", i + 1);
        conv_init(m, ctx, &p->blocks[i][0], n, w, w, gain);
        snprintf(n, sizeof(n), "block%d.conv2", i + 1);
        conv_init(m, ctx, &p->blocks[i][1], n, w, w, gain);
    }
    conv_init(m, ctx, &p->trunk, "trunk", w, w, gain);
    conv_init(m, ctx, &p->up, "upsample", w, 4 * w, gain);
    conv_init(m, ctx, &p->last, "last", w, c, gain);
    if (!p->last.b) {
        mst_model_free(m);
        return NULL;
    }
    return m;
}

int mst_srnet_check(const mst_model_spec *spec, char *err, size_t errn) {
    if (spec->tokens || !spec->paired) {
        snprintf(err, errn, "model srnet: needs low/high-resolution image pairs (data.dataset: fashion_sr)");
        return -1;
    }
    if (spec->width < 1 || spec->blocks < 0 || spec->blocks > MAX_BLOCKS) {
        snprintf(err, errn, "model srnet: model.width must be >= 1 and model.blocks in 0..%d", MAX_BLOCKS);
        return -1;
    }
    return 0;
}
