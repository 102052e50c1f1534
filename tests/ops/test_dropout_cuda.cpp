// Dropout CUDA beyond what the harness compares with the reference bit for bit
// (test_backend_ops.cpp): drop probabilities outside [0, 1) rejected.
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

using cnn::test::DeviceFloats;

TEST_CASE("dropout cuda rejects a drop probability below 0 or from 1 up", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  DeviceFloats v(std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(run_op(Backend::cuda, DropoutForward{&cuda.ctx(), DropoutParams{1.0f, 0, 0}, 4, v.data(), v.data()}), Error);
  CHECK_THROWS_AS(run_op(Backend::cuda, DropoutBackward{&cuda.ctx(), DropoutParams{-0.1f, 0, 0}, 4, v.data(), v.data()}), Error);
}
