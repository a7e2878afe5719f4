/* cmd_list.c — `mstune list [workloads|datasets|ops|amp|cpu|devices|keys]`: what this build offers. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "runtime/amp/autocast.h"
#include "runtime/amp/half.h"
#include "runtime/backend/onednn.h"
#include "runtime/cpu_features.h"
#include "runtime/device.h"
#include "runtime/op.h"
#include "workloads/zoo.h"

static void list_workloads(void) {
    printf("workloads (model.name):\n");
    for (int i = 0; i < mst_zoo_count; i++)
        printf("  %-12s %s\n  %-12s input: %s; keys: %s\n", mst_zoo[i].name, mst_zoo[i].description, "", mst_zoo[i].input,
               mst_zoo[i].keys);
    printf("job files: workloads/jobs/quickstart.yaml, fashion_mlp.yaml, fashion_cnn.yaml, langid_transformer.yaml, fashion_sr.yaml\n");
}

static void list_datasets(void) {
    printf("datasets (data.dataset):\n");
    printf("  %-14s Fashion-MNIST, 60000 train / 10000 test 28x28 grey images, 10 classes; IDX files from Debian's\n"
           "  %-14s dataset-fashion-mnist package in /usr/share/datasets/fashion-mnist (data.path)\n",
           "fashion_mnist", "");
    printf("  %-14s generated samples of any shape and class count (data.synthetic.*), seeded\n", "synthetic");
    printf("  %-14s language identification, 8 classes (en de fr it es pt nl sv): words of Debian's word lists\n"
           "  %-14s (wamerican, wngerman, ...) in /usr/share/dict as character tokens; split by word hash, words in\n"
           "  %-14s several lists dropped (data.langid.*)\n", "langid", "", "");
    printf("  %-14s super-resolution pairs: Fashion-MNIST box-downsampled x2 (1, 14, 14) -> the (1, 28, 28) image\n"
           "  %-14s (data.path as fashion_mnist)\n", "fashion_sr", "");
}

static void list_ops(void) {
    printf("ops:\n  %-20s %6s %7s  %-24s %s\n", "name", "inputs", "outputs", "cpu dtypes", "backward");
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        char dtypes[64] = "";
        size_t k = 0;
        for (int t = 0; t < MST_DTYPE_COUNT; t++) {
            bool via_f32 = !d->kernels[MST_DEVICE_CPU][t] && mst_half_kernel_applies(d, (mst_dtype)t);
            if (mst_backend_cpu.supports((mst_op)op, (mst_dtype)t))
                k += (size_t)snprintf(dtypes + k, sizeof(dtypes) - k, "%s%s%s", k ? "," : "", mst_dtype_name((mst_dtype)t),
                                      via_f32 ? "*" : "");
        }
        char arity[16];
        if (d->min_inputs == d->max_inputs) snprintf(arity, sizeof(arity), "%d", d->min_inputs);
        else snprintf(arity, sizeof(arity), "%d..%d", d->min_inputs, d->max_inputs);
        printf("  %-20s %6s %7d  %-24s %s\n", d->name, arity, d->n_outputs, (d->flags & MST_OPF_VIEW) ? "(view)" : dtypes,
               d->backward ? "yes" : "-");
    }
    printf("  * stored half, computed by the op's f32 kernel (runtime/amp/half_kernels.c)\n");
}

/* The autocast policy per op and level; ops that are never cast at any level are summarized. */
static void list_amp(void) {
    printf("amp levels (MindSpore semantics; amp.level O0..O3, amp.dtype f16|bf16):\n"
           "  O0 all f32\n"
           "  O1 allow-list ops in half, their float outputs cast back to f32\n"
           "  O2 everything in half except a keep-f32 list (norms, softmax, loss, reductions)\n"
           "  O3 everything in half, norms and loss included\n"
           "  mutated inputs (running statistics) and integer inputs are never cast; parameters are cast\n"
           "  once per forward/backward; backward and optimizer updates run with autocast off\n\n");
    printf("  %-20s %-10s %-6s %-6s\n", "op", "O1", "O2", "O3");
    int n_never = 0;
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d) continue;
        mst_amp_action a[4];
        bool any = false;
        for (int level = 1; level <= 3; level++) any |= (a[level] = mst_amp_policy((mst_op)op, level)) != MST_AMP_NEVER;
        if (!any) { n_never++; continue; }
        char o1[16];
        snprintf(o1, sizeof(o1), "%s%s", mst_amp_action_name(a[1]), mst_amp_casts_back((mst_op)op, 1) ? "->f32" : "");
        printf("  %-20s %-10s %-6s %-6s\n", d->name, a[1] == MST_AMP_NEVER ? "-" : o1,
               a[2] == MST_AMP_NEVER ? "-" : mst_amp_action_name(a[2]), a[3] == MST_AMP_NEVER ? "-" : mst_amp_action_name(a[3]));
    }
    printf("  never cast (%d ops):", n_never);
    for (int op = 0, col = 22; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d || mst_amp_policy((mst_op)op, 3) != MST_AMP_NEVER) continue;
        if (col + (int)strlen(d->name) > 100) { printf("\n   "); col = 3; }
        col += printf(" %s", d->name);
    }
    printf("\n\n  half <-> f32 conversions: %s path\n", mst_half_path_name(mst_half_best_path()));
    /* which provider can compute half natively, as detected now */
    printf("  bf16 matmul/linear/conv2d (+ both gradients): %s\n",
           mst_onednn_available() ? "oneDNN, natively in bf16 with f32 accumulation, where runtime.kernels allows it and (auto) "
                                    "it measures faster; else stored bf16, computed in f32"
                                  : "stored bf16, computed in f32 (oneDNN unavailable)");
    if (mst_onednn_available()) printf("    oneDNN %s\n", mst_onednn_version());
    else printf("    %s\n", mst_onednn_unavailable_reason());
    printf("  f16 everywhere: stored f16, computed in f32 (oneDNN 2.6 has no f16 matmul/convolution on the CPU)\n");
}

/* What run-time detection found (runtime/cpu_features.c), and what MSTUNE_CPU_MASK hides. */
static void list_cpu(void) {
    const mst_cpu_info *ci = mst_cpu_info_get();
    printf("cpu: %s\n  %-14s %s\n", ci->model, "feature", "status");
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++) {
        bool det = ci->detected >> f & 1, hid = ci->masked >> f & 1;
        const char *st = !det ? "-" : hid ? "hidden (MSTUNE_CPU_MASK)" : "yes";
        if (!det && f >= MST_CPU_AMX_TILE && ci->amx_cpu && !ci->amx_permitted) st = "on the CPU, but Linux refused the tile state";
        printf("  %-14s %s\n", mst_cpu_feature_name((mst_cpu_feature)f), st);
    }
}

/* The backend registry (runtime/device.h): each device kind, whether this build has it, and per
 * provider which ops and dtypes it serves. */
static void list_devices(void) {
    printf("devices:\n");
    for (int k = 0; k < MST_DEVICE_COUNT; k++) {
        const mst_backend *b = mst_backend_get((mst_device)k);
        if (!b) {
            printf("  %-6s %s\n", mst_device_name((mst_device)k), mst_device_unavailable((mst_device)k));
            continue;
        }
        printf("  %-6s available; kernel providers:\n", b->name);
        for (int p = 0; p < b->n_providers; p++) {
            const mst_backend_provider *pv = &b->providers[p];
            int n_ops = 0;
            bool dt_any[MST_DTYPE_COUNT] = {false};
            for (int op = 0; op < MST_OP_COUNT; op++) {
                bool served = false;
                for (int t = 0; t < MST_DTYPE_COUNT; t++)
                    if (pv->serves((mst_op)op, (mst_dtype)t)) served = dt_any[t] = true;
                n_ops += served;
            }
            char dts[64] = "";
            size_t n = 0;
            for (int t = 0; t < MST_DTYPE_COUNT; t++)
                if (dt_any[t]) n += (size_t)snprintf(dts + n, sizeof(dts) - n, "%s%s", n ? "," : "", mst_dtype_name((mst_dtype)t));
            const char *why = pv->unavailable();
            printf("    %-15s %3d ops  %-24s %s%s\n", pv->name, n_ops, dts, why ? "unavailable: " : "available",
                   why ? why : "");
        }
    }
}

static int on_topic(void *ctx, const mst_cli_opt *o, const char *value) {
    const char **what = ctx;
    if (o) return 0;
    if (*what) {
        fprintf(stderr, "mstune list: one topic expected, got '%s' and '%s'\n", *what, value);
        return 1;
    }
    *what = value;
    return 0;
}

int mst_cmd_list(int argc, char **argv) {
    const char *what = NULL;
    if (mst_cli_parse(mst_cli_command("list"), argc, argv, on_topic, &what) != MST_EXIT_OK) return MST_EXIT_INPUT;
    if (!what) what = "all";
    bool all = strcmp(what, "all") == 0;
    if (!(all || !strcmp(what, "workloads") || !strcmp(what, "datasets") || !strcmp(what, "ops") ||
                      !strcmp(what, "amp") || !strcmp(what, "cpu") || !strcmp(what, "devices") || !strcmp(what, "keys"))) {
        static const char *const topics[] = {"workloads", "datasets", "ops", "amp", "cpu", "devices", "keys"};
        const char *near = mst_cli_closest(what, topics, 7);
        fprintf(stderr, "mstune list: unknown topic '%s'%s%s%s\nusage: mstune list [workloads|datasets|ops|amp|cpu|devices|keys]\n", what,
                near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        return MST_EXIT_INPUT;
    }
    if (all || !strcmp(what, "workloads")) list_workloads();
    if (all) putchar('\n');
    if (all || !strcmp(what, "datasets")) list_datasets();
    if (all) putchar('\n');
    if (all || !strcmp(what, "ops")) list_ops();
    if (all) putchar('\n');
    if (all || !strcmp(what, "amp")) list_amp();
    if (all) putchar('\n');
    if (all || !strcmp(what, "cpu")) list_cpu();
    if (all) putchar('\n');
    if (all || !strcmp(what, "devices")) list_devices();
    if (!strcmp(what, "keys")) mst_job_schema_print(stdout);
    if (all) printf("\njob keys: mstune list keys\n");
    return MST_EXIT_OK;
}
