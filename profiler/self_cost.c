/* self_cost.c — see self_cost.h. */
#include "profiler/self_cost.h"

#include <math.h>
#include <stdlib.h>

#include "util/stats.h"

int mst_prof_measure_self_cost(const mst_prof_config *cfg, int64_t first_step, const double *step_ms, int64_t n,
                               double level, mst_prof_self_cost *out) {
    *out = (mst_prof_self_cost){.lo = -INFINITY, .hi = INFINITY, .level = level, .cost = NAN, .off_ms = NAN, .on_ms = NAN};
    if (cfg->wait <= 0 || cfg->active <= 0 || n <= 0) return -1;
    const int64_t cycle = cfg->wait + cfg->warmup + cfg->active;
    const int64_t last = first_step + n;                /* steps [first_step, last) were run */
    int64_t cycles = (last - cfg->skip + cycle - 1) / cycle;
    if (cfg->repeat > 0 && cycles > cfg->repeat) cycles = cfg->repeat;
    if (cycles <= 0) return -1;
    double *cost = malloc((size_t)cycles * sizeof(double)), *off = malloc((size_t)cycles * sizeof(double)),
           *on = malloc((size_t)cycles * sizeof(double));
    int pairs = 0;
    for (int64_t c = 0; cost && off && on && c < cycles; c++) {
        double sum[2] = {0, 0};
        int64_t cnt[2] = {0, 0};
        for (int64_t step = cfg->skip + c * cycle; step < cfg->skip + (c + 1) * cycle && step < last; step++) {
            if (step < first_step || isnan(step_ms[step - first_step])) continue;
            int recording = mst_prof_schedule_phase(cfg, step) != MST_PROF_STEP_OFF;
            sum[recording] += step_ms[step - first_step];
            cnt[recording]++;
        }
        out->recorded_ms += sum[1];
        if (!cnt[0] || !cnt[1]) continue;
        off[pairs] = sum[0] / (double)cnt[0];
        on[pairs] = sum[1] / (double)cnt[1];
        cost[pairs] = on[pairs] / off[pairs] - 1;
        pairs++;
    }
    int rc = -1;
    if (pairs > 0) {
        out->pairs = pairs;
        out->cost = mst_stats_mean(cost, pairs);
        out->off_ms = mst_stats_mean(off, pairs);
        out->on_ms = mst_stats_mean(on, pairs);
        mst_stats_mean_interval(cost, pairs, level, &out->lo, &out->hi);     /* one pair: stays unbounded */
        rc = 0;
    }
    free(cost);
    free(off);
    free(on);
    return rc;
}
