// Dtype and layout conversion on the CPU (convert.h), and the emulation helpers.
#include <omp.h>

#include "core/error.h"
#include "ops/convert.h"

namespace cnn {

const char* to_string(Layout l) { return l == Layout::nchw ? "nchw" : "nhwc"; }

ActDims act_dims(const Shape& batched) {
  ActDims d;
  d.N = batched[0];
  d.C = batched.rank() > 1 ? batched[1] : 1;
  d.H = batched.rank() > 2 ? batched[2] : 1;
  d.W = batched.rank() > 3 ? batched[3] : 1;
  for (int k = 4; k < batched.rank(); ++k) d.W *= batched[k];
  return d;
}

Layout activation_layout(DType t) {
  return t == DType::bf16 || t == DType::f16 || t == DType::f32cl ? Layout::nhwc : Layout::nchw;
}

void check_convert(const ConvertForward& a) {
  for (DType t : {a.x.dtype(), a.y.dtype()})
    CNN_CHECK(convertible(t), "convert: dtype {} is none of f32, f32cl, bf16, f16", to_string(t));
  CNN_CHECK(a.d.N >= 0 && a.d.C >= 0 && a.d.H >= 0 && a.d.W >= 0, "convert: negative dims");
  CNN_CHECK(a.x_layout == a.y_layout || a.x.data() != a.y.data() || a.d.numel() == 0,
            "convert: a permute ({} -> {}) cannot run in place", to_string(a.x_layout), to_string(a.y_layout));
}

// Every element of x (d, xl, xt) into y (d, yl, yt).
static void convert_elements(const ActDims& d, const void* x, DType xt, Layout xl, void* y, DType yt, Layout yl,
                             int threads) {
  const int64_t HW = d.H * d.W;
#pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < HW; ++hw)
        store_from_float(y, yt, layout_index(yl, d, n, c, hw), load_as_float(x, xt, layout_index(xl, d, n, c, hw)));
}

void convert_forward_cpu(const ConvertForward& a) {
  check_convert(a);
  convert_elements(a.d, a.x.data(), a.x.dtype(), a.x_layout, a.y.data(), a.y.dtype(), a.y_layout, a.ctx->threads());
}

// Single-threaded: the emulation rows may call them from their own parallel regions.
std::vector<float> widen(ConstView x, const ActDims& d, Layout from) {
  if (x.null()) return {};
  CNN_CHECK(x.dtype() == DType::bf16 || x.dtype() == DType::f16 || x.dtype() == DType::f32cl, "widen: a {} operand",
            to_string(x.dtype()));
  std::vector<float> out(size_t(d.numel()));
  convert_elements(d, x.data(), x.dtype(), from, out.data(), DType::f32, Layout::nchw, 1);
  return out;
}

void narrow(const float* x, const ActDims& d, View y, Layout to) {
  CNN_CHECK(y.dtype() == DType::bf16 || y.dtype() == DType::f16 || y.dtype() == DType::f32cl,
            "narrow: into a {} operand", to_string(y.dtype()));
  convert_elements(d, x, DType::f32, Layout::nchw, y.data(), y.dtype(), to, 1);
}

}  // namespace cnn
