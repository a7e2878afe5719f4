/* ranks.h — the per-rank view of a data-parallel run: summary.json's "distributed" object and
 * the lines `mstune train|profile` print (step time per rank, the slowest rank, imbalance
 * (max - min) / mean flagged above 5% as msprof-analyze does, gradient bytes, achieved bandwidth). */
#ifndef MST_CLI_RANKS_H
#define MST_CLI_RANKS_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "runtime/trainer.h"

#define MST_RANK_IMBALANCE_FLAG 0.05

typedef struct {
    int slowest;
    double imbalance;           /* (max - min) / mean of the ranks' median step times */
    bool flagged;               /* imbalance > 5% */
    double bandwidth_gbs;       /* gradient bytes per step / all-reduce time per step, GB/s; 0 when unknown */
} mst_rank_stats;

mst_rank_stats mst_rank_stats_of(const mst_train_result *r);
/* Adds "distributed" to a summary (nothing in one process). */
void mst_summary_add_ranks(cJSON *root, const mst_train_result *r);
void mst_cli_print_ranks(FILE *f, const mst_train_result *r);

#endif
