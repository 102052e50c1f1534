// The convolution algorithm registry: names unique and well formed per direction and dtype, lookups
// by dtype that fail with the valid names and a suggestion, which shapes the bf16 cuda rows take,
// and the CPU entries against the reference.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;

static const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

TEST_CASE("conv2d algorithm names are unique per direction and dtype and name their backend", "[cpu]") {
  for (ConvDir d : kDirs) {
    std::set<std::string> seen;
    for (const ConvAlgo& a : conv2d_algos(d)) {
      INFO(a.name << " " << to_string(d) << " " << to_string(a.dtype));
      CHECK(a.dir == d);
      CHECK(seen.insert(a.name + " " + to_string(a.dtype)).second);
      const std::string backend = a.name.substr(0, a.name.find(':'));
      CHECK(a.name.find(':') != std::string::npos);
      const char* own = a.backend == Backend::cpu ? "cpu" : a.backend == Backend::cuda ? "cuda" : "cudnn";
      CHECK(backend == own);
    }
    CHECK(seen.count("cpu:im2col_gemm f32") == 1);
    CHECK(seen.count("cpu:im2col_gemm bf16") == 1);
    CHECK(seen.count("cuda:igemm_nhwc bf16") == backend_built(Backend::cuda));
    CHECK(seen.count("cuda:direct_nhwc bf16") == backend_built(Backend::cuda));
    // Every backend has a default row in both dtypes (the cpu emulation, our bf16 kernels).
    for (Backend b : {Backend::cpu, Backend::cuda})
      for (DType t : {DType::f32, DType::bf16})
        CHECK((find_impl(conv2d_table(d), b, t) != nullptr) == backend_built(b));
  }
  CHECK(std::string(to_string(ConvDir::backward_filter)) == "backward_filter");
}

TEST_CASE("conv2d algorithm lookup of an unknown name lists the valid names and the closest", "[cpu]") {
  CHECK(conv2d_algo(ConvDir::forward, "cpu:im2col_gemm").backend == Backend::cpu);
  try {
    conv2d_algo(ConvDir::backward_data, "cpu:im2col_gem");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("unknown backward_data convolution algorithm 'cpu:im2col_gem'") != std::string::npos);
    CHECK(m.find("did you mean 'cpu:im2col_gemm'") != std::string::npos);
    CHECK(m.find("this build has: cpu:im2col_gemm") != std::string::npos);
  }
}

TEST_CASE("conv2d algorithm lookup names the dtype: a name may exist in f32 only or in both", "[cpu]") {
  CHECK(conv2d_algo(ConvDir::forward, "cpu:im2col_gemm").dtype == DType::f32);
  CHECK(conv2d_algo(ConvDir::forward, "cpu:im2col_gemm", DType::bf16).dtype == DType::bf16);
  CHECK(&conv2d_algo(ConvDir::backward_data, "cpu:im2col_gemm", DType::bf16) !=
        &conv2d_algo(ConvDir::backward_data, "cpu:im2col_gemm", DType::f32));
  const std::vector<std::string> names = conv2d_algo_names(ConvDir::forward);
  CHECK(std::count(names.begin(), names.end(), "cpu:im2col_gemm") == 1);  // each name once, whatever its dtypes
  CHECK_THROWS_WITH(conv2d_algo(ConvDir::backward_filter, "cpu:im2col_gem", DType::bf16),
                    Catch::Matchers::Contains("unknown backward_filter convolution algorithm 'cpu:im2col_gem', did you "
                                              "mean 'cpu:im2col_gemm'? (this build has for bf16: cpu:im2col_gemm"));
  if (!backend_built(Backend::cuda)) return;
  CHECK(std::count(names.begin(), names.end(), "cuda:igemm_nhwc") == 1);
  // An f32 strategy asked for in bf16, and a bf16 one in f32.
  CHECK_THROWS_WITH(conv2d_algo(ConvDir::forward, "cuda:implicit_gemm", DType::bf16),
                    Catch::Matchers::Contains("forward convolution algorithm 'cuda:implicit_gemm' has no bf16 "
                                              "implementation (it computes f32; bf16 ones in this build: "
                                              "cpu:im2col_gemm, cuda:igemm_nhwc, cuda:direct_nhwc"));
  CHECK_THROWS_WITH(conv2d_algo(ConvDir::forward, "cuda:direct_nhwc"),
                    Catch::Matchers::Contains("'cuda:direct_nhwc' has no f32 implementation (it computes bf16"));
}

// Which shapes the cuda bf16 rows take (a question about the shape alone, so asked without a GPU):
// direct_nhwc where every filter reads one input channel, igemm_nhwc where groups == 1, the default
// either, and no row for grouped convolutions with 1 < C/groups.
TEST_CASE("conv2d cuda bf16 rows implement groups 1 and C/groups 1, and grouped shapes have none", "[cpu]") {
  if (!backend_built(Backend::cuda)) {
    CNN_SKIP("this build has no CUDA rows");
  }
  const ExecContext cpu = ExecContext::cpu(1);
  struct Want {
    Conv2dShape sh;
    bool igemm, direct;
  };
  const Want wants[] = {
      {Conv2dShape::make(2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1), true, false},              // plain
      {Conv2dShape::make(2, 1, 12, 12, 8, 3, 3, 1, 1, 1, 1), true, true},               // C == 1 first layer
      {Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8), false, true},       // depthwise
      {Conv2dShape::make(2, 8, 9, 9, 16, 5, 5, 2, 2, 2, 2, 1, 1, 8), false, true},      // multiplier 2
      {Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2), false, false},      // grouped, C/groups 4
  };
  for (const Want& w : wants)
    for (ConvDir d : kDirs) {
      INFO(w.sh.to_string() << " " << to_string(d));
      CHECK(conv2d_algo(d, "cuda:igemm_nhwc", DType::bf16).can_implement(cpu, w.sh) == w.igemm);
      CHECK(conv2d_algo(d, "cuda:direct_nhwc", DType::bf16).can_implement(cpu, w.sh) == w.direct);
      const ConvAlgo* def = find_impl(conv2d_table(d), Backend::cuda, DType::bf16);
      REQUIRE(def);
      CHECK(def->can_implement(cpu, w.sh) == (w.igemm || w.direct));
      CHECK(def->deterministic);
    }
  // The direct rows' workspace (no device needed): the packed rsk copy, 256-byte aligned, for
  // forward and backward data; the filter gradient's slice partials, no copy.
  const Conv2dShape mult = wants[3].sh;  // K R S = 16 x 5 x 5: 800 bytes of bf16 weights
  CHECK(conv2d_algo(ConvDir::forward, "cuda:direct_nhwc", DType::bf16).workspace_bytes(cpu, mult) == 1024);
  CHECK(conv2d_algo(ConvDir::backward_data, "cuda:direct_nhwc", DType::bf16).workspace_bytes(cpu, mult) == 1024);
  CHECK(conv2d_algo(ConvDir::backward_filter, "cuda:direct_nhwc", DType::bf16).workspace_bytes(cpu, mult) ==
        (conv2d_direct_nhwc_bf16_workspace_bytes(mult) + 255) / 256 * 256);
}

TEST_CASE("conv2d cpu algorithms match the reference and write only their direction's outputs", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(2);
  const Conv2dShape sh = Conv2dShape::make(3, 4, 7, 6, 6, 3, 3, 2, 1, 1, 1, 1, 1, 2, true);
  const std::vector<float> x = test::random_floats(size_t(sh.N * sh.C * sh.H * sh.W), 1),
                           w = test::random_floats(size_t(sh.weight_numel()), 2), b = test::random_floats(6, 3),
                           dy = test::random_floats(size_t(sh.N * sh.K * sh.P * sh.Q), 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  conv2d_forward_reference<float>(ctx, sh, x.data(), w.data(), b.data(), y.data());
  conv2d_backward_reference<float>(ctx, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  std::vector<float> y2(y.size(), -7.f), dx2(dx.size(), -7.f), dw2(dw.size(), -7.f), db2(db.size(), -7.f);
  ConvOperands op{x.data(), w.data(), b.data(), y2.data(), dy.data(), dx2.data(), dw2.data(), db2.data()};
  const ConvAlgo& fwd = conv2d_algo(ConvDir::forward, "cpu:im2col_gemm");
  REQUIRE(fwd.can_implement(ctx, sh));
  fwd.run(ctx, sh, op);
  CHECK(test::compare(y2, y, test::kFastCpuVsReference) == "");
  CHECK(dx2[0] == -7.f);
  conv2d_algo(ConvDir::backward_data, "cpu:im2col_gemm").run(ctx, sh, op);
  CHECK(test::compare(dx2, dx, test::kFastCpuVsReference) == "");
  CHECK(dw2[0] == -7.f);
  conv2d_algo(ConvDir::backward_filter, "cpu:im2col_gemm").run(ctx, sh, op);
  CHECK(test::compare(dw2, dw, test::kFastCpuVsReference) == "");
  CHECK(test::compare(db2, db, test::kFastCpuVsReference) == "");
  // A 3x3 conv with padding needs column buffers; the pointwise one reads x directly.
  CHECK(fwd.workspace_bytes(ctx, sh) > 0);
  CHECK(fwd.workspace_bytes(ctx, Conv2dShape::make(2, 4, 5, 5, 3, 1, 1)) == 0);
}
