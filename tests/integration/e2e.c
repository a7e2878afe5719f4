/* e2e.c — see e2e.h. */
#define _GNU_SOURCE
#include "tests/integration/e2e.h"

#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

const char *e2e_source_dir(void) {
    const char *s = getenv("MSTUNE_SOURCE_DIR");
    return s ? s : ".";
}

int e2e_run(const char *args, char *out, size_t n) {
    const char *bin = getenv("MSTUNE_BIN");
    if (!bin) bin = "build/mstune";
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "cd '%s' && '%s' %s 2>&1", e2e_source_dir(), bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = 0;
    if (n) out[0] = '\0';
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), p)) > 0) {
        size_t take = k + got < n ? got : (n > k + 1 ? n - k - 1 : 0);
        memcpy(out + k, chunk, take);
        k += take;
        if (n) out[k] = '\0';
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void e2e_tmpdir(char *buf, size_t n) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/mstune-e2e-XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) { return remove(path); }
void e2e_rmtree(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

char *e2e_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
    fclose(f);
    if (b) {
        b[sz] = '\0';
        if (len) *len = (size_t)sz;
    }
    return b;
}

double e2e_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("summary.json lacks number '%s'", key);
    return v->valuedouble;
}

cJSON *e2e_read_json(const char *path) {
    char *t = e2e_read_file(path, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

bool e2e_files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = e2e_read_file(a, &la), *y = e2e_read_file(b, &lb);
    bool eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

bool e2e_exists(const char *path) { return access(path, F_OK) == 0; }

void e2e_run_ok(const char *args, char *out, size_t n) {
    int rc = e2e_run(args, out, n);
    if (rc != 0) fail_msg("mstune %s exited %d:\n%s", args, rc, out);
}

double e2e_html_value(const char *html, const char *id) {
    char key[128];
    snprintf(key, sizeof(key), "id=\"%s\" data-value=\"", id);
    const char *p = strstr(html, key);
    if (!p) fail_msg("index.html has no element id=\"%s\" with a data-value", id);
    return strtod(p + strlen(key), NULL);
}

cJSON *e2e_job(const char *cmd, const char *job, const char *sets, const char *dir, const char *name) {
    char args[4096], path[2048];
    static char out[1 << 15];
    snprintf(args, sizeof(args), "%s %s --set train.checkpoint=false %s --out %s/%s", cmd, job, sets, dir, name);
    int rc = e2e_run(args, out, sizeof(out));
    if (rc != 0) fprintf(stderr, "mstune %s\n%s\n", args, out);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof(path), "%s/%s/summary.json", dir, name);
    cJSON *j = e2e_read_json(path);
    if (!j) fail_msg("%s: missing or not JSON", path);
    return j;
}

double e2e_loss_curve_diff(const cJSON *a, const cJSON *b, int steps) {
    const cJSON *la = cJSON_GetObjectItemCaseSensitive(a, "train_loss"), *lb = cJSON_GetObjectItemCaseSensitive(b, "train_loss");
    assert_int_equal(cJSON_GetArraySize(la), steps);
    assert_int_equal(cJSON_GetArraySize(lb), steps);
    double worst = 0;
    for (int i = 0; i < steps; i++) {
        double x = cJSON_GetArrayItem(la, i)->valuedouble, y = cJSON_GetArrayItem(lb, i)->valuedouble;
        worst = fmax(worst, fabs(x - y) / fabs(x));
    }
    return worst;
}

double e2e_metric(const cJSON *j) { return e2e_num(cJSON_GetObjectItemCaseSensitive(j, "metric"), "value"); }

void e2e_assert_graph_dump(const char *job) {
    static char out[1 << 16];
    char args[2048];
    snprintf(args, sizeof(args), "graph %s", job);
    int rc = e2e_run(args, out, sizeof(out));
    if (rc != 0) fprintf(stderr, "mstune %s\n%s\n", args, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "nodes: "));
}
