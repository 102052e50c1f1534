#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("philox draws are a pure function of seed, stream and counter", "[cpu]") {
  Rng a(42, 1), b(42, 1), c(42, 2);
  std::vector<uint32_t> va, vb, vc;
  for (int i = 0; i < 16; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  // Resuming from a saved counter continues the same sequence.
  Rng d(42, 1, 5);
  CHECK(d.next_u32() == va[5]);
  CHECK(philox_uniform(42, 1, 7) == uint_to_unit_float(va[7]));
}

// Rng keeps the Philox block of its counter: every draw must still be the block of its own counter,
// from any starting counter, across block boundaries and after the 64-bit draws.
TEST_CASE("rng draws are philox4x32 of their counter from any start", "[cpu]") {
  for (uint64_t start : {0, 1, 2, 3, 4, 5, 7, 1001}) {
    Rng r(99, 6, start);
    for (uint64_t k = start; k < start + 13; ++k) {
      INFO("start " << start << ", counter " << k);
      CHECK(r.next_u32() == philox4x32(99, 6, k >> 2).v[k & 3]);
    }
    const uint64_t k = start + 13;
    const uint64_t both = r.next_u64();
    CHECK(static_cast<uint32_t>(both >> 32) == philox4x32(99, 6, k >> 2).v[k & 3]);
    CHECK(static_cast<uint32_t>(both) == philox4x32(99, 6, (k + 1) >> 2).v[(k + 1) & 3]);
    CHECK(r.counter() == start + 15);
  }
}

TEST_CASE("rng uniform and below stay in range and cover it", "[cpu]") {
  Rng r(7, 3);
  std::set<uint64_t> seen;
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    float u = r.uniform();
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    uint64_t k = r.below(10);
    REQUIRE(k < 10);
    seen.insert(k);
  }
  CHECK(seen.size() == 10);
  CHECK(sum / 20000 == Approx(0.5).margin(0.01));
}

TEST_CASE("closest_match suggests plausible typos only", "[cpu]") {
  std::vector<std::string> keys{"kernel", "stride", "padding", "filters"};
  CHECK(closest_match("kernal", keys) == "kernel");
  CHECK(closest_match("filter", keys) == "filters");
  CHECK(closest_match("zzzzzz", keys).empty());
  CHECK(did_you_mean("strid", keys) == ", did you mean 'stride'?");
}

TEST_CASE("tensor reshape shares storage and clone copies", "[cpu]") {
  Tensor t = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t.reshape({3, 2});
  r.at(0) = 9;
  CHECK(t.at(0) == 9);
  Tensor c = t.clone();
  c.at(1) = -1;
  CHECK(t.at(1) == 2);
  CHECK_THROWS_AS(t.reshape({4, 2}), Error);
}
