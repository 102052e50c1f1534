// The layer accuracy probe (tune/layer_accuracy.h) on the CPU: a backend against itself is
// exactly equal on every output, the layer is left on the backend it had, and a layer without the
// reference backend has no answer. Its cuDNN use is in test_cudnn_guard_cuda.cpp ([gpu]).
#include "config/model_spec.h"
#include "core/exec_context.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "support/catch.h"
#include "tune/layer_accuracy.h"

using namespace cnn;

TEST_CASE("the layer accuracy probe finds a backend equal to itself and leaves the layer as it was", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\n"
      "input: {channels: 3, height: 6, width: 6}\n"
      "layers:\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: r1, type: elu}\n"
      "  - {name: p1, type: maxpool, kernel: 2}\n"
      "  - {name: a1, type: avgpool, kernel: 3, stride: 1, padding: 1}\n"
      "  - {name: f, type: flatten}\n"
      "  - {name: fc, type: dense, units: 4}\n",
      "t.yaml");
  auto g = Graph::build(spec);
  g->choose_backends(Device::cpu);
  ExecContext ctx = ExecContext::cpu(2);
  for (int i = 0; i < g->size(); ++i) {
    const Layer& l = *g->node(i).layer;
    INFO(l.name());
    const std::string note = l.backend_note();
    const std::optional<LayerAccuracy> acc = layer_backend_error(*g, i, ctx, 5, Backend::cpu, Backend::cpu);
    REQUIRE(acc);
    CHECK(acc->rel_err == 0);
    CHECK(acc->worst == "y");
    CHECK(l.backend() == Backend::cpu);
    CHECK(l.backend_note() == note);
  }
  // The layers still train after the probe once an executor binds its own tensors.
  Executor ex(*g, 5, ctx);
  ex.init_params(1);
  ex.forward(5, true, 0, 1);
  ex.output_grad().copy_from(ex.output());
  ex.backward();
  // cudnn as the reference: the layer does not support it in a CPU context's sense, or not at all.
  if (!g->node(0).layer->supports(Backend::cudnn))
    CHECK_FALSE(layer_backend_error(*g, 0, ctx, 5, Backend::cpu, Backend::cudnn).has_value());
}
