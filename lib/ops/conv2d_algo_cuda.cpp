// Our CUDA convolution rows (conv2d_algo.h): implicit_gemm and direct from conv2d_cuda.cu,
// winograd, im2col_gemm and fft from conv2d_strategies.h, and the "cuda" default rows (direct where
// conv2d_cuda_direct_is_default, implicit GEMM elsewhere), then the bf16 rows of
// conv2d_algo_bf16_cuda.cpp. CUDA builds only (registry.cpp).
// Trap: conv2d_backward_cuda_<s> computes whichever of dx, dw, db is non-null, so one backward
// function serves two directions (add_conv_rows passes null dw/db for backward_data).
#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_strategies.h"

namespace cnn {
namespace {

using CanFn = bool (*)(const Conv2dShape&);
using BytesFn = size_t (*)(const Conv2dShape&, bool dw, bool db);
using ForwardBytesFn = size_t (*)(const Conv2dShape&);

// A strategy of conv2d_cuda.cu; fwd_bytes null: its forward takes no workspace. Split reductions
// are summed in a fixed order, without atomics, so every row is deterministic.
void add_gemm_family(std::vector<ConvAlgo>& out, const std::string& name, CanFn can, BytesFn bytes,
                     ForwardBytesFn fwd_bytes, ConvForwardF32 fwd, ConvBackwardF32 bwd) {
  add_conv_rows(
      out, name, Backend::cuda, true, [can](const ExecContext&, const Conv2dShape& sh) { return can(sh); },
      [bytes, fwd_bytes](const ExecContext&, const Conv2dShape& sh, ConvDir dir) {
        if (dir == ConvDir::forward) return fwd_bytes ? fwd_bytes(sh) : size_t(0);
        return dir == ConvDir::backward_filter ? bytes(sh, true, sh.has_bias) : size_t(0);
      },
      fwd, bwd);
}

using StrategyCan = bool (*)(const Conv2dShape&, ConvDir);
using StrategyBytes = size_t (*)(const Conv2dShape&, ConvDir);
using StrategyRun = void (*)(const ExecContext&, const Conv2dShape&, ConvDir, const ConvOperandsF32&);

void add_strategy(std::vector<ConvAlgo>& out, const std::string& name, StrategyCan can, StrategyBytes bytes,
                  StrategyRun run) {
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    ConvAlgo a;
    a.name = name;
    a.backend = Backend::cuda;
    a.dir = dir;
    a.deterministic = true;  // assumed: conv2d_strategies.h states no scheduling-dependent sums
    a.can_implement_fn = [can, dir](const ExecContext&, const Conv2dShape& sh, MathMode) { return can(sh, dir); };
    a.workspace_fn = [bytes, dir](const ExecContext&, const Conv2dShape& sh, MathMode) { return bytes(sh, dir); };
    a.run = [run, dir](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
      run(ctx, sh, dir, f32_operands(op));
    };
    out.push_back(std::move(a));
  }
}

// The default's choice per shape, and what that choice can implement and takes.
bool default_can(const Conv2dShape& sh) {
  return conv2d_cuda_direct_is_default(sh) || conv2d_cuda_implicit_gemm_can_implement(sh);
}
size_t default_bytes(const Conv2dShape& sh, bool dw, bool db) {
  return conv2d_cuda_direct_is_default(sh) ? conv2d_cuda_direct_workspace_bytes(sh, dw, db)
                                           : conv2d_cuda_implicit_gemm_workspace_bytes(sh, dw, db);
}
size_t default_forward_bytes(const Conv2dShape& sh) {
  return conv2d_cuda_direct_is_default(sh) ? 0 : conv2d_cuda_implicit_gemm_forward_workspace_bytes(sh);
}

}  // namespace

std::vector<ConvAlgo> conv2d_cuda_algos() {
  std::vector<ConvAlgo> algos;
  add_gemm_family(algos, "cuda:implicit_gemm", conv2d_cuda_implicit_gemm_can_implement,
                  conv2d_cuda_implicit_gemm_workspace_bytes, conv2d_cuda_implicit_gemm_forward_workspace_bytes,
                  conv2d_forward_cuda_implicit_gemm, conv2d_backward_cuda_implicit_gemm);
  add_gemm_family(algos, "cuda:direct", conv2d_cuda_direct_can_implement, conv2d_cuda_direct_workspace_bytes, nullptr,
                  conv2d_forward_cuda_direct, conv2d_backward_cuda_direct);
  add_strategy(algos, "cuda:winograd", conv2d_cuda_winograd_can_implement, conv2d_cuda_winograd_workspace_bytes,
               conv2d_cuda_winograd_run);
  add_strategy(algos, "cuda:im2col_gemm", conv2d_cuda_im2col_gemm_can_implement,
               conv2d_cuda_im2col_gemm_workspace_bytes, conv2d_cuda_im2col_gemm_run);
  add_strategy(algos, "cuda:fft", conv2d_cuda_fft_can_implement, conv2d_cuda_fft_workspace_bytes, conv2d_cuda_fft_run);
  add_gemm_family(algos, "cuda", default_can, default_bytes, default_forward_bytes, conv2d_forward_cuda,
                  conv2d_backward_cuda);
  for (ConvAlgo& a : conv2d_cuda_bf16_algos()) algos.push_back(std::move(a));
  return algos;
}

}  // namespace cnn
