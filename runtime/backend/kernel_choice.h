/* kernel_choice.h — which CPU provider runs an op: the builtin kernels (OpenBLAS-backed GEMM and
 * own loops) or oneDNN (runtime/backend/onednn.h), per op and shape.
 *
 * runtime.kernels (a job key; MSTUNE_KERNELS in the environment sets a context's default):
 *   auto     for an op oneDNN serves, the first call of each (op, dtype, shapes, attributes) times
 *            every provider that serves it on the call's own tensors — builtin, oneDNN on the
 *            plain layouts, and for convolutions oneDNN in its blocked layouts with the reorders
 *            in and out counted, directly and through its Winograd kernels, and for half ones
 *            oneDNN's f32 kernels on widened copies — and keeps the
 *            fastest (a oneDNN kernel only when it beats builtin by more than k_choice_margin, so noise never swaps in a slower kernel); the
 *            verdict is kept for the process, so eager, graph plans and every context of the
 *            process run the same kernel for the same shape (MSTUNE_KERNELS_LOG=1 prints each
 *            verdict with the times);
 *   onednn   oneDNN (plain layouts) wherever it implements the shape, builtin elsewhere;
 *   builtin  never oneDNN: the path every test can rely on, on any CPU.
 * The reference switch (mst_ctx_set_force_ref) overrides all three.
 *
 *     mst_ctx_set_kernels(ctx, MST_KERNELS_BUILTIN);
 */
#ifndef MST_RUNTIME_BACKEND_KERNEL_CHOICE_H
#define MST_RUNTIME_BACKEND_KERNEL_CHOICE_H

#include "runtime/op.h"

typedef enum { MST_KERNELS_AUTO, MST_KERNELS_ONEDNN, MST_KERNELS_BUILTIN, MST_KERNELS_MODE_COUNT } mst_kernels_mode;
/* onednn: oneDNN on the tensors' plain layouts; onednn_blocked: oneDNN in its blocked layouts,
 * reorders in the call (convolutions); onednn_winograd: the same with oneDNN's Winograd kernels (f32
 * 3x3 stride-1 convolutions); onednn_f32: f16/bf16 convolutions on oneDNN's f32 blocked kernels
 * (Winograd where the f32 verdict of the widened shape takes it), the half operands widened
 * exactly and the half outputs rounded (mst_half_run_wide): oneDNN 2.6's bf16 weight gradients
 * took 1.5x the time of its f32 ones in the cnn's step on the 7x7 planes (docs/benchmarks.md). */
typedef enum {
    MST_PROVIDER_BUILTIN,
    MST_PROVIDER_ONEDNN,
    MST_PROVIDER_ONEDNN_BLOCKED,
    MST_PROVIDER_ONEDNN_WINOGRAD,
    MST_PROVIDER_ONEDNN_F32,
    MST_PROVIDER_COUNT
} mst_provider;

const char *mst_kernels_mode_name(mst_kernels_mode m);
int         mst_kernels_mode_parse(const char *s);     /* -1 if unknown */
const char *mst_provider_name(mst_provider p);

void mst_ctx_set_kernels(mst_ctx *ctx, mst_kernels_mode m);

/* The kernel executors bind for (d, dtype): the builtin kernel (or reference under force_ref, or
 * the half-via-f32 kernel), or — when another provider serves the pair and the mode allows — a
 * kernel that picks the provider per shape as above. */
mst_kernel_fn mst_kernel_lookup(const mst_ctx *ctx, const mst_op_desc *d, mst_dtype dtype);
/* The builtin kernel alone (what mst_op_kernel returned before providers). */
mst_kernel_fn mst_kernel_builtin(const mst_ctx *ctx, const mst_op_desc *d, mst_dtype dtype);
/* Whether the choice decides op on key dtype: some oneDNN provider has a kernel for the pair. */
bool mst_kernel_choice_applies(mst_op op, mst_dtype key);
/* Provider p's kernel for op on key dtype (what runs when the choice reports p); NULL when p does
 * not serve the pair. ctx may be NULL except for builtin. */
mst_kernel_fn mst_provider_kernel(const mst_ctx *ctx, mst_provider p, mst_op op, mst_dtype key);
/* Which provider runs (or, in auto before the first run, would be timed for) this call; decides
 * now (running the candidates on c's tensors) in auto mode when not yet decided. */
mst_provider mst_kernel_provider(mst_ctx *ctx, const mst_op_call *c);

/* A call site that runs the same call again and again (a graph plan's node) binds the choice once
 * instead of looking its verdict up on every call (the per-call kernel reads the calling thread's
 * copy of the verdicts by the call's signature key, and the process-wide map under its lock on a
 * miss: ~140 ns for a (1, 1) x (1, 1) matmul through dispatch here, ~190 ns with the map alone,
 * docs/benchmarks.md). The binding holds for the call it was made on (its
 * dtypes, shapes and attributes: mst_op_signature_key, ~10-20 ns) at the thread count it was made
 * at; another shape (a dynamic-batch plan's smaller batch) or thread count (a plan's step-thread
 * trial) binds again, so a stale binding never runs a shape on another shape's provider.
 * Zero-initialise it.
 *     mst_kernel_binding b = {0};
 *     if (mst_kernel_is_choice(k)) s = mst_kernel_run_bound(ctx, &b, &call); else s = k(ctx, &call); */
typedef struct {
    uint64_t call_key;              /* mst_op_signature_key of the call it was made on */
    int threads;                    /* mst_ctx_threads at binding; kernel NULL: not bound */
    mst_provider provider;
    mst_kernel_fn kernel;
} mst_kernel_binding;
/* Whether k is the choice's per-call kernel (mst_kernel_lookup's where a provider is chosen per shape). */
bool mst_kernel_is_choice(mst_kernel_fn k);
/* Runs c on the provider the choice settles on for it (deciding now, as the per-call kernel does,
 * when b is unbound or bound at another thread count): the same provider and bits as that kernel. */
mst_status mst_kernel_run_bound(mst_ctx *ctx, mst_kernel_binding *b, const mst_op_call *c);

/* Graph plans' verdicts on their step's thread budget (runtime/graph/step_threads.h), kept in the
 * same per-machine file as the kernel verdicts, for the same reason: two runs of a job on one
 * machine get the same bits from the same seed while the machine agrees with the verdict (a
 * process confirms it, and writes a new line when it overturns it). Lines per plan key (the
 * plan's graph and the thread budget: mst_graph_hash):
 *   s1 <TAB> machine <TAB> step_threads <TAB> key <TAB> threads <TAB> one|all <TAB> all us <TAB> one us <TAB> quiet|busy <TAB> graph
 * get: the last quiet line's verdict, else the last busy one's (*busy set); false when none.
 * put appends a line (quiet: whether the machine looked quiet before and after the trial). */
bool mst_plan_verdict_get(uint64_t key, bool *one_thread, bool *busy);
/* Whether a step's thread trial starts from the file's verdict for key (then *one_thread): a
 * verdict is used unless it was timed under load and the machine is quiet now (then measured
 * again), or under MSTUNE_VERDICTS=keep whatever the load. *quiet: whether the machine looked quiet
 * (what a new line is tagged). */
bool mst_plan_verdict_use(uint64_t key, bool *one_thread, bool *quiet);
void mst_plan_verdict_put(uint64_t key, int threads, bool one_thread, double all_ns, double one_ns, bool quiet,
                          const char *graph);
/* MSTUNE_KERNELS_LOG set (and not "0"): the kernel choice, graph plans and eager runs print their
 * verdicts to stderr. */
bool mst_kernels_log_on(void);
/* MSTUNE_VERDICTS=keep: a verdict on file (kernel or step threads) is used as it stands: a busy
 * one is not timed again on a quiet machine, and a step-thread verdict is not confirmed by the
 * step's first runs (so never overturned). `mstune advise` sets it for the runs it starts: each
 * process confirming the verdict itself let one advise's baseline and trials run on different
 * thread budgets, whose bits differ (overflow_churn's seed 0: 78.64% on one thread, 78.34% on
 * two), and on this VM confirmations overturned the mlp's plan verdict back and forth at a 20%
 * margin. A key with no verdict on file is still decided (and written) by its first run. */
bool mst_verdicts_kept(void);
/* At most one runnable task on the machine besides this process's own (what "quiet" means above). */
bool mst_machine_quiet(void);

#endif
