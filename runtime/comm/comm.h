/* comm.h — the communicator: rank, size and the collectives data-parallel training needs
 * (all-reduce, broadcast, barrier), behind one small table of functions so the step, graph mode
 * and the trainer call one interface. Implementations: comm_single.c (one process, N = 1: every
 * collective is the identity), comm_mpi.c (OpenMPI across processes); NCCL on GPUs is another
 * table later.
 *
 * Trade-off: every blocking collective is a non-blocking one plus a polling wait with a timeout
 * (MPI_Test in a loop, yielding the core), so a rank that died or hangs makes the others fail with
 * a message naming the collective and the time waited instead of hanging forever; MPI's error
 * handler is set to return, so a broken peer is an error status here, never an abort inside MPI.
 * Waiting polls instead of blocking inside MPI, which also drives OpenMPI's progress (it has no
 * progress thread by default).
 *
 *     char err[256];
 *     mst_comm *c = mst_comm_new_auto(60.0, err, sizeof err);   // MPI under mpirun, else single
 *     float g[4] = {...};
 *     if (mst_comm_allreduce_sum_f32(c, g, 4) != MST_OK) fprintf(stderr, "%s\n", mst_comm_error(c));
 *     mst_comm_free(c);
 */
#ifndef MST_RUNTIME_COMM_H
#define MST_RUNTIME_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

typedef struct mst_comm mst_comm;
typedef struct mst_comm_prog_rec mst_comm_prog_rec;

/* A non-blocking all-reduce in flight. */
typedef struct {
    void *impl;                 /* the implementation's request, or the progress thread's record
                                 * (handed); NULL when none is in flight */
    uint64_t start_ns;          /* when it was started */
    int64_t bytes;              /* payload */
    bool done;
    bool handed;                /* tested by the progress thread: impl is an mst_comm_prog_rec */
} mst_comm_req;

/* Totals since the last mst_comm_stats_reset: what the profiler and the report read. */
typedef struct {
    int64_t allreduce_calls;
    int64_t allreduce_bytes;    /* payload bytes all-reduced (each rank's buffer) */
    uint64_t busy_ns;           /* time at least one collective was in flight: the union of their
                                 * start-to-completion intervals (two buckets in flight at once count
                                 * once, so busy - wait is what ran while the caller computed) */
    uint64_t wait_ns;           /* time the caller spent inside the communicator for them: its waits
                                 * plus its progress polls (the exposed part) */
    uint64_t progress_ns;       /* the part of wait_ns spent in mst_comm_poll outside a wait: on a
                                 * CPU the caller's polls run the transfer's copies and reductions */
} mst_comm_stats;

typedef struct {
    const char *name;           /* "single", "mpi" */
    mst_status (*iallreduce_f32)(mst_comm *c, const float *send, float *recv, int64_t n, mst_comm_req *req);
    mst_status (*iallreduce_f64)(mst_comm *c, const double *send, double *recv, int64_t n, mst_comm_req *req);
    mst_status (*ibcast)(mst_comm *c, void *buf, int64_t bytes, int root, mst_comm_req *req);
    mst_status (*ibarrier)(mst_comm *c, mst_comm_req *req);
    /* 1: complete (req->impl released), 0: not yet, < 0: failed (message set) */
    int (*test)(mst_comm *c, mst_comm_req *req);
    void (*abort_all)(mst_comm *c, int code);   /* make every rank exit (a fatal error on this one) */
    void (*free)(mst_comm *c);
} mst_comm_ops;

struct mst_comm {
    const mst_comm_ops *ops;
    int rank, size;
    double timeout_s;           /* a wait longer than this fails; <= 0: wait forever */
    mst_comm_stats stats;
    int inflight;               /* collectives started and not seen complete */
    bool threads_ok;            /* callable from several threads at once (MPI_THREAD_MULTIPLE) */
    struct mst_comm_progress *progress;     /* the progress thread, or NULL (progress.c) */
    uint64_t busy_since;        /* when inflight last went from 0 to 1 */
    void *impl;
    char err[512];
};

/* Ask the MPI communicator created next for MPI_THREAD_MULTIPLE (needed by the progress thread;
 * MPI's thread level is chosen once per process, at its first communicator). Default: FUNNELED. */
void mst_comm_want_threads(bool on);

/* One process: rank 0 of 1. Never NULL except out of memory. */
mst_comm *mst_comm_single_new(void);
/* MPI_COMM_WORLD (MPI_Init_thread on first use, MPI_Finalize at exit). NULL with a
 * message when this build has no MPI or MPI fails to start. */
mst_comm *mst_comm_mpi_new(double timeout_s, char *err, size_t errn);
/* True when this build has the MPI implementation. */
bool mst_comm_mpi_available(void);
/* True when the process was started by mpirun with more than one rank (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE); *size gets that count (1 when not under mpirun). */
bool mst_comm_launched(int *size);
/* MPI when launched by mpirun with several ranks, else the single-process communicator. */
mst_comm *mst_comm_new_auto(double timeout_s, char *err, size_t errn);
void mst_comm_free(mst_comm *c);

static inline int mst_comm_rank(const mst_comm *c) { return c ? c->rank : 0; }
static inline int mst_comm_size(const mst_comm *c) { return c ? c->size : 1; }
const char *mst_comm_error(const mst_comm *c);
const char *mst_comm_name(const mst_comm *c);

/* Blocking collectives (a start and mst_comm_wait). In place; sums over ranks. */
mst_status mst_comm_allreduce_sum_f32(mst_comm *c, float *buf, int64_t n);
mst_status mst_comm_allreduce_sum_f64(mst_comm *c, double *buf, int64_t n);
/* Logical or of a flag over ranks (an all-reduce of one double). */
mst_status mst_comm_any(mst_comm *c, bool *flag);
mst_status mst_comm_broadcast(mst_comm *c, void *buf, int64_t bytes, int root);
mst_status mst_comm_barrier(mst_comm *c);

/* Non-blocking all-reduce of n floats: send and recv may not alias, both stay untouched by the
 * caller until the wait. */
mst_status mst_comm_iallreduce_sum_f32(mst_comm *c, const float *send, float *recv, int64_t n, mst_comm_req *req);
mst_status mst_comm_iallreduce_sum_f64(mst_comm *c, const double *send, double *recv, int64_t n, mst_comm_req *req);
/* Drives progress without waiting: 1 when req is complete, 0 when not, < 0 on failure. Its time
 * counts as exposed (stats.wait_ns, stats.progress_ns): OpenMPI moves a shared-memory transfer
 * inside the caller's MPI calls, so a poll may spend a copy's time on the caller's core. */
int mst_comm_poll(mst_comm *c, mst_comm_req *req);
/* Waits for req (timing the wait as exposed), failing after the communicator's timeout with a
 * message naming what was waited for. */
mst_status mst_comm_wait(mst_comm *c, mst_comm_req *req, const char *what);

/* The progress thread (runtime.comm.progress_thread, progress.c): non-blocking all-reduces started
 * after it is on are tested on a thread of their own, so a transfer moves (and over shared memory
 * its copies run) while the caller computes, as gloo's and Horovod's background threads do; the
 * caller's polls and waits only read the outcome. Needs threads_ok (mst_comm_want_threads before
 * the communicator is made). Off: joins the thread (nothing may be in flight). One process: a
 * no-op. The blocking collectives stay on the caller's thread. */
mst_status mst_comm_progress_thread(mst_comm *c, bool on);
/* Stops every progress thread (MPI's finalize at exit calls it first). */
void mst_comm_progress_stop_all(void);
/* The handover (comm.c): a record, its inner request to start, the push, and its state
 * (0 in flight, 1 complete, -1 failed with the message copied to c->err). */
mst_comm_prog_rec *mst_comm_prog_rec_new(void);
mst_comm_req *mst_comm_prog_rec_req(mst_comm_prog_rec *r);
void mst_comm_prog_push(mst_comm *c, mst_comm_prog_rec *r);
int mst_comm_prog_state(mst_comm *c, mst_comm_prog_rec *r);

/* Make every rank exit with code (rank 0's outputs are whatever it had written atomically). */
void mst_comm_abort(mst_comm *c, int code);

/* Zeroes the totals (a collective in flight across the reset counts as busy from here on). */
void mst_comm_stats_reset(mst_comm *c);

#endif
