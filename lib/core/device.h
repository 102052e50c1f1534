// Where memory lives and what a GPU can be asked for. Host-includable: no CUDA headers here;
// the CUDA runtime is called only from device_cuda.cpp (device_nocuda.cpp stands in without CUDA).
#pragma once

#include <cstddef>
#include <string>

namespace cnn {

enum class Device { cpu, cuda };

const char* to_string(Device d);

// True when this build has CUDA and at least one usable GPU. Never throws.
bool cuda_available();
// "NVIDIA H200 (sm_90, 139.8 GiB)" or a reason why no GPU is usable.
std::string cuda_device_description();

// Raw allocation on a device. Out of memory throws cnn::Error naming `what`, the bytes asked
// for and the bytes free.
void* device_malloc(Device d, size_t bytes, const std::string& what);
void device_free(Device d, void* p) noexcept;
void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void device_memset_zero(Device d, void* p, size_t bytes);

}  // namespace cnn
