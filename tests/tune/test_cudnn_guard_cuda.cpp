// The accuracy guard over every cuDNN choice (issue 15 item 10) on the GPU: under train.backend
// cudnn each batchnorm, pooling and activation layer on cuDNN is compared with our CUDA kernels
// and each conv direction is tuned among cuDNN's algorithms with the guard; a failure refuses
// train.backend's choice with a warning (the layer runs on our kernels) and makes a layer's own
// `backend: cudnn` or `algo:` name a config error at the layer. A warm cache keeps the passes.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>

#include "config/model_spec.h"
#include "core/error.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"
#include "ops/backend.h"
#include "support/catch.h"
#include "tune/accuracy_tolerance.h"
#include "tune/autotune.h"
#include "tune/conv_accuracy.h"
#include "model/device_setup.h"
#include "tune/layer_accuracy.h"
#include "tune_twice.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

#define CNN_REQUIRE_CUDNN()                                                  \
  do {                                                                       \
    CNN_REQUIRE_GPU();                                                       \
    if (!backend_built(Backend::cudnn)) CNN_SKIP("this build has no cuDNN"); \
  } while (0)

// fer_cnn's layer kinds at a small size: conv, batchnorm, relu, max pooling, a dense batchnorm.
std::string model(const std::string& train_backend, const std::string& bn_backend = "auto",
                  const std::string& conv_extra = "") {
  return "name: guard\n"
         "input: {channels: 1, height: 24, width: 24}\n"
         "layers:\n"
         "  - {name: c1, type: conv2d, filters: 16, kernel: 3, padding: 1, bias: false" + conv_extra + "}\n"
         "  - {name: bn1, type: batchnorm, backend: " + bn_backend + "}\n"
         "  - {name: r1, type: relu}\n"
         "  - {name: p1, type: maxpool, kernel: 2}\n"
         "  - {name: c2, type: conv2d, filters: 32, kernel: 3, padding: 1, bias: false}\n"
         "  - {name: bn2, type: batchnorm}\n"
         "  - {name: r2, type: sigmoid}\n"
         "  - {name: p2, type: avgpool, kernel: 2}\n"
         "  - {name: f, type: flatten}\n"
         "  - {name: fc1, type: dense, units: 64}\n"
         "  - {name: bn3, type: batchnorm}\n"
         "  - {name: r3, type: tanh}\n"
         "  - {name: fc2, type: dense, units: 7}\n"
         "train: {backend: " + train_backend + ", batch_size: 32}\n";
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

AutotuneOptions no_cache() {
  AutotuneOptions opt;
  opt.cache_path = "";
  return opt;
}

}  // namespace

TEST_CASE("cudnn batchnorm, pooling and activations are within their tolerances of our cuda kernels", "[gpu][cudnn]") {
  CNN_REQUIRE_CUDNN();
  ModelSpec spec = parse_model_text(model("cudnn"), "guard.yaml");
  auto g = Graph::build(spec);
  DeviceSetup dev("cuda", *g, false);
  int checked = 0;
  for (int i = 0; i < g->size(); ++i) {
    const Layer& l = *g->node(i).layer;
    if (l.conv_planned() || !l.supports(Backend::cudnn)) continue;
    const auto acc = layer_backend_error(*g, i, dev.ctx(), 32, Backend::cudnn, Backend::cuda);
    REQUIRE(acc);
    INFO(l.name() << " (" << l.type() << "): " << acc->rel_err << " on " << acc->worst);
    CHECK(acc->rel_err <= cudnn_layer_tolerance(l.type()));
    // The probe leaves the layer on the backend it found.
    CHECK(l.backend() == Backend::cudnn);
    ++checked;
  }
  CHECK(checked >= 6);  // bn1, r1, p1, bn2, r2, p2, and bn3, r3 where cuDNN takes a (C) input
}

TEST_CASE("train.backend cudnn tunes convolutions among cudnn algorithms and guards every cudnn layer",
          "[gpu][cudnn]") {
  CNN_REQUIRE_CUDNN();
  ModelSpec spec = parse_model_text(model("cudnn"), "guard.yaml");
  auto g = Graph::build(spec);
  DeviceSetup dev("cuda", *g, false);
  const AutotuneOptions opt = no_cache();
  LogCapture log;
  const std::vector<std::string> lines = autotune_graph(*g, dev.ctx(), 32, opt);
  INFO(log.text.str());
  for (int i = 0; i < g->size(); ++i) {
    const Layer& l = *g->node(i).layer;
    INFO(l.name());
    if (auto* p = l.conv_planned()) {
      // Tuned with the guard: every chosen algorithm is within the tolerance on fresh operands.
      ConvProbe fresh(dev.ctx(), p->conv_shape(32), 5);
      for (ConvDir d : kConvDirs) {
        const ConvAlgo* a = p->conv_plan().algo(d);
        REQUIRE(a);
        CHECK(a->backend == Backend::cudnn);
        CHECK(fresh.run_and_compare(*a) <= opt.tolerance);
      }
    } else if (l.supports(Backend::cudnn)) {
      // On cuDNN with a logged measurement, or refused with a warning.
      bool logged = false;
      for (const std::string& line : lines) logged = logged || line.find("layer '" + l.name() + "'") != std::string::npos;
      CHECK(logged);
      if (l.backend() == Backend::cuda) CHECK_THAT(log.text.str(), Contains("train.backend cudnn refused"));
    }
  }
}

TEST_CASE("a warm cache keeps the guard's passes: train.backend cudnn starts again without a probe", "[gpu][cudnn]") {
  CNN_REQUIRE_CUDNN();
  // An explicit cuDNN algorithm too: its guard is cached like the layers'.
  const test::TunedTwice t = test::tune_twice(model("cudnn", "auto", ", algo: {forward: cudnn:implicit_gemm}"), 32);
  INFO(t.decisions[0]);
  CHECK(t.stats[0].probe_sets > 0);
  CHECK(t.decisions[1] == t.decisions[0]);
  bool refused = false;
  for (const std::string& line : t.lines[0]) refused = refused || line.find("refused") != std::string::npos;
  if (refused) CNN_SKIP("the guard refused a layer here, which is measured on every start");
  CHECK(t.stats[1].probe_sets == 0);
  CHECK(t.stats[1].timed == 0);
  for (const std::string& line : t.lines[1]) {
    INFO(line);
    if (line.find("cudnn:") != std::string::npos || line.find("from our cuda kernels") != std::string::npos)
      CHECK(line.find("[cache]") != std::string::npos);
  }
}

TEST_CASE("a layer's own backend cudnn that fails the guard is a config error, train.backend's is refused to cuda",
          "[gpu][cudnn]") {
  CNN_REQUIRE_CUDNN();
  // A tolerance no two FP32 implementations of a batchnorm meet: both ways of failing.
  AutotuneOptions strict = no_cache();
  strict.tolerance = 1e-30;
  strict.tolerance_given = true;
  auto bn_model = [](const std::string& train_backend, const std::string& bn_backend) {
    return "name: bn\n"
           "input: {channels: 8, height: 12, width: 12}\n"
           "layers:\n"
           "  - {name: bn1, type: batchnorm, backend: " + bn_backend + "}\n"
           "  - {name: f, type: flatten}\n"
           "  - {name: fc, type: dense, units: 3}\n"
           "train: {backend: " + train_backend + "}\n";
  };
  {
    ModelSpec spec = parse_model_text(bn_model("cuda", "cudnn"), "bn.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    const auto acc = layer_backend_error(*g, 0, dev.ctx(), 32, Backend::cudnn, Backend::cuda);
    REQUIRE(acc);
    if (acc->rel_err == 0) CNN_SKIP("cuDNN's batchnorm equals ours bit for bit here; nothing to refuse");
    try {
      autotune_graph(*g, dev.ctx(), 32, strict);
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.key_path() == "layers.bn1.backend");
      CHECK_THAT(e.message(), Contains("backend cudnn was requested"));
      CHECK_THAT(e.message(), Contains("--autotune-tolerance"));
    }
  }
  {
    ModelSpec spec = parse_model_text(bn_model("cudnn", "auto"), "bn.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    REQUIRE(g->node(0).layer->backend() == Backend::cudnn);
    LogCapture log;
    autotune_graph(*g, dev.ctx(), 32, strict);
    INFO(log.text.str());
    CHECK(g->node(0).layer->backend() == Backend::cuda);
    CHECK_THAT(log.text.str(), Contains("layer 'bn1' (batchnorm): train.backend cudnn refused"));
  }
  {
    // A convolution under train.backend cudnn whose every cuDNN algorithm fails is refused to our
    // kernels with a warning (whether one of ours meets 1e-30 does not matter here).
    ModelSpec spec = parse_model_text(model("cudnn"), "guard.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    LogCapture log;
    try {
      autotune_graph(*g, dev.ctx(), 32, strict);
    } catch (const Error&) {
    }
    CHECK_THAT(log.text.str(), Contains("layer 'c1' (conv2d): train.backend cudnn refused by the accuracy guard"));
  }
}

TEST_CASE("a cudnn algorithm named by algo is checked by the guard like any other cudnn choice", "[gpu][cudnn]") {
  CNN_REQUIRE_CUDNN();
  ModelSpec spec = parse_model_text(model("auto", "auto", ", algo: {forward: cudnn:implicit_gemm}"), "guard.yaml");
  auto g = Graph::build(spec);
  DeviceSetup dev("cuda", *g, false);
  AutotuneOptions opt = no_cache();
  // Within the default tolerance: taken, its error logged.
  const std::vector<std::string> lines = autotune_graph(*g, dev.ctx(), 32, opt);
  bool seen = false;
  for (const std::string& line : lines) seen = seen || line.find("cudnn:implicit_gemm (requested, rel_err") != std::string::npos;
  CHECK(seen);
  // Over an impossible tolerance: a config error at the layer's algo.
  auto* c1 = g->node(0).layer->conv_planned();
  REQUIRE(c1);
  ConvProbe probe(dev.ctx(), c1->conv_shape(32));
  if (probe.run_and_compare(conv2d_algo(ConvDir::forward, "cudnn:implicit_gemm")) == 0)
    CNN_SKIP("cudnn:implicit_gemm equals the reference bit for bit here; nothing to refuse");
  ModelSpec spec2 = parse_model_text(model("auto", "auto", ", algo: {forward: cudnn:implicit_gemm}"), "guard.yaml");
  auto g2 = Graph::build(spec2);
  DeviceSetup dev2("cuda", *g2, false);
  opt.tolerance = 1e-30;
  opt.tolerance_given = true;
  try {
    autotune_graph(*g2, dev2.ctx(), 32, opt);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "layers.c1.algo");
    CHECK_THAT(e.message(), Contains("cudnn:implicit_gemm"));
  }
}
