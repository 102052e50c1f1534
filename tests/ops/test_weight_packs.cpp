// Prepacked 16-bit weights at the op level: the batched pack's table (conv2d_weights_bf16.h) walked
// on the CPU gives every copy the bits of the per-copy pack, padding and slices included; which
// layout each conv row reads per direction (ConvAlgo::packed_layout), which the graph's plan asks;
// and the check of a given copy (packed_weights_for): none given means the row packs its own.
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

constexpr uint16_t kSentinel = 0xabcd;

struct Copy {
  Conv2dShape sh;
  Bf16WeightLayout layout;
  DType dtype;
  std::vector<float> w;
  std::vector<uint16_t> out;  // n + kWeightPackGroup slack, sentinel-filled
};

Copy make_copy(const Conv2dShape& sh, Bf16WeightLayout layout, DType dtype, uint64_t seed) {
  Copy c{sh, layout, dtype, test::random_floats(size_t(sh.weight_numel()), seed, -3.0f, 3.0f), {}};
  c.out.assign(size_t(sh.weight_numel()) + kWeightPackGroup, kSentinel);
  return c;
}

WeightsBf16Dims dims_of(const Conv2dShape& sh) {
  return {int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)};
}

// The per-copy oracle: conv2d_pack_weights_bf16_cpu for bf16; its index map with f16 rounding.
std::vector<uint16_t> expected(const Copy& c) {
  const size_t n = size_t(c.sh.weight_numel());
  std::vector<uint16_t> want(n);
  if (c.dtype == DType::bf16) {
    std::vector<bf16> packed(n);
    conv2d_pack_weights_bf16_cpu(ExecContext::cpu(1), c.sh, c.layout, c.w.data(), packed.data());
    for (size_t i = 0; i < n; ++i) want[i] = packed[i].bits;
  } else {
    for (size_t i = 0; i < n; ++i)
      want[i] = to_f16(c.w[size_t(conv2d_weights_bf16_index(c.layout, dims_of(c.sh), int(i)))]).bits;
  }
  return want;
}

void pack_and_check(std::vector<Copy>& copies) {
  std::vector<WeightPackEntry> table;
  for (Copy& c : copies) add_weight_pack(table, c.w.data(), c.out.data(), dims_of(c.sh), c.layout, c.dtype);
  conv2d_pack_weights_batch_cpu(table);
  for (size_t k = 0; k < copies.size(); ++k) {
    INFO("copy " << k << ": " << copies[k].sh.to_string() << " " << to_string(copies[k].layout) << " "
                 << to_string(copies[k].dtype));
    const std::vector<uint16_t> want = expected(copies[k]);
    const std::vector<uint16_t>& got = copies[k].out;
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 2) == 0);
    for (size_t i = want.size(); i < got.size(); ++i) CHECK(got[i] == kSentinel);  // nothing past the copy
  }
}

}  // namespace

TEST_CASE("batched weight pack: every copy has the per-copy pack's bits, odd sizes and both dtypes", "[cpu]") {
  std::vector<Copy> copies;
  copies.push_back(make_copy(Conv2dShape::make(2, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1), Bf16WeightLayout::krsc, DType::bf16, 1));
  copies.push_back(make_copy(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8), Bf16WeightLayout::rsk,
                             DType::bf16, 2));  // 72 elements: depthwise
  copies.push_back(make_copy(Conv2dShape::make(1, 5, 4, 4, 7, 1, 1), Bf16WeightLayout::crsk, DType::bf16, 3));  // 35
  copies.push_back(make_copy(Conv2dShape::make(1, 5, 4, 4, 7, 1, 1), Bf16WeightLayout::krsc, DType::f16, 4));
  copies.push_back(make_copy(Conv2dShape::make(1, 13, 1, 1, 3, 1, 1), Bf16WeightLayout::kcrs, DType::bf16, 5));  // dense
  copies.push_back(make_copy(Conv2dShape::make(1, 1, 5, 5, 1, 1, 1), Bf16WeightLayout::rsk, DType::f16, 6));  // 1 element
  copies.push_back(make_copy(Conv2dShape::make(1, 6, 8, 8, 10, 5, 3, 1, 1, 2, 1), Bf16WeightLayout::crsk, DType::f16, 7));
  pack_and_check(copies);
}

TEST_CASE("batched weight pack: a table past one launch's slice restarts the numbering and packs everything", "[cpu]") {
  std::vector<Copy> copies;
  for (int i = 0; i < kWeightPackEntriesPerLaunch + 37; ++i)
    copies.push_back(make_copy(Conv2dShape::make(1, 1 + i % 3, 3, 3, 1 + i % 5, 1 + i % 2, 1 + i % 3, 1, 1, 0, 0),
                               i % 2 ? Bf16WeightLayout::krsc : Bf16WeightLayout::crsk,
                               i % 3 ? DType::bf16 : DType::f16, uint64_t(100 + i)));
  std::vector<WeightPackEntry> table;
  for (Copy& c : copies) add_weight_pack(table, c.w.data(), c.out.data(), dims_of(c.sh), c.layout, c.dtype);
  CHECK(table[size_t(kWeightPackEntriesPerLaunch)].first == 0);  // the second slice starts again
  CHECK(weight_pack_slice_groups(table).size() == 2);
  for (const WeightPackEntry& e : table) CHECK(e.first % kWeightPackGroup == 0);
  pack_and_check(copies);
}

TEST_CASE("batched weight pack: the table refuses what it cannot pack", "[cpu]") {
  std::vector<WeightPackEntry> table;
  std::vector<float> w(8);
  alignas(16) uint16_t out[16];
  CHECK_THROWS(add_weight_pack(table, w.data(), out, {2, 2, 1, 1}, Bf16WeightLayout::krsc, DType::f32));
  CHECK_THROWS(add_weight_pack(table, w.data(), out + 1, {2, 2, 1, 1}, Bf16WeightLayout::krsc, DType::bf16));
  CHECK_THROWS(add_weight_pack(table, w.data(), out, {2, 2, 1, 1}, Bf16WeightLayout::rsk, DType::bf16));
  CHECK_THROWS(add_weight_pack(table, nullptr, out, {2, 2, 1, 1}, Bf16WeightLayout::krsc, DType::bf16));
  CHECK(table.empty());
}

TEST_CASE("a prepacked copy is taken only in the dtype and layout the row reads, none means the row packs", "[cpu]") {
  int dummy = 0;
  const PackedWeights16 none;
  CHECK(packed_weights_for(none, DType::bf16, Bf16WeightLayout::krsc, "test") == nullptr);
  const PackedWeights16 krsc{&dummy, DType::bf16, Bf16WeightLayout::krsc};
  CHECK(packed_weights_for(krsc, DType::bf16, Bf16WeightLayout::krsc, "test") == &dummy);
  CHECK_THROWS_WITH(packed_weights_for(krsc, DType::bf16, Bf16WeightLayout::crsk, "conv x"),
                    Catch::Matchers::Contains("conv x") && Catch::Matchers::Contains("crsk"));
  CHECK_THROWS(packed_weights_for(krsc, DType::f16, Bf16WeightLayout::krsc, "test"));
}

TEST_CASE("each 16-bit conv row names the weight layout it reads per direction, f32 and cpu rows none", "[cpu]") {
  const Conv2dShape dense = Conv2dShape::make(4, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1);
  const Conv2dShape depthwise = Conv2dShape::make(4, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16);
  auto layout = [](ConvDir d, const char* name, DType t, const Conv2dShape& sh) {
    return conv2d_algo(d, name, t).packed_layout(sh);
  };
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(to_string(t));
    CHECK_FALSE(layout(ConvDir::forward, "cpu:im2col_gemm", t, dense).has_value());
    CHECK_FALSE(find_impl(conv2d_table(ConvDir::forward), Backend::cpu, t)->packed_layout(dense).has_value());
    if (!find_impl(conv2d_table(ConvDir::forward), Backend::cuda, t)) continue;  // a build without CUDA
    CHECK(layout(ConvDir::forward, "cuda:igemm_nhwc", t, dense) == Bf16WeightLayout::krsc);
    CHECK(layout(ConvDir::backward_data, "cuda:igemm_nhwc", t, dense) == Bf16WeightLayout::crsk);
    CHECK_FALSE(layout(ConvDir::backward_filter, "cuda:igemm_nhwc", t, dense).has_value());
    CHECK(layout(ConvDir::forward, "cuda:direct_nhwc", t, depthwise) == Bf16WeightLayout::rsk);
    CHECK(layout(ConvDir::backward_data, "cuda:direct_nhwc", t, depthwise) == Bf16WeightLayout::rsk);
    CHECK_FALSE(layout(ConvDir::backward_filter, "cuda:direct_nhwc", t, depthwise).has_value());
    // The default row: the direct kernels for depthwise, the GEMM elsewhere.
    const ConvAlgo& fwd = *find_impl(conv2d_table(ConvDir::forward), Backend::cuda, t);
    const ConvAlgo& bwd = *find_impl(conv2d_table(ConvDir::backward_data), Backend::cuda, t);
    CHECK(fwd.packed_layout(depthwise) == Bf16WeightLayout::rsk);
    CHECK(fwd.packed_layout(dense) == Bf16WeightLayout::krsc);
    CHECK(bwd.packed_layout(depthwise) == Bf16WeightLayout::rsk);
    CHECK(bwd.packed_layout(dense) == Bf16WeightLayout::crsk);
    for (ConvDir d : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
      CHECK_FALSE(find_impl(conv2d_table(d), Backend::cuda, DType::f32)->packed_layout(dense).has_value());
      if (const ConvAlgo* cudnn = find_impl(conv2d_table(d), Backend::cudnn, t)) {
        CHECK(cudnn->packed_layout(dense).has_value() == (d != ConvDir::backward_filter));
        if (d != ConvDir::backward_filter) CHECK(cudnn->packed_layout(dense) == Bf16WeightLayout::krsc);
      }
    }
  }
}

TEST_CASE("the cpu 16-bit conv rows ignore a given copy: the same bits with or without one", "[cpu]") {
  const Conv2dShape sh = Conv2dShape::make(2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1);
  const ExecContext ctx = ExecContext::cpu(1);
  std::vector<bf16> x(size_t(sh.N * sh.C * sh.H * sh.W));
  const std::vector<float> xf = test::random_floats(x.size(), 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(xf[i]);
  const std::vector<float> w = test::random_floats(size_t(sh.weight_numel()), 4), b = test::random_floats(4, 5);
  std::vector<bf16> y0(size_t(sh.N * sh.P * sh.Q * sh.K)), y1(y0.size());
  const std::vector<uint16_t> garbage(size_t(sh.weight_numel()), 0x7fc0);  // NaNs, were they read
  auto run = [&](std::vector<bf16>& y, const PackedWeights16& w16) {
    run_op(Backend::cpu, Conv2dForward{&ctx, sh, x.data(), w.data(), b.data(), y.data(), MathMode::fp32, w16});
  };
  run(y0, {});
  run(y1, {garbage.data(), DType::bf16, Bf16WeightLayout::krsc});
  CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 2) == 0);
}
