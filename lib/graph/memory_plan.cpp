// Liveness analysis and first-fit offset assignment (see memory_plan.h).
#include "graph/memory_plan.h"

#include <algorithm>

#include "core/checked.h"
#include "core/error.h"
#include "graph/graph.h"

namespace cnn {

int64_t assign_offsets(std::vector<PlannedTensor*>& tensors, int64_t align) {
  std::vector<PlannedTensor*> order(tensors);
  std::stable_sort(order.begin(), order.end(),
                   [](const PlannedTensor* a, const PlannedTensor* b) { return a->size > b->size; });
  std::vector<PlannedTensor*> placed;
  int64_t arena = 0;
  // Every size is a planned tensor's (within the per-tensor cap); offsets are sums of such sizes,
  // checked all the same, since the number of tensors is the user's.
  auto aligned = [align](const PlannedTensor& t) {
    return ((Checked(t.size) + (align - 1)) / align * align).value("the aligned size of " + t.what);
  };
  for (PlannedTensor* t : order) {
    if (t->size == 0) continue;
    const int64_t need = aligned(*t);
    // Byte ranges of placed tensors alive at the same time, sorted by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const PlannedTensor* p : placed) {
      if (p->first <= t->last && t->first <= p->last) busy.emplace_back(p->offset, p->offset + aligned(*p));
    }
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0;
    for (const auto& [b, e] : busy) {
      if (candidate + need <= b) break;
      candidate = std::max(candidate, e);
    }
    t->offset = candidate;
    arena = std::max(arena, (Checked(candidate) + need).value("the activation arena"));
    placed.push_back(t);
  }
  return arena;
}

const PlannedCast* MemoryPlan::cast_of(int node, int slot) const {
  for (const PlannedCast& c : casts)
    if (c.node == node && c.slot == slot) return &c;
  return nullptr;
}

// The elements of `per_sample` at `batch`, within the per-tensor cap: a config error at the layer
// (node >= 0) or at train.batch_size (the model input).
static int64_t batched_elements(const Graph& g, int node, const Shape& per_sample, int64_t batch) {
  const Checked n = checked_product(per_sample.dims()) * batch;
  if (within_tensor_cap(n)) return n.value("");
  const std::string count = n.ok() ? fmt::format("{} elements", n.value("")) : "more elements than fit 64 bits";
  const std::string msg = fmt::format("{} at batch {} would have {}, over the per-tensor cap of {} (2^31) elements "
                                      "(lower the batch size: train.batch_size, --batch)",
                                      per_sample.to_string(), batch, count, kMaxTensorElements);
  if (node < 0) throw ConfigError(Location{}, "train.batch_size", "the input " + msg);
  const Layer& l = *g.node(node).layer;
  throw ConfigError(l.where(), "layers." + l.name(),
                    fmt::format("layer '{}' ({}): the output {}", l.name(), l.type(), msg));
}

MemoryPlan plan_memory(const Graph& g, int64_t max_batch, bool training) {
  const int L = g.size();
  CNN_CHECK(max_batch >= 1, "memory plan: batch must be >= 1, got {}", max_batch);
  batched_elements(g, -1, g.input_shape(), max_batch);
  MemoryPlan plan;
  plan.activations.resize(static_cast<size_t>(L));
  plan.gradients.resize(static_cast<size_t>(L));
  auto bwd = [L](int i) { return 2 * L - i; };
  for (int i = 0; i < L; ++i) {
    const GraphNode& n = g.node(i);
    PlannedTensor& a = plan.activations[static_cast<size_t>(i)];
    a.what = "act " + n.layer->name();
    if (n.fused_into >= 0) {  // plans nothing: the executor views its producer's tensors
      a.what += " (fused into " + g.node(n.fused_into).layer->name() + ")";
      a.first = a.last = i;
      if (training) plan.gradients[static_cast<size_t>(i)].what = "grad " + n.layer->name() + " (fused)";
      continue;
    }
    // A producer with a fused activation writes the activation's output: its readers are ours.
    const int out = n.fused_act >= 0 ? n.fused_act : i;
    const GraphNode& reader_of = g.node(out);
    const int64_t elements = batched_elements(g, i, n.out_shape, max_batch);
    a.size = elements * int64_t(dtype_size(n.layer->dtype()));  // below 2^31 elements: no overflow
    a.first = i;
    a.last = out == L - 1 ? L : i;  // the last output is read by the loss
    for (int c : reader_of.consumers) {
      a.last = std::max(a.last, c);
      if (training && g.node(c).layer->backward_needs_inputs()) a.last = std::max(a.last, bwd(c));
    }
    if (training && n.layer->backward_needs_output()) a.last = std::max(a.last, bwd(i));
    // Layers whose op reads x in backward regardless (pool reads x and y) are covered by the flags.
    if (training) {
      PlannedTensor& gr = plan.gradients[static_cast<size_t>(i)];
      gr.what = "grad " + n.layer->name();
      gr.size = a.size;
      gr.first = out == L - 1 ? L : bwd(i);
      for (int c : reader_of.consumers) gr.first = std::min(gr.first, bwd(c));
      gr.last = bwd(i);
    }
  }
  // Casts: every input read in another dtype than its producer's (fused activations read nothing).
  for (int i = 0; i < L; ++i) {
    const GraphNode& n = g.node(i);
    const DType to = n.layer->dtype();
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (!g.casts_input(i, int(k))) continue;
      const int p = n.inputs[k];
      const DType from = g.dtype_of(p);
      PlannedCast c;
      c.node = i;
      c.slot = int(k);
      c.producer = p;
      c.from = from;
      c.to = to;
      const std::string edge = (p == Graph::kModelInput ? std::string("input") : g.node(p).layer->name()) + "->" +
                               n.layer->name();
      const Shape& shape = p == Graph::kModelInput ? g.input_shape() : g.node(p).out_shape;
      const int64_t bytes = batched_elements(g, i, shape, max_batch) * int64_t(dtype_size(to));
      c.act = {"cast " + edge, bytes, i, training && n.layer->backward_needs_inputs() ? bwd(i) : i};
      if (training && p != Graph::kModelInput) c.grad = {"cast grad " + edge, bytes, bwd(i), bwd(i)};
      plan.casts.push_back(c);
    }
  }
  if (L > 0 && g.node(L - 1).layer->dtype() != DType::f32) {
    const int64_t bytes = batched_elements(g, L - 1, g.output_shape(), max_batch) * int64_t(sizeof(float));
    plan.output_f32 = {"output f32", bytes, L - 1, L};
    if (training) plan.output_grad_f32 = {"output grad f32", bytes, L, bwd(L - 1)};
  }
  std::vector<PlannedTensor*> all;
  for (auto& t : plan.activations) all.push_back(&t);
  for (auto& t : plan.gradients) all.push_back(&t);
  for (auto& c : plan.casts) all.push_back(&c.act), all.push_back(&c.grad);
  all.push_back(&plan.output_f32);
  all.push_back(&plan.output_grad_f32);
  Checked naive = 0;
  for (auto* t : all) naive = naive + t->size;
  plan.naive_size = naive.value("the activation memory without reuse");
  plan.arena_size = assign_offsets(all, kArenaAlign);
  return plan;
}

}  // namespace cnn
