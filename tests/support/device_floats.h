// Float buffers on the GPU for [gpu] tests (include only from *_cuda.cpp tests): uploads finish
// before set() returns, `offset` floats into the allocation (1 breaks 16-byte alignment, to hit
// the scalar paths), and poison() fills NaN so an element a kernel forgets to write fails.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/exec_context.h"
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

// int32 labels on the GPU (uploads finish before the constructor returns).
class DeviceLabels {
public:
  explicit DeviceLabels(const std::vector<int32_t>& v)
      : m_data(device_malloc(Device::cuda, v.size() * sizeof(int32_t), "test labels"),
               [](void* p) { device_free(Device::cuda, p); }) {
    device_memcpy(m_data.get(), Device::cuda, v.data(), Device::cpu, v.size() * sizeof(int32_t));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  const int32_t* data() const { return static_cast<const int32_t*>(m_data.get()); }

private:
  std::shared_ptr<void> m_data;
};

// Mean time in ms of `reps` calls of f queued on the context's stream (CUDA events), after
// `warmup` untimed calls; for hidden [bench] tests.
template <typename F>
double mean_gpu_ms(const ExecContext& ctx, F&& f, int warmup = 3, int reps = 20) {
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) f();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(ms) / reps;
}

}  // namespace cnn::test
