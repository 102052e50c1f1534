// Model table and memory estimate (see summary.h).
#include "graph/summary.h"

#include <algorithm>

#include "core/checked.h"
#include "graph/memory_plan.h"
#include "graph/weight_packs.h"

namespace cnn {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

static std::string thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (v < 0 ? "-" : "") + out;
}

int optimizer_slots(const OptimizerSpec& opt) {
  if (opt.type == "sgd") return opt.momentum != 0.0 ? 1 : 0;
  if (opt.type == "adam" || opt.type == "adamw") return 2;
  if (opt.type == "rmsprop") return opt.momentum != 0.0 ? 2 : 1;
  return 0;
}

int64_t MemoryEstimate::total() const {
  return (Checked(params_bytes) + grads_bytes + optimizer_bytes + buffers_bytes + activations_bytes + input_bytes +
          packed_weights_bytes)
      .value("the predicted training memory in bytes");
}

MemoryEstimate estimate_training_memory(const Graph& g, const ModelSpec& spec, int64_t batch) {
  MemoryEstimate m;
  const int64_t f = sizeof(float);
  auto bytes = [](Checked n, const char* what) { return n.value(what); };
  m.params_bytes = bytes(Checked(g.params_size()) * f, "the parameter bytes");
  m.grads_bytes = m.params_bytes;
  m.optimizer_bytes = bytes(Checked(optimizer_slots(spec.train.optimizer)) * g.params_size() * f, "the optimizer bytes");
  m.buffers_bytes = bytes(Checked(g.buffers_size()) * f, "the buffer bytes");
  MemoryPlan plan = plan_memory(g, batch, true);  // holds every batched tensor to the cap
  m.activations_bytes = plan.arena_size;
  m.activations_naive_bytes = plan.naive_size;
  m.input_bytes = bytes(Checked(g.input_shape().numel()) * batch * f, "the input bytes");
  // On a GPU in bf16/fp16 once the layers' algorithms are chosen (0 before: validate, CPU runs).
  m.packed_weights_bytes = plan_weight_packs(g, batch, true).bytes;
  return m;
}

std::string format_model_table(const Graph& g, const ModelSpec& spec, int64_t batch) {
  struct Row {
    std::string idx, name, type, shape, params, mflops, act, detail;
  };
  std::vector<Row> rows;
  rows.push_back({"#", "layer", "type", "output", "params", "fwd MFLOPs", "act bytes", "details"});
  for (int i = 0; i < g.size(); ++i) {
    const GraphNode& n = g.node(i);
    Checked np = 0;
    for (int p : n.params)
      if (g.params()[size_t(p)].trainable) np = np + g.params()[size_t(p)].shape.numel();
    std::string detail = n.layer->summary();
    bool named_inputs = n.inputs.size() > 1 || (n.inputs[0] != i - 1 && !(i == 0 && n.inputs[0] == Graph::kModelInput));
    if (named_inputs) {
      std::string ins;
      for (int in : n.inputs) ins += (ins.empty() ? "" : ", ") + (in == Graph::kModelInput ? "input" : g.node(in).layer->name());
      detail += (detail.empty() ? "" : "; ") + std::string("<- ") + ins;
    }
    // A fused activation runs inside its producer's kernels and owns no memory of its own.
    if (n.fused_into >= 0) detail += (detail.empty() ? "" : "; ") + std::string("fused into ") + g.node(n.fused_into).layer->name();
    // A folded conv bias is added by the batchnorm after it (Graph::fold_conv_biases).
    if (n.bias_folded_into >= 0)
      detail += (detail.empty() ? "" : "; ") + std::string("bias folded into ") + g.node(n.bias_folded_into).layer->name();
    const int64_t act_bytes = n.fused_into >= 0 ? 0 : n.out_shape.numel() * int64_t(sizeof(float));
    rows.push_back({std::to_string(i + 1), g.display_name(i), n.layer->type(), n.out_shape.to_string(),
                    thousands(np.value("a layer's parameter count")),
                    fmt::format("{:.2f}", n.layer->forward_flops() / 1e6), thousands(act_bytes), detail});
  }
  std::vector<size_t> w(8, 0);
  for (const Row& r : rows) {
    const std::string* c[] = {&r.idx, &r.name, &r.type, &r.shape, &r.params, &r.mflops, &r.act, &r.detail};
    for (size_t k = 0; k < 8; ++k) w[k] = std::max(w[k], c[k]->size());
  }
  std::string out = fmt::format("model '{}' ({}): input {} -> {} classes\n", spec.name, spec.file,
                                g.input_shape().to_string(), g.num_classes());
  for (const Row& r : rows) {
    out += fmt::format("{:>{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}  {:>{}}  {:>{}}  {}\n", r.idx, w[0], r.name, w[1], r.type,
                       w[2], r.shape, w[3], r.params, w[4], r.mflops, w[5], r.act, w[6], r.detail);
  }
  MemoryEstimate m = estimate_training_memory(g, spec, batch);
  out += fmt::format("parameters: {} trainable, {} in buffers\n", thousands(g.trainable_count()),
                     thousands(g.buffer_count()));
  out += fmt::format("FLOPs per image: forward {:.2f} MFLOPs, training step {:.2f} MFLOPs\n", g.forward_flops() / 1e6,
                     g.training_flops() / 1e6);
  out += fmt::format(
      "predicted training memory at batch {}: {} (parameters {}, gradients {}, optimizer {} [{} x{}], buffers {}, "
      "activations {} planned / {} without reuse, input {})\n",
      batch, format_bytes(double(m.total())), format_bytes(double(m.params_bytes)), format_bytes(double(m.grads_bytes)),
      format_bytes(double(m.optimizer_bytes)), spec.train.optimizer.type, optimizer_slots(spec.train.optimizer),
      format_bytes(double(m.buffers_bytes)), format_bytes(double(m.activations_bytes)),
      format_bytes(double(m.activations_naive_bytes)), format_bytes(double(m.input_bytes)));
  if (m.packed_weights_bytes > 0)
    out += fmt::format("  of which prepacked 16-bit weights: {}\n", format_bytes(double(m.packed_weights_bytes)));
  return out;
}

}  // namespace cnn
