// The autotuner on the GPU: a small model's conv directions and cuda-vs-cudnn layers are measured
// and cached on the first run, and the second run takes every timed decision from the cache;
// the tuned graph then runs a forward and backward step. The accuracy guard excludes only
// algorithms that really are inaccurate, and every chosen algorithm is within the tolerance; the
// bf16 (f16) probe holds our bf16 (f16) rows to the bf16 (f16) tolerance. A warm cache makes no
// probe operands.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "config/model_spec.h"
#include "core/cuda_context.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"
#include "support/catch.h"
#include "support/quick.h"
#include "support/test_util.h"
#include "tune/autotune.h"
#include "tune/conv_accuracy.h"
#include "tune_twice.h"
#include "model/device_setup.h"

using namespace cnn;

static const char* kModel =
    "name: t\n"
    "input: {channels: 3, height: 16, width: 16}\n"
    "layers:\n"
    "  - {name: c1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: r1, type: relu}\n"
    "  - {name: c2, type: conv2d, filters: 8, kernel: 5, padding: 2, algo: {backward_data: cuda:implicit_gemm}}\n"
    "  - {name: p1, type: maxpool, kernel: 2}\n"
    "  - {name: fc, type: dense, units: 5}\n";

// One forward and backward of a tuned graph at batch 4 (the output as its own gradient).
static void run_training_step(Graph& g, DeviceSetup& dev) {
  Executor ex(g, 4, dev.ctx());
  ex.init_params(1);
  ex.forward(4, true, 0, 1);
  ex.output_grad().copy_from(ex.output());
  ex.backward();
  dev.synchronize();
}

TEST_CASE("autotune on the gpu measures, writes the cache, and reuses it on the next run", "[gpu]") {
  CNN_REQUIRE_GPU();
  test::TempDir dir;
  AutotuneOptions opt;
  opt.cache_path = (dir / "autotune.json").string();
  std::vector<std::string> first, second;
  for (int run = 0; run < 2; ++run) {
    ModelSpec spec = parse_model_text(kModel, "t.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    (run == 0 ? first : second) = autotune_graph(*g, dev.ctx(), 4, opt);
    for (int i : {0, 3}) {
      auto* p = g->node(i).layer->conv_planned();
      REQUIRE(p);
      for (ConvDir d : kConvDirs) {
        REQUIRE(p->conv_plan().algo(d));
        CHECK(p->conv_plan().algo(d)->backend != Backend::cpu);
      }
    }
    CHECK(g->node(3).layer->conv_planned()->conv_plan().algo(ConvDir::backward_data)->name ==
          "cuda:implicit_gemm");
    for (int i = 0; i < g->size(); ++i) CHECK_FALSE(g->node(i).layer->backend_to_measure());
    run_training_step(*g, dev);  // the tuned graph runs
  }
  REQUIRE(std::filesystem::exists(opt.cache_path));
  REQUIRE(first.size() == second.size());
  for (const std::string& line : first) CHECK(line.find("[cache]") == std::string::npos);
  for (const std::string& line : second) {
    INFO(line);
    if (line.find("runner-up") != std::string::npos) CHECK(line.find("[cache]") != std::string::npos);
  }
}

TEST_CASE("a warm-cache autotune on the gpu makes no probe operands and repeats the cold run's decisions", "[gpu]") {
  CNN_REQUIRE_GPU();
  const test::TunedTwice t = test::tune_twice(kModel, 4);
  INFO(t.decisions[0]);
  CHECK(t.stats[0].timed > 0);
  CHECK(t.stats[0].probe_sets > 0);
  CHECK(t.stats[1].timed == 0);
  CHECK(t.stats[1].cache_hits == t.stats[0].timed + t.stats[0].cache_hits);
  CHECK(t.stats[1].probe_sets == 0);
  CHECK(t.decisions[1] == t.decisions[0]);
}

TEST_CASE("autotune on the gpu excludes only inaccurate algorithms and every chosen one is within the tolerance",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  // fer_cnn-like: 3x3 and 5x5 filters, where FFT and Winograd variants are tempting.
  const char* model =
      "name: acc\n"
      "input: {channels: 1, height: 48, width: 48}\n"
      "layers:\n"
      "  - {name: c1, type: conv2d, filters: 32, kernel: 3, padding: 1}\n"
      "  - {name: r1, type: relu}\n"
      "  - {name: c2, type: conv2d, filters: 64, kernel: 5, padding: 2}\n"
      "  - {name: p1, type: maxpool, kernel: 2}\n"
      "  - {name: c3, type: conv2d, filters: 64, kernel: 3, padding: 1}\n"
      "  - {name: fc, type: dense, units: 7}\n";
  // Under CNN_TEST_QUICK (instrumented runs) batch 8, and each candidate timed once without warm-up
  // (the fewest runs the autotuner takes): every candidate still runs and is probed, and the
  // assertions below are the same (the transforms' losses grow with the filter, not the batch).
  const int64_t batch = test::quick() ? 8 : 32;
  ModelSpec spec = parse_model_text(model, "acc.yaml");
  auto g = Graph::build(spec);
  DeviceSetup dev("cuda", *g, false);
  AutotuneOptions opt;  // no cache: every decision is measured
  opt.cache_path = "";
  if (test::quick()) {
    opt.warmup = 0;
    opt.repeats = 1;
  }
  std::ostringstream log;
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(log)));
  std::vector<std::string> lines;
  try {
    lines = autotune_graph(*g, dev.ctx(), batch, opt);
  } catch (...) {
    spdlog::set_default_logger(old);
    throw;
  }
  spdlog::set_default_logger(old);
  INFO(log.str());
  std::map<std::string, ConvPlanned*> convs;
  for (int i = 0; i < g->size(); ++i)
    if (auto* p = g->node(i).layer->conv_planned()) convs[g->node(i).layer->name()] = p;
  REQUIRE(convs.size() == 3);
  // Plain FP32 sums (direct, implicit or explicit GEMM) are never excluded; what is excluded is
  // off by more than plain FP32 rounding on fresh operands too.
  const std::set<std::string> plain{"cuda:implicit_gemm", "cuda:direct", "cuda:im2col_gemm", "cudnn:implicit_gemm",
                                    "cudnn:implicit_precomp_gemm", "cudnn:gemm", "cudnn:algo_0", "cudnn:algo_1",
                                    "cudnn:algo_3"};
  const std::regex excluded_re(R"((\S+) for layer '(\w+)' (\w+): (\S+) from the reference, over the \S+ limit: excluded)");
  const std::string text = log.str();
  int excluded = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), excluded_re), end; it != end; ++it, ++excluded) {
    const std::string algo = (*it)[1], layer = (*it)[2], dir = (*it)[3];
    INFO(it->str());
    CHECK(plain.count(algo) == 0);
    REQUIRE(convs.count(layer));
    ConvDir d = dir == "forward" ? ConvDir::forward : dir == "backward_data" ? ConvDir::backward_data
                                                                             : ConvDir::backward_filter;
    ConvProbe fresh(dev.ctx(), convs[layer]->conv_shape(batch), 7);
    CHECK(fresh.run_and_compare(conv2d_algo(d, algo)) > opt.tolerance / 10);
  }
  WARN(excluded << " candidates excluded as inaccurate");
  // Every chosen algorithm is within the tolerance, measured again on other operands.
  for (const auto& [name, p] : convs) {
    ConvProbe fresh(dev.ctx(), p->conv_shape(batch), 11);
    for (ConvDir d : kConvDirs) {
      const ConvAlgo* a = p->conv_plan().algo(d);
      REQUIRE(a);
      const double err = fresh.run_and_compare(*a);
      INFO(name << " " << to_string(d) << " " << a->name << " rel_err " << err);
      CHECK(err <= opt.tolerance);
    }
  }
  for (const std::string& line : lines) {
    INFO(line);
    // Conv lines name each winner's measured error (cuda-vs-cudnn lines of other layers do not).
    if (line.find("(conv2d") != std::string::npos && line.find("runner-up") != std::string::npos)
      CHECK(line.find("rel_err") != std::string::npos);
  }
}

// The bf16 (f16) guard's derivation (accuracy_tolerance.h) on the GPU: our bf16 (f16) rows round the
// weights and the output of forward and backward data (more than FP32's 1e-4, within the dtype's
// limit) and sum dw and db in FP32 from exactly read 16-bit inputs (within FP32's limit).
static void check_probe_on_gpu(DType t) {
  CudaContext cuda;
  int checked = 0;
  for (const Conv2dShape& sh : {Conv2dShape::make(4, 32, 12, 12, 64, 3, 3, 1, 1, 1, 1),
                                Conv2dShape::make(4, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16),
                                Conv2dShape::make(4, 1, 20, 20, 8, 3, 3, 1, 1, 1, 1)}) {
    ConvProbe probe(cuda.ctx(), sh, 3, t);
    for (ConvDir d : kConvDirs)
      for (const ConvAlgo& a : conv2d_algos(d)) {
        if (a.dtype != t || a.backend != Backend::cuda || !a.can_implement(cuda.ctx(), sh)) continue;
        const double e = probe.run_and_compare(a);
        INFO(sh.to_string() << " " << to_string(d) << " " << a.name << " rel_err " << e);
        CHECK(e <= conv_tolerance(t, MathMode::fp32));
        if (d == ConvDir::backward_filter)
          CHECK(e <= kConvAccuracyTolerance);
        else
          CHECK(e > kConvAccuracyTolerance);
        ++checked;
      }
  }
  CHECK(checked >= 9);
}

TEST_CASE("the bf16 accuracy probe on the gpu holds our bf16 conv rows within the bf16 tolerance", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_probe_on_gpu(DType::bf16);
}

TEST_CASE("the f16 accuracy probe on the gpu holds our f16 conv rows within the f16 tolerance", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_probe_on_gpu(DType::f16);
}

// A batchnorm with a fused activation is timed per candidate as the step would run it, and after
// autotune the fusions follow the backends: on cudnn the relu is a layer of its own again (cuDNN
// fuses nothing), on cuda it stays fused. Before, a batchnorm moved to cudnn kept running our fused
// kernels, so its "cudnn" timing was ours and its decision, cached by shape, went to an unfused twin.
TEST_CASE("autotune on the gpu leaves an activation fused only into a batchnorm that runs our kernels", "[gpu]") {
  CNN_REQUIRE_GPU();
  for (const char* bn1 : {"cuda", "cudnn"}) {
    INFO("bn1 on " << bn1);
    ModelSpec spec = parse_model_text(kModel, "t.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    REQUIRE(g->node(1).fused_act == 2);  // bn1+r1, fused while bn1 was on our kernels
    AutotuneOptions opt;
    // Rank 0's decisions (the data-parallel path) put bn1 on the backend of this section.
    opt.share = [&](const std::string& mine) {
      std::string job = mine;
      for (const char* from : {"backend bn1 cuda\n", "backend bn1 cudnn\n"})
        if (const size_t at = job.find(from); at != std::string::npos)
          job.replace(at, std::string(from).size(), fmt::format("backend bn1 {}\n", bn1));
      return job;
    };
    const std::vector<std::string> lines = autotune_graph(*g, dev.ctx(), 4, opt);
    const bool tuned = std::any_of(lines.begin(), lines.end(), [](const std::string& s) {
      return s.find("layer 'bn1' (batchnorm) forward+backward (+ r1)") != std::string::npos;
    });
    CHECK(tuned);
    CHECK(to_string(g->node(1).layer->backend()) == std::string(bn1));
    const bool on_cuda = std::string(bn1) == "cuda";
    CHECK((g->node(1).fused_act == 2) == on_cuda);
    CHECK((g->node(2).fused_into == 1) == on_cuda);
    CHECK(g->node(1).layer->backward_needs_output() == on_cuda);  // the layer's own fused state
    run_training_step(*g, dev);
  }
}
