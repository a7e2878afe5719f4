/* test_compare.c — `mstune compare` through the real binary on two short real profiles that
 * differ in one job key: the differing keys in the table and in compare.json, peak memory shown
 * at the default profile level (from summary.json, as the report card does), and the same
 * numbers in compare.json as on the terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/e2e.h"

#define SHORT "workloads/jobs/quickstart.yaml --set data.limit=640 --set train.checkpoint=false --set profile.sampler=false"

static char g_out[1 << 16];

static void run_ok(const char *args) { e2e_run_ok(args, g_out, sizeof(g_out)); }

static const cJSON *row_of(const cJSON *j, const char *id) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "rows")) {
        const cJSON *v = cJSON_GetObjectItem(r, "id");
        if (cJSON_IsString(v) && strcmp(v->valuestring, id) == 0) return r;
    }
    fail_msg("no row '%s' in compare.json", id);
    return NULL;
}

static void test_compare_keys_json_memory(void **state) {
    char dir[512], args[2048], path[700];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile " SHORT " --out %s/a", dir);
    run_ok(args);
    snprintf(args, sizeof(args), "profile " SHORT " --set data.batch_size=32 --out %s/b", dir);
    run_ok(args);
    snprintf(args, sizeof(args), "compare %s/a/profile.db %s/b/profile.db -o %s/cmp", dir, dir, dir);
    run_ok(args);
    if (!strstr(g_out, "job keys that differ (1)") || !strstr(g_out, "data.batch_size"))
        fail_msg("no differing job key in:\n%s", g_out);
    if (strstr(g_out, "peak memory (MiB)") && strstr(strstr(g_out, "peak memory (MiB)"), "n/a") &&
        strstr(strstr(g_out, "peak memory (MiB)"), "n/a") < strchr(strstr(g_out, "peak memory (MiB)"), '\n'))
        fail_msg("peak memory n/a at profile level 1:\n%s", g_out);
    snprintf(path, sizeof(path), "%s/cmp/compare.json", dir);
    cJSON *j = e2e_read_json(path);
    assert_non_null(j);
    const cJSON *keys = cJSON_GetObjectItem(j, "job_keys_differ");
    assert_int_equal(cJSON_GetArraySize(keys), 1);
    const cJSON *k = cJSON_GetArrayItem(keys, 0);
    assert_string_equal(cJSON_GetObjectItem(k, "key")->valuestring, "data.batch_size");
    assert_true(cJSON_GetObjectItem(k, "a")->valuedouble == 64 && cJSON_GetObjectItem(k, "b")->valuedouble == 32);
    /* peak memory: the summary.json's value, the same the report card of each run shows */
    snprintf(path, sizeof(path), "%s/a/summary.json", dir);
    cJSON *sa = e2e_read_json(path);
    const cJSON *peak = row_of(j, "peak-memory-mib");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(peak, "a")));
    assert_true(fabs(cJSON_GetObjectItem(peak, "a")->valuedouble * 1048576.0 - e2e_num(sa, "peak_memory_bytes")) < 1);
    const cJSON *tp = row_of(j, "throughput");
    assert_true(fabs(cJSON_GetObjectItem(tp, "a")->valuedouble - e2e_num(sa, "samples_per_s")) <= 1e-9 * e2e_num(sa, "samples_per_s"));
    assert_true(e2e_exists(strcat(strcpy(path, dir), "/cmp/index.html")));
    char *html = e2e_read_file(path, NULL);
    assert_non_null(strstr(html, "id=\"job-keys-table\""));
    free(html);
    cJSON_Delete(sa);
    cJSON_Delete(j);
    /* the same profile twice: no keys differ */
    snprintf(args, sizeof(args), "compare %s/a/profile.db %s/a/profile.db", dir, dir);
    run_ok(args);
    if (!strstr(g_out, "job keys: the same in A and B")) fail_msg("%s", g_out);
    e2e_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_compare_keys_json_memory)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
