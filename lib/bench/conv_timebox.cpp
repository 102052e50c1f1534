// The per-point time box of `cnn-bench conv` (see conv_timebox.h).
#include "bench/conv_timebox.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "graph/timer.h"

namespace cnn {

std::string abandoned_status(double cutoff) { return fmt::format("abandoned (>{:g}x best)", cutoff); }

namespace {

bool spread_within(const std::vector<double>& t, double spread) {
  const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
  return *hi - *lo <= spread * median(t);
}

// Candidate i's runs after the screen; returns its median and sets status and runs.
void time_one(size_t i, double screen_ms, double best, const TimeBox& box, CandidateRunner& r, double start,
              CandidateTime& t) {
  auto boxed = [&] { return box.max_seconds_per_point > 0 && r.now_s() - start >= box.max_seconds_per_point; };
  const bool hopeless = box.cutoff > 0 && best > 0 && screen_ms > box.cutoff * best;
  r.before_timing(i);
  if (!hopeless && !boxed())
    for (int k = 1; k < box.warmup; ++k) r.run_ms(i);
  std::vector<double> times{r.run_ms(i)};
  if (box.cutoff > 0 && best > 0 && times[0] > box.cutoff * best) {
    t.status = abandoned_status(box.cutoff);
  } else {
    while (int(times.size()) < box.repeats) {
      if (box.spread > 0 && times.size() >= 2 && spread_within(times, box.spread)) break;
      if (boxed()) {
        t.status = "time box";
        break;
      }
      times.push_back(r.run_ms(i));
    }
  }
  t.ms = median(times);
  t.runs = int(times.size());
  r.after_timing(i, t);
}

}  // namespace

std::vector<CandidateTime> time_candidates(size_t n, const TimeBox& box, CandidateRunner& r, double start) {
  std::vector<CandidateTime> out(n);
  std::vector<double> screen(n, 0);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    const double t0 = r.now_s();
    try {
      screen[i] = r.run_ms(i);
      order.push_back(i);
    } catch (const std::exception& e) {
      out[i].status = std::string("failed: ") + e.what();
    }
    out[i].wall_s += r.now_s() - t0;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return screen[a] < screen[b]; });
  double best = 0;  // the best median so far (0: none yet)
  for (size_t i : order) {
    CandidateTime& t = out[i];
    const double t0 = r.now_s();
    try {
      time_one(i, screen[i], best, box, r, start, t);
      if (!t.abandoned()) best = best > 0 ? std::min(best, t.ms) : t.ms;
    } catch (const std::exception& e) {
      const double screen_wall = t.wall_s;
      t = CandidateTime{};
      t.status = std::string("failed: ") + e.what();
      t.wall_s = screen_wall;
    }
    t.wall_s += r.now_s() - t0;
  }
  return out;
}

}  // namespace cnn
