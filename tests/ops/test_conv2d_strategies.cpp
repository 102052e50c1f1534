// Shape rules of the extra CUDA convolution strategies (conv2d_strategies.h): host logic, so these
// run in every build. In a CUDA build the rows' can_implement must equal the rule and the workspace
// must stay bounded as the batch grows; a build without CUDA has no such rows.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_strategies.h"
#include "support/catch.h"

using namespace cnn;

namespace {

const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

// Each strategy's shape rule, and its rows' name after "cuda:".
struct Rule {
  const char* name;
  std::function<bool(const Conv2dShape&, ConvDir)> rule;
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> all{{"winograd", conv2d_winograd_shape_supported},
                                     {"im2col_gemm", conv2d_im2col_gemm_shape_supported},
                                     {"fft", conv2d_fft_shape_supported}};
  return all;
}

// A 3x3, stride 1, padding 1 conv: inside every strategy's rules in every direction.
Conv2dShape plain_3x3() { return Conv2dShape::make(2, 3, 9, 7, 4, 3, 3, 1, 1, 1, 1); }

std::vector<Conv2dShape> mixed_shapes() {
  std::vector<Conv2dShape> shapes;
  for (int rs : {1, 3, 5})
    for (int stride : {1, 2})
      for (int pad : {0, 1, 2, 3})
        for (int dil : {1, 2})
          for (int groups : {1, 2})
            if (rs + 2 * pad - dil * (rs - 1) >= 0)
              shapes.push_back(Conv2dShape::make(1, 4, 9, 8, 6, rs, rs, stride, stride, pad, pad, dil, dil, groups));
  return shapes;
}

}  // namespace

TEST_CASE("winograd takes 3x3 stride 1 convs, and backward data only with padding up to 2", "[cpu]") {
  for (int pad : {0, 1, 2})
    for (ConvDir dir : kDirs) {
      INFO(fmt::format("pad {} {}", pad, to_string(dir)));
      CHECK(conv2d_winograd_shape_supported(Conv2dShape::make(1, 5, 7, 8, 3, 3, 3, 1, 1, pad, pad), dir));
    }
  const Conv2dShape pad3 = Conv2dShape::make(1, 5, 7, 8, 3, 3, 3, 1, 1, 3, 1);
  CHECK(conv2d_winograd_shape_supported(pad3, ConvDir::forward));
  CHECK(conv2d_winograd_shape_supported(pad3, ConvDir::backward_filter));
  CHECK_FALSE(conv2d_winograd_shape_supported(pad3, ConvDir::backward_data));
  for (ConvDir dir : kDirs) {
    INFO(to_string(dir));
    CHECK_FALSE(conv2d_winograd_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 5, 5, 1, 1, 2, 2), dir));
    CHECK_FALSE(conv2d_winograd_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 1, 3, 1, 1, 0, 1), dir));
    CHECK_FALSE(conv2d_winograd_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 2, 2, 1, 1), dir));
    CHECK_FALSE(conv2d_winograd_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 1, 1, 2, 2, 2, 2), dir));
    CHECK_FALSE(conv2d_winograd_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2), dir));
  }
}

TEST_CASE("im2col gemm takes every stride padding dilation and groups but not 2^31-element columns", "[cpu]") {
  for (const Conv2dShape& sh : mixed_shapes())
    for (ConvDir dir : kDirs) {
      INFO(fmt::format("{} {}", sh.to_string(), to_string(dir)));
      CHECK(conv2d_im2col_gemm_shape_supported(sh, dir));
    }
  // One image: 256 * 9 * 1024 * 1024 column entries, past cuBLAS's int dimensions.
  const Conv2dShape huge = Conv2dShape::make(1, 256, 1024, 1024, 8, 3, 3, 1, 1, 1, 1);
  CHECK_FALSE(conv2d_im2col_gemm_shape_supported(huge, ConvDir::forward));
}

TEST_CASE("fft takes stride 1 convs of any filter and padding up to 1024-wide transforms", "[cpu]") {
  for (int rs : {1, 3, 5, 11})
    for (int pad : {0, 2, 5})
      for (ConvDir dir : kDirs) {
        const Conv2dShape sh = Conv2dShape::make(2, 3, 27, 25, 4, rs, rs, 1, 1, pad, pad);
        INFO(fmt::format("{} {}", sh.to_string(), to_string(dir)));
        CHECK(conv2d_fft_shape_supported(sh, dir));
      }
  for (ConvDir dir : kDirs) {
    INFO(to_string(dir));
    CHECK_FALSE(conv2d_fft_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 2, 2, 1, 1), dir));
    CHECK_FALSE(conv2d_fft_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 1, 1, 2, 2, 2, 2), dir));
    CHECK_FALSE(conv2d_fft_shape_supported(Conv2dShape::make(1, 4, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4), dir));
    CHECK_FALSE(conv2d_fft_shape_supported(Conv2dShape::make(1, 1, 1020, 8, 1, 5, 5, 1, 1, 3, 0), dir));
    CHECK(conv2d_fft_shape_supported(Conv2dShape::make(1, 1, 1020, 8, 1, 5, 5, 1, 1, 2, 0), dir));
  }
}

TEST_CASE("conv2d strategies can implement exactly what their rules allow where built, else nothing", "[cpu]") {
  std::vector<Conv2dShape> shapes = mixed_shapes();
  shapes.push_back(plain_3x3());
  const ExecContext cpu = ExecContext::cpu(1);
  for (const Rule& r : rules()) {
    for (ConvDir dir : kDirs) {
      const ConvAlgo* row = find_impl(conv2d_table(dir), Backend::cuda, DType::f32, std::string("cuda:") + r.name);
      CHECK((row != nullptr) == backend_built(Backend::cuda));
      if (!row) continue;
      for (const Conv2dShape& sh : shapes) {
        INFO(fmt::format("{} {} {}", r.name, sh.to_string(), to_string(dir)));
        CHECK(row->can_implement(cpu, sh) == r.rule(sh, dir));
        if (!row->can_implement(cpu, sh)) CHECK(row->workspace_bytes(cpu, sh) == 0);
      }
    }
  }
}

TEST_CASE("conv2d strategy workspaces grow with the batch only up to a fixed bound", "[cpu]") {
  if (!backend_built(Backend::cuda)) CNN_SKIP("this build has no CUDA strategies");
  const ExecContext cpu = ExecContext::cpu(1);
  auto bytes = [&](const Rule& r, ConvDir dir, const Conv2dShape& sh) {
    return conv2d_algo(dir, std::string("cuda:") + r.name).workspace_bytes(cpu, sh);
  };
  // im2col: the columns of both images, (C*R*S) x (P*Q) each.
  const Conv2dShape small = Conv2dShape::make(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1);
  CHECK(bytes(rules()[1], ConvDir::forward, small) == size_t(2 * 3 * 9 * 64) * sizeof(float));
  const size_t cap = size_t(256) << 20;
  for (const Rule& r : rules())
    for (ConvDir dir : kDirs) {
      INFO(fmt::format("{} {}", r.name, to_string(dir)));
      const Conv2dShape one = Conv2dShape::make(1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1);
      const Conv2dShape many = Conv2dShape::make(1024, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1);
      const size_t ws1 = bytes(r, dir, one), wsn = bytes(r, dir, many);
      CHECK(ws1 > 0);
      CHECK(wsn >= ws1);
      // The per-chunk part stays under the cap; the filter-sized part (K*C transforms) comes on top.
      CHECK(wsn <= cap + 2 * ws1);
    }
}
