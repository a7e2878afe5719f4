/* stats.h — the gate's statistics moved to util/stats.h (the advisor uses them too, and advisor/
 * must not depend on report/); this header keeps report/'s includes working. */
#ifndef MST_REPORT_STATS_FWD_H
#define MST_REPORT_STATS_FWD_H
#include "util/stats.h"
#endif
