/* comm_mpi_none.c — the MPI communicator of a build without MPI (no libopenmpi-dev found):
 * unavailable, with a message saying how to get it; N = 1 runs never need it. */
#include "runtime/comm/comm.h"

bool mst_comm_mpi_available(void) { return false; }

mst_comm *mst_comm_mpi_new(double timeout_s, char *err, size_t errn) {
    mst_errf(err, errn, "this build has no MPI: install libopenmpi-dev (and openmpi-bin) and rebuild to run several ranks");
    return NULL;
}

void mst_comm_want_threads(bool on) { (void)on; }
