// Element-wise sum of several equally shaped tensors (residual connections).
// Backward: every input's gradient equals dy.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/dispatch.h"

namespace cnn {

// xs: count pointers to (n) -> y (n)
template <typename T>
void add_forward_reference(const ExecContext& ctx, int64_t n, int count, const T* const* xs, T* y);
// dy (n) -> each non-null dxs[i] (n)
template <typename T>
void add_backward_reference(const ExecContext& ctx, int64_t n, int count, const T* dy, T* const* dxs);

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp). y may alias any input; a
// gradient may alias dy.
struct AddForward {
  const ExecContext* ctx = nullptr;
  int64_t n = 0;
  int count = 0;
  const ConstView* xs = nullptr;  // count views of (n)
  View y = nullptr;               // (n)
  DType dtype() const { return y.dtype(); }
  static const OpTable<AddForward>& table();
};
struct AddBackward {
  const ExecContext* ctx = nullptr;
  int64_t n = 0;
  int count = 0;
  ConstView dy = nullptr;    // (n)
  const View* dxs = nullptr;  // count views of (n), each may be null
  DType dtype() const { return dy.dtype(); }
  static const OpTable<AddBackward>& table();
};

// Rows (registry.cpp): cpu (add_cpu.cpp), cuda (add_cuda.cu, at most 64 inputs, device memory).

}  // namespace cnn
