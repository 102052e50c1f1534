// Dtype and layout conversion of activations: f32 NCHW <-> bf16 channels-last at the edges of the
// mixed-precision part of a graph (the cast layers the graph plans, graph/precision.h), and the
// bf16 permutes of flatten (channels-last -> NCHW order, so a dense layer's weights mean the same
// in every precision). One entry point, ConvertForward: read x in its dtype and layout, write y in
// its dtype and layout; float -> bf16 rounds to nearest even (core/bf16.h), bf16 -> float is exact.
// Also the host helpers the CPU bf16 rows of every op use to emulate the GPU's storage: widen a bf16
// activation into f32 NCHW, and narrow (round once) f32 NCHW back into bf16 channels-last.
// Trap: y must not alias x when the layouts differ (a permute is not in place).
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/exec_context.h"
#include "core/host_device.h"
#include "core/shape.h"
#include "ops/dispatch.h"

namespace cnn {

enum class Layout { nchw, nhwc };
const char* to_string(Layout l);  // "nchw" | "nhwc"

// The storage layout of an activation of dtype t (core/tensor.h): f32 NCHW, bf16 and f16 channels-last.
Layout activation_layout(DType t);

// Logical dims of an activation; (N, F) tensors are (N, F, 1, 1).
struct ActDims {
  int64_t N = 0, C = 0, H = 1, W = 1;
  CNN_HD int64_t numel() const { return N * C * H * W; }
};

// A batched activation shape as dims: (N, C, H, W), (N, F) as (N, F, 1, 1); dims past the fourth
// fold into W.
ActDims act_dims(const Shape& batched);

// Index of logical element (n, c, hw) in a layout.
CNN_HD int64_t layout_index(Layout l, const ActDims& d, int64_t n, int64_t c, int64_t hw) {
  const int64_t HW = d.H * d.W;
  return l == Layout::nchw ? (n * d.C + c) * HW + hw : (n * HW + hw) * d.C + c;
}

struct ConvertForward {
  const ExecContext* ctx = nullptr;
  ActDims d;
  ConstView x = nullptr;  // d, in x_layout and x's dtype (f32 or bf16)
  Layout x_layout = Layout::nchw;
  View y = nullptr;       // d, in y_layout and y's dtype (f32 or bf16)
  Layout y_layout = Layout::nchw;
  DType dtype() const { return x.dtype(); }
  static const OpTable<ConvertForward>& table();
};
// Rows (registry.cpp): cpu and cuda, for x f32 and x bf16 (y either).

// Host emulation helpers (the CPU bf16 rows): x (d, `from` layout) bf16 -> f32 NCHW, and
// f32 NCHW -> y (d, `to` layout) bf16, each element rounded once.
std::vector<float> widen_bf16(const bf16* x, const ActDims& d, Layout from = Layout::nhwc);
void narrow_to_bf16(const float* x, const ActDims& d, bf16* y, Layout to = Layout::nhwc);

}  // namespace cnn
