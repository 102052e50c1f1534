// Our CUDA convolution rows of dtypes bf16 and f16 (conv2d_algo.h): "cuda:igemm_nhwc" (the tensor-core
// implicit GEMM, conv2d_igemm_nhwc_bf16.h, groups 1), "cuda:direct_nhwc" (conv2d_direct_nhwc_bf16.h,
// C/groups == 1) and the "cuda" default (direct_nhwc wherever it can implement the shape, igemm_nhwc
// elsewhere). Each forward and backward-data call reads a bf16 (f16) copy of the FP32 master weights
// (krsc / crsk for the GEMM, rsk for the direct kernels: the rows' packed_layout): the prepacked one
// the call gives (ConvOperands::w16, packed once a training step for every layer), else one it packs
// into ctx.workspace itself; then runs the kernel. The f16 rows are the bf16 rows' code with T = f16 (same kernels, plans and workspace).
// Trap: the kernels take their own scratch from the start of ctx.workspace (cuda::workspace_bytes),
// so the packed copy lies after it: workspace = [kernel scratch, 256-aligned][packed weights], and
// the whole of it is taken (Workspace::get) before packing, so the kernel's smaller request cannot
// grow (reallocate) the buffer under the copy. The GEMM's plan is computed here and handed to the
// kernel, so workspace_bytes and the call agree on its scratch. CUDA builds only (conv2d_algo_cuda.cpp).
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_weights_bf16.h"

namespace cnn {
namespace {

enum class Kernel { igemm, direct };

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The default row's choice: the direct kernels for filters that read one input channel.
Kernel default_kernel(const Conv2dShape& sh) {
  return conv2d_direct_nhwc_bf16_can_implement(sh) ? Kernel::direct : Kernel::igemm;
}

// The packed copy a direction reads: none for the filter gradient (it reads x and dy only).
bool packs(ConvDir dir) { return dir != ConvDir::backward_filter; }
Bf16WeightLayout packed_layout(Kernel k, ConvDir dir) {
  if (k == Kernel::direct) return Bf16WeightLayout::rsk;
  return dir == ConvDir::forward ? Bf16WeightLayout::krsc : Bf16WeightLayout::crsk;
}
size_t packed_bytes(const Conv2dShape& sh, ConvDir dir) {
  static_assert(sizeof(bf16) == sizeof(f16), "one packed size for both 16-bit types");
  return packs(dir) ? align256(size_t(sh.weight_numel()) * sizeof(bf16)) : 0;
}

bool can_implement(Kernel k, const Conv2dShape& sh, ConvDir dir) {
  const bool kernel = k == Kernel::direct ? conv2d_direct_nhwc_bf16_can_implement(sh)
                                          : conv2d_igemm_nhwc_bf16_can_implement(sh);
  return kernel && (!packs(dir) || conv2d_weights_bf16_supports(sh, packed_layout(k, dir)));
}

// The GEMM's plan within what the workspace limit leaves beside the packed weights.
IgemmNhwcBf16Plan igemm_plan(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  const size_t packed = packed_bytes(sh, dir);
  const size_t limit = ctx.workspace_limit_bytes > packed ? ctx.workspace_limit_bytes - packed : 0;
  return conv2d_igemm_nhwc_bf16_device_plan(sh, dir, limit);
}

// The kernel's own scratch, 256-aligned: the offset of the packed weights. The filter gradient's
// counts db's partials whether or not the call wants db (a caller may pass db without a bias).
size_t kernel_bytes(Kernel k, const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan& plan) {
  const bool filter = dir == ConvDir::backward_filter;
  if (k == Kernel::direct) return filter ? align256(conv2d_direct_nhwc_bf16_workspace_bytes(sh)) : 0;
  return align256(conv2d_igemm_nhwc_bf16_workspace_bytes(sh, dir, plan, filter));
}

size_t workspace_bytes(Kernel k, const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  const IgemmNhwcBf16Plan plan = k == Kernel::igemm ? igemm_plan(ctx, sh, dir) : IgemmNhwcBf16Plan{};
  return kernel_bytes(k, sh, dir, plan) + packed_bytes(sh, dir);
}

// The T (bf16 or f16) copy of the weights in `layout`, packed on ctx's stream at `offset` bytes into
// a workspace of `total` bytes (taken whole here: see the trap above).
template <class T>
const T* pack_weights(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                      size_t offset, size_t total, const char* what) {
  CNN_CHECK(w, "{}: the weights are null", what);
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "{}: the context has no device workspace", what);
  auto* base = reinterpret_cast<unsigned char*>(ctx.workspace->get((total + sizeof(float) - 1) / sizeof(float)));
  T* packed = reinterpret_cast<T*>(base + offset);
  conv2d_pack_weights_cuda(ctx, sh, layout, w, packed);
  return packed;
}

// The layout the row of kernel k reads in direction dir, none for the filter gradient.
std::optional<Bf16WeightLayout> reads_layout(Kernel k, ConvDir dir) {
  if (!packs(dir)) return std::nullopt;
  return packed_layout(k, dir);
}

template <class T>
void run_row(Kernel k, ConvDir dir, const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands16<T>& op,
             const PackedWeights16& given, const char* what) {
  CNN_CHECK(can_implement(k, sh, dir), "{}: cannot implement {} of {}", what, to_string(dir), sh.to_string());
  const IgemmNhwcBf16Plan plan = k == Kernel::igemm ? igemm_plan(ctx, sh, dir) : IgemmNhwcBf16Plan{};
  if (dir == ConvDir::backward_filter) {
    CNN_CHECK(op.dw, "{} backward_filter: dw is null", what);
    if (k == Kernel::direct) return conv2d_backward_filter_direct_nhwc_cuda(ctx, sh, op.x, op.dy, op.dw, op.db);
    return conv2d_backward_filter_igemm_nhwc_cuda(ctx, sh, op.x, op.dy, op.dw, op.db, &plan);
  }
  const size_t offset = kernel_bytes(k, sh, dir, plan);
  const Bf16WeightLayout layout = packed_layout(k, dir);
  const T* w = static_cast<const T*>(packed_weights_for(given, DTypeOf<T>::value, layout, what));
  if (!w) w = pack_weights<T>(ctx, sh, layout, op.w, offset, offset + packed_bytes(sh, dir), what);
  if (dir == ConvDir::forward) {
    if (k == Kernel::direct) return conv2d_forward_direct_nhwc_cuda(ctx, sh, op.x, w, op.b, op.y);
    return conv2d_forward_igemm_nhwc_cuda(ctx, sh, op.x, w, op.b, op.y, false, &plan);
  }
  CNN_CHECK(op.dx, "{} backward_data: dx is null", what);
  if (k == Kernel::direct) return conv2d_backward_data_direct_nhwc_cuda(ctx, sh, w, op.dy, op.dx);
  conv2d_backward_data_igemm_nhwc_cuda(ctx, sh, w, op.dy, op.dx, &plan);
}

// `fixed`: the row's one kernel; none: the default's choice per shape. T: bf16 or f16 (the row's dtype).
template <class T>
void add_rows(std::vector<ConvAlgo>& out, const std::string& name, std::optional<Kernel> fixed) {
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    auto pick = [fixed](const Conv2dShape& sh) { return fixed ? *fixed : default_kernel(sh); };
    ConvAlgo a;
    a.name = name;
    a.backend = Backend::cuda;
    a.dtype = DTypeOf<T>::value;
    a.dir = dir;
    a.deterministic = true;  // split sums and slices are added in a fixed order, no atomics
    a.can_implement_fn = [pick, dir](const ExecContext&, const Conv2dShape& sh, MathMode) {
      return can_implement(pick(sh), sh, dir);
    };
    a.workspace_fn = [pick, dir](const ExecContext& ctx, const Conv2dShape& sh, MathMode) {
      return workspace_bytes(pick(sh), ctx, sh, dir);
    };
    a.run = [pick, dir, name](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
      run_row<T>(pick(sh), dir, ctx, sh, operands16<T>(op), op.w16, name.c_str());
    };
    a.packed_layout_fn = [pick, dir](const Conv2dShape& sh) { return reads_layout(pick(sh), dir); };
    out.push_back(std::move(a));
  }
}

}  // namespace

std::vector<ConvAlgo> conv2d_cuda_bf16_algos() {
  std::vector<ConvAlgo> algos;
  add_rows<bf16>(algos, "cuda:igemm_nhwc", Kernel::igemm);
  add_rows<bf16>(algos, "cuda:direct_nhwc", Kernel::direct);
  add_rows<bf16>(algos, "cuda", std::nullopt);
  add_rows<f16>(algos, "cuda:igemm_nhwc", Kernel::igemm);
  add_rows<f16>(algos, "cuda:direct_nhwc", Kernel::direct);
  add_rows<f16>(algos, "cuda", std::nullopt);
  return algos;
}

}  // namespace cnn
