// Softmax cross-entropy tests: hand values (plain, label smoothing, class weights), stability for
// huge logits, finite differences of the returned batch loss, the fast path against the reference,
// and the error naming a sample with an out-of-range label.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/softmax_cross_entropy.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;


// The batch loss one forward call returns through batch_loss.
static double forward_loss(Backend backend, SoftmaxCrossEntropyForward a) {
  double loss = 0.0;
  a.batch_loss = &loss;
  run_op(backend, a);
  return loss;
}

namespace {

constexpr cnn::test::Tolerance kHand{1e-6, 1e-6};

SoftmaxCrossEntropyShape make_shape(int64_t N, int64_t K, float label_smoothing = 0.0f) {
  SoftmaxCrossEntropyShape sh;
  sh.N = N;
  sh.K = K;
  sh.label_smoothing = label_smoothing;
  return sh;
}

struct Result {
  double loss;
  std::vector<float> probs, sample_loss, dlogits;
};

Result run(bool fast, const SoftmaxCrossEntropyShape& sh, const std::vector<float>& logits,
           const std::vector<int32_t>& labels, const float* weights) {
  auto ctx = ExecContext::cpu(2);
  Result r;
  r.probs.resize(static_cast<size_t>(sh.N * sh.K));
  r.sample_loss.resize(static_cast<size_t>(sh.N));
  r.dlogits.resize(static_cast<size_t>(sh.N * sh.K));
  if (fast) {
    r.loss = forward_loss(Backend::cpu, {&ctx, sh, logits.data(), labels.data(), weights, r.probs.data(),
                                               r.sample_loss.data()});
    run_op(Backend::cpu, SoftmaxCrossEntropyBackward{&ctx, sh, r.probs.data(), labels.data(), weights, r.dlogits.data()});
  } else {
    r.loss = softmax_cross_entropy_forward_reference(ctx, sh, logits.data(), labels.data(), weights,
                                                     r.probs.data(), r.sample_loss.data());
    softmax_cross_entropy_backward_reference(ctx, sh, r.probs.data(), labels.data(), weights, r.dlogits.data());
  }
  return r;
}

}  // namespace

TEST_CASE("softmax cross entropy matches hand-computed values", "[cpu]") {
  // logits [[0, ln 3], [0, 0]], labels [1, 0]: probs [[1/4, 3/4], [1/2, 1/2]].
  const std::vector<float> logits{0.0f, std::log(3.0f), 0.0f, 0.0f};
  const std::vector<int32_t> labels{1, 0};
  for (bool fast : {false, true}) {
    INFO((fast ? "cpu" : "reference"));
    // Plain: l = [ln(4/3), ln 2] = [0.2876821, 0.6931472], mean 0.4904146; dz = (p - onehot) / 2.
    Result r = run(fast, make_shape(2, 2), logits, labels, nullptr);
    CHECK(compare(r.probs, {0.25f, 0.75f, 0.5f, 0.5f}, kHand) == "");
    CHECK(compare(r.sample_loss, {0.2876821f, 0.6931472f}, kHand) == "");
    CHECK(r.loss == Approx(0.4904146).epsilon(1e-6));
    CHECK(compare(r.dlogits, {0.125f, -0.125f, -0.25f, 0.25f}, kHand) == "");
    // Smoothing 0.1: q0 = [0.05, 0.95], l0 = 0.05 ln 4 + 0.95 ln(4/3) = 0.3426127; l1 = ln 2 (p uniform).
    // dz = (p - q) / 2 = [[0.1, -0.1], [-0.225, 0.225]].
    r = run(fast, make_shape(2, 2, 0.1f), logits, labels, nullptr);
    CHECK(compare(r.sample_loss, {0.3426127f, 0.6931472f}, kHand) == "");
    CHECK(r.loss == Approx(0.5178799).epsilon(1e-6));
    CHECK(compare(r.dlogits, {0.1f, -0.1f, -0.225f, 0.225f}, kHand) == "");
    // Class weights [2, 1]: sample weights w[label] = [1, 2], loss (0.2876821 + 2 * 0.6931472) / 3
    // = 0.5579921; dz = w_n / 3 * (p - onehot) = [[1/12, -1/12], [-1/3, 1/3]].
    const std::vector<float> weights{2.0f, 1.0f};
    r = run(fast, make_shape(2, 2), logits, labels, weights.data());
    CHECK(compare(r.sample_loss, {0.2876821f, 0.6931472f}, kHand) == "");
    CHECK(r.loss == Approx(0.5579921).epsilon(1e-6));
    CHECK(compare(r.dlogits, {0.0833333f, -0.0833333f, -0.3333333f, 0.3333333f}, kHand) == "");
  }
}

TEST_CASE("softmax cross entropy stays finite for huge logits", "[cpu]") {
  // logits [1000, 0, -1000]: exp(1000) would overflow without the max subtraction.
  // Label 0: loss ln(1 + e^-1000 + e^-2000) = 0; label 1: loss 1000.
  const std::vector<float> logits{1000.0f, 0.0f, -1000.0f, 1000.0f, 0.0f, -1000.0f};
  for (bool fast : {false, true}) {
    Result r = run(fast, make_shape(2, 3), logits, {0, 1}, nullptr);
    CHECK(r.sample_loss[0] == Approx(0.0).margin(1e-6));
    CHECK(r.sample_loss[1] == Approx(1000.0).epsilon(1e-6));
    CHECK(r.loss == Approx(500.0).epsilon(1e-6));
    CHECK(compare(r.probs, {1, 0, 0, 1, 0, 0}, kHand) == "");
  }
}

TEST_CASE("softmax cross entropy backward is the gradient of the batch loss", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const int64_t N = 5, K = 7;
  const std::vector<int32_t> labels{3, 0, 6, 3, 1};
  const std::vector<double> weights = cnn::test::random_doubles(K, 141, 0.5, 2.0);
  struct Case {
    float smoothing;
    bool weighted;
  };
  for (const Case c : {Case{0.0f, false}, Case{0.1f, false}, Case{0.0f, true}, Case{0.1f, true}}) {
    INFO("label_smoothing=" << c.smoothing << " weighted=" << c.weighted);
    const auto sh = make_shape(N, K, c.smoothing);
    const double* w = c.weighted ? weights.data() : nullptr;
    std::vector<double> logits = cnn::test::random_doubles(N * K, 142, -3.0, 3.0);
    std::vector<double> probs(N * K), sample_loss(N), dlogits(N * K);
    auto loss = [&] {
      std::vector<double> p(N * K);
      return softmax_cross_entropy_forward_reference<double>(ctx, sh, logits.data(), labels.data(), w, p.data(),
                                                             nullptr);
    };
    softmax_cross_entropy_forward_reference(ctx, sh, logits.data(), labels.data(), w, probs.data(),
                                            sample_loss.data());
    softmax_cross_entropy_backward_reference(ctx, sh, probs.data(), labels.data(), w, dlogits.data());
    CHECK(compare(dlogits, cnn::test::numeric_gradient(logits, loss), cnn::test::kFiniteDifference) == "");
  }
}

TEST_CASE("softmax cross entropy cpu matches the float reference", "[cpu]") {
  struct Case {
    int64_t N, K;
    float smoothing;
    bool weighted;
  };
  const Case cases[] = {{1, 1, 0.0f, false}, {1, 10, 0.1f, true}, {7, 3, 0.0f, true},
                        {64, 7, 0.1f, false}, {300, 100, 0.2f, true}, {33, 1000, 0.0f, false}};
  for (const Case& c : cases) {
    INFO("N=" << c.N << " K=" << c.K << " smoothing=" << c.smoothing << " weighted=" << c.weighted);
    const auto sh = make_shape(c.N, c.K, c.smoothing);
    const std::vector<float> logits = cnn::test::random_floats(c.N * c.K, 151, -8.0f, 8.0f);
    const std::vector<float> weights = cnn::test::random_floats(c.K, 152, 0.5f, 2.0f);
    std::vector<int32_t> labels(c.N);
    for (int64_t n = 0; n < c.N; ++n) labels[n] = static_cast<int32_t>((n * 7 + 3) % c.K);
    const float* w = c.weighted ? weights.data() : nullptr;
    const Result ref = run(false, sh, logits, labels, w);
    const Result fast = run(true, sh, logits, labels, w);
    CHECK(fast.loss == Approx(ref.loss).epsilon(1e-5));
    CHECK(compare(fast.probs, ref.probs, cnn::test::kFastCpuVsReference) == "");
    CHECK(compare(fast.sample_loss, ref.sample_loss, cnn::test::kFastCpuVsReference) == "");
    CHECK(compare(fast.dlogits, ref.dlogits, cnn::test::kFastCpuVsReference) == "");
  }
}

TEST_CASE("softmax cross entropy names the sample with an out-of-range label", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  const auto sh = make_shape(3, 7);
  std::vector<float> logits(21, 0.0f), probs(21), loss(3);
  CHECK_THROWS_WITH(run_op(Backend::cpu, SoftmaxCrossEntropyForward{&ctx, sh, logits.data(), std::vector<int32_t>{0, 1, -1}.data(),
                                                      nullptr, probs.data(), loss.data()}),
                    Catch::Matchers::Contains("sample 2 has label -1, expected a class in [0, 7)"));
  CHECK_THROWS_WITH(softmax_cross_entropy_forward_reference<float>(ctx, sh, logits.data(),
                                                            std::vector<int32_t>{7, 1, 1}.data(), nullptr,
                                                            probs.data(), loss.data()),
                    Catch::Matchers::Contains("sample 0 has label 7"));
  CHECK_THROWS_WITH(run_op(Backend::cpu, SoftmaxCrossEntropyBackward{&ctx, sh, probs.data(), std::vector<int32_t>{0, 9, 1}.data(),
                                                       nullptr, logits.data()}),
                    Catch::Matchers::Contains("sample 1 has label 9"));
  const std::vector<float> zero_weights(7, 0.0f);
  CHECK_THROWS_WITH(run_op(Backend::cpu, SoftmaxCrossEntropyForward{&ctx, sh, logits.data(), std::vector<int32_t>{0, 1, 2}.data(),
                                                      zero_weights.data(), probs.data(), loss.data()}),
                    Catch::Matchers::Contains("sum to 0"));
}
