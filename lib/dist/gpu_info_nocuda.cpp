// Stand-in for gpu_info_cuda.cpp in a build without CUDA: no GPU, no versions.
#include "dist/gpu_info.h"

namespace cnn {

int cuda_device_count() { return 0; }
CudaVersions cuda_versions() { return {}; }
int local_gpu_index(int) { return 0; }

}  // namespace cnn
