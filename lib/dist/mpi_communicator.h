// The MPI communicator's factory (mpi_communicator_mpi.cpp, built with CNN_WITH_MPI). Host
// buffers go to MPI directly; device buffers are copied through host memory (NCCL, when the build
// has it, takes device buffers instead: nccl_communicator.h).
// Trap: MPI is initialised once per process (MPI_Init_thread, MPI_THREAD_MULTIPLE, so the
// watchdog's thread may talk while the main thread waits in a collective) and finalised when the
// communicator is destroyed; a second one in the same process is an error.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace cnn {

// `expected` is what the launcher's environment said; a world size that disagrees with it (srun
// without a matching --mpi plugin starts N singletons) is an error explaining that.
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& expected);

}  // namespace cnn
