// The NCCL communicator's factory (nccl_communicator_nccl.cpp, built with MPI and CUDA). It runs
// over the ranks of a host communicator (MPI), which carries the NCCL unique id, host buffers,
// heartbeats and abort; device buffers are reduced by NCCL on the communicator's own stream.
// Trap: construction is collective (ncclCommInitRank blocks until every rank arrives), and the
// CUDA device must already be the rank's (CudaContext sets it) before it is made.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace cnn {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const ExecContext& ctx);
// The loaded NCCL library's version, "2.28.3".
std::string nccl_library_version();

}  // namespace cnn
