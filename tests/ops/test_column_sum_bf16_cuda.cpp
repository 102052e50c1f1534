// The BF16, F16 and FP32 column sums (column_sum_bf16.h) against a double sum of the same values:
// one chunk and many (the partials pass), column counts with and without 16-byte runs, an operand
// one element off 16-byte alignment (the scalar kernel), and the same bits on a second run.
#include <cstdint>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/cuda_context.h"
#include "ops/column_sum_bf16.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;

TEST_CASE("column sum bf16 chunks by the row count alone", "[cpu]") {
  CHECK(column_sum_bf16_chunks(1) == 1);
  CHECK(column_sum_bf16_chunks(512) == 1);
  CHECK(column_sum_bf16_chunks(513) == 2);
  CHECK(column_sum_bf16_scratch_bytes(512, 64) == 0);
  CHECK(column_sum_bf16_scratch_bytes(513, 64) == 2 * 64 * sizeof(float));
  for (int64_t rows : {int64_t(1), int64_t(1000), int64_t(600000), int64_t(1) << 31}) {
    INFO(rows);
    const int64_t chunk = column_sum_bf16_chunk_rows(rows), chunks = column_sum_bf16_chunks(rows);
    CHECK(chunk % 32 == 0);
    CHECK(chunks <= 1024);
    CHECK(chunks * chunk >= rows);
    CHECK((chunks - 1) * chunk < rows);
  }
}

namespace {

// The operand on the device: 16-bit elements, or floats.
template <typename T>
struct DeviceMatrix {
  test::Device16<T> m;
  DeviceMatrix(const std::vector<T>& x, int64_t offset) : m(x, offset) {}
  const T* data() { return m.data(); }
};
template <>
struct DeviceMatrix<float> {
  test::DeviceFloats m;
  DeviceMatrix(const std::vector<float>& x, int64_t offset) : m(x, offset) {}
  const float* data() { return m.data(); }
};

float value_of(float v) { return v; }
template <typename T>
float value_of(T v) { return to_float(v); }

template <typename T>
void check_column_sums() {
  CudaContext cuda;
  struct Size {
    int64_t rows, cols;
  };
  uint64_t seed = 900;
  for (const Size z : {Size{1, 1}, Size{3, 7}, Size{64, 8}, Size{513, 16}, Size{700, 5}, Size{40000, 72},
                       Size{600000, 8}})
    for (int64_t offset : {0, 1}) {
      INFO(fmt::format("rows {} cols {} offset {}", z.rows, z.cols, offset));
      // Mean 0.5, so no column sum cancels to near zero and the relative tolerance means something.
      const std::vector<float> values = test::random_floats(size_t(z.rows * z.cols), ++seed, -0.5f, 1.5f);
      std::vector<T> x;
      if constexpr (std::is_same_v<T, float>)
        x = values;
      else
        x = test::rounded_vector<T>(values);
      std::vector<double> want(size_t(z.cols), 0.0);
      for (int64_t r = 0; r < z.rows; ++r)
        for (int64_t c = 0; c < z.cols; ++c) want[size_t(c)] += value_of(x[size_t(r * z.cols + c)]);
      DeviceMatrix<T> dx(x, offset);
      test::DeviceFloats sum = test::DeviceFloats::poisoned(z.cols);
      const size_t scratch_floats = column_sum_bf16_scratch_bytes(z.rows, z.cols) / sizeof(float);
      test::DeviceFloats scratch = test::DeviceFloats::poisoned(int64_t(std::max<size_t>(scratch_floats, 1)));
      column_sum_cuda(cuda.ctx(), z.rows, z.cols, dx.data(), sum.data(), scratch_floats ? scratch.data() : nullptr);
      cuda.synchronize();
      const std::vector<float> first = sum.get();
      CHECK(test::compare(first, std::vector<float>(want.begin(), want.end()), test::kGpuVsCpu) == "");
      sum.poison();
      column_sum_cuda(cuda.ctx(), z.rows, z.cols, dx.data(), sum.data(), scratch_floats ? scratch.data() : nullptr);
      cuda.synchronize();
      CHECK(test::compare(sum.get(), first, test::kExact) == "");
    }
}

}  // namespace

TEST_CASE("column sum bf16 matches a double sum and repeats its bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_column_sums<bf16>();
}

TEST_CASE("column sum f16 matches a double sum and repeats its bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_column_sums<f16>();
}

TEST_CASE("column sum f32 matches a double sum and repeats its bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_column_sums<float>();
}
