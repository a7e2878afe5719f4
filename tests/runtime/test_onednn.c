/* test_onednn.c — the oneDNN provider against the reference kernels, for every op and dtype it
 * serves (matmul in all its layouts, linear with and without bias, conv2d and both gradients
 * over stride, padding and a 1-channel stem), at each dtype's tolerance: f32 outputs within f32
 * accumulation error, bf16 outputs (f32 accumulation, one rounding on store) within bf16's. The
 * reference runs in f32 on the very bf16-rounded inputs, so only the kernel's arithmetic is
 * compared. Convolutions are checked in every layout: plain, oneDNN's blocked layouts with the
 * reorders in and out, and the blocked layouts through oneDNN's Winograd kernels (f32 3x3 stride 1,
 * at a looser tolerance; where the CPU has AVX-512, the 16-channel cases must be served). Then the kernel choice: `builtin` binds the builtin kernel, `onednn` runs
 * oneDNN, and `auto` returns exactly the bits of the provider it reports. Where libdnnl is missing or a shape
 * is not implemented on this CPU, the case says so and is skipped; f32 matmul must be served
 * whenever the library loads (the Debian build has it on every x86-64 ISA). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/autograd.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/backend/shape_key.h"
#include "runtime/cpu_features.h"
#include "runtime/context.h"
#include "runtime/layout.h"
#include "runtime/ops.h"

typedef struct {
    const char *name;
    mst_op op;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    int64_t attr[6];
    int64_t red;        /* reduction length, for the tolerance */
} kcase;

static const kcase k_cases[] = {
    {"matmul 2-D", MST_OP_MATMUL, 2, {2, 2}, {{64, 96}, {96, 48}}, {0, 0}, 96},
    {"matmul a^T", MST_OP_MATMUL, 2, {2, 2}, {{96, 64}, {96, 48}}, {1, 0}, 96},
    {"matmul b^T", MST_OP_MATMUL, 2, {2, 2}, {{64, 96}, {48, 96}}, {0, 1}, 96},
    {"matmul a^T b^T", MST_OP_MATMUL, 2, {2, 2}, {{33, 17}, {29, 33}}, {1, 1}, 33},
    {"matmul batched", MST_OP_MATMUL, 2, {3, 3}, {{3, 20, 30}, {3, 30, 10}}, {0, 0}, 30},
    {"matmul batched a^T b^T", MST_OP_MATMUL, 2, {3, 3}, {{2, 30, 20}, {2, 10, 30}}, {1, 1}, 30},
    {"matmul shared b", MST_OP_MATMUL, 2, {3, 2}, {{4, 16, 24}, {24, 8}}, {0, 0}, 24},
    {"matmul shared b, a^T", MST_OP_MATMUL, 2, {3, 2}, {{4, 24, 16}, {24, 8}}, {1, 0}, 24},
    {"matmul shared a", MST_OP_MATMUL, 2, {2, 3}, {{16, 24}, {3, 24, 8}}, {0, 0}, 24},
    {"linear", MST_OP_LINEAR, 2, {2, 2}, {{32, 784}, {100, 784}}, {0}, 784},
    {"linear + bias", MST_OP_LINEAR, 3, {2, 2, 1}, {{32, 50}, {10, 50}, {10}}, {0}, 50},
    {"linear 3-D + bias", MST_OP_LINEAR, 3, {3, 2, 1}, {{2, 5, 40}, {7, 40}, {7}}, {0}, 40},
    {"conv2d 3x3 same", MST_OP_CONV2D, 2, {4, 4}, {{2, 8, 12, 12}, {16, 8, 3, 3}}, {1, 1, 1, 1}, 72},
    {"conv2d stem 1-ch + bias", MST_OP_CONV2D, 3, {4, 4, 1}, {{3, 1, 28, 28}, {8, 1, 3, 3}, {8}}, {1, 1, 1, 1}, 9},
    {"conv2d stride 2", MST_OP_CONV2D, 2, {4, 4}, {{2, 4, 11, 11}, {6, 4, 3, 3}}, {2, 2, 1, 1}, 36},
    {"conv2d 1x1", MST_OP_CONV2D, 2, {4, 4}, {{2, 16, 7, 7}, {8, 16, 1, 1}}, {1, 1, 0, 0}, 16},
    {"conv2d 5x5 no pad", MST_OP_CONV2D, 2, {4, 4}, {{1, 3, 10, 9}, {4, 3, 5, 5}}, {1, 1, 0, 0}, 75},
    {"grad_input 3x3", MST_OP_CONV2D_GRAD_INPUT, 2, {4, 4}, {{2, 16, 12, 12}, {16, 8, 3, 3}}, {1, 1, 1, 1, 12, 12}, 144},
    {"grad_input stride 2", MST_OP_CONV2D_GRAD_INPUT, 2, {4, 4}, {{2, 6, 6, 6}, {6, 4, 3, 3}}, {2, 2, 1, 1, 11, 11}, 54},
    {"grad_weight 3x3", MST_OP_CONV2D_GRAD_WEIGHT, 2, {4, 4}, {{2, 16, 12, 12}, {2, 8, 12, 12}}, {1, 1, 1, 1, 3, 3}, 288},
    {"grad_weight stride 2", MST_OP_CONV2D_GRAD_WEIGHT, 2, {4, 4}, {{2, 6, 6, 6}, {2, 4, 11, 11}}, {2, 2, 1, 1, 3, 3}, 72},
    {"grad_weight stem", MST_OP_CONV2D_GRAD_WEIGHT, 2, {4, 4}, {{3, 8, 28, 28}, {3, 1, 28, 28}}, {1, 1, 1, 1, 3, 3}, 2352},
    /* 3x3 stride 1 with channels in multiples of 16: what oneDNN's Winograd kernels take */
    {"conv2d 3x3 16-ch", MST_OP_CONV2D, 2, {4, 4}, {{2, 16, 14, 14}, {32, 16, 3, 3}}, {1, 1, 1, 1}, 144},
    {"grad_input 3x3 16-ch", MST_OP_CONV2D_GRAD_INPUT, 2, {4, 4}, {{2, 32, 14, 14}, {32, 16, 3, 3}}, {1, 1, 1, 1, 14, 14}, 288},
    {"grad_weight 3x3 16-ch", MST_OP_CONV2D_GRAD_WEIGHT, 2, {4, 4}, {{2, 32, 14, 14}, {2, 16, 14, 14}}, {1, 1, 1, 1, 3, 3}, 392},
};

/* A call of case k on inputs of dtype dt (random, rounded to dt), its output allocated. */
static void make_call(mst_ctx *ctx, const kcase *k, mst_dtype dt, mst_op_call *c) {
    memset(c, 0, sizeof(*c));
    c->op = k->op;
    c->n_in = k->n_in;
    c->n_out = 1;
    memcpy(c->attrs.i, k->attr, sizeof(k->attr));
    for (int i = 0; i < k->n_in; i++) {
        mst_tensor *t = mst_tensor_randn(ctx, MST_DTYPE_F32, k->ndim[i], k->shape[i], 0, 1);
        c->in[i] = dt == MST_DTYPE_F32 ? t : mst_cast(ctx, t, dt);
        assert_non_null(c->in[i]);
    }
    mst_meta m[MST_MAX_OP_OUTPUTS];
    assert_int_equal(mst_op_table[k->op]->infer(ctx, c, m), MST_OK);
    c->out[0] = mst_tensor_new(ctx, dt, m[0].ndim, m[0].shape);
    assert_non_null(c->out[0]);
}

/* The same call in f32 (inputs widened exactly), output fresh. */
static void f32_twin(mst_ctx *ctx, const mst_op_call *c, mst_op_call *r) {
    *r = *c;
    for (int i = 0; i < c->n_in; i++) r->in[i] = c->in[i]->dtype == MST_DTYPE_F32 ? c->in[i] : mst_cast(ctx, c->in[i], MST_DTYPE_F32);
    r->out[0] = mst_tensor_new(ctx, MST_DTYPE_F32, c->out[0]->ndim, c->out[0]->shape);
}

/* Winograd's transforms add and subtract up to ~100x the output's magnitude before they cancel
 * (F(4x4, 3x3)), so its f32 error is larger than a direct convolution's: ~10x the tolerance. */
static void compare(const kcase *k, mst_ctx *ctx, const mst_tensor *y, const mst_tensor *ref, mst_dtype dt, bool winograd) {
    const mst_tensor *yf = y->dtype == MST_DTYPE_F32 ? y : mst_cast(ctx, (mst_tensor *)y, MST_DTYPE_F32);
    const float *a = mst_tensor_f32(yf), *b = mst_tensor_f32(ref);
    double atol = (dt == MST_DTYPE_F32 ? 2e-5 : 4e-3) * sqrt((double)k->red), rtol = dt == MST_DTYPE_F32 ? 1e-5 : 8e-3;
    if (winograd) atol *= 10, rtol *= 10;
    for (int64_t i = 0; i < ref->numel; i++)
        if (!(fabs(a[i] - b[i]) <= atol + rtol * fabs(b[i])))
            fail_msg("%s %s: element %lld is %.8g, reference %.8g (tolerance %.3g)", k->name, mst_dtype_name(dt), (long long)i,
                     a[i], b[i], atol + rtol * fabs(b[i]));
}

static void test_against_reference(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 12, .n_threads = 2});
    mst_grad_set_enabled(ctx, false);
    if (!mst_onednn_available()) {
        printf("  skipped: %s\n", mst_onednn_unavailable_reason());
        mst_ctx_free(ctx);
        return;
    }
    printf("  oneDNN %s\n", mst_onednn_version());
    static const mst_dtype dts[] = {MST_DTYPE_F32, MST_DTYPE_BF16};
    int served = 0, served_blocked = 0, served_winograd = 0;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++)
        for (size_t j = 0; j < 2; j++)
            for (int l = 0; l < MST_ONEDNN_LAYOUT_COUNT; l++) {
                const kcase *k = &k_cases[i];
                mst_dtype dt = dts[j];
                mst_onednn_layout layout = (mst_onednn_layout)l;
                const char *lname = layout == MST_ONEDNN_BLOCKED ? "blocked" : layout == MST_ONEDNN_WINOGRAD ? "winograd" : "plain";
                mst_kernel_fn fn = mst_onednn_kernel(k->op, dt, layout);
                if (layout != MST_ONEDNN_PLAIN && k->op == MST_OP_MATMUL) {
                    assert_null(fn);    /* blocked layouts and Winograd are for convolutions */
                    continue;
                }
                if (layout != MST_ONEDNN_PLAIN && k->op == MST_OP_LINEAR) continue;
                if (layout == MST_ONEDNN_WINOGRAD && dt != MST_DTYPE_F32) {
                    assert_null(fn);    /* oneDNN 2.6's Winograd convolutions are f32 only */
                    continue;
                }
                assert_non_null(fn);
                mst_op_call c, r;
                make_call(ctx, k, dt, &c);
                if (!mst_onednn_supports(ctx, &c, dt, layout)) {
                    printf("  %-26s %-4s %-7s not implemented by oneDNN here\n", k->name, mst_dtype_name(dt), lname);
                    assert_false(dt == MST_DTYPE_F32 && k->op == MST_OP_MATMUL && i == 0);
                    continue;
                }
                served++;
                served_blocked += layout == MST_ONEDNN_BLOCKED;
                served_winograd += layout == MST_ONEDNN_WINOGRAD;
                assert_int_equal(fn(ctx, &c), MST_OK);
                f32_twin(ctx, &c, &r);
                assert_int_equal(mst_op_table[k->op]->ref[MST_DEVICE_CPU][MST_DTYPE_F32](ctx, &r), MST_OK);
                compare(k, ctx, c.out[0], r.out[0], dt, layout == MST_ONEDNN_WINOGRAD);
                printf("  %-26s %-4s %-7s %s\n", k->name, mst_dtype_name(dt), lname, mst_onednn_impl(ctx, &c, dt, layout));
            }
    printf("  %d served, %d of them in blocked layouts, %d through Winograd\n", served, served_blocked, served_winograd);
    assert_true(served > 0);
    assert_true(served_blocked > 0 || !mst_onednn_kernel(MST_OP_CONV2D, MST_DTYPE_F32, MST_ONEDNN_BLOCKED));
    /* oneDNN's jit_wino_4x3 needs its avx512_core ISA (F, BW, VL, DQ); served on this project's
     * AVX-512 machine without AMX. Where the CPU has AMX, whether oneDNN 2.6 still offers it was not
     * checked, so it is not required there. */
    if (mst_cpu_has(MST_CPU_AVX512F) && mst_cpu_has(MST_CPU_AVX512BW) && mst_cpu_has(MST_CPU_AVX512VL) &&
        mst_cpu_has(MST_CPU_AVX512DQ) && !mst_cpu_has(MST_CPU_AMX_TILE))
        assert_true(served_winograd >= 3);
    assert_int_equal(mst_onednn_kernel(MST_OP_MATMUL, MST_DTYPE_F16, MST_ONEDNN_PLAIN) == NULL, true);   /* f16: not served */
    assert_int_equal(mst_onednn_kernel(MST_OP_ADD, MST_DTYPE_F32, MST_ONEDNN_PLAIN) == NULL, true);
    mst_ctx_free(ctx);
}

static bool same_bits(const mst_tensor *a, const mst_tensor *b) {
    return a->numel == b->numel && memcmp(mst_tensor_data(a), mst_tensor_data(b), mst_tensor_nbytes(a)) == 0;
}

/* builtin binds the builtin kernel; auto's output is bit for bit the provider it reports, and so is
 * the same call bound once (mst_kernel_run_bound), at each thread count its own verdict. */
static void test_choice(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 2});
    mst_grad_set_enabled(ctx, false);
    const mst_op_desc *d = mst_op_table[MST_OP_CONV2D];
    mst_ctx_set_kernels(ctx, MST_KERNELS_BUILTIN);
    assert_ptr_equal(mst_op_kernel(ctx, MST_OP_CONV2D, MST_DTYPE_F32), d->kernels[MST_DEVICE_CPU][MST_DTYPE_F32]);
    mst_ctx_set_force_ref(ctx, true);
    mst_ctx_set_kernels(ctx, MST_KERNELS_ONEDNN);
    assert_ptr_equal(mst_op_kernel(ctx, MST_OP_CONV2D, MST_DTYPE_F32), d->ref[MST_DEVICE_CPU][MST_DTYPE_F32]);
    mst_ctx_set_force_ref(ctx, false);
    int n_bound = 0, n_rebound = 0;
    mst_op_call bound_prev[2] = {{.op = MST_OP_COUNT}, {.op = MST_OP_COUNT}};     /* per dtype: the last call bound */
    for (int m = MST_KERNELS_AUTO; m <= MST_KERNELS_ONEDNN; m++)
        for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i += 3)
            for (int bf = 0; bf < 2; bf++) {
                const kcase *k = &k_cases[i];
                mst_dtype dt = bf ? MST_DTYPE_BF16 : MST_DTYPE_F32;
                mst_ctx_set_kernels(ctx, (mst_kernels_mode)m);
                mst_op_call c, b, o;
                make_call(ctx, k, dt, &c);
                b = c, o = c;
                b.out[0] = mst_tensor_new(ctx, dt, c.out[0]->ndim, c.out[0]->shape);
                o.out[0] = mst_tensor_new(ctx, dt, c.out[0]->ndim, c.out[0]->shape);
                mst_kernel_fn fn = mst_op_kernel(ctx, k->op, dt);
                assert_int_equal(fn(ctx, &c), MST_OK);
                mst_provider p = mst_kernel_provider(ctx, &c);
                if (m == MST_KERNELS_ONEDNN)
                    assert_int_equal(p, mst_onednn_supports(ctx, &c, dt, MST_ONEDNN_PLAIN) ? MST_PROVIDER_ONEDNN : MST_PROVIDER_BUILTIN);
                assert_int_equal(mst_kernel_builtin(ctx, mst_op_table[k->op], dt)(ctx, &b), MST_OK);
                if (p == MST_PROVIDER_BUILTIN) {
                    assert_true(same_bits(c.out[0], b.out[0]));
                } else {
                    assert_int_equal(mst_provider_kernel(ctx, p, k->op, dt)(ctx, &o), MST_OK);
                    assert_true(same_bits(c.out[0], o.out[0]));
                }
                printf("  %-7s %-26s %-4s -> %s\n", mst_kernels_mode_name((mst_kernels_mode)m), k->name, mst_dtype_name(dt),
                       mst_provider_name(p));
                if (!mst_kernel_is_choice(fn)) continue;
                /* bound once (graph plans' nodes): the provider the choice reports, its bits; bound
                 * again at another thread count, to that count's verdict */
                mst_kernel_binding bnd = {0};
                mst_op_call r = c;
                r.out[0] = mst_tensor_new(ctx, dt, c.out[0]->ndim, c.out[0]->shape);
                assert_int_equal(mst_kernel_run_bound(ctx, &bnd, &r), MST_OK);
                assert_true(same_bits(c.out[0], r.out[0]));
                assert_int_equal(bnd.provider, p);
                assert_int_equal(bnd.threads, 2);
                assert_ptr_equal(bnd.kernel, mst_provider_kernel(ctx, p, k->op, dt));
                ctx->serial = true;
                assert_int_equal(mst_kernel_run_bound(ctx, &bnd, &r), MST_OK);
                assert_int_equal(bnd.threads, 1);
                assert_int_equal(bnd.provider, mst_kernel_provider(ctx, &c));
                ctx->serial = false;
                assert_int_equal(mst_kernel_run_bound(ctx, &bnd, &r), MST_OK);
                assert_int_equal(bnd.threads, 2);
                assert_int_equal(bnd.provider, p);
                assert_true(same_bits(c.out[0], r.out[0]));
                assert_int_equal(bnd.call_key, mst_op_signature_key(&c));
                /* another shape through the same binding (a dynamic batch's smaller one): bound again */
                mst_op_call *prev = &bound_prev[bf];
                if (prev->op == c.op) {
                    assert_int_equal(mst_kernel_run_bound(ctx, &bnd, prev), MST_OK);
                    assert_int_equal(bnd.call_key, mst_op_signature_key(prev));
                    assert_int_equal(bnd.provider, mst_kernel_provider(ctx, prev));
                    assert_true(mst_op_signature_key(prev) != mst_op_signature_key(&c));
                    n_rebound++;
                }
                *prev = r;
                n_bound++;
            }
    if (mst_onednn_available()) assert_true(n_bound > 0 && n_rebound > 0);     /* auto and onednn modes choose per shape */
    printf("  %d calls bound, %d bound again on another shape of their op\n", n_bound, n_rebound);
    mst_ctx_free(ctx);
}

/* t in nChw16c (a new tensor, same dtype and logical shape). */
static mst_tensor *blocked_twin(mst_ctx *ctx, const mst_tensor *t, bool copy) {
    mst_tensor *b = mst_tensor_new(ctx, t->dtype, t->ndim, t->shape);
    assert_non_null(b);
    if (copy)
        mst_nchw16c_from_plain(NULL, mst_tensor_data(t), mst_tensor_data(b), t->shape[0], t->shape[1],
                               t->shape[2] * t->shape[3], mst_dtype_size(t->dtype));
    b->layout = MST_LAYOUT_NCHW16C;
    return b;
}

/* The call with every operand its op's descriptor lets lie in nChw16c (and can) in that layout, as
 * graph mode's blocked chains make it, gives the plain call's bits: eager and graph share a verdict. */
static bool assert_blocked_call_same_bits(mst_ctx *ctx, mst_kernel_fn fn, const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_op_call b = *c;
    int blocked = 0;
    for (int i = 0; i < c->n_in; i++)
        if ((d->blocked_in >> i & 1) && mst_layout_blockable(c->in[i]->dtype, c->in[i]->ndim, c->in[i]->shape))
            b.in[i] = blocked_twin(ctx, c->in[i], true), blocked++;
    bool out_blocked = (d->blocked_out & 1) && mst_layout_blockable(c->out[0]->dtype, c->out[0]->ndim, c->out[0]->shape);
    b.out[0] = out_blocked ? blocked_twin(ctx, c->out[0], false) : mst_tensor_new(ctx, c->out[0]->dtype, c->out[0]->ndim, c->out[0]->shape);
    if (!blocked) return false;
    assert_int_equal(fn(ctx, &b), MST_OK);
    const mst_tensor *o = b.out[0];
    size_t bytes = mst_tensor_nbytes(c->out[0]);
    void *plain = malloc(bytes);
    assert_non_null(plain);
    if (out_blocked)
        mst_nchw16c_to_plain(NULL, mst_tensor_data(o), plain, o->shape[0], o->shape[1], o->shape[2] * o->shape[3],
                             mst_dtype_size(o->dtype));
    else
        memcpy(plain, mst_tensor_data(o), bytes);
    assert_memory_equal(plain, mst_tensor_data(c->out[0]), bytes);
    free(plain);
    return true;
}

/* onednn_f32: half convolutions on oneDNN's f32 kernels, the operands widened, the output rounded:
 * against the f32 reference within the half type's tolerance (Winograd's where its f32 verdict
 * takes it), f16 and bf16; only convolutions, only half keys; the nChw16c call (bf16: graph mode's
 * layout) bit for bit the plain one. */
static void test_f32_provider(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 13, .n_threads = 2});
    mst_grad_set_enabled(ctx, false);
    if (!mst_onednn_available()) {
        mst_ctx_free(ctx);
        return;
    }
    static const mst_dtype dts[] = {MST_DTYPE_F16, MST_DTYPE_BF16};
    int served = 0, served_blocked = 0;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++)
        for (size_t j = 0; j < 2; j++) {
            const kcase *k = &k_cases[i];
            mst_kernel_fn fn = mst_provider_kernel(ctx, MST_PROVIDER_ONEDNN_F32, k->op, dts[j]);
            bool conv = k->op == MST_OP_CONV2D || k->op == MST_OP_CONV2D_GRAD_INPUT || k->op == MST_OP_CONV2D_GRAD_WEIGHT;
            assert_int_equal(fn != NULL, conv);
            assert_true(mst_kernel_choice_applies(k->op, dts[j]) || !conv);
            if (!fn) continue;
            mst_op_call c, r;
            make_call(ctx, k, dts[j], &c);
            if (!mst_onednn_supports(ctx, &c, MST_DTYPE_F32, MST_ONEDNN_BLOCKED)) continue;
            assert_int_equal(fn(ctx, &c), MST_OK);
            f32_twin(ctx, &c, &r);
            assert_int_equal(mst_op_table[k->op]->ref[MST_DEVICE_CPU][MST_DTYPE_F32](ctx, &r), MST_OK);
            compare(k, ctx, c.out[0], r.out[0], dts[j], true);
            served_blocked += assert_blocked_call_same_bits(ctx, fn, &c);
            served++;
        }
    printf("  onednn_f32: %d half convolutions served, %d also as nChw16c calls\n", served, served_blocked);
    assert_true(served >= 6);
    assert_true(served_blocked >= 3);     /* the three 16-channel cases in bf16 */
    assert_null(mst_provider_kernel(ctx, MST_PROVIDER_ONEDNN_F32, MST_OP_CONV2D, MST_DTYPE_F32));
    mst_ctx_free(ctx);
}

static char g_verdicts[256];     /* this binary's own verdict file (main) */

/* Appends a quiet verdict line for c at `threads` threads to the verdict file: the times make
 * `winner` (builtin or onednn) the faster by far, the other providers serve nothing. */
static void put_verdict(const mst_op_call *c, int threads, mst_provider winner) {
    mst_shape_key k;
    mst_shape_key_of(&k, c, c->in[0]->dtype);
    k.threads = threads;
    char machine[320];
    mst_cpu_machine_id(machine, sizeof(machine));
    FILE *f = fopen(g_verdicts, "a");
    assert_non_null(f);
    fprintf(f, "v7\t%s\t%s\t%s\t%016llx\t%s\t%.1f\t%.1f\t0.0\t0.0\t0.0\tquiet\ttest\n", machine, mst_op_name(c->op),
            mst_dtype_name(c->in[0]->dtype), (unsigned long long)mst_shape_key_hash(&k), mst_provider_name(winner),
            winner == MST_PROVIDER_BUILTIN ? 1.0 : 100.0, winner == MST_PROVIDER_BUILTIN ? 100.0 : 1.0);
    fclose(f);
}

/* Each thread keeps a copy of the verdicts it used (the per-call choice's hot path, without the
 * shape key or the process-wide lock): the copy must answer per shape and per thread count exactly
 * as the map does. Two shapes of one op get opposite verdicts from the file, and each shape opposite
 * verdicts at one and at two threads; asked in turns, every answer must be its own. */
static void test_thread_verdicts(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = 2});
    assert_non_null(ctx);
    mst_ctx_set_kernels(ctx, MST_KERNELS_AUTO);
    static const kcase shapes[2] = {
        {"matmul 3x5 5x7", MST_OP_MATMUL, 2, {2, 2}, {{3, 5}, {5, 7}}, {0, 0}, 5},
        {"matmul 3x6 6x7", MST_OP_MATMUL, 2, {2, 2}, {{3, 6}, {6, 7}}, {0, 0}, 6},
    };
    mst_op_call c[2];
    for (int i = 0; i < 2; i++) make_call(ctx, &shapes[i], MST_DTYPE_F32, &c[i]);
    if (!mst_onednn_supports(ctx, &c[0], MST_DTYPE_F32, MST_ONEDNN_PLAIN) ||
        !mst_onednn_supports(ctx, &c[1], MST_DTYPE_F32, MST_ONEDNN_PLAIN)) {
        /* only builtin serves them: nothing is chosen, every answer is builtin */
        printf("  oneDNN does not serve the shapes here: the copies hold builtin only\n");
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < 2; i++) assert_int_equal(mst_kernel_provider(ctx, &c[i]), MST_PROVIDER_BUILTIN);
        mst_ctx_free(ctx);
        return;
    }
    /* shape 0: oneDNN at two threads, builtin at one; shape 1 the other way round */
    put_verdict(&c[0], 2, MST_PROVIDER_ONEDNN);
    put_verdict(&c[0], 1, MST_PROVIDER_BUILTIN);
    put_verdict(&c[1], 2, MST_PROVIDER_BUILTIN);
    put_verdict(&c[1], 1, MST_PROVIDER_ONEDNN);
    for (int r = 0; r < 4; r++)
        for (int serial = 0; serial < 2; serial++)
            for (int i = 0; i < 2; i++) {
                ctx->serial = serial;
                const mst_provider want = (i == 0) == (serial == 0) ? MST_PROVIDER_ONEDNN : MST_PROVIDER_BUILTIN;
                assert_int_equal(mst_kernel_provider(ctx, &c[i]), want);
                /* and the per-call kernel runs it: the winner's bits */
                mst_op_call o = c[i], w = c[i];
                o.out[0] = mst_tensor_new(ctx, MST_DTYPE_F32, c[i].out[0]->ndim, c[i].out[0]->shape);
                w.out[0] = mst_tensor_new(ctx, MST_DTYPE_F32, c[i].out[0]->ndim, c[i].out[0]->shape);
                assert_int_equal(mst_op_kernel(ctx, MST_OP_MATMUL, MST_DTYPE_F32)(ctx, &o), MST_OK);
                assert_int_equal(mst_provider_kernel(ctx, want, MST_OP_MATMUL, MST_DTYPE_F32)(ctx, &w), MST_OK);
                assert_true(same_bits(o.out[0], w.out[0]));
            }
    ctx->serial = false;
    printf("  two shapes x two thread counts, asked in turns 4 times: each its own verdict\n");
    mst_ctx_free(ctx);
}

int main(void) {
    /* a verdict file of this binary's own (test_thread_verdicts writes made-up verdicts into it) */
    const char *tmp = getenv("TMPDIR");
    snprintf(g_verdicts, sizeof(g_verdicts), "%s/mstune-test-onednn-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(g_verdicts);
    if (fd < 0) {
        perror("test_onednn: mkstemp");
        return 1;
    }
    close(fd);
    setenv("MSTUNE_KERNELS_CACHE", g_verdicts, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_f32_provider),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_thread_verdicts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(g_verdicts);
    return rc;
}
