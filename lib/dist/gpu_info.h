// What the CUDA runtime says about this machine, for picking a rank's GPU and for `doctor`.
// Host-includable; gpu_info_cuda.cpp asks the runtime, gpu_info_nocuda.cpp stands in (no GPU).
// Trap: the cuDNN version is read through the dynamic linker (cudnnGetVersion), because cudnn.h
// may only be included by lib/ops and lib/cudnn.
#pragma once

#include <string>

namespace cnn {

int cuda_device_count();  // 0 without a usable GPU; never throws

struct CudaVersions {
  std::string runtime = "none", driver = "none", cudnn = "none";  // "12.4", "570.86" style text
};
CudaVersions cuda_versions();

// The GPU this rank uses: local_rank modulo the visible GPUs (so CUDA_VISIBLE_DEVICES per rank is
// not needed, and a rank restricted to one GPU uses that one).
int local_gpu_index(int local_rank);

}  // namespace cnn
