/* profile_view.h — the profile reader moved to profiler/profile_view.h (one reader for the report
 * and the advisor); this header keeps report/'s includes working. */
#ifndef MST_REPORT_PROFILE_VIEW_FWD_H
#define MST_REPORT_PROFILE_VIEW_FWD_H
#include "profiler/profile_view.h"
#endif
