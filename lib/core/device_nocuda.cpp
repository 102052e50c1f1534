// Device memory for a build without CUDA: the CPU only; asking for CUDA is an error.
#include <cstdlib>
#include <cstring>

#include "core/device.h"
#include "core/error.h"
#include "core/out_of_memory.h"

namespace cnn {

const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

bool cuda_available() { return false; }

std::string cuda_device_description() { return "this build has no CUDA support (CNN_WITH_CUDA=OFF)"; }

void* device_malloc(Device d, size_t bytes, const std::string& what) {
  if (d == Device::cuda) CNN_THROW("{}: CUDA memory requested but this build has no CUDA support", what);
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    throw OutOfMemoryError(fmt::format("{}: out of host memory: asked for {}", what, format_byte_count(double(bytes))));
  return p;
}

void device_free(Device d, void* p) noexcept { std::free(p); }

void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  CNN_CHECK(dst_device == Device::cpu && src_device == Device::cpu, "CUDA copy in a build without CUDA");
  if (bytes) std::memcpy(dst, src, bytes);
}

void device_memset_zero(Device d, void* p, size_t bytes) {
  CNN_CHECK(d == Device::cpu, "CUDA memset in a build without CUDA");
  if (bytes) std::memset(p, 0, bytes);
}

}  // namespace cnn
