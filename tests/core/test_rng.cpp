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
