// The dynamic loss scaler (optim/loss_scaler.h): scaling, the check and unscale, the skip and
// halving on inf/NaN, growth after growth_interval clean steps, the clamps, a non-finite loss
// left alone, and its checkpoint state (saved, restored, refused when impossible); the same
// sequence on the GPU must give the same states and gradients bit for bit ([gpu]).
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "optim/loss_scaler.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

LossScaleSpec spec(double init, int64_t growth) {
  LossScaleSpec s;
  s.init = init;
  s.growth_interval = growth;
  return s;
}

struct Outcome {
  std::vector<LossScaleState> states;
  std::vector<std::vector<float>> grads;
};

// A fixed sequence on ctx: clean, clean, clean (growth at 3), an inf, a NaN, clean, a non-finite loss.
Outcome run_sequence(const ExecContext& ctx, const std::function<void()>& sync) {
  LossScaler s(spec(8.0, 3), ctx);
  Outcome out;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<std::vector<float>> inputs = {{8, -16, 0.5f, 4, 1, 2, 3, 4, 5},  // 9: a vector body and a tail
                                                  {1, 2, 3},
                                                  {-4, 4, 64},
                                                  {1, inf, 2, 3, 4, 5, 6, 7, 8},
                                                  {nan, 1},
                                                  {32, 64},
                                                  {2, 2}};
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor g = Tensor::from_vector(Shape{int64_t(inputs[k].size())}, inputs[k]).to(ctx.device);
    const float loss_value = k + 1 == inputs.size() ? std::numeric_limits<float>::infinity() : 1.5f;
    Tensor loss = Tensor::from_vector(Shape{1}, {loss_value}).to(ctx.device);
    s.unscale_and_update(ctx, g.data(), g.numel(), loss.data());
    sync();
    out.states.push_back(s.read(ctx));
    out.grads.push_back(g.to_vector());
  }
  return out;
}

void check_sequence(const Outcome& o) {
  REQUIRE(o.states.size() == 7);
  // Step 1: divided by 8, clean.
  CHECK(o.grads[0] == std::vector<float>{1, -2, 0.0625f, 0.5f, 0.125f, 0.25f, 0.375f, 0.5f, 0.625f});
  CHECK(o.states[0].found_inf == 0);
  CHECK(o.states[0].clean_steps == 1);
  CHECK(o.states[0].scale == 8.0f);
  CHECK(o.states[0].guard == 0.0f);
  CHECK(o.states[1].clean_steps == 2);
  // Step 3: the third clean step doubles the scale (after unscaling by the old one).
  CHECK(o.grads[2] == std::vector<float>{-0.5f, 0.5f, 8});
  CHECK(o.states[2].scale == 16.0f);
  CHECK(o.states[2].clean_steps == 0);
  // Step 4: an inf skips and halves; the guard tells the optimizer.
  CHECK(o.states[3].found_inf == 1);
  CHECK(std::isnan(o.states[3].guard));
  CHECK(o.states[3].scale == 8.0f);
  CHECK(o.states[3].skipped_steps == 1);
  CHECK(o.states[3].clean_steps == 0);
  // Step 5: a NaN too.
  CHECK(o.states[4].found_inf == 1);
  CHECK(o.states[4].scale == 4.0f);
  CHECK(o.states[4].skipped_steps == 2);
  // Step 6: clean again, at the new scale.
  CHECK(o.grads[5] == std::vector<float>{8, 16});
  CHECK(o.states[5].found_inf == 0);
  CHECK(o.states[5].clean_steps == 1);
  CHECK(o.states[5].guard == 0.0f);
  // Step 7: a non-finite loss (the run diverged): the optimizer is stopped, the scale left alone.
  CHECK(std::isnan(o.states[6].guard));
  CHECK(o.states[6].scale == 4.0f);
  CHECK(o.states[6].clean_steps == 1);
  CHECK(o.states[6].skipped_steps == 2);
}

}  // namespace

TEST_CASE("loss scaler: check, unscale, skip and halve on inf or NaN, grow after the interval (cpu)", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  check_sequence(run_sequence(ctx, [] {}));
}

TEST_CASE("loss scaler: the GPU takes the same decisions and gives the same gradients", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Outcome gpu = run_sequence(cuda.ctx(), [&] { cuda.synchronize(); });
  check_sequence(gpu);
  const Outcome cpu = run_sequence(ExecContext::cpu(1), [] {});
  for (size_t k = 0; k < cpu.grads.size(); ++k) {
    if (cpu.states[k].found_inf) continue;  // the values of a skipped step are not used
    CHECK(gpu.grads[k] == cpu.grads[k]);
  }
  // And the multiply, on a length with a vector body and a tail.
  LossScaler s(spec(1024.0, 10), cuda.ctx());
  const std::vector<float> x = test::random_floats(1001, 3);
  Tensor t = Tensor::from_vector(Shape{1001}, x).to(Device::cuda);
  s.scale_gradient(cuda.ctx(), t.data(), t.numel());
  cuda.synchronize();
  const std::vector<float> got = t.to_vector();
  for (size_t i = 0; i < x.size(); ++i) CHECK(got[i] == x[i] * 1024.0f);
}

TEST_CASE("loss scaler: scale_gradient multiplies by the scale, the scale stays within 2^-24 and 2^24", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  LossScaler s(spec(65536.0, 2000), ctx);
  std::vector<float> x{1.0f, -0.5f, 3.0f};
  s.scale_gradient(ctx, x.data(), 3);
  CHECK(x == std::vector<float>{65536.0f, -32768.0f, 196608.0f});
  LossScaleState hi;
  hi.scale = kMaxLossScale;
  hi.clean_steps = 0;
  advance_loss_scale(hi, 1, true);
  CHECK(hi.scale == kMaxLossScale);
  LossScaleState lo;
  lo.scale = kMinLossScale;
  lo.found_inf = 1;
  advance_loss_scale(lo, 1, true);
  CHECK(lo.scale == kMinLossScale);
  CHECK(lo.skipped_steps == 1);
  CHECK_THROWS_AS(LossScaler(spec(1000.0, 10), ctx), Error);  // not a power of two
  CHECK_THROWS_AS(LossScaler(spec(64.0, 0), ctx), Error);
}

TEST_CASE("loss scaler: the state is saved and restored exactly, and an impossible one is refused", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  LossScaler a(spec(1024.0, 4), ctx);
  std::vector<float> g{1, 2};
  a.unscale_and_update(ctx, g.data(), 2, nullptr);
  g = {std::numeric_limits<float>::infinity(), 1};
  a.unscale_and_update(ctx, g.data(), 2, nullptr);
  g = {1, 2};
  a.unscale_and_update(ctx, g.data(), 2, nullptr);
  a.read(ctx);
  const std::map<std::string, std::string> saved = a.state();
  CHECK(saved == std::map<std::string, std::string>{{"scale", "512"}, {"clean_steps", "1"}, {"skipped_steps", "1"}});
  LossScaler b(spec(65536.0, 4), ctx);
  b.load_state(ctx, saved);
  CHECK(b.last().scale == 512.0f);
  CHECK(b.read(ctx).clean_steps == 1);
  CHECK(b.last().skipped_steps == 1);
  // Both continue alike: three more clean steps grow each at the same step.
  for (LossScaler* s : {&a, &b})
    for (int k = 0; k < 3; ++k) {
      g = {1, 2};
      s->unscale_and_update(ctx, g.data(), 2, nullptr);
    }
  CHECK(a.read(ctx).scale == 1024.0f);
  CHECK(b.read(ctx).scale == 1024.0f);
  CHECK(a.state() == b.state());
  auto refused = [&](std::map<std::string, std::string> m, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(b.load_state(ctx, m), Catch::Matchers::Contains(what));
  };
  refused({{"scale", "1000"}, {"clean_steps", "0"}, {"skipped_steps", "0"}}, "'scale' is '1000'");
  refused({{"scale", "inf"}, {"clean_steps", "0"}, {"skipped_steps", "0"}}, "'scale' is 'inf'");
  refused({{"scale", "64"}, {"clean_steps", "4"}, {"skipped_steps", "0"}}, "'clean_steps' is '4'");
  refused({{"scale", "64"}, {"clean_steps", "-1"}, {"skipped_steps", "0"}}, "'clean_steps' is '-1'");
  refused({{"scale", "64"}, {"clean_steps", "1x"}, {"skipped_steps", "0"}}, "'clean_steps' is '1x'");
  refused({{"scale", "64"}, {"clean_steps", "0"}}, "'skipped_steps' is missing");
  refused({{"scale", "64"}, {"clean_steps", "0"}, {"skipped_steps", "0"}, {"growth", "2"}}, "unknown key 'growth'");
  CHECK(b.read(ctx).scale == 1024.0f);  // nothing was loaded by a refused state
}
