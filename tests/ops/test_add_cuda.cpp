// Add CUDA beyond what the harness compares with the reference (test_backend_ops.cpp): more than
// 64 inputs and an empty input list rejected.
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"
#include "support/views.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kExact;

using cnn::test::DeviceFloats;

TEST_CASE("add cuda rejects more than 64 inputs and an empty input list", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  DeviceFloats v(std::vector<float>(4, 1.0f));
  std::vector<const float*> xs(65, v.data());
  CHECK_THROWS_AS(run_op(Backend::cuda, AddForward{&cuda.ctx(), 4, 65, test::views(xs.data(), 65).data(), v.data()}), Error);
  CHECK_THROWS_AS(run_op(Backend::cuda, AddForward{&cuda.ctx(), 4, 0, test::views(xs.data(), 0).data(), v.data()}), Error);
}
