/* comm_mpi.c — the communicator over MPI (OpenMPI; see comm.h). One duplicate of MPI_COMM_WORLD
 * with MPI_ERRORS_RETURN as its error handler, so a failed collective comes back as a status with
 * MPI's own message instead of aborting inside the library. Only the thread that created the
 * communicator calls MPI (MPI_THREAD_FUNNELED: the step's kernels and the trainer run there),
 * unless mst_comm_want_threads asked for MPI_THREAD_MULTIPLE for the progress thread (progress.c).
 * Requests are heap records holding the MPI_Request, released when a test finds them complete. */
#include "runtime/comm/comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Comm world;
} mpi_impl;

/* MPI can be initialized once per process: communicators come and go (a trial per session), and
 * MPI_Finalize runs at exit. */
static void finalize_at_exit(void) {
    mst_comm_progress_stop_all();       /* no thread may be inside MPI during MPI_Finalize */
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

static mst_status mpi_fail(mst_comm *c, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "MPI error %d", rc);
    snprintf(c->err, sizeof(c->err), "rank %d of %d: %s failed: %s", c->rank, c->size, what, msg);
    return MST_ERR_IO;
}

static MPI_Comm world_of(const mst_comm *c) { return ((const mpi_impl *)c->impl)->world; }

static MPI_Request *new_request(mst_comm *c, mst_comm_req *req) {
    MPI_Request *r = malloc(sizeof(*r));
    if (!r) snprintf(c->err, sizeof(c->err), "rank %d: out of memory for an MPI request", c->rank);
    req->impl = r;
    req->done = false;
    return r;
}

static mst_status started(mst_comm *c, mst_comm_req *req, int rc, const char *what) {
    if (rc == MPI_SUCCESS) return MST_OK;
    free(req->impl);
    req->impl = NULL;
    return mpi_fail(c, rc, what);
}

/* MPI counts are int: payloads beyond 2^31 elements are refused (gradients are far smaller). */
static bool count_ok(mst_comm *c, int64_t n) {
    if (n >= 0 && n <= 0x7fffffff) return true;
    snprintf(c->err, sizeof(c->err), "rank %d: collective of %lld elements exceeds MPI's int count", c->rank, (long long)n);
    return false;
}

static mst_status mpi_iallreduce_f32(mst_comm *c, const float *send, float *recv, int64_t n, mst_comm_req *req) {
    if (!count_ok(c, n)) return MST_ERR_ARG;
    MPI_Request *r = new_request(c, req);
    if (!r) return MST_ERR_OOM;
    return started(c, req, MPI_Iallreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, world_of(c), r), "MPI_Iallreduce");
}

static mst_status mpi_iallreduce_f64(mst_comm *c, const double *send, double *recv, int64_t n, mst_comm_req *req) {
    if (!count_ok(c, n)) return MST_ERR_ARG;
    MPI_Request *r = new_request(c, req);
    if (!r) return MST_ERR_OOM;
    return started(c, req, MPI_Iallreduce(send, recv, (int)n, MPI_DOUBLE, MPI_SUM, world_of(c), r), "MPI_Iallreduce");
}

static mst_status mpi_ibcast(mst_comm *c, void *buf, int64_t bytes, int root, mst_comm_req *req) {
    if (!count_ok(c, bytes)) return MST_ERR_ARG;
    MPI_Request *r = new_request(c, req);
    if (!r) return MST_ERR_OOM;
    return started(c, req, MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, world_of(c), r), "MPI_Ibcast");
}

static mst_status mpi_ibarrier(mst_comm *c, mst_comm_req *req) {
    MPI_Request *r = new_request(c, req);
    if (!r) return MST_ERR_OOM;
    return started(c, req, MPI_Ibarrier(world_of(c), r), "MPI_Ibarrier");
}

static int mpi_test(mst_comm *c, mst_comm_req *req) {
    MPI_Request *r = req->impl;
    int flag = 0;
    int rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        mpi_fail(c, rc, "MPI_Test");
        free(r);
        req->impl = NULL;
        return -1;
    }
    if (!flag) return 0;
    free(r);
    req->impl = NULL;
    return 1;
}

static void mpi_abort_all(mst_comm *c, int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void mpi_free(mst_comm *c) {
    mpi_impl *m = c->impl;
    if (m) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Comm_free(&m->world);
        free(m);
    }
    free(c);
}

static const mst_comm_ops mpi_ops = {
    .name = "mpi", .iallreduce_f32 = mpi_iallreduce_f32, .iallreduce_f64 = mpi_iallreduce_f64, .ibcast = mpi_ibcast,
    .ibarrier = mpi_ibarrier, .test = mpi_test, .abort_all = mpi_abort_all, .free = mpi_free,
};

bool mst_comm_mpi_available(void) { return true; }

static bool g_want_threads;

void mst_comm_want_threads(bool on) { g_want_threads = on; }

mst_comm *mst_comm_mpi_new(double timeout_s, char *err, size_t errn) {
    mst_comm *c = calloc(1, sizeof(*c));
    mpi_impl *m = calloc(1, sizeof(*m));
    if (!c || !m) {
        free(c);
        free(m);
        mst_errf(err, errn, "out of memory: MPI communicator");
        return NULL;
    }
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, g_want_threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            mst_errf(err, errn, "MPI_Init_thread failed (is this process started by mpirun?)");
            free(c);
            free(m);
            return NULL;
        }
        atexit(finalize_at_exit);
    } else {
        MPI_Query_thread(&provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->world, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->world, &c->size);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        mst_errf(err, errn, "MPI communicator setup failed: %s", msg);
        free(c);
        free(m);
        return NULL;
    }
    c->ops = &mpi_ops;
    c->impl = m;
    c->threads_ok = provided >= MPI_THREAD_MULTIPLE;
    c->timeout_s = timeout_s;
    return c;
}
