// Planning of a training step's weight packs (see weight_packs.h).
#include "graph/weight_packs.h"

#include <map>
#include <tuple>

#include "core/checked.h"
#include "core/out_of_memory.h"

namespace cnn {

static constexpr int64_t kCopyAlign = 256;

WeightPackPlan plan_weight_packs(const Graph& graph, int64_t max_batch, bool training) {
  WeightPackPlan plan;
  plan.bindings.resize(size_t(graph.size()));
  if (!training) {
    plan.off_reason = "a forward-only executor";
    return plan;
  }
  if (!graph.prepack_weights()) {
    plan.off_reason = "train.prepack_weights is false";
    return plan;
  }
  std::map<std::tuple<int, DType, Bf16WeightLayout>, int> seen;  // (param, dtype, layout) -> copy
  Checked bytes = 0;
  for (int i = 0; i < graph.size(); ++i) {
    const GraphNode& node = graph.node(i);
    if (node.fused_into >= 0) continue;
    // The executor gives no input gradient to a layer reading the model input.
    const bool input_grad = node.inputs.at(0) != Graph::kModelInput;
    for (const WeightPackRequest& r : node.layer->weight_pack_requests(max_batch, input_grad)) {
      const int param = node.params.at(size_t(r.param));
      const auto key = std::make_tuple(param, r.copy.dtype, r.copy.layout);
      auto it = seen.find(key);
      if (it == seen.end()) {
        WeightPackCopy c;
        c.node = i;
        c.param = param;
        c.dims = r.dims;
        c.dtype = r.copy.dtype;
        c.layout = r.copy.layout;
        c.bytes = (Checked(r.dims.K) * r.dims.Cg * r.dims.R * r.dims.S * int64_t(dtype_size(r.copy.dtype)))
                      .value("a packed weight copy's bytes");
        CNN_CHECK(graph.params()[size_t(param)].shape.numel() * int64_t(dtype_size(r.copy.dtype)) == c.bytes,
                  "layer '{}': a weight copy of {}x{}x{}x{} for parameter '{}' of shape {}", node.layer->name(),
                  r.dims.K, r.dims.Cg, r.dims.R, r.dims.S, graph.params()[size_t(param)].name,
                  graph.params()[size_t(param)].shape.to_string());
        c.offset = bytes.value("the packed weights' bytes");
        bytes = bytes + (c.bytes + kCopyAlign - 1) / kCopyAlign * kCopyAlign;
        it = seen.emplace(key, int(plan.copies.size())).first;
        plan.copies.push_back(c);
      }
      plan.bindings[size_t(i)].push_back({r, it->second});
    }
  }
  plan.bytes = bytes.value("the packed weights' bytes");
  if (plan.copies.empty()) plan.off_reason = "no layer reads a 16-bit weight copy";
  return plan;
}

std::string WeightPackPlan::describe() const {
  if (copies.empty()) return "off (" + off_reason + ")";
  std::map<std::pair<DType, Bf16WeightLayout>, int> count;
  for (const WeightPackCopy& c : copies) ++count[{c.dtype, c.layout}];
  std::string kinds;
  for (const auto& [k, n] : count)
    kinds += fmt::format("{}{} {} {}", kinds.empty() ? "" : ", ", n, to_string(k.first), to_string(k.second));
  return fmt::format("{} copies ({}), {}, packed in one launch a training step", copies.size(), kinds,
                     format_byte_count(double(bytes)));
}

}  // namespace cnn
