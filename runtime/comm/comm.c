/* comm.c — what every communicator shares (see comm.h): the timed polling wait, the blocking
 * collectives built on the non-blocking ones, the choice of implementation at start. */
#include "runtime/comm/comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"

const char *mst_comm_error(const mst_comm *c) { return c ? c->err : "no communicator"; }
const char *mst_comm_name(const mst_comm *c) { return c ? c->ops->name : "none"; }

void mst_comm_free(mst_comm *c) {
    if (!c) return;
    mst_comm_progress_thread(c, false);
    c->ops->free(c);
}

void mst_comm_abort(mst_comm *c, int code) {
    if (c && c->size > 1) c->ops->abort_all(c, code);
    exit(code);
}

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : 0;
}

bool mst_comm_launched(int *size) {
    int n = env_int("OMPI_COMM_WORLD_SIZE");
    if (n <= 0) n = env_int("PMI_SIZE");
    if (n <= 0) n = env_int("PMIX_SIZE");
    if (size) *size = n > 0 ? n : 1;
    return n > 1;
}

mst_comm *mst_comm_new_auto(double timeout_s, char *err, size_t errn) {
    int n;
    if (!mst_comm_launched(&n)) return mst_comm_single_new();
    if (!mst_comm_mpi_available()) {
        mst_errf(err, errn, "started as one of %d ranks, but this build has no MPI (install libopenmpi-dev and rebuild)", n);
        return NULL;
    }
    return mst_comm_mpi_new(timeout_s, err, errn);
}

/* The busy time is the union of the collectives' in-flight intervals: it opens when the first
 * one starts and closes when the last one in flight completes. */
static void req_begin(mst_comm *c, mst_comm_req *req) {
    req->start_ns = mst_prof_now_ns();
    req->done = false;
    if (c->inflight++ == 0) c->busy_since = req->start_ns;
}

static void req_end(mst_comm *c) {
    if (c->inflight > 0 && --c->inflight == 0) c->stats.busy_ns += mst_prof_now_ns() - c->busy_since;
}

/* After a start: a collective that completed at once (one process) or failed to start is over. */
static mst_status req_started(mst_comm *c, mst_comm_req *req, mst_status s) {
    if (s != MST_OK || !req->impl) {
        req->done = s == MST_OK;
        req_end(c);
    }
    return s;
}

void mst_comm_stats_reset(mst_comm *c) {
    if (!c) return;
    c->stats = (mst_comm_stats){0};
    if (c->inflight) c->busy_since = mst_prof_now_ns();
}

static int poll_once(mst_comm *c, mst_comm_req *req) {
    if (req->done || !req->impl) return 1;
    if (req->handed) {          /* the progress thread tests it: read its outcome */
        int st = mst_comm_prog_state(c, req->impl);
        if (st == 0) return 0;
        free(req->impl);
        req->impl = NULL;
        req->handed = false;
        req->done = st > 0;
        req_end(c);
        return st > 0 ? 1 : -1;
    }
    int r = c->ops->test(c, req);
    if (r == 1) req->done = true;
    if (r != 0) req_end(c);
    return r;
}

int mst_comm_poll(mst_comm *c, mst_comm_req *req) {
    if (req->done || !req->impl) return 1;
    const uint64_t t0 = mst_prof_now_ns();
    int r = poll_once(c, req);
    const uint64_t dt = mst_prof_now_ns() - t0;
    c->stats.wait_ns += dt;
    c->stats.progress_ns += dt;
    return r;
}

/* The totals since the last reset as profiler counters, after every completed wait: the step's
 * last sample (its `counters` row's last_value) is the step's total, so each rank's profile.db
 * holds its own exposed/busy comm, calls and bytes per step (the report's per-rank section). */
static void report_stats(const mst_comm *c) {
    static uint32_t id_wait, id_busy, id_progress, id_calls, id_bytes;   /* the main thread only (MPI_THREAD_FUNNELED) */
    if (!mst_prof_on(MST_PROF_LEVEL_STEPS)) return;
    if (!id_wait) {
        id_wait = mst_prof_intern("comm.wait_ns");
        id_busy = mst_prof_intern("comm.busy_ns");
        id_progress = mst_prof_intern("comm.progress_ns");
        id_calls = mst_prof_intern("comm.allreduce_calls");
        id_bytes = mst_prof_intern("comm.allreduce_bytes");
    }
    mst_prof_counter(id_wait, (int64_t)c->stats.wait_ns);
    mst_prof_counter(id_busy, (int64_t)c->stats.busy_ns);
    mst_prof_counter(id_progress, (int64_t)c->stats.progress_ns);
    mst_prof_counter(id_calls, c->stats.allreduce_calls);
    mst_prof_counter(id_bytes, c->stats.allreduce_bytes);
}

mst_status mst_comm_wait(mst_comm *c, mst_comm_req *req, const char *what) {
    if (req->done || !req->impl) return MST_OK;
    const uint64_t t0 = mst_prof_now_ns();
    const uint64_t limit = c->timeout_s > 0 ? (uint64_t)(c->timeout_s * 1e9) : 0;
    int r;
    unsigned spins = 0;
    while ((r = poll_once(c, req)) == 0) {
        if (limit && mst_prof_now_ns() - t0 > limit) {
            snprintf(c->err, sizeof(c->err),
                     "rank %d of %d: %s waited more than %.1f s for the other ranks (runtime.comm.timeout_s): a rank died, failed or hangs",
                     c->rank, c->size, what, c->timeout_s);
            c->stats.wait_ns += mst_prof_now_ns() - t0;
            return MST_ERR_IO;
        }
        /* keep testing: each test moves the transfer on (OpenMPI progresses inside MPI calls;
         * a sleep between tests stalls a large message fragment by fragment). After 200 us, yield
         * between tests: a rank spinning on a core its peer or its peer's threads need was measured
         * 4x slower per step on this 2-core machine (under load from parallel builds) */
        if (++spins > 16 && mst_prof_now_ns() - t0 > 200000ull) sched_yield();
    }
    c->stats.wait_ns += mst_prof_now_ns() - t0;
    report_stats(c);
    if (r < 0) {
        size_t n = strlen(c->err);
        snprintf(c->err + n, sizeof(c->err) - n, " (in %s)", what);
        return MST_ERR_IO;
    }
    return MST_OK;
}

static void count(mst_comm *c, mst_comm_req *req, int64_t bytes) {
    req_begin(c, req);
    req->bytes = bytes;
    c->stats.allreduce_calls++;
    c->stats.allreduce_bytes += bytes;
}

/* With a progress thread, the implementation's request lives in a record the thread tests;
 * req->impl points at the record. */
static mst_status iallreduce(mst_comm *c, const void *send, void *recv, int64_t n, bool f64, mst_comm_req *req) {
    count(c, req, n * (int64_t)(f64 ? sizeof(double) : sizeof(float)));
    req->handed = false;
    mst_comm_prog_rec *rec = c->progress ? mst_comm_prog_rec_new() : NULL;
    if (c->progress && !rec) {
        snprintf(c->err, sizeof(c->err), "rank %d: out of memory for a progress record", c->rank);
        return req_started(c, req, MST_ERR_OOM);
    }
    mst_comm_req *r = rec ? mst_comm_prog_rec_req(rec) : req;
    mst_status s = f64 ? c->ops->iallreduce_f64(c, send, recv, n, r) : c->ops->iallreduce_f32(c, send, recv, n, r);
    if (rec) {
        if (s == MST_OK && r->impl) {
            req->impl = rec;
            req->handed = true;
            mst_comm_prog_push(c, rec);
        } else {
            free(rec);
            req->impl = NULL;
        }
    }
    return req_started(c, req, s);
}

mst_status mst_comm_iallreduce_sum_f32(mst_comm *c, const float *send, float *recv, int64_t n, mst_comm_req *req) {
    return iallreduce(c, send, recv, n, false, req);
}

mst_status mst_comm_iallreduce_sum_f64(mst_comm *c, const double *send, double *recv, int64_t n, mst_comm_req *req) {
    return iallreduce(c, send, recv, n, true, req);
}

mst_status mst_comm_allreduce_sum_f32(mst_comm *c, float *buf, int64_t n) {
    if (c->size == 1 || n == 0) return MST_OK;
    float *tmp = malloc((size_t)n * sizeof(float));
    if (!tmp) { snprintf(c->err, sizeof(c->err), "all-reduce: out of memory (%lld floats)", (long long)n); return MST_ERR_OOM; }
    memcpy(tmp, buf, (size_t)n * sizeof(float));
    mst_comm_req req = {0};
    mst_status s = mst_comm_iallreduce_sum_f32(c, tmp, buf, n, &req);
    if (s == MST_OK) s = mst_comm_wait(c, &req, "all-reduce");
    free(tmp);
    return s;
}

mst_status mst_comm_allreduce_sum_f64(mst_comm *c, double *buf, int64_t n) {
    if (c->size == 1 || n == 0) return MST_OK;
    double *tmp = malloc((size_t)n * sizeof(double));
    if (!tmp) { snprintf(c->err, sizeof(c->err), "all-reduce: out of memory (%lld doubles)", (long long)n); return MST_ERR_OOM; }
    memcpy(tmp, buf, (size_t)n * sizeof(double));
    mst_comm_req req = {0};
    req_begin(c, &req);
    mst_status s = req_started(c, &req, c->ops->iallreduce_f64(c, tmp, buf, n, &req));
    if (s == MST_OK) s = mst_comm_wait(c, &req, "all-reduce");
    free(tmp);
    return s;
}

mst_status mst_comm_any(mst_comm *c, bool *flag) {
    double v = *flag ? 1 : 0;
    mst_status s = mst_comm_allreduce_sum_f64(c, &v, 1);
    if (s == MST_OK) *flag = v > 0;
    return s;
}

mst_status mst_comm_broadcast(mst_comm *c, void *buf, int64_t bytes, int root) {
    if (c->size == 1 || bytes == 0) return MST_OK;
    mst_comm_req req = {0};
    req_begin(c, &req);
    mst_status s = req_started(c, &req, c->ops->ibcast(c, buf, bytes, root, &req));
    return s == MST_OK ? mst_comm_wait(c, &req, "broadcast") : s;
}

mst_status mst_comm_barrier(mst_comm *c) {
    if (c->size == 1) return MST_OK;
    mst_comm_req req = {0};
    req_begin(c, &req);
    mst_status s = req_started(c, &req, c->ops->ibarrier(c, &req));
    return s == MST_OK ? mst_comm_wait(c, &req, "barrier") : s;
}
