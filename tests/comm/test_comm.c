/* test_comm.c — the communicator (runtime/comm/): alone it checks the single-process one; under
 * `mpirun -np 2` (CTest's comm.test_comm.np2) the MPI one: sums, broadcast, barrier, the
 * non-blocking all-reduce, the flag agreement and a wait that times out on a late rank and then
 * completes once it arrives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"

static mst_comm *comm;

static void test_rank_size(void **state) {
    int launched;
    mst_comm_launched(&launched);
    assert_int_equal(mst_comm_size(comm), launched);
    assert_true(mst_comm_rank(comm) >= 0 && mst_comm_rank(comm) < mst_comm_size(comm));
    assert_string_equal(mst_comm_name(comm), launched > 1 ? "mpi" : "single");
}

static void test_allreduce(void **state) {
    const int r = mst_comm_rank(comm), n = mst_comm_size(comm);
    float f[1000];
    double d[3];
    for (int i = 0; i < 1000; i++) f[i] = (float)(i + 1000 * r);
    for (int i = 0; i < 3; i++) d[i] = 0.5 * (r + 1) + i;
    assert_int_equal(mst_comm_allreduce_sum_f32(comm, f, 1000), MST_OK);
    assert_int_equal(mst_comm_allreduce_sum_f64(comm, d, 3), MST_OK);
    for (int i = 0; i < 1000; i++) {
        double want = 0;
        for (int k = 0; k < n; k++) want += i + 1000 * k;
        assert_true(f[i] == (float)want);
    }
    for (int i = 0; i < 3; i++) {
        double want = 0;
        for (int k = 0; k < n; k++) want += 0.5 * (k + 1) + i;
        assert_true(d[i] == want);
    }
}

static void test_broadcast_barrier(void **state) {
    const int r = mst_comm_rank(comm);
    char buf[32];
    snprintf(buf, sizeof(buf), "from rank %d", r);
    assert_int_equal(mst_comm_broadcast(comm, buf, sizeof(buf), 0), MST_OK);
    assert_string_equal(buf, "from rank 0");
    assert_int_equal(mst_comm_barrier(comm), MST_OK);
}

static void test_any(void **state) {
    bool flag = mst_comm_rank(comm) == mst_comm_size(comm) - 1;     /* only the last rank says yes */
    assert_int_equal(mst_comm_any(comm, &flag), MST_OK);
    assert_true(flag);
    flag = false;
    assert_int_equal(mst_comm_any(comm, &flag), MST_OK);
    assert_false(flag);
}

static void test_iallreduce(void **state) {
    const int r = mst_comm_rank(comm), n = mst_comm_size(comm);
    enum { N = 1 << 18 };
    float *send = malloc(N * sizeof(float)), *recv = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) send[i] = (float)((i % 7) * (r + 1));
    mst_comm_stats_reset(comm);
    mst_comm_req req = {0};
    assert_int_equal(mst_comm_iallreduce_sum_f32(comm, send, recv, N, &req), MST_OK);
    while (mst_comm_poll(comm, &req) == 0) {}
    assert_int_equal(mst_comm_wait(comm, &req, "test all-reduce"), MST_OK);
    for (int i = 0; i < N; i++) assert_true(recv[i] == (float)((i % 7) * n * (n + 1) / 2));
    assert_int_equal(comm->stats.allreduce_calls, 1);
    assert_int_equal(comm->stats.allreduce_bytes, (int64_t)N * 4);
    free(send);
    free(recv);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Two all-reduces in flight at once, waited one after the other while the peer is late: the busy
 * time is the union of their intervals (not their sum, which counted the second one's wait under
 * the first as "hidden": 2x the elapsed time), and nearly all of it is the caller's wait. A poll
 * of a request not complete yet counts as exposed progress time. */
static void test_busy_union(void **state) {
    if (mst_comm_size(comm) < 2) skip();
    const int r = mst_comm_rank(comm);
    float a = 1, ra = 0, b = 2, rb = 0;
    mst_comm_req qa = {0}, qb = {0};
    assert_int_equal(mst_comm_barrier(comm), MST_OK);
    if (r == 1) nanosleep(&(struct timespec){0, 300000000}, NULL);     /* the late rank */
    mst_comm_stats_reset(comm);
    const uint64_t t0 = now_ns();
    assert_int_equal(mst_comm_iallreduce_sum_f32(comm, &a, &ra, 1, &qa), MST_OK);
    assert_int_equal(mst_comm_iallreduce_sum_f32(comm, &b, &rb, 1, &qb), MST_OK);
    if (r == 0) {
        assert_int_equal(mst_comm_poll(comm, &qa), 0);                 /* rank 1 is still asleep */
        assert_true(comm->stats.progress_ns > 0 && comm->stats.wait_ns == comm->stats.progress_ns);
    }
    assert_int_equal(mst_comm_wait(comm, &qa, "first"), MST_OK);
    assert_int_equal(mst_comm_wait(comm, &qb, "second"), MST_OK);
    const uint64_t elapsed = now_ns() - t0;
    assert_true(ra == 2 && rb == 4);
    assert_true(comm->stats.busy_ns <= elapsed);
    if (r == 0) {
        assert_true(comm->stats.busy_ns > 250000000ull);                /* it waited for the sleep */
        assert_true(comm->stats.busy_ns - comm->stats.wait_ns < elapsed / 10);
    }
    assert_int_equal(comm->inflight, 0);
}

/* This test asks MPI for MPI_THREAD_FUNNELED (the default): the progress thread is refused with a
 * message naming what it needs (tests/comm/test_dp_train.c runs it under MPI_THREAD_MULTIPLE). */
static void test_progress_thread_refused(void **state) {
    if (mst_comm_size(comm) < 2) {
        assert_int_equal(mst_comm_progress_thread(comm, true), MST_OK);     /* one process: nothing to do */
        assert_null(comm->progress);
        return;
    }
    assert_false(comm->threads_ok);
    assert_int_equal(mst_comm_progress_thread(comm, true), MST_ERR_ARG);
    assert_non_null(strstr(mst_comm_error(comm), "MPI_THREAD_MULTIPLE"));
    assert_null(comm->progress);
}

/* Rank 0 waits with a short timeout for an all-reduce rank 1 joins a second later: the wait fails
 * with the message, and a second wait without a limit completes it (no state was lost). */
static void test_timeout(void **state) {
    if (mst_comm_size(comm) < 2) skip();
    const int r = mst_comm_rank(comm);
    float send = 1, recv = 0;
    mst_comm_req req = {0};
    if (r == 1) nanosleep(&(struct timespec){1, 0}, NULL);     /* the late rank */
    assert_int_equal(mst_comm_iallreduce_sum_f32(comm, &send, &recv, 1, &req), MST_OK);
    if (r == 0) {
        comm->timeout_s = 0.2;
        assert_int_equal(mst_comm_wait(comm, &req, "test all-reduce"), MST_ERR_IO);
        assert_non_null(strstr(mst_comm_error(comm), "waited more than 0.2 s"));
    }
    comm->timeout_s = 0;
    assert_int_equal(mst_comm_wait(comm, &req, "test all-reduce"), MST_OK);
    assert_true(recv == (float)mst_comm_size(comm));
    comm->timeout_s = 60;
}

int main(void) {
    char err[256] = "";
    comm = mst_comm_new_auto(60, err, sizeof(err));
    if (!comm) {
        fprintf(stderr, "communicator: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_size),  cmocka_unit_test(test_allreduce), cmocka_unit_test(test_broadcast_barrier),
        cmocka_unit_test(test_any),        cmocka_unit_test(test_iallreduce), cmocka_unit_test(test_busy_union),
        cmocka_unit_test(test_timeout),    cmocka_unit_test(test_progress_thread_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mst_comm_free(comm);
    return rc;
}
