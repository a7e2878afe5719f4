/* cmd_graph.c — `mstune graph JOB [--dot FILE] [--after-only]`: builds the job's model,
 * optimizer and loss scaler as the trainer does, traces ONE training step through the trainer's
 * own step runner (runtime/step_runner.h: the job's amp level, loss scaling, clipping and
 * accumulation included) and prints the graph-mode IR before and after the passes, with the
 * plan's statistics: nodes, kernels, arena bytes vs the sum of the intermediates. --dot writes the
 * optimized graph as Graphviz. The step runs once (tracing compiles and then runs the plan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/session.h"
#include "runtime/graph/graph.h"
#include "runtime/amp/autocast.h"
#include "runtime/step_runner.h"

enum { OPT_DOT = 1, OPT_AFTER_ONLY };
const mst_cli_opt mst_cli_graph_opts[] = {
    {"dot", 0, "FILE", "also write the optimized graph as Graphviz to FILE", OPT_DOT},
    {"after-only", 0, NULL, "print only the IR after the passes", OPT_AFTER_ONLY},
    {NULL},
};

typedef struct {
    const char *dot_path;
    bool after_only;
} graph_args;

static int on_graph_opt(void *ctx, const mst_cli_opt *o, const char *value) {
    graph_args *g = ctx;
    if (o->id == OPT_DOT) g->dot_path = value;
    else if (o->id == OPT_AFTER_ONLY) g->after_only = true;
    return 0;
}

int mst_cmd_graph(int argc, char **argv) {
    graph_args g = {NULL, false};
    mst_job_args a;
    int rc = mst_job_args_parse_with("graph", argc, argv, on_graph_opt, &g, &a);
    const char *dot_path = g.dot_path;
    bool after_only = g.after_only;
    if (rc != 0) return rc;
    mst_session s;
    char err[512];
    if (mst_session_open(&s, &a.job, a.out_dir, false, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune graph: %s\n", err);
        return MST_EXIT_INPUT;
    }
    mst_ctx *ctx = s.ctx;
    const mst_train_config *tc = &s.cfg;
    int batch = a.job.data.batch_size;
    mst_optim *opt = mst_optim_new(ctx, &tc->optim, s.model->params, s.model->n_params);
    mst_loss_scaler *scaler = NULL;
    bool ok = opt && mst_amp_set(ctx, tc->amp_level, tc->amp_dtype) == MST_OK &&
              (tc->loss_scale.type == MST_LOSS_SCALE_NONE || (scaler = mst_loss_scaler_new(ctx, &tc->loss_scale)));
    mst_step_spec spec = {.model = s.model, .optim = opt, .scaler = scaler, .clip_grad_norm = tc->clip_grad_norm,
                          .accumulate = tc->accumulate_steps};
    mst_step_runner *runner = ok ? mst_step_runner_new(ctx, &spec, true, tc->dynamic_batch, batch) : NULL;
    mst_graph_cache *gc = runner ? mst_step_runner_train_cache(runner) : NULL;
    rc = MST_EXIT_FAIL;
    if (gc && mst_optim_set_lr(opt, tc->optim.lr) == MST_OK) {
        int64_t xs[4] = {batch, tc->sample_shape[0], tc->sample_shape[1], tc->sample_shape[2]};
        mst_pool_push(ctx);
        mst_tensor *x[MST_STEP_MAX_MICRO], *y[MST_STEP_MAX_MICRO];
        for (int k = 0; k < spec.accumulate; k++) {
            if (tc->sample_tokens) {       /* (N, L) ids, all [CLS]: every key is real */
                x[k] = mst_tensor_zeros(ctx, MST_DTYPE_I32, 2, (int64_t[]){batch, xs[1] * xs[2] * xs[3]});
                for (int64_t i = 0; x[k] && i < x[k]->numel; i++) mst_tensor_i32(x[k])[i] = MST_TOKEN_CLS;
            } else {
                x[k] = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, xs);
            }
            const int64_t *ts = tc->target_shape;     /* paired sources: target images, else labels */
            y[k] = ts[0] ? mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, (int64_t[]){batch, ts[0], ts[1], ts[2]})
                         : mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){batch});
        }
        mst_step_outputs out;
        if (ctx->status == MST_OK && mst_step_runner_train(runner, x, y, &out) == MST_OK) {
            if (!after_only) {
                printf("== traced ==\n");
                mst_graph_cache_dump(gc, stdout, false);
                printf("\n== after passes ==\n");
            }
            mst_graph_cache_dump(gc, stdout, true);
            mst_graph_stats st;
            mst_graph_cache_stats(gc, &st);
            printf("\nnodes: %lld traced, %lld after passes; kernels: %lld; arena: %lld bytes vs %lld bytes of intermediates (%.2fx); compile %.1f ms\n",
                   (long long)st.nodes_traced, (long long)st.nodes_after_passes, (long long)st.kernels,
                   (long long)st.arena_bytes, (long long)st.intermediate_bytes,
                   st.intermediate_bytes ? (double)st.arena_bytes / (double)st.intermediate_bytes : 0.0, st.compile_ms);
            printf("arena live peak by category:");
            for (int c = 0; c < MST_MEM_COUNT; c++)
                if (st.arena_cat_bytes[c]) printf(" %s %lld bytes", mst_mem_cat_name((mst_mem_cat)c), (long long)st.arena_cat_bytes[c]);
            printf("\n");
            mst_graph_cache_describe_fusions(gc, stdout);
            rc = MST_EXIT_OK;
            if (dot_path) {
                FILE *f = fopen(dot_path, "w");
                if (!f || !mst_graph_cache_dump_dot(gc, f, true) || fclose(f) != 0) {
                    fprintf(stderr, "mstune graph: cannot write %s\n", dot_path);
                    rc = MST_EXIT_INPUT;
                }
            }
        }
        mst_pool_pop(ctx);
    }
    if (rc == MST_EXIT_FAIL) fprintf(stderr, "mstune graph: %s\n", mst_ctx_error(ctx));
    mst_step_runner_free(runner);
    mst_loss_scaler_free(scaler);
    mst_optim_free(opt);
    mst_session_close(&s);
    return rc;
}
