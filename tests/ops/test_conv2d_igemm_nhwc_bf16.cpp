// CPU tests of the NHWC BF16 implicit GEMM's host side: the packed weight layouts, the index
// decoders (each direction's GEMM rebuilt through them, with the filter gradient's column of ones,
// must equal the double reference convolution), and the plan's cost model, can_implement and
// workspace. The kernels themselves are tested on the GPU in test_conv2d_igemm_nhwc_bf16_cuda.cpp.
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "core/bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16_decode.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/catch.h"
#include "support/decoder_shapes.h"
#include "support/nhwc.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::igemm_nhwc_bf16_detail;

TEST_CASE("bf16 weight packing puts every master weight where its layout says", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(1, 3, 8, 8, 5, 2, 3);
  const Conv2dShape dw = Conv2dShape::make(1, 4, 8, 8, 8, 3, 2, 1, 1, 0, 0, 1, 1, 4);  // depthwise, multiplier 2
  const std::vector<float> w = test::random_floats(size_t(sh.weight_numel()), 5);
  const std::vector<float> wd = test::random_floats(size_t(dw.weight_numel()), 6);
  std::vector<bf16> krsc(w.size()), crsk(w.size()), kcrs(w.size()), rsk(wd.size());
  conv2d_pack_weights_bf16_cpu(cpu, sh, Bf16WeightLayout::krsc, w.data(), krsc.data());
  conv2d_pack_weights_bf16_cpu(cpu, sh, Bf16WeightLayout::crsk, w.data(), crsk.data());
  conv2d_pack_weights_bf16_cpu(cpu, sh, Bf16WeightLayout::kcrs, w.data(), kcrs.data());
  conv2d_pack_weights_bf16_cpu(cpu, dw, Bf16WeightLayout::rsk, wd.data(), rsk.data());
  const int K = 5, C = 3, R = 2, S = 3;
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r)
        for (int s = 0; s < S; ++s) {
          const uint16_t want = bf16_bits_from_float(w[size_t(((k * C + c) * R + r) * S + s)]);
          REQUIRE(krsc[size_t(((k * R + r) * S + s) * C + c)].bits == want);
          REQUIRE(crsk[size_t(((c * R + r) * S + s) * K + k)].bits == want);
          REQUIRE(kcrs[size_t(((k * C + c) * R + r) * S + s)].bits == want);
        }
  for (int k = 0; k < 8; ++k)
    for (int rs = 0; rs < 6; ++rs)
      REQUIRE(rsk[size_t(rs * 8 + k)].bits == bf16_bits_from_float(wd[size_t(k * 6 + rs)]));
  CHECK_FALSE(conv2d_weights_bf16_supports(dw, Bf16WeightLayout::crsk));
  CHECK_FALSE(conv2d_weights_bf16_supports(sh, Bf16WeightLayout::rsk));
  CHECK_THROWS(conv2d_pack_weights_bf16_cpu(cpu, sh, Bf16WeightLayout::rsk, w.data(), rsk.data()));
}

TEST_CASE("igemm nhwc bf16 decoders rebuild every direction's GEMM", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  uint64_t seed = 300;
  for (Conv2dShape sh : test::decoder_shapes()) {
    INFO(sh.to_string());
    seed += 10;
    const std::vector<double> x = test::random_doubles(sh.N * sh.C * sh.H * sh.W, seed);
    const std::vector<double> w = test::random_doubles(sh.weight_numel(), seed + 1);
    const std::vector<double> dy = test::random_doubles(sh.N * sh.K * sh.P * sh.Q, seed + 2);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(size_t(sh.K));
    sh.has_bias = false;
    conv2d_forward_reference<double>(cpu, sh, x.data(), w.data(), nullptr, y.data());
    conv2d_backward_reference<double>(cpu, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    const std::vector<double> xh = test::nchw_to_nhwc(x, sh.N, sh.C, sh.H, sh.W);
    const std::vector<double> dyh = test::nchw_to_nhwc(dy, sh.N, sh.K, sh.P, sh.Q);
    const int K = int(sh.K), C = int(sh.C), RS = int(sh.R * sh.S), RSC = RS * C, RSK = RS * K;
    const int NPQ = int(sh.N * sh.P * sh.Q), NHW = int(sh.N * sh.H * sh.W);
    auto w_at = [&](int k, int c, int rs) { return w[size_t((k * C + c) * RS + rs)]; };

    // forward: y (NPQ, K) = A (NPQ, RSC) gathered from x * w_krsc (K, RSC)^T
    const NhwcGather fg = NhwcGather::forward(sh);
    std::vector<double> y2(y.size(), 0.0);
    for (int m = 0; m < NPQ; ++m) {
      const NhwcPos row = fg.row(m);
      for (int red = 0; red < RSC; ++red) {
        const NhwcPos tap = fg.tap(red);
        if (!fg.valid(row, tap)) continue;
        for (int k = 0; k < K; ++k) y2[size_t(m * K + k)] += xh[size_t(row.off + tap.off)] * w_at(k, red % C, red / C);
      }
    }
    CHECK(test::rel_l2_error(y2, test::nchw_to_nhwc(y, sh.N, sh.K, sh.P, sh.Q)) < 1e-12);

    // backward data: dx (NHW, C) = A (NHW, RSK) gathered from dy * wt_crsk (C, RSK)^T
    const NhwcGather dg = NhwcGather::backward_data(sh);
    std::vector<double> dx2(dx.size(), 0.0);
    for (int m = 0; m < NHW; ++m) {
      const NhwcPos row = dg.row(m);
      for (int red = 0; red < RSK; ++red) {
        const NhwcPos tap = dg.tap(red);
        if (!dg.valid(row, tap)) continue;
        for (int c = 0; c < C; ++c)
          dx2[size_t(m * C + c)] += dyh[size_t(row.off + tap.off)] * w_at(red % K, c, red / K);
      }
    }
    CHECK(test::rel_l2_error(dx2, test::nchw_to_nhwc(dx, sh.N, sh.C, sh.H, sh.W)) < 1e-12);

    // backward filter: dw (K, RSC + 1) = dy (NPQ, K)^T * B (NPQ, RSC + 1), B's last column all ones;
    // column (r, s, c) lands at dw[k, c, r, s], the ones column at db[k]
    std::vector<double> dw2(dw.size(), 0.0), db2(db.size(), 0.0);
    for (int npq = 0; npq < NPQ; ++npq) {
      const NhwcPos row = fg.row(npq);
      for (int col = 0; col <= RSC; ++col) {
        double b = 1.0;
        if (col < RSC) {
          const NhwcPos tap = fg.tap(col);
          if (!fg.valid(row, tap)) continue;
          b = xh[size_t(row.off + tap.off)];
        }
        for (int k = 0; k < K; ++k) {
          const double v = dyh[size_t(npq * K + k)] * b;
          if (col < RSC)
            dw2[size_t((k * C + col % C) * RS + col / C)] += v;
          else
            db2[size_t(k)] += v;
        }
      }
    }
    CHECK(test::rel_l2_error(dw2, dw) < 1e-12);
    CHECK(test::rel_l2_error(db2, db) < 1e-12);
  }
}

TEST_CASE("igemm nhwc bf16 plans fit the shape, the kernels and the workspace limit", "[cpu]") {
  const Conv2dShape conv1b = Conv2dShape::make(640, 64, 40, 40, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dShape conv4b = Conv2dShape::make(64, 512, 5, 5, 512, 3, 3, 1, 1, 1, 1);
  const Conv2dShape pw = Conv2dShape::make(32, 8, 44, 44, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false);
  const Conv2dShape out7 = Conv2dShape::make(32, 128, 3, 3, 7, 3, 3, 1, 1, 1, 1);  // K = 7: data, filter scalar
  const Conv2dShape rgb = Conv2dShape::make(8, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1);   // C = 3: forward scalar
  for (bool wgmma : {false, true})
    for (const Conv2dShape& sh : {conv1b, conv4b, pw, out7, rgb})
      for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
        INFO(sh.to_string() << " " << to_string(dir) << " wgmma " << wgmma);
        CHECK(conv2d_igemm_nhwc_bf16_can_implement(sh));
        const IgemmNhwcBf16Plan plan = conv2d_igemm_nhwc_bf16_choose_plan(sh, dir, 132, size_t(1) << 30, wgmma);
        CHECK(plan.tile >= 0);
        CHECK(plan.tile < kIgemmNhwcBf16Tiles);
        if (!conv2d_igemm_nhwc_bf16_vectorized(sh, dir)) CHECK(plan.tile == kIgemmNhwcBf16ScalarTile);
        if (!wgmma) CHECK(plan.tile < kIgemmNhwcBf16WgmmaFirst);
        CHECK(conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, plan) == plan.splits);
        CHECK(conv2d_igemm_nhwc_bf16_workspace_bytes(sh, dir, plan) <= size_t(1) << 30);
        CHECK(conv2d_igemm_nhwc_bf16_choose_plan(sh, dir, 132, 0, wgmma).splits == 1);  // partials need workspace
        CHECK(plan.splits >= conv2d_igemm_nhwc_bf16_min_splits(sh, dir));
      }
  CHECK(conv2d_igemm_nhwc_bf16_vectorized(conv1b, ConvDir::backward_filter));
  CHECK_FALSE(conv2d_igemm_nhwc_bf16_vectorized(out7, ConvDir::backward_data));
  CHECK(conv2d_igemm_nhwc_bf16_vectorized(out7, ConvDir::forward));
  CHECK_FALSE(conv2d_igemm_nhwc_bf16_vectorized(rgb, ConvDir::forward));
  CHECK(conv2d_igemm_nhwc_bf16_vectorized(rgb, ConvDir::backward_data));
  // The filter gradient of conv1b reduces over 1M positions into 64 x 577: only a split fills 132 SMs.
  CHECK(conv2d_igemm_nhwc_bf16_choose_plan(conv1b, ConvDir::backward_filter, 132, size_t(1) << 30, false).splits > 8);
  // Slices of at most 64K pixels: 1M / 64K = 16 at least.
  CHECK(conv2d_igemm_nhwc_bf16_min_splits(conv1b, ConvDir::backward_filter) == 16);
  CHECK(conv2d_igemm_nhwc_bf16_min_splits(conv1b, ConvDir::forward) == 1);
  // Its forward has 1M rows of 64 channels: a tile 64 wide, wgmma or not.
  for (bool wgmma : {false, true})
    CHECK(conv2d_igemm_nhwc_bf16_tile_info(
              conv2d_igemm_nhwc_bf16_choose_plan(conv1b, ConvDir::forward, 132, size_t(1) << 30, wgmma).tile)
              .bn == 64);
  CHECK_FALSE(conv2d_igemm_nhwc_bf16_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8)));
  const IgemmNhwcBf16Plan many{0, 1000000};
  CHECK(conv2d_igemm_nhwc_bf16_effective_splits(conv4b, ConvDir::forward, many) == 512 * 9 / 64);  // 64 a slice
  // Split partials (splits, M, N) and, for the filter gradient with db, the bias-only partials.
  const IgemmNhwcBf16Plan split3{2, 3};
  CHECK(conv2d_igemm_nhwc_bf16_workspace_bytes(conv4b, ConvDir::forward, split3) == 3 * 1600 * 512 * 4);
  CHECK(conv2d_igemm_nhwc_bf16_workspace_bytes(conv4b, ConvDir::backward_filter, split3, true) >=
        size_t(3) * 512 * (4608 + 1) * 4);
  CHECK(conv2d_igemm_nhwc_bf16_workspace_bytes(conv4b, ConvDir::backward_data, IgemmNhwcBf16Plan{2, 1}) == 0);
}
