/* comm_single.c — the communicator of one process (see comm.h): rank 0 of 1, every collective
 * the identity, so the step and the trainer run the same code with and without MPI. */
#include "runtime/comm/comm.h"

#include <stdlib.h>
#include <string.h>

static mst_status single_iallreduce_f32(mst_comm *c, const float *send, float *recv, int64_t n, mst_comm_req *req) {
    if (send != recv) memcpy(recv, send, (size_t)n * sizeof(float));
    req->impl = NULL;
    req->done = true;
    return MST_OK;
}

static mst_status single_iallreduce_f64(mst_comm *c, const double *send, double *recv, int64_t n, mst_comm_req *req) {
    if (send != recv) memcpy(recv, send, (size_t)n * sizeof(double));
    req->impl = NULL;
    req->done = true;
    return MST_OK;
}

static mst_status single_ibcast(mst_comm *c, void *buf, int64_t bytes, int root, mst_comm_req *req) {
    req->impl = NULL;
    req->done = true;
    return MST_OK;
}

static mst_status single_ibarrier(mst_comm *c, mst_comm_req *req) {
    req->impl = NULL;
    req->done = true;
    return MST_OK;
}

static int single_test(mst_comm *c, mst_comm_req *req) { return 1; }
static void single_abort(mst_comm *c, int code) {}
static void single_free(mst_comm *c) { free(c); }

static const mst_comm_ops single_ops = {
    .name = "single", .iallreduce_f32 = single_iallreduce_f32, .iallreduce_f64 = single_iallreduce_f64,
    .ibcast = single_ibcast, .ibarrier = single_ibarrier, .test = single_test, .abort_all = single_abort,
    .free = single_free,
};

mst_comm *mst_comm_single_new(void) {
    mst_comm *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->ops = &single_ops;
    c->rank = 0;
    c->size = 1;
    return c;
}
