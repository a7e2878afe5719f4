/* test_dp_train.c — data-parallel training under `mpirun -np 2` (CTest's comm.test_dp_train.np2;
 * alone it skips). Each rank also trains the one-process reference itself, so no rank needs the
 * other's result:
 *   - equivalence: 2 ranks of per-rank batch 8 reproduce 1 process of batch 16 (parameters and
 *     validation accuracy) within the reduction order's tolerance, eager and graph, O0 and O2,
 *     overlap on and off, buckets of several sizes;
 *   - overflow agreement: an inf in one rank's batch makes both ranks skip the update;
 *   - resume: 1 epoch, checkpoint (rank 0 writes), resume to 2 epochs = 2 epochs straight;
 *   - the progress thread (MPI_THREAD_MULTIPLE, asked for before the communicator is made): the
 *     equivalence with it on, and its handed-over all-reduces: values, a timeout on a late rank
 *     that then completes, the busy time. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/dp.h"
#include "runtime/context.h"
#include "runtime/data/loader.h"
#include "runtime/ops.h"
#include "runtime/step.h"
#include "runtime/trainer.h"
#include "workloads/zoo.h"

static mst_comm *world;

static const mst_model_spec mlp_spec = {.name = "mlp", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 10, .hidden1 = 48, .hidden2 = 24};

typedef struct {
    mst_ctx *ctx;
    mst_model *model;
    mst_source *train_src, *test_src;
    mst_loader *train, *test;
    mst_train_result res;
    double moved;               /* largest parameter change from its initial value, relative */
} run;

typedef struct {
    bool dp;                    /* 2 ranks of batch 8, else one process of batch 16 */
    bool graph, overlap;
    int amp_level;
    double bucket_mb;
    int64_t epochs, max_steps;
    const char *checkpoint;
    bool resume;
} run_opts;

static void run_train(run *r, const run_opts *o) {
    memset(r, 0, sizeof(*r));
    r->ctx = mst_ctx_new(&(mst_ctx_config){.seed = 77, .n_threads = 1});
    char err[256];
    r->model = mst_zoo_model_new(r->ctx, &mlp_spec, err, sizeof(err));
    if (!r->model) fail_msg("model: %s", err);
    r->train_src = mst_source_synthetic_new(160, 1, 8, 8, 10, 5, 0);
    r->test_src = mst_source_synthetic_new(64, 1, 8, 8, 10, 5, 1);
    const int ranks = o->dp ? mst_comm_size(world) : 1;
    mst_loader_config lc = {.batch_size = 16 / ranks, .shuffle = true, .seed = 9, .prefetch = 1,
                            .shard_rank = o->dp ? mst_comm_rank(world) : 0, .shard_count = ranks};
    r->train = mst_loader_new(r->train_src, &lc, err, sizeof(err));
    lc.shuffle = false;
    r->test = mst_loader_new(r->test_src, &lc, err, sizeof(err));
    assert_non_null(r->train);
    assert_non_null(r->test);
    mst_train_config cfg = mst_train_defaults();
    cfg.epochs = o->epochs;
    cfg.max_steps = o->max_steps;
    cfg.sample_shape[0] = 1;
    cfg.sample_shape[1] = 8;
    cfg.sample_shape[2] = 8;
    cfg.optim = mst_optim_defaults(MST_OPTIM_SGD);
    cfg.optim.lr = 0.1;
    cfg.optim.momentum = 0.9;
    cfg.lr.base_lr = 0.1;
    cfg.progress = NULL;
    cfg.graph = o->graph;
    cfg.amp_level = o->amp_level;
    cfg.amp_dtype = MST_DTYPE_BF16;
    if (o->amp_level) cfg.loss_scale = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    cfg.comm = o->dp ? world : NULL;
    cfg.comm_bucket_mb = o->bucket_mb;
    cfg.comm_overlap = o->overlap;
    cfg.checkpoint_path = o->checkpoint;
    cfg.resume = o->resume;
    double *init[16], scale = 1e-30;
    assert_true(r->model->n_params <= 16);
    for (int p = 0; p < r->model->n_params; p++) {
        const mst_tensor *t = r->model->params[p];
        init[p] = malloc((size_t)t->numel * sizeof(double));
        for (int64_t i = 0; i < t->numel; i++) init[p][i] = mst_tensor_get(t, i);
    }
    if (mst_train(r->ctx, r->model, r->train, r->test, &cfg, &r->res) != MST_OK) fail_msg("train: %s", mst_ctx_error(r->ctx));
    for (int p = 0; p < r->model->n_params; p++) {
        const mst_tensor *t = r->model->params[p];
        for (int64_t i = 0; i < t->numel; i++) {
            r->moved = fmax(r->moved, fabs(mst_tensor_get(t, i) - init[p][i]));
            scale = fmax(scale, fabs(init[p][i]));
        }
        free(init[p]);
    }
    r->moved /= scale;
}

static void run_free(run *r) {
    mst_train_result_free(&r->res);
    mst_loader_free(r->train);
    mst_loader_free(r->test);
    mst_source_free(r->train_src);
    mst_source_free(r->test_src);
    mst_model_free(r->model);
    mst_ctx_free(r->ctx);
}

/* Largest |a - b| over all parameters, relative to the parameters' largest magnitude. */
static double param_diff(const run *a, const run *b) {
    double diff = 0, scale = 1e-30;
    for (int p = 0; p < a->model->n_params; p++)
        for (int64_t i = 0; i < a->model->params[p]->numel; i++) {
            double x = mst_tensor_get(a->model->params[p], i), y = mst_tensor_get(b->model->params[p], i);
            diff = fmax(diff, fabs(x - y));
            scale = fmax(scale, fabs(x));
        }
    return diff / scale;
}

static void test_equivalence(void **state) {
    if (mst_comm_size(world) != 2) skip();
    const struct { bool graph; int amp; bool overlap; double bucket_mb; double tol; bool thread; } cases[] = {
        {false, 0, true, 0.004, 1e-5, false}, {false, 0, false, 25, 1e-5, false}, {true, 0, true, 0.004, 1e-5, false},
        {true, 0, false, 0.05, 1e-5, false},  {false, 2, true, 0.004, 2e-2, false}, {true, 2, true, 0.004, 2e-2, false},
        {false, 0, true, 0.004, 1e-5, true},  {true, 0, true, 0.004, 1e-5, true},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        run ref, dp;
        run_opts o = {.graph = cases[c].graph, .amp_level = cases[c].amp, .overlap = cases[c].overlap,
                      .bucket_mb = cases[c].bucket_mb, .epochs = 1, .max_steps = 10};
        run_train(&ref, &o);
        o.dp = true;
        if (cases[c].thread) assert_int_equal(mst_comm_progress_thread(world, true), MST_OK);
        run_train(&dp, &o);
        assert_int_equal(mst_comm_progress_thread(world, false), MST_OK);
        assert_int_equal(world->inflight, 0);
        double d = param_diff(&ref, &dp);
        printf("rank %d: %s O%d overlap %d thread %d bucket %.3f MiB (%d buckets, %lld gradient bytes): max relative parameter difference %.3g, "
               "val accuracy %.4f vs %.4f, loss %.6f vs %.6f, parameters moved %.3g\n",
               mst_comm_rank(world), cases[c].graph ? "graph" : "eager", cases[c].amp, cases[c].overlap, cases[c].thread,
               cases[c].bucket_mb,
               dp.res.comm_buckets, (long long)dp.res.comm_grad_bytes, d, dp.res.val_accuracy, ref.res.val_accuracy,
               dp.res.final_loss, ref.res.final_loss, ref.moved);
        assert_true(ref.moved > 10 * cases[c].tol);       /* training moved them: the comparison means something */
        assert_int_equal(dp.res.comm_size, 2);
        assert_int_equal(dp.res.steps, ref.res.steps);
        if (!(d <= cases[c].tol)) fail_msg("case %zu: parameters differ by %.3g relative (tolerance %.1g)", c, d, cases[c].tol);
        assert_true(fabs(dp.res.val_accuracy - ref.res.val_accuracy) <= 2.0 / 64 + 1e-12);
        assert_true(fabs(dp.res.final_loss - ref.res.final_loss) <= 50 * cases[c].tol * fmax(1, fabs(ref.res.final_loss)));
        if (cases[c].bucket_mb < 0.01) assert_true(dp.res.comm_buckets > 1);
        run_free(&ref);
        run_free(&dp);
    }
}

/* One rank's batch holds an inf: the summed gradients are non-finite on both ranks, both skip. */
static void test_overflow_agreement(void **state) {
    if (mst_comm_size(world) != 2) skip();
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 5, .n_threads = 1});
    char err[256];
    mst_model *m = mst_zoo_model_new(ctx, &mlp_spec, err, sizeof(err));
    assert_non_null(m);
    mst_optim_config oc = mst_optim_defaults(MST_OPTIM_SGD);
    mst_optim *opt = mst_optim_new(ctx, &oc, m->params, m->n_params);
    mst_loss_scale_config lc = mst_loss_scale_defaults(MST_LOSS_SCALE_DYNAMIC);
    mst_loss_scaler *ls = mst_loss_scaler_new(ctx, &lc);
    assert_int_equal(mst_dp_attach(ctx, world, &(mst_dp_config){.bucket_mb = 0.004, .overlap = true}), MST_OK);
    const mst_step_spec spec = {.model = m, .optim = opt, .scaler = ls, .accumulate = 1};
    double before = mst_tensor_get(m->params[0], 0);
    for (int step = 0; step < 2; step++) {
        mst_pool_push(ctx);
        mst_tensor *x = mst_tensor_full(ctx, MST_DTYPE_F32, 4, (int64_t[]){4, 1, 8, 8}, 0.5);
        mst_tensor *y = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){4});
        const bool poison = step == 0 && mst_comm_rank(world) == 1;
        if (poison) mst_tensor_f32(x)[3] = INFINITY;
        mst_step_outputs out;
        mst_step_record rec;
        assert_int_equal(mst_optim_set_lr(opt, 0.1), MST_OK);
        if (mst_step_run(ctx, &spec, &x, &y, &out) != MST_OK || mst_step_finish(ctx, &spec, &out, &rec) != MST_OK)
            fail_msg("step: %s", mst_ctx_error(ctx));
        if (step == 0) {
            assert_true(rec.overflow);      /* on both ranks, though only rank 1's data was bad */
            assert_true(rec.skipped);
            assert_true(mst_tensor_get(m->params[0], 0) == before);
        } else {
            assert_false(rec.overflow);
            assert_true(mst_tensor_get(m->params[0], 0) != before);
        }
        mst_pool_pop(ctx);
    }
    /* the ranks hold the same parameters */
    double v = mst_tensor_get(m->params[0], 1), mine = v;
    assert_int_equal(mst_comm_broadcast(world, &v, sizeof(v), 0), MST_OK);
    assert_true(v == mine);
    mst_dp_detach(ctx);
    mst_loss_scaler_free(ls);
    mst_optim_free(opt);
    mst_model_free(m);
    mst_ctx_free(ctx);
}

static void test_resume(void **state) {
    if (mst_comm_size(world) != 2) skip();
    char path[256];
    double tag = (double)getpid();      /* rank 0's pid names the file for both */
    assert_int_equal(mst_comm_broadcast(world, &tag, sizeof(tag), 0), MST_OK);
    snprintf(path, sizeof(path), "/tmp/mstune-dp-resume-%.0f.ckpt", tag);
    run straight, first, resumed;
    run_opts o = {.dp = true, .overlap = true, .bucket_mb = 0.004, .epochs = 2};
    run_train(&straight, &o);
    o.epochs = 1;
    o.checkpoint = path;
    run_train(&first, &o);
    assert_int_equal(mst_comm_barrier(world), MST_OK);     /* rank 0 wrote it */
    if (mst_comm_rank(world) != 0) assert_int_not_equal(access(path, F_OK), -1);
    o.epochs = 2;
    o.resume = true;
    run_train(&resumed, &o);
    assert_int_equal(resumed.res.resumed_at_step, first.res.steps);
    assert_int_equal(resumed.res.steps, straight.res.steps);
    double d = param_diff(&straight, &resumed);
    if (d != 0) fail_msg("resumed run differs from the straight one by %.3g", d);
    assert_int_equal(mst_comm_barrier(world), MST_OK);
    if (mst_comm_rank(world) == 0) unlink(path);
    run_free(&straight);
    run_free(&first);
    run_free(&resumed);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* All-reduces handed to the progress thread while rank 1 is late: rank 0's poll reads "not yet",
 * a wait with a short limit fails with the message and a second one completes; the sums are
 * right and the busy time is the union of the two requests' intervals. */
static void test_progress_thread(void **state) {
    if (mst_comm_size(world) != 2) skip();
    assert_true(world->threads_ok);
    assert_int_equal(mst_comm_progress_thread(world, true), MST_OK);
    assert_non_null(world->progress);
    const int r = mst_comm_rank(world);
    enum { N = 1 << 16 };
    float *send = malloc(N * sizeof(float)), *recv = malloc(N * sizeof(float)), b = (float)(r + 1), rb = 0;
    for (int i = 0; i < N; i++) send[i] = (float)((i % 5) * (r + 1));
    assert_int_equal(mst_comm_barrier(world), MST_OK);
    if (r == 1) nanosleep(&(struct timespec){0, 300000000}, NULL);     /* the late rank */
    mst_comm_stats_reset(world);
    const uint64_t t0 = now_ns();
    mst_comm_req qa = {0}, qb = {0};
    assert_int_equal(mst_comm_iallreduce_sum_f32(world, send, recv, N, &qa), MST_OK);
    assert_int_equal(mst_comm_iallreduce_sum_f32(world, &b, &rb, 1, &qb), MST_OK);
    assert_true(qa.handed && qb.handed);
    if (r == 0) {
        assert_int_equal(mst_comm_poll(world, &qa), 0);
        world->timeout_s = 0.05;
        assert_int_equal(mst_comm_wait(world, &qa, "handed all-reduce"), MST_ERR_IO);
        assert_non_null(strstr(mst_comm_error(world), "waited more than"));
        world->timeout_s = 0;
    }
    assert_int_equal(mst_comm_wait(world, &qa, "handed all-reduce"), MST_OK);
    assert_int_equal(mst_comm_wait(world, &qb, "handed all-reduce"), MST_OK);
    const uint64_t elapsed = now_ns() - t0;
    world->timeout_s = 60;
    for (int i = 0; i < N; i++) assert_true(recv[i] == (float)((i % 5) * 3));
    assert_true(rb == 3);
    assert_true(world->stats.busy_ns <= elapsed);
    if (r == 0) assert_true(world->stats.busy_ns > 250000000ull);
    assert_int_equal(world->inflight, 0);
    assert_int_equal(mst_comm_progress_thread(world, false), MST_OK);
    assert_null(world->progress);
    free(send);
    free(recv);
}

int main(void) {
    char err[256] = "";
    mst_comm_want_threads(true);        /* MPI_THREAD_MULTIPLE: the progress thread's cases */
    world = mst_comm_new_auto(60, err, sizeof(err));
    if (!world) {
        fprintf(stderr, "communicator: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalence),
        cmocka_unit_test(test_overflow_agreement),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_progress_thread),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mst_comm_free(world);
    return rc;
}
