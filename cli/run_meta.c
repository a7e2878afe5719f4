/* run_meta.c — see run_meta.h. The git revision is the one CMake saw at configure time. */
#include "cli/run_meta.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <libunwind.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include <zlib.h>

#include "runtime/cpu_features.h"

#ifndef MSTUNE_GIT_REV
#define MSTUNE_GIT_REV "unknown"
#endif

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t') v++;
                snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    }
    fclose(f);
}

int mst_run_meta_collect(mst_meta_item *it, int n) {
    int k = 0;
#define ADD(KEY, ...)                                                    \
    do {                                                                 \
        if (k < n) {                                                     \
            it[k].key = KEY;                                             \
            snprintf(it[k].value, sizeof(it[k].value), __VA_ARGS__);   \
            k++;                                                         \
        }                                                                \
    } while (0)
    ADD("mstune_version", "0.1.0");
    ADD("git_revision", "%s", MSTUNE_GIT_REV);
    char host[128] = "unknown";
    gethostname(host, sizeof(host) - 1);
    ADD("host", "%s", host);
    char cpu[200];
    cpu_model(cpu, sizeof(cpu));
    ADD("cpu_model", "%s", cpu);
    ADD("cpu_cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    char feats[256];
    mst_cpu_features_str(feats, sizeof(feats), ",");
    ADD("cpu_features", "%s", feats);
    ADD("openblas", "%s", openblas_get_config());
    ADD("sqlite", "%s", sqlite3_libversion());
    ADD("cjson", "%s", cJSON_Version());
    ADD("libyaml", "%s", yaml_get_version_string());
    ADD("zlib", "%s", zlibVersion());
    ADD("libunwind", "%d.%d", UNW_VERSION_MAJOR, UNW_VERSION_MINOR);
#undef ADD
    return k;
}
