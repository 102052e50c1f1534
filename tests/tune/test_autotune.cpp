// The autotuner's choice among candidates (with an injected timing function), its disk cache
// (round trip, key mismatch, corrupt file, atomic write), a whole-graph run on the CPU, and its
// precision handling: keys and tolerances per precision, the bf16 and f16 accuracy probes on the CPU.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "config/model_spec.h"
#include "core/bf16.h"
#include "core/exec_context.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"
#include "ops/convert.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "tune/accuracy_tolerance.h"
#include "tune/autotune.h"
#include "tune/autotune_cache.h"
#include "tune/conv_accuracy.h"

using namespace cnn;
namespace fs = std::filesystem;

namespace {

// Fake timings; a name missing from the map throws like a failing kernel.
struct FakeClock {
  std::map<std::string, double> ms;
  int calls = 0;
  double operator()(const std::string& name) {
    ++calls;
    auto it = ms.find(name);
    if (it == ms.end()) throw std::runtime_error("launch failed: invalid argument");
    return it->second;
  }
};

// A decision cached under `cached` (winner a) is not reused under `asked`: both are timed, b wins.
void check_not_reused(const std::string& cached, const std::string& asked) {
  AutotuneCache cache("");
  cache.put(cached, TuneRecord{"a", 2.0, "b", 3.0});
  FakeClock clock{{{"a", 2.0}, {"b", 0.5}}};
  TuneOutcome r = tune_choice("w", {"a", "b"}, std::ref(clock), cache, asked);
  CHECK_FALSE(r.from_cache);
  CHECK(r.record.winner == "b");
}

// Routes spdlog to a string while alive.
struct LogCapture {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> old = spdlog::default_logger();
  LogCapture() {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(text)));
  }
  ~LogCapture() { spdlog::set_default_logger(old); }
};

}  // namespace

TEST_CASE("autotune chooses the fastest candidate and names the runner-up", "[cpu]") {
  AutotuneCache cache("");
  FakeClock clock{{{"a", 2.0}, {"b", 0.5}, {"c", 1.0}}};
  TuneOutcome r = tune_choice("layer 'c1' forward", {"a", "b", "c"}, std::ref(clock), cache, "k");
  CHECK(r.record.winner == "b");
  CHECK(r.record.ms == 0.5);
  CHECK(r.record.runner_up == "c");
  CHECK(r.record.runner_up_ms == 1.0);
  CHECK_FALSE(r.from_cache);
  CHECK(r.describe() == "b 0.5000 ms, runner-up c 1.0000 ms (2.00x)");
  CHECK(clock.calls == 3);
}

TEST_CASE("autotune reports a failing candidate and excludes it, and fails when none is left", "[cpu]") {
  AutotuneCache cache("");
  FakeClock clock{{{"a", 2.0}}};
  TuneOutcome r = tune_choice("layer 'c1' backward_data", {"broken", "a"}, std::ref(clock), cache, "k");
  CHECK(r.record.winner == "a");
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0] == "broken: launch failed: invalid argument");
  FakeClock none;
  try {
    tune_choice("layer 'c1' forward", {"x", "y"}, std::ref(none), cache, "k2");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("layer 'c1' forward: every candidate failed: x: launch failed") != std::string::npos);
  }
}

TEST_CASE("autotune takes a single candidate without timing it", "[cpu]") {
  AutotuneCache cache("");
  FakeClock clock;
  TuneOutcome r = tune_choice("w", {"only"}, std::ref(clock), cache, "k");
  CHECK(r.record.winner == "only");
  CHECK(clock.calls == 0);
  CHECK(r.describe() == "only (only candidate)");
}

TEST_CASE("autotune cache round trip reuses the decision without timing, a different key misses", "[cpu]") {
  test::TempDir dir;
  const std::string path = (dir / "sub" / "autotune.json").string();
  {
    AutotuneCache cache(path);
    FakeClock clock{{{"a", 2.0}, {"b", 0.5}}};
    tune_choice("w", {"a", "b"}, std::ref(clock), cache, "gpu|shape|forward");
    CHECK(cache.save());
  }
  REQUIRE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(dir / "sub")) CHECK(e.path().filename() == "autotune.json");  // no temp left
  AutotuneCache cache(path);
  CHECK(cache.load_warning() == "");
  FakeClock clock{{{"a", 0.1}, {"b", 0.5}}};
  TuneOutcome r = tune_choice("w", {"a", "b"}, std::ref(clock), cache, "gpu|shape|forward");
  CHECK(r.from_cache);
  CHECK(r.record.winner == "b");
  CHECK(r.record.runner_up == "a");
  CHECK(clock.calls == 0);
  CHECK(r.describe().find("[cache]") != std::string::npos);
  // Another key (say, another workspace limit) is a miss and is timed.
  r = tune_choice("w", {"a", "b"}, std::ref(clock), cache, "gpu|shape|forward|ws 2");
  CHECK_FALSE(r.from_cache);
  CHECK(r.record.winner == "a");
  CHECK(clock.calls == 2);
  // A cached winner that is no longer a candidate is timed again.
  r = tune_choice("w", {"a", "c"}, std::ref(clock), cache, "gpu|shape|forward");
  CHECK_FALSE(r.from_cache);
}

TEST_CASE("a corrupt autotune cache file is reported and ignored, then rewritten", "[cpu]") {
  test::TempDir dir;
  const fs::path path = dir / "autotune.json";
  test::write_text_file(path, "{\"format\": 1, \"entries\": {\"k\": {\"winner\": ");
  AutotuneCache cache(path.string());
  CHECK(cache.load_warning().find("is corrupt") != std::string::npos);
  CHECK(cache.size() == 0);
  FakeClock clock{{{"a", 1.0}, {"b", 2.0}}};
  tune_choice("w", {"a", "b"}, std::ref(clock), cache, "k");
  CHECK(cache.save());
  AutotuneCache again(path.string());
  CHECK(again.load_warning() == "");
  REQUIRE(again.find("k"));
  CHECK(again.find("k")->winner == "a");
  test::write_text_file(path, "[1, 2]");
  CHECK(AutotuneCache(path.string()).load_warning().find("not an autotune cache") != std::string::npos);
}

TEST_CASE("an autotune cache that cannot be written leaves the old file intact and does not throw", "[cpu]") {
  test::TempDir dir;
  const fs::path blocker = dir / "file";
  test::write_text_file(blocker, "x");
  AutotuneCache cache((blocker / "autotune.json").string());  // its folder is a file
  FakeClock clock{{{"a", 1.0}, {"b", 2.0}}};
  tune_choice("w", {"a", "b"}, std::ref(clock), cache, "k");
  CHECK_FALSE(cache.save());
  CHECK(test::read_text_file(blocker) == "x");
}

TEST_CASE("autotune cache path comes from the flag, then CNN_AUTOTUNE_CACHE, then XDG_CACHE_HOME", "[cpu]") {
  CHECK(resolve_autotune_cache_path("none") == "");
  CHECK(resolve_autotune_cache_path("/x/a.json") == "/x/a.json");
  setenv("CNN_AUTOTUNE_CACHE", "/y/b.json", 1);
  CHECK(resolve_autotune_cache_path() == "/y/b.json");
  setenv("CNN_AUTOTUNE_CACHE", "none", 1);
  CHECK(resolve_autotune_cache_path() == "");
  unsetenv("CNN_AUTOTUNE_CACHE");
  setenv("XDG_CACHE_HOME", "/z", 1);
  CHECK(resolve_autotune_cache_path() == "/z/cnn-train/autotune.json");
  unsetenv("XDG_CACHE_HOME");
}

TEST_CASE("autotune on the cpu resolves every conv direction and honours an explicit algo", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\n"
      "input: {channels: 2, height: 8, width: 8}\n"
      "layers:\n"
      "  - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: c2, type: conv2d, filters: 4, kernel: 3, algo: {backward_data: cpu:im2col_gemm}}\n"
      "  - {name: fc, type: dense, units: 3}\n",
      "t.yaml");
  auto g = Graph::build(spec);
  g->choose_backends(Device::cpu);
  const ExecContext ctx = ExecContext::cpu(1);
  AutotuneOptions opt;
  const std::vector<std::string> lines = autotune_graph(*g, ctx, 4, opt);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("layer 'c1'") != std::string::npos);
  CHECK(lines[1].find("backward_data cpu:im2col_gemm (requested)") != std::string::npos);
  for (int i = 0; i < 2; ++i) {
    auto* planned = g->node(i).layer->conv_planned();
    REQUIRE(planned);
    for (ConvDir d : kConvDirs) {
      REQUIRE(planned->conv_plan().algo(d));
      CHECK(planned->conv_plan().algo(d)->name == "cpu:im2col_gemm");
    }
  }
  CHECK(describe_conv_plan(*g->node(0).layer)[0] == "forward cpu:im2col_gemm (only candidate)");
  CHECK(describe_conv_plan(*g->node(2).layer).empty());
  CHECK(planned_workspace_bytes(*g, ctx, 4) > 0);
}

// Both cpu:im2col_gemm and cpu:direct run a C == 1 layer and a depthwise one; a timed choice would
// follow the machine's load, and two runs of the same model would differ in their bits.
TEST_CASE("autotune on the cpu takes the default row's rule without timing, direct for depthwise only", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\n"
      "input: {channels: 1, height: 12, width: 12}\n"
      "layers:\n"
      "  - {name: first, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: dw, type: conv2d, filters: 4, kernel: 3, padding: 1, groups: 4}\n"
      "  - {name: fc, type: dense, units: 3}\n",
      "t.yaml");
  auto g = Graph::build(spec);
  g->choose_backends(Device::cpu);
  const ExecContext ctx = ExecContext::cpu(1);
  autotune_graph(*g, ctx, 4, AutotuneOptions{});
  const char* want[] = {"cpu:im2col_gemm", "cpu:direct"};
  for (int i = 0; i < 2; ++i) {
    const ConvPlan& plan = g->node(i).layer->conv_planned()->conv_plan();
    for (ConvDir d : kConvDirs) {
      INFO(g->node(i).layer->name() << " " << to_string(d));
      REQUIRE(plan.algo(d));
      CHECK(plan.algo(d)->name == want[i]);
      CHECK(plan.notes[size_t(d)] == "only candidate");  // not timed
    }
  }
}

TEST_CASE("autotune excludes an inaccurate fastest candidate with a warning naming layer, direction and error", "[cpu]") {
  AutotuneCache cache("");
  FakeClock clock{{{"cuda:implicit_gemm", 2.0}, {"cudnn:fft_tiling", 0.5}, {"cudnn:algo_1", 1.0}}};
  std::map<std::string, double> err{{"cuda:implicit_gemm", 0.0}, {"cudnn:fft_tiling", 3.1e-3}, {"cudnn:algo_1", 2e-6}};
  std::vector<std::string> asked;
  auto rel_error = [&](const std::string& name) {
    asked.push_back(name);
    return err.at(name);
  };
  LogCapture log;
  TuneOutcome r = tune_choice("layer 'conv1a' backward_filter", {"cuda:implicit_gemm", "cudnn:fft_tiling", "cudnn:algo_1"},
                              std::ref(clock), cache, "k", rel_error, 1e-4);
  CHECK(r.record.winner == "cudnn:algo_1");
  CHECK(r.record.runner_up == "cuda:implicit_gemm");
  CHECK(r.winner_rel_err == 2e-6);
  CHECK(asked.size() == 3);  // once per candidate, after its timing
  REQUIRE(r.excluded.size() == 1);
  CHECK(r.excluded[0] == "cudnn:fft_tiling: 3.1e-03 from the reference");
  CHECK(log.text.str().find("cudnn:fft_tiling for layer 'conv1a' backward_filter: 3.1e-03 from the reference, over the "
                            "1e-04 limit: excluded") != std::string::npos);
  CHECK(r.describe().find("1 excluded as inaccurate") != std::string::npos);
  CHECK(r.describe().find("cudnn:algo_1 1.0000 ms (rel_err 2.0e-06)") == 0);
  // The excluded candidate is not what the cache remembers.
  REQUIRE(cache.find("k"));
  CHECK(cache.find("k")->winner == "cudnn:algo_1");
}

TEST_CASE("autotune tolerance decides what counts as accurate, NaN is never accurate, and none left is an error",
          "[cpu]") {
  FakeClock clock{{{"a", 2.0}, {"b", 0.5}}};
  std::map<std::string, double> err{{"a", 1e-6}, {"b", 3e-3}};
  auto rel_error = [&](const std::string& name) { return err.at(name); };
  {
    AutotuneCache cache("");
    CHECK(tune_choice("w", {"a", "b"}, std::ref(clock), cache, "k", rel_error, 1e-4).record.winner == "a");
  }
  {
    AutotuneCache cache("");  // a looser tolerance lets the fast one through
    CHECK(tune_choice("w", {"a", "b"}, std::ref(clock), cache, "k", rel_error, 1e-2).record.winner == "b");
  }
  {
    AutotuneCache cache("");
    err["b"] = std::nan("");
    TuneOutcome r = tune_choice("w", {"a", "b"}, std::ref(clock), cache, "k", rel_error, 1.0);
    CHECK(r.record.winner == "a");
    CHECK(r.excluded.size() == 1);
  }
  AutotuneCache cache("");
  err = {{"a", 5e-3}, {"b", 3e-3}};
  try {
    tune_choice("layer 'c1' forward", {"a", "b"}, std::ref(clock), cache, "k", rel_error, 1e-4);
    FAIL("no error");
  } catch (const NoAccurateCandidate& e) {  // its own type: a cuDNN-only layer is refused on it
    const std::string m = e.what();
    CHECK(m.find("layer 'c1' forward: no candidate within the accuracy tolerance 1e-04 is left: a: 5.0e-03 from the "
                 "reference; b: 3.0e-03") != std::string::npos);
  }
  CHECK_FALSE(cache.find("k"));
}

TEST_CASE("autotune options come from train.autotune and the tolerance is part of the conv cache key", "[cpu]") {
  // Defaults: each candidate's own tolerance, 1 GiB of workspace.
  const AutotuneOptions d = AutotuneOptions::from_spec(AutotuneSpec{});
  CHECK(d.tolerance == kConvAccuracyTolerance);
  CHECK_FALSE(d.tolerance_given);
  CHECK(d.workspace_limit_bytes == size_t(1) << 30);
  CHECK(kConvAccuracyTolerance == 1e-4);
  // The keys as a model file (or --autotune-* through --set) gives them.
  const char* yaml =
      "name: t\ninput: {channels: 1, height: 4, width: 4}\nlayers:\n  - {name: fc, type: dense, units: 2}\n";
  const ModelSpec spec = parse_model_text(
      yaml, "t.yaml",
      {"train.autotune.tolerance=2.5e-3", "train.autotune.workspace_mb=64", "train.autotune.cache=none"});
  const AutotuneOptions o = AutotuneOptions::from_spec(spec.train.autotune);
  CHECK(o.tolerance == 2.5e-3);
  CHECK(o.tolerance_given);  // replaces every cuDNN op's own tolerance too
  CHECK(o.workspace_limit_bytes == size_t(64) << 20);
  CHECK(o.cache_path.empty());  // none: no disk cache
  CHECK(AutotuneOptions::from_spec(AutotuneSpec{"/x/decisions.json", 1024, 0}).cache_path == "/x/decisions.json");
  for (const char* bad : {"train.autotune.tolerance=-1", "train.autotune.tolerance=abc",
                          "train.autotune.workspace_mb=-3", "train.autotune.nonsense=1"})
    CHECK_THROWS_AS(parse_model_text(yaml, "t.yaml", {bad}), ConfigError);
  const Conv2dShape sh = Conv2dShape::make(2, 3, 8, 8, 4, 3, 3);
  const std::string k1 =
      autotune_conv_key("gpu", sh, ConvDir::forward, {"cuda", "cudnn"}, false, 1 << 20, 1e-4, MathMode::fp32);
  const std::string k2 =
      autotune_conv_key("gpu", sh, ConvDir::forward, {"cuda", "cudnn"}, false, 1 << 20, 1e-3, MathMode::fp32);
  CHECK(k1 != k2);
  CHECK(k1.find("|tol 0.0001|probe 2") != std::string::npos);
  // A cached decision under another tolerance is not reused.
  AutotuneCache cache("");
  cache.put(k2, TuneRecord{"b", 0.5, "a", 2.0});
  FakeClock clock{{{"a", 2.0}, {"b", 0.5}}};
  auto rel_error = [](const std::string& name) { return name == "b" ? 3e-4 : 0.0; };
  TuneOutcome r = tune_choice("w", {"a", "b"}, std::ref(clock), cache, k1, rel_error, 1e-4);
  CHECK_FALSE(r.from_cache);
  CHECK(r.record.winner == "a");
}

TEST_CASE("relative L2 difference and the cpu conv probe against the float64 reference", "[cpu]") {
  CHECK(relative_l2({1, 2}, {1, 2}) == 0);
  CHECK(relative_l2({0, 0}, {0, 0}) == 0);
  CHECK(relative_l2({3, 0}, {0, 4}) == Approx(1.25));
  CHECK(std::isinf(relative_l2({1}, {1, 2})));
  CHECK(std::isinf(relative_l2({1}, {0})));
  CHECK(std::isnan(relative_l2({std::nanf("")}, {1})));

  const ExecContext ctx = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 3, 7, 6, 5, 3, 3, 1, 1, 1, 1);
  ConvProbe probe(ctx, sh);
  CHECK(probe.reference_name(ConvDir::forward) == std::string("cpu:reference_fp64"));
  for (ConvDir d : kConvDirs) {
    const double e = probe.run_and_compare(conv2d_algo(d, "cpu:im2col_gemm"));
    CHECK(e < 1e-6);
    CHECK(e >= 0);
  }
  // An algorithm 1% off is measured as such; one that writes nothing reads as NaN (poisoned outputs).
  ConvAlgo off = conv2d_algo(ConvDir::forward, "cpu:im2col_gemm");
  auto run = off.run;
  off.run = [run](const ExecContext& c, const Conv2dShape& s, const ConvOperands& op) {
    run(c, s, op);
    for (int64_t i = 0; i < s.N * s.K * s.P * s.Q; ++i) op.y.f32()[i] *= 1.01f;
  };
  CHECK(probe.run_and_compare(off) == Approx(0.01).epsilon(1e-3));
  ConvAlgo idle = off;
  idle.run = [](const ExecContext&, const Conv2dShape&, const ConvOperands&) {};
  CHECK(std::isnan(probe.run_and_compare(idle)));
  // Backward filter compares dw and db together.
  CHECK(probe.output(ConvDir::backward_filter).size() == size_t(sh.weight_numel() + sh.K));

  // Set 1's x is a ReLU's output: an algorithm that is exact on zero-mean x but 2% off when x is
  // non-negative is measured by its worse set, both by run_and_compare and by worst_error after
  // runs on the zero-mean operands.
  ConvAlgo biased = conv2d_algo(ConvDir::forward, "cpu:im2col_gemm");
  auto exact = biased.run;
  biased.run = [exact](const ExecContext& c, const Conv2dShape& s, const ConvOperands& op) {
    exact(c, s, op);
    bool nonnegative = true;
    for (int64_t i = 0; i < s.N * s.C * s.H * s.W; ++i) nonnegative = nonnegative && op.x.f32()[i] >= 0;
    if (nonnegative)
      for (int64_t i = 0; i < s.N * s.K * s.P * s.Q; ++i) op.y.f32()[i] *= 1.02f;
  };
  CHECK(probe.run_and_compare(biased) == Approx(0.02).epsilon(1e-3));
  probe.poison(ConvDir::forward);
  biased.run(ctx, sh, probe.operands(ConvDir::forward));  // the zero-mean set (after every call)
  CHECK(probe.output_error(ConvDir::forward) < 1e-6);
  CHECK(probe.worst_error(biased) == Approx(0.02).epsilon(1e-3));
  ConvAlgo bd = conv2d_algo(ConvDir::backward_data, "cpu:im2col_gemm");
  probe.poison(ConvDir::backward_data);
  bd.run(ctx, sh, probe.operands(ConvDir::backward_data));
  CHECK(probe.worst_error(bd) < 1e-6);

  // Set 1's dy is what a batchnorm after the conv hands down: per channel zero-mean, orthogonal to
  // the conv output of set 1's x, and small (2^-17 of N(0,1)).
  probe.use_input_set(1);
  const ConvOperands fwd = probe.operands(ConvDir::forward);
  std::vector<float> y(size_t(sh.N * sh.K * sh.P * sh.Q));
  ConvOperands into = fwd;
  into.y = y.data();
  conv2d_algo(ConvDir::forward, "cpu:im2col_gemm").run(ctx, sh, into);
  const float* dy = probe.operands(ConvDir::backward_filter).dy.f32();
  const int64_t PQ = sh.P * sh.Q;
  for (int64_t k = 0; k < sh.K; ++k) {
    double sum = 0, dot = 0, abs_sum = 0, y_norm = 0;
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < PQ; ++i) {
        const size_t at = size_t((n * sh.K + k) * PQ + i);
        sum += dy[at], dot += double(dy[at]) * y[at], abs_sum += std::fabs(dy[at]), y_norm += double(y[at]) * y[at];
      }
    CHECK(abs_sum > 0);
    CHECK(abs_sum / double(sh.N * PQ) < 1e-4);
    CHECK(std::fabs(sum) < 1e-5 * abs_sum);
    CHECK(std::fabs(dot) < 1e-4 * abs_sum * std::sqrt(y_norm));
  }
  probe.use_input_set(0);
}

TEST_CASE("a rank that does not tune takes every decision from the share hook, as rank 0 made them", "[cpu]") {
  const char* text =
      "name: t\n"
      "input: {channels: 2, height: 8, width: 8}\n"
      "layers:\n"
      "  - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: fc, type: dense, units: 3}\n";
  const ExecContext ctx = ExecContext::cpu(1);
  ModelSpec spec_root = parse_model_text(text, "t.yaml"), spec_other = parse_model_text(text, "t.yaml");
  auto root = Graph::build(spec_root);
  root->choose_backends(Device::cpu);
  AutotuneOptions opt;
  std::string shared;
  opt.share = [&](const std::string& mine) {
    shared = mine;
    return mine;  // rank 0: its own decisions are the job's
  };
  autotune_graph(*root, ctx, 4, opt);
  CHECK(shared == autotune_decisions(*root));
  CHECK(shared == "conv c1 cpu:im2col_gemm cpu:im2col_gemm cpu:im2col_gemm\nbackend fc cpu\n");

  auto other = Graph::build(spec_other);
  other->choose_backends(Device::cpu);
  AutotuneOptions follower;
  follower.tune = false;
  std::string asked = "unset";
  follower.share = [&](const std::string& mine) {
    asked = mine;
    return shared;
  };
  autotune_graph(*other, ctx, 4, follower);
  CHECK(asked == "");  // it timed nothing
  auto* planned = other->node(0).layer->conv_planned();
  REQUIRE(planned);
  for (ConvDir d : kConvDirs) {
    REQUIRE(planned->conv_plan().algo(d));
    CHECK(planned->conv_plan().algo(d)->name == "cpu:im2col_gemm");
    CHECK(planned->conv_plan().notes[size_t(d)] == "rank 0's choice");
  }
  CHECK(autotune_decisions(*other) == shared);
  CHECK_THROWS_WITH(apply_autotune_decisions(*other, "conv nope a b c\n", "x"),
                    Catch::Matchers::Contains("no layer 'nope'"));
  CHECK_THROWS_WITH(apply_autotune_decisions(*other, "conv c1 cpu:im2col_gemm cpu:bogus cpu:im2col_gemm\n", "x"),
                    Catch::Matchers::Contains("cpu:bogus"));
}

TEST_CASE("each cudnn layer type has its own accuracy tolerance", "[cpu]") {
  CHECK(cudnn_layer_tolerance("batchnorm") == kBatchnormCudnnTolerance);
  for (const char* t : {"maxpool", "avgpool", "global_avgpool"}) CHECK(cudnn_layer_tolerance(t) == kPoolCudnnTolerance);
  for (const char* t : {"relu", "sigmoid", "tanh", "elu", "leaky_relu"})
    CHECK(cudnn_layer_tolerance(t) == kActivationCudnnTolerance);
  CHECK(cudnn_layer_tolerance("conv2d") == kConvAccuracyTolerance);
  // Pointwise and selecting ops are held tighter than reductions.
  CHECK(kPoolCudnnTolerance < kBatchnormCudnnTolerance);
  CHECK(kActivationCudnnTolerance < kBatchnormCudnnTolerance);
}

TEST_CASE("a layer knows whether cudnn came from train.backend or from its own backend key", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\n"
      "input: {channels: 2, height: 6, width: 6}\n"
      "layers:\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: bn2, type: batchnorm, backend: cudnn}\n"
      "  - {name: f, type: flatten}\n"
      "  - {name: fc, type: dense, units: 3}\n"
      "train: {backend: cudnn}\n",
      "t.yaml");
  auto g = Graph::build(spec);
  Layer& bn1 = *g->node(0).layer;
  Layer& bn2 = *g->node(1).layer;
  CHECK_FALSE(bn1.backend_from_train());
  if (!bn1.supports(Backend::cudnn)) {
    CNN_SKIP("this build has no cuDNN: train.backend cudnn cannot place a layer");
  }
  bn1.choose_backend(Device::cuda);  // resolves requests only: no device is touched
  bn2.choose_backend(Device::cuda);
  CHECK(bn1.backend() == Backend::cudnn);
  CHECK(bn1.backend_from_train());
  CHECK(bn2.backend() == Backend::cudnn);
  CHECK_FALSE(bn2.backend_from_train());
  // Sticky: resolving again keeps where the request came from.
  bn1.choose_backend(Device::cuda);
  CHECK(bn1.backend_from_train());
}

TEST_CASE("the conv cache key differs by precision, and a tf32 key carries the TF32 tolerance", "[cpu]") {
  const Conv2dShape sh = Conv2dShape::make(2, 3, 8, 8, 4, 3, 3);
  auto key = [&](MathMode m, double tf32_tol = kTf32AccuracyTolerance) {
    return autotune_conv_key("gpu", sh, ConvDir::backward_filter, {"cuda", "cudnn"}, false, 1 << 20, 1e-4, m, tf32_tol);
  };
  CHECK(key(MathMode::fp32) != key(MathMode::tf32));
  CHECK(key(MathMode::fp32).find("|math fp32") != std::string::npos);
  CHECK(key(MathMode::tf32).find("|math tf32 tol 0.005") != std::string::npos);
  CHECK(key(MathMode::tf32) != key(MathMode::tf32, 1e-2));
  CHECK(key(MathMode::fp32) == key(MathMode::fp32, 1e-2));  // an fp32 decision has no TF32 candidates
  // An fp32 decision is not reused by a tf32 run (which may pick a TF32 algorithm), nor the reverse.
  check_not_reused(key(MathMode::fp32), key(MathMode::tf32));
}

TEST_CASE("accuracy tolerances per precision: FP32 candidates keep 1e-4, TF32 ones get 5e-3", "[cpu]") {
  CHECK(conv_tolerance(MathMode::fp32) == kConvAccuracyTolerance);
  CHECK(conv_tolerance(MathMode::tf32) == kTf32AccuracyTolerance);
  CHECK(kTf32AccuracyTolerance == 5e-3);
  // Above one truncated TF32 factor's worst relative error (2^-10), below what the FP32 guard was
  // made to reject (cuDNN's winograd_nonfused: 0.5% to 7% off on 5x5 filters, the low end excepted).
  CHECK(kTf32AccuracyTolerance > std::ldexp(1.0, -10));
  CHECK(kTf32AccuracyTolerance > kConvAccuracyTolerance);
  CHECK(kTf32AccuracyTolerance < 1e-2);
}

TEST_CASE("a per-candidate tolerance admits a TF32 candidate that the FP32 limit would exclude", "[cpu]") {
  FakeClock clock{{{"cuda:implicit_gemm", 2.0}, {"cudnn:gemm", 0.5}, {"cudnn:fft", 0.4}}};
  std::map<std::string, double> err{{"cuda:implicit_gemm", 1e-6}, {"cudnn:gemm", 1.2e-3}, {"cudnn:fft", 8e-3}};
  auto rel_error = [&](const std::string& name) { return err.at(name); };
  auto tolerance_of = [](const std::string& name) {
    return name.rfind("cudnn:", 0) == 0 ? conv_tolerance(MathMode::tf32) : conv_tolerance(MathMode::fp32);
  };
  AutotuneCache cache("");
  LogCapture log;
  TuneOutcome r = tune_choice("layer 'c1' forward", {"cuda:implicit_gemm", "cudnn:gemm", "cudnn:fft"},
                              std::ref(clock), cache, "k", rel_error,
                              std::function<double(const std::string&)>(tolerance_of));
  CHECK(r.record.winner == "cudnn:gemm");  // 1.2e-3: within TF32's 5e-3, over FP32's 1e-4
  REQUIRE(r.excluded.size() == 1);
  CHECK(r.excluded[0] == "cudnn:fft: 8.0e-03 from the reference");
  CHECK(log.text.str().find("over the 5e-03 limit: excluded") != std::string::npos);
  // Every candidate over its own limit: the error names both limits.
  err = {{"cuda:implicit_gemm", 2e-4}, {"cudnn:gemm", 6e-3}, {"cudnn:fft", 8e-3}};
  AutotuneCache fresh("");
  try {
    tune_choice("layer 'c1' forward", {"cuda:implicit_gemm", "cudnn:gemm", "cudnn:fft"}, std::ref(clock), fresh, "k",
                rel_error, std::function<double(const std::string&)>(tolerance_of));
    FAIL("no error");
  } catch (const NoAccurateCandidate& e) {
    CHECK(std::string(e.what()).find("no candidate within the accuracy tolerance 1e-04 or 5e-03 is left") !=
          std::string::npos);
  }
}

TEST_CASE("only cuDNN's f32 and f32cl convolution rows follow the math mode, ours, the CPU's and 16-bit rows do not",
          "[cpu]") {
  int cudnn_rows = 0;
  for (ConvDir d : kConvDirs)
    for (const ConvAlgo& a : conv2d_table(d).rows) {
      INFO(a.name << " " << to_string(a.dtype));
      if (is_16bit(a.dtype)) {  // bf16 or f16 products whatever the call allows
        CHECK(!a.follows_math);
        continue;
      }
      const bool cudnn = a.backend == Backend::cudnn;
      CHECK(a.follows_math == cudnn);
      CHECK(a.math_used(MathMode::fp32) == MathMode::fp32);
      CHECK(a.math_used(MathMode::tf32) == (cudnn ? MathMode::tf32 : MathMode::fp32));
      CHECK(conv_math_tag(a, MathMode::fp32).empty());
      CHECK(conv_math_tag(a, MathMode::tf32) == (cudnn ? " [tf32]" : " [fp32]"));
      cudnn_rows += cudnn;
    }
  CHECK((cudnn_rows > 0) == backend_built(Backend::cudnn));
}

TEST_CASE("autotune on the cpu under tf32 tags every direction as FP32 and says the precision", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\n"
      "input: {channels: 2, height: 8, width: 8}\n"
      "layers:\n"
      "  - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: 1, algo: {forward: cpu:im2col_gemm}}\n"
      "  - {name: fc, type: dense, units: 3}\n"
      "train: {precision: tf32}\n",
      "t.yaml");
  auto g = Graph::build(spec);
  g->choose_backends(Device::cpu);
  const ExecContext ctx = ExecContext::cpu(1);
  const std::vector<std::string> lines = autotune_graph(*g, ctx, 4, AutotuneOptions{});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("layer 'c1' (conv2d ") == 0);
  CHECK(lines[0].find(", precision tf32): forward cpu:im2col_gemm (requested) [fp32]; backward_data cpu:im2col_gemm "
                      "(only candidate) [fp32]") != std::string::npos);
  CHECK(describe_conv_plan(*g->node(0).layer)[1] == "backward_data cpu:im2col_gemm [fp32] (only candidate)");
}

TEST_CASE("the conv cache key carries the activations' dtype, and a bf16 key the bf16 tolerance", "[cpu]") {
  const Conv2dShape sh = Conv2dShape::make(2, 8, 8, 8, 8, 3, 3);
  auto key = [&](DType t, double bf16_tol = kBf16AccuracyTolerance) {
    return autotune_conv_key("gpu", sh, ConvDir::forward, {"cuda", "cudnn"}, false, 1 << 20, 1e-4, MathMode::fp32,
                             kTf32AccuracyTolerance, t, bf16_tol);
  };
  CHECK(key(DType::f32) != key(DType::bf16));
  CHECK(key(DType::f32).find("|math fp32|dtype f32") != std::string::npos);
  CHECK(key(DType::bf16).find("|dtype bf16 tol 0.01") != std::string::npos);
  CHECK(key(DType::bf16) != key(DType::bf16, 2e-2));
  CHECK(key(DType::f32) == key(DType::f32, 2e-2));  // an f32 decision has no bf16 candidates
  CHECK(autotune_conv_key("gpu", sh, ConvDir::forward, {"cuda", "cudnn"}, false, 1 << 20, 1e-4, MathMode::fp32) ==
        key(DType::f32));
  // A bf16 layer's decision (among bf16 rows) is not reused for an f32 layer of the same shape.
  check_not_reused(key(DType::bf16), key(DType::f32));
  // Nor an f16 layer's, which carries its own tolerance.
  CHECK(key(DType::f16, kF16AccuracyTolerance).find("|dtype f16 tol 0.00125") != std::string::npos);
  check_not_reused(key(DType::f16, kF16AccuracyTolerance), key(DType::bf16));
}

TEST_CASE("accuracy tolerances per precision: bf16 candidates get 1e-2 in every math mode", "[cpu]") {
  CHECK(conv_tolerance(DType::bf16, MathMode::fp32) == kBf16AccuracyTolerance);
  CHECK(conv_tolerance(DType::bf16, MathMode::tf32) == kBf16AccuracyTolerance);
  CHECK(conv_tolerance(DType::f32, MathMode::fp32) == kConvAccuracyTolerance);
  CHECK(conv_tolerance(DType::f32, MathMode::tf32) == kTf32AccuracyTolerance);
  CHECK(kBf16AccuracyTolerance == 1e-2);
  // Three times the RMS of two independent bf16 roundings (sqrt(2/3) u, u = 2^-8); what it rejects
  // is measured below (bf16 partial sums).
  const double u = std::ldexp(1.0, -8);
  CHECK(kBf16AccuracyTolerance > 3 * std::sqrt(2.0 / 3.0) * u);
  CHECK(kBf16AccuracyTolerance > kTf32AccuracyTolerance);
  // f16: the same rule with u = 2^-11.
  CHECK(conv_tolerance(DType::f16, MathMode::tf32) == kF16AccuracyTolerance);
  CHECK(kF16AccuracyTolerance > 3 * std::sqrt(2.0 / 3.0) * std::ldexp(1.0, -11));
  CHECK(kF16AccuracyTolerance < kBf16AccuracyTolerance);
}

namespace {

// A bf16 (f16) forward convolution that rounds every partial sum to bf16 (f16), what the guard
// must reject: x (N, H, W, C), w (K, C, R, S) FP32 rounded, y (N, P, Q, K) in x's dtype; groups 1.
void forward_partial_sums_16(const ExecContext&, const Conv2dShape& s, const ConvOperands& op) {
  const DType t = op.x.dtype();
  REQUIRE(((t == DType::bf16 || t == DType::f16) && op.y.dtype() == t));
  const void* x = op.x.data();
  const float* w = op.w.f32();
  void* y = op.y.data();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t p = 0; p < s.P; ++p)
      for (int64_t q = 0; q < s.Q; ++q)
        for (int64_t k = 0; k < s.K; ++k) {
          float acc = 0;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t u = 0; u < s.S; ++u) {
                const int64_t h = p * s.stride_h - s.pad_h + r * s.dilation_h, v = q * s.stride_w - s.pad_w + u * s.dilation_w;
                if (h < 0 || h >= s.H || v < 0 || v >= s.W) continue;
                const float xv = load_as_float(x, t, ((n * s.H + h) * s.W + v) * s.C + c);
                acc = round_to(t, acc + xv * round_to(t, w[((k * s.C + c) * s.R + r) * s.S + u]));
              }
          if (op.b.f32()) acc += op.b.f32()[k];
          store_from_float(y, t, ((n * s.P + p) * s.Q + q) * s.K + k, acc);
        }
}

}  // namespace

TEST_CASE("a bf16 conv probe runs bf16 rows on bf16 operands against the FP32 reference on the same values",
          "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 32, 7, 6, 8, 3, 3, 1, 1, 1, 1);
  ConvProbe probe(ctx, sh, 1, DType::bf16);
  CHECK(probe.dtype() == DType::bf16);
  const ConvOperands fwd = probe.operands(ConvDir::forward);
  CHECK(fwd.x.dtype() == DType::bf16);
  CHECK(fwd.y.dtype() == DType::bf16);
  CHECK(fwd.w.dtype() == DType::f32);  // the FP32 master: bf16 rows round it themselves
  CHECK(probe.operands(ConvDir::backward_filter).dw.dtype() == DType::f32);
  // The emulation rounds the weights and the output once each: more than an FP32 algorithm may
  // differ, within two roundings' RMS (accuracy_tolerance.h); dw and db stay FP32 sums of the
  // exactly read bf16 inputs.
  const double u = std::ldexp(1.0, -8);
  for (ConvDir d : kConvDirs) {
    INFO(to_string(d));
    const double e = probe.run_and_compare(conv2d_algo(d, "cpu:im2col_gemm", DType::bf16));
    if (d == ConvDir::backward_filter) {
      CHECK(e < 1e-5);
    } else {
      CHECK(e > kConvAccuracyTolerance);
      CHECK(e < std::sqrt(2.0 / 3.0) * u);
    }
    CHECK(e < conv_tolerance(DType::bf16, MathMode::fp32));
  }
  // Set 1's dy (for the backward directions) holds bf16 values too.
  probe.use_input_set(1);
  CHECK(probe.operands(ConvDir::backward_data).dy.dtype() == DType::bf16);
  probe.use_input_set(0);
  // An f32 row cannot read the probe's bf16 operands (the dtype-checked views refuse).
  CHECK_THROWS_WITH(probe.run_and_compare(conv2d_algo(ConvDir::forward, "cpu:im2col_gemm")),
                    Catch::Matchers::Contains("dtype bf16 reached an implementation that reads f32"));
  // Rounding every partial sum to bf16 over this 288-term reduction is over the bf16 limit.
  ConvAlgo sloppy = conv2d_algo(ConvDir::forward, "cpu:im2col_gemm", DType::bf16);
  sloppy.run = forward_partial_sums_16;
  CHECK(probe.run_and_compare(sloppy) > kBf16AccuracyTolerance);
}

// f32cl (tf32's channels-last activations): the probe uploads x and dy channels-last and reads y
// and dx back through the same permute, so an f32cl row (here the CPU's, an f32 convolution between
// permutes) is as accurate as an f32 one; an NCHW f32 row fed the channels-last operands (View::f32()
// reads both) computes garbage, which the probe's error shows.
TEST_CASE("an f32cl conv probe runs f32cl rows on channels-last operands against the FP32 reference", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 8, 7, 6, 8, 3, 3, 1, 1, 1, 1);
  ConvProbe probe(ctx, sh, 1, DType::f32cl);
  CHECK(probe.dtype() == DType::f32cl);
  const ConvOperands fwd = probe.operands(ConvDir::forward);
  CHECK(fwd.x.dtype() == DType::f32cl);
  CHECK(fwd.y.dtype() == DType::f32cl);
  CHECK(fwd.w.dtype() == DType::f32);
  for (ConvDir d : kConvDirs)
    for (int set : {0, 1}) {
      INFO(to_string(d) << ", input set " << set);
      probe.use_input_set(set);
      CHECK(probe.run_and_compare(conv2d_algo(d, "cpu:im2col_gemm", DType::f32cl)) < kConvAccuracyTolerance);
    }
  probe.use_input_set(0);
  CHECK(probe.run_and_compare(conv2d_algo(ConvDir::forward, "cpu:im2col_gemm")) > 0.1);
}

TEST_CASE("an f16 conv probe runs f16 rows within two f16 roundings, its set-1 gradients in f16's normal range",
          "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 32, 7, 6, 8, 3, 3, 1, 1, 1, 1);
  ConvProbe probe(ctx, sh, 1, DType::f16);
  CHECK(probe.operands(ConvDir::forward).x.dtype() == DType::f16);
  CHECK(probe.operands(ConvDir::forward).w.dtype() == DType::f32);
  const double u = std::ldexp(1.0, -11);
  for (int set : {0, 1}) {
    probe.use_input_set(set);
    for (ConvDir d : kConvDirs) {
      INFO(to_string(d) << ", set " << set);
      const double e = probe.run_and_compare(conv2d_algo(d, "cpu:im2col_gemm", DType::f16));
      if (d == ConvDir::backward_filter) {
        CHECK(e < 1e-5);
      } else {
        CHECK(e > 0.0);
        CHECK(e < std::sqrt(2.0 / 3.0) * u);  // at 2^-17 set 1's dx would sit in f16's subnormals, far above this
      }
      CHECK(e < conv_tolerance(DType::f16, MathMode::fp32));
    }
  }
  probe.use_input_set(0);
  ConvAlgo sloppy = conv2d_algo(ConvDir::forward, "cpu:im2col_gemm", DType::f16);
  sloppy.run = forward_partial_sums_16;
  CHECK(probe.run_and_compare(sloppy) > kF16AccuracyTolerance);
}
