// The fused CUDA optimizer update and device-side clipping against the CPU: every optimizer for
// several steps over segments with gaps, mixed decay and chunk-crossing sizes (aligned and
// misaligned buffers), checkpoint state to and from GPU slots, and the clip norm (within tolerance
// of the CPU, bitwise equal run to run, async equal to sync).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

namespace {

using cnn::test::DeviceFloats;
struct Config {
  const char* name;
  OptimizerSpec spec;
};

OptimizerSpec spec_of(const std::string& type, double momentum, bool nesterov = false) {
  OptimizerSpec s;
  s.type = type;
  s.momentum = momentum;
  s.nesterov = nesterov;
  s.weight_decay = 0.01;
  s.lr = 0.01;
  return s;
}

std::vector<Config> all_configs() {
  return {{"sgd", spec_of("sgd", 0.0)},
          {"sgd momentum", spec_of("sgd", 0.9)},
          {"sgd nesterov", spec_of("sgd", 0.9, true)},
          {"adam", spec_of("adam", 0.0)},
          {"adamw", spec_of("adamw", 0.0)},
          {"rmsprop", spec_of("rmsprop", 0.0)},
          {"rmsprop momentum", spec_of("rmsprop", 0.5)}};
}

// Gaps between segments (never updated), mixed decay, sizes that cross the kernel's chunks, an
// empty segment, and segments listed out of order.
std::vector<ParamSegment> segments_with_gaps(int64_t& total) {
  std::vector<ParamSegment> segs{{"conv1.weight", 3, 20000, true, Shape{20, 1000}},
                                 {"conv1.bias", 20003, 7, false},
                                 {"bn.weight", 20010, 5, false},
                                 {"empty", 20015, 0, true},
                                 {"fc.weight", 20021, 9001, true},
                                 {"fc.bias", 29022, 3, false}};
  std::swap(segs[0], segs[4]);
  total = 29030;
  return segs;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("optimizer cuda steps match the cpu optimizer for every rule", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(2);
  int64_t total = 0;
  const std::vector<ParamSegment> segs = segments_with_gaps(total);
  for (const Config& cfg : all_configs()) {
    for (int64_t offset : {0, 1}) {  // 1: every buffer misaligned, the scalar path
      INFO(cfg.name << ", pointer offset " << offset);
      auto host = make_optimizer(cfg.spec, segs, total);
      auto dev = make_optimizer(cfg.spec, segs, total, Device::cuda);
      CHECK(dev->device() == Device::cuda);
      std::vector<float> params = test::random_floats(static_cast<size_t>(total), 1, -2.0f, 2.0f);
      const std::vector<float> initial = params;
      DeviceFloats dparams(params, offset);
      for (int step = 0; step < 5; ++step) {
        const std::vector<float> grads = test::random_floats(static_cast<size_t>(total), 10 + step);
        const double lr = 0.01 * (1.0 + 0.5 * step);
        host->step(cpu, params.data(), grads.data(), lr);
        DeviceFloats dgrads(grads, offset);
        dev->step(cuda.ctx(), dparams.data(), dgrads.data(), lr);
        cuda.synchronize();
      }
      CHECK(dev->step_count() == 5);
      const std::vector<float> got = dparams.get();
      CHECK(compare(got, params, kGpuVsCpu) == "");
      for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{20015}, int64_t{20020}, int64_t{29025}, total - 1})
        CHECK(got[static_cast<size_t>(i)] == initial[static_cast<size_t>(i)]);  // in no segment: untouched
      for (const std::string& slot : host->slot_names()) {
        INFO("slot " << slot);
        CHECK(dev->slot(slot).device() == Device::cuda);
        CHECK(compare(dev->slot(slot).to_vector(), host->slot(slot).to_vector(), kGpuVsCpu) == "");
      }
    }
  }
}

TEST_CASE("optimizer cuda state tensors round-trip through the cpu and resume", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  int64_t total = 0;
  const std::vector<ParamSegment> segs = segments_with_gaps(total);
  const OptimizerSpec spec = spec_of("adam", 0.0);
  auto host = make_optimizer(spec, segs, total);
  std::vector<float> params = test::random_floats(static_cast<size_t>(total), 2);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> grads = test::random_floats(static_cast<size_t>(total), 20 + step);
    host->step(cpu, params.data(), grads.data(), 0.01);
  }
  // CPU state -> GPU optimizer.
  std::map<std::string, Tensor> saved;
  for (auto& [name, t] : host->state_tensors()) saved[name] = t.clone();
  auto dev = make_optimizer(spec, segs, total, Device::cuda);
  dev->load_state(saved);
  dev->set_step_count(host->step_count());
  // GPU state tensors read back equal to the CPU's.
  auto dev_state = dev->state_tensors();
  REQUIRE(dev_state.size() == saved.size());
  for (auto& [name, t] : dev_state) {
    INFO(name);
    CHECK(t.device() == Device::cuda);
    CHECK(bitwise_equal(t.to_vector(), saved.at(name).to_vector()));
  }
  // Both continue identically (within tolerance).
  DeviceFloats dparams(params);
  for (int step = 3; step < 6; ++step) {
    const std::vector<float> grads = test::random_floats(static_cast<size_t>(total), 20 + step);
    host->step(cpu, params.data(), grads.data(), 0.01);
    DeviceFloats dgrads(grads);
    dev->step(cuda.ctx(), dparams.data(), dgrads.data(), 0.01);
    cuda.synchronize();
  }
  CHECK(compare(dparams.get(), params, kGpuVsCpu) == "");
}

TEST_CASE("optimizer refuses a context on another device than its slots", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  std::vector<ParamSegment> segs{{"w", 0, 4}};
  auto dev = make_optimizer(spec_of("sgd", 0.9), segs, 4, Device::cuda);
  auto host = make_optimizer(spec_of("sgd", 0.9), segs, 4);
  std::vector<float> p(4, 1.0f), g(4, 1.0f);
  DeviceFloats dp(p), dg(g);
  CHECK_THROWS_AS(dev->step(cpu, p.data(), g.data(), 0.1), Error);
  CHECK_THROWS_AS(host->step(cuda.ctx(), dp.data(), dg.data(), 0.1), Error);
  CHECK(dev->step_count() == 0);
}

TEST_CASE("clip cuda norm matches the cpu and repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  for (int64_t n : {0, 1, 5, 4096, 4097, 200001, 3000001}) {
    for (int64_t offset : {0, 1}) {
      INFO("n=" << n << " offset=" << offset);
      const std::vector<float> g0 = test::random_floats(static_cast<size_t>(n), 30 + n, -3.0f, 3.0f);
      const double want = global_grad_norm(cpu, g0.data(), n);
      DeviceFloats g(g0, offset);
      const double a = global_grad_norm(cuda.ctx(), g.data(), n);
      const double b = global_grad_norm(cuda.ctx(), g.data(), n);
      CHECK(a == Approx(want).epsilon(1e-12).margin(1e-300));
      CHECK(std::memcmp(&a, &b, sizeof(double)) == 0);

      // Clipping to half the norm: gradients as the cpu clips them; the returned norm is the unclipped one.
      const double max_norm = want > 0 ? want / 2 : 1.0;
      std::vector<float> clipped = g0;
      clip_grad_norm(cpu, clipped.data(), n, max_norm);
      DeviceFloats c1(g0, offset), c2(g0, offset);
      const double r1 = clip_grad_norm(cuda.ctx(), c1.data(), n, max_norm);
      CHECK(std::memcmp(&r1, &a, sizeof(double)) == 0);
      double* dnorm = static_cast<double*>(device_malloc(Device::cuda, sizeof(double), "test norm"));
      clip_grad_norm_cuda_async(cuda.ctx(), c2.data(), n, max_norm, dnorm);
      cuda.synchronize();
      double r2 = 0.0;
      device_memcpy(&r2, Device::cpu, dnorm, Device::cuda, sizeof(double));
      device_free(Device::cuda, dnorm);
      CHECK(std::memcmp(&r2, &a, sizeof(double)) == 0);
      const std::vector<float> v1 = c1.get(), v2 = c2.get();
      CHECK(compare(v1, clipped, kGpuVsCpu) == "");
      CHECK(bitwise_equal(v1, v2));
    }
  }
}

TEST_CASE("clip cuda leaves gradients alone below the threshold and when the norm is not finite", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const int64_t n = 10001;
  std::vector<float> g0 = test::random_floats(n, 4);
  DeviceFloats g(g0);
  const double norm = clip_grad_norm(cuda.ctx(), g.data(), n, 1e9);
  CHECK(norm > 0.0);
  CHECK(bitwise_equal(g.get(), g0));
  g0[n / 2] = std::numeric_limits<float>::infinity();
  DeviceFloats inf(g0);
  CHECK(std::isinf(clip_grad_norm(cuda.ctx(), inf.data(), n, 1.0)));
  CHECK(bitwise_equal(inf.get(), g0));
  g0[n / 2] = std::nanf("");
  DeviceFloats nan(g0);
  CHECK(std::isnan(clip_grad_norm(cuda.ctx(), nan.data(), n, 1.0)));
  const std::vector<float> after = nan.get();
  CHECK(std::memcmp(after.data(), g0.data(), n * sizeof(float)) == 0);
}

TEST_CASE("all_finite cuda finds a single NaN or infinity anywhere", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (int64_t n : {1, 7, 100000, 2000003}) {
    INFO("n=" << n);
    const std::vector<float> x = test::random_floats(static_cast<size_t>(n), 5);
    DeviceFloats ok(x);
    CHECK(all_finite(cuda.ctx(), ok.data(), n));
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      for (float bad :
           {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> y = x;
        y[static_cast<size_t>(at)] = bad;
        DeviceFloats d(y);
        CHECK_FALSE(all_finite(cuda.ctx(), d.data(), n));
      }
    }
  }
  CHECK(all_finite(cuda.ctx(), nullptr, 0));
}
