/* launch.c — `--nproc N`: start N ranks of this very command on this machine through mpirun
 * (OpenMPI), then wait for them: mpirun's exit status is the job's. Shared memory only (btl
 * self,vader: no network), no core binding (the ranks split the thread budget themselves,
 * cli/session.c), oversubscription allowed (N may exceed the cores: a real, measurable choice),
 * and OpenMPI's run-as-root guard lifted, since containers and CI run as root. Several machines:
 * call mpirun yourself (`mpirun -np 4 --hostfile H mstune train JOB`); the ranks find each other
 * the same way. */
#include "cli/launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "runtime/comm/comm.h"

int mst_cli_nproc_parse(const char *cmd, const char *value, int *nproc) {
    char *end = NULL;
    long n = strtol(value, &end, 10);
    if (!*value || *end || n < 1 || n > 1024) {
        fprintf(stderr, "mstune %s: --nproc: expected a number of ranks from 1 to 1024, got '%s'\n", cmd, value);
        return 1;
    }
    *nproc = (int)n;
    return 0;
}

static bool is_nproc(const char *arg) { return strcmp(arg, "--nproc") == 0 || strncmp(arg, "--nproc=", 8) == 0; }

int mst_cli_launch(const char *cmd, int argc, char **argv, int nproc) {
    int launched = 1;
    if (mst_comm_launched(&launched)) {      /* already a rank: mpirun started us */
        if (launched != nproc) {
            fprintf(stderr, "mstune %s: --nproc %d, but mpirun started %d ranks\n", cmd, nproc, launched);
            return MST_EXIT_INPUT;
        }
        return -1;
    }
    if (nproc <= 1) return -1;
    if (!mst_comm_mpi_available()) {
        fprintf(stderr, "mstune %s: --nproc %d needs MPI, and this build has none (install libopenmpi-dev and openmpi-bin, rebuild)\n",
                cmd, nproc);
        return MST_EXIT_INPUT;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        fprintf(stderr, "mstune %s: --nproc: cannot find this program's path: %s\n", cmd, strerror(errno));
        return MST_EXIT_INPUT;
    }
    exe[len] = '\0';
    const char *mpirun = getenv("MSTUNE_MPIRUN");
    if (!mpirun || !*mpirun) mpirun = "mpirun";
    char np[16];
    snprintf(np, sizeof(np), "%d", nproc);
    char **av = calloc((size_t)argc + 16, sizeof(char *));
    if (!av) return MST_EXIT_INPUT;
    int n = 0;
    const char *head[] = {mpirun, "-np", np, "--oversubscribe", "--bind-to", "none", "-mca", "btl", "self,vader", exe, cmd};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++) av[n++] = (char *)head[i];
    for (int i = 0; i < argc; i++) {
        if (is_nproc(argv[i])) {
            if (!strchr(argv[i], '=')) i++;        /* its value */
            continue;
        }
        av[n++] = argv[i];
    }
    av[n] = NULL;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    fflush(NULL);
    execvp(mpirun, av);
    fprintf(stderr, "mstune %s: --nproc %d: cannot run %s: %s (install openmpi-bin)\n", cmd, nproc, mpirun, strerror(errno));
    free(av);
    return MST_EXIT_INPUT;
}

void mst_cli_rank_out_dir(char *out_dir, size_t n) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMIX_RANK");
    int rank = r ? atoi(r) : 0;
    if (rank <= 0 || !mst_comm_launched(NULL)) return;
    size_t len = strlen(out_dir);
    while (len > 1 && out_dir[len - 1] == '/') out_dir[--len] = '\0';     /* DIR/ -> DIR.rank<k>, not DIR/.rank<k> */
    snprintf(out_dir + len, n - len, ".rank%d", rank);
}
