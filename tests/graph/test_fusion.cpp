// Activation fusion (Graph::fuse_activations): a conv-bn-relu-dense-relu-dense model built with and
// without train.fuse_activations gives the same outputs, gradients and running statistics, on the
// CPU and on CUDA, with a smaller memory plan; fusion is refused where the graph does not allow it.
// Trap: both graphs must see identical parameters, so they are initialised with the same seed.
#include <memory>

#include "config/model_spec.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

const char* kNet =
    "name: fuse\n"
    "input: {channels: 2, height: 6, width: 6}\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: fc1, type: dense, units: 5}\n"
    "  - {name: relu2, type: relu}\n"
    "  - {name: bn2, type: batchnorm}\n"
    "  - {name: act2, type: ACT2}\n"
    "  - {name: fc2, type: dense, units: 3}\n";

constexpr int64_t kBatch = 4;
constexpr cnn::test::Tolerance kFusedVsUnfused{1e-6, 1e-6};

// conv2d producers: with a bias (one pass adds it and applies ACT) and without one.
const char* kConvNet =
    "name: fuseconv\n"
    "input: {channels: 2, height: 6, width: 6}\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 5, kernel: 3, padding: 1BACKEND}\n"
    "  - {name: act2, type: ACT2}\n"
    "  - {name: conv2, type: conv2d, filters: 4, kernel: 3, stride: 2, bias: falseBACKEND}\n"
    "  - {name: relu2, type: relu}\n"
    "  - {name: fc, type: dense, units: 3}\n";

std::string conv_net(const std::string& act2, bool fuse, const std::string& backend = "") {
  std::string s = kConvNet;
  s.replace(s.find("ACT2"), 4, act2);
  for (size_t at; (at = s.find("BACKEND")) != std::string::npos;)
    s.replace(at, 7, backend.empty() ? "" : ", backend: " + backend);
  return s + "train: {fuse_activations: " + (fuse ? "true" : "false") + "}\n";
}

std::string net(const std::string& act2, bool fuse) {
  std::string s = kNet;
  s.replace(s.find("ACT2"), 4, act2);
  return s + "train: {fuse_activations: " + (fuse ? "true" : "false") + "}\n";
}

struct Run {
  std::vector<float> out_train, out_infer, grads, buffers;
  int64_t arena = 0;
  std::string table;
};

// Forward (training), backward from fixed output gradients, then an inference forward.
Run run(const std::string& yaml, const ExecContext& ctx, Device d) {
  ModelSpec spec = parse_model_text(yaml, "fuse.yaml");
  std::unique_ptr<Graph> g = Graph::build(spec);
  g->choose_backends(d);
  Executor ex(*g, kBatch, ctx);
  ex.init_params(5);
  const std::vector<float> x = test::random_floats(size_t(kBatch * 2 * 6 * 6), 21, -1.0f, 2.0f);
  const std::vector<float> dy = test::random_floats(size_t(kBatch * 3), 22);
  Tensor host_x = Tensor::empty(ex.input().shape());
  std::copy(x.begin(), x.end(), host_x.data());
  ex.input().copy_from(host_x);
  Run r;
  ex.forward(kBatch, true, 0, 1);
  r.out_train = ex.output().to_vector();
  Tensor host_dy = Tensor::empty(ex.output_grad().shape());
  std::copy(dy.begin(), dy.end(), host_dy.data());
  ex.output_grad().copy_from(host_dy);
  ex.backward();
  r.grads = ex.grads().to_vector();
  r.buffers = ex.buffers().to_vector();
  ex.forward(kBatch, false, 0, 1);
  r.out_infer = ex.output().to_vector();
  r.arena = ex.plan().arena_size;
  r.table = format_model_table(*g, spec, kBatch);
  return r;
}

void check_same(const Run& fused, const Run& plain) {
  CHECK(compare(fused.out_train, plain.out_train, kFusedVsUnfused) == "");
  CHECK(compare(fused.grads, plain.grads, kFusedVsUnfused) == "");
  CHECK(compare(fused.buffers, plain.buffers, kFusedVsUnfused) == "");
  CHECK(compare(fused.out_infer, plain.out_infer, kFusedVsUnfused) == "");
  CHECK(fused.arena < plain.arena);
}

// Each activation kind as ACT2 in `yaml(act, fuse)`, on the cpu: the fused and unfused graphs
// agree, the fused table names every pair in `pairs`, the unfused one none.
void check_every_kind_on_cpu(std::string (*yaml)(const std::string&, bool), const std::vector<std::string>& pairs) {
  const ExecContext ctx = ExecContext::cpu(2);
  for (const char* act : {"relu", "leaky_relu", "elu", "sigmoid", "tanh"}) {
    INFO("act2 is " << act);
    const Run fused = run(yaml(act, true), ctx, Device::cpu);
    const Run plain = run(yaml(act, false), ctx, Device::cpu);
    check_same(fused, plain);
    for (const std::string& pair : pairs) CHECK(fused.table.find(pair) != std::string::npos);
    CHECK(plain.table.find("+") == std::string::npos);
  }
}

}  // namespace

TEST_CASE("fused and unfused graphs give the same outputs and gradients on the cpu in a smaller plan", "[cpu]") {
  check_every_kind_on_cpu(net, {"bn1+relu1", "fc1+relu2", "bn2+act2"});
}

TEST_CASE("conv2d with a fused activation gives the unfused graph's outputs and gradients on the cpu", "[cpu]") {
  check_every_kind_on_cpu([](const std::string& act2, bool fuse) { return conv_net(act2, fuse); },
                          {"conv1+act2", "conv2+relu2"});
}

TEST_CASE("fusion needs a producer whose only reader is the activation and an alpha that keeps the sign", "[cpu]") {
  const char* yaml =
      "name: nofuse\n"
      "input: {channels: 2, height: 4, width: 4}\n"
      "layers:\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: relu1, type: relu}\n"
      "  - {name: skip, type: add, inputs: [bn1, relu1]}\n"
      "  - {name: bn2, type: batchnorm}\n"
      "  - {name: lr2, type: leaky_relu, alpha: -0.5}\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: relu3, type: relu}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "  - {name: relu4, type: relu}\n";
  ModelSpec spec = parse_model_text(yaml, "nofuse.yaml");
  std::unique_ptr<Graph> g = Graph::build(spec);
  auto node = [&](const char* name) -> const GraphNode& {
    for (int i = 0; i < g->size(); ++i)
      if (g->node(i).layer->name() == name) return g->node(i);
    FAIL("no node " << name);
    return g->node(0);
  };
  CHECK(node("relu1").fused_into < 0);  // bn1 is also read by skip
  CHECK(node("lr2").fused_into < 0);    // a negative slope hides the sign of x
  CHECK(node("relu3").fused_into >= 0);  // an FP32 conv2d adds its bias and applies it in one pass
  CHECK(node("relu4").fused_into >= 0);
  CHECK(g->display_name(node("relu4").fused_into) == "fc+relu4");
  CHECK(g->fuse_activations(false) == 0);
  CHECK(node("relu4").fused_into < 0);
  CHECK(g->fuse_activations(true) == 2);
  // A 16-bit conv2d keeps its activation as a layer of its own (its rows fuse nothing), from the build on.
  std::unique_ptr<Graph> g16 = Graph::build(parse_model_text(yaml, "nofuse.yaml", {"train.precision=bf16"}));
  CHECK(g16->node(6).layer->name() == "relu3");
  CHECK(g16->node(6).fused_into < 0);
  g16->choose_backends(Device::cpu);
  CHECK(g16->node(6).fused_into < 0);
}

TEST_CASE("fused and unfused graphs give the same outputs and gradients on cuda in a smaller plan", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const char* act : {"relu", "leaky_relu", "elu", "sigmoid", "tanh"}) {
    INFO("bn2 followed by " << act);
    const Run fused = run(net(act, true), cuda.ctx(), Device::cuda);
    const Run plain = run(net(act, false), cuda.ctx(), Device::cuda);
    check_same(fused, plain);
    CHECK(fused.table.find("bn1+relu1") != std::string::npos);
  }
}

TEST_CASE("conv2d with a fused activation gives the unfused graph's outputs and gradients on cuda and cudnn", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const char* backend : {"cuda", "cudnn"})
    for (const char* act : {"relu", "elu", "tanh"}) {
      INFO("backend " << backend << ", conv1 followed by " << act);
      const Run fused = run(conv_net(act, true, backend), cuda.ctx(), Device::cuda);
      const Run plain = run(conv_net(act, false, backend), cuda.ctx(), Device::cuda);
      check_same(fused, plain);
      // A cudnn convolution takes the activation too: the pass after its row is ours.
      CHECK(fused.table.find("conv1+act2") != std::string::npos);
      CHECK(fused.table.find("conv2+relu2") != std::string::npos);
    }
}
