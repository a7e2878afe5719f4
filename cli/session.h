/* session.h — a training session built from a job: the context, the data sources and loaders,
 * the model and the trainer's configuration. Opening checks everything (the dataset files
 * included) and writes nothing, so a bad job never touches an existing output folder. The
 * train, profile and advise commands all start here.
 */
#ifndef MST_CLI_SESSION_H
#define MST_CLI_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/job.h"
#include "runtime/data/loader.h"
#include "runtime/data/source.h"
#include "runtime/checkpoint.h"
#include "runtime/trainer.h"

typedef struct {
    mst_ctx *ctx;
    mst_source *train_src, *test_src;
    mst_loader *train, *test;
    mst_model *model;
    mst_train_config cfg;
    char checkpoint_path[1200];     /* where this run writes checkpoints: the staging folder (cli/outdir.h) */
    char resume_path[1200];         /* --resume: the staged checkpoint of a killed run, else the folder's */
    bool resume_from_stage;
    char config_text[MST_CKPT_CONFIG_MAX];  /* the settings a resume must match (checkpoint.h) */
    struct mst_comm *comm;          /* started by mpirun with several ranks: MPI (runtime/comm/); else NULL */
    int rank, ranks;                /* 0 and 1 in one process */
} mst_session;

/* 0, or -1 with a message naming the key or file and what was expected. */
int  mst_session_open(mst_session *s, const mst_job *job, const char *out_dir, bool resume, char *err, size_t errn);
void mst_session_close(mst_session *s);

#endif
