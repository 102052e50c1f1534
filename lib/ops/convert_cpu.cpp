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

Layout activation_layout(DType t) { return t == DType::bf16 || t == DType::f16 ? Layout::nhwc : Layout::nchw; }

namespace {

float load(const void* p, DType t, int64_t i) {
  return t == DType::bf16 ? to_float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::bf16) static_cast<bf16*>(p)[i] = to_bf16(v);
  else static_cast<float*>(p)[i] = v;
}

void check_convert(const ConvertForward& a) {
  for (DType t : {a.x.dtype(), a.y.dtype()})
    CNN_CHECK(t == DType::f32 || t == DType::bf16, "convert: dtype {} is neither f32 nor bf16", to_string(t));
  CNN_CHECK(a.d.N >= 0 && a.d.C >= 0 && a.d.H >= 0 && a.d.W >= 0, "convert: negative dims");
  CNN_CHECK(a.x_layout == a.y_layout || a.x.data() != a.y.data() || a.d.numel() == 0,
            "convert: a permute ({} -> {}) cannot run in place", to_string(a.x_layout), to_string(a.y_layout));
}

}  // namespace

void convert_forward_cpu(const ConvertForward& a) {
  check_convert(a);
  const ActDims d = a.d;
  const int64_t HW = d.H * d.W;
  const int threads = a.ctx->threads();
  const void* x = a.x.data();
  void* y = a.y.data();
  const DType xt = a.x.dtype(), yt = a.y.dtype();
#pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < HW; ++hw)
        store(y, yt, layout_index(a.y_layout, d, n, c, hw), load(x, xt, layout_index(a.x_layout, d, n, c, hw)));
}

std::vector<float> widen_bf16(const bf16* x, const ActDims& d, Layout from) {
  std::vector<float> out(size_t(d.numel()));
  const int64_t HW = d.H * d.W;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < HW; ++hw)
        out[size_t(layout_index(Layout::nchw, d, n, c, hw))] = to_float(x[layout_index(from, d, n, c, hw)]);
  return out;
}

void narrow_to_bf16(const float* x, const ActDims& d, bf16* y, Layout to) {
  const int64_t HW = d.H * d.W;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t hw = 0; hw < HW; ++hw)
        y[layout_index(to, d, n, c, hw)] = to_bf16(x[layout_index(Layout::nchw, d, n, c, hw)]);
}

}  // namespace cnn
