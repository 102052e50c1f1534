// The cudnn backend from the layers' side, on the CPU in every build: which layers claim it (those
// whose op cuDNN has, with our semantics), an explicit `backend: cudnn` that cannot be honoured is a
// config error, and a cudnn op called where it cannot run throws a clear error instead of
// computing something else.
#include <map>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "graph/graph.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

const char* kModel =
    "name: cudnn_support\n"
    "input: {channels: 3, height: 9, width: 9}\n"
    "layers:\n"
    "  - {name: conv, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: dw, type: conv2d, filters: 4, kernel: 3, padding: 1, groups: 4}\n"
    "  - {name: bn, type: batchnorm}\n"
    "  - {name: relu, type: relu}\n"
    "  - {name: leaky, type: leaky_relu}\n"
    "  - {name: elu, type: elu}\n"
    "  - {name: elu03, type: elu, alpha: 0.3}\n"
    "  - {name: sig, type: sigmoid}\n"
    "  - {name: th, type: tanh}\n"
    "  - {name: maxp, type: maxpool, kernel: 3, stride: 2, padding: 1}\n"
    "  - {name: avgp, type: avgpool, kernel: 2}\n"
    "  - {name: gap, type: global_avgpool}\n"
    "  - {name: fc, type: dense, units: 5}\n";

}  // namespace

TEST_CASE("layers claim the cudnn backend exactly where cudnn has the op", "[cpu]") {
  ModelSpec spec = parse_model_text(kModel, "cudnn_support.yaml");
  std::unique_ptr<Graph> graph = Graph::build(spec);
  // What cuDNN implements with our semantics: no leaky relu, no dense, elu only with alpha 1 (its
  // elu derivative drops alpha).
  const std::map<std::string, bool> has_cudnn{
      {"conv", true}, {"dw", true}, {"bn", true},   {"relu", true}, {"leaky", false}, {"elu", true}, {"elu03", false},
      {"sig", true},  {"th", true}, {"maxp", true}, {"avgp", true}, {"gap", true},    {"fc", false}};
  REQUIRE(graph->size() == int(has_cudnn.size()));
  for (int i = 0; i < graph->size(); ++i) {
    const Layer& l = *graph->node(i).layer;
    INFO("layer " << l.name());
    CHECK(l.supports(Backend::cudnn) == (backend_built(Backend::cudnn) && has_cudnn.at(l.name())));
    CHECK(l.supports(Backend::cpu));
  }
}

TEST_CASE("an explicit cudnn backend is honoured where cudnn has the op and a config error elsewhere", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: explicit\n"
      "input: {channels: 1, height: 6, width: 6}\n"
      "layers:\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 3, backend: cudnn}\n"
      "  - {name: leaky, type: leaky_relu, backend: cudnn}\n"
      "  - {name: gap, type: global_avgpool}\n",
      "explicit.yaml");
  std::unique_ptr<Graph> graph = Graph::build(spec);
  Layer& conv = *graph->node(0).layer;
  Layer& leaky = *graph->node(1).layer;
  if (backend_built(Backend::cudnn)) {
    CHECK_NOTHROW(conv.choose_backend(Device::cuda));
    CHECK(conv.backend() == Backend::cudnn);
  } else {
    CHECK_THROWS_WITH(conv.choose_backend(Device::cuda), Contains("backend 'cudnn' was requested"));
  }
  // cuDNN has no leaky relu in any build.
  CHECK_THROWS_WITH(leaky.choose_backend(Device::cuda), Contains("backend 'cudnn' was requested"));
}

TEST_CASE("a cudnn op called where it cannot run throws a clear error", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(1, 1, 4, 4, 1, 3, 3);
  std::vector<float> x(16, 1.0f), w(9, 1.0f), b(1, 0.0f), y(4, 0.0f);
  // Without cuDNN in the build, or with a CPU context in a CUDA build: never a silent fallback.
  const std::string expected =
      backend_built(Backend::cudnn) ? "needs a CUDA context" : "this build has no cudnn backend";
  CHECK_THROWS_WITH(run_op(Backend::cudnn, Conv2dForward{&cpu, sh, x.data(), w.data(), b.data(), y.data()}),
                    Contains(expected));
  CHECK_THROWS_WITH(run_op(Backend::cudnn, Conv2dBackwardData{&cpu, sh, w.data(), y.data(), x.data()}),
                    Contains(expected));
  CHECK_THROWS_WITH(run_op(Backend::cudnn, Conv2dBackwardFilter{&cpu, sh, x.data(), y.data(), w.data(), b.data()}),
                    Contains(expected));
  CHECK(y == std::vector<float>(4, 0.0f));
}

TEST_CASE("train.backend makes layers left auto take that backend on a gpu where they support it", "[cpu]") {
  const std::string text = std::string(kModel) + "train: {backend: cudnn}\n";
  ModelSpec spec = parse_model_text(text, "preferred.yaml");
  CHECK(spec.train.backend == "cudnn");
  std::unique_ptr<Graph> graph = Graph::build(spec);
  graph->choose_backends(Device::cpu);  // the host: the preference is about GPU backends only
  for (int i = 0; i < graph->size(); ++i) CHECK(graph->node(i).layer->backend() == Backend::cpu);
  if (!backend_built(Backend::cudnn)) return;  // choosing GPU backends needs a CUDA build (not a GPU)
  graph = Graph::build(spec);
  graph->choose_backends(Device::cuda);
  for (int i = 0; i < graph->size(); ++i) {
    const Layer& l = *graph->node(i).layer;
    INFO("layer " << l.name());
    const bool cudnn = l.supports(Backend::cudnn);
    CHECK(l.backend() == (cudnn ? Backend::cudnn : Backend::cuda));
    CHECK(l.requested_backend() == (cudnn ? "cudnn" : "auto"));  // the others stay auto
    CHECK_FALSE((l.backend_to_measure() && cudnn));  // no cuda-vs-cudnn measurement left
  }
  CHECK_THROWS_WITH(parse_model_text(std::string(kModel) + "train: {backend: cpu}\n", "bad.yaml"),
                    Contains("train.backend"));
}
