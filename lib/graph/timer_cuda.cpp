// Timers with CUDA events on the context's stream for the GPU, the host clock for the CPU.
// Events of per-layer timing are pooled and resolved in collect(), so timing adds no syncs.
#include <cuda_runtime.h>

#include <chrono>

#include "graph/timer.h"
#include "core/cuda_check.h"

namespace cnn {

using Clock = std::chrono::steady_clock;

struct RegionTimer::Impl {
  bool gpu = false;
  cudaStream_t stream = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  Clock::time_point t0;
};

RegionTimer::RegionTimer(const ExecContext& ctx) : m_impl(std::make_unique<Impl>()) {
  m_impl->gpu = ctx.device == Device::cuda;
  if (m_impl->gpu) {
    m_impl->stream = static_cast<cudaStream_t>(ctx.cuda_stream);
    CUDA_CHECK(cudaEventCreate(&m_impl->a));
    CUDA_CHECK(cudaEventCreate(&m_impl->b));
  }
}

RegionTimer::~RegionTimer() {
  if (m_impl->a) cudaEventDestroy(m_impl->a);
  if (m_impl->b) cudaEventDestroy(m_impl->b);
}

void RegionTimer::start() {
  if (m_impl->gpu)
    CUDA_CHECK(cudaEventRecord(m_impl->a, m_impl->stream));
  else
    m_impl->t0 = Clock::now();
}

double RegionTimer::stop_ms() {
  if (!m_impl->gpu) return std::chrono::duration<double, std::milli>(Clock::now() - m_impl->t0).count();
  CUDA_CHECK(cudaEventRecord(m_impl->b, m_impl->stream));
  CUDA_CHECK(cudaEventSynchronize(m_impl->b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, m_impl->a, m_impl->b));
  return ms;
}

struct PerLayerTimer::Impl {
  bool gpu = false;
  cudaStream_t stream = nullptr;
  struct Mark {
    int node;
    bool backward;
    cudaEvent_t a, b;
  };
  std::vector<Mark> marks;
  std::vector<cudaEvent_t> pool;
  Clock::time_point t0;
  cudaEvent_t take() {
    if (pool.empty()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = pool.back();
    pool.pop_back();
    return e;
  }
};

PerLayerTimer::PerLayerTimer(const ExecContext& ctx, int layers)
    : m_impl(std::make_unique<Impl>()), m_fwd(size_t(layers)), m_bwd(size_t(layers)) {
  m_impl->gpu = ctx.device == Device::cuda;
  m_impl->stream = static_cast<cudaStream_t>(ctx.cuda_stream);
}

PerLayerTimer::~PerLayerTimer() {
  for (auto& m : m_impl->marks) {
    cudaEventDestroy(m.a);
    cudaEventDestroy(m.b);
  }
  for (cudaEvent_t e : m_impl->pool) cudaEventDestroy(e);
}

void PerLayerTimer::begin(int node, bool backward) {
  if (!m_impl->gpu) {
    m_impl->t0 = Clock::now();
    return;
  }
  Impl::Mark m{node, backward, m_impl->take(), m_impl->take()};
  CUDA_CHECK(cudaEventRecord(m.a, m_impl->stream));
  m_impl->marks.push_back(m);
}

void PerLayerTimer::end(int node, bool backward) {
  if (!m_impl->gpu) {
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - m_impl->t0).count();
    (backward ? m_bwd : m_fwd)[size_t(node)].push_back(ms);
    return;
  }
  CUDA_CHECK(cudaEventRecord(m_impl->marks.back().b, m_impl->stream));
}

void PerLayerTimer::collect() {
  if (!m_impl->gpu) return;
  CUDA_CHECK(cudaStreamSynchronize(m_impl->stream));
  for (auto& m : m_impl->marks) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m.a, m.b));
    (m.backward ? m_bwd : m_fwd)[size_t(m.node)].push_back(ms);
    m_impl->pool.push_back(m.a);
    m_impl->pool.push_back(m.b);
  }
  m_impl->marks.clear();
}

}  // namespace cnn
