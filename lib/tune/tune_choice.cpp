// One autotune decision among candidates (see autotune.h): the cache first, then each candidate
// measured and checked by the accuracy guard; the fastest accurate one wins and is cached. And the
// cache key of a conv direction's decision.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "tune/autotune.h"

namespace cnn {

std::string TuneOutcome::describe() const {
  if (!from_cache && record.ms == 0 && record.runner_up.empty()) return record.winner + " (only candidate)";
  std::string s = fmt::format("{} {:.4f} ms", record.winner, record.ms);
  if (winner_rel_err >= 0) s += fmt::format(" (rel_err {:.1e})", winner_rel_err);
  if (!record.runner_up.empty())
    s += fmt::format(", runner-up {} {:.4f} ms ({:.2f}x)", record.runner_up, record.runner_up_ms,
                     record.ms > 0 ? record.runner_up_ms / record.ms : 0.0);
  else
    s += ", no runner-up";
  if (!excluded.empty()) s += fmt::format(", {} excluded as inaccurate", excluded.size());
  return s + (from_cache ? " [cache]" : "");
}

TuneOutcome tune_choice(const std::string& what, const std::vector<std::string>& candidates,
                        const std::function<double(const std::string&)>& measure, AutotuneCache& cache,
                        const std::string& key, const std::function<double(const std::string&)>& rel_error,
                        double tolerance) {
  return tune_choice(what, candidates, measure, cache, key, rel_error,
                     std::function<double(const std::string&)>([tolerance](const std::string&) { return tolerance; }));
}

TuneOutcome tune_choice(const std::string& what, const std::vector<std::string>& candidates,
                        const std::function<double(const std::string&)>& measure, AutotuneCache& cache,
                        const std::string& key, const std::function<double(const std::string&)>& rel_error,
                        const std::function<double(const std::string&)>& tolerance_of) {
  CNN_CHECK(!candidates.empty(), "autotune: {}: no candidates", what);
  TuneOutcome out;
  if (auto hit = cache.find(key)) {
    if (std::find(candidates.begin(), candidates.end(), hit->winner) != candidates.end()) {
      out.record = *hit;
      out.from_cache = true;
      return out;
    }
  }
  if (candidates.size() == 1) {
    out.record.winner = candidates[0];
    return out;  // nothing to compare: not timed, not cached
  }
  std::vector<std::pair<double, std::string>> timed;
  std::map<std::string, double> errors;
  std::vector<double> limits;  // the distinct tolerances of the candidates, for the error below
  for (const std::string& c : candidates) {
    try {
      const double ms = measure(c);
      if (rel_error) {
        const double err = rel_error(c);
        const double tolerance = tolerance_of(c);
        if (std::find(limits.begin(), limits.end(), tolerance) == limits.end()) limits.push_back(tolerance);
        if (!(err <= tolerance)) {  // NaN too
          out.excluded.push_back(fmt::format("{}: {:.1e} from the reference", c, err));
          spdlog::warn("autotune: {} for {}: {:.1e} from the reference, over the {:.0e} limit: excluded", c, what, err,
                       tolerance);
          continue;
        }
        errors[c] = err;
      }
      timed.emplace_back(ms, c);
    } catch (const std::exception& e) {
      out.failures.push_back(fmt::format("{}: {}", c, e.what()));
      spdlog::warn("autotune: {}: {} failed and is excluded: {}", what, c, e.what());
    }
  }
  if (timed.empty()) {
    if (out.excluded.empty()) CNN_THROW("autotune: {}: every candidate failed: {}", what, fmt::join(out.failures, "; "));
    std::vector<std::string> all = out.excluded;
    all.insert(all.end(), out.failures.begin(), out.failures.end());
    std::vector<std::string> limit_text;
    for (double t : limits) limit_text.push_back(fmt::format("{:.0e}", t));
    throw NoAccurateCandidate(fmt::format("autotune: {}: no candidate within the accuracy tolerance {} is left: {}",
                                          what, fmt::join(limit_text, " or "), fmt::join(all, "; ")));
  }
  std::stable_sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.record.winner = timed[0].second;
  out.record.ms = timed[0].first;
  if (rel_error) out.winner_rel_err = errors[out.record.winner];
  if (timed.size() > 1) out.record.runner_up = timed[1].second, out.record.runner_up_ms = timed[1].first;
  cache.put(key, out.record);
  return out;
}


std::string autotune_conv_key(const std::string& env, const Conv2dShape& sh, ConvDir d,
                              const std::vector<std::string>& backends, bool deterministic, size_t workspace_limit,
                              double tolerance, MathMode math, double tf32_tolerance, DType dtype,
                              double bf16_tolerance) {
  // "probe 2": errors measured on zero-mean and post-ReLU inputs (conv_accuracy.h); decisions cached
  // under the zero-mean probe alone are not reused. "math": the precision the layer allows (and, for
  // tf32, the tolerance of its TF32 candidates), so an fp32 decision is never reused under tf32 or
  // the other way round.
  std::string key = fmt::format("{}|conv2d {}|{}|backends {}|det {}|ws {}|tol {:g}|probe 2|math {}", env, sh.to_string(),
                                to_string(d), fmt::join(backends, ","), int(deterministic), workspace_limit, tolerance,
                                to_string(math));
  if (math == MathMode::tf32) key += fmt::format(" tol {:g}", tf32_tolerance);
  // "dtype": the activations' (the candidates are that dtype's rows), with a 16-bit dtype's tolerance.
  key += fmt::format("|dtype {}", to_string(dtype));
  if (is_16bit(dtype)) key += fmt::format(" tol {:g}", bf16_tolerance);
  return key;
}

}  // namespace cnn
