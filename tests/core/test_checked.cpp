// Checked arithmetic (core/checked.h), Shape::numel's overflow check, the per-tensor cap, and
// exceptions carried out of OpenMP regions (core/parallel_errors.h).
#include <omp.h>

#include <climits>
#include <stdexcept>

#include "core/checked.h"
#include "core/error.h"
#include "core/exec_context.h"
#include "core/parallel_errors.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("checked arithmetic is exact where it fits and not ok where it overflows", "[cpu]") {
  CHECK((Checked(3) * 4 + 5).value("x") == 17);
  CHECK((Checked(INT64_MAX - 1) + 1).value("x") == INT64_MAX);
  CHECK(!(Checked(INT64_MAX) + 1).ok());
  CHECK(!(Checked(INT64_MIN) - 1).ok());
  // The `same` padding of issue 16: dilation 3 * (kernel 4611686018427387905 - 1) wrapped to a
  // negative even number.
  CHECK(!(Checked(3) * (int64_t{4611686018427387905} - 1)).ok());
  CHECK(!(Checked(int64_t{1} << 32) * (int64_t{1} << 32)).ok());
  CHECK(!(Checked(INT64_MIN) / -1).ok());
  CHECK(!(Checked(1) / 0).ok());
  // Once not ok, always not ok, even where later steps would bring the value back in range.
  CHECK(!((Checked(INT64_MAX) + 1) - 1).ok());
  CHECK_THROWS_WITH((Checked(INT64_MAX) * 2).value("the span"), Catch::Matchers::Contains("the span does not fit"));
}

TEST_CASE("narrowing to int is an error, never a truncation", "[cpu]") {
  CHECK(narrow_to_int(INT_MAX, "stride") == INT_MAX);
  CHECK(narrow_to_int(-1, "padding") == -1);
  // 2^32 + 1 became 1 and 2^32 became 0 through int(...) casts (issue 16).
  CHECK_THROWS_WITH(narrow_to_int((int64_t{1} << 32) + 1, "conv2d: stride"),
                    Catch::Matchers::Contains("conv2d: stride 4294967297 is out of range"));
  CHECK_THROWS_WITH(narrow_to_int(int64_t{1} << 32, "pool2d: padding"),
                    Catch::Matchers::Contains("pool2d: padding 4294967296"));
}

TEST_CASE("shape element counts are checked and the per-tensor cap is 2^31 elements", "[cpu]") {
  CHECK(Shape{2, 3, 4}.numel() == 24);
  CHECK(Shape{}.numel() == 1);
  // Two 2^32 dimensions made a count of 0: an empty tensor where a huge one was described.
  CHECK_THROWS_WITH((Shape{1, int64_t{1} << 32, int64_t{1} << 32}.numel()),
                    Catch::Matchers::Contains("[1, 4294967296, 4294967296]"));
  CHECK(within_tensor_cap(kMaxTensorElements));
  CHECK(!within_tensor_cap(kMaxTensorElements + 1));
  CHECK(!within_tensor_cap(Checked(INT64_MAX) + 1));
  CHECK_NOTHROW(check_tensor_cap(kMaxTensorElements, "x"));
  CHECK_THROWS_WITH(check_tensor_cap(kMaxTensorElements + 1, "the output"),
                    Catch::Matchers::Contains("the output would have 2147483649 elements, over the per-tensor cap"));
  CHECK_THROWS_WITH(check_tensor_cap(Checked(INT64_MAX) * 2, "w"), Catch::Matchers::Contains("more elements than"));
  CHECK(tensor_cap_message(Checked(INT64_MAX) * 2, "w") ==
        "w would have more elements than a 64-bit integer counts, over the per-tensor cap of 2147483648 (2^31) elements");
  CHECK_THROWS_WITH(check_tensor_cap(Checked(kMaxTensorElements) + 1, "w"),
                    tensor_cap_message(Checked(kMaxTensorElements) + 1, "w"));
  CHECK(checked_bytes(5, 4, "b") == 20);
  CHECK_THROWS_WITH(checked_bytes(INT64_MAX / 2, 8, "the arena"), Catch::Matchers::Contains("the arena"));
  CHECK_THROWS(Tensor::empty(Shape{int64_t{1} << 62, 4}));
}

TEST_CASE("the shared op workspace refuses a float count whose byte size would wrap", "[cpu]") {
  Workspace ws;
  // 1.5 * count * 4 bytes wrapped to a small allocation with a huge recorded capacity.
  CHECK_THROWS_WITH(ws.get(SIZE_MAX / 4), Catch::Matchers::Contains("do not fit a byte count"));
  CHECK(ws.capacity_bytes() == 0);
  CHECK(ws.get(10) != nullptr);
  CHECK(ws.capacity_bytes() >= 40);
}

TEST_CASE("an exception thrown in an OpenMP loop is rethrown after it, not a terminate", "[cpu]") {
  const int n = 64;
  std::vector<int> done(n, 0);
  ParallelErrors errors;
#pragma omp parallel for num_threads(4) schedule(static, 1)
  for (int i = 0; i < n; ++i) {
    errors.run([&] {
      if (i == 5) throw std::runtime_error("iteration 5 failed on thread " + std::to_string(omp_get_thread_num()));
      done[size_t(i)] = 1;
    });
  }
  CHECK(errors.failed());
  CHECK_THROWS_WITH(errors.rethrow(), Catch::Matchers::Contains("iteration 5 failed"));
  CHECK(done[5] == 0);
  // Rethrown once; the helper is then clear.
  CHECK(!errors.failed());
  CHECK_NOTHROW(errors.rethrow());
}
