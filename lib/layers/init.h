// Seeded parameter initialisers: He (Kaiming) and Xavier (Glorot), uniform and normal, plus
// constants. Each parameter draws from its own Philox stream keyed by its name, so adding a
// layer never changes the initial values of the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace cnn {

enum class InitKind { zeros, ones, he_normal, he_uniform, xavier_normal, xavier_uniform };

struct InitSpec {
  InitKind kind = InitKind::zeros;
  double fan_in = 1.0;
  double fan_out = 1.0;
};

const char* to_string(InitKind k);
// For the `init:` key of conv2d and dense.
const std::vector<std::string>& weight_init_names();
InitKind parse_init(const std::string& s);

// Fills a CPU tensor. He: std = sqrt(2/fan_in) (normal), bound = sqrt(6/fan_in) (uniform);
// Xavier: std = sqrt(2/(fan_in+fan_out)), bound = sqrt(6/(fan_in+fan_out)) (He et al. 2015;
// Glorot & Bengio 2010).
void init_tensor(Tensor& t, const InitSpec& spec, uint64_t seed, const std::string& param_name);

}  // namespace cnn
