// Pooling tests: hand-computed max/avg cases (padding, ties, global pooling), shape validation,
// finite differences of the double reference, and the fast CPU path against the float reference.
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/pool2d.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

// Runs forward and backward on both CPU paths and checks each against the expected values.
void check_both_paths(const Pool2dShape& sh, const std::vector<float>& x, const std::vector<float>& dy,
                      const std::vector<float>& y_expected, const std::vector<float>& dx_expected) {
  auto ctx = ExecContext::cpu(2);
  std::vector<float> y(y_expected.size()), dx(x.size());
  pool2d_forward_reference(ctx, sh, x.data(), y.data());
  pool2d_backward_reference(ctx, sh, x.data(), y.data(), dy.data(), dx.data());
  CHECK(compare(y, y_expected, {1e-6, 1e-6}) == "");
  CHECK(compare(dx, dx_expected, {1e-6, 1e-6}) == "");
  std::fill(y.begin(), y.end(), -99.0f);
  std::fill(dx.begin(), dx.end(), -99.0f);
  run_op(Backend::cpu, Pool2dForward{&ctx, sh, x.data(), y.data()});
  run_op(Backend::cpu, Pool2dBackward{&ctx, sh, x.data(), y.data(), dy.data(), dx.data()});
  CHECK(compare(y, y_expected, {1e-6, 1e-6}) == "");
  CHECK(compare(dx, dx_expected, {1e-6, 1e-6}) == "");
}

// Distinct values 0.01 apart in shuffled order: no ties, and every window max wins by >= 0.01.
std::vector<double> distinct_values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01 * static_cast<double>(i) - 0.005 * static_cast<double>(n);
  Rng rng(seed, static_cast<uint64_t>(RngStream::test));
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
  return v;
}

struct PoolCase {
  int64_t N, C, H, W, R, S;
  int sh, sw, ph, pw;
};

}  // namespace

TEST_CASE("max pooling 2x2 stride 2 matches hand-computed values", "[cpu]") {
  // x = 1..16 in a 4x4 plane; the window maxima are the bottom-right corners 6, 8, 14, 16,
  // and each dy goes to that corner (flat indices 5, 7, 13, 15).
  auto sh = Pool2dShape::make(PoolKind::max, 1, 1, 4, 4, 2, 2, 2, 2);
  std::vector<float> x(16);
  std::iota(x.begin(), x.end(), 1.0f);
  std::vector<float> dx(16, 0.0f);
  dx[5] = 1;
  dx[7] = 2;
  dx[13] = 3;
  dx[15] = 4;
  check_both_paths(sh, x, {1, 2, 3, 4}, {6, 8, 14, 16}, dx);
}

TEST_CASE("max pooling routes a tie to the first position in window order", "[cpu]") {
  auto sh = Pool2dShape::make(PoolKind::max, 1, 1, 2, 2, 2, 2, 1, 1);
  check_both_paths(sh, {5, 5, 5, 5}, {3}, {5}, {3, 0, 0, 0});
}

TEST_CASE("max pooling with padding ignores the padded positions", "[cpu]") {
  // x = [[-1,-2],[-3,-4]], window 2x2, stride 1, padding 1 -> 3x3 output. If padded zeros counted,
  // every output would be 0. Window (p,q) covers rows p-1..p, cols q-1..q:
  // y = [[-1,-1,-2],[-1,-1,-2],[-3,-3,-4]]. With dy = 1 the argmax counts are x00: 4, x01: 2, x10: 2, x11: 1.
  auto sh = Pool2dShape::make(PoolKind::max, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1);
  REQUIRE(sh.P == 3);
  REQUIRE(sh.Q == 3);
  check_both_paths(sh, {-1, -2, -3, -4}, std::vector<float>(9, 1.0f), {-1, -1, -2, -1, -1, -2, -3, -3, -4},
                   {4, 2, 2, 1});
}

TEST_CASE("average pooling with padding divides by the in-bounds count", "[cpu]") {
  // x = [[1,2,3],[4,5,6],[7,8,9]], window 2x2, stride 1, padding 1 -> 4x4 output.
  // Corner windows hold 1 element (y00 = 1), edge windows 2 (y01 = (1+2)/2), inner windows 4
  // (y11 = (1+2+4+5)/4 = 3). With dy = 1, dx sums 1/count over the windows holding each element:
  // corner x00: 1 + 1/2 + 1/2 + 1/4 = 2.25; edge x01: 1/2 + 1/2 + 1/4 + 1/4 = 1.5; centre 4 * 1/4 = 1.
  auto sh = Pool2dShape::make(PoolKind::avg, 1, 1, 3, 3, 2, 2, 1, 1, 1, 1);
  REQUIRE(sh.P == 4);
  check_both_paths(sh, {1, 2, 3, 4, 5, 6, 7, 8, 9}, std::vector<float>(16, 1.0f),
                   {1, 1.5f, 2.5f, 3, 2.5f, 3, 4, 4.5f, 5.5f, 6, 7, 7.5f, 7, 7.5f, 8.5f, 9},
                   {2.25f, 1.5f, 2.25f, 1.5f, 1, 1.5f, 2.25f, 1.5f, 2.25f});
}

TEST_CASE("global average pooling averages each plane", "[cpu]") {
  // Two 2x3 planes: means 3.5 and -1; dy spreads as dy/6 over each plane.
  auto sh = Pool2dShape::make(PoolKind::avg, 1, 2, 2, 3, 2, 3, 1, 1);
  REQUIRE(sh.P == 1);
  REQUIRE(sh.Q == 1);
  std::vector<float> dx(12, 1.0f);
  std::fill(dx.begin() + 6, dx.end(), -0.5f);
  check_both_paths(sh, {1, 2, 3, 4, 5, 6, -1, -2, 0, 0, -3, 0}, {6, -3}, {3.5f, -1}, dx);
}

TEST_CASE("pool2d shape fills the output size and rejects impossible windows", "[cpu]") {
  // floor((7 + 2 - 3) / 2) + 1 = 4; floor((8 - 2) / 2) + 1 = 4
  auto sh = Pool2dShape::make(PoolKind::max, 2, 3, 7, 8, 3, 2, 2, 2, 1, 0);
  CHECK(sh.P == 4);
  CHECK(sh.Q == 4);
  CHECK(sh.to_string().find("maxpool") != std::string::npos);
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::max, 1, 1, 4, 4, 5, 2, 1, 1),
                    Catch::Matchers::Contains("window 5x2 is larger than the padded input 4x4"));
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::avg, 1, 1, 8, 8, 3, 3, 1, 1, 2, 1),
                    Catch::Matchers::Contains("must be at most half the window"));
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::max, 1, 1, 8, 8, 2, 2, 0, 2),
                    Catch::Matchers::Contains("stride must be positive"));
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::max, 0, 1, 8, 8, 2, 2, 2, 2),
                    Catch::Matchers::Contains("input sizes must be positive"));
  CHECK_THROWS_AS(Pool2dShape::make(PoolKind::max, 1, 1, 8, 8, 2, 2, 2, 2, -1, 0), Error);
}

TEST_CASE("pool2d reference backward matches finite differences", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const PoolCase cases[] = {{2, 2, 5, 6, 3, 3, 2, 2, 1, 1}, {1, 2, 4, 6, 2, 2, 2, 2, 0, 0},
                            {2, 1, 5, 5, 3, 3, 1, 1, 1, 1}, {1, 2, 3, 4, 3, 4, 1, 1, 0, 0}};
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    for (const PoolCase& c : cases) {
      auto sh = Pool2dShape::make(kind, c.N, c.C, c.H, c.W, c.R, c.S, c.sh, c.sw, c.ph, c.pw);
      INFO(sh.to_string());
      const size_t nx = static_cast<size_t>(c.N * c.C * c.H * c.W), ny = static_cast<size_t>(c.N * c.C * sh.P * sh.Q);
      std::vector<double> x = distinct_values(nx, 31);
      const std::vector<double> r = cnn::test::random_doubles(ny, 32);
      std::vector<double> y(ny), dx(nx);
      auto loss = [&] {
        std::vector<double> out(ny);
        pool2d_forward_reference(ctx, sh, x.data(), out.data());
        double s = 0;
        for (size_t i = 0; i < ny; ++i) s += out[i] * r[i];
        return s;
      };
      pool2d_forward_reference(ctx, sh, x.data(), y.data());
      pool2d_backward_reference(ctx, sh, x.data(), y.data(), r.data(), dx.data());
      CHECK(compare(dx, cnn::test::numeric_gradient(x, loss), cnn::test::kFiniteDifference) == "");
    }
  }
}

TEST_CASE("pool2d cpu matches the float reference over generated shapes", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  const PoolCase cases[] = {
      {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0},   {1, 4, 7, 9, 3, 3, 2, 2, 1, 1},
      {3, 2, 9, 7, 3, 3, 2, 2, 0, 0},    {2, 5, 6, 6, 6, 6, 1, 1, 0, 0},   {1, 3, 5, 7, 5, 7, 1, 1, 0, 0},
      {2, 2, 11, 5, 3, 2, 1, 2, 1, 1},   {1, 1, 13, 13, 4, 4, 3, 3, 2, 2}, {2, 3, 10, 12, 2, 3, 3, 1, 1, 0},
      {1, 2, 9, 9, 3, 3, 3, 3, 1, 1},    {4, 16, 24, 24, 2, 2, 2, 2, 0, 0}, {3, 8, 15, 17, 3, 3, 2, 2, 1, 1},
  };
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    for (const PoolCase& c : cases) {
      auto sh = Pool2dShape::make(kind, c.N, c.C, c.H, c.W, c.R, c.S, c.sh, c.sw, c.ph, c.pw);
      INFO(sh.to_string());
      const size_t nx = static_cast<size_t>(c.N * c.C * c.H * c.W), ny = static_cast<size_t>(c.N * c.C * sh.P * sh.Q);
      const std::vector<float> x = cnn::test::random_floats(nx, 41);
      const std::vector<float> dy = cnn::test::random_floats(ny, 42);
      std::vector<float> y_ref(ny), y(ny), dx_ref(nx), dx(nx, 7.0f);
      pool2d_forward_reference(ctx, sh, x.data(), y_ref.data());
      pool2d_backward_reference(ctx, sh, x.data(), y_ref.data(), dy.data(), dx_ref.data());
      run_op(Backend::cpu, Pool2dForward{&ctx, sh, x.data(), y.data()});
      run_op(Backend::cpu, Pool2dBackward{&ctx, sh, x.data(), y.data(), dy.data(), dx.data()});
      CHECK(compare(y, y_ref, cnn::test::kFastCpuVsReference) == "");
      CHECK(compare(dx, dx_ref, cnn::test::kFastCpuVsReference) == "");
    }
  }
}

// The reference's and the cpu row's max pooling of x, and their gradients for dy (the cpu row's
// outputs pre-filled with -99, so a skipped element shows).
struct MaxRuns {
  std::vector<float> y_ref, dx_ref, y, dx;
};
static MaxRuns run_max_pooling(const ExecContext& ctx, const Pool2dShape& sh, const std::vector<float>& x,
                               const std::vector<float>& dy) {
  MaxRuns r{std::vector<float>(dy.size()), std::vector<float>(x.size()), std::vector<float>(dy.size(), -99.0f),
            std::vector<float>(x.size(), -99.0f)};
  pool2d_forward_reference(ctx, sh, x.data(), r.y_ref.data());
  pool2d_backward_reference(ctx, sh, x.data(), r.y_ref.data(), dy.data(), r.dx_ref.data());
  run_op(Backend::cpu, Pool2dForward{&ctx, sh, x.data(), r.y.data()});
  run_op(Backend::cpu, Pool2dBackward{&ctx, sh, x.data(), r.y.data(), dy.data(), r.dx.data()});
  return r;
}

// The separable max (rows, then columns) must keep the reference's NaN rule: a window holding a NaN
// gives a NaN, every other window the same max, and backward routes dy where the reference does.
TEST_CASE("max pooling on the cpu propagates NaN and routes gradients like the reference", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  for (const Pool2dShape& sh : {Pool2dShape::make(PoolKind::max, 2, 3, 11, 9, 3, 3, 2, 2, 1, 1),
                                Pool2dShape::make(PoolKind::max, 1, 2, 8, 8, 2, 2, 2, 2, 0, 0),
                                Pool2dShape::make(PoolKind::max, 1, 1, 7, 10, 3, 2, 1, 3, 1, 1)}) {
    INFO(sh.to_string());
    const size_t nx = size_t(sh.N * sh.C * sh.H * sh.W), ny = size_t(sh.N * sh.C * sh.P * sh.Q);
    Rng rng(5, static_cast<uint64_t>(RngStream::test));
    std::vector<float> x(nx), dy(ny);
    for (float& v : x) v = float(rng.below(7)) - 3.0f;  // many ties
    for (float& v : dy) v = rng.uniform();
    for (size_t i = 3; i < nx; i += 17) x[i] = std::numeric_limits<float>::quiet_NaN();
    const auto [y_ref, dx_ref, y, dx] = run_max_pooling(ctx, sh, x, dy);
    int nans = 0;
    for (size_t i = 0; i < ny; ++i) {
      INFO("y[" << i << "]");
      REQUIRE(std::isnan(y[i]) == std::isnan(y_ref[i]));
      if (std::isnan(y[i])) ++nans;
      else CHECK(y[i] == y_ref[i]);
    }
    CHECK(nans > 0);
    CHECK(compare(dx, dx_ref, cnn::test::kExact) == "");
  }
}

// The fast max pass pads each row with -inf columns and the backward searches interior windows by
// selects: a window of -inf inputs must still give -inf and route dy to its first input, as the
// reference does (a padded column must never be picked), over wide rows and several strides.
TEST_CASE("max pooling on the cpu routes -inf windows and ties like the reference", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  for (const Pool2dShape& sh : {Pool2dShape::make(PoolKind::max, 2, 3, 13, 29, 3, 3, 2, 2, 1, 1),
                                Pool2dShape::make(PoolKind::max, 1, 4, 9, 40, 3, 5, 1, 3, 1, 2),
                                Pool2dShape::make(PoolKind::max, 3, 2, 6, 6, 3, 3, 2, 2, 1, 1),
                                Pool2dShape::make(PoolKind::max, 1, 2, 10, 33, 4, 4, 2, 1, 2, 2)}) {
    INFO(sh.to_string());
    const size_t nx = size_t(sh.N * sh.C * sh.H * sh.W), ny = size_t(sh.N * sh.C * sh.P * sh.Q);
    Rng rng(9, static_cast<uint64_t>(RngStream::test));
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x(nx), dy(ny);
    for (float& v : x) v = rng.below(3) == 0 ? -1.0f + float(rng.below(3)) : -inf;  // mostly -inf, many ties
    for (float& v : dy) v = rng.uniform() + 0.5f;
    const auto [y_ref, dx_ref, y, dx] = run_max_pooling(ctx, sh, x, dy);
    int infs = 0;
    for (size_t i = 0; i < ny; ++i) {
      INFO("y[" << i << "]");
      CHECK(y[i] == y_ref[i]);
      if (y_ref[i] == -inf) ++infs;
    }
    CHECK(infs > 0);
    CHECK(compare(dx, dx_ref, cnn::test::kExact) == "");
  }
}
