// Normalisation statistics. Sums of uint8 values are exact in int64 per image and accumulated
// in double over images, so the result does not depend on thread count.
#include "data/normalize.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace cnn {

std::string Normalization::to_string() const {
  auto list = [](const std::vector<float>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.4f}", i ? ", " : "", v[i]);
    return s + "]";
  };
  return "mean " + list(mean) + " std " + list(std);
}

Normalization compute_normalization(const Dataset& d) {
  CNN_CHECK(d.size() > 0, "cannot compute normalisation statistics of an empty split");
  const int64_t c_n = d.channels, hw = d.height * d.width;
  Normalization out;
  for (int64_t c = 0; c < c_n; ++c) {
    // Integer sums are exact: uint64 holds 2.8e14 squared 8-bit pixels.
    uint64_t sum = 0, sq = 0;
    for (int64_t i = 0; i < d.size(); ++i) {
      const uint8_t* p = d.sample(i) + c * hw;
      uint64_t s1 = 0, s2 = 0;
      for (int64_t j = 0; j < hw; ++j) {
        s1 += p[j];
        s2 += uint64_t{p[j]} * p[j];
      }
      sum += s1;
      sq += s2;
    }
    double count = static_cast<double>(d.size()) * static_cast<double>(hw);
    double mean = static_cast<double>(sum) / count / 255.0;
    double var = static_cast<double>(sq) / count / (255.0 * 255.0) - mean * mean;
    double sd = std::sqrt(std::max(var, 0.0));
    out.mean.push_back(static_cast<float>(mean));
    out.std.push_back(static_cast<float>(sd > 1e-6 ? sd : 1.0));  // a constant channel: only centre it
  }
  return out;
}

Normalization resolve_normalization(const NormalizeSpec& spec, const Dataset& train) {
  if (spec.automatic) return compute_normalization(train);
  const size_t c = static_cast<size_t>(train.channels);
  if (spec.mean.size() != c || spec.std.size() != c) {
    throw ConfigError({}, "data.normalize",
                      fmt::format("mean and std need one value per input channel ({}), got {} and {}", c,
                                  spec.mean.size(), spec.std.size()));
  }
  Normalization out;
  for (size_t i = 0; i < c; ++i) {
    if (!std::isfinite(spec.mean[i])) {
      throw ConfigError({}, fmt::format("data.normalize.mean[{}]", i),
                        fmt::format("mean must be a finite number, got {}", spec.mean[i]));
    }
    if (!(spec.std[i] > 0.0) || !std::isfinite(spec.std[i])) {
      throw ConfigError({}, fmt::format("data.normalize.std[{}]", i),
                        fmt::format("std must be a positive finite number, got {}", spec.std[i]));
    }
    out.mean.push_back(static_cast<float>(spec.mean[i]));
    out.std.push_back(static_cast<float>(spec.std[i]));
  }
  return out;
}

std::vector<float> normalization_table(const Normalization& n) {
  std::vector<float> lut(n.mean.size() * 256);
  for (size_t c = 0; c < n.mean.size(); ++c) {
    for (int v = 0; v < 256; ++v) lut[c * 256 + v] = (static_cast<float>(v) / 255.0f - n.mean[c]) / n.std[c];
  }
  return lut;
}

}  // namespace cnn
