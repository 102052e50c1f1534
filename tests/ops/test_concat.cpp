// Concat tests: a hand-laid-out case (inputs interleave per sample), finite differences, the fast
// path against the reference over generated shapes, and shape checks.
#include <vector>

#include "core/error.h"
#include "ops/concat.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"
#include "support/views.h"

using namespace cnn;
using cnn::test::compare;

namespace {

ConcatShape make_shape(int64_t N, int64_t HW, std::vector<int64_t> channels) {
  ConcatShape sh;
  sh.N = N;
  sh.HW = HW;
  sh.channels = std::move(channels);
  return sh;
}

}  // namespace

TEST_CASE("concat lays inputs out channel after channel within each sample", "[cpu]") {
  // N=2, HW=2, channels [1, 2]. x0 = [n0: 1 2 | n1: 3 4], x1 = [n0: 10 11 12 13 | n1: 14 15 16 17].
  // y = [n0: 1 2 10 11 12 13 | n1: 3 4 14 15 16 17]; backward of dy = y gives back x0 and x1.
  const ConcatShape sh = make_shape(2, 2, {1, 2});
  CHECK(sh.total_channels() == 3);
  const std::vector<float> x0{1, 2, 3, 4}, x1{10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<float> expected{1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17};
  const float* xs[] = {x0.data(), x1.data()};
  auto ctx = ExecContext::cpu(2);
  for (bool fast : {false, true}) {
    INFO((fast ? "cpu" : "reference"));
    std::vector<float> y(12), d0(4), d1(8, -1.0f);
    float* dxs[] = {d0.data(), d1.data()};
    float* only_second[] = {nullptr, d1.data()};
    if (fast) {
      run_op(Backend::cpu, ConcatForward{&ctx, sh, test::views(xs, sh.channels.size()).data(), y.data()});
      run_op(Backend::cpu, ConcatBackward{&ctx, sh, y.data(), test::views(dxs, sh.channels.size()).data()});
      run_op(Backend::cpu, ConcatBackward{&ctx, sh, y.data(), test::views(only_second, sh.channels.size()).data()});
    } else {
      concat_forward_reference(ctx, sh, xs, y.data());
      concat_backward_reference(ctx, sh, y.data(), dxs);
      concat_backward_reference(ctx, sh, y.data(), only_second);
    }
    CHECK(y == expected);
    CHECK(d0 == x0);
    CHECK(d1 == x1);
  }
}

TEST_CASE("concat reference backward matches finite differences", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const ConcatShape sh = make_shape(2, 3, {2, 1, 3});
  std::vector<std::vector<double>> x;
  for (size_t i = 0; i < 3; ++i) x.push_back(cnn::test::random_doubles(2 * sh.channels[i] * 3, 110 + i));
  const size_t ny = 2 * 6 * 3;
  const std::vector<double> r = cnn::test::random_doubles(ny, 114);
  auto loss = [&] {
    const double* xs[] = {x[0].data(), x[1].data(), x[2].data()};
    std::vector<double> y(ny);
    concat_forward_reference(ctx, sh, xs, y.data());
    double s = 0;
    for (size_t i = 0; i < ny; ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<std::vector<double>> dx;
  for (auto& v : x) dx.emplace_back(v.size());
  double* dxs[] = {dx[0].data(), dx[1].data(), dx[2].data()};
  concat_backward_reference(ctx, sh, r.data(), dxs);
  for (size_t i = 0; i < 3; ++i)
    CHECK(compare(dx[i], cnn::test::numeric_gradient(x[i], loss), cnn::test::kFiniteDifference) == "");
}

TEST_CASE("concat cpu matches the float reference over generated shapes", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  const ConcatShape shapes[] = {make_shape(1, 1, {1}), make_shape(3, 5, {2, 7, 1}),
                                make_shape(2, 49, {16, 32, 8, 3}), make_shape(8, 256, {32, 64})};
  for (const ConcatShape& sh : shapes) {
    INFO("N=" << sh.N << " HW=" << sh.HW << " inputs=" << sh.channels.size());
    std::vector<std::vector<float>> in;
    std::vector<const float*> xs;
    for (size_t i = 0; i < sh.channels.size(); ++i)
      in.push_back(cnn::test::random_floats(static_cast<size_t>(sh.N * sh.channels[i] * sh.HW), 120 + i));
    for (auto& v : in) xs.push_back(v.data());
    const size_t ny = static_cast<size_t>(sh.N * sh.total_channels() * sh.HW);
    const std::vector<float> dy = cnn::test::random_floats(ny, 130);
    std::vector<float> y_ref(ny), y(ny);
    concat_forward_reference(ctx, sh, xs.data(), y_ref.data());
    run_op(Backend::cpu, ConcatForward{&ctx, sh, test::views(xs.data(), sh.channels.size()).data(), y.data()});
    CHECK(compare(y, y_ref, cnn::test::kFastCpuVsReference) == "");
    for (size_t i = 0; i < sh.channels.size(); ++i) {
      std::vector<std::vector<float>> dx_ref, dx;
      std::vector<float*> p_ref, p;
      for (auto& v : in) {
        dx_ref.emplace_back(v.size(), 0.0f);
        dx.emplace_back(v.size(), 0.0f);
      }
      for (size_t j = 0; j < in.size(); ++j) {  // request every gradient but the i-th
        p_ref.push_back(j == i ? nullptr : dx_ref[j].data());
        p.push_back(j == i ? nullptr : dx[j].data());
      }
      concat_backward_reference(ctx, sh, dy.data(), p_ref.data());
      run_op(Backend::cpu, ConcatBackward{&ctx, sh, dy.data(), test::views(p.data(), sh.channels.size()).data()});
      for (size_t j = 0; j < in.size(); ++j) CHECK(compare(dx[j], dx_ref[j], cnn::test::kFastCpuVsReference) == "");
    }
  }
}

TEST_CASE("concat rejects empty inputs", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  float v = 0;
  const float* xs[] = {&v, &v};
  CHECK_THROWS_WITH(run_op(Backend::cpu, ConcatForward{&ctx, make_shape(1, 1, {}), test::views(xs, 2).data(), &v}), Catch::Matchers::Contains("needs at least one input"));
  CHECK_THROWS_WITH(concat_forward_reference(ctx, make_shape(1, 1, {1, 0}), xs, &v),
                    Catch::Matchers::Contains("input 1 has 0 channels"));
  CHECK_THROWS_WITH(run_op(Backend::cpu, ConcatForward{&ctx, make_shape(1, 0, {1}), test::views(xs, 2).data(), &v}), Catch::Matchers::Contains("must be positive"));
}
