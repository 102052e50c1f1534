// Per-channel normalisation (x/255 - mean) / std, mean and std in 0..1 pixel units.
// Trap: "auto" statistics come from the train split only (after val carving), never val or test.
#pragma once

#include <string>
#include <vector>

#include "config/model_spec.h"
#include "data/dataset.h"

namespace cnn {

struct Normalization {
  std::vector<float> mean, std;  // (C)
  std::string to_string() const; // "mean [0.5077] std [0.2550]"
};

// Mean and (population) standard deviation of every channel, accumulated in double.
Normalization compute_normalization(const Dataset& d);
// spec.automatic: compute_normalization(train); otherwise spec's values, which must have one entry
// per channel and std > 0 (ConfigError).
Normalization resolve_normalization(const NormalizeSpec& spec, const Dataset& train);

// lut[c * 256 + v] = (v / 255 - mean[c]) / std[c]: one table look-up per pixel.
std::vector<float> normalization_table(const Normalization& n);

}  // namespace cnn
