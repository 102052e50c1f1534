// Timers in a build without CUDA: the host steady clock.
#include <chrono>

#include "graph/timer.h"
#include "core/error.h"

namespace cnn {

using Clock = std::chrono::steady_clock;

struct RegionTimer::Impl {
  Clock::time_point t0;
};

RegionTimer::RegionTimer(const ExecContext& ctx) : m_impl(std::make_unique<Impl>()) {
  CNN_CHECK(ctx.device == Device::cpu, "a CUDA timer in a build without CUDA");
}
RegionTimer::~RegionTimer() = default;
void RegionTimer::start() { m_impl->t0 = Clock::now(); }
double RegionTimer::stop_ms() { return std::chrono::duration<double, std::milli>(Clock::now() - m_impl->t0).count(); }

struct PerLayerTimer::Impl {
  Clock::time_point t0;
};

PerLayerTimer::PerLayerTimer(const ExecContext& ctx, int layers)
    : m_impl(std::make_unique<Impl>()), m_fwd(size_t(layers)), m_bwd(size_t(layers)) {}
PerLayerTimer::~PerLayerTimer() = default;
void PerLayerTimer::begin(int, bool) { m_impl->t0 = Clock::now(); }
void PerLayerTimer::end(int node, bool backward) {
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - m_impl->t0).count();
  (backward ? m_bwd : m_fwd)[size_t(node)].push_back(ms);
}
void PerLayerTimer::collect() {}

}  // namespace cnn
