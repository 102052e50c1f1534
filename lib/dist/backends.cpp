// Which communicator backends this build has: the dist module's registry, and so the one file of
// lib/dist that may say #ifdef CNN_WITH_* (the implementations live in *_mpi.cpp and *_nccl.cpp,
// which CMake builds only when their library is there).
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace cnn {

bool build_has_mpi() {
#ifdef CNN_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool build_has_nccl() {
#if defined(CNN_WITH_MPI) && defined(CNN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#if defined(CNN_WITH_MPI) && defined(CNN_WITH_CUDA)
  return nccl_library_version();
#else
  return "";
#endif
}

std::unique_ptr<Communicator> make_communicator() {
  LaunchInfo launch = detect_launch();
  if (!launch.launched) return make_single_communicator();
#ifdef CNN_WITH_MPI
  return make_mpi_communicator(launch);
#else
  if (launch.world_size > 1)
    CNN_THROW("started as rank {} of {} ({}), but this build has no MPI (configure with -DCNN_WITH_MPI=ON)",
              launch.rank, launch.world_size, launch.source);
  spdlog::warn("started by a launcher ({}) but this build has no MPI: running as a plain single process",
               launch.source);
  return make_single_communicator();
#endif
}

std::unique_ptr<Communicator> make_device_communicator(Communicator& host, const ExecContext& ctx) {
#if defined(CNN_WITH_MPI) && defined(CNN_WITH_CUDA)
  if (host.kind() == "mpi" && ctx.device == Device::cuda) return make_nccl_communicator(host, ctx);
#endif
  return nullptr;
}

}  // namespace cnn
