// Gradient norm, clipping and finiteness: known vectors, the threshold, and thread-count independence.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/exec_context.h"
#include "optim/clip.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

TEST_CASE("global grad norm of known vectors", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<float> a{3.0f, 4.0f}, b{1.0f, -2.0f, 2.0f, -4.0f};
  CHECK(global_grad_norm(ctx, a.data(), 2) == 5.0);
  CHECK(global_grad_norm(ctx, b.data(), 4) == 5.0);
  CHECK(global_grad_norm(ctx, nullptr, 0) == 0.0);
  // Many chunks: compare with a plain double sum.
  auto g = test::random_floats(100003, 7);
  double sum = 0.0;
  for (float x : g) sum += static_cast<double>(x) * x;
  CHECK(global_grad_norm(ctx, g.data(), static_cast<int64_t>(g.size())) == Approx(std::sqrt(sum)).epsilon(1e-12));
}

TEST_CASE("clip grad norm scales only above the threshold and returns the norm before clipping", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<float> g{3.0f, 4.0f};
  CHECK(clip_grad_norm(ctx, g.data(), 2, 10.0) == 5.0);
  CHECK(g == std::vector<float>{3.0f, 4.0f});
  CHECK(clip_grad_norm(ctx, g.data(), 2, 5.0) == 5.0);  // equal: not above
  CHECK(g == std::vector<float>{3.0f, 4.0f});
  CHECK(clip_grad_norm(ctx, g.data(), 2, 1.0) == 5.0);
  // scale = 1 / (5 + 1e-6)
  CHECK(g[0] == Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(g[1] == Approx(4.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(global_grad_norm(ctx, g.data(), 2) == Approx(1.0).epsilon(1e-6));
  CHECK_THROWS_AS(clip_grad_norm(ctx, g.data(), 2, 0.0), Error);
}

TEST_CASE("clip grad norm leaves non-finite gradients alone and reports the norm", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<float> g{3.0f, std::numeric_limits<float>::infinity()};
  CHECK(std::isinf(clip_grad_norm(ctx, g.data(), 2, 1.0)));
  CHECK(g[0] == 3.0f);
  g[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(clip_grad_norm(ctx, g.data(), 2, 1.0)));
  CHECK(g[0] == 3.0f);
}

TEST_CASE("grad norm and clipping are bitwise equal with one, two and three threads", "[cpu]") {
  const auto g0 = test::random_floats(200001, 11, -3.0f, 3.0f);
  const int64_t n = static_cast<int64_t>(g0.size());
  double norms[3];
  std::vector<float> clipped[3];
  for (int t = 0; t < 3; ++t) {
    ExecContext ctx = ExecContext::cpu(t + 1);
    norms[t] = global_grad_norm(ctx, g0.data(), n);
    clipped[t] = g0;
    CHECK(clip_grad_norm(ctx, clipped[t].data(), n, 1.0) == norms[t]);
  }
  CHECK(std::memcmp(&norms[0], &norms[1], sizeof(double)) == 0);
  CHECK(std::memcmp(&norms[0], &norms[2], sizeof(double)) == 0);
  CHECK(std::memcmp(clipped[0].data(), clipped[1].data(), g0.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(clipped[0].data(), clipped[2].data(), g0.size() * sizeof(float)) == 0);
  CHECK(clipped[0][0] != g0[0]);
}

TEST_CASE("all_finite finds a single NaN or infinity anywhere", "[cpu]") {
  auto x = test::random_floats(100000, 3);
  const int64_t n = static_cast<int64_t>(x.size());
  for (int threads : {1, 2}) {
    ExecContext ctx = ExecContext::cpu(threads);
    CHECK(all_finite(ctx, x.data(), n));
    auto y = x;
    y[n - 1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(all_finite(ctx, y.data(), n));
    y = x;
    y[n / 2] = -std::numeric_limits<float>::infinity();
    CHECK_FALSE(all_finite(ctx, y.data(), n));
  }
  ExecContext ctx = ExecContext::cpu(1);
  CHECK(all_finite(ctx, nullptr, 0));
}
