/* lr_schedule.c — constant, step and cosine learning-rate schedules with linear warmup (the
 * formulas are in lr_schedule.h). Closed forms of the step rather than PyTorch's chained
 * per-step multiplications: the value at any step is computed directly, so a resumed run gets
 * the same lr without replaying the schedule, at the price of not matching PyTorch's recursive
 * CosineAnnealingLR to the last bit. Reference: torch.optim.lr_scheduler (LinearLR, StepLR,
 * CosineAnnealingLR).
 */
#include "runtime/lr_schedule.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const k_kind_names[MST_LR_KIND_COUNT] = {"constant", "step", "cosine"};

const char *mst_lr_kind_name(mst_lr_kind kind) {
    return (unsigned)kind < MST_LR_KIND_COUNT ? k_kind_names[kind] : "?";
}

int mst_lr_kind_parse(const char *name) {
    for (int k = 0; k < MST_LR_KIND_COUNT; k++)
        if (name && strcmp(name, k_kind_names[k]) == 0) return k;
    return -1;
}

double mst_lr_at(const mst_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t t = step - s->warmup_steps;
    switch (s->kind) {
    case MST_LR_STEP:
        if (s->step_size < 1) return s->base_lr;
        return s->base_lr * pow(s->gamma, (double)(t / s->step_size));
    case MST_LR_COSINE: {
        int64_t T = s->total_steps - s->warmup_steps;
        if (T <= 0 || t >= T) return s->min_lr;
        return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * (double)t / (double)T));
    }
    case MST_LR_CONSTANT:
    default:
        return s->base_lr;
    }
}

static bool invalid(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool invalid(char *err, size_t n, const char *fmt, ...) {
    if (err && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool mst_lr_validate(const mst_lr_schedule *s, char *err, size_t n) {
    if (!s) return invalid(err, n, "lr schedule: NULL");
    if ((unsigned)s->kind >= MST_LR_KIND_COUNT)
        return invalid(err, n, "lr schedule: kind %d is not one of constant, step, cosine", (int)s->kind);
    const char *k = k_kind_names[s->kind];
    if (!(s->base_lr >= 0 && isfinite(s->base_lr)))
        return invalid(err, n, "lr schedule %s: base_lr must be finite and >= 0, got %g", k, s->base_lr);
    if (s->warmup_steps < 0)
        return invalid(err, n, "lr schedule %s: warmup_steps must be >= 0, got %lld", k, (long long)s->warmup_steps);
    if (s->kind == MST_LR_STEP) {
        if (s->step_size < 1)
            return invalid(err, n, "lr schedule step: step_size must be >= 1, got %lld", (long long)s->step_size);
        if (!(s->gamma > 0 && isfinite(s->gamma)))
            return invalid(err, n, "lr schedule step: gamma must be finite and > 0, got %g", s->gamma);
    }
    if (s->kind == MST_LR_COSINE) {
        if (s->total_steps <= s->warmup_steps)
            return invalid(err, n, "lr schedule cosine: total_steps must be > warmup_steps (%lld), got %lld",
                           (long long)s->warmup_steps, (long long)s->total_steps);
        if (!(s->min_lr >= 0 && s->min_lr <= s->base_lr))
            return invalid(err, n, "lr schedule cosine: min_lr must be in [0, base_lr = %g], got %g", s->base_lr, s->min_lr);
    }
    if (err && n > 0) err[0] = '\0';
    return true;
}
