// Convolution rows (see conv2d_algo.h): the CPU provider, the row builder the providers share, the
// lookups of named algorithms, and how the dispatcher calls a row.
#include "ops/conv2d_algo.h"

#include <algorithm>
#include <climits>
#include <fmt/ranges.h>

#include "core/checked.h"
#include "core/error.h"

namespace cnn {

const char* to_string(ConvDir d) {
  static const char* const kNames[] = {"forward", "backward_data", "backward_filter"};
  return size_t(d) < 3 ? kNames[size_t(d)] : "?";
}

ConvOperandsF32 f32_operands(const ConvOperands& op) {
  return {op.x.f32(), op.w.f32(), op.b.f32(), op.y.f32(), op.dy.f32(), op.dx.f32(), op.dw.f32(), op.db.f32()};
}

ConvOperandsBf16 bf16_operands(const ConvOperands& op) {
  return {op.x.bf16_data(), op.w.f32(), op.b.f32(), op.y.bf16_data(), op.dy.bf16_data(), op.dx.bf16_data(),
          op.dw.f32(), op.db.f32()};
}

ConvOperandsF16 f16_operands(const ConvOperands& op) {
  return {op.x.f16_data(), op.w.f32(), op.b.f32(), op.y.f16_data(), op.dy.f16_data(), op.dx.f16_data(),
          op.dw.f32(), op.db.f32()};
}

// The rows of the three directions of one dtype; `typed` gives the operands as that dtype's
// pointers (f32_operands, bf16_operands), which forward and backward take.
template <typename Typed, typename Forward, typename Backward>
static void add_typed_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, DType dtype,
                           bool deterministic, std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                           std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                           Forward forward, Backward backward, Typed (*typed)(const ConvOperands&)) {
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    auto workspace = [bytes, dir](const ExecContext& ctx, const Conv2dShape& sh, MathMode) { return bytes(ctx, sh, dir); };
    auto run = [forward, backward, typed, dir, name](const ExecContext& ctx, const Conv2dShape& sh,
                                                     const ConvOperands& op) {
      const Typed f = typed(op);
      if (dir == ConvDir::forward) return forward(ctx, sh, f.x, f.w, f.b, f.y);
      if (dir == ConvDir::backward_data) {
        CNN_CHECK(f.dx, "{} backward_data: dx is null", name);
        return backward(ctx, sh, nullptr, f.w, f.dy, f.dx, nullptr, nullptr);
      }
      CNN_CHECK(f.dw, "{} backward_filter: dw is null", name);
      backward(ctx, sh, f.x, nullptr, f.dy, nullptr, f.dw, f.db);
    };
    auto can = [can_implement](const ExecContext& ctx, const Conv2dShape& sh, MathMode) { return can_implement(ctx, sh); };
    out.push_back(ConvAlgo{name, backend, dtype, dir, deterministic, can, workspace, run});
  }
}

void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes, ConvForwardF32 forward,
                   ConvBackwardF32 backward) {
  add_typed_rows(out, name, backend, DType::f32, deterministic, std::move(can_implement), std::move(bytes), forward,
                 backward, f32_operands);
}

void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                   ConvForwardBf16 forward, ConvBackwardBf16 backward) {
  add_typed_rows(out, name, backend, DType::bf16, deterministic, std::move(can_implement), std::move(bytes), forward,
                 backward, bf16_operands);
}

void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                   ConvForward16<f16> forward, ConvBackward16<f16> backward) {
  add_typed_rows(out, name, backend, DType::f16, deterministic, std::move(can_implement), std::move(bytes), forward,
                 backward, f16_operands);
}

void add_conv_rows_f32cl(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                         std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                         std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                         ConvForwardF32 forward, ConvBackwardF32 backward) {
  add_typed_rows(out, name, backend, DType::f32cl, deterministic, std::move(can_implement), std::move(bytes), forward,
                 backward, f32_operands);
}

// conv2d_cpu.cpp's GEMMs take int sizes: every matrix dimension of one group must fit.
static bool cpu_can_implement(const ExecContext&, const Conv2dShape& sh) {
  if (sh.N < 1 || sh.C < 1 || sh.K < 1 || sh.P < 1 || sh.Q < 1 || sh.groups < 1) return false;
  if (sh.C % sh.groups != 0 || sh.K % sh.groups != 0) return false;
  const int64_t rows = sh.C / sh.groups * sh.R * sh.S, pq = sh.P * sh.Q;
  return rows <= INT_MAX && pq <= INT_MAX && sh.K <= INT_MAX && rows * pq <= INT_MAX;
}

// Mirrors conv2d_cpu.cpp: one column buffer per batch slice (none for a 1x1 stride-1 unpadded
// conv), plus one partial dw per slice after the first for backward_filter.
static size_t cpu_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  const bool pointwise =
      sh.R == 1 && sh.S == 1 && sh.stride_h == 1 && sh.stride_w == 1 && sh.pad_h == 0 && sh.pad_w == 0;
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), sh.N));
  // Each factor is a size of one operand (within the tensor cap); the products are checked.
  const Checked cols = pointwise ? Checked(0) : Checked(sh.C / sh.groups * sh.R * sh.S) * (sh.P * sh.Q);
  Checked floats = cols * slices;
  if (dir == ConvDir::backward_filter) floats = floats + Checked(sh.weight_numel()) * (slices - 1);
  return checked_bytes(floats, sizeof(float), "conv2d cpu workspace");
}

static bool cpu_direct_can_implement(const ExecContext&, const Conv2dShape& sh) {
  return conv2d_cpu_direct_can_implement(sh);
}
static bool cpu_winograd_can_implement(const ExecContext& ctx, const Conv2dShape& sh) {
  return cpu_can_implement(ctx, sh) && conv2d_cpu_winograd_can_implement(sh);
}
// Each direction takes Winograd's own scratch (the filter gradient's its per-thread sums too).
static size_t cpu_winograd_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  if (dir == ConvDir::backward_filter) return conv2d_cpu_winograd_filter_workspace_bytes(ctx, sh);
  return conv2d_cpu_winograd_workspace_bytes(ctx, sh, dir == ConvDir::backward_data);
}
static size_t no_workspace(const ExecContext&, const Conv2dShape&, ConvDir) { return 0; }

const char* conv2d_cpu_rule_algo(const Conv2dShape& sh, DType t) {
  if (t == DType::f32 && conv2d_cpu_direct_is_default(sh)) return "cpu:direct";
  if (t == DType::f32 && conv2d_cpu_winograd_is_default(sh)) return "cpu:winograd";
  return "cpu:im2col_gemm";
}

// The "cpu" default rows: direct for depthwise shapes, Winograd for the 3x3 layers of
// conv2d_cpu_winograd_is_default, im2col GEMM elsewhere.
static void cpu_default_forward(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* b, float* y) {
  if (conv2d_cpu_direct_is_default(sh)) return conv2d_forward_cpu_direct(ctx, sh, x, w, b, y);
  if (conv2d_cpu_winograd_is_default(sh)) return conv2d_forward_cpu_winograd(ctx, sh, x, w, b, y);
  conv2d_forward_cpu(ctx, sh, x, w, b, y);
}
static void cpu_default_backward(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  if (conv2d_cpu_direct_is_default(sh)) return conv2d_backward_cpu_direct(ctx, sh, x, w, dy, dx, dw, db);
  if (conv2d_cpu_winograd_is_default(sh)) return conv2d_backward_cpu_winograd(ctx, sh, x, w, dy, dx, dw, db);
  conv2d_backward_cpu(ctx, sh, x, w, dy, dx, dw, db);
}
static size_t cpu_default_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  if (conv2d_cpu_direct_is_default(sh)) return 0;
  if (conv2d_cpu_winograd_is_default(sh)) return cpu_winograd_workspace_bytes(ctx, sh, dir);
  return cpu_workspace_bytes(ctx, sh, dir);
}

// The CPU algorithms: im2col GEMM (slices summed in a fixed order) and direct (one-input-channel
// filters), and the backend's default choosing between them. In bf16 and f16 the im2col GEMM on
// widened copies (host vectors, not workspace: the emulation is the oracle, not a fast path),
// outputs rounded once, as both "cpu:im2col_gemm" and "cpu"; in f32cl the same on permuted copies.
std::vector<ConvAlgo> conv2d_cpu_algos() {
  std::vector<ConvAlgo> algos;
  add_conv_rows(algos, "cpu:im2col_gemm", Backend::cpu, true, cpu_can_implement, cpu_workspace_bytes,
                conv2d_forward_cpu, conv2d_backward_cpu);
  add_conv_rows(algos, "cpu:direct", Backend::cpu, true, cpu_direct_can_implement, no_workspace,
                conv2d_forward_cpu_direct, conv2d_backward_cpu_direct);
  add_conv_rows(algos, "cpu:winograd", Backend::cpu, true, cpu_winograd_can_implement, cpu_winograd_workspace_bytes,
                conv2d_forward_cpu_winograd, conv2d_backward_cpu_winograd);
  add_conv_rows(algos, "cpu", Backend::cpu, true, cpu_can_implement, cpu_default_workspace_bytes, cpu_default_forward,
                cpu_default_backward);
  for (const char* name : {"cpu:im2col_gemm", "cpu"}) {
    add_conv_rows(algos, name, Backend::cpu, true, cpu_can_implement, cpu_workspace_bytes,
                  conv2d_forward_emulated_cpu<bf16>, conv2d_backward_emulated_cpu<bf16>);
    add_conv_rows(algos, name, Backend::cpu, true, cpu_can_implement, cpu_workspace_bytes,
                  conv2d_forward_emulated_cpu<f16>, conv2d_backward_emulated_cpu<f16>);
    add_conv_rows_f32cl(algos, name, Backend::cpu, true, cpu_can_implement, cpu_workspace_bytes,
                        conv2d_forward_emulated_cpu<float>, conv2d_backward_emulated_cpu<float>);
  }
  return algos;
}

const ImplTable<ConvAlgo>& conv2d_table(ConvDir dir) {
  switch (dir) {
    case ConvDir::forward:
      return Conv2dForward::table();
    case ConvDir::backward_data:
      return Conv2dBackwardData::table();
    case ConvDir::backward_filter:
      break;
  }
  return Conv2dBackwardFilter::table();
}

static bool is_named(const ConvAlgo& a) { return a.name.find(':') != std::string::npos; }

ConvAlgoList conv2d_algos(ConvDir dir) {
  const std::vector<ConvAlgo>& rows = conv2d_table(dir).rows;
  const auto named_end = std::find_if_not(rows.begin(), rows.end(), is_named);
  return {rows.data(), rows.data() + (named_end - rows.begin())};
}

std::vector<std::string> conv2d_algo_names(ConvDir dir) {
  std::vector<std::string> names;
  for (const ConvAlgo& a : conv2d_algos(dir))
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  return names;
}

const ConvAlgo& conv2d_algo(ConvDir dir, const std::string& name, DType dtype) {
  std::vector<std::string> names, other_dtypes;
  for (const ConvAlgo& a : conv2d_algos(dir)) {
    if (a.dtype == dtype && a.name == name) return a;
    if (a.dtype == dtype) names.push_back(a.name);
    else if (a.name == name) other_dtypes.push_back(to_string(a.dtype));
  }
  const std::string have = names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
  if (!other_dtypes.empty())
    CNN_THROW("{} convolution algorithm '{}' has no {} implementation (it computes {}; {} ones in this build: {})",
              to_string(dir), name, to_string(dtype), fmt::join(other_dtypes, ", "), to_string(dtype), have);
  CNN_THROW("unknown {} convolution algorithm '{}'{} (this build has{}: {})", to_string(dir), name,
            did_you_mean(name, names), dtype == DType::f32 ? "" : fmt::format(" for {}", to_string(dtype)), have);
}

void invoke(const ConvAlgo& a, const Conv2dForward& args) {
  ConvOperands op{args.x, args.w, args.b, args.y};
  op.math = args.math;
  op.w16 = args.w16;
  a.run(*args.ctx, args.sh, op);
}
void invoke(const ConvAlgo& a, const Conv2dBackwardData& args) {
  ConvOperands op{nullptr, args.w, nullptr, nullptr, args.dy, args.dx};
  op.math = args.math;
  op.w16 = args.w16;
  a.run(*args.ctx, args.sh, op);
}
void invoke(const ConvAlgo& a, const Conv2dBackwardFilter& args) {
  ConvOperands op{args.x, nullptr, nullptr, nullptr, args.dy, nullptr, args.dw, args.db};
  op.math = args.math;
  a.run(*args.ctx, args.sh, op);
}

// can_implement on the call's context, or on an empty CPU context for a shape question.
template <typename Args>
static bool can_implement(const ConvAlgo& a, const Args& args) noexcept {
  static const ExecContext kNoContext;
  try {
    return a.can_implement(args.ctx ? *args.ctx : kNoContext, args.sh, args.math);
  } catch (const std::exception&) {
    return false;
  }
}
bool row_supports(const ConvAlgo& a, const Conv2dForward& args) noexcept { return can_implement(a, args); }
bool row_supports(const ConvAlgo& a, const Conv2dBackwardData& args) noexcept { return can_implement(a, args); }
bool row_supports(const ConvAlgo& a, const Conv2dBackwardFilter& args) noexcept { return can_implement(a, args); }

}  // namespace cnn
