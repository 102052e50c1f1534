// Element types and typed operand views: names and sizes, the implicit f32 views of raw float
// pointers, and the checked f32 accessor that refuses a view of another dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/view.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("dtypes have names and element sizes", "[cpu]") {
  CHECK(std::string(to_string(DType::f32)) == "f32");
  CHECK(std::string(to_string(DType::bf16)) == "bf16");
  CHECK(std::string(to_string(DType::f16)) == "f16");
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
}

TEST_CASE("views carry their pointer and dtype and check it on access", "[cpu]") {
  float data[4] = {1, 2, 3, 4};
  const ConstView raw = data;  // a raw float pointer is an f32 view
  CHECK(raw.dtype() == DType::f32);
  CHECK(raw.f32() == data);
  const View out = data;
  const ConstView read_only = out;  // a written operand may be read
  CHECK(read_only.f32() == data);
  const ConstView none = nullptr;
  CHECK(none.null());
  CHECK(none.f32() == nullptr);
  const ConstView half(static_cast<const void*>(data), DType::bf16);
  CHECK(half.dtype() == DType::bf16);
  CHECK(half.data() == data);
  CHECK_THROWS_WITH(half.f32(), Catch::Matchers::Contains("dtype bf16"));
  CHECK_THROWS_AS(View(static_cast<void*>(data), DType::f16).f32(), Error);
  // A null view of any dtype is an operand not wanted in this call.
  CHECK(View(nullptr, DType::bf16).f32() == nullptr);
}

TEST_CASE("a tensor's views carry its dtype", "[cpu]") {
  Tensor t = Tensor::zeros(Shape{3});
  CHECK(t.dtype() == DType::f32);
  CHECK(t.view().f32() == t.data());
  const Tensor& c = t;
  CHECK(c.view().dtype() == DType::f32);
}
