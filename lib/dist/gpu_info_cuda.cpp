// CUDA runtime queries of gpu_info.h.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <fmt/format.h>

#include "dist/gpu_info.h"

namespace cnn {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

static std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

CudaVersions cuda_versions() {
  CudaVersions out;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) out.runtime = cuda_version_text(v);
  v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) out.driver = "CUDA " + cuda_version_text(v);
  cudaGetLastError();
  // Linked in (a cuDNN backend is built), else what the dynamic linker would load.
  using GetVersion = size_t (*)();
  auto fn = reinterpret_cast<GetVersion>(dlsym(RTLD_DEFAULT, "cudnnGetVersion"));
  void* lib = nullptr;
  for (const char* name : {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"}) {
    if (fn) break;
    if (!(lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL))) continue;
    if (!(fn = reinterpret_cast<GetVersion>(dlsym(lib, "cudnnGetVersion")))) dlclose(lib), lib = nullptr;
  }
  if (fn) {
    size_t c = fn();
    // cuDNN 9 encodes major*10000 + minor*100 + patch, cuDNN 8 major*1000 + minor*100 + patch.
    out.cudnn = c >= 90000 ? fmt::format("{}.{}.{}", c / 10000, (c % 10000) / 100, c % 100)
                           : fmt::format("{}.{}.{}", c / 1000, (c % 1000) / 100, c % 100);
    if (lib) out.cudnn += " (installed; not linked into this build)";
  }
  if (lib) dlclose(lib);
  return out;
}

int local_gpu_index(int local_rank) {
  int n = cuda_device_count();
  return n > 0 ? local_rank % n : 0;
}

}  // namespace cnn
