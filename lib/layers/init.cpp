// Parameter initialisers (see init.h). Names hash into Philox streams (FNV-1a 64).
#include "layers/init.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace cnn {

const char* to_string(InitKind k) {
  switch (k) {
    case InitKind::zeros:
      return "zeros";
    case InitKind::ones:
      return "ones";
    case InitKind::he_normal:
      return "he_normal";
    case InitKind::he_uniform:
      return "he_uniform";
    case InitKind::xavier_normal:
      return "xavier_normal";
    case InitKind::xavier_uniform:
      return "xavier_uniform";
  }
  return "?";
}

const std::vector<std::string>& weight_init_names() {
  static const std::vector<std::string> names{"he_normal", "he_uniform", "xavier_normal", "xavier_uniform"};
  return names;
}

InitKind parse_init(const std::string& s) {
  for (InitKind k : {InitKind::zeros, InitKind::ones, InitKind::he_normal, InitKind::he_uniform,
                     InitKind::xavier_normal, InitKind::xavier_uniform}) {
    if (s == to_string(k)) return k;
  }
  CNN_THROW("unknown initialiser '{}'", s);
}

// Values a thread fills at a time (a chunk starts its own generator at its first value's counter).
constexpr int64_t kInitChunk = 16384;

static uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void init_tensor(Tensor& t, const InitSpec& spec, uint64_t seed, const std::string& param_name) {
  CNN_CHECK(t.device() == Device::cpu, "init_tensor needs a CPU tensor");
  float* p = t.data();
  int64_t n = t.numel();
  const uint64_t stream = (static_cast<uint64_t>(RngStream::init) << 56) ^ (fnv1a64(param_name) >> 8);
  double fan = 1.0;
  bool normal = false;
  switch (spec.kind) {
    case InitKind::zeros:
      for (int64_t i = 0; i < n; ++i) p[i] = 0.0f;
      return;
    case InitKind::ones:
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
      return;
    case InitKind::he_normal:
      normal = true;
      fan = spec.fan_in / 2.0;
      break;
    case InitKind::he_uniform:
      fan = spec.fan_in / 2.0;
      break;
    case InitKind::xavier_normal:
      normal = true;
      fan = (spec.fan_in + spec.fan_out) / 2.0;
      break;
    case InitKind::xavier_uniform:
      fan = (spec.fan_in + spec.fan_out) / 2.0;
      break;
  }
  // Variance 1/fan in both families: He uses fan_in/2, Xavier (fan_in+fan_out)/2.
  double std_dev = std::sqrt(1.0 / std::max(fan, 1e-12));
  // Value i takes draws [i * per, (i + 1) * per) of the stream (per: 2 for Box-Muller's normal, 1
  // for uniform), so chunks fill on threads of their own, each from its first value's counter,
  // with the values one sequential generator gives.
  const uint64_t per = normal ? 2 : 1;
  const float bound = static_cast<float>(std::sqrt(3.0) * std_dev);
  const int64_t chunks = (n + kInitChunk - 1) / kInitChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kInitChunk, end = std::min(n, begin + kInitChunk);
    Rng r(seed, stream, static_cast<uint64_t>(begin) * per);
    if (normal)
      for (int64_t i = begin; i < end; ++i) p[i] = static_cast<float>(std_dev * r.normal());
    else
      for (int64_t i = begin; i < end; ++i) p[i] = r.uniform(-bound, bound);
  }
}

}  // namespace cnn
