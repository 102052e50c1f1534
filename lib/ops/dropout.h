// Inverted dropout: y = x * keep / (1 - p). The keep mask is a pure function of
// (seed, offset + i) through Philox (core/rng.h), so backward recomputes it instead of storing it,
// and CPU and CUDA drop the same elements. The caller advances `offset` every step.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/dispatch.h"

namespace cnn {

struct DropoutParams {
  float p = 0.5f;       // drop probability, in [0, 1)
  uint64_t seed = 0;    // run seed
  uint64_t offset = 0;  // first counter of this call (unique per step and layer)
  // CUDA only (captured graphs read per-step values from device memory): when set, the kernel
  // uses seed device_seed_step[0] ^ seed and first counter (device_seed_step[1] << 32) + offset.
  const uint64_t* device_seed_step = nullptr;  // (2): run seed, step; on the GPU
};

// Whether element i is kept (shared by all backends).
bool dropout_keep(const DropoutParams& prm, int64_t i);

template <typename T>
void dropout_forward_reference(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const T* x, T* y);
template <typename T>
void dropout_backward_reference(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const T* dy, T* dx);

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp). y may alias x, dx may alias dy.
struct DropoutForward {
  const ExecContext* ctx = nullptr;
  DropoutParams prm;
  int64_t n = 0;
  ConstView x = nullptr;  // (n)
  View y = nullptr;       // (n)
  DType dtype() const { return x.dtype(); }
  static const OpTable<DropoutForward>& table();
};
struct DropoutBackward {
  const ExecContext* ctx = nullptr;
  DropoutParams prm;
  int64_t n = 0;
  ConstView dy = nullptr;  // (n)
  View dx = nullptr;       // (n)
  DType dtype() const { return dy.dtype(); }
  static const OpTable<DropoutBackward>& table();
};

// Rows (registry.cpp): cpu (dropout_cpu.cpp), cuda (dropout_cuda.cu, device memory, ctx.cuda_stream).

}  // namespace cnn
