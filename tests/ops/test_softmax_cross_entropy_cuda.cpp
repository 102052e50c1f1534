// Softmax cross-entropy CUDA kernels against the CPU: sizes from N=1, K=1 up to K=1000, label
// smoothing, class weights, huge logits; the async batch loss equals the synchronous one and is
// reproducible; an out-of-range label gives NaN instead of trapping.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/softmax_cross_entropy.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;


// The batch loss one forward call returns through batch_loss.
static double forward_loss(Backend backend, SoftmaxCrossEntropyForward a) {
  double loss = 0.0;
  a.batch_loss = &loss;
  run_op(backend, a);
  return loss;
}

namespace {

using cnn::test::DeviceFloats;
using cnn::test::DeviceLabels;

std::vector<int32_t> random_labels(int64_t N, int64_t K, uint64_t seed) {
  const std::vector<float> u = test::random_floats(static_cast<size_t>(N), seed, 0.0f, 1.0f);
  std::vector<int32_t> labels;
  for (float v : u) labels.push_back(static_cast<int32_t>(std::min<int64_t>(K - 1, static_cast<int64_t>(v * K))));
  return labels;
}

bool within(double got, double want) {
  return std::fabs(got - want) <= kGpuVsCpu.atol + kGpuVsCpu.rtol * std::fabs(want);
}

}  // namespace

// The harness (test_backend_ops.cpp) compares both forwards with the reference; the capturable one
// must also be exactly the synchronous one rounded to float, which training relies on.
TEST_CASE("softmax cross entropy cuda async loss is the synchronous one rounded to float", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (int64_t K : {1, 7, 1000}) {
    for (bool weighted : {false, true}) {
      INFO("K=" << K << " weighted=" << weighted);
      const SoftmaxCrossEntropyShape sh{300, K, 0.1f};
      DeviceFloats z(test::random_floats(static_cast<size_t>(sh.N * K), 11, -3.0f, 3.0f));
      DeviceFloats w(test::random_floats(static_cast<size_t>(K), 12, 0.2f, 2.0f));
      DeviceFloats probs = DeviceFloats::poisoned(sh.N * K), async_loss = DeviceFloats::poisoned(1);
      DeviceLabels y(random_labels(sh.N, K, 13));
      const float* w_dev = weighted ? w.data() : nullptr;
      const double batch = forward_loss(Backend::cuda,
                                        {&cuda.ctx(), sh, z.data(), y.data(), w_dev, probs.data(), nullptr});
      run_op(Backend::cuda, SoftmaxCrossEntropyForwardAsync{&cuda.ctx(), sh, z.data(), y.data(), w_dev, probs.data(),
                                                            nullptr, async_loss.data()});
      cuda.synchronize();
      const float a = async_loss.get()[0], s = static_cast<float>(batch);
      CHECK(std::memcmp(&a, &s, sizeof(float)) == 0);
    }
  }
}

TEST_CASE("softmax cross entropy cuda batch loss repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  SoftmaxCrossEntropyShape sh;
  sh.N = 4097;
  sh.K = 10;
  sh.label_smoothing = 0.05f;
  DeviceFloats z(test::random_floats(static_cast<size_t>(sh.N * sh.K), 3, -5.0f, 5.0f));
  DeviceLabels y(random_labels(sh.N, sh.K, 4));
  DeviceFloats probs = DeviceFloats::poisoned(sh.N * sh.K);
  const double a =
      forward_loss(Backend::cuda, {&cuda.ctx(), sh, z.data(), y.data(), nullptr, probs.data(), nullptr});
  const double b =
      forward_loss(Backend::cuda, {&cuda.ctx(), sh, z.data(), y.data(), nullptr, probs.data(), nullptr});
  CHECK(std::memcmp(&a, &b, sizeof(double)) == 0);
}

TEST_CASE("softmax cross entropy cuda turns an out-of-range label into a NaN loss", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  SoftmaxCrossEntropyShape sh;
  sh.N = 4;
  sh.K = 3;
  const std::vector<float> logits = test::random_floats(12, 5);
  for (int32_t bad : {-1, 3, 1 << 30}) {
    INFO("bad label " << bad);
    std::vector<int32_t> labels{0, bad, 2, 1};
    DeviceFloats z(logits), probs = DeviceFloats::poisoned(12), loss = DeviceFloats::poisoned(4);
    DeviceFloats dz = DeviceFloats::poisoned(12), async_loss = DeviceFloats::poisoned(1);
    DeviceLabels y(labels);
    const double batch =
        forward_loss(Backend::cuda, {&cuda.ctx(), sh, z.data(), y.data(), nullptr, probs.data(), loss.data()});
    run_op(Backend::cuda, SoftmaxCrossEntropyForwardAsync{&cuda.ctx(), sh, z.data(), y.data(), nullptr, probs.data(), nullptr,
                                             async_loss.data()});
    run_op(Backend::cuda, SoftmaxCrossEntropyBackward{&cuda.ctx(), sh, probs.data(), y.data(), nullptr, dz.data()});
    cuda.synchronize();
    CHECK(std::isnan(batch));
    CHECK(std::isnan(async_loss.get()[0]));
    const std::vector<float> l = loss.get();
    CHECK(std::isnan(l[1]));
    // The other samples are unaffected.
    labels[1] = 0;
    std::vector<float> probs_ref(12), loss_ref(4);
    run_op(Backend::cpu, SoftmaxCrossEntropyForward{&cpu, sh, logits.data(), labels.data(), nullptr, probs_ref.data(),
                                      loss_ref.data()});
    CHECK(within(l[0], loss_ref[0]));
    CHECK(within(l[2], loss_ref[2]));
    CHECK(within(l[3], loss_ref[3]));
    CHECK(compare(probs.get(), probs_ref, kGpuVsCpu) == "");
  }
}
