// Dtype and layout conversion of activations: f32 NCHW <-> bf16, f16 or f32cl (f32 values)
// channels-last at the edges of the mixed-precision part of a graph (the casts the graph plans,
// Graph::casts_input), and the channels-last permutes of flatten (-> NCHW order, so a dense layer's
// weights mean the same in every precision). One entry point, ConvertForward: read x in its dtype
// and layout, write y in its dtype and layout (any pair of f32, f32cl, bf16, f16); float -> bf16 or
// f16 rounds to nearest even (core/bf16.h, core/fp16.h), everything else is exact.
// Also the host helpers the CPU channels-last rows of every op (bf16, f16, f32cl) use to emulate
// the GPU's storage: widen an activation into f32 NCHW, and narrow (round once) f32 NCHW back into it.
// Trap: y must not alias x when the layouts differ (a permute is not in place).
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"
#include "core/host_device.h"
#include "core/shape.h"
#include "ops/dispatch.h"

namespace cnn {

enum class Layout { nchw, nhwc };
const char* to_string(Layout l);  // "nchw" | "nhwc"

// The storage layout of an activation of dtype t (core/tensor.h): f32 NCHW; bf16, f16 and f32cl
// channels-last.
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

// Whether t is a dtype convert reads and writes: f32, f32cl, bf16, f16.
CNN_HD bool convertible(DType t) {
  return t == DType::f32 || t == DType::f32cl || t == DType::bf16 || t == DType::f16;
}
// Element i of an array of dtype t (convertible) as a float (exact), and v stored into one
// (rounded to nearest even): the one load and store of the CPU and CUDA convert rows.
CNN_HD float load_as_float(const void* p, DType t, int64_t i) {
  if (t == DType::bf16) return float_from_bf16_bits(static_cast<const uint16_t*>(p)[i]);
  if (t == DType::f16) return float_from_f16_bits(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
CNN_HD void store_from_float(void* p, DType t, int64_t i, float v) {
  if (t == DType::bf16) static_cast<uint16_t*>(p)[i] = bf16_bits_from_float(v);
  else if (t == DType::f16) static_cast<uint16_t*>(p)[i] = f16_bits_from_float(v);
  else static_cast<float*>(p)[i] = v;
}
// v rounded to dtype t and back (f32, f32cl: v itself): the weights a bf16 or f16 conv2d or dense row
// multiplies after casting the FP32 master weights.
CNN_HD float round_to(DType t, float v) {
  return t == DType::bf16 ? round_to_bf16(v) : t == DType::f16 ? round_to_f16(v) : v;
}

struct ConvertForward {
  const ExecContext* ctx = nullptr;
  ActDims d;
  ConstView x = nullptr;  // d, in x_layout and x's dtype (f32, f32cl, bf16 or f16)
  Layout x_layout = Layout::nchw;
  View y = nullptr;       // d, in y_layout and y's dtype (f32, f32cl, bf16 or f16)
  Layout y_layout = Layout::nchw;
  DType dtype() const { return x.dtype(); }
  static const OpTable<ConvertForward>& table();
};
// Rows (registry.cpp): cpu and cuda, for x f32, f32cl, bf16 and f16 (y any of them).
// Throws unless both dtypes are convertible and a permute does not run in place.
void check_convert(const ConvertForward& a);

// Host emulation helpers (the CPU bf16, f16 and f32cl rows): x (d, `from` layout, bf16, f16 or
// f32cl) -> f32 NCHW, and f32 NCHW -> y (d, `to` layout, the same dtypes), each element rounded once. A null x
// widens to an empty vector (an operand the call leaves out).
std::vector<float> widen(ConstView x, const ActDims& d, Layout from = Layout::nhwc);
void narrow(const float* x, const ActDims& d, View y, Layout to = Layout::nhwc);

}  // namespace cnn
