/* self_cost.h — what recording cost, measured inside the run that recorded: with a schedule that
 * has off steps (mst_prof_config.wait), each cycle's off window and the recording window after it
 * form a pair, milliseconds to seconds apart; the cost is the ratio of the means over pairs
 * (mean recording window / mean off window - 1), with the ratio estimator's t interval (delta
 * method: the residuals on - ratio * off). Not the mean of per-pair ratios: 1/off is convex, so
 * noise in the off windows alone pushed that up (0.3 to 1.1 points on the mlp in runs that
 * recorded nothing; docs/benchmarks.md). Pairing keeps a machine that drifts or slows down
 * as a whole for a while from counting (separate runs of one job on a shared VM differ by more
 * than the cost). Means, not medians: the cost is lumpy — a sampler signal lands in one step of
 * dozens, and the recording thread writes the store's queue every ~200 ms (store.c), in one window
 * of many — and a median over pairs leaves those windows out (it read +0.8% where the collectors
 * had timed themselves at 1.6%); a preempted window on either side widens the interval instead.
 * The cost of the collectors that pause with the recorder (events.h's phase hook) is in it;
 * anything that runs in off steps too is not.
 *
 *     mst_prof_self_cost c;
 *     if (mst_prof_measure_self_cost(&cfg, first_step, step_ms, n, 0.90, &c) == 0)
 *         printf("%+.2f%% [%+.2f, %+.2f] over %d pairs\n", 100 * c.cost, 100 * c.lo, 100 * c.hi, c.pairs);
 */
#ifndef MST_PROFILER_SELF_COST_H
#define MST_PROFILER_SELF_COST_H

#include <stdint.h>

#include "profiler/events.h"

typedef struct {
    int pairs;              /* cycles whose off and recording windows both had timed steps */
    double cost;            /* on_ms / off_ms - 1 (0.02: recording made steps 2% slower) */
    double lo, hi;          /* its t interval at `level` (delta method); -inf/+inf with one pair */
    double level;
    double off_ms, on_ms;   /* means over the pairs of the windows' mean step times */
    double recorded_ms;     /* the time of every timed recording step (of the pairs or not): what an
                               estimate of the collectors' cost is a share of */
} mst_prof_self_cost;

/* step_ms[i] is the time of step first_step + i (NAN: not timed, e.g. an epoch's first step).
 * 0, or -1 when the schedule has no off steps between recording ones (wait 0, or active 0) or
 * no pair had timed steps on both sides. */
int mst_prof_measure_self_cost(const mst_prof_config *cfg, int64_t first_step, const double *step_ms, int64_t n,
                               double level, mst_prof_self_cost *out);

#endif
