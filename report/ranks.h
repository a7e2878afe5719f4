/* ranks.h — the report's per-rank view of a data-parallel profile (`profile --nproc N`): rank 0's
 * profile names how many ranks the run had (run key dp.ranks, else summary.json's
 * distributed.ranks), rank k > 0 wrote DIR.rank<k>/profile.db beside rank 0's DIR; each is read
 * through profiler/profile_view (the one profile reader) into one row: step time median and mean,
 * exposed and hidden comm per step, all-reduce calls, bytes and achieved bandwidth. Then the
 * slowest rank and the imbalance (max - min) / mean of the ranks' median step times, flagged above
 * 5% as msprof-analyze does. A rank whose profile is missing, unreadable or of another run is a
 * row naming why, never an error.
 *
 *     rpt_ranks rk;
 *     if (rpt_ranks_load(&rk, &p, summary, err, errn) != 0) ...   // out of memory only
 *     if (rk.n > 1) ... rk.rows[k].step_ms_median, rk.slowest, rk.imbalance ...
 *     rpt_ranks_free(&rk);
 */
#ifndef MST_REPORT_RANKS_H
#define MST_REPORT_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "profiler/profile_view.h"

#define RPT_RANK_IMBALANCE_FLAG 0.05
#define RPT_RANKS_MAX 1024          /* the launcher's limit */

typedef struct {
    int rank;
    char *path;                 /* its profile.db (rank 0: the rendered profile) */
    bool ok;                    /* read, and of this run */
    char problem[600];          /* why not */
    int64_t steps;              /* profiled (non-warm-up) steps */
    double step_ms_median, step_ms_mean;
    bool has_comm;              /* the communicator's counters are in the profile */
    double exposed_ms, hidden_ms;   /* per step, mean: the wait, and all-reduce time beyond it (>= 0 per step) */
    double exposed_p10_ms, exposed_p90_ms;  /* the wait's 10th and 90th percentile over the steps (nearest rank):
                                             * on an oversubscribed machine the wait is bimodal (peer running or
                                             * descheduled) and the mean alone hides which mode the steps were in */
    double allreduce_ms;        /* per step, mean: start-to-completion time of the all-reduces */
    double calls, bytes;        /* gradient all-reduces and payload bytes per step, mean */
    double gbps;                /* bytes / all-reduce time over the steps, GB/s; 0 when no time */
} rpt_rank_row;

typedef struct rpt_ranks_s {
    int n;                      /* ranks of the run; 0: not a data-parallel profile (no section) */
    const char *source;         /* where n came from: "run key dp.ranks", "summary.json distributed.ranks" */
    rpt_rank_row *rows;         /* n rows, by rank */
    int n_ok;
    int slowest;                /* by median step time; -1 with fewer than 2 ranks read */
    double imbalance;           /* (max - min) / mean of the ok ranks' median step times */
    bool flagged;               /* imbalance > 5% */
} rpt_ranks;

/* The per-rank view for profile p (rank 0's), or n = 0 when p is not rank 0 of a data-parallel
 * run. Rank k's folder is p's folder (from p->path) with ".rank<k>" appended. 0, or -1 out of memory. */
int rpt_ranks_load(rpt_ranks *rk, const rpt_profile *p, const cJSON *summary, char *err, size_t errn);
void rpt_ranks_free(rpt_ranks *rk);

#endif
