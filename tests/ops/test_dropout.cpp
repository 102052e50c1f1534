// Dropout tests: the mask is exactly the Philox rule of dropout.h on both paths (any offset, also
// not a multiple of 4), offsets and seeds change it, the kept fraction, p = 0, scaling, and the
// gradient with a fixed mask.
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/dropout.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

DropoutParams params(float p, uint64_t seed, uint64_t offset) {
  DropoutParams prm;
  prm.p = p;
  prm.seed = seed;
  prm.offset = offset;
  return prm;
}

std::vector<float> forward_cpu(const DropoutParams& prm, const std::vector<float>& x) {
  auto ctx = ExecContext::cpu(2);
  std::vector<float> y(x.size(), -7.0f);
  run_op(Backend::cpu, DropoutForward{&ctx, prm, static_cast<int64_t>(x.size()), x.data(), y.data()});
  return y;
}

}  // namespace

TEST_CASE("dropout drops exactly the elements whose philox draw is below p and scales the rest", "[cpu]") {
  // x = 3 everywhere, p = 0.25: kept elements become 3 / 0.75 = 4, dropped ones 0, and element i is
  // dropped iff philox_uniform(seed, dropout stream, offset + i) < p (the contract in dropout.h).
  const int64_t n = 64;
  const DropoutParams prm = params(0.25f, 7, 5);
  const std::vector<float> x(n, 3.0f);
  auto ctx = ExecContext::cpu(2);
  std::vector<float> y_ref(n), y(n);
  dropout_forward_reference(ctx, prm, n, x.data(), y_ref.data());
  run_op(Backend::cpu, DropoutForward{&ctx, prm, n, x.data(), y.data()});
  int dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool drop = philox_uniform(7, static_cast<uint64_t>(RngStream::dropout), 5 + i) < 0.25f;
    dropped += drop;
    CHECK(dropout_keep(prm, i) == !drop);
    CHECK(y_ref[i] == (drop ? 0.0f : 4.0f));
    CHECK(y[i] == (drop ? 0.0f : 4.0f));
  }
  CHECK(dropped > 0);  // the check above saw both outcomes
  CHECK(dropped < n);
}

TEST_CASE("dropout cpu and reference drop the same elements for the same seed and offset", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  const uint64_t offsets[] = {0, 1, 2, 3, 5, (uint64_t{1} << 40) + 3};
  const int64_t sizes[] = {1, 2, 3, 7, 100, (int64_t{1} << 16) + 3};
  for (uint64_t offset : offsets) {
    for (int64_t n : sizes) {
      INFO("offset=" << offset << " n=" << n);
      const DropoutParams prm = params(0.4f, 1234, offset);
      const std::vector<float> x = cnn::test::random_floats(n, 81), dy = cnn::test::random_floats(n, 82);
      std::vector<float> y_ref(n), dx_ref(n), dx(n);
      dropout_forward_reference(ctx, prm, n, x.data(), y_ref.data());
      dropout_backward_reference(ctx, prm, n, dy.data(), dx_ref.data());
      run_op(Backend::cpu, DropoutBackward{&ctx, prm, n, dy.data(), dx.data()});
      CHECK(compare(forward_cpu(prm, x), y_ref, cnn::test::kExact) == "");
      CHECK(compare(dx, dx_ref, cnn::test::kExact) == "");
    }
  }
}

TEST_CASE("dropout element i with offset o is element i+k with offset o-k", "[cpu]") {
  // The mask depends on the counter offset + i only, so a call on a tail continues the same mask.
  const std::vector<float> x = cnn::test::random_floats(1003, 83);
  const std::vector<float> full = forward_cpu(params(0.5f, 9, 10), x);
  for (size_t k : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{7}}) {
    const std::vector<float> tail_x(x.begin() + static_cast<long>(k), x.end());
    const std::vector<float> expected(full.begin() + static_cast<long>(k), full.end());
    CHECK(compare(forward_cpu(params(0.5f, 9, 10 + k), tail_x), expected, cnn::test::kExact) == "");
  }
}

TEST_CASE("a different offset or seed gives a different dropout mask", "[cpu]") {
  const std::vector<float> x(256, 1.0f);
  const std::vector<float> base = forward_cpu(params(0.5f, 3, 0), x);
  CHECK(base != forward_cpu(params(0.5f, 3, 256), x));
  CHECK(base != forward_cpu(params(0.5f, 3, 1), x));
  CHECK(base != forward_cpu(params(0.5f, 4, 0), x));
  CHECK(base == forward_cpu(params(0.5f, 3, 0), x));
}

TEST_CASE("dropout keeps a fraction near 1 - p of a large tensor", "[cpu]") {
  // n = 2^20, p = 0.3: the kept fraction has standard deviation sqrt(0.21 / n) = 4.5e-4.
  const int64_t n = int64_t{1} << 20;
  const std::vector<float> x(n, 1.0f);
  const std::vector<float> y = forward_cpu(params(0.3f, 17, 99), x);
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      REQUIRE(v == 1.0f / (1.0f - 0.3f));
    }
  }
  CHECK(static_cast<double>(kept) / n == Approx(0.7).margin(0.003));
}

TEST_CASE("dropout with p = 0 is the identity", "[cpu]") {
  auto ctx = ExecContext::cpu(2);
  const int64_t n = 1001;
  const std::vector<float> x = cnn::test::random_floats(n, 84);
  const DropoutParams prm = params(0.0f, 5, 3);
  std::vector<float> y_ref(n), dx(n);
  dropout_forward_reference(ctx, prm, n, x.data(), y_ref.data());
  CHECK(compare(y_ref, x, cnn::test::kExact) == "");
  CHECK(compare(forward_cpu(prm, x), x, cnn::test::kExact) == "");
  run_op(Backend::cpu, DropoutBackward{&ctx, prm, n, x.data(), dx.data()});
  CHECK(compare(dx, x, cnn::test::kExact) == "");
}

TEST_CASE("dropout backward matches finite differences with a fixed mask", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const int64_t n = 50;
  const DropoutParams prm = params(0.35f, 21, 6);
  std::vector<double> x = cnn::test::random_doubles(n, 85);
  const std::vector<double> r = cnn::test::random_doubles(n, 86);
  auto loss = [&] {
    std::vector<double> y(n);
    dropout_forward_reference(ctx, prm, n, x.data(), y.data());
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<double> dx(n);
  dropout_backward_reference(ctx, prm, n, r.data(), dx.data());
  CHECK(compare(dx, cnn::test::numeric_gradient(x, loss), cnn::test::kFiniteDifference) == "");
}

TEST_CASE("dropout rejects a drop probability below 0 or from 1 up", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  float v = 1;
  CHECK_THROWS_WITH(run_op(Backend::cpu, DropoutForward{&ctx, params(1.0f, 0, 0), 1, &v, &v}), Catch::Matchers::Contains("p must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(dropout_backward_reference(ctx, params(-0.1f, 0, 0), int64_t{1}, &v, &v),
                    Catch::Matchers::Contains("p must be in [0, 1)"));
}
