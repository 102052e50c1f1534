// Liveness analysis and first-fit offset assignment (see memory_plan.h).
#include "graph/memory_plan.h"

#include <algorithm>

#include "graph/graph.h"

namespace cnn {

int64_t assign_offsets(std::vector<PlannedTensor*>& tensors, int64_t align) {
  std::vector<PlannedTensor*> order(tensors);
  std::stable_sort(order.begin(), order.end(),
                   [](const PlannedTensor* a, const PlannedTensor* b) { return a->size > b->size; });
  std::vector<PlannedTensor*> placed;
  int64_t arena = 0;
  for (PlannedTensor* t : order) {
    if (t->size == 0) continue;
    int64_t need = (t->size + align - 1) / align * align;
    // Byte ranges of placed tensors alive at the same time, sorted by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const PlannedTensor* p : placed) {
      if (p->first <= t->last && t->first <= p->last)
        busy.emplace_back(p->offset, p->offset + (p->size + align - 1) / align * align);
    }
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0;
    for (const auto& [b, e] : busy) {
      if (candidate + need <= b) break;
      candidate = std::max(candidate, e);
    }
    t->offset = candidate;
    arena = std::max(arena, candidate + need);
    placed.push_back(t);
  }
  return arena;
}

MemoryPlan plan_memory(const Graph& g, int64_t max_batch, bool training) {
  const int L = g.size();
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
    a.size = max_batch * n.out_shape.numel();
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
  std::vector<PlannedTensor*> all;
  for (auto& t : plan.activations) all.push_back(&t);
  for (auto& t : plan.gradients) all.push_back(&t);
  for (auto* t : all) plan.naive_size += t->size;
  plan.arena_size = assign_offsets(all, Graph::kAlign);
  return plan;
}

}  // namespace cnn
