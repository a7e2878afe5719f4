/* outdir.h — one output folder, one run at a time, and always one consistent run in it.
 *
 * A run takes an exclusive flock on DIR/.lock (a second run into the same folder is refused,
 * naming the holder's PID) and writes every output under DIR/.run-new/. When it has written them
 * all it drops a COMPLETE marker there and promotes: each output is renamed over its old
 * namesake in DIR, old outputs the new run does not have are moved away, and the marker goes
 * last. A kill at any moment before the marker leaves DIR exactly as the previous run left it; a
 * kill after it is rolled forward by the next run that opens the folder (as a journal is
 * replayed), before it touches anything. See docs/guarantees.md.
 *
 *     mst_outdir d;
 *     if ((rc = mst_outdir_open(&d, "out/job", false, err, sizeof(err))) != 0) return rc;   // 75: busy, 74: I/O
 *     write mst_outdir_stage(&d, "summary.json", path, sizeof(path)) ...;
 *     mst_outdir_promote(&d, err, sizeof(err));
 *     mst_outdir_close(&d);
 */
#ifndef MST_CLI_OUTDIR_H
#define MST_CLI_OUTDIR_H

#include <stdbool.h>
#include <stddef.h>

#define MST_OUTDIR_STAGE ".run-new"

typedef struct {
    char dir[1024];
    char stage[1100];
    int lock_fd;                    /* -1 when not held */
    const char *const *outputs;     /* the names promotion replaces as a set */
} mst_outdir;

/* The files and folders that make one run's output (train, profile); promotion replaces them as
 * a set. `advise` has its own set (mst_outdir_advise_outputs: advice, tuned job, report, trials). */
extern const char *const mst_outdir_outputs[];
extern const char *const mst_outdir_advise_outputs[];

/* mkdir -p DIR, take the lock, finish an interrupted promotion, then prepare DIR/.run-new: kept
 * (its checkpoint only) when keep_stage (a --resume continuing the staged checkpoint of a killed run), else emptied.
 * 0, or an exit code (MST_EXIT_BUSY, MST_EXIT_IO) with a message. */
int mst_outdir_open(mst_outdir *d, const char *dir, bool keep_stage, char *err, size_t errn);
/* The same for another set of outputs (NULL-terminated names). */
int mst_outdir_open_for(mst_outdir *d, const char *dir, const char *const *outputs, bool keep_stage, char *err, size_t errn);
/* The staged path of output `name`. */
const char *mst_outdir_stage(const mst_outdir *d, const char *name, char *buf, size_t n);
/* Promote the staged outputs into DIR; 0, or -1 with a message (the old outputs stay). */
int mst_outdir_promote(mst_outdir *d, char *err, size_t errn);
/* Removes the staged outputs of a failed run (the folder's own stay as they were). */
void mst_outdir_discard(mst_outdir *d);
/* Releases the lock; the stage stays (a killed or failed run's checkpoint can be resumed). */
void mst_outdir_close(mst_outdir *d);

#endif
