// Convolution implementations by name and direction: the rows of conv2d's three entry points
// (Conv2dForward, Conv2dBackwardData, Conv2dBackwardFilter in conv2d.h), which the dispatcher, the
// autotuner, `cnn-bench conv`, the conv2d layer's `algo:` key and the tests all read. Every
// implementation of every backend (our CUDA strategies, each cuDNN algorithm) is one ConvAlgo per
// direction it implements.
//
// Names: "<backend>:<strategy>", lower case, unique per direction and dtype, e.g.
// "cuda:implicit_gemm", "cuda:direct", "cuda:winograd", "cuda:im2col_gemm", "cuda:fft",
// "cudnn:implicit_precomp_gemm", "cudnn:winograd_nonfused", "cpu:im2col_gemm", "cpu:direct", "cpu:winograd": the named
// algorithms (conv2d_algos). Beside them each backend has its default row, named after the backend,
// which is what run_op(backend, args) runs when no algorithm is named: "cpu" (direct for depthwise
// shapes, Winograd for 3x3 stride-1 layers of 16+ channels, im2col GEMM elsewhere; "cpu:direct" and
// "cpu:winograd" are f32 only), "cuda"
// (direct kernels where every filter reads one input channel and has at most 25 taps, implicit
// GEMM elsewhere), "cudnn" (cuDNN's heuristic's first choice within the workspace limit).
// Dtypes: a row computes one activation dtype (ConvAlgo::dtype). The bf16 rows (ops/dispatch.h's
// contract: x, y, dy, dx bf16 channels-last; w, b, dw, db FP32) are "cpu" and "cpu:im2col_gemm"
// (the emulation, conv2d_forward_emulated_cpu), "cuda:igemm_nhwc" (conv2d_igemm_nhwc_bf16.h, groups
// 1), "cuda:direct_nhwc" (conv2d_direct_nhwc_bf16.h, C/groups == 1) and "cuda" (direct_nhwc where
// it can implement the shape, igemm_nhwc elsewhere): conv2d_algo_bf16_cuda.cpp. A name may exist in
// several dtypes ("cpu:im2col_gemm"), so a lookup names the dtype too (conv2d_algo).
// Grouped convolutions with 1 < C/groups and groups > 1 have no cuda bf16 row. The f16 rows (same
// contract, f16 in place of bf16) are "cpu" and "cpu:im2col_gemm" (the same emulation) and every
// cuda and cudnn name the bf16 rows have (the same kernels instantiated for f16; cuDNN's in
// CUDNN_DATA_HALF).
//
// Operands (device memory for cuda/cudnn, host memory for cpu; layouts as in conv2d.h):
//   forward          reads x, w, b (b may be null)   writes y
//   backward_data    reads w, dy                     writes dx
//   backward_filter  reads x, dy                     writes dw, and db when db is not null
// Outputs are written, never accumulated. Work is queued on ctx.cuda_stream.
// Scratch memory comes from ctx.workspace; workspace_bytes() says how much one call takes, and the
// autotuner skips (and reports) an algorithm whose workspace exceeds ctx.workspace_limit_bytes.
// Trap: the rows are made once, on first use, by the providers below; a provider must not depend on
// a device being present (cuDNN's asks the library per shape in can_implement).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/view.h"
#include "ops/backend.h"
#include "ops/conv2d.h"
#include "ops/dispatch.h"
#include "ops/packed_weights.h"

namespace cnn {

enum class ConvDir { forward, backward_data, backward_filter };
const char* to_string(ConvDir d);  // "forward" | "backward_data" | "backward_filter"

// The operands of any direction (what a direction does not read or write stays null).
struct ConvOperands {
  ConstView x = nullptr;   // (N, C, H, W)
  ConstView w = nullptr;   // (K, C/groups, R, S)
  ConstView b = nullptr;   // (K) or null
  View y = nullptr;        // (N, K, P, Q)
  ConstView dy = nullptr;  // (N, K, P, Q)
  View dx = nullptr;       // (N, C, H, W)
  View dw = nullptr;       // (K, C/groups, R, S)
  View db = nullptr;       // (K) or null
  MathMode math = MathMode::fp32;  // what the call allows; a row's math_used() says what it does
  // forward, backward_data: a prepacked 16-bit copy of w (ops/packed_weights.h) in the layout the
  // row's packed_layout() names, or none (the row packs its own). Rows that read no copy ignore it.
  PackedWeights16 w16{};
};

// The same operands as f32 pointers (checked: another dtype throws), which the f32
// implementations read (conv2d_strategies.h).
struct ConvOperandsF32 {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* b = nullptr;
  float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};
ConvOperandsF32 f32_operands(const ConvOperands& op);
// The same for the bf16 and f16 rows (T = bf16, f16): the activations as T, the parameters and
// their gradients f32.
template <typename T>
struct ConvOperands16 {
  const T* x = nullptr;  // (N, H, W, C)
  const float* w = nullptr;
  const float* b = nullptr;
  T* y = nullptr;         // (N, P, Q, K)
  const T* dy = nullptr;  // (N, P, Q, K)
  T* dx = nullptr;        // (N, H, W, C)
  float* dw = nullptr;
  float* db = nullptr;
};
using ConvOperandsBf16 = ConvOperands16<bf16>;
using ConvOperandsF16 = ConvOperands16<f16>;
ConvOperandsBf16 bf16_operands(const ConvOperands& op);
ConvOperandsF16 f16_operands(const ConvOperands& op);
// The same by element type, for code templated on it (bf16_operands or f16_operands).
template <typename T>
ConvOperands16<T> operands16(const ConvOperands& op) {
  if constexpr (std::is_same_v<T, f16>)
    return f16_operands(op);
  else
    return bf16_operands(op);
}

struct ConvAlgo {
  std::string name;  // "<backend>:<strategy>", or the backend's name for its default row
  Backend backend = Backend::cuda;
  DType dtype = DType::f32;  // of the activations (x, y, dy, dx)
  ConvDir dir = ConvDir::forward;
  bool deterministic = true;  // same bits on every run (no atomics whose order varies)
  // Whether this algorithm computes this shape under a math mode (cuDNN: whether the library
  // supports it here), and the scratch bytes one call needs (0 when none). Call them through
  // can_implement() and workspace_bytes() below.
  std::function<bool(const ExecContext&, const Conv2dShape&, MathMode)> can_implement_fn;
  std::function<size_t(const ExecContext&, const Conv2dShape&, MathMode)> workspace_fn;
  std::function<void(const ExecContext&, const Conv2dShape&, const ConvOperands&)> run;
  // Whether the row honours ConvOperands::math (cuDNN: TF32 tensor cores under tf32); the others
  // compute in exact FP32 whatever the call allows.
  bool follows_math = false;
  // The layout of the 16-bit weight copy the row reads for a shape (and takes prepacked from
  // ConvOperands::w16); null, or nullopt for the shape: the row reads no copy (f32 and cpu rows,
  // backward_filter). A pure function of the shape, so a plan can ask before anything runs.
  std::function<std::optional<Bf16WeightLayout>(const Conv2dShape&)> packed_layout_fn{};

  bool can_implement(const ExecContext& ctx, const Conv2dShape& sh, MathMode m = MathMode::fp32) const {
    return can_implement_fn(ctx, sh, m);
  }
  size_t workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, MathMode m = MathMode::fp32) const {
    return workspace_fn(ctx, sh, m);
  }
  // The math this row does when the call allows m.
  MathMode math_used(MathMode m) const { return follows_math ? m : MathMode::fp32; }
  std::optional<Bf16WeightLayout> packed_layout(const Conv2dShape& sh) const {
    return packed_layout_fn ? packed_layout_fn(sh) : std::nullopt;
  }
};

// Rows of the three directions from one forward and one backward function over f32 pointers, the
// backward computing whichever of dx, dw, db is non-null (so backward_data passes null dw and db,
// backward_filter a null dx). bytes(ctx, sh, dir) is the workspace of one call of that direction.
using ConvForwardF32 = void (*)(const ExecContext&, const Conv2dShape&, const float* x, const float* w,
                                const float* b, float* y);
using ConvBackwardF32 = void (*)(const ExecContext&, const Conv2dShape&, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db);
void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                   ConvForwardF32 forward, ConvBackwardF32 backward);
// The same for bf16 and f16 rows (dtype T): activations T, w and b read as FP32 masters, dw and db FP32.
template <typename T>
using ConvForward16 = void (*)(const ExecContext&, const Conv2dShape&, const T* x, const float* w, const float* b,
                               T* y);
template <typename T>
using ConvBackward16 = void (*)(const ExecContext&, const Conv2dShape&, const T* x, const float* w, const T* dy,
                                T* dx, float* dw, float* db);
using ConvForwardBf16 = ConvForward16<bf16>;
using ConvBackwardBf16 = ConvBackward16<bf16>;
void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                   ConvForwardBf16 forward, ConvBackwardBf16 backward);
void add_conv_rows(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                   std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                   std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                   ConvForward16<f16> forward, ConvBackward16<f16> backward);

// The same f32 functions as rows of dtype f32cl (their operands read through View::f32()).
void add_conv_rows_f32cl(std::vector<ConvAlgo>& out, const std::string& name, Backend backend, bool deterministic,
                         std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement,
                         std::function<size_t(const ExecContext&, const Conv2dShape&, ConvDir)> bytes,
                         ConvForwardF32 forward, ConvBackwardF32 backward);

// Providers, one per backend family, each returning every row of every direction it has: named
// algorithms and the backend's default rows. registry.cpp assembles the tables from them (the CUDA
// ones only in a CUDA build).
std::vector<ConvAlgo> conv2d_cpu_algos();    // conv2d_algo.cpp
std::vector<ConvAlgo> conv2d_cuda_algos();   // our CUDA strategies (conv2d_algo_cuda.cpp), bf16 ones included
std::vector<ConvAlgo> conv2d_cuda_bf16_algos();  // our bf16 NHWC kernels' rows (conv2d_algo_bf16_cuda.cpp)
std::vector<ConvAlgo> conv2d_cudnn_algos();  // every cuDNN algorithm, f32 and bf16 (conv2d_cudnn.cpp)
// Our accuracy rule on top of cuDNN's support answer, a pure function of the shape and the rows'
// dtype (so it can be checked without a GPU): false for cudnn:winograd_nonfused (measured too
// inaccurate; see conv2d_cudnn.cpp), whose can_implement is then false, in either dtype. `name` is
// a listed cuDNN algorithm of `dir` ("cudnn:..."), else throws. CUDA builds only (conv2d_cudnn.cpp).
bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh,
                                DType dtype = DType::f32);

// The named CPU algorithm the "cpu" default row runs for sh in dtype t: "cpu:direct" for f32
// depthwise shapes (conv2d_cpu_direct_is_default), "cpu:winograd" for the f32 shapes of
// conv2d_cpu_winograd_is_default, "cpu:im2col_gemm" otherwise. The autotuner takes
// it on the CPU instead of timing the candidates: a timed choice would follow the machine's load,
// and CPU runs keep the same bits from run to run (there is no autotune cache on the CPU).
const char* conv2d_cpu_rule_algo(const Conv2dShape& sh, DType t);

// The rows of one direction: the table of its entry point (registry.cpp), named algorithms first.
const ImplTable<ConvAlgo>& conv2d_table(ConvDir dir);

// The named algorithms of one direction, in a fixed order (cpu, cuda, cudnn), every dtype (callers
// that run them keep the rows of their operands' dtype: ConvAlgo::dtype).
struct ConvAlgoList {
  const ConvAlgo* first = nullptr;
  const ConvAlgo* last = nullptr;
  const ConvAlgo* begin() const { return first; }
  const ConvAlgo* end() const { return last; }
  size_t size() const { return size_t(last - first); }
  bool empty() const { return first == last; }
};
ConvAlgoList conv2d_algos(ConvDir dir);
// The named algorithm of that name, direction and dtype; throws cnn::Error listing the valid names
// of that dtype otherwise (and saying which dtypes have the name when it exists in another one).
const ConvAlgo& conv2d_algo(ConvDir dir, const std::string& name, DType dtype = DType::f32);
// The names of the named algorithms of `dir` of every dtype, each once, in table order (a layer's
// `algo:` key is checked against them before its dtype is known).
std::vector<std::string> conv2d_algo_names(ConvDir dir);

// How the dispatcher (ops/dispatch.h: run_op, op_supports) calls a row of conv2d. A shape question
// without a context asks can_implement with an empty CPU context (cuDNN's named rows then say no;
// every default row answers from the shape alone).
void invoke(const ConvAlgo& a, const Conv2dForward& args);
void invoke(const ConvAlgo& a, const Conv2dBackwardData& args);
void invoke(const ConvAlgo& a, const Conv2dBackwardFilter& args);
bool row_supports(const ConvAlgo& a, const Conv2dForward& args) noexcept;
bool row_supports(const ConvAlgo& a, const Conv2dBackwardData& args) noexcept;
bool row_supports(const ConvAlgo& a, const Conv2dBackwardFilter& args) noexcept;

}  // namespace cnn
