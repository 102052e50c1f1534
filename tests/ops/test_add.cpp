// Add tests: hand values, gradient by finite differences, the fast path against the reference
// (many inputs, odd sizes, y aliasing an input), and argument checks.
#include <vector>

#include "core/error.h"
#include "ops/add.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"
#include "support/views.h"

using namespace cnn;
using cnn::test::compare;

TEST_CASE("add sums its inputs and copies dy to every requested gradient", "[cpu]") {
  // [1,2,3] + [10,20,30] + [100,200,300] = [111,222,333]; each dx equals dy; a null dx is skipped.
  const std::vector<float> a{1, 2, 3}, b{10, 20, 30}, c{100, 200, 300}, dy{1, -2, 0.5f};
  const float* xs[] = {a.data(), b.data(), c.data()};
  auto ctx = ExecContext::cpu(2);
  for (bool fast : {false, true}) {
    INFO((fast ? "cpu" : "reference"));
    std::vector<float> y(3), da(3, 9.0f), dc(3, 9.0f);
    float* dxs[] = {da.data(), nullptr, dc.data()};
    if (fast) {
      run_op(Backend::cpu, AddForward{&ctx, 3, 3, test::views(xs, 3).data(), y.data()});
      run_op(Backend::cpu, AddBackward{&ctx, 3, 3, dy.data(), test::views(dxs, 3).data()});
    } else {
      add_forward_reference(ctx, 3, 3, xs, y.data());
      add_backward_reference(ctx, 3, 3, dy.data(), dxs);
    }
    CHECK(y == std::vector<float>{111, 222, 333});
    CHECK(da == dy);
    CHECK(dc == dy);
  }
}

TEST_CASE("add reference backward matches finite differences", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const int64_t n = 11;
  std::vector<std::vector<double>> x{cnn::test::random_doubles(n, 91), cnn::test::random_doubles(n, 92),
                                     cnn::test::random_doubles(n, 93)};
  const std::vector<double> r = cnn::test::random_doubles(n, 94);
  auto loss = [&] {
    const double* xs[] = {x[0].data(), x[1].data(), x[2].data()};
    std::vector<double> y(n);
    add_forward_reference(ctx, n, 3, xs, y.data());
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<std::vector<double>> dx(3, std::vector<double>(n));
  double* dxs[] = {dx[0].data(), dx[1].data(), dx[2].data()};
  add_backward_reference(ctx, n, 3, r.data(), dxs);
  for (int k = 0; k < 3; ++k)
    CHECK(compare(dx[k], cnn::test::numeric_gradient(x[k], loss), cnn::test::kFiniteDifference) == "");
}

TEST_CASE("add cpu matches the float reference, with y aliasing an input", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{100003}}) {
    for (int count : {1, 2, 3, 5}) {
      INFO("n=" << n << " count=" << count);
      std::vector<std::vector<float>> in;
      std::vector<const float*> xs;
      for (int k = 0; k < count; ++k) in.push_back(cnn::test::random_floats(n, 100 + k));
      for (auto& v : in) xs.push_back(v.data());
      const std::vector<float> dy = cnn::test::random_floats(n, 99);
      std::vector<float> y_ref(n), y(n);
      add_forward_reference(ctx, n, count, xs.data(), y_ref.data());
      run_op(Backend::cpu, AddForward{&ctx, n, count, test::views(xs.data(), count).data(), y.data()});
      CHECK(compare(y, y_ref, cnn::test::kFastCpuVsReference) == "");
      // In place into the last input.
      run_op(Backend::cpu, AddForward{&ctx, n, count, test::views(xs.data(), count).data(), in.back().data()});
      CHECK(compare(in.back(), y_ref, cnn::test::kFastCpuVsReference) == "");
      std::vector<std::vector<float>> dx(count, std::vector<float>(n, 5.0f));
      std::vector<float*> dxs;
      for (auto& v : dx) dxs.push_back(v.data());
      run_op(Backend::cpu, AddBackward{&ctx, n, count, dy.data(), test::views(dxs.data(), count).data()});
      for (auto& v : dx) CHECK(compare(v, dy, cnn::test::kExact) == "");
    }
  }
}

TEST_CASE("add rejects an empty input list and negative sizes", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  float v = 0;
  const float* xs[] = {&v};
  CHECK_THROWS_WITH(run_op(Backend::cpu, AddForward{&ctx, 1, 0, test::views(xs, 0).data(), &v}), Catch::Matchers::Contains("needs at least one input, got 0"));
  CHECK_THROWS_WITH(add_forward_reference(ctx, int64_t{-1}, 1, xs, &v),
                    Catch::Matchers::Contains("element count must be non-negative"));
}
