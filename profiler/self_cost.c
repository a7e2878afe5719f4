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
    double *resid = malloc((size_t)cycles * sizeof(double)), *off = malloc((size_t)cycles * sizeof(double)),
           *on = malloc((size_t)cycles * sizeof(double));
    int pairs = 0;
    for (int64_t c = 0; resid && off && on && c < cycles; c++) {
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
        pairs++;
    }
    int rc = -1;
    if (pairs > 0) {
        out->pairs = pairs;
        out->off_ms = mst_stats_mean(off, pairs);
        out->on_ms = mst_stats_mean(on, pairs);
        const double ratio = out->on_ms / out->off_ms;
        out->cost = ratio - 1;
        /* the ratio estimator's interval (delta method): the pairs' residuals on - ratio * off have
         * mean 0, and their t interval over mean(off) is the ratio's */
        for (int i = 0; i < pairs; i++) resid[i] = on[i] - ratio * off[i];
        double lo, hi;
        if (mst_stats_mean_interval(resid, pairs, level, &lo, &hi) == 0) {      /* one pair: stays unbounded */
            out->lo = out->cost + lo / out->off_ms;
            out->hi = out->cost + hi / out->off_ms;
        }
        rc = 0;
    }
    free(resid);
    free(off);
    free(on);
    return rc;
}
