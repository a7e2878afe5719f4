/* test_trace_export.c — Chrome trace JSON from a profile database: valid JSON with the expected
 * complete events (category, op name, FLOPs), thread names, the steps track, counters for loss
 * and memory, ranges nested inside their parents, atomic replacement, and error paths. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "profiler/events.h"
#include "profiler/store.h"
#include "profiler/trace_export.h"

static char g_dir[256];

static int setup(void **state) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/mst_trace_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof(p), "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
    return 0;
}

static void spin_ns(uint64_t ns) {
    uint64_t t0 = mst_prof_now_ns();
    while (mst_prof_now_ns() - t0 < ns) {
    }
}

static volatile int g_stop;
static int64_t g_produced;

/* Wait until the worker finishes one more range (it may not be scheduled at all otherwise). */
static void wait_for_worker(void) {
    const int64_t seen = __atomic_load_n(&g_produced, __ATOMIC_ACQUIRE);
    while (__atomic_load_n(&g_produced, __ATOMIC_ACQUIRE) == seen) sched_yield();
}

static void *worker(void *arg) {
    uint32_t name = *(uint32_t *)arg;
    mst_prof_set_thread_name("loader.worker.0");
    while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
        mst_prof_begin(MST_CAT_DATA, name, -1);
        spin_ns(20000);
        mst_prof_end(MST_CAT_DATA, name, -1);
        __atomic_add_fetch(&g_produced, 1, __ATOMIC_RELEASE);
        spin_ns(5000);
    }
    return NULL;
}

/* A small run: 6 steps (1 warm-up), 3 traced, with a worker thread, memory counters and values. */
static void make_profile(const char *db) {
    char err[512];
    mst_prof_config cfg = {.level = MST_PROF_LEVEL_DETAIL, .warmup = 1};
    mst_store *st = mst_store_open(db, &cfg, 3, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_configure(p, &cfg);
    mst_profiler_set_sink(p, mst_store_sink, st);
    mst_prof_set_thread_name("main");
    assert_int_equal(mst_profiler_start(p), 0);
    uint32_t produce = mst_prof_intern("loader.produce"), conv = mst_prof_intern("conv2d");
    uint32_t mem = mst_prof_intern("mem.activations"), loss = mst_prof_intern("loss"), scale = mst_prof_intern("loss_scale");
    uint32_t mark = mst_prof_intern("checkpoint"), depth = mst_prof_intern("loader.queue_depth");
    g_stop = 0;
    pthread_t th;
    pthread_create(&th, NULL, worker, &produce);
    wait_for_worker();
    for (int step = 0; step < 6; step++) {
        mst_prof_step_begin(step);
        wait_for_worker();
        mst_prof_counter(depth, step);
        mst_prof_op_begin(MST_CAT_DISPATCH, conv, 5);
        mst_prof_counter_detail(mem, 1000 * (step + 1));
        mst_prof_op_begin(MST_CAT_KERNEL, conv, 5);
        spin_ns(30000);
        mst_prof_record_(MST_EV_END, MST_CAT_KERNEL, conv, 5, 123456, 789);
        mst_prof_op_end(MST_CAT_DISPATCH, conv, 5);
        mst_prof_instant(mark, 1, 2);
        mst_prof_value(loss, 3.0 - step);
        mst_prof_value(scale, 65536);
        mst_prof_step_end(step);
        mst_prof_thread_flush();
    }
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    mst_profiler_stop(p);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    mst_profiler_free(p);
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_export(void **state) {
    char db[512], json[512], err[512];
    snprintf(db, sizeof(db), "%s/profile.db", g_dir);
    snprintf(json, sizeof(json), "%s/trace.json", g_dir);
    make_profile(db);
    FILE *old = fopen(json, "w");       /* an existing file is replaced */
    fputs("old", old);
    fclose(old);
    if (mst_trace_export(db, json, err, sizeof(err)) != 0) fail_msg("%s", err);
    cJSON *root = read_json(json);
    assert_non_null(root);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_true(cJSON_IsArray(events));
    assert_string_equal(str(root, "displayTimeUnit"), "ms");
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
    assert_string_equal(str(other, "schema_version"), "1");
    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");    /* HTA: the rank */
    assert_true(num(dist, "rank") == 0 && num(dist, "world_size") == 1);

    int steps = 0, warm = 0, kernels = 0, dispatches = 0, produces = 0, loss = 0, scale = 0, memory = 0, instants = 0;
    int depth = 0, thread_main = 0, thread_worker = 0, thread_steps = 0;
    double main_tid = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str(e, "ph"), *name = str(e, "name"), *cat = str(e, "cat");
        assert_true(num(e, "pid") == 1);
        assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "tid")));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (strcmp(ph, "M") == 0) {
            if (strcmp(name, "thread_name") == 0) {
                const char *tn = str(args, "name");
                if (strcmp(tn, "main") == 0) thread_main++, main_tid = num(e, "tid");
                if (strcmp(tn, "loader.worker.0") == 0) thread_worker++;
                if (strcmp(tn, "steps") == 0) thread_steps++, assert_true(num(e, "tid") == MST_TRACE_STEPS_TID);
            }
            continue;
        }
        assert_true(num(e, "ts") >= 0);
        if (strcmp(ph, "X") == 0) {
            assert_true(num(e, "dur") >= 0);
            /* the fields HTA's trace parser reads of every complete event: ph, name, cat, pid, tid, ts, dur */
            assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "cat")) && cat[0]);
            assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "dur")));
            if (strcmp(cat, "step") == 0) {
                char want[48];      /* PyTorch's step name, which HTA and TensorBoard segment steps by */
                snprintf(want, sizeof(want), "ProfilerStep#%d", (int)num(args, "step"));
                assert_string_equal(name, want);
                steps++;
                warm += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "warmup"));
                assert_true(num(args, "kernel_ms") > 0);
                assert_true(num(args, "hidden_data_ms") >= 0);
                assert_true(num(e, "tid") == MST_TRACE_STEPS_TID);
            } else if (strcmp(cat, "kernel") == 0) {
                kernels++;
                assert_string_equal(name, "conv2d");
                assert_true(num(args, "flops") == 123456);
                assert_true(num(args, "bytes") == 789);
                assert_true(num(args, "op") == 5);
                assert_true(num(e, "dur") >= 30.0);     /* microseconds */
            } else if (strcmp(cat, "dispatch") == 0) {
                dispatches++;
                assert_string_equal(name, "conv2d");
            } else if (strcmp(cat, "data") == 0) {
                produces++;
                assert_string_equal(name, "loader.produce");
                assert_true(num(e, "tid") != main_tid);
            }
        } else if (strcmp(ph, "C") == 0) {
            if (strcmp(name, "loss") == 0) loss++, assert_true(num(args, "loss") <= 3.0);
            if (strcmp(name, "loss_scale") == 0) scale++, assert_true(num(args, "loss_scale") == 65536);
            if (strcmp(name, "memory (bytes)") == 0) memory++, assert_true(num(args, "activations") >= 1000);
            if (strcmp(name, "loader.queue_depth") == 0) depth++;
        } else if (strcmp(ph, "i") == 0) {
            instants++;
            assert_string_equal(name, "checkpoint");
        }
    }
    assert_int_equal(thread_main, 1);
    assert_int_equal(thread_worker, 1);
    assert_int_equal(thread_steps, 1);
    assert_int_equal(steps, 6);             /* every step on the steps track */
    assert_int_equal(warm, 1);
    assert_int_equal(loss, 6);
    assert_int_equal(scale, 6);
    assert_int_equal(memory, 6);
    assert_int_equal(kernels, 3);           /* ranges only from the 3 traced steps */
    assert_int_equal(dispatches, 3);
    assert_int_equal(instants, 3);
    assert_int_equal(depth, 3);
    assert_true(produces > 0);

    /* each kernel lies inside a dispatch range of the same thread */
    const cJSON *k;
    cJSON_ArrayForEach(k, events) {
        if (strcmp(str(k, "cat"), "kernel")) continue;
        int inside = 0;
        cJSON_ArrayForEach(e, events) {
            if (strcmp(str(e, "cat"), "dispatch") || num(e, "tid") != num(k, "tid")) continue;
            inside |= num(e, "ts") <= num(k, "ts") && num(k, "ts") + num(k, "dur") <= num(e, "ts") + num(e, "dur") + 1e-3;
        }
        assert_true(inside);
    }
    cJSON_Delete(root);

    /* nothing left beside the output */
    DIR *d = opendir(g_dir);
    struct dirent *de;
    while ((de = readdir(d))) assert_null(strstr(de->d_name, ".tmp-"));
    closedir(d);
}

static void test_export_errors(void **state) {
    char err[512] = "";
    char json[512];
    snprintf(json, sizeof(json), "%s/missing.json", g_dir);
    assert_int_equal(mst_trace_export("/nonexistent/profile.db", json, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/profile.db"));
    assert_int_equal(access(json, F_OK), -1);
    char db[512];
    snprintf(db, sizeof(db), "%s/profile.db", g_dir);
    make_profile(db);
    assert_int_equal(mst_trace_export(db, "/nonexistent/dir/trace.json", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/trace.json"));
}

static void test_export_empty(void **state) {
    /* a profile with no steps and no trace is still a valid, loadable trace */
    char db[512], json[512], err[512];
    snprintf(db, sizeof(db), "%s/empty.db", g_dir);
    snprintf(json, sizeof(json), "%s/empty.json", g_dir);
    mst_store *st = mst_store_open(db, NULL, 0, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(mst_store_close(st, err, sizeof(err)), 0);
    if (mst_trace_export(db, json, err, sizeof(err)) != 0) fail_msg("%s", err);
    cJSON *root = read_json(json);
    assert_non_null(root);
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "traceEvents")));
    cJSON_Delete(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export),
        cmocka_unit_test(test_export_errors),
        cmocka_unit_test(test_export_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
