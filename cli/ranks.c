/* ranks.c — the per-rank view of a data-parallel run (see ranks.h). */
#include "cli/ranks.h"

mst_rank_stats mst_rank_stats_of(const mst_train_result *r) {
    mst_rank_stats st = {0};
    if (r->comm_size <= 1 || !r->rank_step_ms) return st;
    double lo = r->rank_step_ms[0], hi = lo, sum = 0;
    for (int k = 0; k < r->comm_size; k++) {
        double v = r->rank_step_ms[k];
        sum += v;
        if (v > hi) { hi = v; st.slowest = k; }
        if (v < lo) lo = v;
    }
    double mean = sum / r->comm_size;
    st.imbalance = mean > 0 ? (hi - lo) / mean : 0;
    st.flagged = st.imbalance > MST_RANK_IMBALANCE_FLAG;
    st.bandwidth_gbs = r->comm_allreduce_ms_median > 0 ? (double)r->comm_grad_bytes / (r->comm_allreduce_ms_median * 1e6) : 0;
    return st;
}

void mst_summary_add_ranks(cJSON *root, const mst_train_result *r) {
    if (r->comm_size <= 1) return;
    mst_rank_stats st = mst_rank_stats_of(r);
    cJSON *d = cJSON_AddObjectToObject(root, "distributed");
    cJSON_AddNumberToObject(d, "ranks", r->comm_size);
    cJSON_AddNumberToObject(d, "buckets", r->comm_buckets);
    cJSON_AddNumberToObject(d, "grad_bytes_per_step", (double)r->comm_grad_bytes);
    cJSON_AddNumberToObject(d, "comm_exposed_ms_median", r->comm_exposed_ms_median);
    cJSON_AddNumberToObject(d, "comm_hidden_ms_median", r->comm_hidden_ms_median);
    cJSON_AddNumberToObject(d, "allreduce_ms_median", r->comm_allreduce_ms_median);
    cJSON_AddNumberToObject(d, "allreduce_gb_per_s", st.bandwidth_gbs);
    cJSON_AddNumberToObject(d, "slowest_rank", st.slowest);
    cJSON_AddNumberToObject(d, "imbalance", st.imbalance);
    cJSON_AddBoolToObject(d, "imbalance_flagged", st.flagged);
    cJSON *per = cJSON_AddArrayToObject(d, "per_rank");
    for (int k = 0; r->rank_step_ms && k < r->comm_size; k++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", k);
        cJSON_AddNumberToObject(o, "step_time_ms_median", r->rank_step_ms[k]);
        cJSON_AddNumberToObject(o, "comm_exposed_ms_median", r->rank_exposed_ms[k]);
        cJSON_AddNumberToObject(o, "comm_hidden_ms_median", r->rank_hidden_ms[k]);
        cJSON_AddItemToArray(per, o);
    }
}

void mst_cli_print_ranks(FILE *f, const mst_train_result *r) {
    if (r->comm_size <= 1 || !r->rank_step_ms) return;
    mst_rank_stats st = mst_rank_stats_of(r);
    fprintf(f, "  data parallel: %d ranks, %d gradient bucket%s of %.2f MiB per step in all, all-reduce %.3f ms/step (%.2f GB/s)\n",
            r->comm_size, r->comm_buckets, r->comm_buckets == 1 ? "" : "s", (double)r->comm_grad_bytes / 1048576.0,
            r->comm_allreduce_ms_median, st.bandwidth_gbs);
    fprintf(f, "  comm per step (median): %.3f ms exposed, %.3f ms hidden behind backward\n", r->comm_exposed_ms_median,
            r->comm_hidden_ms_median);
    for (int k = 0; k < r->comm_size; k++)
        fprintf(f, "    rank %d: step %.2f ms, comm exposed %.3f ms, hidden %.3f ms%s\n", k, r->rank_step_ms[k],
                r->rank_exposed_ms[k], r->rank_hidden_ms[k], k == st.slowest ? "  (slowest)" : "");
    fprintf(f, "  imbalance (max - min) / mean %.1f%%%s\n", 100 * st.imbalance,
            st.flagged ? ": above 5%, a slow rank holds the others back" : "");
}
