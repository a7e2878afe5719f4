/* test_trace.c — trace.json through the real binary, checked for the fields HTA, Perfetto and the
 * TensorBoard profiler plugin read: steps as ProfilerStep#N slices; kernel slices with args
 * "Input Dims" (one shape per input) and "Input type" (one dtype per input); forward-to-backward
 * flow events ("ph":"s" at a forward kernel slice, "ph":"f" with "bp":"e" at the first kernel its
 * backward ran, same "id" and "cat"); and profile.trace_steps choosing how many steps keep their
 * op slices (twice the steps, exactly twice the slices of this fixed-shape job). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/e2e.h"

/* the MLP at batch 64 on 640 images: 10 steps, every one the same ops on the same shapes */
#define JOB "workloads/jobs/quickstart.yaml --set data.limit=640 --set profile.sampler=false"

static char g_out[1 << 16];

typedef struct {
    int kernel_slices, steps, with_dims, flows_s, flows_f, batch_first;
} counts;

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("trace event lacks a number '%s'", k);
    return v->valuedouble;
}

/* A kernel slice of the main thread starting at ts (where a flow's end binds). */
static bool slice_at(const cJSON *events, double tid, double ts) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *cat = cJSON_GetObjectItem(e, "cat");
        if (strcmp(ph->valuestring, "X") == 0 && cJSON_IsString(cat) && strcmp(cat->valuestring, "kernel") == 0 &&
            num(e, "tid") == tid && num(e, "ts") == ts)
            return true;
    }
    return false;
}

static counts profile_and_check(int trace_steps) {
    char dir[512], args[1024], path[1100];
    e2e_tmpdir(dir, sizeof(dir));
    /* every step records its ops (profile.op_every=1), so the traced steps are consecutive ones */
    snprintf(args, sizeof(args), "profile " JOB " --set profile.trace_steps=%d --set profile.op_every=1 --out %s", trace_steps, dir);
    int rc = e2e_run(args, g_out, sizeof(g_out));
    if (rc != 0) fail_msg("mstune %s exited %d:\n%s", args, rc, g_out);
    snprintf(path, sizeof(path), "%s/trace.json", dir);
    cJSON *t = e2e_read_json(path);
    if (!t) fail_msg("%s is not JSON", path);
    const cJSON *events = cJSON_GetObjectItem(t, "traceEvents"), *e;
    assert_true(cJSON_IsArray(events));
    counts c = {0};
    cJSON *starts = cJSON_CreateObject();      /* id -> the "s" event */
    cJSON_ArrayForEach(e, events) {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring, *name = cJSON_GetObjectItem(e, "name")->valuestring;
        const cJSON *cat = cJSON_GetObjectItem(e, "cat"), *a = cJSON_GetObjectItem(e, "args");
        if (strcmp(ph, "X") == 0 && strncmp(name, "ProfilerStep#", 13) == 0) c.steps++;
        if (strcmp(ph, "X") == 0 && cJSON_IsString(cat) && strcmp(cat->valuestring, "kernel") == 0 && cJSON_GetObjectItem(a, "op")) {
            c.kernel_slices++;
            const cJSON *dims = cJSON_GetObjectItem(a, "Input Dims"), *types = cJSON_GetObjectItem(a, "Input type");
            if (!dims) continue;
            c.with_dims++;
            assert_true(cJSON_IsArray(dims) && cJSON_IsArray(types));
            assert_int_equal(cJSON_GetArraySize(dims), cJSON_GetArraySize(types));
            const cJSON *d, *ty;
            cJSON_ArrayForEach(d, dims) {
                assert_true(cJSON_IsArray(d));
                const cJSON *x;
                cJSON_ArrayForEach(x, d) assert_true(cJSON_IsNumber(x) && x->valuedouble >= 0);
            }
            cJSON_ArrayForEach(ty, types) assert_true(cJSON_IsString(ty) && ty->valuestring[0]);
            /* the first linear layer: input (64, 784) f32 */
            const cJSON *d0 = cJSON_GetArrayItem(dims, 0);
            if (strcmp(name, "linear") == 0 && cJSON_GetArraySize(d0) == 2 && cJSON_GetArrayItem(d0, 0)->valuedouble == 64 &&
                cJSON_GetArrayItem(d0, 1)->valuedouble == 784 && strcmp(cJSON_GetArrayItem(types, 0)->valuestring, "f32") == 0)
                c.batch_first++;
        }
        if (strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0) {
            assert_string_equal(cat->valuestring, "fwdbwd");
            double id = num(e, "id"), ts = num(e, "ts"), tid = num(e, "tid");
            char key[32];
            snprintf(key, sizeof(key), "%.0f", id);
            if (!slice_at(events, tid, ts)) fail_msg("flow %s id %.0f at ts %.3f binds to no kernel slice", ph, id, ts);
            if (ph[0] == 's') {
                c.flows_s++;
                assert_null(cJSON_GetObjectItem(starts, key));     /* one start per forward op */
                cJSON_AddItemToObject(starts, key, cJSON_Duplicate(e, 1));
            } else {
                c.flows_f++;
                assert_string_equal(cJSON_GetObjectItem(e, "bp")->valuestring, "e");
                const cJSON *s = cJSON_GetObjectItem(starts, key);
                if (!s) fail_msg("flow end id %.0f has no start before it", id);
                assert_true(num(s, "ts") <= ts && num(s, "tid") == tid);
            }
        }
    }
    cJSON_Delete(starts);
    cJSON_Delete(t);
    e2e_rmtree(dir);
    return c;
}

static void test_trace_fields_and_steps(void **state) {
    counts two = profile_and_check(2), four = profile_and_check(4);
    printf("trace_steps 2: %d kernel slices (%d with shapes), %d flows; trace_steps 4: %d slices, %d flows\n", two.kernel_slices,
           two.with_dims, two.flows_f, four.kernel_slices, four.flows_f);
    assert_true(two.kernel_slices > 0);
    assert_int_equal(two.with_dims, two.kernel_slices);     /* eager: every kernel slice has its inputs */
    assert_int_equal(two.batch_first, 2);                   /* one first layer per traced step */
    assert_true(two.flows_f > 0 && two.flows_f == two.flows_s);
    /* every step is on the steps track; op slices only for the traced ones */
    assert_int_equal(two.steps, four.steps);
    assert_int_equal(four.kernel_slices, 2 * two.kernel_slices);
    assert_int_equal(four.flows_f, 2 * two.flows_f);
    assert_int_equal(four.batch_first, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_fields_and_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
