/* test_rules.c — the diagnosis rules on hand-built profiles: each triggers on its evidence with the
 * expected change, stays quiet below its threshold, and never proposes what is already on. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "advisor/finding.h"

typedef struct {
    rpt_profile p;
    rpt_op ops[3];
    rpt_step steps[200];
    cJSON *summary;
    mst_finding f[MST_MAX_FINDINGS];
    int n;
} fixture;

static void setup_profile(fixture *x, const char *config_json, double dispatch, double kernel, double data) {
    memset(x, 0, sizeof(*x));
    x->p.config = cJSON_Parse(config_json);
    assert_non_null(x->p.config);
    x->p.bd.share[MST_CAT_DISPATCH] = dispatch;
    x->p.bd.share[MST_CAT_KERNEL] = kernel;
    x->p.bd.share[MST_CAT_DATA] = data;
    x->p.bd.share[MST_CAT_OTHER] = 1 - dispatch - kernel - data;
    x->p.bd.wall_median_ns = 1e6;
    x->p.bd.steps = 100;
    x->p.batch_size = 64;
    static char *names[3] = {"conv2d", "batchnorm", "relu"};
    int64_t ns[3] = {700, 200, 100};
    for (int i = 0; i < 3; i++) {
        x->ops[i] = (rpt_op){.total_ns = ns[i]};
        snprintf(x->ops[i].name, sizeof(x->ops[i].name), "%s", names[i]);
    }
    x->p.ops = x->ops;
    x->p.n_ops = 3;
    x->p.ops_total_ns = 1000;
    x->summary = cJSON_Parse("{\"steps\": 100, \"peak_memory_bytes\": 1e7}");
}

static double g_resolvable = 0;     /* the env's resolvable speedup (0: the rules' default, 1.10) */
static double g_penalty = 0;        /* the env's measured subnormal penalty (0: not measured) */

static void diagnose(fixture *x) {
    mst_rule_env env = {2, 0, x->summary, g_resolvable, .subnormal_penalty = g_penalty};
    x->n = mst_advisor_diagnose(&x->p, &env, x->f, MST_MAX_FINDINGS);
}

/* n used steps of wall 1 ms with the given dispatch share each */
static void uniform_steps(fixture *x, int n, double dispatch) {
    for (int i = 0; i < n; i++) {
        x->steps[i] = (rpt_step){.step = i, .wall_ms = 1.0, .used = true, .overflow = -1};
        x->steps[i].cat_ms[MST_CAT_DISPATCH] = dispatch;
        x->steps[i].cat_ms[MST_CAT_KERNEL] = 1.0 - dispatch;
    }
    x->p.steps = x->steps;
    x->p.n_steps = n;
}

static const mst_finding *find(const fixture *x, const char *rule) {
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->f[i].rule, rule) == 0) return &x->f[i];
    return NULL;
}

static void teardown_fixture(fixture *x) {
    cJSON_Delete(x->p.config);
    cJSON_Delete(x->summary);
}

static void test_graph_mode(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}, \"amp\": {\"level\": \"O0\"}}", 0.40, 0.30, 0.0);
    diagnose(&x);
    const mst_finding *f = find(&x, "graph_mode");
    assert_non_null(f);
    assert_string_equal(x.f[0].rule, "graph_mode");                    /* the top finding */
    assert_string_equal(f->sets[0], "runtime.mode=graph");
    assert_true(fabs(f->predicted - 1 / 0.6) < 1e-9);                 /* bounded by 1 / (1 - dispatch) */
    teardown_fixture(&x);
    setup_profile(&x, "{\"runtime\": {\"mode\": \"graph\"}}", 0.40, 0.30, 0.0);   /* already on */
    diagnose(&x);
    assert_null(find(&x, "graph_mode"));
    teardown_fixture(&x);
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.05, 0.90, 0.0);   /* below the threshold */
    diagnose(&x);
    assert_null(find(&x, "graph_mode"));
    teardown_fixture(&x);
}

static void test_loader(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.30, 0.60);
    diagnose(&x);
    const mst_finding *f = find(&x, "loader");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "data.num_workers=2");            /* bounded by the 2 cores */
    assert_string_equal(f->sets[1], "data.prefetch=4");
    assert_true(f && strstr(f->title, "high") != NULL);
    /* data 60% >= compute 40% on 2 threads, 2 cores: the workers would stall the two-thread team, so
     * the compute goes on one thread, counted as 2 x 0.4 = 0.8 of today's step (pessimistic), over
     * the loader's 0.6 on the other core: 1.25x, not the 2.5x that hiding the wait would give */
    assert_int_equal(f->n_sets, 3);
    assert_string_equal(f->sets[2], "runtime.threads=1");
    assert_non_null(strstr(f->change, "runtime.threads 0 (every core) -> 1"));
    assert_true(fabs(f->predicted - 1 / 0.8) < 1e-9);
    assert_int_equal(f->goal, MST_GOAL_SPEED);
    teardown_fixture(&x);
    /* data 45% < compute 55%: the compute keeps its threads, and the CPU work leaves a step of
     * (0.45 + 2 x 0.55) / 2 = 0.775 of today's */
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.45, 0.45);
    diagnose(&x);
    const mst_finding *shared = find(&x, "loader");
    assert_non_null(shared);
    assert_int_equal(shared->n_sets, 2);
    assert_null(strstr(shared->change, "runtime.threads"));
    assert_true(fabs(shared->predicted - 1 / 0.775) < 1e-9);
    /* one worker makes a batch in 0.45 of the step, the step takes one every 0.55: one keeps pace */
    assert_string_equal(shared->sets[0], "data.num_workers=1");
    assert_string_equal(shared->sets[1], "data.prefetch=2");
    assert_non_null(strstr(shared->evidence, "the loader's work on a batch is 0.82x the compute part, so 1 worker keeps pace"));
    teardown_fixture(&x);
    /* data 55%: one worker is short of the compute's pace by 0.22 (< a quarter): still one, and
     * the compute keeps its two threads (a single worker leaves a core's worth of room) */
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.43, 0.55);
    diagnose(&x);
    const mst_finding *paced = find(&x, "loader");
    assert_non_null(paced);
    assert_string_equal(paced->sets[0], "data.num_workers=1");
    assert_int_equal(paced->n_sets, 2);
    assert_null(strstr(paced->change, "runtime.threads"));
    teardown_fixture(&x);
    /* data 57%: short by 0.33 -> two workers, and the compute on one thread */
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.41, 0.57);
    diagnose(&x);
    const mst_finding *two = find(&x, "loader");
    assert_non_null(two);
    assert_string_equal(two->sets[0], "data.num_workers=2");
    assert_int_equal(two->n_sets, 3);
    teardown_fixture(&x);
    /* one worker already, still waited on 30% of the step: the loader bounds the step, so its work
     * on a batch is about a whole step against a compute part of 0.7 (1.43 workers' pace): two */
    setup_profile(&x, "{\"data\": {\"num_workers\": 1, \"prefetch\": 2}}", 0.02, 0.68, 0.30);
    diagnose(&x);
    const mst_finding *more = find(&x, "loader");
    assert_non_null(more);
    assert_string_equal(more->sets[0], "data.num_workers=2");
    teardown_fixture(&x);
    g_resolvable = 1.5;                     /* a high share gets its trial even above the prediction */
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.30, 0.60);
    diagnose(&x);
    const mst_finding *high = find(&x, "loader");
    assert_true(high && high->goal == MST_GOAL_SPEED);
    g_resolvable = 0;
    teardown_fixture(&x);
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}, \"runtime\": {\"threads\": 1}}", 0.02, 0.30, 0.60);
    diagnose(&x);
    const mst_finding *one = find(&x, "loader");     /* one compute thread: the second core takes the loader */
    assert_non_null(one);
    assert_true(fabs(one->predicted - 1 / 0.5) < 1e-9);
    teardown_fixture(&x);
    /* the same job whose step kept one thread by its own trial (summary.json step_threads 1): the
     * compute is on one thread already, nothing to pin, and the prediction is one thread's */
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.30, 0.60);
    cJSON_AddNumberToObject(x.summary, "step_threads", 1);
    diagnose(&x);
    const mst_finding *ran_on_one = find(&x, "loader");
    assert_non_null(ran_on_one);
    assert_int_equal(ran_on_one->n_sets, 2);
    assert_null(strstr(ran_on_one->change, "runtime.threads"));
    assert_true(fabs(ran_on_one->predicted - 1 / 0.5) < 1e-9);
    assert_non_null(strstr(ran_on_one->evidence, "with 1 compute thread:"));
    teardown_fixture(&x);
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.80, 0.06);
    diagnose(&x);
    const mst_finding *low = find(&x, "loader");     /* 6%: (0.06 + 2 x 0.94) / 2 = 0.97 of the step, 1.03x: a finding */
    assert_non_null(low);
    assert_true(fabs(low->predicted - 1 / 0.97) < 1e-9);
    assert_int_equal(low->goal, MST_GOAL_NONE);
    assert_non_null(strstr(low->evidence, "not worth a trial"));
    teardown_fixture(&x);
    setup_profile(&x, "{\"data\": {\"num_workers\": 0, \"prefetch\": 2}}", 0.02, 0.90, 0.04);
    diagnose(&x);
    assert_null(find(&x, "loader"));                                   /* under 5% */
    teardown_fixture(&x);
    setup_profile(&x, "{\"data\": {\"num_workers\": 2, \"prefetch\": 4}}", 0.02, 0.30, 0.60);
    diagnose(&x);
    assert_null(find(&x, "loader"));                                   /* nothing left to turn */
    teardown_fixture(&x);
}

static void test_amp_never_proposed_when_on(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O0\"}, \"runtime\": {\"device\": \"cpu\"}}", 0.02, 0.95, 0.0);
    diagnose(&x);
    const mst_finding *f = find(&x, "amp_level");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "amp.level=O2");
    assert_string_equal(f->sets[1], "amp.dtype=bf16");
    teardown_fixture(&x);
    setup_profile(&x, "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"dynamic\"}}}", 0.02, 0.95, 0.0);
    diagnose(&x);
    assert_null(find(&x, "amp_level"));
    teardown_fixture(&x);
}

static void test_o3_corrected_to_o2(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O3\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"auto\"}}}", 0.02, 0.95, 0.0);
    diagnose(&x);
    const mst_finding *f = find(&x, "amp_o3_norms");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_SAFETY);
    assert_string_equal(f->sets[0], "amp.level=O2");
    teardown_fixture(&x);
}

static void test_overflow_churn(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"dynamic\", \"init\": 1.099511627776e12}}}",
                  0.02, 0.95, 0.0);
    for (int i = 0; i < 100; i++)
        x.steps[i] = (rpt_step){.step = i, .has_scale = true, .overflow = i < 25, .loss_scale = ldexp(1.0, i < 25 ? 40 - i : 15)};
    x.p.steps = x.steps;
    x.p.n_steps = 100;
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 100, \"skipped_steps\": 25, \"overflow_steps\": 25, \"loss_scale_final\": 32768}");
    diagnose(&x);
    const mst_finding *f = find(&x, "loss_scale");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "amp.loss_scale.init=32768");      /* where the run settled */
    assert_true(fabs(f->predicted - 1 / 0.75) < 1e-9);
    teardown_fixture(&x);
}

static void test_underflow(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"none\"}}}", 0.02, 0.95, 0.0);
    for (int i = 0; i < 50; i++) x.steps[i] = (rpt_step){.step = i, .has_loss = true, .loss = 2.302585 - 1e-6 * i, .overflow = 0};
    x.p.steps = x.steps;
    x.p.n_steps = 50;
    diagnose(&x);
    const mst_finding *f = find(&x, "loss_scale_underflow");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "amp.loss_scale.type=dynamic");
    teardown_fixture(&x);
    /* a loss that falls is not underflow */
    setup_profile(&x, "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"none\"}}}", 0.02, 0.95, 0.0);
    for (int i = 0; i < 50; i++) x.steps[i] = (rpt_step){.step = i, .has_loss = true, .loss = 2.3 - 0.02 * i};
    x.p.steps = x.steps;
    x.p.n_steps = 50;
    diagnose(&x);
    assert_null(find(&x, "loss_scale_underflow"));
    teardown_fixture(&x);
}

/* Partial underflow, measured by the probe (summary.json grad_underflow): fires at >= 1% of the
 * reference's nonzero gradient elements lost while the loss still falls, cites the numbers, and
 * proposes dynamic scaling (fixed scale) or a higher init (dynamic below 2^24); quiet below 1%,
 * and quiet when the flat-loss rule already blamed the scale. */
static void underflow_case(fixture *x, const char *scale_json, double fraction, double loss_step) {
    char cfg[512], sum[512];
    snprintf(cfg, sizeof(cfg), "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": %s}}", scale_json);
    setup_profile(x, cfg, 0.02, 0.95, 0.0);
    for (int i = 0; i < 50; i++) x->steps[i] = (rpt_step){.step = i, .has_loss = true, .loss = 2.3 - loss_step * i, .overflow = 0};
    x->p.steps = x->steps;
    x->p.n_steps = 50;
    cJSON_Delete(x->summary);
    snprintf(sum, sizeof(sum), "{\"steps\": 50, \"grad_underflow\": {\"half\": \"f16\", \"every\": 50, \"sampled_steps\": 2,"
             " \"ref_nonzero\": 1000, \"half_zero\": %.0f, \"fraction\": %.17g, \"fraction_max\": %.17g,"
             " \"fraction_last\": %.17g, \"cast_zero_fraction\": 0.5}}", 1000 * fraction, fraction, fraction, fraction);
    x->summary = cJSON_Parse(sum);
    assert_non_null(x->summary);
    diagnose(x);
}

static void test_grad_underflow(void **state) {
    (void)state;
    fixture x;
    underflow_case(&x, "{\"type\": \"fixed\", \"init\": 1.52587890625e-05}", 0.906, 0.02);
    const mst_finding *f = find(&x, "grad_underflow");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_ACCURACY);
    assert_string_equal(f->sets[0], "amp.loss_scale.type=dynamic");
    assert_string_equal(f->sets[1], "amp.loss_scale.init=16777216");
    assert_non_null(strstr(f->evidence, "906 (90.60%) are zero after the O2 f16 backward"));
    assert_non_null(strstr(f->title, "90.6%"));
    assert_null(find(&x, "loss_scale_underflow"));      /* the loss falls: the flat-loss check cannot see it */
    teardown_fixture(&x);
    /* dynamic, but from a low init: a higher init */
    underflow_case(&x, "{\"type\": \"dynamic\", \"init\": 1}", 0.2, 0.02);
    f = find(&x, "grad_underflow");
    assert_non_null(f);
    assert_int_equal(f->n_sets, 1);
    assert_string_equal(f->sets[0], "amp.loss_scale.init=16777216");
    teardown_fixture(&x);
    /* below 1%: quiet */
    underflow_case(&x, "{\"type\": \"fixed\", \"init\": 1}", 0.009, 0.02);
    assert_null(find(&x, "grad_underflow"));
    teardown_fixture(&x);
    /* not measured (no probe ran): quiet */
    underflow_case(&x, "{\"type\": \"fixed\", \"init\": 1}", 0.5, 0.02);
    cJSON_DeleteItemFromObject(x.summary, "grad_underflow");
    diagnose(&x);
    assert_null(find(&x, "grad_underflow"));
    teardown_fixture(&x);
    /* a flat loss: loss_scale_underflow already names the cause, once, with the measured fraction */
    underflow_case(&x, "{\"type\": \"fixed\", \"init\": 1}", 1.0, 1e-6);
    assert_null(find(&x, "grad_underflow"));
    f = find(&x, "loss_scale_underflow");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "measured: 100.00%"));
    teardown_fixture(&x);
}

static void test_recompile(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"graph\", \"dynamic_batch\": false}}", 0.0, 0.9, 0.0);
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 100, \"compile_count\": 2, \"compile_ms\": 40, \"wall_s\": 1.0}");
    diagnose(&x);
    const mst_finding *f = find(&x, "recompile");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "runtime.dynamic_batch=true");
    teardown_fixture(&x);
}

static void test_memory_headroom_is_a_finding_only(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"graph\"}}", 0.0, 0.9, 0.0);
    mst_rule_env env = {2, 24e9, x.summary};                /* a 10 MB peak on a 24 GB machine */
    x.n = mst_advisor_diagnose(&x.p, &env, x.f, MST_MAX_FINDINGS);
    const mst_finding *f = find(&x, "memory_headroom");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_NONE);
    assert_int_equal(f->n_sets, 0);
    teardown_fixture(&x);
}

/* Data parallel: summary.json's "distributed" object drives the communication rules. */
static void dp_summary(fixture *x, const char *distributed, double step_ms) {
    cJSON_Delete(x->summary);
    char buf[1024];
    snprintf(buf, sizeof(buf), "{\"steps\": 100, \"step_time_ms_median\": %g, \"distributed\": %s}", step_ms, distributed);
    x->summary = cJSON_Parse(buf);
    assert_non_null(x->summary);
}

static void test_comm_rules(void **state) {
    (void)state;
    fixture x;
    /* 2 ranks, overlap off, 40% of the step exposed: overlap; also processes vs threads (>= 25%) */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"graph\", \"comm\": {\"overlap\": false, \"bucket_mb\": 25}}, \"data\": {\"batch_size\": 32}}",
                  0.0, 0.6, 0.0);
    dp_summary(&x, "{\"ranks\": 2, \"buckets\": 1, \"comm_exposed_ms_median\": 2.0, \"grad_bytes_per_step\": 1048576, "
                   "\"imbalance\": 0.12, \"imbalance_flagged\": true, \"slowest_rank\": 1}", 5.0);
    diagnose(&x);
    const mst_finding *f = find(&x, "comm_overlap");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "runtime.comm.overlap=true");
    assert_int_equal(f->n_sets, 2);                 /* one bucket: overlap alone could hide nothing */
    assert_string_equal(f->sets[1], "runtime.comm.bucket_mb=0.25");
    assert_true(fabs(f->predicted - 1.0 / (1.0 - 0.4 * 0.75 / 2)) < 1e-9);      /* 3 of 4 buckets can hide, half predicted */
    assert_null(find(&x, "comm_bucket"));           /* overlap is off: buckets are not the problem yet */
    f = find(&x, "procs_threads");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "--nproc=1");
    assert_string_equal(f->sets[1], "data.batch_size=64");      /* the same global batch */
    f = find(&x, "slow_rank");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_NONE);
    assert_non_null(strstr(f->title, "rank 1"));
    teardown_fixture(&x);

    /* overlap off, 2 buckets: overlap alone; the last bucket stays exposed (half of 1/2 predicted hidden) */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\", \"comm\": {\"overlap\": false, \"bucket_mb\": 1}}, \"data\": {\"batch_size\": 32}}",
                  0.0, 0.6, 0.0);
    dp_summary(&x, "{\"ranks\": 2, \"buckets\": 2, \"comm_exposed_ms_median\": 2.0, \"grad_bytes_per_step\": 7454760, "
                   "\"imbalance\": 0.0, \"imbalance_flagged\": false}", 5.0);
    diagnose(&x);
    f = find(&x, "comm_overlap");
    assert_non_null(f);
    assert_int_equal(f->n_sets, 1);
    assert_true(fabs(f->predicted - 1.0 / (1.0 - 0.4 * 0.5 / 2)) < 1e-9);
    teardown_fixture(&x);

    /* overlap on, 4 buckets, 30% exposed, 2 ranks x 2 threads: a progress thread where cores are spare */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\", \"threads\": 4, \"comm\": {\"overlap\": true, \"bucket_mb\": 1}}, "
                      "\"data\": {\"batch_size\": 32}}", 0.0, 0.6, 0.0);
    dp_summary(&x, "{\"ranks\": 2, \"buckets\": 4, \"comm_exposed_ms_median\": 1.5, \"grad_bytes_per_step\": 4194304, "
                   "\"imbalance\": 0.0, \"imbalance_flagged\": false}", 5.0);
    mst_rule_env env6 = {6, 0, x.summary, 0, true};
    x.n = mst_advisor_diagnose(&x.p, &env6, x.f, MST_MAX_FINDINGS);
    f = find(&x, "comm_progress");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "runtime.comm.progress_thread=true");
    assert_true(fabs(f->predicted - 1.0 / (1.0 - 0.3 * 0.75 / 2)) < 1e-9);
    mst_rule_env env4 = {4, 0, x.summary, 0, true};     /* 2 x 2 threads on 4 cores: no core to spare */
    x.n = mst_advisor_diagnose(&x.p, &env4, x.f, MST_MAX_FINDINGS);
    assert_null(find(&x, "comm_progress"));
    teardown_fixture(&x);

    /* overlap on, one bucket, 15% exposed: smaller buckets; balanced ranks: no slow rank */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"graph\", \"comm\": {\"overlap\": true, \"bucket_mb\": 25}}, \"data\": {\"batch_size\": 32}}",
                  0.0, 0.6, 0.0);
    dp_summary(&x, "{\"ranks\": 2, \"buckets\": 1, \"comm_exposed_ms_median\": 0.75, \"grad_bytes_per_step\": 4194304, "
                   "\"imbalance\": 0.02, \"imbalance_flagged\": false}", 5.0);
    diagnose(&x);
    f = find(&x, "comm_bucket");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "runtime.comm.bucket_mb=1");
    assert_null(find(&x, "comm_overlap"));
    assert_null(find(&x, "procs_threads"));         /* 15% < 25% */
    assert_null(find(&x, "slow_rank"));
    teardown_fixture(&x);

    /* one process, eager, dispatch-bound, MPI available: try 2 ranks of half the batch */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}, \"data\": {\"batch_size\": 32}}", 0.5, 0.4, 0.0);
    mst_rule_env env = {2, 0, x.summary, 0, true};
    x.n = mst_advisor_diagnose(&x.p, &env, x.f, MST_MAX_FINDINGS);
    f = find(&x, "procs_threads");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "--nproc=2");
    assert_string_equal(f->sets[1], "data.batch_size=16");
    env.mpi_available = false;                      /* no MPI in this build: nothing to try */
    x.n = mst_advisor_diagnose(&x.p, &env, x.f, MST_MAX_FINDINGS);
    assert_null(find(&x, "procs_threads"));
    assert_null(find(&x, "comm_overlap"));          /* one process: no communication rules */
    teardown_fixture(&x);
}

/* One preempted step (38 ms of kernel time in a run of 1 ms steps) drags the run-wide dispatch
 * share to 5%; the rules read the median of the per-step shares and still see 26%. */
static void test_one_slow_step_does_not_flip(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.05, 0.90, 0.0);    /* the run-wide sums */
    uniform_steps(&x, 100, 0.26);
    x.steps[50].wall_ms = 38;
    x.steps[50].cat_ms[MST_CAT_KERNEL] = 38 - 0.26;
    diagnose(&x);
    const mst_finding *f = find(&x, "graph_mode");
    assert_non_null(f);
    assert_true(fabs(f->predicted - 1 / 0.74) < 1e-9);
    assert_non_null(strstr(f->evidence, "medians over"));
    teardown_fixture(&x);
}

/* Graph mode is proposed whenever its bound exceeds what the trials resolve, not above a fixed 10%. */
static void test_graph_mode_by_resolvable_gain(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.07, 0.90, 0.0);     /* bound 1.075x */
    g_resolvable = 1.03;
    diagnose(&x);
    assert_non_null(find(&x, "graph_mode"));
    g_resolvable = 1.10;
    diagnose(&x);
    assert_null(find(&x, "graph_mode"));
    g_resolvable = 0;
    teardown_fixture(&x);
}

/* The diagnosis profile records every op, and its records' cost sits inside the steps: graph mode's
 * share is dispatch net of it. 10 us steps with 3 us of dispatch and 100 records at 20 ns, 4 ns of
 * preparation each: half the records and all the preparation (1.4 us) come off dispatch, all of
 * it (2.4 us) off the step: 1.6 / 7.6 = 21.05%, not the 30% recorded. */
static void test_graph_mode_net_of_recording(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.30, 0.60, 0.0);
    uniform_steps(&x, 100, 0.30);
    for (int i = 0; i < 100; i++) {
        x.steps[i].wall_ms = 0.010;
        x.steps[i].cat_ms[MST_CAT_DISPATCH] = 0.003;
        x.steps[i].cat_ms[MST_CAT_KERNEL] = 0.007;
        x.steps[i].n_events = 100;
    }
    x.p.record_ns = 20;
    x.p.prep_ns_per_record = 4;
    diagnose(&x);
    const mst_finding *f = find(&x, "graph_mode");
    assert_non_null(f);
    const double d = (0.003 - 100 * (20 / 2.0 + 4) / 1e6) / (0.010 - 100 * (20 + 4) / 1e6);
    assert_true(fabs(d - 0.2105) < 1e-3);
    assert_true(fabs(f->predicted - 1 / (1 - d)) < 1e-9);
    assert_non_null(strstr(f->evidence, "(30.0% as recorded"));
    /* a profile that did not record its records' cost: the share as recorded */
    x.p.record_ns = x.p.prep_ns_per_record = NAN;
    diagnose(&x);
    f = find(&x, "graph_mode");
    assert_non_null(f);
    assert_true(fabs(f->predicted - 1 / 0.7) < 1e-9);
    teardown_fixture(&x);
}

/* Subnormals: counted in the parameters, or step time rising steadily at unchanged shapes. */
static void test_denormals(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.02, 0.95, 0.0);
    diagnose(&x);
    assert_null(find(&x, "denormals"));
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 100, \"subnormal_fraction\": {\"params\": 0.05}}");
    diagnose(&x);
    const mst_finding *f = find(&x, "denormals");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "runtime.flush_denormals=true");
    assert_true(isnan(f->predicted));         /* no timing evidence: no prediction, the trial measures */
    assert_int_equal(f->goal, MST_GOAL_SPEED);
    /* weighed by the CPU's measured penalty: 1.04x (this project's Zen 5) is not worth a trial */
    g_penalty = 1.04;
    diagnose(&x);
    f = find(&x, "denormals");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_NONE);
    assert_true(f->predicted > 1 && f->predicted < 1.01);     /* 1 / (1 - 0.95 (1 - 1 / (1 + 0.05 x 0.04))) */
    assert_non_null(strstr(f->evidence, "not worth a trial"));
    /* 50x (microcode assists): 5% subnormal values make the kernels 3.45x slower; flushing gains ~3.07x */
    g_penalty = 50;
    diagnose(&x);
    f = find(&x, "denormals");
    assert_non_null(f);
    assert_int_equal(f->goal, MST_GOAL_SPEED);
    assert_true(fabs(f->predicted - 1 / (1 - 0.95 * (1 - 1 / 3.45))) < 1e-9);
    g_penalty = 0;
    teardown_fixture(&x);
    /* steps from 1 ms to 4 ms over the run (SGD on subnormal momentum), none counted in the weights */
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\"}}", 0.02, 0.95, 0.0);
    uniform_steps(&x, 100, 0.02);
    for (int i = 0; i < 100; i++) x.steps[i].wall_ms = 1.0 + 3.0 * i / 99;
    diagnose(&x);
    assert_null(find(&x, "denormals"));     /* the growth is outside the kernels: not subnormal arithmetic */
    for (int i = 0; i < 100; i++) x.steps[i].cat_ms[MST_CAT_KERNEL] = x.steps[i].wall_ms - 0.02;
    diagnose(&x);
    f = find(&x, "denormals");
    assert_non_null(f);
    assert_true(f->predicted > 1.5 && f->predicted < 3);    /* the run's time over the first quarter's speed */
    assert_true(f->score < 1.05);     /* timing alone, nothing counted: ranked below counted findings */
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 100, \"subnormal_fraction\": {\"params\": 0, \"grads\": 0.0001}}");
    diagnose(&x);
    f = find(&x, "denormals");
    assert_non_null(f);
    assert_true(f->score == f->predicted && f->predicted > 1.5);     /* the rise with subnormal gradients counted */
    teardown_fixture(&x);
    setup_profile(&x, "{\"runtime\": {\"mode\": \"eager\", \"flush_denormals\": true}}", 0.02, 0.95, 0.0);   /* already on */
    uniform_steps(&x, 100, 0.02);
    for (int i = 0; i < 100; i++) x.steps[i].wall_ms = 1.0 + 3.0 * i / 99;
    for (int i = 0; i < 100; i++) x.steps[i].cat_ms[MST_CAT_KERNEL] = x.steps[i].wall_ms - 0.02;
    diagnose(&x);
    assert_null(find(&x, "denormals"));
    teardown_fixture(&x);
}

/* Churn that persists all run long under a 2-step window is the window's doing, not the init's. */
static void test_churn_blames_the_window(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O2\", \"dtype\": \"f16\", \"loss_scale\": {\"type\": \"dynamic\", "
                      "\"init\": 65536, \"window\": 2}}}", 0.02, 0.95, 0.0);
    for (int i = 0; i < 99; i++)        /* grow, grow, overflow: one skip every third step */
        x.steps[i] = (rpt_step){.step = i, .has_scale = true, .overflow = i % 3 == 2, .loss_scale = 65536};
    x.p.steps = x.steps;
    x.p.n_steps = 99;
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 99, \"skipped_steps\": 33, \"overflow_steps\": 33, \"loss_scale_final\": 65536}");
    diagnose(&x);
    const mst_finding *f = find(&x, "loss_scale");
    assert_non_null(f);
    assert_string_equal(f->sets[0], "amp.loss_scale.window=2000");
    assert_int_equal(f->count, MST_COUNT_SKIPPED_STEPS);
    assert_non_null(strstr(f->evidence, "period of the shrink cycles 3.0 steps"));
    teardown_fixture(&x);
}

/* The AMP evidence cites the CPU features the run recorded, or says they were not recorded. */
static void test_amp_evidence_from_detected_features(void **state) {
    (void)state;
    fixture x;
    setup_profile(&x, "{\"amp\": {\"level\": \"O0\"}}", 0.02, 0.95, 0.0);
    diagnose(&x);
    const mst_finding *f = find(&x, "amp_level");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "CPU features not recorded"));
    assert_null(strstr(f->evidence, "no native half"));
    cJSON_Delete(x.summary);
    x.summary = cJSON_Parse("{\"steps\": 100, \"cpu\": {\"model\": \"Test CPU\", \"features\": [\"avx2\", \"avx512f\", "
                            "\"avx512_bf16\", \"amx_bf16\"]}}");
    diagnose(&x);
    f = find(&x, "amp_level");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "CPU Test CPU: half-precision features avx512_bf16, amx_bf16"));
    teardown_fixture(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_mode),
        cmocka_unit_test(test_graph_mode_net_of_recording),
        cmocka_unit_test(test_loader),
        cmocka_unit_test(test_amp_never_proposed_when_on),
        cmocka_unit_test(test_o3_corrected_to_o2),
        cmocka_unit_test(test_overflow_churn),
        cmocka_unit_test(test_underflow),
        cmocka_unit_test(test_recompile),
        cmocka_unit_test(test_memory_headroom_is_a_finding_only),
        cmocka_unit_test(test_comm_rules),
        cmocka_unit_test(test_one_slow_step_does_not_flip),
        cmocka_unit_test(test_graph_mode_by_resolvable_gain),
        cmocka_unit_test(test_denormals),
        cmocka_unit_test(test_grad_underflow),
        cmocka_unit_test(test_churn_blames_the_window),
        cmocka_unit_test(test_amp_evidence_from_detected_features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
