// Our CUDA convolution strategies as registry entries (conv2d_algo.h): implicit_gemm and direct
// from conv2d_cuda.cu, winograd, im2col_gemm and fft from conv2d_strategies.h.
// Trap: conv2d_backward_cuda_<s> computes whichever of dx, dw, db is non-null, so one backward
// function serves two directions; backward_data must pass null dw/db or it would also write them.
#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_strategies.h"

namespace cnn {

using ForwardFn = void (*)(const ExecContext&, const Conv2dShape&, const float*, const float*, const float*, float*);
using BackwardFn = void (*)(const ExecContext&, const Conv2dShape&, const float*, const float*, const float*, float*,
                            float*, float*);
using CanFn = bool (*)(const Conv2dShape&);
using BytesFn = size_t (*)(const Conv2dShape&, bool dw, bool db);

using ForwardBytesFn = size_t (*)(const Conv2dShape&);

// The three directions of a strategy of conv2d_cuda.cu; fwd_bytes null: its forward takes none.
static void add_gemm_family(std::vector<ConvAlgo>& out, const std::string& name, CanFn can, BytesFn bytes,
                            ForwardBytesFn fwd_bytes, ForwardFn fwd, BackwardFn bwd) {
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    ConvAlgo a;
    a.name = name;
    a.backend = Backend::cuda;
    a.dir = dir;
    a.deterministic = true;  // split reductions are summed in a fixed order, no atomics
    a.can_implement = [can](const ExecContext&, const Conv2dShape& sh) { return can(sh); };
    a.workspace_bytes = [bytes, fwd_bytes, dir](const ExecContext&, const Conv2dShape& sh) {
      if (dir == ConvDir::forward) return fwd_bytes ? fwd_bytes(sh) : size_t(0);
      return dir == ConvDir::backward_filter ? bytes(sh, true, sh.has_bias) : size_t(0);
    };
    switch (dir) {
      case ConvDir::forward:
        a.run = [fwd](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          fwd(ctx, sh, op.x, op.w, op.b, op.y);
        };
        break;
      case ConvDir::backward_data:
        a.run = [bwd, name](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          CNN_CHECK(op.dx, "{} backward_data: dx is null", name);
          bwd(ctx, sh, nullptr, op.w, op.dy, op.dx, nullptr, nullptr);
        };
        break;
      case ConvDir::backward_filter:
        a.run = [bwd, name](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          CNN_CHECK(op.dw, "{} backward_filter: dw is null", name);
          bwd(ctx, sh, op.x, nullptr, op.dy, nullptr, op.dw, op.db);
        };
        break;
    }
    out.push_back(std::move(a));
  }
}

using StrategyCan = bool (*)(const Conv2dShape&, ConvDir);
using StrategyBytes = size_t (*)(const Conv2dShape&, ConvDir);
using StrategyRun = void (*)(const ExecContext&, const Conv2dShape&, ConvDir, const ConvOperands&);

static void add_strategy(std::vector<ConvAlgo>& out, const std::string& name, StrategyCan can, StrategyBytes bytes,
                         StrategyRun run) {
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    ConvAlgo a;
    a.name = name;
    a.backend = Backend::cuda;
    a.dir = dir;
    a.deterministic = true;  // assumed: conv2d_strategies.h states no scheduling-dependent sums
    a.can_implement = [can, dir](const ExecContext&, const Conv2dShape& sh) { return can(sh, dir); };
    a.workspace_bytes = [bytes, dir](const ExecContext&, const Conv2dShape& sh) { return bytes(sh, dir); };
    a.run = [run, dir](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) { run(ctx, sh, dir, op); };
    out.push_back(std::move(a));
  }
}

std::vector<ConvAlgo> conv2d_cuda_algos() {
  std::vector<ConvAlgo> algos;
  add_gemm_family(algos, "cuda:implicit_gemm", conv2d_cuda_implicit_gemm_can_implement,
                  conv2d_cuda_implicit_gemm_workspace_bytes, conv2d_cuda_implicit_gemm_forward_workspace_bytes,
                  conv2d_forward_cuda_implicit_gemm,
                  conv2d_backward_cuda_implicit_gemm);
  add_gemm_family(algos, "cuda:direct", conv2d_cuda_direct_can_implement, conv2d_cuda_direct_workspace_bytes, nullptr,
                  conv2d_forward_cuda_direct, conv2d_backward_cuda_direct);
  add_strategy(algos, "cuda:winograd", conv2d_cuda_winograd_can_implement, conv2d_cuda_winograd_workspace_bytes,
               conv2d_cuda_winograd_run);
  add_strategy(algos, "cuda:im2col_gemm", conv2d_cuda_im2col_gemm_can_implement,
               conv2d_cuda_im2col_gemm_workspace_bytes, conv2d_cuda_im2col_gemm_run);
  add_strategy(algos, "cuda:fft", conv2d_cuda_fft_can_implement, conv2d_cuda_fft_workspace_bytes, conv2d_cuda_fft_run);
  return algos;
}

}  // namespace cnn
