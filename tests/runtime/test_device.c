/* test_device.c — the backend registry (runtime/device.h): the CPU backend is present and answers
 * supports() for real ops and dtypes, in agreement with the kernel it binds for every (op, dtype);
 * its lookup is what both executors run (mst_op_kernel) under each runtime.kernels mode and the
 * reference switch; its memory and copies work and are counted; and a device kind this build has
 * no backend for (CUDA here) answers through the same calls — unavailable with a reason, supports
 * nothing, refused by mst_ctx_set_device with the context still usable — never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/amp/half.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/ops.h"

static void test_registry(void **state) {
    (void)state;
    const mst_backend *cpu = mst_backend_get(MST_DEVICE_CPU);
    assert_ptr_equal(cpu, &mst_backend_cpu);
    assert_int_equal(cpu->kind, MST_DEVICE_CPU);
    assert_string_equal(cpu->name, "cpu");
    assert_null(mst_device_unavailable(MST_DEVICE_CPU));
    assert_int_equal(mst_device_parse("cpu"), MST_DEVICE_CPU);
    assert_int_equal(mst_device_parse("cuda"), MST_DEVICE_CUDA);
    assert_int_equal(mst_device_parse("tpu"), -1);
    assert_string_equal(mst_device_name(MST_DEVICE_CUDA), "cuda");
    assert_null(mst_backend_get(MST_DEVICE_COUNT));
    /* the CPU has the memory and kernel halves of the interface; it runs synchronously, so no streams */
    assert_non_null(cpu->alloc);
    assert_non_null(cpu->free);
    assert_non_null(cpu->copy);
    assert_non_null(cpu->sync);
    assert_non_null(cpu->kernel);
    assert_non_null(cpu->supports);
    assert_null(cpu->stream_new);
    assert_null(cpu->event_record);
    assert_int_equal(cpu->n_providers, MST_PROVIDER_COUNT);
    for (int p = 0; p < cpu->n_providers; p++)
        assert_string_equal(cpu->providers[p].name, mst_provider_name((mst_provider)p));
    assert_null(cpu->providers[MST_PROVIDER_BUILTIN].unavailable());
    assert_true((cpu->providers[MST_PROVIDER_ONEDNN].unavailable() == NULL) == mst_onednn_available());
}

static void test_cpu_supports(void **state) {
    (void)state;
    const mst_backend *cpu = &mst_backend_cpu;
    assert_true(cpu->supports(MST_OP_CONV2D, MST_DTYPE_F32));
    assert_true(cpu->supports(MST_OP_MATMUL, MST_DTYPE_F64));
    assert_true(cpu->supports(MST_OP_MATMUL, MST_DTYPE_BF16));      /* half via f32, or oneDNN */
    assert_true(cpu->supports(MST_OP_RESHAPE, MST_DTYPE_I32));      /* a view: no kernel needed */
    assert_true(cpu->supports(MST_OP_CAST, MST_DTYPE_U8));
    assert_false(cpu->supports(MST_OP_CONV2D, MST_DTYPE_I32));
    assert_false(cpu->supports(MST_OP_SOFTMAX, MST_DTYPE_U8));
    assert_false(cpu->supports(MST_OP_COUNT, MST_DTYPE_F32));
    assert_false(cpu->supports(MST_OP_ADD, MST_DTYPE_COUNT));
    assert_true(mst_device_supports(MST_DEVICE_CPU, MST_OP_LINEAR, MST_DTYPE_F32));
    /* the providers' own answers */
    const mst_backend_provider *pv = cpu->providers;
    assert_true(pv[MST_PROVIDER_BUILTIN].serves(MST_OP_CONV2D, MST_DTYPE_F32));
    assert_false(pv[MST_PROVIDER_BUILTIN].serves(MST_OP_CONV2D, MST_DTYPE_I32));
    assert_int_equal(pv[MST_PROVIDER_ONEDNN].serves(MST_OP_MATMUL, MST_DTYPE_F32),
                     mst_onednn_kernel(MST_OP_MATMUL, MST_DTYPE_F32, MST_ONEDNN_PLAIN) != NULL);
    assert_false(pv[MST_PROVIDER_ONEDNN].serves(MST_OP_ADD, MST_DTYPE_F32));
    assert_false(pv[MST_PROVIDER_ONEDNN].serves(MST_OP_MATMUL, MST_DTYPE_F16));     /* oneDNN 2.6: no f16 on the CPU */
}

/* supports() and the bound kernel agree for every op and dtype, in every mode; builtin mode binds
 * the descriptor's own CPU kernel (or the half kernel), force_ref its reference. */
static void test_cpu_kernel_lookup(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    assert_non_null(ctx);
    assert_ptr_equal(ctx->backend, &mst_backend_cpu);
    for (int m = 0; m < MST_KERNELS_MODE_COUNT; m++) {
        mst_ctx_set_kernels(ctx, (mst_kernels_mode)m);
        for (int op = 0; op < MST_OP_COUNT; op++) {
            const mst_op_desc *d = mst_op_table[op];
            if (d->flags & MST_OPF_VIEW) continue;
            for (int t = 0; t < MST_DTYPE_COUNT; t++) {
                mst_kernel_fn k = mst_backend_cpu.kernel(ctx, (mst_op)op, (mst_dtype)t);
                assert_ptr_equal(k, mst_op_kernel(ctx, (mst_op)op, (mst_dtype)t));
                if ((k != NULL) != mst_backend_cpu.supports((mst_op)op, (mst_dtype)t))
                    fail_msg("%s %s: kernel %s but supports() says %d", d->name, mst_dtype_name((mst_dtype)t),
                             k ? "bound" : "NULL", mst_backend_cpu.supports((mst_op)op, (mst_dtype)t));
                if (m == MST_KERNELS_BUILTIN) {
                    mst_kernel_fn own = d->kernels[MST_DEVICE_CPU][t];
                    if (!own && mst_half_kernel_applies(d, (mst_dtype)t)) own = mst_half_kernel;
                    assert_ptr_equal(k, own);
                }
            }
        }
    }
    mst_ctx_set_force_ref(ctx, true);
    const mst_op_desc *conv = mst_op_table[MST_OP_CONV2D];
    assert_ptr_equal(mst_op_kernel(ctx, MST_OP_CONV2D, MST_DTYPE_F32), conv->ref[MST_DEVICE_CPU][MST_DTYPE_F32]);
    assert_null(mst_backend_cpu.kernel(ctx, MST_OP_COUNT, MST_DTYPE_F32));
    mst_ctx_free(ctx);
}

static void test_cpu_memory(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 2, .n_threads = 1});
    const mst_backend *b = ctx->backend;
    int64_t before = mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE];
    float *dev = b->alloc(ctx, 64 * sizeof(float), MST_MEM_WORKSPACE);
    float *dev2 = b->alloc(ctx, 64 * sizeof(float), MST_MEM_WORKSPACE);
    assert_non_null(dev);
    assert_non_null(dev2);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE] - before, 2 * 64 * (int64_t)sizeof(float));
    float host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (float)i * 0.5f - 7.0f;
    assert_int_equal(b->copy(ctx, dev, host, sizeof(host), MST_COPY_HOST_TO_DEVICE), MST_OK);
    assert_int_equal(b->copy(ctx, dev2, dev, sizeof(host), MST_COPY_DEVICE_TO_DEVICE), MST_OK);
    memset(back, 0, sizeof(back));
    assert_int_equal(b->copy(ctx, back, dev2, sizeof(back), MST_COPY_DEVICE_TO_HOST), MST_OK);
    assert_memory_equal(back, host, sizeof(host));
    assert_int_equal(b->sync(ctx), MST_OK);
    assert_int_equal(b->copy(ctx, NULL, host, sizeof(host), MST_COPY_HOST_TO_DEVICE), MST_ERR_ARG);
    assert_non_null(strstr(mst_ctx_error(ctx), "NULL destination"));
    mst_ctx_clear_error(ctx);
    assert_int_equal(b->copy(ctx, NULL, NULL, 0, MST_COPY_HOST_TO_DEVICE), MST_OK);      /* nothing to copy */
    b->free(ctx, dev);
    b->free(ctx, dev2);
    assert_int_equal(mst_ctx_mem(ctx)->in_use[MST_MEM_WORKSPACE], before);
    /* tensors record the device their storage lives on */
    mst_pool_push(ctx);
    mst_tensor *t = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 4});
    assert_non_null(t);
    assert_int_equal(t->storage->device, MST_DEVICE_CPU);
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
}

/* A kind without a backend answers cleanly through every entry point. */
static void test_unavailable_cuda(void **state) {
    (void)state;
#ifdef MSTUNE_HAVE_CUDA
    skip();
#else
    assert_null(mst_backend_get(MST_DEVICE_CUDA));
    const char *why = mst_device_unavailable(MST_DEVICE_CUDA);
    assert_non_null(why);
    assert_non_null(strstr(why, "not available in this build"));
    assert_false(mst_device_supports(MST_DEVICE_CUDA, MST_OP_MATMUL, MST_DTYPE_F32));
    assert_false(mst_device_supports(MST_DEVICE_CUDA, MST_OP_RESHAPE, MST_DTYPE_F32));
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = 1});
    assert_int_equal(mst_ctx_set_device(ctx, MST_DEVICE_CUDA), MST_ERR_UNSUPPORTED);
    assert_non_null(strstr(mst_ctx_error(ctx), "cuda is not available in this build"));
    assert_ptr_equal(ctx->backend, &mst_backend_cpu);       /* unchanged, and still works */
    mst_ctx_clear_error(ctx);
    assert_int_equal(mst_ctx_set_device(ctx, MST_DEVICE_CPU), MST_OK);
    mst_pool_push(ctx);
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){8});
    mst_tensor *s = mst_add(ctx, a, a);
    assert_non_null(s);
    mst_pool_pop(ctx);
    mst_ctx_free(ctx);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_cpu_supports),
        cmocka_unit_test(test_cpu_kernel_lookup),
        cmocka_unit_test(test_cpu_memory),
        cmocka_unit_test(test_unavailable_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
