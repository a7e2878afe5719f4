/* run_meta.h — what a profile records about where and how it ran: the resolved config, the git
 * revision of the build, host, CPU model, core count and library versions. */
#ifndef MST_CLI_RUN_META_H
#define MST_CLI_RUN_META_H

#include <stddef.h>

typedef struct {
    const char *key;
    char value[256];
} mst_meta_item;

/* Fills up to n items; returns how many. */
int mst_run_meta_collect(mst_meta_item *items, int n);

#endif
