// Executor: forward/backward over a DAG with fan-out, add and concat, checked by finite
// differences of the whole network; the gradient hook; partial batches.
#include <cmath>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

// Smooth activations only (tanh, elu, sigmoid, avgpool), so central differences are valid.
static const char* kDag =
    "name: dag\n"
    "input: {channels: 2, height: 5, width: 5}\n"
    "layers:\n"
    "  - {name: a, type: conv2d, filters: 3, kernel: 3, padding: 1}\n"
    "  - {name: b, type: tanh}\n"
    "  - {name: c, type: conv2d, filters: 3, kernel: 3, padding: 1, groups: 3}\n"
    "  - {name: d, type: conv2d, filters: 3, kernel: 1, inputs: [b]}\n"
    "  - {name: e, type: add, inputs: [c, d]}\n"
    "  - {name: bn, type: batchnorm}\n"
    "  - {name: el, type: elu}\n"
    "  - {name: f, type: concat, inputs: [el, b]}\n"
    "  - {name: g, type: avgpool, kernel: 2}\n"
    "  - {name: s, type: sigmoid}\n"
    "  - {name: fc, type: dense, units: 4}\n";

struct Fixture {
  ModelSpec spec = parse_model_text(kDag, "dag.yaml");
  std::unique_ptr<Graph> graph = Graph::build(spec);
  ExecContext ctx = ExecContext::cpu(1);
  Executor ex{*graph, 3, ctx};
  std::vector<float> input = test::random_floats(3 * 2 * 5 * 5, 11);
  std::vector<float> r = test::random_floats(3 * 4, 12);

  Fixture() {
    graph->choose_backends(Device::cpu);
    ex.init_params(7);
    // Non-trivial batchnorm affine parameters.
    for (size_t i = 0; i < graph->params().size(); ++i) {
      if (graph->params()[i].name == "bn.weight") {
        Tensor t = ex.param(int(i));
        std::vector<float> v = test::random_floats(size_t(t.numel()), 13, 0.5f, 1.5f);
        std::copy(v.begin(), v.end(), t.data());
      }
    }
  }
  double loss() {
    std::copy(input.begin(), input.end(), ex.input().data());
    ex.forward(3, true, 0, 1);
    const float* y = ex.output().data();
    double l = 0;
    for (size_t i = 0; i < r.size(); ++i) l += double(y[i]) * r[i];
    return l;
  }
  void backward(const GradHook& hook = {}) {
    loss();
    std::copy(r.begin(), r.end(), ex.output_grad().data());
    ex.backward(hook);
  }
};

TEST_CASE("executor gradients of a DAG match finite differences", "[cpu]") {
  Fixture f;
  f.backward();
  std::vector<float> analytic = f.ex.grads().to_vector();
  float* p = f.ex.params().data();
  const float h = 1e-2f;
  int checked = 0;
  for (const ParamEntry& e : f.graph->params()) {
    if (!e.trainable) continue;
    for (int64_t k = 0; k < e.shape.numel(); ++k) {
      int64_t i = e.offset + k;
      float keep = p[i];
      p[i] = keep + h;
      double lp = f.loss();
      p[i] = keep - h;
      double lm = f.loss();
      p[i] = keep;
      double numeric = (lp - lm) / (2 * h);
      INFO(e.name << "[" << k << "]");
      CHECK(std::fabs(analytic[size_t(i)] - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric));
      ++checked;
    }
  }
  CHECK(checked == int(f.graph->trainable_count()));
}

TEST_CASE("executor calls the gradient hook once per parameter when its gradient is final", "[cpu]") {
  Fixture f;
  std::vector<int> order;
  std::vector<std::vector<float>> at_hook(f.graph->params().size());
  f.backward([&](int p) {
    order.push_back(p);
    at_hook[size_t(p)] = f.ex.grad(p).to_vector();
  });
  int trainable = 0;
  for (const auto& e : f.graph->params()) trainable += e.trainable ? 1 : 0;
  REQUIRE(int(order.size()) == trainable);
  // Reverse layer order: the dense layer's parameters come first, conv 'a' last.
  CHECK(f.graph->params()[size_t(order.front())].name.rfind("fc.", 0) == 0);
  CHECK(f.graph->params()[size_t(order.back())].name.rfind("a.", 0) == 0);
  for (int p : order) {
    INFO(f.graph->params()[size_t(p)].name);
    CHECK(at_hook[size_t(p)] == f.ex.grad(p).to_vector());
  }
}

TEST_CASE("executor runs a partial batch like a smaller executor", "[cpu]") {
  Fixture f;
  std::copy(f.input.begin(), f.input.end(), f.ex.input().data());
  f.ex.forward(2, false, 0, 1);
  std::vector<float> partial = f.ex.output().to_vector();
  REQUIRE(partial.size() == 2 * 4);
  Executor small(*f.graph, 2, f.ctx);
  small.params().copy_from(f.ex.params());
  small.buffers().copy_from(f.ex.buffers());
  std::copy(f.input.begin(), f.input.begin() + 2 * 50, small.input().data());
  small.forward(2, false, 0, 1);
  CHECK(small.output().to_vector() == partial);
}

TEST_CASE("executor rejects a batch larger than planned", "[cpu]") {
  Fixture f;
  CHECK_THROWS_WITH(f.ex.forward(4, true, 0, 1), Catch::Matchers::Contains("at most 3"));
}

TEST_CASE("precision tf32 reaches every layer and on the CPU computes bit for bit what fp32 does", "[cpu]") {
  struct Run {
    std::vector<float> output;
    std::vector<std::vector<float>> grads;
  };
  auto run = [](const std::string& precision) {
    ModelSpec spec = parse_model_text(kDag, "dag.yaml", {"train.precision=" + precision});
    std::unique_ptr<Graph> graph = Graph::build(spec);
    for (int i = 0; i < graph->size(); ++i)
      CHECK(graph->node(i).layer->math() == parse_math_mode(precision));
    graph->choose_backends(Device::cpu);
    ExecContext ctx = ExecContext::cpu(1);
    Executor ex(*graph, 3, ctx);
    ex.init_params(7);
    const std::vector<float> input = test::random_floats(3 * 2 * 5 * 5, 11), r = test::random_floats(3 * 4, 12);
    std::copy(input.begin(), input.end(), ex.input().data());
    ex.forward(3, true, 0, 1);
    Run out;
    out.output = ex.output().to_vector();
    std::copy(r.begin(), r.end(), ex.output_grad().data());
    ex.backward();
    for (size_t p = 0; p < graph->params().size(); ++p)
      if (graph->params()[p].trainable) out.grads.push_back(ex.grad(int(p)).to_vector());
    return out;
  };
  const Run fp32 = run("fp32"), tf32 = run("tf32");
  CHECK(fp32.output == tf32.output);
  REQUIRE(fp32.grads.size() == tf32.grads.size());
  for (size_t i = 0; i < fp32.grads.size(); ++i) CHECK(fp32.grads[i] == tf32.grads[i]);
}
