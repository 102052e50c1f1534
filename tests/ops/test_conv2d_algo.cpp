// The convolution algorithm registry: names unique and well formed per direction, lookups that
// fail with the valid names and a suggestion, and the CPU entries against the reference.
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;

static const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

TEST_CASE("conv2d algorithm names are unique per direction and dtype and name their backend", "[cpu]") {
  for (ConvDir d : kDirs) {
    std::set<std::string> seen;
    for (const ConvAlgo& a : conv2d_algos(d)) {
      INFO(a.name << " " << to_string(a.dtype) << " " << to_string(d));
      CHECK(a.dir == d);
      CHECK(seen.insert(a.name + " " + to_string(a.dtype)).second);
      const std::string backend = a.name.substr(0, a.name.find(':'));
      CHECK(a.name.find(':') != std::string::npos);
      const char* own = a.backend == Backend::cpu ? "cpu" : a.backend == Backend::cuda ? "cuda" : "cudnn";
      CHECK(backend == own);
    }
    CHECK(seen.count("cpu:im2col_gemm f32") == 1);
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
