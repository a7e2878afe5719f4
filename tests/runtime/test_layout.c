/* test_layout.c — nChw16c (runtime/layout.h): the conversions, and every kernel with a blocked path
 * (batch norm and its gradient, max pooling and its gradient, global average pooling,
 * broadcast_to, the convolutions through the kernel choice and through plain copies) run on
 * blocked copies of the inputs give the plain kernel's outputs, bit for bit, on inputs with ties,
 * NaNs and signed zeros; a bad pooling index reports the plain kernel's error; batch norm's
 * gradient with the pooling gradient folded in, and batch norm with the pooling after it folded
 * in, give the two ops' bits. CTest runs this file
 * again with MSTUNE_CPU_MASK=avx512f (the portable slab bodies). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/half.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/layout.h"
#include "runtime/op.h"
#include "runtime/ops.h"

static mst_ctx *g_ctx;

static int setup(void **state) {
    (void)state;
    g_ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = 2});
    return g_ctx ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    mst_ctx_free(g_ctx);
    return 0;
}

/* A blocked copy of plain 4-D tensor t (same dtype and logical shape). */
static mst_tensor *blocked_copy(const mst_tensor *t) {
    mst_tensor *b = mst_tensor_new(g_ctx, t->dtype, t->ndim, t->shape);
    assert_non_null(b);
    mst_nchw16c_from_plain(NULL, mst_tensor_data(t), mst_tensor_data(b), t->shape[0], t->shape[1], t->shape[2] * t->shape[3],
                           mst_dtype_size(t->dtype));
    b->layout = MST_LAYOUT_NCHW16C;
    return b;
}

/* A new tensor shaped like t, blocked or plain. */
static mst_tensor *like(const mst_tensor *t, bool blocked) {
    mst_tensor *o = mst_tensor_zeros(g_ctx, t->dtype, t->ndim, t->shape);
    assert_non_null(o);
    o->layout = blocked ? MST_LAYOUT_NCHW16C : MST_LAYOUT_PLAIN;
    return o;
}

/* a and b hold the same bits, b read through its layout. */
static void assert_same_bits(const mst_tensor *a, const mst_tensor *b, const char *what) {
    assert_int_equal(a->numel, b->numel);
    assert_int_equal(a->dtype, b->dtype);
    size_t bytes = mst_tensor_nbytes(a), elem = mst_dtype_size(a->dtype);
    void *plain = malloc(bytes ? bytes : 1);
    assert_non_null(plain);
    if (mst_tensor_blocked(b))
        mst_nchw16c_to_plain(NULL, mst_tensor_data(b), plain, b->shape[0], b->shape[1], b->shape[2] * b->shape[3], elem);
    else
        memcpy(plain, mst_tensor_data(b), bytes);
    for (int64_t i = 0; i < a->numel; i++) {
        uint32_t x = 0, y = 0;
        memcpy(&x, (const char *)mst_tensor_data(a) + (size_t)i * elem, elem);
        memcpy(&y, (const char *)plain + (size_t)i * elem, elem);
        if (x != y) {
            free(plain);
            fail_msg("%s (%s): element %lld differs: %08x (plain) vs %08x (nChw16c)", what, mst_dtype_name(a->dtype), (long long)i, x,
                     y);
        }
    }
    free(plain);
}

/* The same values in dt (bf16: rounded to nearest even). */
static mst_tensor *as(const mst_tensor *t, mst_dtype dt) {
    if (dt == t->dtype) return (mst_tensor *)t;
    mst_tensor *h = mst_tensor_new(g_ctx, dt, t->ndim, t->shape);
    assert_non_null(h);
    mst_half_from_f32(dt, mst_tensor_f32(t), mst_tensor_data(h), (size_t)t->numel);
    return h;
}

/* x ~ N(0.5, 1) with every 7th value copied from its neighbour (ties), a few -0 and, when nan, NaNs. */
static mst_tensor *input(int64_t n, int64_t c, int64_t h, int64_t w, bool nan) {
    mst_tensor *x = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 4, (int64_t[]){n, c, h, w}, 0.5, 1.0);
    assert_non_null(x);
    float *p = mst_tensor_f32(x);
    for (int64_t i = 1; i < x->numel; i++) {
        if (i % 7 == 0) p[i] = p[i - 1];
        if (i % 53 == 0) p[i] = -0.0f;
        if (nan && i % 97 == 0) p[i] = NAN;
    }
    return x;
}

static mst_status run(mst_op op, int n_in, mst_tensor *const in[], int n_out, mst_tensor *const out[], const mst_attrs *a) {
    mst_op_call c = {.op = op, .n_in = n_in, .n_out = n_out, .attrs = *a};
    for (int i = 0; i < n_in; i++) c.in[i] = in[i];
    for (int k = 0; k < n_out; k++) c.out[k] = out[k];
    mst_kernel_fn k = mst_op_kernel(g_ctx, op, in[mst_op_table[op]->dtype_arg]->dtype);
    assert_non_null(k);
    return k(g_ctx, &c);
}

static void test_conversions(void **state) {
    (void)state;
    int64_t s_values[] = {1, 7, 16, 49, 50};
    for (size_t k = 0; k < sizeof(s_values) / sizeof(s_values[0]); k++)
        for (size_t elem = 2; elem <= 4; elem += 2) {     /* bf16, then f32 / i32 */
            int64_t s = s_values[k], n = 16 * s;
            char *a = malloc((size_t)n * elem), *b = malloc((size_t)n * elem), *c = malloc((size_t)n * elem);
            for (int64_t i = 0; i < n; i++) {
                uint32_t v = (uint32_t)(i * 2654435761u);
                memcpy(a + (size_t)i * elem, &v, elem);
            }
            mst_nchw16c_rows_to_slab(a, b, s, elem);
            for (int64_t i = 0; i < s; i++)
                for (int l = 0; l < 16; l++) assert_memory_equal(b + (size_t)(i * 16 + l) * elem, a + (size_t)(l * s + i) * elem, elem);
            mst_nchw16c_slab_to_rows(b, c, s, elem);
            assert_memory_equal(a, c, (size_t)n * elem);
            free(a), free(b), free(c);
        }
    assert_true(mst_layout_blockable(MST_DTYPE_F32, 4, (int64_t[]){2, 32, 7, 7}));
    assert_true(mst_layout_blockable(MST_DTYPE_I32, 4, (int64_t[]){2, 16, 1, 1}));
    assert_false(mst_layout_blockable(MST_DTYPE_F32, 4, (int64_t[]){2, 24, 7, 7}));
    assert_true(mst_layout_blockable(MST_DTYPE_BF16, 4, (int64_t[]){2, 32, 7, 7}));
    assert_false(mst_layout_blockable(MST_DTYPE_F16, 4, (int64_t[]){2, 32, 7, 7}));
    assert_false(mst_layout_blockable(MST_DTYPE_F32, 2, (int64_t[]){2, 32}));
}

/* Every plane 2^60, -2^60, then ones: a double sum keeps the ones only in partials that hold
 * neither spike, so the statistics depend on which partial each element went to (sixteen by
 * i mod 16, or four by i mod 4): an order other than the plain kernel's shows in the mean. */
static void spiky(mst_tensor *t) {
    int64_t s = t->shape[2] * t->shape[3];
    float *p = mst_tensor_f32(t);
    for (int64_t i = 0; i < t->numel; i++) p[i] = i % s == 0 ? 0x1p60f : i % s == 1 ? -0x1p60f : 1.0f;
}

/* Image 0 all 2^60, image 1 all -2^60, the rest ones: a channel's total over the images keeps the
 * ones only when the images are added in order (the all-nChw16c kernels add per-image sums after
 * their region): an order other than the plain kernel's shows in the mean and the variance. */
static void spiky_images(mst_tensor *t) {
    int64_t per_image = t->numel / t->shape[0];
    float *p = mst_tensor_f32(t);
    for (int64_t i = 0; i < t->numel; i++) p[i] = i < per_image ? 0x1p60f : i < 2 * per_image ? -0x1p60f : 1.0f;
}

/* Forward, training and evaluation, with and without the relu epilogue; then the gradient. Planes
 * of 784 and 196 (the rows' sixteen partials), 49 and 1 (the direct kernel's four); random,
 * spiky (shapes 5, 6) and spiky-by-image (7, 8) values; the last shape's 2.4 MB a worker writes
 * on two threads takes the all-nChw16c kernels' streaming stores (op_output_streams). */
static void test_batchnorm(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {{3, 32, 28, 28}, {2, 32, 14, 14}, {2, 16, 7, 7}, {4, 16, 1, 1}, {1, 16, 3, 5},
                                        {2, 16, 14, 14}, {2, 16, 7, 7}, {5, 32, 14, 14}, {4, 16, 7, 7}, {48, 32, 28, 28}};
    for (size_t sh = 0; sh < 2 * sizeof(shapes) / sizeof(shapes[0]); sh++) {
        /* f32, then bf16 (O2's batch norm: half x, y, gy, gx beside f32 parameters and statistics) */
        mst_dtype dt = sh < sizeof(shapes) / sizeof(shapes[0]) ? MST_DTYPE_F32 : MST_DTYPE_BF16;
        const int64_t *d = shapes[sh % (sizeof(shapes) / sizeof(shapes[0]))];
        mst_pool_push(g_ctx);
        mst_tensor *x = input(d[0], d[1], d[2], d[3], false), *gy = input(d[0], d[1], d[2], d[3], false);
        size_t kind = sh % (sizeof(shapes) / sizeof(shapes[0]));
        if (kind == 5 || kind == 6) spiky(x), spiky(gy);
        if (kind == 7 || kind == 8) spiky_images(x), spiky_images(gy);
        x = as(x, dt), gy = as(gy, dt);
        mst_tensor *gamma = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, &d[1], 1.0, 0.3);
        mst_tensor *beta = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, &d[1], 0.0, 0.3);
        for (int training = 0; training < 2; training++)
            for (int relu = 0; relu < 2; relu++) {
                /* layouts of (x, y): plain; blocked; plain x into blocked y (the stem's rows path, or
                 * plain copies under 64-value planes); blocked x into plain y (plain copies) */
                static const bool xl[4] = {false, true, false, true}, yl[4] = {false, true, true, false};
                mst_attrs a = {.i = {training, relu}, .f = {0.1, 1e-5}};
                mst_tensor *y[4], *mean[4], *invstd[4];
                for (int b = 0; b < 4; b++) {
                    mst_tensor *rm = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, &d[1], 0.2);
                    mst_tensor *rv = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, &d[1], 1.5);
                    y[b] = like(x, yl[b]), mean[b] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, &d[1]);
                    invstd[b] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, &d[1]);
                    mst_tensor *in[5] = {xl[b] ? blocked_copy(x) : x, gamma, beta, rm, rv}, *out[3] = {y[b], mean[b], invstd[b]};
                    assert_int_equal(run(MST_OP_BATCHNORM, 5, in, 3, out, &a), MST_OK);
                }
                for (int b = 1; b < 4; b++) {
                    assert_same_bits(y[0], y[b], "batchnorm y");
                    assert_same_bits(mean[0], mean[b], "batchnorm mean");
                    assert_same_bits(invstd[0], invstd[b], "batchnorm invstd");
                }
                if (!relu) continue;
                /* layouts of (gy, x, gx): every combination */
                mst_attrs ga = {.i = {training}};
                mst_tensor *gx[8], *gg[8], *gb[8];
                for (int b = 0; b < 8; b++) {
                    bool gyb = b & 1, xb = b & 2, gxb = b & 4;
                    gx[b] = like(x, gxb), gg[b] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, &d[1]);
                    gb[b] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, &d[1]);
                    mst_tensor *in[5] = {gyb ? blocked_copy(gy) : gy, xb ? blocked_copy(x) : x, gamma, mean[0], invstd[0]};
                    mst_tensor *out[3] = {gx[b], gg[b], gb[b]};
                    assert_int_equal(run(MST_OP_BATCHNORM_GRAD, 5, in, 3, out, &ga), MST_OK);
                }
                for (int b = 1; b < 8; b++) {
                    assert_same_bits(gx[0], gx[b], "batchnorm_grad gx");
                    assert_same_bits(gg[0], gg[b], "batchnorm_grad ggamma");
                    assert_same_bits(gb[0], gb[b], "batchnorm_grad gbeta");
                }
            }
        mst_pool_pop(g_ctx);
    }
}

/* Max pooling and its gradient (with and without the relu fold's pooled input): 2x2 stride 2
 * (the vector path), an odd size, 3x3 stride 2 padded (overlapping windows: the scatter-add). */
static void test_maxpool(void **state) {
    (void)state;
    static const struct { int64_t n, c, h, w; int kh, kw, sh, sw, ph, pw; } cases[] = {
        {2, 32, 8, 8, 2, 2, 2, 2, 0, 0}, {2, 16, 28, 28, 2, 2, 2, 2, 0, 0}, {1, 16, 5, 5, 2, 2, 2, 2, 0, 0},
        {2, 16, 7, 7, 3, 3, 2, 2, 1, 1}, {1, 32, 6, 5, 2, 3, 1, 2, 1, 1}};
    for (size_t kk = 0; kk < 2 * sizeof(cases) / sizeof(cases[0]); kk++) {
        size_t k = kk % (sizeof(cases) / sizeof(cases[0]));
        mst_dtype dt = kk == k ? MST_DTYPE_F32 : MST_DTYPE_BF16;
        mst_pool_push(g_ctx);
        mst_tensor *x = as(input(cases[k].n, cases[k].c, cases[k].h, cases[k].w, true), dt);
        mst_attrs a = {.i = {cases[k].kh, cases[k].kw, cases[k].sh, cases[k].sw, cases[k].ph, cases[k].pw}};
        mst_tensor *y0 = mst_maxpool2d(g_ctx, x, cases[k].kh, cases[k].kw, cases[k].sh, cases[k].sw, cases[k].ph, cases[k].pw);
        assert_non_null(y0);
        /* layouts of (x; y and indices): plain; blocked; plain into blocked (the stem into the
         * chain); blocked into plain */
        static const bool xl[4] = {false, true, false, true}, yl[4] = {false, true, true, false};
        mst_tensor *y[4], *idx[4];
        for (int b = 0; b < 4; b++) {
            y[b] = like(y0, yl[b]);
            idx[b] = mst_tensor_zeros(g_ctx, MST_DTYPE_I32, 4, y0->shape);
            idx[b]->layout = y[b]->layout;
            mst_tensor *in[1] = {xl[b] ? blocked_copy(x) : x}, *out[2] = {y[b], idx[b]};
            assert_int_equal(run(MST_OP_MAXPOOL2D, 1, in, 2, out, &a), MST_OK);
        }
        for (int b = 1; b < 4; b++) {
            assert_same_bits(y[0], y[b], "maxpool2d y");
            assert_same_bits(idx[0], idx[b], "maxpool2d indices");
        }
        mst_tensor *gy = as(input(y0->shape[0], y0->shape[1], y0->shape[2], y0->shape[3], true), dt);
        mst_attrs ga = {.i = {cases[k].h, cases[k].w}};
        for (int fold = 0; fold < 2; fold++) {
            /* layouts of (gy, indices, pooled; gx) as the forward's (y; x) */
            mst_tensor *gx[4];
            for (int b = 0; b < 4; b++) {
                gx[b] = like(x, xl[b]);
                mst_tensor *in[3] = {yl[b] ? blocked_copy(gy) : gy, idx[b], y[b]}, *out[1] = {gx[b]};
                assert_int_equal(run(MST_OP_MAXPOOL2D_GRAD, 2 + fold, in, 1, out, &ga), MST_OK);
            }
            for (int b = 1; b < 4; b++) assert_same_bits(gx[0], gx[b], fold ? "maxpool2d_grad with pooled" : "maxpool2d_grad");
        }
        /* an index outside the plane: the same error, naming the same position */
        char err[4][256];
        for (int b = 0; b < 4; b++) {
            mst_tensor *bad = mst_tensor_clone(g_ctx, idx[0]);
            mst_tensor_i32(bad)[bad->numel / 2 + 3] = (int32_t)(cases[k].h * cases[k].w);
            mst_tensor_i32(bad)[bad->numel - 1] = -1;
            if (yl[b]) bad = blocked_copy(bad);
            mst_tensor *gx = like(x, xl[b]), *in[2] = {yl[b] ? blocked_copy(gy) : gy, bad}, *out[1] = {gx};
            assert_int_not_equal(run(MST_OP_MAXPOOL2D_GRAD, 2, in, 1, out, &ga), MST_OK);
            snprintf(err[b], sizeof(err[b]), "%s", mst_ctx_error(g_ctx));
            mst_ctx_clear_error(g_ctx);
        }
        for (int b = 1; b < 4; b++) assert_string_equal(err[0], err[b]);
        mst_pool_pop(g_ctx);
    }
}

static void test_global_pool_and_broadcast(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {{2, 32, 7, 7}, {3, 16, 1, 1}, {1, 16, 9, 2}};
    for (size_t sk = 0; sk < 2 * sizeof(shapes) / sizeof(shapes[0]); sk++) {
        size_t sh = sk % (sizeof(shapes) / sizeof(shapes[0]));
        mst_dtype dt = sk == sh ? MST_DTYPE_F32 : MST_DTYPE_BF16;   /* bf16: the half kernel's f32 stand-ins keep the layout */
        const int64_t *d = shapes[sh];
        mst_pool_push(g_ctx);
        mst_tensor *x = as(input(d[0], d[1], d[2], d[3], true), dt);
        mst_tensor *y[2];
        mst_attrs none = {0};
        for (int b = 0; b < 2; b++) {
            y[b] = mst_tensor_zeros(g_ctx, dt, 2, d);
            mst_tensor *in[1] = {b ? blocked_copy(x) : x}, *out[1] = {y[b]};
            assert_int_equal(run(MST_OP_GLOBAL_AVGPOOL, 1, in, 1, out, &none), MST_OK);
        }
        assert_same_bits(y[0], y[1], "global_avgpool");
        /* (N, C, 1, 1) -> (N, C, H, W): the slab fill; (C, 1, 1) and (W) -> the plain copy */
        mst_tensor *small[3] = {as(mst_tensor_randn(g_ctx, MST_DTYPE_F32, 4, (int64_t[]){d[0], d[1], 1, 1}, 0, 1), dt),
                                as(mst_tensor_randn(g_ctx, MST_DTYPE_F32, 3, (int64_t[]){d[1], 1, 1}, 0, 1), dt),
                                as(mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, &d[3], 0, 1), dt)};
        mst_attrs a = {.i = {4, d[0], d[1], d[2], d[3]}};
        for (int s = 0; s < 3; s++) {
            mst_tensor *o[2];
            for (int b = 0; b < 2; b++) {
                o[b] = like(x, b);
                mst_tensor *in[1] = {small[s]}, *out[1] = {o[b]};
                assert_int_equal(run(MST_OP_BROADCAST_TO, 1, in, 1, out, &a), MST_OK);
            }
            assert_same_bits(o[0], o[1], "broadcast_to");
        }
        mst_pool_pop(g_ctx);
    }
}

/* The convolutions with blocked activations: through the kernel choice (oneDNN's blocked kernels
 * bind them directly; any other provider runs on plain copies), and the builtin kernel through
 * mst_layout_run_plain; each against the same kernel on plain tensors. */
static void test_convolutions(void **state) {
    (void)state;
    mst_pool_push(g_ctx);
    mst_tensor *x = input(2, 16, 9, 9, false), *w = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 4, (int64_t[]){32, 16, 3, 3}, 0, 0.2);
    mst_tensor *y0 = mst_conv2d(g_ctx, x, w, NULL, 1, 1, 1, 1);
    assert_non_null(y0);
    mst_tensor *gy = input(y0->shape[0], y0->shape[1], y0->shape[2], y0->shape[3], false);
    mst_attrs fa = {.i = {1, 1, 1, 1}}, ia = {.i = {1, 1, 1, 1, 9, 9}}, wa = {.i = {1, 1, 1, 1, 3, 3}};
    mst_kernel_fn builtin[3] = {mst_kernel_builtin(g_ctx, mst_op_table[MST_OP_CONV2D], MST_DTYPE_F32),
                                mst_kernel_builtin(g_ctx, mst_op_table[MST_OP_CONV2D_GRAD_INPUT], MST_DTYPE_F32),
                                mst_kernel_builtin(g_ctx, mst_op_table[MST_OP_CONV2D_GRAD_WEIGHT], MST_DTYPE_F32)};
    for (int via_builtin = 0; via_builtin < 2; via_builtin++) {
        mst_tensor *y[2], *gx[2], *gw[2];
        for (int b = 0; b < 2; b++) {
            mst_tensor *xb = b ? blocked_copy(x) : x, *gyb = b ? blocked_copy(gy) : gy;
            y[b] = like(y0, b), gx[b] = like(x, b), gw[b] = like(w, false);
            mst_op_call calls[3] = {{.op = MST_OP_CONV2D, .n_in = 2, .n_out = 1, .in = {xb, w}, .out = {y[b]}, .attrs = fa},
                                    {.op = MST_OP_CONV2D_GRAD_INPUT, .n_in = 2, .n_out = 1, .in = {gyb, w}, .out = {gx[b]}, .attrs = ia},
                                    {.op = MST_OP_CONV2D_GRAD_WEIGHT, .n_in = 2, .n_out = 1, .in = {gyb, xb}, .out = {gw[b]}, .attrs = wa}};
            for (int k = 0; k < 3; k++) {
                mst_kernel_fn fn = via_builtin ? builtin[k] : mst_op_kernel(g_ctx, calls[k].op, MST_DTYPE_F32);
                mst_status s = via_builtin && b ? mst_layout_run_plain(g_ctx, &calls[k], fn) : fn(g_ctx, &calls[k]);
                assert_int_equal(s, MST_OK);
            }
        }
        assert_same_bits(y[0], y[1], "conv2d");
        assert_same_bits(gx[0], gx[1], "conv2d_grad_input");
        assert_same_bits(gw[0], gw[1], "conv2d_grad_weight");
    }
    /* a stem (one input channel): the builtin kernel's direct path writes y and reads gy in either
     * layout itself (runtime/ops/conv_direct.h; plain copies where it does not apply) */
    mst_tensor *x1 = input(2, 1, 11, 13, false), *w1 = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 4, (int64_t[]){32, 1, 3, 3}, 0, 0.5);
    mst_tensor *ys = mst_conv2d(g_ctx, x1, w1, NULL, 1, 1, 1, 1);
    assert_non_null(ys);
    mst_tensor *gys = input(ys->shape[0], ys->shape[1], ys->shape[2], ys->shape[3], false);
    for (int via_builtin = 0; via_builtin < 2; via_builtin++) {
        mst_tensor *y[2], *gw[2];
        for (int b = 0; b < 2; b++) {
            y[b] = like(ys, b), gw[b] = like(w1, false);
            mst_op_call calls[2] = {{.op = MST_OP_CONV2D, .n_in = 2, .n_out = 1, .in = {x1, w1}, .out = {y[b]}, .attrs = fa},
                                    {.op = MST_OP_CONV2D_GRAD_WEIGHT, .n_in = 2, .n_out = 1, .in = {b ? blocked_copy(gys) : gys, x1},
                                     .out = {gw[b]}, .attrs = wa}};
            for (int k = 0; k < 2; k++) {
                mst_kernel_fn fn = via_builtin ? builtin[2 * k] : mst_op_kernel(g_ctx, calls[k].op, MST_DTYPE_F32);
                bool copies = via_builtin && b && !mst_builtin_takes_blocked(&calls[k]);
                assert_int_equal(copies ? mst_layout_run_plain(g_ctx, &calls[k], fn) : fn(g_ctx, &calls[k]), MST_OK);
            }
        }
        assert_same_bits(y[0], y[1], "stem conv2d");
        assert_same_bits(gw[0], gw[1], "stem conv2d_grad_weight");
    }
    mst_pool_pop(g_ctx);
}

/* batchnorm_grad's pooled form (graph mode's fuse_pool_bn) against batchnorm_grad of
 * maxpool2d_grad, bit for bit: the stem's 2x2 windows at 28x28 and a 14x14 plane (the fused slab
 * path, with x plain or blocked and gx either), overlapping 3x3 windows (the fused path's scatter),
 * planes under 64 values with plain x, bf16, evaluation and plain operands (the path through
 * maxpool2d_grad's kernel), with and without the pooled values (the relu select), under the
 * reference kernels too; a bad index fails with the same message whatever the layout. */
static void test_batchnorm_grad_pooled(void **state) {
    (void)state;
    static const struct { int64_t n, c, h, w; int k, s, p; mst_dtype dt; } cases[] = {
        {2, 32, 28, 28, 2, 2, 0, MST_DTYPE_F32}, {2, 16, 14, 14, 2, 2, 0, MST_DTYPE_F32}, {2, 16, 15, 15, 3, 2, 1, MST_DTYPE_F32},
        {2, 16, 6, 6, 2, 2, 0, MST_DTYPE_F32},   {2, 16, 14, 14, 2, 2, 0, MST_DTYPE_BF16},
        {48, 32, 28, 28, 2, 2, 0, MST_DTYPE_F32}};     /* the last: gx streamed (2.4 MB a worker) */
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        mst_pool_push(g_ctx);
        mst_dtype dt = cases[k].dt;
        const int64_t *ch = &cases[k].c;
        mst_tensor *x = as(input(cases[k].n, cases[k].c, cases[k].h, cases[k].w, false), dt);
        mst_tensor *gamma = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, ch, 1.0, 0.3);
        mst_tensor *beta = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, ch, 0.0, 0.3);
        mst_tensor *rm = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch), *rv = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, ch, 1.0);
        mst_tensor *y = like(x, false), *mean = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
        mst_tensor *invstd = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
        mst_attrs fa = {.i = {1, 1}, .f = {0.1, 1e-5}};      /* training, relu: the stem's batch norm */
        assert_int_equal(run(MST_OP_BATCHNORM, 5, (mst_tensor *[]){x, gamma, beta, rm, rv}, 3, (mst_tensor *[]){y, mean, invstd}, &fa),
                         MST_OK);
        mst_tensor *pooled = mst_maxpool2d(g_ctx, y, cases[k].k, cases[k].k, cases[k].s, cases[k].s, cases[k].p, cases[k].p);
        assert_non_null(pooled);
        mst_tensor *idx = mst_tensor_zeros(g_ctx, MST_DTYPE_I32, 4, pooled->shape);
        mst_attrs pa = {.i = {cases[k].k, cases[k].k, cases[k].s, cases[k].s, cases[k].p, cases[k].p}};
        assert_int_equal(run(MST_OP_MAXPOOL2D, 1, (mst_tensor *[]){y}, 2, (mst_tensor *[]){pooled, idx}, &pa), MST_OK);
        /* one NaN and one -0 in channel 0 only: a NaN anywhere in a channel makes its sums and gx NaN */
        mst_tensor *gy32 = input(pooled->shape[0], pooled->shape[1], pooled->shape[2], pooled->shape[3], false);
        mst_tensor_f32(gy32)[1] = NAN, mst_tensor_f32(gy32)[2] = -0.0f;
        mst_tensor *gy = as(gy32, dt);
        mst_attrs ua = {.i = {cases[k].h, cases[k].w}};
        for (int training = 0; training < 2; training++)
            for (int fold = 0; fold < 2; fold++) {
                /* the two ops, plain: fast kernels, then the reference ones */
                mst_attrs ga = {.i = {training}};
                mst_tensor *want_by[2][3];
                for (int r = 0; r < 2; r++) {
                    mst_tensor *dense = like(x, false), **want = want_by[r];
                    want[0] = like(x, false), want[1] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
                    want[2] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
                    mst_ctx_set_force_ref(g_ctx, r);
                    assert_int_equal(run(MST_OP_MAXPOOL2D_GRAD, 2 + fold, (mst_tensor *[]){gy, idx, pooled}, 1, &dense, &ua), MST_OK);
                    assert_int_equal(run(MST_OP_BATCHNORM_GRAD, 5, (mst_tensor *[]){dense, x, gamma, mean, invstd}, 3, want, &ga), MST_OK);
                    mst_ctx_set_force_ref(g_ctx, false);
                }
                /* the pooled form: (gy, indices, pooled) x (x) x (gx) plain or blocked, then the
                 * reference kernels on plain operands */
                for (int b = 0; b < 9; b++) {
                    bool pb = b & 1, xb = b & 2, gxb = b & 4, ref = b == 8;
                    if (ref) pb = xb = gxb = false;
                    mst_tensor **want = want_by[ref];
                    mst_tensor *got[3] = {like(x, gxb), mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch),
                                          mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch)};
                    mst_tensor *in[7] = {pb ? blocked_copy(gy) : gy, xb ? blocked_copy(x) : x, gamma, mean, invstd,
                                         pb ? blocked_copy(idx) : idx, pb ? blocked_copy(pooled) : pooled};
                    mst_ctx_set_force_ref(g_ctx, ref);
                    mst_status st = run(MST_OP_BATCHNORM_GRAD, 6 + fold, in, 3, got, &ga);
                    mst_ctx_set_force_ref(g_ctx, false);
                    assert_int_equal(st, MST_OK);
                    char what[96];
                    snprintf(what, sizeof(what), "case %zu training %d fold %d layouts %d: pooled gx", k, training, fold, b);
                    assert_same_bits(want[0], got[0], what);
                    assert_same_bits(want[1], got[1], "pooled ggamma");
                    assert_same_bits(want[2], got[2], "pooled gbeta");
                }
            }
        /* an index outside the plane, in a channel that is not a slab's first (lane 3) */
        char err[2][256];
        const int64_t bad_at = idx->numel / 2 + 3 * idx->shape[2] * idx->shape[3] + 5;
        for (int b = 0; b < 2; b++) {
            mst_tensor *bad = mst_tensor_clone(g_ctx, idx);
            mst_tensor_i32(bad)[bad_at] = (int32_t)(cases[k].h * cases[k].w);
            mst_tensor *got[3] = {like(x, false), mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch), mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch)};
            mst_tensor *in[6] = {b ? blocked_copy(gy) : gy, x, gamma, mean, invstd, b ? blocked_copy(bad) : bad};
            assert_int_not_equal(run(MST_OP_BATCHNORM_GRAD, 6, in, 3, got, &(mst_attrs){.i = {1}}), MST_OK);
            snprintf(err[b], sizeof(err[b]), "%s", mst_ctx_error(g_ctx));
            mst_ctx_clear_error(g_ctx);
        }
        char want[128];     /* maxpool2d_grad's message, whichever path found it */
        snprintf(want, sizeof(want), "index %lld at position %lld is outside [0, %lld)", (long long)(cases[k].h * cases[k].w),
                 (long long)bad_at, (long long)(cases[k].h * cases[k].w));
        for (int b = 0; b < 2; b++)
            if (!strstr(err[b], want)) fail_msg("case %zu, layout %d: expected \"%s\" in: %s", k, b, want, err[b]);
        mst_pool_pop(g_ctx);
    }
}

/* batchnorm_maxpool (graph mode's fuse_bn_pool) against batchnorm then maxpool2d, both plain:
 * every layout of (x; pooled and indices), training and evaluation, with and without the relu,
 * f32 (the fused path where all three are nChw16c) and bf16 (the two kernels in turn); the pooled
 * values, indices, saved and running statistics, to the bit. */
static void test_batchnorm_maxpool(void **state) {
    (void)state;
    static const struct { int64_t n, c, h, w; int k, s, p; mst_dtype dt; bool nan; } cases[] = {
        {2, 32, 28, 28, 2, 2, 0, MST_DTYPE_F32, false}, {3, 16, 14, 14, 2, 2, 0, MST_DTYPE_F32, true},
        {2, 16, 15, 15, 3, 2, 1, MST_DTYPE_F32, false}, {2, 16, 14, 14, 2, 2, 0, MST_DTYPE_BF16, false},
        {3, 32, 14, 14, 2, 2, 0, MST_DTYPE_BF16, true}, {2, 16, 15, 15, 3, 2, 1, MST_DTYPE_BF16, false}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        mst_pool_push(g_ctx);
        const int64_t *ch = &cases[k].c;
        mst_tensor *x = as(input(cases[k].n, cases[k].c, cases[k].h, cases[k].w, cases[k].nan), cases[k].dt);
        mst_tensor *gamma = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, ch, 1.0, 0.3);
        mst_tensor *beta = mst_tensor_randn(g_ctx, MST_DTYPE_F32, 1, ch, 0.0, 0.3);
        mst_attrs pa = {.i = {cases[k].k, cases[k].k, cases[k].s, cases[k].s, cases[k].p, cases[k].p}};
        for (int training = 0; training < 2; training++)
            for (int relu = 0; relu < 2; relu++) {
                mst_attrs ba = {.i = {training, relu}, .f = {0.1, 1e-5}}, fa = ba;
                for (int i = 0; i < 6; i++) fa.i[2 + i] = pa.i[i];
                /* the two ops, plain: fast kernels, then the reference ones */
                mst_tensor *want[2][6];     /* pooled, indices, save_mean, save_invstd, running_mean, running_var */
                for (int r = 0; r < 2; r++) {
                    mst_tensor **w = want[r], *y = like(x, false);
                    w[4] = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, ch, 0.2), w[5] = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, ch, 1.5);
                    w[2] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch), w[3] = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
                    w[0] = mst_maxpool2d(g_ctx, y, cases[k].k, cases[k].k, cases[k].s, cases[k].s, cases[k].p, cases[k].p);
                    assert_non_null(w[0]);
                    w[1] = mst_tensor_zeros(g_ctx, MST_DTYPE_I32, 4, w[0]->shape);
                    mst_ctx_set_force_ref(g_ctx, r);
                    mst_status st = run(MST_OP_BATCHNORM, 5, (mst_tensor *[]){x, gamma, beta, w[4], w[5]}, 3, (mst_tensor *[]){y, w[2], w[3]}, &ba);
                    if (st == MST_OK) st = run(MST_OP_MAXPOOL2D, 1, (mst_tensor *[]){y}, 2, (mst_tensor *[]){w[0], w[1]}, &pa);
                    mst_ctx_set_force_ref(g_ctx, false);
                    assert_int_equal(st, MST_OK);
                }
                /* the fused op: layouts of (x; pooled and indices) plain, blocked, plain into
                 * blocked, blocked into plain; then the reference kernels, plain */
                static const bool xl[5] = {false, true, false, true, false}, yl[5] = {false, true, true, false, false};
                for (int b = 0; b < 5; b++) {
                    mst_tensor *pooled = want[b == 4][0], *idx = want[b == 4][1], *mean = want[b == 4][2], *invstd = want[b == 4][3];
                    mst_tensor *rm = want[b == 4][4], *rv = want[b == 4][5];
                    mst_tensor *frm = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, ch, 0.2), *frv = mst_tensor_full(g_ctx, MST_DTYPE_F32, 1, ch, 1.5);
                    mst_tensor *got = like(pooled, yl[b]), *gidx = like(idx, yl[b]);
                    mst_tensor *gmean = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch), *ginv = mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, ch);
                    mst_tensor *in[5] = {xl[b] ? blocked_copy(x) : x, gamma, beta, frm, frv}, *out[4] = {got, gidx, gmean, ginv};
                    mst_ctx_set_force_ref(g_ctx, b == 4);
                    mst_status st = run(MST_OP_BATCHNORM_MAXPOOL, 5, in, 4, out, &fa);
                    mst_ctx_set_force_ref(g_ctx, false);
                    assert_int_equal(st, MST_OK);
                    char what[96];
                    snprintf(what, sizeof(what), "case %zu training %d relu %d layouts %d: pooled", k, training, relu, b);
                    assert_same_bits(pooled, got, what);
                    assert_same_bits(idx, gidx, "batchnorm_maxpool indices");
                    assert_same_bits(mean, gmean, "batchnorm_maxpool save_mean");
                    assert_same_bits(invstd, ginv, "batchnorm_maxpool save_invstd");
                    assert_same_bits(rm, frm, "batchnorm_maxpool running_mean");
                    assert_same_bits(rv, frv, "batchnorm_maxpool running_var");
                }
            }
        mst_pool_pop(g_ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions), cmocka_unit_test(test_batchnorm), cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_global_pool_and_broadcast), cmocka_unit_test(test_convolutions),
        cmocka_unit_test(test_batchnorm_grad_pooled), cmocka_unit_test(test_batchnorm_maxpool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
