// The autotuner on the GPU: a small model's conv directions and cuda-vs-cudnn layers are measured
// and cached on the first run, and the second run takes every timed decision from the cache;
// the tuned graph then runs a forward and backward step.
#include <filesystem>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "train/autotune.h"
#include "train/device_setup.h"

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
      auto* p = dynamic_cast<ConvPlanned*>(g->node(i).layer.get());
      REQUIRE(p);
      for (ConvDir d : kConvDirs) {
        REQUIRE(p->conv_plan().algo(d));
        CHECK(p->conv_plan().algo(d)->backend != Backend::cpu);
      }
    }
    CHECK(dynamic_cast<ConvPlanned*>(g->node(3).layer.get())->conv_plan().algo(ConvDir::backward_data)->name ==
          "cuda:implicit_gemm");
    for (int i = 0; i < g->size(); ++i) CHECK_FALSE(g->node(i).layer->backend_to_measure());
    // The tuned graph runs a training step.
    Executor ex(*g, 4, dev.ctx());
    ex.init_params(1);
    ex.forward(4, true, 0, 1);
    ex.output_grad().copy_from(ex.output());
    ex.backward();
    dev.synchronize();
  }
  REQUIRE(std::filesystem::exists(opt.cache_path));
  REQUIRE(first.size() == second.size());
  for (const std::string& line : first) CHECK(line.find("[cache]") == std::string::npos);
  for (const std::string& line : second) {
    INFO(line);
    if (line.find("runner-up") != std::string::npos) CHECK(line.find("[cache]") != std::string::npos);
  }
}
