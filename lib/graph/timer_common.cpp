// Statistics for the timers.
#include <algorithm>

#include "graph/timer.h"

namespace cnn {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double median_ms(const ExecContext& ctx, int warmup, int repeats, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  RegionTimer timer(ctx);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    timer.start();
    run();
    ms.push_back(timer.stop_ms());
  }
  return median(ms);
}

}  // namespace cnn
