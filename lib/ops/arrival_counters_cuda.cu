// The context's arrival counters (reduce.cuh): zeroed device memory that kernels finishing a group
// in its last-arriving block count on, grown on demand and kept until the context goes.
// Trap: a set is never freed while the context lives, because a captured CUDA graph may hold it.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/context_cache.h"
#include "core/cuda_check.h"
#include "ops/reduce.cuh"

namespace cnn::cuda {
namespace {

class ArrivalCounters {
 public:
  ArrivalCounters() = default;
  ~ArrivalCounters() {
    for (unsigned* p : m_sets) cudaFree(p);
  }
  ArrivalCounters(const ArrivalCounters&) = delete;
  ArrivalCounters& operator=(const ArrivalCounters&) = delete;

  unsigned* get(size_t count, cudaStream_t stream, const char* what) {
    if (count <= m_capacity) return m_sets.back();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    CNN_CHECK(status == cudaStreamCaptureStatusNone,
              "{}: needs {} arrival counters and the context has {}; they cannot be allocated during stream "
              "capture, so run the operation once before capturing it",
              what, count, m_capacity);
    const size_t capacity = std::max<size_t>(count, std::max<size_t>(kMinCount, 2 * m_capacity));
    unsigned* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, capacity * sizeof(unsigned)));
    const cudaError_t e = cudaMemset(p, 0, capacity * sizeof(unsigned));
    if (e != cudaSuccess) {
      cudaFree(p);
      CUDA_CHECK(e);
    }
    m_sets.push_back(p);
    m_capacity = capacity;
    return p;
  }

 private:
  static constexpr size_t kMinCount = 65536;  // batchnorm's channel limit
  std::vector<unsigned*> m_sets;
  size_t m_capacity = 0;
};

}  // namespace

unsigned* arrival_counters(const ExecContext& ctx, size_t count, const char* what) {
  const cudaStream_t stream = stream_of(ctx, what);
  CNN_CHECK(ctx.cache, "{}: the context has no per-context cache for its arrival counters (make it with CudaContext)",
            what);
  std::shared_ptr<void>& slot = ctx.cache->slot(ContextCache::Slot::arrival_counters);
  if (!slot) slot = std::make_shared<ArrivalCounters>();
  return static_cast<ArrivalCounters*>(slot.get())->get(count, stream, what);
}

}  // namespace cnn::cuda
