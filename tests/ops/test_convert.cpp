// The convert op (ops/convert.h) on every row, CPU and GPU: every pair of dtypes (f32, bf16, f16)
// and layouts (NCHW, channels-last) over odd and flat dims, against values computed here element by
// element; the emulation helpers (widen, narrow); and the in-place permute refused.
// Exact: a conversion rounds at most once, to nearest even, with core/bf16.h's or core/fp16.h's
// rule on every row.
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "core/tensor.h"
#include "ops/convert.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

// Logical values of (n, c, hw): not exact in bf16, so rounding shows.
float value_at(const ActDims& d, int64_t n, int64_t c, int64_t hw) {
  return 0.1f + 1.0f / 3.0f * float(((n * d.C + c) * d.H * d.W + hw) % 97) - 7.0f * float(c % 3);
}

// Host storage of the logical values in a dtype and layout: each value first rounded to `first`
// (the dtype of the input it came from; f32: as is), then stored in t (rounded again when t is
// narrower), with the bit rules written out here rather than convert.h's store.
Tensor stored(const ActDims& d, DType t, Layout l, DType first) {
  const Shape shape{d.N, d.C, d.H, d.W};
  Tensor out = Tensor::empty(shape, Device::cpu, "test", t);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < d.H * d.W; ++hw) {
        float v = value_at(d, n, c, hw);
        if (first == DType::bf16) v = round_to_bf16(v);
        if (first == DType::f16) v = round_to_f16(v);
        const int64_t i = layout_index(l, d, n, c, hw);
        if (t == DType::bf16) static_cast<bf16*>(out.raw())[i] = to_bf16(v);
        else if (t == DType::f16) static_cast<f16*>(out.raw())[i] = to_f16(v);
        else out.data()[i] = v;
      }
  return out;
}

void check_all_pairs(const ExecContext& ctx, Backend backend, const std::function<void()>& sync) {
  const ActDims dims[] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 8, 4, 4}, {5, 17, 1, 1}, {2, 1, 48, 48}, {1, 64, 3, 2}};
  for (const ActDims& d : dims)
    for (DType xt : {DType::f32, DType::bf16, DType::f16})
      for (DType yt : {DType::f32, DType::bf16, DType::f16})
        for (Layout xl : {Layout::nchw, Layout::nhwc})
          for (Layout yl : {Layout::nchw, Layout::nhwc}) {
            INFO(to_string(backend) << " " << d.N << "x" << d.C << "x" << d.H << "x" << d.W << " " << to_string(xt)
                                    << " " << to_string(xl) << " -> " << to_string(yt) << " " << to_string(yl));
            // A 16-bit input holds rounded values; an f32 input the raw ones (so f32 -> bf16 rounds).
            const Tensor x = stored(d, xt, xl, xt).to(ctx.device);
            const Tensor want = stored(d, yt, yl, xt);
            Tensor y = Tensor::empty(x.shape(), ctx.device, "y", yt);
            run_op(backend, ConvertForward{&ctx, d, x.view(), xl, y.view(), yl});
            sync();
            CHECK(y.to(Device::cpu).to_vector() == want.to_vector());
          }
}

}  // namespace

TEST_CASE("convert: every dtype and layout pair on the cpu row", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(2);
  check_all_pairs(ctx, Backend::cpu, [] {});
}

TEST_CASE("convert: every dtype and layout pair on the cuda row", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  check_all_pairs(cuda.ctx(), Backend::cuda, [&] { cuda.synchronize(); });
}

TEST_CASE("convert: the emulation helpers widen and narrow through channels-last", "[cpu]") {
  const ActDims d{2, 3, 2, 5};
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(to_string(t));
    const Tensor nhwc = stored(d, t, Layout::nhwc, t);
    const std::vector<float> wide = widen(ConstView(nhwc.raw(), t), d);
    const Tensor nchw = stored(d, DType::f32, Layout::nchw, t);
    CHECK(wide == nchw.to_vector());
    // Narrowing raw values rounds each once into channels-last order.
    const Tensor raw = stored(d, DType::f32, Layout::nchw, DType::f32);
    std::vector<uint16_t> back(size_t(d.numel()));
    narrow(raw.data(), d, View(back.data(), t));
    for (size_t i = 0; i < back.size(); ++i) CHECK(back[i] == static_cast<const uint16_t*>(nhwc.raw())[i]);
  }
  std::vector<float> f32(size_t(d.numel()));
  CHECK_THROWS_AS(widen(f32.data(), d), Error);  // an f32 operand is not widened
}

TEST_CASE("convert: a permute in place is refused, bf16 tensors refuse f32 access", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  const ActDims d{1, 2, 2, 2};
  Tensor t = Tensor::zeros(Shape{1, 2, 2, 2}, Device::cpu, "t", DType::bf16);
  CHECK_THROWS_AS(run_op(Backend::cpu, ConvertForward{&ctx, d, t.view(), Layout::nchw, t.view(), Layout::nhwc}), Error);
  CHECK_THROWS_AS(t.data(), Error);
  CHECK(t.bytes() == 16);
  CHECK(t.to_vector() == std::vector<float>(8, 0.0f));
}
