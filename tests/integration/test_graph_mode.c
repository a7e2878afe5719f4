/* test_graph_mode.c — `mstune train` in graph mode against eager on the real jobs: the loss curve
 * over the first 200 steps within 1e-4 relative and the final accuracy within 0.2 points, for the
 * mlp and the cnn; summary.json reports the compiles and the planned arena; a smaller last batch
 * compiles a second plan unless runtime.dynamic_batch is set. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e.h"

static cJSON *train(const char *job, const char *sets, const char *dir, const char *name) {
    char args[4096], out[1 << 15], path[2048];
    snprintf(args, sizeof(args), "train %s --set train.checkpoint=false %s --out %s/%s", job, sets, dir, name);
    int rc = e2e_run(args, out, sizeof(out));
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof(path), "%s/%s/summary.json", dir, name);
    cJSON *j = e2e_read_json(path);
    assert_non_null(j);
    return j;
}


static void parity(const char *job, const char *sets) {
    char dir[1024], both[2048];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(both, sizeof(both), "%s --set runtime.mode=eager", sets);
    cJSON *e = train(job, both, dir, "eager");
    snprintf(both, sizeof(both), "%s --set runtime.mode=graph", sets);
    cJSON *g = train(job, both, dir, "graph");
    const cJSON *le = cJSON_GetObjectItemCaseSensitive(e, "train_loss"), *lg = cJSON_GetObjectItemCaseSensitive(g, "train_loss");
    int n = cJSON_GetArraySize(le);
    assert_int_equal(n, cJSON_GetArraySize(lg));
    assert_true(n >= 200);
    double worst = 0;
    for (int i = 0; i < 200; i++) {
        double a = cJSON_GetArrayItem(le, i)->valuedouble, b = cJSON_GetArrayItem(lg, i)->valuedouble;
        worst = fmax(worst, fabs(a - b) / fabs(a));
    }
    printf("%s: %d steps, worst relative loss difference over the first 200: %.3g; accuracy eager %.4f graph %.4f\n", job, n,
           worst, e2e_num(e, "val_accuracy"), e2e_num(g, "val_accuracy"));
    assert_true(worst <= 1e-4);
    assert_true(fabs(e2e_num(e, "val_accuracy") - e2e_num(g, "val_accuracy")) <= 0.002);
    assert_true(e2e_num(g, "compile_count") >= 2);        /* the training and the evaluation plan */
    assert_true(e2e_num(g, "compile_ms") > 0);
    assert_true(e2e_num(g, "arena_bytes") > 0);
    assert_true(e2e_num(e, "compile_count") == 0);
    assert_true(e2e_num(g, "graph_step_threads") >= 1);  /* forced to all threads: the job's count */
    assert_true(e2e_num(e, "graph_step_threads") == 0);
    cJSON_Delete(e);
    cJSON_Delete(g);
    e2e_rmtree(dir);
}

static void test_mlp_parity(void **state) {
    (void)state;
    parity("workloads/jobs/quickstart.yaml", "--set data.limit=12800");
}

static void test_cnn_parity(void **state) {
    (void)state;
    parity("workloads/jobs/fashion_cnn.yaml",
           "--set data.limit=12800 --set train.epochs=1 --set model.width=8 --set optimizer.warmup_steps=10");
}

/* Mixed precision traced: O2 f16 with the dynamic loss scaler (scale, counters and overflow flag
 * are tensors the graph binds by reference) gives the eager run's loss curve and accuracy. */
static void test_amp_parity(void **state) {
    (void)state;
    parity("workloads/jobs/quickstart.yaml", "--set data.limit=12800 --set amp.level=O2 --set amp.dtype=f16");
}

/* 1000 samples at batch 64: 15 full batches and one of 40. Evaluation on a 1000-sample synthetic
 * test split also ends with a batch of 40. */
static void test_dynamic_batch(void **state) {
    (void)state;
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    const char *job = "workloads/scenarios/dispatch_bound.yaml";
    const char *base = "--set runtime.mode=graph --set data.batch_size=64 --set data.synthetic.samples=1000 "
                       "--set data.synthetic.test_samples=1000";
    char sets[1024];
    snprintf(sets, sizeof(sets), "%s --set runtime.dynamic_batch=false", base);
    cJSON *fixed = train(job, sets, dir, "fixed");
    snprintf(sets, sizeof(sets), "%s --set runtime.dynamic_batch=true", base);
    cJSON *dyn = train(job, sets, dir, "dynamic");
    assert_int_equal((int)e2e_num(fixed, "compile_count"), 4);     /* train 64 and 40, eval 64 and 40 */
    assert_int_equal((int)e2e_num(dyn, "compile_count"), 2);       /* one plan each */
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(fixed, "train_loss"), *b = cJSON_GetObjectItemCaseSensitive(dyn, "train_loss");
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        assert_true(cJSON_GetArrayItem(a, i)->valuedouble == cJSON_GetArrayItem(b, i)->valuedouble);
    cJSON_Delete(fixed);
    cJSON_Delete(dyn);
    e2e_rmtree(dir);
}

int main(void) {
    /* eager and graph on the same thread budget: the plan's step-thread verdict (measured, so
     * timing-dependent; runtime/graph/step_threads.h) is forced to all threads */
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_parity),
        cmocka_unit_test(test_cnn_parity),
        cmocka_unit_test(test_amp_parity),
        cmocka_unit_test(test_dynamic_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
