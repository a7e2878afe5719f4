/* calibration.h — the AMP rule's per-op rates, measured on this machine: each kernel call the
 * profile recorded (its op, input shapes and attributes: profiler/profile_view.h rpt_op_sig) is
 * rebuilt and timed in f32 and with the inputs O2 would give it in the half dtype, through the
 * runtime's own kernel lookup (so oneDNN, AMX where present and the half-via-f32 path all show as
 * they would in training), plus the casts O2 adds per step (parameters to half, their gradients
 * back to f32) and the dynamic loss scaler's unscale-and-check pass over the gradients.
 *
 * Results are cached per machine in a tab-separated file, one line per call signature:
 *   amp1 <TAB> machine <TAB> build <TAB> kernels <TAB> threads <TAB> half <TAB> op <TAB> signature <TAB> f32 us <TAB> half us
 * machine is the CPU model and its available features (as runtime/backend/kernel_choice.c keys
 * it), build the mstune version and git revision; a line for another machine, build, thread
 * budget or kernels mode is ignored, as is any line that does not parse. MSTUNE_AMP_CALIBRATION
 * names the file (`off`: measure every time, write nothing); default
 * $XDG_CACHE_HOME/mstune/amp-calibration.tsv (or ~/.cache/...). New lines are appended with one
 * O_APPEND write each (whole lines even with concurrent writers); the first line for a key wins.
 *
 *     mst_amp_calib cal;
 *     if (mst_amp_calibrate(&prof, &opts, &cal, err, sizeof(err)) == 0)
 *         double r = mst_amp_calib_ratio(&cal, "linear", NULL);   // half time / f32 time
 */
#ifndef MST_ADVISOR_CALIBRATION_H
#define MST_ADVISOR_CALIBRATION_H

#include <stdbool.h>
#include <stdint.h>

#include "profiler/profile_view.h"

#define MST_AMP_CALIB_MAX 64
#define MST_AMP_SIG_LEN 512

typedef struct {
    char name[48];              /* the profile's kernel slice (op_stats name, e.g. "conv2d+relu") */
    char op[32];                /* the op rebuilt (mst_op_name) */
    char sig[MST_AMP_SIG_LEN];
    int64_t calls;              /* in the profile */
    bool measured;              /* f32_ns and half_ns hold times */
    bool cached;                /* ... read from the cache file, not measured now */
    bool f32_at_o2;             /* O2 leaves the op in f32: ratio 1 by definition */
    double f32_ns, half_ns;     /* best time per call */
    char note[128];             /* when not measured: why */
} mst_amp_calib_row;

typedef struct {
    const char *half;           /* "bf16" or "f16" */
    const char *kernels;        /* runtime.kernels: "auto", "onednn", "builtin" */
    int n_threads;              /* the job's thread budget (0: all cores) */
    double budget_s;            /* measuring stops after this many seconds (<= 0: 5) */
    const char *cache_path;     /* NULL: MSTUNE_AMP_CALIBRATION / the default; "" or "off": none */
    int64_t param_elems;        /* the model's parameters (summary.json model_params); 0: from the
                                   profile's peak parameter memory, when recorded */
} mst_amp_calib_opts;

typedef struct {
    char half[8];
    mst_amp_calib_row rows[MST_AMP_CALIB_MAX];
    int n;
    int64_t param_elems;        /* parameter elements O2 casts each step */
    double cast_ns;             /* their cast to half and their gradients' back to f32, measured, per
                                   step; 0 when unknown */
    bool cast_cached;
    double unscale_ns;          /* the loss scaler's amp_unscale_check over every gradient, per step; 0 unknown */
    bool unscale_cached;
    char path[512];             /* the cache file ("" none) */
    int n_measured, n_cached;
    double seconds;             /* spent measuring now */
} mst_amp_calib;

/* Calibrate the profile's kernel calls (p->sigs, read here when not yet loaded). Rows that cannot
 * be rebuilt or timed say why in their note; that is not an error. 0, or -1 with err (no runtime
 * context could be made). */
int mst_amp_calibrate(rpt_profile *p, const mst_amp_calib_opts *o, mst_amp_calib *out, char *err, size_t errn);

/* The half-to-f32 time ratio of the profile's op (slice) name over its calibrated signatures,
 * weighted by calls x f32 time; 1 for ops O2 leaves in f32; NAN when none was measured. *n_rows,
 * if given, gets how many signatures it covers. */
double mst_amp_calib_ratio(const mst_amp_calib *c, const char *name, int *n_rows);

#endif
