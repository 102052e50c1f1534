// The batched weight pack on the GPU (conv2d_pack_weights_batch_cuda): every copy of a table packed
// in one launch per slice has exactly the bits of conv2d_pack_weights_cuda for that copy (bf16 and
// f16, every layout, sizes that are not multiples of the group, tables past one slice), and nothing
// past a copy's end is written.
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda_context.h"
#include "core/device.h"
#include "ops/conv2d.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

using DeviceMem = std::unique_ptr<void, void (*)(void*)>;
DeviceMem device_alloc(size_t bytes) {
  return DeviceMem(device_malloc(Device::cuda, bytes, "test weight pack"), [](void* p) { device_free(Device::cuda, p); });
}

struct GpuCopy {
  Conv2dShape sh;
  Bf16WeightLayout layout;
  DType dtype;
  DeviceMem w, batched, single;
};

// The copies of `shapes` (layouts and dtypes cycling through the valid ones), packed batched and one
// by one, then compares each copy bit for bit and checks nothing past its end was written.
void check_batched_equals_single(const std::vector<std::pair<Conv2dShape, Bf16WeightLayout>>& shapes) {
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  std::vector<GpuCopy> copies;
  std::vector<WeightPackEntry> table;
  const uint16_t kSentinel = 0xabcd;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Conv2dShape& sh = shapes[i].first;
    const size_t n = size_t(sh.weight_numel()), bytes = (n + kWeightPackGroup) * 2;
    GpuCopy c{sh, shapes[i].second, i % 3 == 2 ? DType::f16 : DType::bf16, device_alloc(n * 4), device_alloc(bytes),
              device_alloc(bytes)};
    const std::vector<float> w = test::random_floats(n, 50 + i, -70000.0f, 70000.0f);  // f16 overflow too
    device_memcpy(c.w.get(), Device::cuda, w.data(), Device::cpu, n * 4);
    const std::vector<uint16_t> sentinel(n + kWeightPackGroup, kSentinel);
    device_memcpy(c.batched.get(), Device::cuda, sentinel.data(), Device::cpu, bytes);
    device_memcpy(c.single.get(), Device::cuda, sentinel.data(), Device::cpu, bytes);
    add_weight_pack(table, static_cast<const float*>(c.w.get()), c.batched.get(),
                    {int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)}, c.layout, c.dtype);
    if (c.dtype == DType::f16)
      conv2d_pack_weights_cuda(ctx, sh, c.layout, static_cast<const float*>(c.w.get()), static_cast<f16*>(c.single.get()));
    else
      conv2d_pack_weights_cuda(ctx, sh, c.layout, static_cast<const float*>(c.w.get()), static_cast<bf16*>(c.single.get()));
    copies.push_back(std::move(c));
  }
  DeviceMem dev_table = device_alloc(table.size() * sizeof(WeightPackEntry));
  device_memcpy(dev_table.get(), Device::cuda, table.data(), Device::cpu, table.size() * sizeof(WeightPackEntry));
  conv2d_pack_weights_batch_cuda(ctx, static_cast<const WeightPackEntry*>(dev_table.get()), int(table.size()),
                                 weight_pack_slice_groups(table));
  cuda.synchronize();
  for (size_t i = 0; i < copies.size(); ++i) {
    const GpuCopy& c = copies[i];
    INFO("copy " << i << ": " << c.sh.to_string() << " " << to_string(c.layout) << " " << to_string(c.dtype));
    const size_t n = size_t(c.sh.weight_numel());
    std::vector<uint16_t> batched(n + kWeightPackGroup), single(n + kWeightPackGroup);
    device_memcpy(batched.data(), Device::cpu, c.batched.get(), Device::cuda, batched.size() * 2);
    device_memcpy(single.data(), Device::cpu, c.single.get(), Device::cuda, single.size() * 2);
    CHECK(std::memcmp(batched.data(), single.data(), n * 2) == 0);
    for (size_t k = n; k < batched.size(); ++k) CHECK(batched[k] == kSentinel);
  }
}

}  // namespace

TEST_CASE("batched weight pack on cuda: the per-copy pack's bits for every layout and dtype", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_batched_equals_single({
      {Conv2dShape::make(2, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1), Bf16WeightLayout::krsc},
      {Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8), Bf16WeightLayout::rsk},
      {Conv2dShape::make(1, 5, 4, 4, 7, 1, 1), Bf16WeightLayout::crsk},
      {Conv2dShape::make(1, 5, 4, 4, 7, 1, 1), Bf16WeightLayout::krsc},
      {Conv2dShape::make(1, 4608, 1, 1, 1023, 1, 1), Bf16WeightLayout::kcrs},  // a dense layer's (K, C)
      {Conv2dShape::make(1, 1, 5, 5, 1, 1, 1), Bf16WeightLayout::rsk},
      {Conv2dShape::make(1, 256, 8, 8, 512, 3, 3, 1, 1, 1, 1), Bf16WeightLayout::crsk},
      {Conv2dShape::make(1, 256, 8, 8, 512, 3, 3, 1, 1, 1, 1), Bf16WeightLayout::krsc},
      {Conv2dShape::make(1, 6, 8, 8, 10, 5, 3, 1, 1, 2, 1), Bf16WeightLayout::crsk},
  });
}

TEST_CASE("batched weight pack on cuda: a table of several slices packs every copy", "[gpu]") {
  CNN_REQUIRE_GPU();
  std::vector<std::pair<Conv2dShape, Bf16WeightLayout>> shapes;
  for (int i = 0; i < 2 * kWeightPackEntriesPerLaunch + 5; ++i)
    shapes.push_back({Conv2dShape::make(1, 1 + i % 7, 3, 3, 1 + i % 5, 1 + i % 3, 1 + i % 2, 1, 1, 0, 0),
                      i % 2 ? Bf16WeightLayout::krsc : Bf16WeightLayout::crsk});
  check_batched_equals_single(shapes);
}
