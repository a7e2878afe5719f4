/* launch.h — the `--nproc N` launcher (see launch.c) and where each rank writes. */
#ifndef MST_CLI_LAUNCH_H
#define MST_CLI_LAUNCH_H

#include <stddef.h>

/* 0 with *nproc set, or 1 after printing the error. */
int mst_cli_nproc_parse(const char *cmd, const char *value, int *nproc);
/* With nproc > 1 outside mpirun: replaces this process by `mpirun -np N ... mstune CMD ARGS`
 * (without --nproc); returns only on failure, with an exit code. Under mpirun (or nproc <= 1):
 * -1, go on (an exit code when the rank count contradicts --nproc). */
int mst_cli_launch(const char *cmd, int argc, char **argv, int nproc);
/* Rank k > 0 of a data-parallel job writes to DIR.rank<k>: rank 0's DIR holds the job's outputs. */
void mst_cli_rank_out_dir(char *out_dir, size_t n);

#endif
