/* cmd_graph.c — `mstune graph JOB [--dot FILE] [--after-only]`: builds the job's model and
 * optimizer, traces ONE training step of it (runtime/step.h's mst_step_run, the same function
 * eager training runs) and prints the graph-mode IR before and after the passes, with the plan's
 * statistics: nodes, kernels, arena bytes vs the sum of the intermediates. --dot writes the
 * optimized graph as Graphviz. The step runs once (tracing compiles and then runs the plan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/session.h"
#include "runtime/graph/graph.h"
#include "runtime/step.h"

typedef struct {
    mst_step_spec spec;
} graph_step_arg;

static mst_status traced_step(mst_ctx *ctx, void *arg, mst_tensor *const in[], int n_in, mst_tensor *out[], int *n_out) {
    (void)n_in;
    graph_step_arg *a = arg;
    mst_step_outputs o = {0};
    mst_status s = mst_step_run(ctx, &a->spec, &in[0], &in[1], &o);
    out[0] = o.loss;
    *n_out = 1;
    return s;
}

int mst_cmd_graph(int argc, char **argv) {
    const char *dot_path = NULL;
    bool after_only = false;
    char *rest[64];
    int n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dot") == 0 && i + 1 < argc) dot_path = argv[++i];
        else if (strcmp(argv[i], "--after-only") == 0) after_only = true;
        else if (n_rest < 64) rest[n_rest++] = argv[i];
    }
    mst_job_args a;
    int rc = mst_job_args_parse("graph", n_rest, rest, false, &a);
    if (rc != 0) return rc;
    mst_session s;
    char err[512];
    if (mst_session_open(&s, &a.job, a.out_dir, false, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune graph: %s\n", err);
        return MST_EXIT_INPUT;
    }
    mst_ctx *ctx = s.ctx;
    mst_optim *opt = mst_optim_new(ctx, &s.cfg.optim, s.model->params, s.model->n_params);
    graph_step_arg arg = {.spec = {.model = s.model, .optim = opt, .accumulate = 1}};
    mst_graph_cache *gc = opt ? mst_graph_cache_new(ctx, a.job.name, traced_step, &arg, &(mst_graph_options){.optimize = true}) : NULL;
    rc = MST_EXIT_FAIL;
    if (gc && mst_optim_set_lr(opt, s.cfg.optim.lr) == MST_OK) {
        int batch = a.job.data.batch_size;
        int64_t xs[4] = {batch, s.cfg.sample_shape[0], s.cfg.sample_shape[1], s.cfg.sample_shape[2]};
        mst_pool_push(ctx);
        mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 4, xs);
        mst_tensor *y = mst_tensor_zeros(ctx, MST_DTYPE_I32, 1, (int64_t[]){batch});
        mst_tensor *out[MST_GRAPH_MAX_IO];
        int n_out = 0;
        if (x && y && mst_graph_cache_run(gc, (mst_tensor *[]){x, y}, 2, out, &n_out) == MST_OK) {
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
    mst_graph_cache_free(gc);
    mst_optim_free(opt);
    mst_session_close(&s);
    return rc;
}
