/* test_resnet.c — the bottleneck ResNet (workloads/resnet.c) through the real binary on
 * Fashion-MNIST with the shipped short job (workloads/jobs/fashion_resnet_short.yaml): its
 * ResNet-11 gives the same 20-step loss curve in eager and graph mode (1e-4 relative) and the same
 * accuracy (0.2 points), and the loss falls; the full job's ResNet-20 builds with more parameters;
 * `mstune graph` traces the step. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e.h"

#define JOB "workloads/jobs/fashion_resnet_short.yaml"

static cJSON *run(const char *sets, const char *dir, const char *name) { return e2e_job("train", JOB, sets, dir, name); }

static void test_resnet(void **state) {
    (void)state;
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    cJSON *e = run("--set runtime.mode=eager", dir, "eager");
    cJSON *g = run("--set runtime.mode=graph", dir, "graph");
    const int n = 20;
    double worst = e2e_loss_curve_diff(e, g, n);
    const cJSON *le = cJSON_GetObjectItemCaseSensitive(e, "train_loss");
    double first = cJSON_GetArrayItem(le, 0)->valuedouble, last = cJSON_GetArrayItem(le, n - 1)->valuedouble;
    printf("resnet11: worst relative loss difference eager vs graph %.3g; loss %.4f -> %.4f\n", worst, first, last);
    assert_true(worst <= 1e-4);
    assert_true(last < first);
    assert_true(fabs(e2e_num(e, "val_accuracy") - e2e_num(g, "val_accuracy")) <= 0.002);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring, "resnet11");
    cJSON *d = e2e_job("train", "workloads/jobs/fashion_resnet.yaml", "--set train.steps=3 --set train.eval=false", dir, "deep");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(d, "model")->valuestring, "resnet20");
    assert_true(e2e_num(d, "model_params") > e2e_num(e, "model_params"));
    cJSON_Delete(d);
    cJSON_Delete(e);
    cJSON_Delete(g);
    e2e_rmtree(dir);
}

static void test_graph_dump(void **state) {
    (void)state;
    e2e_assert_graph_dump(JOB);
}

int main(void) {
    /* eager and graph on the same thread budget: the plan's step-thread verdict (measured, so
     * timing-dependent; runtime/graph/step_threads.h) is forced to all threads */
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet),
        cmocka_unit_test(test_graph_dump),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
