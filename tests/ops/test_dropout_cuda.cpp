// Dropout CUDA kernel against the CPU: the same elements dropped and the same scaled values,
// bit for bit, for counter offsets on and off Philox block boundaries, odd sizes, misaligned
// pointers, in place, and p = 0.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/dropout.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

using cnn::test::DeviceFloats;
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("dropout cuda drops the same elements as the cpu for the same seed and offset", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    for (uint64_t counter :
         {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{7}, (uint64_t{1} << 33) + 3}) {
      for (int64_t n : {1, 2, 3, 4, 5, 9, 1001, 4096, 65539}) {
        for (int64_t offset : {0, 1}) {
          INFO("p=" << p << " counter=" << counter << " n=" << n << " pointer offset=" << offset);
          const DropoutParams prm{p, static_cast<uint64_t>(1234 + n), counter};
          const std::vector<float> x = test::random_floats(static_cast<size_t>(n), 40 + n, 0.5f, 1.5f);
          std::vector<float> y_ref(x.size()), dx_ref(x.size());
          dropout_forward_cpu({&cpu, prm, n, x.data(), y_ref.data()});
          dropout_backward_cpu({&cpu, prm, n, x.data(), dx_ref.data()});
          DeviceFloats dx_in(x, offset), y = DeviceFloats::poisoned(n, offset), dx = DeviceFloats::poisoned(n, offset);
          dropout_forward_cuda({&cuda.ctx(), prm, n, dx_in.data(), y.data()});
          dropout_backward_cuda({&cuda.ctx(), prm, n, dx_in.data(), dx.data()});
          cuda.synchronize();
          CHECK(bitwise_equal(y.get(), y_ref));
          CHECK(bitwise_equal(dx.get(), dx_ref));
        }
      }
    }
  }
}

TEST_CASE("dropout cuda works in place and is the identity for p = 0", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  const int64_t n = 10007;
  const std::vector<float> x = test::random_floats(n, 3);
  for (float p : {0.0f, 0.3f}) {
    INFO("p=" << p);
    const DropoutParams prm{p, 99, 6};
    std::vector<float> y_ref(n);
    dropout_forward_cpu({&cpu, prm, n, x.data(), y_ref.data()});
    DeviceFloats inplace(x), y = DeviceFloats::poisoned(n), dx_in(x);
    dropout_forward_cuda({&cuda.ctx(), prm, n, inplace.data(), inplace.data()});
    dropout_forward_cuda({&cuda.ctx(), prm, n, dx_in.data(), y.data()});
    cuda.synchronize();
    CHECK(bitwise_equal(inplace.get(), y_ref));
    CHECK(bitwise_equal(y.get(), y_ref));
  }
}

TEST_CASE("dropout cuda rejects a drop probability below 0 or from 1 up", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  DeviceFloats v(std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(dropout_forward_cuda({&cuda.ctx(), DropoutParams{1.0f, 0, 0}, 4, v.data(), v.data()}), Error);
  CHECK_THROWS_AS(dropout_backward_cuda({&cuda.ctx(), DropoutParams{-0.1f, 0, 0}, 4, v.data(), v.data()}), Error);
}
