// Optimizers against hand-worked steps, on quadratics, across thread counts, and checkpoint state.
// Hand examples use eps = 0 and fixed gradient sequences so every value has a short derivation.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/exec_context.h"
#include "optim/optimizer.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

OptimizerSpec make_spec(const std::string& type, double momentum = 0.0, double weight_decay = 0.0) {
  OptimizerSpec s;
  s.type = type;
  s.momentum = momentum;
  s.weight_decay = weight_decay;
  s.eps = 0.0;
  return s;
}

std::vector<ParamSegment> one_per_element(int n) {
  std::vector<ParamSegment> segs;
  for (int i = 0; i < n; ++i) segs.push_back({"p" + std::to_string(i), i, 1});
  return segs;
}

// Runs one step per entry of `grads` (each of size total) and returns the parameters after each.
std::vector<std::vector<float>> run(Optimizer& opt, std::vector<float> params,
                                    const std::vector<std::vector<float>>& grads, double lr) {
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<std::vector<float>> history;
  for (const auto& g : grads) {
    opt.step(ctx, params.data(), g.data(), lr);
    history.push_back(params);
  }
  return history;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("sgd with momentum and with nesterov match hand-worked steps", "[cpu]") {
  // lr 0.1, momentum 0.5, p0 = 1, gradients 1, 2, -1.
  // heavy ball: buf = 1, 2.5, 0.25 (0.5*buf + g); p = 1 - 0.1 = 0.9, 0.9 - 0.25 = 0.65, 0.65 - 0.025 = 0.625
  // nesterov:   same buf; g' = g + 0.5*buf = 1.5, 3.25, -0.875; p = 0.85, 0.525, 0.6125
  std::vector<std::vector<float>> grads{{1.0f}, {2.0f}, {-1.0f}};
  auto heavy = make_optimizer(make_spec("sgd", 0.5), one_per_element(1), 1);
  auto h = run(*heavy, {1.0f}, grads, 0.1);
  CHECK(h[0][0] == Approx(0.9).epsilon(1e-6));
  CHECK(h[1][0] == Approx(0.65).epsilon(1e-6));
  CHECK(h[2][0] == Approx(0.625).epsilon(1e-6));
  CHECK(heavy->slot("momentum_buffer").at(0) == Approx(0.25).epsilon(1e-6));
  CHECK(heavy->step_count() == 3);

  OptimizerSpec ns = make_spec("sgd", 0.5);
  ns.nesterov = true;
  auto nesterov = make_optimizer(ns, one_per_element(1), 1);
  auto n = run(*nesterov, {1.0f}, grads, 0.1);
  CHECK(n[0][0] == Approx(0.85).epsilon(1e-6));
  CHECK(n[1][0] == Approx(0.525).epsilon(1e-6));
  CHECK(n[2][0] == Approx(0.6125).epsilon(1e-6));
}

TEST_CASE("sgd weight decay is added to the gradient only on decayed segments", "[cpu]") {
  // lr 0.1, wd 0.1, no momentum, p0 = 1 on both elements, gradients 1 then 2.
  // decayed: g' = 1 + 0.1*1 = 1.1 -> p = 0.89; g' = 2 + 0.089 = 2.089 -> p = 0.89 - 0.2089 = 0.6811
  // not decayed: p = 0.9, then 0.7
  std::vector<ParamSegment> segs{{"w", 0, 1, true}, {"b", 1, 1, false}};
  auto opt = make_optimizer(make_spec("sgd", 0.0, 0.1), segs, 2);
  CHECK(opt->slot_names().empty());
  auto h = run(*opt, {1.0f, 1.0f}, {{1.0f, 1.0f}, {2.0f, 2.0f}}, 0.1);
  CHECK(h[0][0] == Approx(0.89).epsilon(1e-6));
  CHECK(h[1][0] == Approx(0.6811).epsilon(1e-6));
  CHECK(h[0][1] == Approx(0.9).epsilon(1e-6));
  CHECK(h[1][1] == Approx(0.7).epsilon(1e-6));
}

TEST_CASE("adam bias correction makes a constant gradient move each parameter by exactly lr", "[cpu]") {
  // Default betas 0.9/0.999, eps 0. With constant g: m_t = (1-b1^t) g and v_t = (1-b2^t) g^2, so
  // m_hat = g, v_hat = g^2 and the step is lr*sign(g), whatever |g|. Without bias correction the
  // first step would be lr * 0.1|g| / sqrt(0.001 g^2) = 3.16 lr.
  OptimizerSpec s = make_spec("adam");
  auto opt = make_optimizer(s, one_per_element(2), 2);
  auto h = run(*opt, {1.0f, 1.0f}, {{2.0f, -0.01f}, {2.0f, -0.01f}, {2.0f, -0.01f}}, 0.1);
  CHECK(h[0][0] == Approx(0.9).epsilon(1e-6));
  CHECK(h[1][0] == Approx(0.8).epsilon(1e-6));
  CHECK(h[2][0] == Approx(0.7).epsilon(1e-6));
  CHECK(h[0][1] == Approx(1.1).epsilon(1e-6));
  CHECK(h[2][1] == Approx(1.3).epsilon(1e-6));
  // m_3 = (1 - 0.9^3) * 2 = 0.542, v_3 = (1 - 0.999^3) * 4 = 0.011988004
  CHECK(opt->slot("exp_avg").at(0) == Approx(0.542).epsilon(1e-6));
  CHECK(opt->slot("exp_avg_sq").at(0) == Approx(0.011988004).epsilon(1e-5));
}

TEST_CASE("adam with L2 decay and adamw with decoupled decay match hand-worked steps and differ", "[cpu]") {
  // lr 0.1, betas 0.5/0.75, eps 0, wd 0.5, p0 = 1, gradients 2 then 0.
  // bc1 = 0.5, 0.75; bc2 = 0.25, 0.4375. Update = lr * (m/bc1) / (sqrt(v)/sqrt(bc2)).
  const double sq2 = std::sqrt(0.4375);
  // Adam (L2): step 1 g' = 2 + 0.5 = 2.5, m = 1.25, v = 1.5625: update 0.1 * 2.5 / 2.5 -> p = 0.9.
  //   step 2 g' = 0 + 0.5*0.9 = 0.45, m = 0.625 + 0.225 = 0.85, v = 1.171875 + 0.050625 = 1.2225.
  const double adam2 = 0.9 - 0.1 * (0.85 / 0.75) / (std::sqrt(1.2225) / sq2);
  // AdamW: step 1 p = 1*(1 - 0.1*0.5) = 0.95, m = 1, v = 1: update 0.1 -> 0.85.
  //   step 2 p = 0.85*0.95 = 0.8075, m = 0.5, v = 0.75.
  const double adamw2 = 0.85 * 0.95 - 0.1 * (0.5 / 0.75) / (std::sqrt(0.75) / sq2);
  // AdamW on a segment without decay is plain Adam: 0.9, then 0.9 - 0.1*(0.5/0.75)/(sqrt(0.75)/sqrt(0.4375)).
  const double plain2 = 0.9 - 0.1 * (0.5 / 0.75) / (std::sqrt(0.75) / sq2);

  std::vector<ParamSegment> segs{{"w", 0, 1, true}, {"b", 1, 1, false}};
  std::vector<std::vector<float>> grads{{2.0f, 2.0f}, {0.0f, 0.0f}};
  OptimizerSpec s = make_spec("adam", 0.0, 0.5);
  s.beta1 = 0.5;
  s.beta2 = 0.75;
  auto adam = make_optimizer(s, segs, 2);
  auto a = run(*adam, {1.0f, 1.0f}, grads, 0.1);
  CHECK(a[0][0] == Approx(0.9).epsilon(1e-6));
  CHECK(a[1][0] == Approx(adam2).epsilon(1e-6));
  CHECK(a[1][1] == Approx(plain2).epsilon(1e-6));

  s.type = "adamw";
  auto adamw = make_optimizer(s, segs, 2);
  auto w = run(*adamw, {1.0f, 1.0f}, grads, 0.1);
  CHECK(w[0][0] == Approx(0.85).epsilon(1e-6));
  CHECK(w[1][0] == Approx(adamw2).epsilon(1e-6));
  CHECK(w[0][1] == Approx(0.9).epsilon(1e-6));
  CHECK(w[1][1] == Approx(plain2).epsilon(1e-6));
  CHECK(std::fabs(adam2 - adamw2) > 0.05);
}

TEST_CASE("rmsprop matches hand-worked steps with and without momentum and weight decay", "[cpu]") {
  // lr 0.1, alpha 0.75, eps 0, p0 = 1.
  // no momentum, g = 2, 1: s = 0.25*4 = 1 -> p = 1 - 0.1*2/1 = 0.8; s = 0.75 + 0.25 = 1 -> p = 0.7
  // momentum 0.5, g = 2, 1, 0: buf = 2, 0.5*2 + 1/1 = 2, 0.5*2 + 0 = 1 -> p = 0.8, 0.6, 0.5
  // wd 0.5, no momentum, g = 2, 0: g' = 2.5, s = 1.5625, a = 1.25 -> p = 0.8;
  //   g' = 0.4, s = 0.75*1.5625 + 0.25*0.16 = 1.211875 -> p = 0.8 - 0.1*0.4/sqrt(1.211875)
  OptimizerSpec s = make_spec("rmsprop");
  s.alpha = 0.75;
  auto plain = make_optimizer(s, one_per_element(1), 1);
  REQUIRE(plain->slot_names() == std::vector<std::string>{"square_avg"});
  auto p = run(*plain, {1.0f}, {{2.0f}, {1.0f}}, 0.1);
  CHECK(p[0][0] == Approx(0.8).epsilon(1e-6));
  CHECK(p[1][0] == Approx(0.7).epsilon(1e-6));

  s.momentum = 0.5;
  auto mom = make_optimizer(s, one_per_element(1), 1);
  REQUIRE(mom->slot_names() == std::vector<std::string>{"square_avg", "momentum_buffer"});
  auto m = run(*mom, {1.0f}, {{2.0f}, {1.0f}, {0.0f}}, 0.1);
  CHECK(m[0][0] == Approx(0.8).epsilon(1e-6));
  CHECK(m[1][0] == Approx(0.6).epsilon(1e-6));
  CHECK(m[2][0] == Approx(0.5).epsilon(1e-6));
  CHECK(mom->slot("square_avg").at(0) == Approx(0.75).epsilon(1e-6));

  s.momentum = 0.0;
  s.weight_decay = 0.5;
  auto wd = make_optimizer(s, one_per_element(1), 1);
  auto d = run(*wd, {1.0f}, {{2.0f}, {0.0f}}, 0.1);
  CHECK(d[0][0] == Approx(0.8).epsilon(1e-6));
  CHECK(d[1][0] == Approx(0.8 - 0.1 * 0.4 / std::sqrt(1.211875)).epsilon(1e-6));
}

TEST_CASE("sgd and adam minimise a separable quadratic", "[cpu]") {
  // f(p) = 0.5 * sum a_i (p_i - c_i)^2, gradient a_i (p_i - c_i), minimum at c.
  const std::vector<float> a{1.0f, 4.0f, 0.5f}, c{3.0f, -2.0f, 0.5f};
  auto solve = [&](const OptimizerSpec& spec, double lr, int steps) {
    auto opt = make_optimizer(spec, {{"p", 0, 3}}, 3);
    ExecContext ctx = ExecContext::cpu(1);
    std::vector<float> p{0.0f, 0.0f, 0.0f}, g(3);
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < 3; ++i) g[i] = a[i] * (p[i] - c[i]);
      opt->step(ctx, p.data(), g.data(), lr);
    }
    return p;
  };
  OptimizerSpec sgd = make_spec("sgd", 0.9);
  sgd.nesterov = true;
  auto ps = solve(sgd, 0.05, 300);
  OptimizerSpec adam = make_spec("adam");
  adam.eps = 1e-8;
  auto pa = solve(adam, 0.02, 2000);
  for (int i = 0; i < 3; ++i) {
    CHECK(ps[i] == Approx(c[i]).margin(1e-4));
    CHECK(pa[i] == Approx(c[i]).margin(1e-2));
  }
}

TEST_CASE("optimizer step is bitwise equal with one and two threads", "[cpu]") {
  const int64_t total = 100003;
  std::vector<ParamSegment> segs{{"a", 0, 40000, true}, {"b", 40000, 3, false}, {"c", 40010, 59993, true}};
  const auto p0 = test::random_floats(total, 1);
  std::vector<std::vector<float>> grads{test::random_floats(total, 2), test::random_floats(total, 3),
                                        test::random_floats(total, 4)};
  for (const char* type : {"sgd", "adam", "adamw", "rmsprop"}) {
    OptimizerSpec s = make_spec(type, 0.9, 0.01);
    s.nesterov = std::string(type) == "sgd";
    s.eps = 1e-8;
    std::vector<float> results[2];
    for (int t = 0; t < 2; ++t) {
      auto opt = make_optimizer(s, segs, total);
      ExecContext ctx = ExecContext::cpu(t + 1);
      results[t] = p0;
      for (const auto& g : grads) opt->step(ctx, results[t].data(), g.data(), 0.01);
    }
    INFO(type);
    CHECK(bitwise_equal(results[0], results[1]));
    CHECK(!bitwise_equal(results[0], p0));
    // Elements 40003..40009 lie in no segment and are never touched.
    CHECK(results[1][40005] == p0[40005]);
  }
}

TEST_CASE("optimizer state tensors are named per parameter and slot and alias the slot buffers", "[cpu]") {
  std::vector<ParamSegment> segs{{"conv1.weight", 0, 8, true, Shape{2, 1, 2, 2}}, {"fc.bias", 8, 3, false}};
  auto opt = make_optimizer(make_spec("adam"), segs, 11);
  auto state = opt->state_tensors();
  REQUIRE(state.size() == 4);
  CHECK(state[0].first == "optim.conv1.weight.exp_avg");
  CHECK(state[1].first == "optim.conv1.weight.exp_avg_sq");
  CHECK(state[2].first == "optim.fc.bias.exp_avg");
  CHECK(state[3].first == "optim.fc.bias.exp_avg_sq");
  CHECK(state[0].second.shape() == Shape{2, 1, 2, 2});
  CHECK(state[2].second.shape() == Shape{3});
  state[3].second.at(1) = 7.0f;
  CHECK(opt->slot("exp_avg_sq").at(9) == 7.0f);

  auto sgd = make_optimizer(make_spec("sgd", 0.9), segs, 11);
  auto sgd_state = sgd->state_tensors();
  REQUIRE(sgd_state.size() == 2);
  CHECK(sgd_state[1].first == "optim.fc.bias.momentum_buffer");
  CHECK(make_optimizer(make_spec("sgd"), segs, 11)->state_tensors().empty());
}

TEST_CASE("optimizer state round-trips through load_state and resumes bitwise", "[cpu]") {
  const int64_t total = 50;
  std::vector<ParamSegment> segs{{"w", 0, 30}, {"b", 30, 20, false}};
  OptimizerSpec s = make_spec("adamw", 0.0, 0.05);
  s.eps = 1e-8;
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<std::vector<float>> grads;
  for (uint64_t k = 0; k < 5; ++k) grads.push_back(test::random_floats(total, 10 + k));

  auto straight = make_optimizer(s, segs, total);
  std::vector<float> p = test::random_floats(total, 9);
  for (int k = 0; k < 3; ++k) straight->step(ctx, p.data(), grads[k].data(), 0.01);
  // "Save": deep copies of the state tensors, as a checkpoint file would hold them.
  std::map<std::string, Tensor> saved;
  for (auto& [name, t] : straight->state_tensors()) saved[name] = t.clone();
  saved["w"] = Tensor::zeros(Shape{30});  // a parameter tensor: ignored by load_state
  const int64_t saved_steps = straight->step_count();
  std::vector<float> p_resumed = p;
  for (int k = 3; k < 5; ++k) straight->step(ctx, p.data(), grads[k].data(), 0.01);

  auto resumed = make_optimizer(s, segs, total);
  resumed->load_state(saved);
  resumed->set_step_count(saved_steps);
  for (int k = 3; k < 5; ++k) resumed->step(ctx, p_resumed.data(), grads[k].data(), 0.01);
  CHECK(bitwise_equal(p, p_resumed));
  CHECK(bitwise_equal(straight->slot("exp_avg").to_vector(), resumed->slot("exp_avg").to_vector()));
  CHECK(bitwise_equal(straight->slot("exp_avg_sq").to_vector(), resumed->slot("exp_avg_sq").to_vector()));
}

TEST_CASE("optimizer load_state lists missing, unexpected and mismatched tensors and loads nothing", "[cpu]") {
  std::vector<ParamSegment> segs{{"conv1.weight", 0, 4}, {"fc.bias", 4, 2}};
  auto opt = make_optimizer(make_spec("sgd", 0.9), segs, 6);
  std::map<std::string, Tensor> tensors;
  tensors["optim.conv1.weight.momentum_buffer"] = Tensor::from_vector(Shape{3}, {1, 2, 3});
  tensors["optim.ghost.momentum_buffer"] = Tensor::zeros(Shape{2});
  tensors["fc.bias"] = Tensor::zeros(Shape{2});
  std::string message;
  try {
    opt->load_state(tensors);
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("missing 1: optim.fc.bias.momentum_buffer") != std::string::npos);
  CHECK(message.find("unexpected 1: optim.ghost.momentum_buffer") != std::string::npos);
  CHECK(message.find("optim.conv1.weight.momentum_buffer (expected [4], got [3])") != std::string::npos);
  CHECK(message.find("fc.bias;") == std::string::npos);
  CHECK(opt->slot("momentum_buffer").at(0) == 0.0f);
}

TEST_CASE("optimizer construction rejects unknown types and bad segments", "[cpu]") {
  std::string message;
  try {
    make_optimizer(make_spec("adamm"), {}, 0);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("unknown optimizer type 'adamm'") != std::string::npos);
  CHECK(message.find("did you mean") != std::string::npos);
  CHECK_THROWS_AS(make_optimizer(make_spec("sgd"), {{"a", 0, 4}, {"b", 3, 2}}, 8), Error);
  CHECK_THROWS_AS(make_optimizer(make_spec("sgd"), {{"a", 0, 4}, {"a", 4, 2}}, 8), Error);
  CHECK_THROWS_AS(make_optimizer(make_spec("sgd"), {{"a", 6, 4}}, 8), Error);
  OptimizerSpec nesterov_without_momentum = make_spec("sgd", 0.0);
  nesterov_without_momentum.nesterov = true;
  CHECK_THROWS_AS(make_optimizer(nesterov_without_momentum, {}, 0), Error);
  auto opt = make_optimizer(make_spec("adam"), {{"a", 0, 1}}, 1);
  CHECK_THROWS_AS(opt->slot("momentum_buffer"), Error);
}
