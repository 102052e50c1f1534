// Concat CUDA kernels against the CPU: one to twenty inputs (more than one launch's worth),
// N=1, odd H*W (the scalar path) and H*W % 4 == 0 (float4), misaligned pointers, null gradients.
// A copy is exact, so results are compared exactly.
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/concat.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"
#include "support/views.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kExact;

using cnn::test::DeviceFloats;

TEST_CASE("concat cuda matches the cpu over generated shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  std::vector<int64_t> twenty;
  for (int i = 0; i < 20; ++i) twenty.push_back(1 + i % 3);
  const std::vector<std::vector<int64_t>> channel_lists{{1}, {2, 3}, {1, 1, 1}, {4, 8, 5}, twenty};
  uint64_t seed = 1;
  for (int64_t N : {1, 3}) {
    for (int64_t HW : {1, 3, 4, 49, 64}) {
      for (const auto& channels : channel_lists) {
        for (int64_t offset : {0, 1}) {
          INFO("N=" << N << " HW=" << HW << " inputs=" << channels.size() << " pointer offset=" << offset);
          ConcatShape sh;
          sh.N = N;
          sh.HW = HW;
          sh.channels = channels;
          const int64_t total = N * sh.total_channels() * HW;
          std::vector<std::vector<float>> xs;
          std::vector<const float*> host_ptrs, dev_ptrs;
          std::vector<std::unique_ptr<DeviceFloats>> dev, grads;
          std::vector<float*> grad_ptrs;
          for (size_t i = 0; i < channels.size(); ++i) {
            const int64_t n = N * channels[i] * HW;
            xs.push_back(test::random_floats(static_cast<size_t>(n), ++seed));
            host_ptrs.push_back(xs.back().data());
            dev.push_back(std::make_unique<DeviceFloats>(xs.back(), i % 2 ? offset : 0));
            dev_ptrs.push_back(dev.back()->data());
            grads.push_back(std::make_unique<DeviceFloats>(DeviceFloats::poisoned(n, offset)));
            grad_ptrs.push_back(i % 4 == 2 ? nullptr : grads.back()->data());
          }
          std::vector<float> y_ref(static_cast<size_t>(total));
          concat_forward_cpu({&cpu, sh, test::views(host_ptrs.data(), sh.channels.size()).data(), y_ref.data()});
          DeviceFloats y = DeviceFloats::poisoned(total, offset);
          concat_forward_cuda({&cuda.ctx(), sh, test::views(dev_ptrs.data(), sh.channels.size()).data(), y.data()});
          const std::vector<float> dy = test::random_floats(static_cast<size_t>(total), ++seed);
          DeviceFloats ddy(dy, offset);
          concat_backward_cuda({&cuda.ctx(), sh, ddy.data(), test::views(grad_ptrs.data(), sh.channels.size()).data()});
          cuda.synchronize();
          CHECK(compare(y.get(), y_ref, kExact) == "");
          std::vector<std::vector<float>> dx_ref;
          std::vector<float*> dx_ref_ptrs;
          for (size_t i = 0; i < channels.size(); ++i) {
            dx_ref.emplace_back(static_cast<size_t>(N * channels[i] * HW));
            dx_ref_ptrs.push_back(dx_ref.back().data());
          }
          concat_backward_cpu({&cpu, sh, dy.data(), test::views(dx_ref_ptrs.data(), sh.channels.size()).data()});
          for (size_t i = 0; i < channels.size(); ++i) {
            if (grad_ptrs[i]) CHECK(compare(grads[i]->get(), dx_ref[i], kExact) == "");
          }
        }
      }
    }
  }
}
