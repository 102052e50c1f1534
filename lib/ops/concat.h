// Concatenation along channels of NCHW tensors with equal N, H, W (inception blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "core/exec_context.h"
#include "ops/dispatch.h"

namespace cnn {

struct ConcatShape {
  int64_t N = 0;
  int64_t HW = 1;                   // H * W, shared by all inputs
  std::vector<int64_t> channels;    // C of each input; the output has their sum
  int64_t total_channels() const;
};

// xs[i] (N, channels[i], HW) -> y (N, sum channels, HW)
template <typename T>
void concat_forward_reference(const ExecContext& ctx, const ConcatShape& sh, const T* const* xs, T* y);
// dy (N, sum channels, HW) -> each non-null dxs[i] (N, channels[i], HW)
template <typename T>
void concat_backward_reference(const ExecContext& ctx, const ConcatShape& sh, const T* dy, T* const* dxs);

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp).
struct ConcatForward {
  const ExecContext* ctx = nullptr;
  ConcatShape sh;
  const ConstView* xs = nullptr;  // channels.size() views of (N, channels[i], HW)
  View y = nullptr;               // (N, sum channels, HW)
  DType dtype() const { return y.dtype(); }
  static const OpTable<ConcatForward>& table();
};
struct ConcatBackward {
  const ExecContext* ctx = nullptr;
  ConcatShape sh;
  ConstView dy = nullptr;     // (N, sum channels, HW)
  const View* dxs = nullptr;  // channels.size() views of (N, channels[i], HW), each may be null
  DType dtype() const { return dy.dtype(); }
  static const OpTable<ConcatBackward>& table();
};

// Rows (registry.cpp): cpu (concat_cpu.cpp), cuda (concat_cuda.cu, device memory, ctx.cuda_stream).

}  // namespace cnn
