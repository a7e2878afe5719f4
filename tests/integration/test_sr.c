/* test_sr.c — the super-resolution net end to end through the real binary
 * (workloads/jobs/fashion_sr_short.yaml): eager and graph give the same loss curve (1e-4
 * relative) and PSNR (0.01 dB); the PSNR beats nearest-neighbour upsampling (18.41 dB on this
 * split, bench_sr_bicubic); summary.json names the metric psnr, higher is better, and leaves
 * val_accuracy at -1; MSE loss and AMP O2 bf16 train with finite losses. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e.h"

#define JOB "workloads/jobs/fashion_sr_short.yaml"

static cJSON *run(const char *sets, const char *dir, const char *name) { return e2e_job("train", JOB, sets, dir, name); }

static double psnr(const cJSON *j) { return e2e_metric(j); }

static void test_eager_graph_parity(void **state) {
    (void)state;
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    cJSON *e = run("--set runtime.mode=eager", dir, "eager");
    cJSON *g = run("--set runtime.mode=graph", dir, "graph");
    double worst = e2e_loss_curve_diff(e, g, 100);
    printf("sr: worst relative loss difference eager vs graph %.3g; PSNR eager %.3f graph %.3f dB\n", worst, psnr(e), psnr(g));
    assert_true(worst <= 1e-4);
    assert_true(fabs(psnr(e) - psnr(g)) <= 0.01);
    assert_true(psnr(e) > 18.41);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "metric");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "name")->valuestring, "psnr");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "higher_is_better")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "curve")), 1);
    assert_true(e2e_num(e, "val_accuracy") == -1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring, "srnet");
    cJSON_Delete(e);
    cJSON_Delete(g);
    e2e_rmtree(dir);
}

static void test_variants(void **state) {
    (void)state;
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    const char *sets[] = {"--set model.loss=mse", "--set amp.level=O2 --set amp.dtype=bf16 --set runtime.mode=graph"};
    for (int i = 0; i < 2; i++) {
        char all[512], name[16];
        snprintf(all, sizeof(all), "%s --set data.limit=640", sets[i]);
        snprintf(name, sizeof(name), "v%d", i);
        cJSON *j = run(all, dir, name);
        double loss = e2e_num(j, "final_train_loss");
        printf("sr %s: final loss %.5f, PSNR %.3f dB\n", sets[i], loss, psnr(j));
        assert_true(isfinite(loss) && loss > 0);
        assert_true(isfinite(psnr(j)) && psnr(j) > 5);
        cJSON_Delete(j);
    }
    e2e_rmtree(dir);
}

/* `mstune graph` traces the step with the dataset's input and target types */
static void test_graph_dump(void **state) {
    (void)state;
    e2e_assert_graph_dump(JOB);
}

int main(void) {
    /* eager and graph on the same thread budget: the plan's step-thread verdict (measured, so
     * timing-dependent; runtime/graph/step_threads.h) is forced to all threads */
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_graph_parity),
        cmocka_unit_test(test_graph_dump),
        cmocka_unit_test(test_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
