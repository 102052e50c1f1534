// Add CUDA kernels against the CPU: 1 to 64 inputs, odd sizes, misaligned pointers (all or one),
// y aliasing an input, null and aliased gradients in backward. The sum runs in the CPU's order,
// so results are compared exactly.
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

TEST_CASE("add cuda matches the cpu for 1 to 64 inputs, odd sizes and misaligned pointers", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  for (int count : {1, 2, 3, 5, 64}) {
    for (int64_t n : {1, 3, 4, 5, 1001, 4096, 70001}) {
      for (int misalign : {0, 1, 2}) {  // none, every pointer, only the last input
        INFO("count=" << count << " n=" << n << " misalign=" << misalign);
        std::vector<std::vector<float>> xs;
        std::vector<const float*> host_ptrs;
        std::vector<std::unique_ptr<DeviceFloats>> dev;
        std::vector<const float*> dev_ptrs;
        for (int k = 0; k < count; ++k) {
          xs.push_back(test::random_floats(static_cast<size_t>(n), 1000 * k + n));
          host_ptrs.push_back(xs.back().data());
          const int64_t offset = misalign == 1 || (misalign == 2 && k == count - 1) ? 1 : 0;
          dev.push_back(std::make_unique<DeviceFloats>(xs.back(), offset));
          dev_ptrs.push_back(dev.back()->data());
        }
        std::vector<float> y_ref(static_cast<size_t>(n));
        add_forward_cpu({&cpu, n, count, test::views(host_ptrs.data(), count).data(), y_ref.data()});
        DeviceFloats y = DeviceFloats::poisoned(n, misalign == 1 ? 1 : 0);
        add_forward_cuda({&cuda.ctx(), n, count, test::views(dev_ptrs.data(), count).data(), y.data()});

        const std::vector<float> dy = test::random_floats(static_cast<size_t>(n), 5 + n);
        DeviceFloats ddy(dy, misalign == 1 ? 1 : 0);
        std::vector<std::unique_ptr<DeviceFloats>> grads;
        std::vector<float*> grad_ptrs;
        for (int k = 0; k < count; ++k) {
          grads.push_back(std::make_unique<DeviceFloats>(DeviceFloats::poisoned(n, misalign == 2 && k == 0 ? 1 : 0)));
          grad_ptrs.push_back(k % 3 == 1 ? nullptr : grads.back()->data());  // some gradients are not wanted
        }
        add_backward_cuda({&cuda.ctx(), n, count, ddy.data(), test::views(grad_ptrs.data(), count).data()});
        cuda.synchronize();
        CHECK(compare(y.get(), y_ref, kExact) == "");
        for (int k = 0; k < count; ++k) {
          if (grad_ptrs[k]) CHECK(compare(grads[k]->get(), dy, kExact) == "");
        }
      }
    }
  }
}

TEST_CASE("add cuda allows y to alias an input and a gradient to alias dy", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  const int64_t n = 5003;
  const std::vector<float> a = test::random_floats(n, 1), b = test::random_floats(n, 2), c = test::random_floats(n, 3);
  const float* host[] = {a.data(), b.data(), c.data()};
  std::vector<float> y_ref(n);
  add_forward_cpu({&cpu, n, 3, test::views(host, 3).data(), y_ref.data()});
  for (int alias : {0, 1, 2}) {
    INFO("y aliases input " << alias);
    DeviceFloats da(a), db(b), dc(c);
    const float* xs[] = {da.data(), db.data(), dc.data()};
    float* y = const_cast<float*>(xs[alias]);
    add_forward_cuda({&cuda.ctx(), n, 3, test::views(xs, 3).data(), y});
    cuda.synchronize();
    DeviceFloats* out = alias == 0 ? &da : alias == 1 ? &db : &dc;
    CHECK(compare(out->get(), y_ref, kExact) == "");
  }
  DeviceFloats dy(a), other = DeviceFloats::poisoned(n);
  float* dxs[] = {dy.data(), other.data()};
  add_backward_cuda({&cuda.ctx(), n, 2, dy.data(), test::views(dxs, 2).data()});
  cuda.synchronize();
  CHECK(compare(dy.get(), a, kExact) == "");
  CHECK(compare(other.get(), a, kExact) == "");
}

TEST_CASE("add cuda rejects more than 64 inputs and an empty input list", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  DeviceFloats v(std::vector<float>(4, 1.0f));
  std::vector<const float*> xs(65, v.data());
  CHECK_THROWS_AS(add_forward_cuda({&cuda.ctx(), 4, 65, test::views(xs.data(), 65).data(), v.data()}), Error);
  CHECK_THROWS_AS(add_forward_cuda({&cuda.ctx(), 4, 0, test::views(xs.data(), 0).data(), v.data()}), Error);
}
