/* cpu_features.c — see cpu_features.h. cpuid leaves 1 and 7 (subleaves 0 and 1) name the
 * features, xgetbv says whether the OS saves the registers they use (AVX: XCR0 bits 1-2, AVX-512:
 * bits 5-7, AMX: bits 17-18), and the brand string comes from leaves 0x80000002..4. The answer is
 * a fact about the machine, so it is computed once per process (pthread_once) and then read-only:
 * the one piece of runtime/ state outside the context, and constant after its first read.
 */
#include "runtime/cpu_features.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MST_CPU_X86 1
#else
#define MST_CPU_X86 0
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define MST_ARCH_REQ_XCOMP_PERM 0x1023
#define MST_XFEATURE_XTILEDATA 18
#endif

static const char *const names[MST_CPU_FEATURE_COUNT] = {
    [MST_CPU_AVX] = "avx", [MST_CPU_AVX2] = "avx2", [MST_CPU_FMA] = "fma", [MST_CPU_F16C] = "f16c",
    [MST_CPU_AVX512F] = "avx512f", [MST_CPU_AVX512DQ] = "avx512dq", [MST_CPU_AVX512BW] = "avx512bw",
    [MST_CPU_AVX512VL] = "avx512vl", [MST_CPU_AVX512_VNNI] = "avx512_vnni", [MST_CPU_AVX512_BF16] = "avx512_bf16",
    [MST_CPU_AVX512_FP16] = "avx512_fp16", [MST_CPU_AVX_VNNI] = "avx_vnni", [MST_CPU_AMX_TILE] = "amx_tile",
    [MST_CPU_AMX_BF16] = "amx_bf16", [MST_CPU_AMX_INT8] = "amx_int8",
};
_Static_assert(MST_CPU_FEATURE_COUNT == 15, "a new CPU feature needs a name");

/* What a feature is built on: hiding (or lacking) the base hides it too. */
static const mst_cpu_feature base_of[MST_CPU_FEATURE_COUNT] = {
    [MST_CPU_AVX] = MST_CPU_AVX, [MST_CPU_AVX2] = MST_CPU_AVX, [MST_CPU_FMA] = MST_CPU_AVX, [MST_CPU_F16C] = MST_CPU_AVX,
    [MST_CPU_AVX512F] = MST_CPU_AVX2, [MST_CPU_AVX512DQ] = MST_CPU_AVX512F, [MST_CPU_AVX512BW] = MST_CPU_AVX512F,
    [MST_CPU_AVX512VL] = MST_CPU_AVX512F, [MST_CPU_AVX512_VNNI] = MST_CPU_AVX512F, [MST_CPU_AVX512_BF16] = MST_CPU_AVX512F,
    [MST_CPU_AVX512_FP16] = MST_CPU_AVX512F, [MST_CPU_AVX_VNNI] = MST_CPU_AVX2, [MST_CPU_AMX_TILE] = MST_CPU_AVX512F,
    [MST_CPU_AMX_BF16] = MST_CPU_AMX_TILE, [MST_CPU_AMX_INT8] = MST_CPU_AMX_TILE,
};

static mst_cpu_info info;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if MST_CPU_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect_x86(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c >> 27 & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);
    uint32_t f = 0;
#define SET(feat, cond) f |= (cond) ? 1u << (feat) : 0
    SET(MST_CPU_AVX, os_avx && (c >> 28 & 1));
    SET(MST_CPU_FMA, os_avx && (c >> 12 & 1));
    SET(MST_CPU_F16C, os_avx && (c >> 29 & 1));
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        unsigned max_sub = a;
        SET(MST_CPU_AVX2, os_avx && (b >> 5 & 1));
        SET(MST_CPU_AVX512F, os_avx512 && (b >> 16 & 1));
        SET(MST_CPU_AVX512DQ, os_avx512 && (b >> 17 & 1));
        SET(MST_CPU_AVX512BW, os_avx512 && (b >> 30 & 1));
        SET(MST_CPU_AVX512VL, os_avx512 && (b >> 31 & 1));
        SET(MST_CPU_AVX512_VNNI, os_avx512 && (c >> 11 & 1));
        SET(MST_CPU_AVX512_FP16, os_avx512 && (d >> 23 & 1));
        info.amx_cpu = (d >> 24 & 1) != 0;
        bool amx = info.amx_cpu && os_amx;
#if defined(__linux__) && defined(__x86_64__)
        /* Linux hands out the 8 KB tile state only on request (since 5.16); without it the first
         * tile instruction faults. oneDNN asks again itself; asking twice is harmless. */
        if (amx) amx = syscall(SYS_arch_prctl, MST_ARCH_REQ_XCOMP_PERM, MST_XFEATURE_XTILEDATA) == 0;
#endif
        info.amx_permitted = amx;
        SET(MST_CPU_AMX_TILE, amx);
        SET(MST_CPU_AMX_BF16, amx && (d >> 22 & 1));
        SET(MST_CPU_AMX_INT8, amx && (d >> 25 & 1));
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            SET(MST_CPU_AVX512_BF16, os_avx512 && (a >> 5 & 1));
            SET(MST_CPU_AVX_VNNI, os_avx && (a >> 4 & 1));
        }
    }
#undef SET
    info.detected = f;

    unsigned brand[12] = {0};
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004)
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    char raw[49];
    memcpy(raw, brand, 48);
    raw[48] = '\0';
    const char *p = raw;
    while (*p == ' ') p++;
    size_t len = strlen(p);
    while (len > 0 && p[len - 1] == ' ') len--;
    if (len > 0) snprintf(info.model, sizeof(info.model), "%.*s", (int)len, p);
}
#endif

static void apply_mask(const char *mask) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", mask);
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int f = mst_cpu_feature_parse(tok);
        if (f < 0) {
            fprintf(stderr, "mstune: MSTUNE_CPU_MASK: unknown CPU feature '%s' ignored (expected one of the names "
                            "`mstune list cpu` prints)\n", tok);
            continue;
        }
        info.masked |= 1u << f;
    }
    /* a hidden base hides what is built on it; base_of is ordered so one pass per level settles */
    for (int pass = 0; pass < 4; pass++)
        for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++)
            if (info.masked >> base_of[f] & 1) info.masked |= 1u << f;
}

static void detect(void) {
    snprintf(info.model, sizeof(info.model), "unknown");
#if MST_CPU_X86
    detect_x86();
#endif
    /* a feature whose base is missing is not usable either (a hypervisor may report odd sets) */
    for (int pass = 0; pass < 4; pass++)
        for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++)
            if (!(info.detected >> base_of[f] & 1)) info.detected &= ~(1u << f);
    const char *mask = getenv("MSTUNE_CPU_MASK");
    if (mask && *mask) apply_mask(mask);
}

const mst_cpu_info *mst_cpu_info_get(void) {
    pthread_once(&once, detect);
    return &info;
}

bool mst_cpu_has(mst_cpu_feature f) {
    const mst_cpu_info *ci = mst_cpu_info_get();
    return (unsigned)f < MST_CPU_FEATURE_COUNT && (ci->detected & ~ci->masked) >> f & 1;
}

const char *mst_cpu_feature_name(mst_cpu_feature f) { return (unsigned)f < MST_CPU_FEATURE_COUNT ? names[f] : "?"; }

int mst_cpu_feature_parse(const char *name) {
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++)
        if (strcmp(names[f], name) == 0) return f;
    return -1;
}

size_t mst_cpu_features_str(char *buf, size_t n, const char *sep) {
    size_t k = 0;
    if (n) buf[0] = '\0';
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++) {
        if (!mst_cpu_has((mst_cpu_feature)f)) continue;
        int w = snprintf(buf + k, k < n ? n - k : 0, "%s%s", k ? sep : "", names[f]);
        if (w > 0) k += (size_t)w;
    }
    return k < n ? k : (n ? n - 1 : 0);
}

void mst_cpu_machine_id(char *buf, size_t n) {
    char feats[256];
    mst_cpu_features_str(feats, sizeof(feats), ",");
    snprintf(buf, n, "%s|%s", mst_cpu_info_get()->model, feats);
    for (char *p = buf; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
}

int64_t mst_cpu_l2_bytes(void) {
    static _Atomic int64_t cached;
    int64_t l2 = cached;
    if (l2 > 0) return l2;
    long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    l2 = v > 0 ? (int64_t)v : 1 << 20;
    cached = l2;
    return l2;
}
