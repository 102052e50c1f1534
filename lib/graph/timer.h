// Timing primitives shared by cnn-bench and the trainer: a region timer (CUDA events on the
// GPU, the steady clock on the CPU) and a per-layer timer for the executor. Both wait for the
// device before reporting, never inside the timed region.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/exec_context.h"
#include "graph/executor.h"

namespace cnn {

class RegionTimer {
 public:
  explicit RegionTimer(const ExecContext& ctx);
  ~RegionTimer();
  RegionTimer(const RegionTimer&) = delete;
  RegionTimer& operator=(const RegionTimer&) = delete;
  void start();
  double stop_ms();  // waits for the device

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Per-layer forward/backward times, accumulated over many steps (ms per call, one sample per
// step and layer), read after the steps have finished.
class PerLayerTimer : public LayerTimer {
 public:
  PerLayerTimer(const ExecContext& ctx, int layers);
  ~PerLayerTimer() override;
  void begin(int node, bool backward) override;
  void end(int node, bool backward) override;
  // Resolves the recorded events (waits for the device) into the sample lists.
  void collect();
  const std::vector<std::vector<double>>& forward_ms() const { return m_fwd; }
  const std::vector<std::vector<double>>& backward_ms() const { return m_bwd; }

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  std::vector<std::vector<double>> m_fwd, m_bwd;
};

double median(std::vector<double> v);
// `warmup` untimed calls of run(), then the median of `repeats` timed ones (RegionTimer), in ms.
double median_ms(const ExecContext& ctx, int warmup, int repeats, const std::function<void()>& run);

}  // namespace cnn
