// Device memory through the CUDA runtime. A machine without a GPU (CI) still runs the CPU path:
// cuda_available() reports false instead of throwing.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_check.h"
#include "core/device.h"
#include "core/error.h"
#include "core/out_of_memory.h"

namespace cnn {

const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

// Why cudaGetDeviceCount failed, in a user's words. Without a driver the runtime answers "CUDA
// driver version is insufficient for CUDA runtime version", which sends people to update a driver
// they do not have: a driver version of 0 means none is installed.
static std::string no_gpu_reason(cudaError_t e) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaGetLastError();
  if (e == cudaErrorNoDevice || driver == 0) return "no NVIDIA driver or GPU found";
  if (e == cudaErrorInsufficientDriver)
    return fmt::format("the NVIDIA driver supports CUDA up to {}.{}, older than this build's CUDA runtime {}.{}: "
                       "update the driver",
                       driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  return fmt::format("no usable GPU ({})", cudaGetErrorString(e));
}

std::string cuda_device_description() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return no_gpu_reason(e);
  }
  if (n == 0) return "no NVIDIA driver or GPU found";
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  return fmt::format("{} (sm_{}{}, {:.1f} GiB, device {} of {})", p.name, p.major, p.minor,
                     p.totalGlobalMem / double(1ull << 30), dev, n);
}

void* device_malloc(Device d, size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  if (d == Device::cpu) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
      throw OutOfMemoryError(
          fmt::format("{}: out of host memory: asked for {}", what, format_byte_count(double(bytes))));
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    throw OutOfMemoryError(format_out_of_memory(what, "CUDA", bytes, free_b, total_b, cudaGetErrorString(e)));
  }
  return p;
}

void device_free(Device d, void* p) noexcept {
  if (!p) return;
  if (d == Device::cpu) std::free(p);
  else cudaFree(p);
}

void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!bytes) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void device_memset_zero(Device d, void* p, size_t bytes) {
  if (!bytes) return;
  if (d == Device::cpu) std::memset(p, 0, bytes);
  else CUDA_CHECK(cudaMemset(p, 0, bytes));
}

}  // namespace cnn
