// The weight packs of a training step (graph/weight_packs.h), planned on the CPU for layers placed on
// a GPU backend by hand: which copies the chosen algorithms read (per direction, none for the
// filter gradient nor for backward_data of a layer reading the model input), one copy per
// parameter, dtype and layout however many directions read it, 256-byte aligned offsets, and none
// at all in f32, on the CPU, in a forward-only executor or with train.prepack_weights false; the
// memory estimate counts the buffer.
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "graph/weight_packs.h"
#include "layers/conv_plan.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// c1 reads the model input (no backward_data); dw is depthwise (the direct kernels: rsk both
// ways); pw is 1x1 (the GEMM: krsc forward, crsk backward_data); fc a dense layer ((K, C) copy).
const char* kModel =
    "name: packs\n"
    "input: {channels: 3, height: 8, width: 8}\n"
    "classes: [a, b, c, d, e]\n"
    "layers:\n"
    "  - {name: c1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: r1, type: relu}\n"
    "  - {name: dw, type: conv2d, filters: 8, kernel: 3, padding: 1, groups: 8}\n"
    "  - {name: pw, type: conv2d, filters: 16, kernel: 1}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc, type: dense, units: 5}\n"
    "train: {precision: bf16}\n";

// The graph with every conv2d and dense layer on `gpu` (cuda or cudnn for the convolutions) as
// choose_backends on a GPU would leave it, without needing one.
std::unique_ptr<Graph> gpu_graph(const std::vector<std::string>& overrides = {}, Backend conv = Backend::cuda) {
  std::unique_ptr<Graph> g = Graph::build(parse_model_text(kModel, "packs.yaml", overrides));
  g->choose_backends(Device::cpu);
  for (int i = 0; i < g->size(); ++i) {
    Layer& l = *g->node(i).layer;
    if (l.type() == "conv2d") l.set_backend(conv, "test");
    if (l.type() == "dense") l.set_backend(Backend::cuda, "test");
  }
  return g;
}

int node_of(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.size(); ++i)
    if (g.node(i).layer->name() == name) return i;
  FAIL("no layer " << name);
  return -1;
}

// "c1.weight bf16 krsc" per copy, in plan order.
std::vector<std::string> copies(const Graph& g, const WeightPackPlan& p) {
  std::vector<std::string> out;
  for (const WeightPackCopy& c : p.copies)
    out.push_back(g.params()[size_t(c.param)].name + " " + to_string(c.dtype) + " " + to_string(c.layout));
  return out;
}

bool has_cuda_rows() { return find_impl(conv2d_table(ConvDir::forward), Backend::cuda, DType::bf16) != nullptr; }

}  // namespace

TEST_CASE("weight packs: the default rows' layouts, one copy where two directions read the same", "[cpu]") {
  if (!has_cuda_rows()) return;  // a build without CUDA has no GPU rows to plan for
  std::unique_ptr<Graph> g = gpu_graph();
  const WeightPackPlan p = plan_weight_packs(*g, 4, true);
  CHECK(copies(*g, p) == std::vector<std::string>{"c1.weight bf16 krsc", "dw.weight bf16 rsk", "pw.weight bf16 krsc",
                                                  "pw.weight bf16 crsk", "fc.weight bf16 kcrs"});
  CHECK(p.bindings[size_t(node_of(*g, "c1"))].size() == 1);  // forward only: its input is the model's
  const auto& dw = p.bindings[size_t(node_of(*g, "dw"))];
  REQUIRE(dw.size() == 2);  // forward and backward_data share the rsk copy
  CHECK(dw[0].copy == dw[1].copy);
  CHECK(dw[0].request.use == int(ConvDir::forward));
  CHECK(dw[1].request.use == int(ConvDir::backward_data));
  CHECK(p.bindings[size_t(node_of(*g, "pw"))].size() == 2);
  CHECK(p.bindings[size_t(node_of(*g, "fc"))].size() == 1);
  const WeightPackCopy& fc = p.copies.back();
  CHECK((fc.dims.K == 5 && fc.dims.Cg == 16 * 8 * 8 && fc.dims.R == 1 && fc.dims.S == 1));
  int64_t end = 0;
  for (const WeightPackCopy& c : p.copies) {
    CHECK(c.offset % 256 == 0);
    CHECK(c.offset >= end);  // no overlap
    CHECK(c.bytes == g->params()[size_t(c.param)].shape.numel() * 2);
    end = c.offset + c.bytes;
  }
  CHECK(p.bytes >= end);
  CHECK(p.bytes < end + 256);
  CHECK(p.describe().find("5 copies") != std::string::npos);
}

TEST_CASE("weight packs follow the chosen algorithms: cuDNN's krsc merges with the GEMM's forward copy", "[cpu]") {
  if (!has_cuda_rows()) return;
  std::unique_ptr<Graph> g = gpu_graph();
  ConvPlan& pw = g->node(node_of(*g, "pw")).layer->conv_planned()->conv_plan();
  pw.algo(ConvDir::forward) = &conv2d_algo(ConvDir::forward, "cuda:igemm_nhwc", DType::bf16);
  const ConvAlgo* cudnn = find_impl(conv2d_table(ConvDir::backward_data), Backend::cudnn, DType::bf16);
  if (!cudnn) return;  // a build without cuDNN
  pw.algo(ConvDir::backward_data) = cudnn;
  const WeightPackPlan p = plan_weight_packs(*g, 4, true);
  CHECK(copies(*g, p) == std::vector<std::string>{"c1.weight bf16 krsc", "dw.weight bf16 rsk", "pw.weight bf16 krsc",
                                                  "fc.weight bf16 kcrs"});
  const auto& b = p.bindings[size_t(node_of(*g, "pw"))];
  REQUIRE(b.size() == 2);
  CHECK(b[0].copy == b[1].copy);
}

TEST_CASE("weight packs in fp16 are f16 copies, a cudnn-placed layer reads krsc both ways", "[cpu]") {
  if (!has_cuda_rows()) return;
  std::unique_ptr<Graph> g = gpu_graph({"train.precision=fp16"}, Backend::cudnn);
  if (!find_impl(conv2d_table(ConvDir::forward), Backend::cudnn, DType::f16)) return;
  const WeightPackPlan p = plan_weight_packs(*g, 4, true);
  CHECK(copies(*g, p) == std::vector<std::string>{"c1.weight f16 krsc", "dw.weight f16 krsc", "pw.weight f16 krsc",
                                                  "fc.weight f16 kcrs"});
}

TEST_CASE("no weight packs in f32, on the CPU, for a forward-only executor or with prepack_weights false", "[cpu]") {
  if (has_cuda_rows()) {
    std::unique_ptr<Graph> g = gpu_graph();
    CHECK(plan_weight_packs(*g, 4, false).empty());
    CHECK(plan_weight_packs(*g, 4, false).describe() == "off (a forward-only executor)");
    std::unique_ptr<Graph> off = gpu_graph({"train.prepack_weights=false"});
    CHECK_FALSE(off->prepack_weights());
    CHECK(plan_weight_packs(*off, 4, true).empty());
    CHECK(plan_weight_packs(*off, 4, true).describe() == "off (train.prepack_weights is false)");
    CHECK(plan_weight_packs(*gpu_graph({"train.precision=fp32"}), 4, true).empty());
    CHECK(plan_weight_packs(*gpu_graph({"train.precision=tf32"}), 4, true).empty());
  }
  // The CPU rows pack nothing: a CPU executor has no packs and no buffer for them.
  std::unique_ptr<Graph> cpu = Graph::build(parse_model_text(kModel, "packs.yaml", {}));
  cpu->choose_backends(Device::cpu);
  CHECK(plan_weight_packs(*cpu, 4, true).empty());
  Executor ex(*cpu, 4, ExecContext::cpu(1));
  CHECK(ex.weight_packs().empty());
  CHECK(ex.packed_weights_bytes() == 0);
}

TEST_CASE("the training memory estimate counts the packed weights' buffer", "[cpu]") {
  if (!has_cuda_rows()) return;
  const ModelSpec spec = parse_model_text(kModel, "packs.yaml", {});
  std::unique_ptr<Graph> g = gpu_graph();
  const MemoryEstimate on = estimate_training_memory(*g, spec, 4);
  CHECK(on.packed_weights_bytes == plan_weight_packs(*g, 4, true).bytes);
  CHECK(on.packed_weights_bytes > 0);
  g->set_prepack_weights(false);
  const MemoryEstimate off = estimate_training_memory(*g, spec, 4);
  CHECK(off.packed_weights_bytes == 0);
  CHECK(on.total() == off.total() + on.packed_weights_bytes);
}
