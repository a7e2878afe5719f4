/* session.c — from a validated job to runnable runtime objects. */
#include "cli/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/comm/comm.h"
#include "runtime/fpu.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/graph/step_threads.h"
#include "runtime/device.h"
#include "cli/outdir.h"

#include "workloads/zoo.h"

/* Fashion-MNIST pixel statistics over the training split (scaled to [0, 1]). */
#define FASHION_MEAN 0.2860f
#define FASHION_STD 0.3530f

static const mst_augment k_augment[MST_JOB_AUGMENT_COUNT] = {
    [MST_JOB_AUGMENT_NONE] = MST_AUGMENT_NONE, [MST_JOB_AUGMENT_LIGHT] = MST_AUGMENT_LIGHT,
    [MST_JOB_AUGMENT_HEAVY] = MST_AUGMENT_HEAVY,
};
static const mst_optim_kind k_optim[MST_JOB_OPTIM_COUNT] = {
    [MST_JOB_OPTIM_SGD] = MST_OPTIM_SGD, [MST_JOB_OPTIM_ADAM] = MST_OPTIM_ADAM, [MST_JOB_OPTIM_ADAMW] = MST_OPTIM_ADAMW,
};
static const mst_loss_scale_type k_scale[MST_JOB_SCALE_COUNT] = {
    [MST_JOB_SCALE_NONE] = MST_LOSS_SCALE_NONE, [MST_JOB_SCALE_FIXED] = MST_LOSS_SCALE_FIXED,
    [MST_JOB_SCALE_DYNAMIC] = MST_LOSS_SCALE_DYNAMIC,
};
static const mst_lr_kind k_sched[MST_JOB_SCHED_COUNT] = {
    [MST_JOB_SCHED_CONSTANT] = MST_LR_CONSTANT, [MST_JOB_SCHED_STEP] = MST_LR_STEP, [MST_JOB_SCHED_COSINE] = MST_LR_COSINE,
};

static const mst_device k_device[MST_JOB_DEVICE_COUNT] = {
    [MST_JOB_DEVICE_CPU] = MST_DEVICE_CPU, [MST_JOB_DEVICE_CUDA] = MST_DEVICE_CUDA,
};

/* Settings whose machinery this build lacks are refused by name, not ignored: a device without a
 * backend in this build says so through the backend registry (runtime/device.h). */
static int check_available(const mst_job *job, char *err, size_t errn) {
    const char *why = mst_device_unavailable(k_device[job->runtime.device]);
    if (why) {
        snprintf(err, errn, "runtime.device: %s", why);
        return -1;
    }
    return 0;
}

static int open_sources(mst_session *s, const mst_job *job, char *err, size_t errn) {
    if (job->data.dataset == MST_JOB_DATASET_LANGID)
        return mst_source_langid_open(job->data.langid.dir, job->data.langid.max_len, job->data.langid.per_language,
                                      &s->train_src, &s->test_src, err, errn);
    if (job->data.dataset == MST_JOB_DATASET_FASHION_SR) {     /* Fashion-MNIST downsampled x2: 14x14 -> 28x28 */
        s->train_src = mst_source_sr_open(job->data.path, "train", 2, err, errn);
        if (!s->train_src) return -1;
        s->test_src = mst_source_sr_open(job->data.path, "test", 2, err, errn);
        return s->test_src ? 0 : -1;
    }
    if (job->data.dataset == MST_JOB_DATASET_FASHION_MNIST) {
        s->train_src = mst_source_idx_open(job->data.path, "train", err, errn);
        if (!s->train_src) return -1;
        s->test_src = mst_source_idx_open(job->data.path, "test", err, errn);
        return s->test_src ? 0 : -1;
    }
    const typeof(job->data.synthetic) *sy = &job->data.synthetic;
    uint64_t seed = (uint64_t)job->train.seed;
    s->train_src = mst_source_synthetic_new(sy->samples, sy->channels, sy->height, sy->width, sy->classes, seed, 0);
    s->test_src = mst_source_synthetic_new(sy->test_samples, sy->channels, sy->height, sy->width, sy->classes, seed, 1);
    if (s->train_src && sy->delay_us > 0) mst_source_synthetic_set_delay_us(s->train_src, sy->delay_us);
    if (!s->train_src || !s->test_src) {
        snprintf(err, errn, "data.synthetic: cannot create a dataset of %d samples of (%d, %d, %d)", sy->samples, sy->channels,
                 sy->height, sy->width);
        return -1;
    }
    return 0;
}

/* Settings that change what training computes; a resume must match them (train.steps and
 * train.epochs only under the cosine schedule, whose shape depends on the run length: otherwise a
 * resume may lengthen the run). Loader threads, prefetch, the data folder, logging and profiling
 * leave the bits alone; the thread counts (runtime.threads, runtime.step_threads) move them within
 * f32 rounding, and a resume may change them as a new run may. */
static bool training_relevant(const mst_job *job, const char *path) {
    static const char *const ignored[] = {"name", "data.path", "data.num_workers", "data.prefetch", "train.eval",
                                          "train.log_every", "train.checkpoint", "train.allow_config_change",
                                          "runtime.threads", "runtime.step_threads", NULL};
    for (int i = 0; ignored[i]; i++)
        if (strcmp(path, ignored[i]) == 0) return false;
    if (strncmp(path, "profile.", 8) == 0) return false;
    if (strcmp(path, "train.steps") == 0 || strcmp(path, "train.epochs") == 0)
        return job->optimizer.schedule == MST_JOB_SCHED_COSINE;
    return true;
}

static void config_text(const mst_job *job, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < mst_job_key_count && len < n; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        if (!training_relevant(job, k->path)) continue;
        char v[MST_JOB_PATH_MAX + 64];
        mst_job_key_format(job, k, v, sizeof(v));
        int w = snprintf(buf + len, n - len, "%s=%s\n", k->path, v);
        if (w > 0) len = len + (size_t)w < n ? len + (size_t)w : n;
    }
}

/* Threads per rank: the job's budget (0 = every core) shared by the ranks on this machine. */
static int rank_threads(const mst_job *job, int ranks) {
    if (ranks <= 1) return job->runtime.threads;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int here = local && atoi(local) > 0 ? atoi(local) : ranks;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int budget = job->runtime.threads > 0 ? job->runtime.threads : (int)(cores > 0 ? cores : 1);
    return budget / here > 0 ? budget / here : 1;
}

/* Rank k > 0 writes to DIR.rank<k> (cli/args.c); rank 0's DIR holds the job's checkpoint. */
static const char *rank0_dir(const char *out_dir, char *buf, size_t n) {
    snprintf(buf, n, "%s", out_dir);
    char *dot = strrchr(buf, '.');
    if (dot && strncmp(dot, ".rank", 5) == 0) *dot = '\0';
    return buf;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A killed run's staged checkpoint is newer than the folder's, unless a finished promotion is
 * pending (then the staged files are about to become the folder's). */
static int pick_resume(mst_session *s, const char *out_dir, char *err, size_t errn) {
    char marker[1200];
    snprintf(marker, sizeof(marker), "%s/" MST_OUTDIR_STAGE "/COMPLETE", out_dir);
    s->resume_from_stage = access(marker, F_OK) != 0 && access(s->checkpoint_path, F_OK) == 0;
    if (s->resume_from_stage) snprintf(s->resume_path, sizeof(s->resume_path), "%s", s->checkpoint_path);
    else snprintf(s->resume_path, sizeof(s->resume_path), "%s/checkpoint.bin", out_dir);
    if (is_dir(s->resume_path)) {
        snprintf(err, errn, "--resume: %s is a directory, not a checkpoint file", s->resume_path);
        return -1;
    }
    bool pending = access(marker, F_OK) == 0 && access(s->checkpoint_path, R_OK) == 0;     /* rolled forward on open */
    if (!pending && access(s->resume_path, R_OK) != 0) {
        snprintf(err, errn, "--resume: no checkpoint at %s (run without --resume first, with train.checkpoint: true)",
                 s->resume_path);
        return -1;
    }
    return 0;
}

int mst_session_open(mst_session *s, const mst_job *job, const char *out_dir, bool resume, char *err, size_t errn) {
    memset(s, 0, sizeof(*s));
    if (check_available(job, err, errn) != 0) return -1;
    /* the FTZ/DAZ mode first: the loader workers started below take this thread's mode */
    mst_fpu_set_flush(job->runtime.flush_denormals);
    if (open_sources(s, job, err, errn) != 0) goto fail;
    s->ranks = 1;
    if (mst_comm_launched(NULL)) {      /* one of several ranks (mstune --nproc N, or mpirun): data parallel */
        char cerr[512];
        mst_comm_want_threads(job->runtime.comm.progress_thread);      /* MPI_THREAD_MULTIPLE for it */
        if (!(s->comm = mst_comm_new_auto(job->runtime.comm.timeout_s, cerr, sizeof(cerr)))) {
            snprintf(err, errn, "data parallel: %s", cerr);
            goto fail;
        }
        if (job->runtime.comm.progress_thread && mst_comm_progress_thread(s->comm, true) != MST_OK) {
            snprintf(err, errn, "data parallel: %s", mst_comm_error(s->comm));
            goto fail;
        }
        s->rank = mst_comm_rank(s->comm);
        s->ranks = mst_comm_size(s->comm);
    }

    bool fashion = job->data.dataset == MST_JOB_DATASET_FASHION_MNIST;
    mst_loader_config lc = {
        .batch_size = job->data.batch_size, .drop_remainder = job->data.drop_remainder, .shuffle = job->data.shuffle,
        .seed = (uint64_t)job->train.seed, .num_workers = job->data.num_workers, .prefetch = job->data.prefetch,
        .augment = k_augment[job->data.augment], .normalize = job->data.normalize && fashion,
        .mean = FASHION_MEAN, .std = FASHION_STD, .limit = job->data.limit,
        .shard_rank = s->rank, .shard_count = s->ranks,     /* data.batch_size is per rank */
    };
    char lerr[512];
    if (!(s->train = mst_loader_new(s->train_src, &lc, lerr, sizeof(lerr)))) {
        snprintf(err, errn, "data: %s", lerr);
        goto fail;
    }
    mst_loader_config tc = lc;
    tc.batch_size = job->data.batch_size;     /* evaluation's activations stay within training's */
    tc.drop_remainder = false;
    tc.shuffle = false;
    tc.augment = MST_AUGMENT_NONE;
    tc.limit = 0;
    if (!(s->test = mst_loader_new(s->test_src, &tc, lerr, sizeof(lerr)))) {
        snprintf(err, errn, "data (test split): %s", lerr);
        goto fail;
    }

    s->ctx = mst_ctx_new(&(mst_ctx_config){.seed = (uint64_t)job->train.seed, .n_threads = rank_threads(job, s->ranks),
                                               .flush_denormals = job->runtime.flush_denormals});
    if (!s->ctx) {
        snprintf(err, errn, "out of memory creating the runtime context");
        goto fail;
    }
    if (mst_ctx_set_device(s->ctx, k_device[job->runtime.device]) != MST_OK) {  /* checked above; before any tensor */
        snprintf(err, errn, "runtime.device: %s", mst_ctx_error(s->ctx));
        goto fail;
    }
    /* auto (the default) keeps the context's own default, which MSTUNE_KERNELS may have forced */
    if (job->runtime.kernels != MST_JOB_KERNELS_AUTO) mst_ctx_set_kernels(s->ctx, (mst_kernels_mode)job->runtime.kernels);
    _Static_assert((int)MST_JOB_STEP_THREADS_ALL == (int)MST_STEP_THREADS_ALL && (int)MST_JOB_STEP_THREADS_ONE == (int)MST_STEP_THREADS_ONE,
                   "runtime.step_threads keeps mst_step_threads_pin's order");
    s->ctx->step_threads_pin = (int)job->runtime.step_threads;
    int64_t shape[3];
    mst_source_shape(s->train_src, shape);
    mst_model_spec spec = {
        .name = mst_job_key_find("model.name")->values[job->model.name],
        .in_c = (int)shape[0], .in_h = (int)shape[1], .in_w = (int)shape[2],
        .tokens = mst_source_sample_type(s->train_src) == MST_SAMPLE_I32, .vocab = mst_source_vocab(s->train_src),
        .paired = mst_source_target_numel(s->train_src) > 0, .mse_loss = job->model.loss == MST_JOB_LOSS_MSE,
        .d_model = job->model.d_model, .heads = job->model.heads, .layers = job->model.layers, .ff = job->model.ff,
        .classes = mst_source_classes(s->train_src),
        .hidden1 = job->model.hidden1, .hidden2 = job->model.hidden2, .dropout = job->model.dropout,
        .init_gain = job->model.init_gain,
        .width = job->model.width, .blocks = job->model.blocks,
        .py_file = job->model.file, .py_args = job->model.args,
    };
    char merr[512];
    if (!(s->model = mst_zoo_model_new(s->ctx, &spec, merr, sizeof(merr)))) {
        snprintf(err, errn, "model: %s", merr);
        goto fail;
    }

    mst_train_config *c = &s->cfg;
    *c = mst_train_defaults();
    c->epochs = job->train.epochs;
    c->max_steps = job->train.steps;
    memcpy(c->sample_shape, shape, sizeof(shape));
    c->sample_tokens = spec.tokens;
    mst_source_target_shape(s->train_src, c->target_shape);
    c->eval = job->train.eval;
    c->log_every = job->train.log_every;
    c->optim = mst_optim_defaults(k_optim[job->optimizer.name]);
    c->optim.lr = job->optimizer.lr;
    c->optim.weight_decay = job->optimizer.weight_decay;
    if (job->optimizer.name == MST_JOB_OPTIM_SGD) {
        c->optim.momentum = job->optimizer.momentum;
        c->optim.nesterov = job->optimizer.nesterov;
    } else {
        c->optim.beta1 = job->optimizer.beta1;
        c->optim.beta2 = job->optimizer.beta2;
        c->optim.eps = job->optimizer.eps;
    }
    c->lr = (mst_lr_schedule){
        .kind = k_sched[job->optimizer.schedule], .base_lr = job->optimizer.lr, .warmup_steps = job->optimizer.warmup_steps,
        .step_size = job->optimizer.step_size, .gamma = job->optimizer.gamma, .min_lr = job->optimizer.min_lr,
    };
    c->amp_level = (int)job->amp.level;
    c->amp_dtype = job->amp.dtype == MST_JOB_HALF_BF16 ? MST_DTYPE_BF16 : MST_DTYPE_F16;
    c->loss_scale = mst_loss_scale_defaults(k_scale[mst_job_loss_scale(job)]);
    c->loss_scale.init = job->amp.loss_scale.init;
    c->loss_scale.factor = job->amp.loss_scale.factor;
    c->loss_scale.window = job->amp.loss_scale.window;
    c->loss_scale.drop_overflow_update = job->amp.loss_scale.drop_overflow_update;
    c->clip_grad_norm = job->train.clip_grad_norm;
    c->accumulate_steps = job->train.accumulate_steps;
    c->graph = job->runtime.mode == MST_JOB_MODE_GRAPH;
    c->dynamic_batch = job->runtime.dynamic_batch;
    config_text(job, s->config_text, sizeof(s->config_text));
    if (s->ranks > 1) {     /* a resume must keep the number of ranks: the global batch depends on it */
        size_t used = strlen(s->config_text);
        snprintf(s->config_text + used, sizeof(s->config_text) - used, "ranks=%d\n", s->ranks);
        c->comm = s->comm;
        c->comm_bucket_mb = job->runtime.comm.bucket_mb;
        c->comm_overlap = job->runtime.comm.overlap;
        if (s->rank > 0) c->progress = NULL;       /* rank 0 speaks for the job */
    }
    c->config_text = s->config_text;
    c->allow_config_change = job->train.allow_config_change;
    if (job->train.checkpoint || resume) {
        snprintf(s->checkpoint_path, sizeof(s->checkpoint_path), "%s/" MST_OUTDIR_STAGE "/checkpoint.bin", out_dir);
        c->checkpoint_path = s->checkpoint_path;
    }
    c->resume = resume;
    char final_ckpt[1200], rank0[1100];
    snprintf(final_ckpt, sizeof(final_ckpt), "%s/checkpoint.bin", out_dir);
    if (c->checkpoint_path && is_dir(final_ckpt)) {
        snprintf(err, errn, "%s is a directory, not a checkpoint file: remove it or choose another --out", final_ckpt);
        goto fail;
    }
    if (resume && pick_resume(s, s->rank > 0 ? rank0_dir(out_dir, rank0, sizeof(rank0)) : out_dir, err, errn) != 0) goto fail;
    c->resume_path = resume ? s->resume_path : NULL;
    /* a staged checkpoint is a killed run's: even when its training was over, its summary and
     * promotion were not, so the resume finishes them */
    c->finished_is_done = !s->resume_from_stage;
    return 0;
fail:
    mst_session_close(s);
    return -1;
}

void mst_session_close(mst_session *s) {
    mst_comm_free(s->comm);
    mst_model_free(s->model);
    mst_ctx_free(s->ctx);
    mst_loader_free(s->train);
    mst_loader_free(s->test);
    mst_source_free(s->train_src);
    mst_source_free(s->test_src);
    memset(s, 0, sizeof(*s));
}
