/* cpu_features.h — what this CPU can do, detected at run time (cpuid + xgetbv), never at build time.
 *
 * The build is generic x86-64; kernels with wider paths ask here before taking them, and every run
 * records the list (summary.json "cpu", the profile's run metadata, `mstune list cpu`). On Linux,
 * AMX tiles need the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM); it is requested once
 * where the CPU has AMX and amx_* is listed only when it was granted.
 *
 * MSTUNE_CPU_MASK=avx512f,amx_bf16 (comma-separated names) hides features from this process, so a
 * test or a benchmark can play a smaller CPU; hiding a feature hides the ones built on it (avx512f
 * takes every avx512_* and amx_* with it, avx2 takes avx512f).
 *
 *     if (mst_cpu_has(MST_CPU_AVX512_BF16)) ...;
 *     char list[256]; mst_cpu_features_str(list, sizeof(list), ",");
 */
#ifndef MST_RUNTIME_CPU_FEATURES_H
#define MST_RUNTIME_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    MST_CPU_AVX, MST_CPU_AVX2, MST_CPU_FMA, MST_CPU_F16C,
    MST_CPU_AVX512F, MST_CPU_AVX512DQ, MST_CPU_AVX512BW, MST_CPU_AVX512VL,
    MST_CPU_AVX512_VNNI, MST_CPU_AVX512_BF16, MST_CPU_AVX512_FP16, MST_CPU_AVX_VNNI,
    MST_CPU_AMX_TILE, MST_CPU_AMX_BF16, MST_CPU_AMX_INT8,
    MST_CPU_FEATURE_COUNT
} mst_cpu_feature;

typedef struct {
    char model[64];             /* the brand string, e.g. "AMD EPYC 9B45 ..." ; "unknown" if none */
    uint32_t detected;          /* bit f: the CPU (and OS) has feature f */
    uint32_t masked;            /* bit f: hidden by MSTUNE_CPU_MASK */
    bool amx_cpu;               /* the CPU reports AMX tiles (before the permission request) */
    bool amx_permitted;         /* Linux granted the tile data state */
} mst_cpu_info;

/* Detected once per process (thread-safe); the same answer afterwards. */
const mst_cpu_info *mst_cpu_info_get(void);
bool        mst_cpu_has(mst_cpu_feature f);         /* detected and not masked */
const char *mst_cpu_feature_name(mst_cpu_feature f);
int         mst_cpu_feature_parse(const char *name); /* -1 if unknown */
/* The available features' names joined by sep ("avx2,f16c,..."); returns the length written. */
size_t      mst_cpu_features_str(char *buf, size_t n, const char *sep);
/* This machine as the per-machine caches key their lines (the kernel verdicts, the AMP calibration):
 * "model|features", tabs and newlines made spaces so it is one TSV field (a masked run is another
 * machine). */
void        mst_cpu_machine_id(char *buf, size_t n);
/* A core's L2 cache in bytes, as the C library reads it (sysconf); 1 MiB where it says nothing. */
int64_t     mst_cpu_l2_bytes(void);

#endif
