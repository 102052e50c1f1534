#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/normalize.h"
#include "data_test_util.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("automatic normalisation gives per-channel mean and std of the train split", "[cpu]") {
  // Channel 0 holds 0 and 255 equally often (mean 0.5, std 0.5); channel 1 is constant 51 (0.2).
  Dataset d;
  d.channels = 2;
  d.height = 1;
  d.width = 2;
  d.pixels = {0, 255, 51, 51, 0, 255, 51, 51, 0, 255, 51, 51};
  d.labels = {0, 0, 0};
  NormalizeSpec spec;
  Normalization n = resolve_normalization(spec, d);
  REQUIRE(n.mean.size() == 2);
  CHECK(n.mean[0] == Approx(0.5).epsilon(1e-6));
  CHECK(n.std[0] == Approx(0.5).epsilon(1e-6));
  CHECK(n.mean[1] == Approx(0.2).epsilon(1e-6));
  CHECK(n.std[1] == 1.0f);  // constant channel: centred only
  CHECK(n.to_string() == "mean [0.5000, 0.2000] std [0.5000, 1.0000]");
  std::vector<float> lut = normalization_table(n);
  CHECK(lut[255] == Approx(1.0f));
  CHECK(lut[0] == Approx(-1.0f));
  CHECK(lut[256 + 51] == Approx(0.0f).margin(1e-7));
}

TEST_CASE("automatic normalisation matches a double-precision reference on random data", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(37, 3, 5, 7, 2);
  Normalization n = compute_normalization(d);
  for (int c = 0; c < 3; ++c) {
    double s = 0, s2 = 0, cnt = 0;
    for (int64_t i = 0; i < d.size(); ++i) {
      for (int j = 0; j < 35; ++j) {
        double v = d.sample(i)[c * 35 + j] / 255.0;
        s += v;
        s2 += v * v;
        cnt += 1;
      }
    }
    double mean = s / cnt;
    CHECK(n.mean[c] == Approx(mean).epsilon(1e-6));
    CHECK(n.std[c] == Approx(std::sqrt(s2 / cnt - mean * mean)).epsilon(1e-5));
  }
}

TEST_CASE("explicit normalisation values must fit the channel count and be positive", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(2, 3, 2, 2, 2);
  NormalizeSpec spec;
  spec.automatic = false;
  spec.mean = {0.1, 0.2, 0.3};
  spec.std = {0.5, 0.5, 0.25};
  Normalization n = resolve_normalization(spec, d);
  CHECK(n.mean[2] == Approx(0.3));
  CHECK(n.std[2] == Approx(0.25));
  spec.mean = {0.5};
  CHECK_THROWS_AS(resolve_normalization(spec, d), ConfigError);
  spec.mean = {0.1, 0.2, 0.3};
  spec.std = {0.5, 0.0, 0.25};
  try {
    resolve_normalization(spec, d);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "data.normalize.std[1]");
  }
}
