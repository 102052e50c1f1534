// Activation tests: hand values for every kind, finite differences of the double reference,
// and the fast CPU path against the float reference (including in-place use).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

const ActivationKind kAllKinds[] = {ActivationKind::relu, ActivationKind::leaky_relu, ActivationKind::elu,
                                    ActivationKind::sigmoid, ActivationKind::tanh};

struct HandCase {
  ActivationParams params;
  std::vector<float> y, dx;  // for x = {-2, -0.5, 0, 0.5, 2} and dy = 1
};

}  // namespace

TEST_CASE("activations match hand-computed values on both cpu paths", "[cpu]") {
  const std::vector<float> x{-2.0f, -0.5f, 0.0f, 0.5f, 2.0f};
  const std::vector<float> ones(5, 1.0f);
  const std::vector<HandCase> cases{
      // relu: max(x, 0); gradient 1 for x > 0 and 0 at x = 0.
      {{ActivationKind::relu, 0.0f}, {0, 0, 0, 0.5f, 2}, {0, 0, 0, 1, 1}},
      // leaky relu, alpha 0.1: 0.1 x below zero; gradient 0.1 there and at 0.
      {{ActivationKind::leaky_relu, 0.1f}, {-0.2f, -0.05f, 0, 0.5f, 2}, {0.1f, 0.1f, 0.1f, 1, 1}},
      // elu, alpha 1: e^x - 1 = -0.8646647, -0.3934693, 0; gradient e^x = 0.1353353, 0.6065307, 1.
      {{ActivationKind::elu, 1.0f}, {-0.8646647f, -0.3934693f, 0, 0.5f, 2}, {0.1353353f, 0.6065307f, 1, 1, 1}},
      // sigmoid 1/(1+e^-x); gradient y (1 - y).
      {{ActivationKind::sigmoid, 0.0f},
       {0.1192029f, 0.3775407f, 0.5f, 0.6224593f, 0.8807971f},
       {0.1049936f, 0.2350037f, 0.25f, 0.2350037f, 0.1049936f}},
      // tanh; gradient 1 - y^2.
      {{ActivationKind::tanh, 0.0f},
       {-0.9640276f, -0.4621172f, 0, 0.4621172f, 0.9640276f},
       {0.0706508f, 0.7864477f, 1, 0.7864477f, 0.0706508f}},
  };
  auto ctx = ExecContext::cpu(2);
  for (const auto& c : cases) {
    INFO(to_string(c.params.kind));
    std::vector<float> y(5), dx(5);
    activation_forward_reference(ctx, c.params, 5, x.data(), y.data());
    activation_backward_reference(ctx, c.params, 5, x.data(), y.data(), ones.data(), dx.data());
    CHECK(compare(y, c.y, {1e-6, 1e-6}) == "");
    CHECK(compare(dx, c.dx, {1e-6, 1e-6}) == "");
    run_op(Backend::cpu, ActivationForward{&ctx, c.params, 5, x.data(), y.data()});
    run_op(Backend::cpu, ActivationBackward{&ctx, c.params, 5, x.data(), y.data(), ones.data(), dx.data()});
    CHECK(compare(y, c.y, {1e-6, 1e-6}) == "");
    CHECK(compare(dx, c.dx, {1e-6, 1e-6}) == "");
  }
  CHECK(std::string(to_string(ActivationKind::leaky_relu)) == "leaky_relu");
}

TEST_CASE("activation reference backward matches finite differences", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const int64_t n = 37;
  // Keep x away from 0, where relu-like kinds have a kink the central difference would straddle.
  std::vector<double> x = cnn::test::random_doubles(n, 11, -2.0, 2.0);
  for (auto& v : x) v += v >= 0 ? 0.05 : -0.05;
  const std::vector<double> r = cnn::test::random_doubles(n, 12);
  for (ActivationKind kind : kAllKinds) {
    INFO(to_string(kind));
    const ActivationParams prm{kind, 0.3f};
    std::vector<double> y(n), dx(n);
    auto loss = [&] {
      std::vector<double> out(n);
      activation_forward_reference(ctx, prm, n, x.data(), out.data());
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += out[i] * r[i];
      return s;
    };
    activation_forward_reference(ctx, prm, n, x.data(), y.data());
    activation_backward_reference(ctx, prm, n, x.data(), y.data(), r.data(), dx.data());
    const std::vector<double> numeric = cnn::test::numeric_gradient(x, loss);
    CHECK(compare(dx, numeric, cnn::test::kFiniteDifference) == "");
  }
}

TEST_CASE("activation cpu matches the float reference, in place too", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1000}, int64_t{100003}}) {
    const std::vector<float> x = cnn::test::random_floats(n, 21, -6.0f, 6.0f);
    const std::vector<float> dy = cnn::test::random_floats(n, 22);
    for (ActivationKind kind : kAllKinds) {
      INFO(to_string(kind) << " n=" << n);
      const ActivationParams prm{kind, 0.2f};
      std::vector<float> y_ref(n), y(n), dx_ref(n), dx(n);
      activation_forward_reference(ctx, prm, n, x.data(), y_ref.data());
      activation_backward_reference(ctx, prm, n, x.data(), y_ref.data(), dy.data(), dx_ref.data());
      run_op(Backend::cpu, ActivationForward{&ctx, prm, n, x.data(), y.data()});
      run_op(Backend::cpu, ActivationBackward{&ctx, prm, n, x.data(), y.data(), dy.data(), dx.data()});
      CHECK(compare(y, y_ref, cnn::test::kFastCpuVsReference) == "");
      CHECK(compare(dx, dx_ref, cnn::test::kFastCpuVsReference) == "");
      std::vector<float> inplace = x;  // y aliasing x
      run_op(Backend::cpu, ActivationForward{&ctx, prm, n, inplace.data(), inplace.data()});
      CHECK(compare(inplace, y_ref, cnn::test::kFastCpuVsReference) == "");
      std::vector<float> grad = dy;  // dx aliasing dy
      run_op(Backend::cpu, ActivationBackward{&ctx, prm, n, x.data(), y.data(), grad.data(), grad.data()});
      CHECK(compare(grad, dx_ref, cnn::test::kFastCpuVsReference) == "");
    }
  }
}

TEST_CASE("activation rejects a negative element count", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  float v = 0;
  CHECK_THROWS_WITH(run_op(Backend::cpu, ActivationForward{&ctx, {}, -1, &v, &v}), Catch::Matchers::Contains("element count must be non-negative"));
  CHECK_THROWS_AS(activation_backward_reference(ctx, ActivationParams{}, int64_t{-3}, &v, &v, &v, &v), Error);
}

// The expected output of BiasActivationForward, built from the other ops: a bias add by hand, then
// the activation's own cpu row.
static std::vector<float> bias_then_activation(const ExecContext& ctx, const ActivationParams& prm, int64_t outer,
                                               int64_t channels, int64_t inner, const std::vector<float>& y,
                                               const std::vector<float>& b) {
  std::vector<float> sum = y;
  if (!b.empty())
    for (int64_t i = 0; i < int64_t(sum.size()); ++i) sum[size_t(i)] += b[size_t(i / inner % channels)];
  std::vector<float> out(sum.size());
  run_op(Backend::cpu, ActivationForward{&ctx, prm, int64_t(sum.size()), sum.data(), out.data()});
  return out;
}

TEST_CASE("bias and activation forward on the cpu is a bias add, then the activation, bit for bit", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  struct Dims {
    int64_t outer, channels, inner;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{2, 3, 5}, Dims{3, 4, 8}, Dims{4, 16, 1024}}) {
    const int64_t n = d.outer * d.channels * d.inner;
    const std::vector<float> y0 = cnn::test::random_floats(n, 31, -3.0f, 3.0f);
    const std::vector<float> b = cnn::test::random_floats(d.channels, 32, -1.0f, 1.0f);
    for (ActivationKind kind : kAllKinds)
      for (bool with_bias : {true, false}) {
        INFO(to_string(kind) << " " << d.outer << "x" << d.channels << "x" << d.inner << (with_bias ? " bias" : ""));
        const ActivationParams prm{kind, 0.2f};
        const std::vector<float> none;
        const std::vector<float> want = bias_then_activation(ctx, prm, d.outer, d.channels, d.inner, y0, with_bias ? b : none);
        std::vector<float> y = y0;
        run_op(Backend::cpu, BiasActivationForward{&ctx, prm, d.outer, d.channels, d.inner,
                                                   with_bias ? ConstView(b.data()) : ConstView(nullptr), y.data()});
        CHECK(compare(y, want, cnn::test::Tolerance{0, 0}) == "");
      }
  }
  float v = 0;
  CHECK_THROWS_WITH(run_op(Backend::cpu, BiasActivationForward{&ctx, {}, 1, -2, 1, nullptr, &v}),
                    Catch::Matchers::Contains("dimensions must be non-negative"));
}
