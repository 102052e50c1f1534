// cpu:winograd (conv2d_winograd_cpu.cpp) against the float64 reference over generated shapes: odd
// sizes, channel counts that are multiples of nothing, padding 0, 1 and 2, batch 1 and 3, tile
// blocks that span images and blocks that cut one, outputs under 8x8 (F(2x2, 3x3)) and from 8x8 up
// (F(4x4, 3x3)); forward, dx and dw (Winograd), db (column sums).
// Tolerances: F(4x4, 3x3)'s transforms (coefficients up to 8 and 5) round each product's terms more
// than F(2x2, 3x3)'s; measured here its relative L2 error against float64 is 0.8e-6 to 2.5e-6 (F(2x2,
// 3x3): 0.6e-7 to 7e-7), so every output is held to 1e-5 relative L2 (FP32 candidates answer to
// 1e-4 in the autotuner's guard). Element by element, an output that cancels to near zero carries
// the rounding of its terms: kCpuTransformVsReference (tolerance.h). A skipped or misplaced tile
// misses both by orders of magnitude.
// Trap: outputs start as NaN, so a tile the transforms skip fails.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

constexpr test::Tolerance kWinograd = test::kCpuTransformVsReference;
constexpr double kWinogradRelL2 = 1e-5;

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return std::sqrt(d / std::max(n, 1e-300));
}

// Each got[i] within kWinograd of want[i], or within kSumBound * 2^-24 * mag[i], where mag[i] is the
// sum of the magnitudes of want[i]'s products ("" when all are; else the first outlier).
// kSumBound: the transforms' coefficients (up to 8 and 5 in F(4x4, 3x3)) and the two-level sums
// (within a block, then over the threads' blocks) round each product's share a few dozen times.
constexpr double kSumBound = 64;
std::string within_sum_bound(const std::vector<float>& got, const std::vector<double>& want,
                             const std::vector<double>& mag) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double tol = std::max(kWinograd.atol + kWinograd.rtol * std::fabs(want[i]), kSumBound * 0x1p-24 * mag[i]);
    if (!(err <= tol))
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]) + ", tolerance " + std::to_string(tol);
  }
  return "";
}

// Forward and backward of cpu:winograd on ctx against the double reference, one shape.
void check_shape(const ExecContext& ctx, const Conv2dShape& sh, uint64_t seed) {
  INFO(sh.to_string() << ", threads " << ctx.threads() << (ctx.workspace ? "" : ", no workspace"));
  REQUIRE(conv2d_cpu_winograd_can_implement(sh));
  const size_t nx = size_t(sh.N * sh.C * sh.H * sh.W), ny = size_t(sh.N * sh.K * sh.P * sh.Q);
  const std::vector<float> x = test::random_floats(nx, seed), w = test::random_floats(size_t(sh.weight_numel()), seed + 1),
                           b = test::random_floats(size_t(sh.K), seed + 2), dy = test::random_floats(ny, seed + 3);
  const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  std::vector<double> y_ref(ny), dx_ref(nx), dw_ref(w.size()), db_ref(b.size());
  conv2d_forward_reference<double>(ctx, sh, xd.data(), wd.data(), bd.data(), y_ref.data());
  conv2d_backward_reference<double>(ctx, sh, xd.data(), wd.data(), dyd.data(), dx_ref.data(), dw_ref.data(),
                                    db_ref.data());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(ny, nan), dx(nx, nan), dw(w.size(), nan), db(b.size(), nan);
  conv2d_forward_cpu_winograd(ctx, sh, x.data(), w.data(), b.data(), y.data());
  CHECK(compare(y, to_float(y_ref), kWinograd) == "");
  CHECK(rel_l2(y, y_ref) <= kWinogradRelL2);
  conv2d_backward_cpu_winograd(ctx, sh, nullptr, w.data(), dy.data(), dx.data(), nullptr, nullptr);
  CHECK(compare(dx, to_float(dx_ref), kWinograd) == "");
  CHECK(rel_l2(dx, dx_ref) <= kWinogradRelL2);
  conv2d_backward_cpu_winograd(ctx, sh, x.data(), nullptr, dy.data(), nullptr, dw.data(), db.data());
  // A weight's gradient sums N*P*Q products: its rounding scales with the sum of their magnitudes,
  // not with the result, which can cancel far below them (73,728 products in the filter gradient
  // case below; which elements land past a fixed tolerance depends on the BLAS kernel's order).
  std::vector<double> xa(nx), dya(ny), dw_mag(w.size());
  for (size_t i = 0; i < nx; ++i) xa[i] = std::fabs(xd[i]);
  for (size_t i = 0; i < ny; ++i) dya[i] = std::fabs(dyd[i]);
  conv2d_backward_reference<double>(ctx, sh, xa.data(), wd.data(), dya.data(), nullptr, dw_mag.data(), nullptr);
  CHECK(within_sum_bound(dw, dw_ref, dw_mag) == "");
  CHECK(rel_l2(dw, dw_ref) <= kWinogradRelL2);
  CHECK(compare(db, to_float(db_ref), test::kFastCpuVsReference) == "");
}

}  // namespace

TEST_CASE("conv2d cpu winograd matches the float64 reference over generated shapes", "[cpu]") {
  ExecContext one = ExecContext::cpu(1), two = ExecContext::cpu(2);
  ExecContext bare;  // no workspace: the op allocates its own scratch
  bare.num_threads = 2;
  uint64_t seed = 100;
  int shapes = 0;
  for (int64_t N : {1, 3})
    for (int pad : {0, 1, 2})
      for (auto [C, K, H, W] : {std::array<int64_t, 4>{1, 1, 3, 3}, {3, 5, 7, 9}, {17, 19, 11, 6}, {5, 2, 1, 4},
                                {20, 33, 16, 15}}) {
        if (H + 2 * pad < 3 || W + 2 * pad < 3) continue;
        for (bool bias : {true, false}) {
          const Conv2dShape sh = Conv2dShape::make(N, C, H, W, K, 3, 3, 1, 1, pad, pad, 1, 1, 1, bias);
          check_shape(shapes % 2 ? one : two, sh, seed += 4);
          ++shapes;
        }
      }
  CHECK(shapes >= 50);
  check_shape(bare, Conv2dShape::make(3, 6, 9, 8, 7, 3, 3, 1, 1, 1, 1), 7);
  // Unequal padding of the two axes.
  check_shape(two, Conv2dShape::make(2, 5, 8, 7, 6, 3, 3, 1, 1, 0, 2), 9);
  check_shape(two, Conv2dShape::make(2, 5, 7, 8, 6, 3, 3, 1, 1, 2, 1), 11);
}

// Enough tile rows that the work is cut into several blocks, one of which starts inside an image,
// and an odd width wider than a block's tile budget (a block then holds a single tile row).
TEST_CASE("conv2d cpu winograd matches the reference when its tile blocks cut images", "[cpu]") {
  ExecContext two = ExecContext::cpu(2);
  check_shape(two, Conv2dShape::make(3, 20, 40, 41, 24, 3, 3, 1, 1, 1, 1), 21);
  check_shape(two, Conv2dShape::make(2, 64, 9, 301, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1, false), 23);
  check_shape(ExecContext::cpu(1), Conv2dShape::make(5, 48, 24, 24, 40, 3, 3, 1, 1, 1, 1), 25);
}

// The filter gradient sums each thread's blocks into its own M and adds the threads' M: several
// blocks a thread (its later blocks accumulate), one block for two threads (the idle thread's M is
// not added), and thread counts 1 to 3. Here a weight's gradient sums 73,728 products.
TEST_CASE("conv2d cpu winograd's filter gradient sums several blocks a thread and skips idle threads", "[cpu]") {
  const Conv2dShape many = Conv2dShape::make(32, 16, 48, 48, 16, 3, 3, 1, 1, 1, 1);
  for (int threads : {1, 2, 3}) check_shape(ExecContext::cpu(threads), many, 31 + uint64_t(threads));
  check_shape(ExecContext::cpu(2), Conv2dShape::make(1, 5, 2, 7, 6, 3, 3, 1, 1, 1, 1), 41);
  check_shape(ExecContext::cpu(3), Conv2dShape::make(1, 4, 3, 3, 3, 3, 3, 1, 1, 0, 0), 43);
}

TEST_CASE("conv2d cpu winograd takes 3x3 stride-1 ungrouped layers and is the default on fer_cnn's", "[cpu]") {
  const Conv2dShape fer48 = Conv2dShape::make(64, 64, 48, 48, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, false);
  for (const Conv2dShape& sh : {fer48, Conv2dShape::make(64, 128, 12, 12, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, false)}) {
    INFO(sh.to_string());
    CHECK(conv2d_cpu_winograd_can_implement(sh));
    CHECK(conv2d_cpu_winograd_is_default(sh));
    CHECK(std::string(conv2d_cpu_rule_algo(sh, DType::f32)) == "cpu:winograd");
    CHECK(std::string(conv2d_cpu_rule_algo(sh, DType::bf16)) == "cpu:im2col_gemm");
  }
  // Few 4x4 tiles a call (the filter transform, once a call, outweighs the work): exact tiles
  // from 100 a call, overhanging ones (10x10 in 3x3 tiles) from 512.
  auto rule = [](int64_t N, int64_t HW) {
    return std::string(conv2d_cpu_rule_algo(Conv2dShape::make(N, 128, HW, HW, 128, 3, 3, 1, 1, 1, 1), DType::f32));
  };
  CHECK(rule(1, 40) == "cpu:winograd");     // 100 tiles
  CHECK(rule(1, 20) == "cpu:im2col_gemm");  // 25
  CHECK(rule(3, 20) == "cpu:im2col_gemm");  // 75
  CHECK(rule(4, 20) == "cpu:winograd");     // 100
  CHECK(rule(1, 12) == "cpu:im2col_gemm");  // 9, exact
  CHECK(rule(12, 12) == "cpu:winograd");    // 108, exact
  CHECK(rule(32, 10) == "cpu:im2col_gemm");  // 288, 69% of the tiles' outputs used
  CHECK(rule(57, 10) == "cpu:winograd");     // 513
  // 6x6 outputs, a first layer (C == 1) and padding 2: the rule keeps im2col.
  for (const Conv2dShape& sh : {Conv2dShape::make(64, 128, 6, 6, 256, 3, 3, 1, 1, 1, 1),
                                Conv2dShape::make(64, 1, 48, 48, 64, 3, 3, 1, 1, 1, 1),
                                Conv2dShape::make(8, 64, 48, 48, 64, 3, 3, 1, 1, 2, 2)}) {
    INFO(sh.to_string());
    CHECK(conv2d_cpu_winograd_can_implement(sh));
    CHECK_FALSE(conv2d_cpu_winograd_is_default(sh));
    CHECK(std::string(conv2d_cpu_rule_algo(sh, DType::f32)) == "cpu:im2col_gemm");
  }
  for (const Conv2dShape& sh : {Conv2dShape::make(2, 8, 16, 16, 8, 3, 3, 2, 2, 1, 1),        // stride 2
                                Conv2dShape::make(2, 8, 16, 16, 8, 5, 5, 1, 1, 2, 2),        // 5x5
                                Conv2dShape::make(2, 8, 16, 16, 8, 3, 3, 1, 1, 2, 2, 2, 2),  // dilation 2
                                Conv2dShape::make(2, 8, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2),  // groups 2
                                Conv2dShape::make(2, 8, 16, 16, 8, 3, 3, 1, 1, 3, 3)}) {    // padding 3
    INFO(sh.to_string());
    CHECK_FALSE(conv2d_cpu_winograd_can_implement(sh));
    CHECK_FALSE(conv2d_algo(ConvDir::forward, "cpu:winograd").can_implement(ExecContext{}, sh));
  }
  CHECK(conv2d_algo(ConvDir::backward_data, "cpu:winograd").can_implement(ExecContext{}, fer48));
  // The row's workspace covers what the call takes from the context.
  ExecContext ctx = ExecContext::cpu(2);
  const Conv2dShape sh = Conv2dShape::make(3, 20, 40, 41, 24, 3, 3, 1, 1, 1, 1);
  for (ConvDir d : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter})
    CHECK(conv2d_algo(d, "cpu:winograd").workspace_bytes(ctx, sh) > 0);
}
