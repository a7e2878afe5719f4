/* summary.c — builds summary.json with cJSON. */
#include "cli/summary.h"
#include "cli/ranks.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run_meta.h"
#include "runtime/cpu_features.h"
#include "util/fsutil.h"

/* Subnormal f32 values (0 < |x| < FLT_MIN) in the trained parameters and their last gradients:
 * a detected fact the advisor's denormal rule cites (such values take a slow path on many CPUs). */
static void add_subnormals(cJSON *root, const mst_model *m) {
    int64_t n[2] = {0, 0}, sub[2] = {0, 0};
    for (int i = 0; i < m->n_params; i++) {
        const mst_tensor *ts[2] = {m->params[i], m->params[i]->grad};
        for (int k = 0; k < 2; k++) {
            const mst_tensor *t = ts[k];
            if (!t || t->dtype != MST_DTYPE_F32 || !t->storage || !t->storage->data) continue;
            const float *x = mst_tensor_f32(t);
            for (int64_t j = 0; j < t->numel; j++) sub[k] += fpclassify(x[j]) == FP_SUBNORMAL;
            n[k] += t->numel;
        }
    }
    cJSON *o = cJSON_AddObjectToObject(root, "subnormal_fraction");
    cJSON_AddNumberToObject(o, "params", n[0] ? (double)sub[0] / (double)n[0] : 0);
    if (n[1]) cJSON_AddNumberToObject(o, "grads", (double)sub[1] / (double)n[1]);
}

/* The trainer's partial-underflow probe (runtime/amp/underflow.h), profiled runs at O1..O3: the
 * counts pooled over the sampled steps, the largest and the last sample's fraction. */
static void add_underflow(cJSON *root, const mst_session *s, const mst_train_result *r) {
    if (r->n_underflow <= 0) return;
    mst_underflow_counts t = {0};
    double max_frac = 0;
    cJSON *o = cJSON_AddObjectToObject(root, "grad_underflow");
    cJSON *steps = cJSON_CreateArray();
    for (int64_t i = 0; i < r->n_underflow; i++) {
        const mst_underflow_counts *c = &r->underflow[i].counts;
        t.elements += c->elements;
        t.ref_nonzero += c->ref_nonzero;
        t.half_zero += c->half_zero;
        t.cast_zero += c->cast_zero;
        t.cast_subnormal += c->cast_subnormal;
        double f = mst_underflow_fraction(c);
        if (f > max_frac) max_frac = f;
        cJSON_AddItemToArray(steps, cJSON_CreateNumber((double)r->underflow[i].step));
    }
    cJSON_AddStringToObject(o, "half", s->cfg.amp_dtype == MST_DTYPE_BF16 ? "bf16" : "f16");
    cJSON_AddNumberToObject(o, "every", s->cfg.underflow_every);
    cJSON_AddNumberToObject(o, "budget", s->cfg.underflow_budget);
    cJSON_AddNumberToObject(o, "over_budget", (double)r->underflow_over_budget);
    cJSON_AddNumberToObject(o, "sampled_steps", (double)r->n_underflow);
    cJSON_AddItemToObject(o, "steps", steps);
    cJSON_AddNumberToObject(o, "elements", (double)t.elements);
    cJSON_AddNumberToObject(o, "ref_nonzero", (double)t.ref_nonzero);
    cJSON_AddNumberToObject(o, "half_zero", (double)t.half_zero);
    cJSON_AddNumberToObject(o, "cast_zero", (double)t.cast_zero);
    cJSON_AddNumberToObject(o, "cast_subnormal", (double)t.cast_subnormal);
    cJSON_AddNumberToObject(o, "fraction", mst_underflow_fraction(&t));
    cJSON_AddNumberToObject(o, "fraction_max", max_frac);
    cJSON_AddNumberToObject(o, "fraction_last", mst_underflow_fraction(&r->underflow[r->n_underflow - 1].counts));
    cJSON_AddNumberToObject(o, "cast_zero_fraction", t.ref_nonzero > 0 ? (double)t.cast_zero / (double)t.ref_nonzero : 0);
    cJSON_AddNumberToObject(o, "probe_s", r->underflow_probe_s);
}

cJSON *mst_summary_build(const mst_job *job, const mst_session *s, const mst_train_result *r) {
    cJSON *root = cJSON_CreateObject(), *config = NULL;
    if (!root || mst_job_to_json(job, &config) != 0) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(root, "name", job->name);
    cJSON_AddStringToObject(root, "model", s->model->name);
    cJSON_AddNumberToObject(root, "model_params", (double)mst_model_param_count(s->model));
    cJSON_AddNumberToObject(root, "seed", job->train.seed);
    cJSON_AddNumberToObject(root, "val_accuracy", r->val_accuracy);
    cJSON_AddNumberToObject(root, "val_loss", r->val_loss);
    /* the job's metric, with its direction, for readers that should not assume accuracy */
    cJSON *metric = cJSON_AddObjectToObject(root, "metric");
    cJSON_AddStringToObject(metric, "name", mst_metric_name(s->model->metric));
    if (isnan(r->val_metric)) cJSON_AddNullToObject(metric, "value");
    else cJSON_AddNumberToObject(metric, "value", r->val_metric);
    cJSON_AddBoolToObject(metric, "higher_is_better", mst_metric_higher_is_better(s->model->metric));
    cJSON_AddStringToObject(metric, "direction", mst_metric_higher_is_better(s->model->metric) ? "higher" : "lower");
    cJSON_AddStringToObject(metric, "label", mst_metric_label(s->model->metric));
    cJSON_AddStringToObject(metric, "unit", mst_metric_unit(s->model->metric));
    cJSON_AddNumberToObject(metric, "display_scale", mst_metric_display_scale(s->model->metric));
    cJSON *curve = cJSON_AddArrayToObject(metric, "curve");     /* one value per evaluation */
    for (int64_t i = 0; i < r->n_epoch; i++)
        if (!isnan(r->epoch[i].val_metric)) cJSON_AddItemToArray(curve, cJSON_CreateNumber(r->epoch[i].val_metric));
    cJSON_AddNumberToObject(root, "final_train_loss", r->final_loss);
    cJSON_AddNumberToObject(root, "steps", (double)r->steps);
    cJSON_AddNumberToObject(root, "epochs", (double)r->epochs);
    cJSON_AddNumberToObject(root, "step_time_ms_median", r->step_time_ms_median);
    cJSON_AddNumberToObject(root, "step_time_ms_p90", r->step_time_ms_p90);
    /* throughput: samples (steps) this run processed / the training loop's wall time (docs/report.md) */
    cJSON_AddNumberToObject(root, "steps_per_s", r->steps_per_s);
    cJSON_AddNumberToObject(root, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(root, "samples_processed", (double)r->samples);
    cJSON_AddNumberToObject(root, "peak_memory_bytes", (double)r->peak_memory_bytes);
    cJSON_AddNumberToObject(root, "wall_s", r->wall_s);
    /* the training work, for the advisor's speed metric: loop time per applied optimizer update */
    cJSON_AddNumberToObject(root, "train_loop_s", r->train_loop_s);
    cJSON_AddNumberToObject(root, "applied_updates", (double)(r->steps - r->skipped_steps));
    cJSON_AddNumberToObject(root, "resumed_at_step", (double)r->resumed_at_step);
    cJSON_AddBoolToObject(root, "interrupted", r->interrupted);
    /* mixed precision: the level run, where the loss scale ended, and how many steps overflowed
     * (inf/NaN gradients) and had their update skipped */
    static const char *const levels[4] = {"O0", "O1", "O2", "O3"};
    cJSON_AddStringToObject(root, "amp_level", r->amp_level >= 0 && r->amp_level < 4 ? levels[r->amp_level] : "?");
    cJSON_AddNumberToObject(root, "loss_scale_final", r->loss_scale_final);
    cJSON_AddNumberToObject(root, "overflow_steps", (double)r->overflow_steps);
    cJSON_AddNumberToObject(root, "skipped_steps", (double)r->skipped_steps);
    cJSON_AddStringToObject(root, "runtime_mode", job->runtime.mode == MST_JOB_MODE_GRAPH ? "graph" : "eager");
    cJSON_AddNumberToObject(root, "compile_count", (double)r->compile_count);
    cJSON_AddNumberToObject(root, "compile_ms", r->compile_ms);
    cJSON_AddNumberToObject(root, "arena_bytes", (double)r->arena_bytes);
    cJSON_AddNumberToObject(root, "intermediate_bytes", (double)r->intermediate_bytes);
    cJSON_AddNumberToObject(root, "graph_step_threads", r->graph_step_threads);
    cJSON_AddNumberToObject(root, "step_threads", r->step_threads);
    cJSON *by_cat = cJSON_AddObjectToObject(root, "arena_by_category");
    for (int c = 0; by_cat && c < MST_MEM_COUNT; c++)
        if (r->arena_cat_bytes[c]) cJSON_AddNumberToObject(by_cat, mst_mem_cat_name((mst_mem_cat)c), (double)r->arena_cat_bytes[c]);
    add_subnormals(root, s->model);
    add_underflow(root, s, r);
    cJSON *epochs = cJSON_AddArrayToObject(root, "epoch_records");
    for (int64_t i = 0; i < r->n_epoch; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "steps", (double)r->epoch[i].steps);
        cJSON_AddNumberToObject(e, "wall_s", r->epoch[i].wall_s);
        cJSON_AddNumberToObject(e, "train_loss", r->epoch[i].train_loss);
        cJSON_AddNumberToObject(e, "val_accuracy", r->epoch[i].val_accuracy);
        cJSON_AddNumberToObject(e, "val_loss", r->epoch[i].val_loss);
        if (isnan(r->epoch[i].val_metric)) cJSON_AddNullToObject(e, "val_metric");
        else cJSON_AddNumberToObject(e, "val_metric", r->epoch[i].val_metric);
        cJSON_AddItemToArray(epochs, e);
    }
    /* cJSON prints doubles with enough digits to round-trip: the loss curve compares bitwise */
    cJSON *losses = cJSON_AddArrayToObject(root, "train_loss");
    for (int64_t i = 0; i < r->n_losses; i++) cJSON_AddItemToArray(losses, cJSON_CreateNumber(r->losses[i]));
    cJSON_AddItemToObject(root, "config", config);
    /* where it ran: the regression gate refuses to compare runs from different machines */
    cJSON *machine = cJSON_AddObjectToObject(root, "machine");
    mst_meta_item items[24];
    int n = mst_run_meta_collect(items, 24);
    for (int i = 0; i < n; i++) cJSON_AddStringToObject(machine, items[i].key, items[i].value);
    /* the CPU as detected at run time (runtime/cpu_features.h): the advisor's AMP rule reads it */
    cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
    cJSON_AddStringToObject(cpu, "model", mst_cpu_info_get()->model);
    cJSON *feats = cJSON_AddArrayToObject(cpu, "features");
    for (int f = 0; f < MST_CPU_FEATURE_COUNT; f++)
        if (mst_cpu_has((mst_cpu_feature)f)) cJSON_AddItemToArray(feats, cJSON_CreateString(mst_cpu_feature_name((mst_cpu_feature)f)));
    mst_summary_add_ranks(root, r);     /* data parallel: the per-rank view (cli/ranks.h) */
    return root;
}

int mst_summary_write(const char *path, const cJSON *root, char *err, size_t errn) {
    char *text = cJSON_Print(root);
    if (!text) {
        snprintf(err, errn, "%s: out of memory printing the summary", path);
        return -1;
    }
    size_t len = strlen(text);
    text[len] = '\n';       /* cJSON's buffer holds len + 1 bytes: the NUL becomes a final newline */
    int rc = mst_write_atomic(path, text, len + 1, err, errn);
    cJSON_free(text);
    return rc;
}
