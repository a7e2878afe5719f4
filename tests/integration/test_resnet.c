/* test_resnet.c — the bottleneck ResNet (workloads/resnet.c) through the real binary on
 * Fashion-MNIST: a ResNet-11 (one bottleneck per stage) gives the same 20-step loss curve in eager
 * and graph mode (1e-4 relative), and the loss falls; a deeper one builds with more parameters. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "e2e.h"

static cJSON *run(const char *sets, const char *dir, const char *name) {
    char all[2048];
    snprintf(all, sizeof(all),
             "--set model.name=resnet --set model.width=4 --set data.limit=1280 --set data.batch_size=64 --set train.epochs=1 "
             "--set optimizer.warmup_steps=2 %s",
             sets);
    return e2e_job("train", "workloads/jobs/fashion_cnn.yaml", all, dir, name);
}

static void test_resnet(void **state) {
    (void)state;
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    cJSON *e = run("--set model.blocks=1 --set runtime.mode=eager", dir, "eager");
    cJSON *g = run("--set model.blocks=1 --set runtime.mode=graph", dir, "graph");
    const int n = 20;
    double worst = e2e_loss_curve_diff(e, g, n);
    const cJSON *le = cJSON_GetObjectItemCaseSensitive(e, "train_loss");
    double first = cJSON_GetArrayItem(le, 0)->valuedouble, last = cJSON_GetArrayItem(le, n - 1)->valuedouble;
    printf("resnet11: worst relative loss difference eager vs graph %.3g; loss %.4f -> %.4f\n", worst, first, last);
    assert_true(worst <= 1e-4);
    assert_true(last < first);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring, "resnet11");
    cJSON *d = run("--set model.blocks=2 --set train.steps=3 --set train.eval=false", dir, "deep");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(d, "model")->valuestring, "resnet20");
    assert_true(e2e_num(d, "model_params") > e2e_num(e, "model_params"));
    cJSON_Delete(d);
    cJSON_Delete(e);
    cJSON_Delete(g);
    e2e_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
