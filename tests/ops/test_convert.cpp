// The convert op (ops/convert.h) on every row, CPU and GPU: every pair of dtypes (f32, bf16) and
// layouts (NCHW, channels-last) over odd and flat dims, against values computed here element by
// element; the bf16 emulation helpers (widen_bf16, narrow_to_bf16); and the in-place permute refused.
// Exact: a conversion rounds at most once, to nearest even, with core/bf16.h's rule on every row.
#include <vector>

#include "core/bf16.h"
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

// Host storage of the logical values in a dtype and layout (bf16 inputs exact by construction).
Tensor stored(const ActDims& d, DType t, Layout l, bool round_inputs) {
  const Shape shape{d.N, d.C, d.H, d.W};
  Tensor out = Tensor::empty(shape, Device::cpu, "test", t);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < d.H * d.W; ++hw) {
        float v = value_at(d, n, c, hw);
        if (round_inputs) v = round_to_bf16(v);
        const int64_t i = layout_index(l, d, n, c, hw);
        if (t == DType::bf16) static_cast<bf16*>(out.raw())[i] = to_bf16(v);
        else out.data()[i] = v;
      }
  return out;
}

void check_all_pairs(const ExecContext& ctx, Backend backend, const std::function<void()>& sync) {
  const ActDims dims[] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 8, 4, 4}, {5, 17, 1, 1}, {2, 1, 48, 48}, {1, 64, 3, 2}};
  for (const ActDims& d : dims)
    for (DType xt : {DType::f32, DType::bf16})
      for (DType yt : {DType::f32, DType::bf16})
        for (Layout xl : {Layout::nchw, Layout::nhwc})
          for (Layout yl : {Layout::nchw, Layout::nhwc}) {
            INFO(to_string(backend) << " " << d.N << "x" << d.C << "x" << d.H << "x" << d.W << " " << to_string(xt)
                                    << " " << to_string(xl) << " -> " << to_string(yt) << " " << to_string(yl));
            // A bf16 input holds rounded values; an f32 input the raw ones (so f32 -> bf16 rounds).
            const Tensor x = stored(d, xt, xl, xt == DType::bf16).to(ctx.device);
            const Tensor want = stored(d, yt, yl, xt == DType::bf16);
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
  const Tensor nhwc = stored(d, DType::bf16, Layout::nhwc, true);
  const std::vector<float> wide = widen_bf16(static_cast<const bf16*>(nhwc.raw()), d);
  const Tensor nchw = stored(d, DType::f32, Layout::nchw, true);
  CHECK(wide == nchw.to_vector());
  // Narrowing raw values rounds each once into channels-last order.
  const Tensor raw = stored(d, DType::f32, Layout::nchw, false);
  std::vector<bf16> back(size_t(d.numel()));
  narrow_to_bf16(raw.data(), d, back.data());
  for (size_t i = 0; i < back.size(); ++i) CHECK(back[i].bits == static_cast<const bf16*>(nhwc.raw())[i].bits);
}

TEST_CASE("convert: a permute in place is refused; bf16 tensors refuse f32 access", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  const ActDims d{1, 2, 2, 2};
  Tensor t = Tensor::zeros(Shape{1, 2, 2, 2}, Device::cpu, "t", DType::bf16);
  CHECK_THROWS_AS(run_op(Backend::cpu, ConvertForward{&ctx, d, t.view(), Layout::nchw, t.view(), Layout::nhwc}), Error);
  CHECK_THROWS_AS(t.data(), Error);
  CHECK(t.bytes() == 16);
  CHECK(t.to_vector() == std::vector<float>(8, 0.0f));
}
