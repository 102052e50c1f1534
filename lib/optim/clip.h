// Gradient norm, clipping (torch.nn.utils.clip_grad_norm_ semantics) and a finiteness check over
// the flat gradient buffer. Trap: the norm is summed in fixed chunks reduced in order, so it is
// bitwise the same for any thread count; never replace it with an OpenMP reduction clause.
#pragma once

#include <cstdint>

#include "core/exec_context.h"

namespace cnn {

// Elements per partial sum of global_grad_norm (part of its result's definition: changing it
// changes the last bits of the norm).
inline constexpr int64_t kGradNormChunk = 4096;

// sqrt(sum g_i^2), squares accumulated in double.
double global_grad_norm(const ExecContext& ctx,
                        const float* grads,  // (n)
                        int64_t n);

// When the norm exceeds max_norm (> 0), scales every gradient by max_norm / (norm + 1e-6).
// Returns the norm before clipping. A NaN or infinite norm leaves the gradients unchanged and
// is returned as is: the caller decides whether to skip the step.
double clip_grad_norm(const ExecContext& ctx,
                      float* grads,  // (n)
                      int64_t n, double max_norm);

// True when no element is NaN or infinite.
bool all_finite(const ExecContext& ctx,
                const float* x,  // (n)
                int64_t n);

}  // namespace cnn
