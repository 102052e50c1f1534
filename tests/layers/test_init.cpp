// init_tensor (layers/init.cpp) against a sequential generator: the chunks it fills on threads of
// their own give exactly the values one Rng over the parameter's stream gives, in order.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "layers/init.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// The parameter's stream, as init.h states it: the init stream id over the FNV-1a 64 hash of its name.
uint64_t init_stream(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return (static_cast<uint64_t>(RngStream::init) << 56) ^ (h >> 8);
}

}  // namespace

TEST_CASE("init_tensor fills in chunks the values of one sequential draw", "[cpu]") {
  const uint64_t seed = 1234;
  const std::string name = "conv1.weight";
  // 40,001 values: two whole chunks of 16,384 and a short third.
  for (InitKind kind : {InitKind::he_normal, InitKind::he_uniform, InitKind::xavier_normal}) {
    INFO(to_string(kind));
    const InitSpec spec{kind, 72.0, 144.0};
    Tensor t = Tensor::empty(Shape{40001});
    init_tensor(t, spec, seed, name);
    const bool normal = kind != InitKind::he_uniform;
    const double fan = kind == InitKind::xavier_normal ? (spec.fan_in + spec.fan_out) / 2.0 : spec.fan_in / 2.0;
    const double std_dev = std::sqrt(1.0 / fan);
    const float bound = static_cast<float>(std::sqrt(3.0) * std_dev);
    Rng r(seed, init_stream(name));
    std::vector<float> want(40001);
    for (float& v : want) v = normal ? static_cast<float>(std_dev * r.normal()) : r.uniform(-bound, bound);
    const std::vector<float> got = t.to_vector();
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    INFO("first differing value " << first);
    CHECK(differ == 0);
  }
}
