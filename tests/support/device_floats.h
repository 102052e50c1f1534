// Float buffers on the GPU for [gpu] tests (include only from *_cuda.cpp tests): uploads finish
// before set() returns, `offset` floats into the allocation (1 breaks 16-byte alignment, to hit
// the scalar paths), and poison() fills NaN so an element a kernel forgets to write fails.
#pragma once

#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "core/tensor.h"

namespace cnn::test {

class DeviceFloats {
public:
  explicit DeviceFloats(const std::vector<float>& v, int64_t offset = 0)
      : m_n(static_cast<int64_t>(v.size())),
        m_offset(offset),
        m_storage(Tensor::empty(Shape{m_n + offset}, Device::cuda, "test buffer")) {
    set(v);
  }
  static DeviceFloats poisoned(int64_t n, int64_t offset = 0) {
    return DeviceFloats(std::vector<float>(static_cast<size_t>(n), std::nanf("")), offset);
  }
  void set(const std::vector<float>& v) {
    device_memcpy(data(), Device::cuda, v.data(), Device::cpu, v.size() * sizeof(float));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void poison() { set(std::vector<float>(static_cast<size_t>(m_n), std::nanf(""))); }
  float* data() { return m_storage.data() + m_offset; }
  // Call after synchronising the stream that wrote it.
  std::vector<float> get() const {
    std::vector<float> v(static_cast<size_t>(m_n));
    device_memcpy(v.data(), Device::cpu, m_storage.data() + m_offset, Device::cuda, v.size() * sizeof(float));
    return v;
  }

private:
  int64_t m_n, m_offset;
  Tensor m_storage;
};

}  // namespace cnn::test
