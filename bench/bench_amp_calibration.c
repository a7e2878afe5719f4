/* bench_amp_calibration.c — the advisor's AMP calibration (advisor/calibration.h) on a stored
 * profile: every kernel call signature it rebuilt, its f32 and half time per call, the ratio, and
 * the AMP rule's prediction from them. Reads and writes the calibration file like `mstune advise`
 * (MSTUNE_AMP_CALIBRATION=off measures everything now).
 *
 *     bench_amp_calibration out/fashion_mlp/profile.db [bf16|f16] [threads] [auto|onednn|builtin]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/calibration.h"
#include "advisor/finding.h"
#include "runtime/cpu_features.h"
#include "util/fsutil.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROFILE.db [bf16|f16] [threads] [auto|onednn|builtin]\n", argv[0]);
        return 2;
    }
    static rpt_profile p;
    static mst_amp_calib c;
    char err[600];
    if (rpt_profile_load(&p, argv[1], err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 2;
    }
    mst_amp_calib_opts o = {.half = argc > 2 ? argv[2] : "bf16", .n_threads = argc > 3 ? atoi(argv[3]) : 1,
                            .kernels = argc > 4 ? argv[4] : "auto", .budget_s = 30};
    /* the model's parameter count from summary.json beside the profile (O2 casts them each step) */
    char sum_path[1200];
    snprintf(sum_path, sizeof(sum_path), "%s", argv[1]);
    char *slash = strrchr(sum_path, '/');
    snprintf(slash ? slash + 1 : sum_path, sizeof(sum_path) - (size_t)(slash ? slash + 1 - sum_path : 0), "summary.json");
    size_t len = 0;
    char *text = mst_read_file(sum_path, &len);
    cJSON *summary = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    o.param_elems = (int64_t)mst_cfg_num(summary, "model_params", 0);
    cJSON_Delete(summary);
    if (mst_amp_calibrate(&p, &o, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        rpt_profile_free(&p);
        return 2;
    }
    char machine[320];
    mst_cpu_machine_id(machine, sizeof(machine));
    printf("machine: %s\nthreads %d, runtime.kernels %s, half %s; cache %s\n", machine, o.n_threads, o.kernels, o.half,
           c.path[0] ? c.path : "(off)");
    printf("%-22s %-44s %8s %12s %12s %7s  %s\n", "slice", "signature", "calls", "f32 us", "half us", "ratio", "note");
    for (int i = 0; i < c.n; i++) {
        const mst_amp_calib_row *r = &c.rows[i];
        char sig[45];
        snprintf(sig, sizeof(sig), "%s", r->sig);
        if (r->measured)
            printf("%-22s %-44s %8lld %12.2f %12.2f %6.2fx  %s\n", r->name, sig, (long long)r->calls, r->f32_ns / 1e3,
                   r->half_ns / 1e3, r->half_ns / r->f32_ns, r->cached ? "cached" : "measured now");
        else
            printf("%-22s %-44s %8lld %12s %12s %7s  %s\n", r->name, sig, (long long)r->calls, "-", "-", "-", r->note);
    }
    printf("O2 casts per step (parameters to half, gradients to f32): %lld elements, %.3f ms%s\n", (long long)c.param_elems, c.cast_ns / 1e6,
           c.cast_cached ? " (cached)" : "");
    double k = p.bd.share[MST_CAT_KERNEL], uncal;
    char cite[400];
    double s = mst_amp_predict(&p, &c, k, &uncal, cite, sizeof(cite));
    printf("per op: %s\nkernel share %.1f%%, uncalibrated %.1f%% of kernel time: predicted O2 step speedup %.3fx "
           "(%d measured in %.2f s, %d cached)\n", cite, 100 * k, 100 * uncal, s, c.n_measured, c.seconds, c.n_cached);
    rpt_profile_free(&p);
    return 0;
}
