// Gradient norm, clipping (torch.nn.utils.clip_grad_norm_ semantics) and a finiteness check over
// the flat gradient buffer. Trap: the norm is summed in fixed chunks reduced in order, so it is
// bitwise the same for any thread count; never replace it with an OpenMP reduction clause.
// A CUDA context runs the same contracts on the GPU (clip_cuda.cu): fixed per-chunk partials
// reduced in a fixed order, so the norm repeats bit for bit (it may differ from the CPU's in the
// last bits); each of these functions then synchronises the stream to return its host value.
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

// --- CUDA (clip_cuda.cu; clip_nocuda.cpp throws without CUDA). The functions above call the
// synchronous ones for a CUDA context. ---
double global_grad_norm_cuda(const ExecContext& ctx, const float* grads, int64_t n);
double clip_grad_norm_cuda(const ExecContext& ctx, float* grads, int64_t n, double max_norm);
bool all_finite_cuda(const ExecContext& ctx, const float* x, int64_t n);
// Capturable clipping (CUDA graphs): never synchronises. The norm before clipping goes to the
// device scalar `norm`, and the kernel that scales reads it there, so the decision to clip
// (norm > max_norm and finite) is taken on the GPU. Same gradients as clip_grad_norm.
void clip_grad_norm_cuda_async(const ExecContext& ctx,
                               float* grads,  // (n)
                               int64_t n, double max_norm,
                               double* norm);  // device scalar

}  // namespace cnn
