// State an op keeps between calls on one context (the cuFFT plans of conv2d_fft_cuda.cu, the
// kernels' arrival counters of arrival_counters_cuda.cu), in ExecContext::cache. The op makes its entry
// on first use; the CudaContext that owns the cache frees it after draining the stream and before
// destroying it. Type-erased (the deleter comes from the op), so core knows no op types and no
// library headers.
// Trap: like the context's stream, one thread at a time; an entry may hold device memory and
// library handles of the context's device, so it must not outlive the context (hence no globals).
#pragma once

#include <array>
#include <cstddef>
#include <memory>

namespace cnn {

class ContextCache {
public:
  enum class Slot { conv2d_fft, arrival_counters, count };
  std::shared_ptr<void>& slot(Slot s) { return m_slots[static_cast<size_t>(s)]; }

private:
  std::array<std::shared_ptr<void>, static_cast<size_t>(Slot::count)> m_slots;
};

}  // namespace cnn
