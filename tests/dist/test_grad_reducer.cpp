// Gradient buckets: where the plan cuts, that every parameter is reduced exactly once in the
// same order on every rank, that the mean is exact, and the empty-rank path.
#include <cstring>
#include <numeric>

#include "dist/grad_reducer.h"
#include "support/catch.h"
#include "dist/fake_communicator.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

// A layout like the executor's: parameters in node order at 16-float-aligned offsets; gradients
// become final last node first, i.e. in descending offset order.
std::vector<GradSpan> reverse_layout(const std::vector<int64_t>& counts) {
  std::vector<GradSpan> spans;
  int64_t offset = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    spans.push_back({int(p), offset, counts[p]});
    offset += (counts[p] + 15) / 16 * 16;
  }
  std::reverse(spans.begin(), spans.end());
  return spans;
}

int64_t flat_size(const std::vector<GradSpan>& spans) {
  int64_t end = 0;
  for (const auto& s : spans) end = std::max(end, (s.offset + s.count + 15) / 16 * 16);
  return end;
}

}  // namespace

TEST_CASE("buckets close once they hold bucket_floats and are contiguous ranges in ready order", "[cpu]") {
  auto spans = reverse_layout({100, 10, 300, 5, 50});  // offsets 0, 112, 128, 432, 448
  auto buckets = plan_buckets(spans, 64);
  // Ready order: p4 (50) p3 (5) p2 (300) p1 (10) p0 (100): {p4, p3} reaches 55 < 64, + p2 -> closes.
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].params == std::vector<int>{4, 3, 2});
  CHECK(buckets[0].begin == 128);
  CHECK(buckets[0].end == 448 + 50);
  CHECK(buckets[1].params == std::vector<int>{1, 0});
  CHECK(buckets[1].begin == 0);
  CHECK(buckets[1].end == 122);

  CHECK(plan_buckets(spans, 1).size() == 5);        // every parameter alone
  CHECK(plan_buckets(spans, 1 << 30).size() == 1);  // one bucket
  CHECK(plan_buckets(spans, 305).size() == 2);      // 55 + 300 = 355 >= 305 closes the first
  CHECK(plan_buckets({}, 64).empty());
}

TEST_CASE("a layout that is not monotone in ready order cannot be cut into ranges", "[cpu]") {
  std::vector<GradSpan> spans{{0, 0, 10}, {1, 100, 10}, {2, 50, 10}};
  CHECK_THROWS_WITH(plan_buckets(spans, 15), Contains("overlap"));
}

TEST_CASE("every parameter is reduced exactly once and the mean over three ranks is exact", "[cpu]") {
  auto spans = reverse_layout({37, 3, 130, 1, 64, 9});
  std::vector<float> grads(size_t(flat_size(spans)), 0.0f);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i % 13) * 0.37f - 1.0f;
  const std::vector<float> mine = grads;
  test::FakeCommunicator comm(1, 3);
  comm.base = grads.data();
  comm.peer_values = [](int r, int64_t i) { return float(r + 1) * 0.01f * float(i % 7) + 0.1f; };
  // Buckets of 50 floats (200 bytes): {p5, p4}, {p3, p2}, {p1, p0}.
  GradReducer red(comm, spans, 200.0 / 1048576.0, Compression::none, Device::cpu, grads.data());
  REQUIRE(red.buckets().size() == 3);
  for (const GradSpan& s : spans) red.on_ready(s.param);  // the executor's order
  red.finish();
  REQUIRE(comm.calls.size() == red.buckets().size());
  std::vector<int> covered(grads.size(), 0);
  for (size_t b = 0; b < comm.calls.size(); ++b) {
    const auto& c = comm.calls[b];
    CHECK(c.data == grads.data() + red.buckets()[b].begin);  // plan order
    CHECK(c.n == red.buckets()[b].numel());
    for (int64_t i = 0; i < c.n; ++i) ++covered[size_t(c.data - grads.data() + i)];
  }
  for (const GradSpan& s : spans) {
    for (int64_t i = s.offset; i < s.offset + s.count; ++i) {
      INFO("parameter " << s.param << " element " << i);
      REQUIRE(covered[size_t(i)] == 1);
      float sum = mine[size_t(i)];
      for (int r = 0; r < 3; ++r)
        if (r != 1) sum += comm.peer_values(r, i);
      CHECK(grads[size_t(i)] == sum / 3.0f);
    }
  }
}

TEST_CASE("a bucket starts when its last parameter is final, not before", "[cpu]") {
  auto spans = reverse_layout({8, 8, 8, 8});
  std::vector<float> grads(size_t(flat_size(spans)), 1.0f);
  test::FakeCommunicator comm(0, 2);
  GradReducer red(comm, spans, 16.0 * 4 / 1048576.0, Compression::none, Device::cpu, grads.data());
  REQUIRE(red.buckets().size() == 2);
  auto hook = red.hook();
  hook(3);
  CHECK(comm.calls.empty());
  hook(2);
  CHECK(comm.calls.size() == 1);
  hook(1);
  CHECK(comm.calls.size() == 1);
  CHECK_THROWS_WITH(hook(1), Contains("twice"));
}

TEST_CASE("a rank without samples joins every bucket in plan order with zeros", "[cpu]") {
  auto spans = reverse_layout({20, 20, 20});
  std::vector<float> grads(size_t(flat_size(spans)), 0.0f);
  test::FakeCommunicator comm(0, 2);
  comm.base = grads.data();
  comm.peer_values = [](int, int64_t) { return 4.0f; };
  GradReducer red(comm, spans, 20.0 * 4 / 1048576.0, Compression::none, Device::cpu, grads.data());
  red.reduce_all();
  REQUIRE(comm.calls.size() == 3);
  for (size_t b = 0; b < 3; ++b) CHECK(comm.calls[b].data == grads.data() + red.buckets()[b].begin);
  for (const GradSpan& s : spans)
    for (int64_t i = s.offset; i < s.offset + s.count; ++i) CHECK(grads[size_t(i)] == 2.0f);
  // The next step starts clean.
  for (const GradSpan& s : spans) red.on_ready(s.param);
  red.finish();
  CHECK(comm.calls.size() == 6);
}

TEST_CASE("backward that skipped a parameter is an error, not a silent disagreement between ranks", "[cpu]") {
  auto spans = reverse_layout({4, 4});
  std::vector<float> grads(size_t(flat_size(spans)), 0.0f);
  test::FakeCommunicator comm(0, 2);
  GradReducer red(comm, spans, 1e-9, Compression::none, Device::cpu, grads.data());
  red.on_ready(1);
  CHECK_THROWS_WITH(red.finish(), Contains("1 of 2 gradient buckets"));
}

TEST_CASE("the single-process communicator leaves averaged gradients unchanged", "[cpu]") {
  auto spans = reverse_layout({5, 7});
  std::vector<float> grads(size_t(flat_size(spans)));
  std::iota(grads.begin(), grads.end(), 0.5f);
  const std::vector<float> before = grads;
  auto comm = make_single_communicator();
  GradReducer red(*comm, spans, 25.0, Compression::none, Device::cpu, grads.data());
  for (const GradSpan& s : spans) red.on_ready(s.param);
  red.finish();
  CHECK(grads == before);
}
