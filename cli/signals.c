/* signals.c — see signals.h. */
#include "cli/signals.h"

#include <string.h>

static volatile sig_atomic_t g_stop;       /* 0, or the signal that asked for the stop */
static struct sigaction g_old_int, g_old_term;

static void on_stop(int sig) {
    if (g_stop && sig == SIGINT) {          /* second Ctrl-C: the default action */
        sigaction(SIGINT, &g_old_int, NULL);
        raise(SIGINT);
        return;
    }
    g_stop = sig;
}

volatile sig_atomic_t *mst_cli_stop_flag_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    g_stop = 0;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    return &g_stop;
}

void mst_cli_stop_flag_restore(void) {
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
}

int mst_cli_stop_signal(void) { return (int)g_stop; }
