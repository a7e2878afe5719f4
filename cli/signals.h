/* signals.h — a clean stop on SIGINT/SIGTERM: the first signal sets a flag the trainer checks
 * after each step (it then evaluates, checkpoints and writes the summary); a second SIGINT
 * ends the process at once, as the user expects from a second Ctrl-C. */
#ifndef MST_CLI_SIGNALS_H
#define MST_CLI_SIGNALS_H

#include <signal.h>

volatile sig_atomic_t *mst_cli_stop_flag_install(void);
void mst_cli_stop_flag_restore(void);
/* The signal that set the flag (SIGINT, SIGTERM), 0 if none: the command exits 128 + it after
 * writing its outputs, as a shell reports a signalled process (Ctrl-C: 130). */
int mst_cli_stop_signal(void);

#endif
