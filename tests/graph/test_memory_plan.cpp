// The activation memory plan: tensors alive at the same time never share memory, and reuse
// makes the arena smaller than the sum of all tensors.
#include "config/model_spec.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "support/catch.h"

using namespace cnn;

void check_no_conflicts(const MemoryPlan& plan);  // also used by test_precision.cpp

void check_no_conflicts(const MemoryPlan& plan) {
  std::vector<const PlannedTensor*> all;
  for (const auto& t : plan.activations) all.push_back(&t);
  for (const auto& t : plan.gradients) all.push_back(&t);
  for (const auto& c : plan.casts) all.push_back(&c.act), all.push_back(&c.grad);
  all.push_back(&plan.output_f32);
  all.push_back(&plan.output_grad_f32);
  for (size_t i = 0; i < all.size(); ++i) {
    const PlannedTensor& a = *all[i];
    if (!a.size) continue;
    CHECK(a.offset + a.size <= plan.arena_size);
    for (size_t j = i + 1; j < all.size(); ++j) {
      const PlannedTensor& b = *all[j];
      if (!b.size) continue;
      bool time = a.first <= b.last && b.first <= a.last;
      bool space = a.offset < b.offset + b.size && b.offset < a.offset + a.size;
      INFO(a.what << " [" << a.first << "," << a.last << "] @" << a.offset << " vs " << b.what << " [" << b.first
                  << "," << b.last << "] @" << b.offset);
      CHECK_FALSE((time && space));
    }
  }
}

TEST_CASE("first-fit assignment separates tensors that live at the same time", "[cpu]") {
  PlannedTensor a{"a", 100, 0, 2}, b{"b", 50, 1, 3}, c{"c", 100, 3, 4}, d{"d", 10, 5, 5};
  std::vector<PlannedTensor*> ts{&a, &b, &c, &d};
  int64_t size = assign_offsets(ts, 1);
  CHECK(a.offset == 0);
  CHECK(c.offset == 0);      // a is dead by time 3
  CHECK(b.offset == 100);    // overlaps both a and c in time
  CHECK(d.offset == 0);
  CHECK(size == 150);
}

TEST_CASE("memory plans of the bundled models have no conflicts and reuse memory", "[cpu]") {
  for (const char* name : {"tiny", "fer_cnn", "mini_xception", "fashion_cnn"}) {
    INFO(name);
    ModelSpec spec = load_model_spec(std::string(CNN_SOURCE_DIR) + "/models/" + name + ".yaml");
    auto g = Graph::build(spec);
    for (bool training : {true, false}) {
      MemoryPlan plan = plan_memory(*g, 3, training);
      check_no_conflicts(plan);
      CHECK(plan.arena_size < plan.naive_size);
    }
  }
}

TEST_CASE("activations needed by backward stay alive until then", "[cpu]") {
  ModelSpec spec = load_model_spec(std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml");
  auto g = Graph::build(spec);
  MemoryPlan plan = plan_memory(*g, 2, true);
  const int L = g->size();
  // conv1's output feeds bn1, whose backward needs its input: alive until bn1's backward (2L - 1).
  CHECK(plan.activations[0].last >= 2 * L - 1);
  // Forward-only: dead right after its last reader.
  MemoryPlan fwd = plan_memory(*g, 2, false);
  CHECK(fwd.activations[0].last == 1);
}
