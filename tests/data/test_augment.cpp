#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/augment.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// Identity normalisation: output = value / 255.
Normalization unit(int64_t c) { return Normalization{std::vector<float>(c, 0.0f), std::vector<float>(c, 1.0f)}; }

// n x n gray image with pixel (y, x) = 1 + y * n + x.
std::vector<uint8_t> ramp(int64_t n) {
  std::vector<uint8_t> v(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n * n; ++i) v[i] = static_cast<uint8_t>(1 + i);
  return v;
}

float px(int v) { return static_cast<float>(v) / 255.0f; }

}  // namespace

TEST_CASE("random crop with zero padding shifts the content by the crop offset", "[cpu]") {
  AugmentSpec spec;
  spec.crop_size = 4;
  spec.crop_padding = 2;
  Augmenter aug(spec, unit(1), 1, 4, 4);
  CHECK(aug.sample_shape() == Shape({1, 4, 4}));
  auto img = ramp(4);
  std::vector<float> out(16);
  AugmentDraw d;
  d.crop_y = 0;  // two rows of padding on top
  d.crop_x = 3;  // content moved left by one
  aug.apply(img.data(), d, out.data());
  for (int x = 0; x < 4; ++x) {
    CHECK(out[x] == 0.0f);
    CHECK(out[4 + x] == 0.0f);
  }
  // Output row 2 is image row 0, output column x is image column x + 1 (column 3 is padding).
  CHECK(out[8] == px(2));
  CHECK(out[9] == px(3));
  CHECK(out[10] == px(4));
  CHECK(out[11] == 0.0f);
  CHECK(out[12] == px(6));
}

TEST_CASE("horizontal flip mirrors each row", "[cpu]") {
  AugmentSpec spec;
  spec.hflip = true;
  Augmenter aug(spec, unit(1), 1, 3, 3);
  auto img = ramp(3);
  std::vector<float> out(9);
  AugmentDraw d;
  d.flip = true;
  aug.apply(img.data(), d, out.data());
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) CHECK(out[y * 3 + x] == px(img[y * 3 + (2 - x)]));
}

TEST_CASE("rotation by 0 is the identity and by 90 degrees turns the image counter-clockwise", "[cpu]") {
  AugmentSpec spec;
  spec.rotate = 90;
  Augmenter aug(spec, unit(1), 1, 5, 5);
  auto img = ramp(5);
  std::vector<float> out(25);
  AugmentDraw d;
  aug.apply(img.data(), d, out.data());
  for (int i = 0; i < 25; ++i) REQUIRE(out[i] == px(img[i]));
  d.angle = 90.0f;
  aug.apply(img.data(), d, out.data());
  // Counter-clockwise as displayed: output (y, x) shows input (x, 4 - y); the top-right corner goes top-left.
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) REQUIRE(out[y * 5 + x] == Approx(px(img[x * 5 + (4 - y)])).margin(1e-4));
  d.angle = -90.0f;
  aug.apply(img.data(), d, out.data());
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) REQUIRE(out[y * 5 + x] == Approx(px(img[(4 - x) * 5 + y])).margin(1e-4));
  // 45 degrees keeps the centre pixel and fills the corners, which come from outside, with 0.
  Augmenter big(spec, unit(1), 1, 9, 9);
  auto img9 = ramp(9);
  std::vector<float> out9(81);
  d.angle = 45.0f;
  big.apply(img9.data(), d, out9.data());
  CHECK(out9[40] == Approx(px(41)).margin(1e-5));
  CHECK(out9[0] == 0.0f);
  CHECK(out9[80] == 0.0f);
}

TEST_CASE("brightness and contrast jitter act around the image mean in 0..1 units", "[cpu]") {
  AugmentSpec spec;
  spec.brightness = 0.2;
  spec.contrast = 0.5;
  Augmenter aug(spec, unit(1), 1, 1, 2);
  const uint8_t img[2] = {51, 153};  // 0.2 and 0.6, mean 0.4
  float out[2];
  AugmentDraw d;
  d.brightness = 0.1f;
  aug.apply(img, d, out);
  CHECK(out[0] == Approx(0.3f));
  CHECK(out[1] == Approx(0.7f));
  d.brightness = 0.0f;
  d.contrast = 1.5f;
  aug.apply(img, d, out);
  CHECK(out[0] == Approx(0.1f));
  CHECK(out[1] == Approx(0.7f));
  d.brightness = 0.5f;  // clamped to 1
  aug.apply(img, d, out);
  CHECK(out[1] == 1.0f);
}

TEST_CASE("normalisation is applied after augmentation", "[cpu]") {
  AugmentSpec spec;
  Normalization n{{0.5f}, {0.25f}};
  Augmenter aug(spec, n, 1, 1, 2);
  const uint8_t img[2] = {0, 255};
  float out[2];
  aug.apply(img, AugmentDraw{}, out);
  CHECK(out[0] == Approx(-2.0f));
  CHECK(out[1] == Approx(2.0f));
}

TEST_CASE("augmentation draws are a pure function of seed, epoch and position", "[cpu]") {
  AugmentSpec spec;
  spec.crop_size = 44;
  spec.crop_padding = 4;
  spec.hflip = true;
  spec.rotate = 10;
  spec.brightness = 0.2;
  spec.contrast = 0.3;
  Augmenter aug(spec, unit(1), 1, 48, 48);
  auto same = [](const AugmentDraw& a, const AugmentDraw& b) {
    return a.crop_y == b.crop_y && a.crop_x == b.crop_x && a.flip == b.flip && a.angle == b.angle &&
           a.brightness == b.brightness && a.contrast == b.contrast;
  };
  CHECK(same(aug.draw(7, 3, 100), aug.draw(7, 3, 100)));
  CHECK(!same(aug.draw(7, 3, 100), aug.draw(7, 3, 101)));
  CHECK(!same(aug.draw(7, 3, 100), aug.draw(7, 4, 100)));
  CHECK(!same(aug.draw(7, 3, 100), aug.draw(8, 3, 100)));
  int flips = 0, max_y = 0;
  float lo = 0, hi = 0;
  for (int p = 0; p < 4000; ++p) {
    AugmentDraw d = aug.draw(1, 0, p);
    flips += d.flip;
    max_y = std::max<int>(max_y, static_cast<int>(d.crop_y));
    REQUIRE(d.crop_y >= 0);
    REQUIRE(d.crop_x <= 12);
    REQUIRE(std::abs(d.angle) <= 10.0f);
    REQUIRE(std::abs(d.brightness) <= 0.2f);
    REQUIRE(std::abs(d.contrast - 1.0f) <= 0.3f);
    lo = std::min(lo, d.angle);
    hi = std::max(hi, d.angle);
  }
  CHECK(max_y == 12);
  CHECK(flips > 1800);
  CHECK(flips < 2200);
  CHECK(lo < -9.5f);
  CHECK(hi > 9.5f);
  // Disabled transforms draw nothing visible.
  Augmenter plain(AugmentSpec{}, unit(1), 1, 48, 48);
  AugmentDraw d = plain.draw(1, 0, 5);
  CHECK((d.crop_y == 0 && d.crop_x == 0 && !d.flip && d.angle == 0.0f && d.brightness == 0.0f && d.contrast == 1.0f));
}

TEST_CASE("centre crop and ten-crop take the expected windows", "[cpu]") {
  AugmentSpec spec;
  spec.crop_size = 3;
  Augmenter aug(spec, unit(1), 1, 5, 5);
  auto img = ramp(5);
  std::vector<float> c(9), ten(90);
  aug.center_crop(img.data(), c.data());
  CHECK(c[0] == px(img[1 * 5 + 1]));
  CHECK(c[8] == px(img[3 * 5 + 3]));
  aug.ten_crop(img.data(), ten.data());
  CHECK(ten[0] == px(img[0]));                  // top-left
  CHECK(ten[9] == px(img[2]));                  // top-right starts at column 2
  CHECK(ten[18] == px(img[10]));                // bottom-left starts at row 2
  CHECK(ten[27 + 8] == px(img[24]));            // bottom-right ends at the corner
  for (int i = 0; i < 9; ++i) CHECK(ten[36 + i] == c[i]);  // centre
  CHECK(ten[45] == px(img[2]));                 // flipped top-left: row 0 reversed
  CHECK(ten[81] == c[2]);                       // flipped centre
}

TEST_CASE("impossible augmentation settings are config errors", "[cpu]") {
  AugmentSpec spec;
  spec.crop_size = 50;
  CHECK_THROWS_AS(Augmenter(spec, unit(1), 1, 48, 48), ConfigError);
  spec.crop_padding = 1;
  CHECK_NOTHROW(Augmenter(spec, unit(1), 1, 48, 48));
  spec.rotate = -3;
  CHECK_THROWS_AS(Augmenter(spec, unit(1), 1, 48, 48), ConfigError);
  spec.rotate = 0;
  spec.contrast = 2;
  CHECK_THROWS_AS(Augmenter(spec, unit(1), 1, 48, 48), ConfigError);
}
