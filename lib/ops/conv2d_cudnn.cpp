// Conv2d through cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter,
// forward bias by cudnnAddTensor; the bias gradient by our column sum, conv2d_cuda_bias_gradient, where
// it fits, else cudnnConvolutionBackwardBias, which ran at a quarter of the memory bandwidth) on FP32 data. The call's MathMode sets the
// descriptor's math type: fp32 -> CUDNN_FMA_MATH, so no algorithm may use tensor cores (bit for bit
// what this file did before precisions existed); tf32 -> CUDNN_DEFAULT_MATH, which lets cuDNN run
// FP32 convolutions on TF32 tensor cores (sm_80+; FP32 accumulation). Every algorithm of every
// direction is one ConvAlgo (follows_math: the same row serves both modes); the "cudnn" default rows take the one cuDNN's heuristic ranks first among those that
// fit the workspace limit and that we measured accurate (accurate_enough: no WINOGRAD_NONFUSED on
// any filter).
// BF16 rows (dtype bf16, the same names): x, y, dy, dx bf16 channels-last in NHWC descriptors,
// the filter a bf16 KRSC (CUDNN_TENSOR_NHWC) copy of the FP32 master (the prepacked one the call
// gives, ConvOperands::w16, else one packed into ctx.workspace: the rows' packed_layout is krsc),
// FP32 compute type, CUDNN_TENSOR_OP_MATH (BF16 tensor cores; the call's math is ignored). cuDNN's
// legacy API takes a bias and writes dw only in the data's dtype, so: forward fills y with the
// bias rounded to bf16 and blends the convolution onto it (beta = 1: y = conv + bf16(b), rounded
// once); backward_filter writes dw in bf16 KRSC into the workspace, which a kernel widens into the
// FP32 (K, C/groups, R, S) gradient (dw is so rounded to bf16 once, unlike our own bf16 rows); db
// is an FP32 column sum of dy (column_sum_bf16.h). Workspace: cuDNN's, then the packed weights
// (forward, backward_data) or the bf16 dw and the column sum's partials, each 256-byte aligned.
// F32CL rows (dtype f32cl, tf32's channels-last FP32 activations, the same names): NHWC float
// descriptors, the filter a KRSC FP32 copy of the master permuted into the workspace (convert.h's
// permute), dw through a KRSC FP32 copy permuted back, the bias by cudnnAddTensor on y seen as the
// NCHW tensor (N P Q, K, 1, 1) it is byte for byte, db by our FP32 column sum of dy's (N P Q, K)
// rows; the math follows the call like the f32 rows (tf32: CUDNN_DEFAULT_MATH). No 16-bit
// rounding anywhere, so none of the 16-bit refusals apply. Grouped and depthwise
// shapes are refused in f32cl: cuDNN is the only f32cl convolution on a GPU, and whether its NHWC
// FP32 engines take them (deterministically too) has not been measured, so such a layer stays f32
// NCHW (Graph::choose_backends) rather than failing at autotune.
// F16 rows (dtype f16, the same names): the same with CUDNN_DATA_HALF (run_16<f16>) and the same
// refusals, whose reasons hold for f16 (accurate_enough, make_row). Their dw passes through an f16
// copy, so a loss-scaled filter gradient past 65504 becomes inf there (our own cuda rows keep dw
// FP32): the loss scaler then skips the step.
// Trap: an algorithm "can implement" a shape exactly when cuDNN's workspace query for it succeeds;
// descriptors, those answers and the heuristic's choice are memoised per shape, math mode and
// dtype in the context (they may support, rank and size the algorithms differently).
#include <cudnn.h>

#include <array>
#include <optional>
#include <string>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/column_sum_bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_cudnn_bf16.h"
#include "ops/conv2d_weights_bf16.h"
#include "ops/convert.h"

namespace cnn {
namespace {

constexpr int kDirs = 3;
constexpr int kMaxAlgos = 8;  // CUDNN_CONVOLUTION_FWD_ALGO_COUNT, the largest of the three counts
constexpr int64_t kUnasked = -1, kUnsupported = -2;

struct AlgoInfo {
  int id;              // the cuDNN enum value
  const char* name;    // after "cudnn:"
  bool deterministic;  // false where cuDNN's documentation says atomics make results vary
};

// cuDNN 9 API reference, cudnnConvolution*Algo_t: BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and
// BWD_FILTER_ALGO_3 sum with atomics (non-deterministic); every forward algorithm is deterministic.
// BWD_FILTER_ALGO_WINOGRAD is documented as not implemented, so it is not listed.
constexpr std::array<AlgoInfo, 8> kForward{
    {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "implicit_gemm", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, "implicit_precomp_gemm", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, "gemm", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, "direct", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_FFT, "fft", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, "fft_tiling", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, "winograd", true},
     {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused", true}}};
constexpr std::array<AlgoInfo, 6> kBackwardData{
    {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, "algo_0", false},
     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "algo_1", true},
     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, "fft", true},
     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, "fft_tiling", true},
     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, "winograd", true},
     {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused", true}}};
constexpr std::array<AlgoInfo, 6> kBackwardFilter{
    {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, "algo_0", false},
     {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "algo_1", true},
     {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, "fft", true},
     {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, "algo_3", false},
     {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused", true},
     {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, "fft_tiling", true}}};

// The listed algorithm `id` of `dir`, or null (cuDNN's enums have values we do not list).
const AlgoInfo* find_algo(ConvDir dir, int id) {
  auto find = [id](const auto& table) -> const AlgoInfo* {
    for (const AlgoInfo& a : table)
      if (a.id == id) return &a;
    return nullptr;
  };
  switch (dir) {
    case ConvDir::forward:
      return find(kForward);
    case ConvDir::backward_data:
      return find(kBackwardData);
    case ConvDir::backward_filter:
      return find(kBackwardFilter);
  }
  return nullptr;
}
bool algo_deterministic(ConvDir dir, int id) {
  const AlgoInfo* a = find_algo(dir, id);
  return a && a->deterministic;
}

bool is_winograd_nonfused(ConvDir dir, int id) {
  switch (dir) {
    case ConvDir::forward:
      return id == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case ConvDir::backward_data:
      return id == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case ConvDir::backward_filter:
      return id == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return false;
}

// Our rule on top of cuDNN's own support answer: whether algorithm `id` of `dir` is accurate
// enough to use on this shape. Measured on an H200 with cuDNN 9.14 (FP32, FMA math, against the
// double CPU reference, tolerance 1e-3 abs + 1e-3 rel): WINOGRAD_NONFUSED accepts 5x5 filters but
// is off by 0.5% to 7% in every direction, where every other algorithm passes the same shapes:
//   forward x (3, 6, 10, 9) * w (4, 6, 5, 5), pad 2: 55 of 1080 outputs off, worst -0.257379562
//     for -0.275956273; x (2, 1, 13, 13) * w (4, 1, 5, 5), pad 2: -2.57771277 for -2.58993196;
//   backward_data on 5x5: 3.39018345 for 3.40344715; backward_filter: 2.14746094 for 2.16542816;
//   x (4, 1, 20, 20) * w (8, 1, 5, 5), pad 0: all three directions off as well.
// On 3x3 filters it passes such random operands (2e-6 to 2e-5 relative L2 from cuda:implicit_gemm,
// also on post-ReLU x and batchnorm-projected dy) but not training: one fer_cnn step (batch 64,
// every 3x3 conv past the first forced to it in all directions) left the weight gradients
// 2.5e-3 (conv3b, the first conv backward reaches) to 5.6e-3 (conv1a) from a float64 step, where
// PyTorch's FP32 step was 5e-6 and 6e-4, and cuda:winograd, cudnn:fft_tiling or the autotuner
// without it pass. Too inaccurate for training, so it is refused on every shape (can_implement,
// the heuristic's choice and a run by name). BF16: the same rule (not measured apart; a bf16 row's
// error is dominated by its rounding of y, dx and dw, and nothing suggests the transform got better).
// bf16: CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 measured on the H200 (cuDNN 9.14) up to 1e-2 from the
// FP32 reference on vgg_fer's layers and 5621 of 36864 dw elements past one bf16 rounding on a
// 64-channel 3x3 layer: its sums are not FP32 sums, so it is refused like winograd_nonfused.
// f16: refused too, not measured apart: the same algorithm with the same FP32 compute type, and f16
// keeps only 3 more mantissa bits than bf16, far from hiding errors of 1e-2.
bool accurate_enough(ConvDir dir, int id, const Conv2dShape&, DType dtype) {
  if (is_16bit(dtype) && dir == ConvDir::backward_filter && id == 0) return false;
  return !is_winograd_nonfused(dir, id);
}

// Descriptors of one shape, cuDNN's workspace answers per direction and algorithm, and the
// heuristic's choice per direction for the (limit, deterministic) it was made under.
struct ConvDescs {
  DType dtype = DType::f32;            // f32: NCHW float; f32cl, bf16, f16: NHWC, filter KRSC
  cudnn::TensorDescriptor x, y, bias;  // x (N, C, H, W), y/dy (N, K, P, Q), bias/db (1, K, 1, 1) f32
  cudnn::TensorDescriptor y_rows;      // f32cl: y/dy as (N P Q, K, 1, 1) NCHW
  cudnn::FilterDescriptor w;           // (K, C/groups, R, S)
  cudnn::ConvolutionDescriptor conv;
  std::array<std::array<int64_t, kMaxAlgos>, kDirs> workspace;
  struct Choice {
    bool made = false;
    size_t limit = 0;
    bool deterministic = false;
    int algo = -1;
  };
  std::array<Choice, kDirs> choice;
};

struct ConvCache {
  cudnn::ShapeMemo<ConvDescs> memo;
};

// The math a row's descriptors are made for: bf16 and f16 rows ignore the call's (always tensor cores).
MathMode descs_math(MathMode math, DType dtype) { return is_16bit(dtype) ? MathMode::fp32 : math; }

cudnn::ShapeKey key_of(const Conv2dShape& sh, MathMode math, DType dtype) {
  return {{sh.N, sh.C, sh.H, sh.W, sh.K, sh.R, sh.S, sh.stride_h, sh.stride_w, sh.pad_h, sh.pad_w, sh.dilation_h,
           sh.dilation_w, sh.groups, sh.P, sh.Q, int64_t(math) | int64_t(dtype) << 8}};
}

// cuDNN's type of a 16-bit dtype (bf16 or f16).
cudnnDataType_t cudnn_type16(DType dtype) { return dtype == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

// cuDNN's type of a channels-last dtype (f32cl, bf16 or f16).
cudnnDataType_t cudnn_type_nhwc(DType dtype) { return dtype == DType::f32cl ? CUDNN_DATA_FLOAT : cudnn_type16(dtype); }

// A packed channels-last (f32cl, bf16 or f16) tensor of logical dims (n, c, h, w).
void set_nhwc_16(cudnnTensorDescriptor_t d, DType dtype, int64_t n, int64_t c, int64_t h, int64_t w, const char* what) {
  if (!cudnn::fits_nchw(n, c, h, w))
    CNN_THROW("{}: tensor ({}, {}, {}, {}) is too large for cuDNN's int sizes", what, n, c, h, w);
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, cudnn_type_nhwc(dtype), static_cast<int>(n),
                                         static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
}

void make_descs(ConvDescs& d, const Conv2dShape& sh, MathMode math, DType dtype, const char* what) {
  CNN_CHECK(conv2d_cudnn_supports(sh), "{}: cuDNN cannot take this shape ({})", what, sh.to_string());
  CNN_CHECK(dtype == DType::f32 || dtype == DType::f32cl || is_16bit(dtype),
            "{}: no cuDNN convolution rows for dtype {}", what, to_string(dtype));
  d.dtype = dtype;
  const bool nhwc = dtype != DType::f32;
  if (nhwc) {
    set_nhwc_16(d.x, dtype, sh.N, sh.C, sh.H, sh.W, what);
    set_nhwc_16(d.y, dtype, sh.N, sh.K, sh.P, sh.Q, what);
  } else {
    cudnn::set_nchw(d.x, sh.N, sh.C, sh.H, sh.W, what);
    cudnn::set_nchw(d.y, sh.N, sh.K, sh.P, sh.Q, what);
  }
  cudnn::set_nchw(d.bias, 1, sh.K, 1, 1, what);
  // f32cl's bias add and bias gradient see y and dy as the NCHW tensor (N P Q, K, 1, 1) they are
  // byte for byte: cuDNN's NCHW broadcast and reduction, not its NHWC ones.
  if (dtype == DType::f32cl) cudnn::set_nchw(d.y_rows, sh.N * sh.P * sh.Q, sh.K, 1, 1, what);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, nhwc ? cudnn_type_nhwc(dtype) : CUDNN_DATA_FLOAT,
                                         nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, static_cast<int>(sh.K),
                                         static_cast<int>(sh.C / sh.groups), static_cast<int>(sh.R),
                                         static_cast<int>(sh.S)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, sh.pad_h, sh.pad_w, sh.stride_h, sh.stride_w, sh.dilation_h,
                                              sh.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, sh.groups));
  // fp32: FMA only. tf32: CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for FP32 data on sm_80+
  // (f32 and f32cl alike). bf16, f16: tensor cores on the 16-bit data (no down-conversion to allow).
  CUDNN_CHECK(cudnnSetConvolutionMathType(
      d.conv, is_16bit(dtype) ? CUDNN_TENSOR_OP_MATH : math == MathMode::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int n = 0, k = 0, p = 0, q = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &k, &p, &q));
  CNN_CHECK(n == sh.N && k == sh.K && p == sh.P && q == sh.Q, "{}: cuDNN computes output ({}, {}, {}, {}) for {}", what,
            n, k, p, q, sh.to_string());
  for (auto& per_dir : d.workspace) per_dir.fill(kUnasked);
}

ConvDescs& descs(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, DType dtype, const char* what) {
  cudnn::handle(ctx, what);  // validates the context before its State is used
  math = descs_math(math, dtype);
  return cudnn::slot<ConvCache>(ctx, cudnn::Slot::conv2d).memo.get(key_of(sh, math, dtype), [&](ConvDescs& d) {
    make_descs(d, sh, math, dtype, what);
  });
}

// cuDNN's workspace answer for one algorithm: bytes, or kUnsupported.
int64_t workspace_of(cudnnHandle_t h, ConvDescs& d, ConvDir dir, int algo) {
  CNN_CHECK(algo >= 0 && algo < kMaxAlgos, "cuDNN convolution algorithm {} out of range", algo);
  int64_t& cached = d.workspace[size_t(dir)][size_t(algo)];
  if (cached != kUnasked) return cached;
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  switch (dir) {
    case ConvDir::forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo), &bytes);
      break;
    case ConvDir::backward_data:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo),
                                                        &bytes);
      break;
    case ConvDir::backward_filter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                          cudnnConvolutionBwdFilterAlgo_t(algo), &bytes);
      break;
  }
  cached = st == CUDNN_STATUS_SUCCESS ? static_cast<int64_t>(bytes) : kUnsupported;
  return cached;
}

// The algorithms cuDNN's heuristic returns, best first, each with whether cuDNN calls it
// deterministic for this shape.
struct Ranked {
  int algo;
  bool deterministic;
};
std::vector<Ranked> heuristic_order(cudnnHandle_t h, ConvDescs& d, ConvDir dir) {
  std::vector<Ranked> order;
  auto take = [&order](const auto& perf) {
    if (perf.status == CUDNN_STATUS_SUCCESS) order.push_back({int(perf.algo), perf.determinism == CUDNN_DETERMINISTIC});
  };
  int returned = 0;
  switch (dir) {
    case ConvDir::forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      CUDNN_CHECK(
          cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, int(perf.size()), &returned, perf.data()));
      for (int i = 0; i < returned; ++i) take(perf[size_t(i)]);
      break;
    }
    case ConvDir::backward_data: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, int(perf.size()), &returned,
                                                              perf.data()));
      for (int i = 0; i < returned; ++i) take(perf[size_t(i)]);
      break;
    }
    case ConvDir::backward_filter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, int(perf.size()), &returned,
                                                                perf.data()));
      for (int i = 0; i < returned; ++i) take(perf[size_t(i)]);
      break;
    }
  }
  return order;
}

// The first algorithm of the heuristic's order that the workspace query accepts within
// ctx.workspace_limit_bytes (and is deterministic when ctx.deterministic), else the first such
// algorithm in cuDNN's enum order; throws when there is none.
int choose(const ExecContext& ctx, cudnnHandle_t h, ConvDescs& d, ConvDir dir, const Conv2dShape& sh,
           const char* what) {
  ConvDescs::Choice& c = d.choice[size_t(dir)];
  if (c.made && c.limit == ctx.workspace_limit_bytes && c.deterministic == ctx.deterministic) return c.algo;
  for (const Ranked& r : heuristic_order(h, d, dir)) {
    const int algo = r.algo;
    // Deterministic by cuDNN's documentation and by the heuristic's own answer for this shape.
    if (ctx.deterministic && !(algo_deterministic(dir, algo) && r.deterministic)) continue;
    if (!accurate_enough(dir, algo, sh, d.dtype)) continue;
    const int64_t bytes = workspace_of(h, d, dir, algo);
    if (bytes == kUnsupported || static_cast<size_t>(bytes) > ctx.workspace_limit_bytes) continue;
    c = {true, ctx.workspace_limit_bytes, ctx.deterministic, algo};
    return algo;
  }
  // The heuristic ranks only what it expects to be fast; any other algorithm of this direction
  // that cuDNN accepts (still cuDNN, in the same math) beats failing the layer.
  for (int algo = 0; algo < kMaxAlgos; ++algo) {
    if (!find_algo(dir, algo) || (ctx.deterministic && !algo_deterministic(dir, algo))) continue;
    if (!accurate_enough(dir, algo, sh, d.dtype)) continue;
    const int64_t bytes = workspace_of(h, d, dir, algo);
    if (bytes == kUnsupported || static_cast<size_t>(bytes) > ctx.workspace_limit_bytes) continue;
    c = {true, ctx.workspace_limit_bytes, ctx.deterministic, algo};
    return algo;
  }
  CNN_THROW("{}: cuDNN has no {}{} algorithm within the workspace limit of {} bytes for {}", what,
            ctx.deterministic ? "deterministic " : "", to_string(dir), ctx.workspace_limit_bytes, sh.to_string());
}

size_t pad256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The FP32 rows' bias gradient by our column sum (where it fits, else cuDNN's): its partials' bytes,
// placed after cuDNN's scratch (pad256).
size_t own_bias_gradient_bytes(const Conv2dShape& sh) {
  return conv2d_cuda_bias_gradient_can_implement(sh) ? conv2d_cuda_bias_gradient_workspace_bytes(sh) : 0;
}

void* scratch(const ExecContext& ctx, int64_t bytes, const char* what) {
  if (bytes <= 0) return nullptr;
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "{}: the context has no device workspace", what);
  return ctx.workspace->get((static_cast<size_t>(bytes) + sizeof(float) - 1) / sizeof(float));
}

int64_t usable_workspace(cudnnHandle_t h, ConvDescs& d, ConvDir dir, int algo, const Conv2dShape& sh,
                         const char* what) {
  if (!accurate_enough(dir, algo, sh, d.dtype))
    CNN_THROW("{}: cuDNN {} algorithm cudnn:{} is refused for {} (measured too inaccurate above 3x3 filters)", what,
              to_string(dir), find_algo(dir, algo) ? find_algo(dir, algo)->name : "?", sh.to_string());
  const int64_t bytes = workspace_of(h, d, dir, algo);
  if (bytes == kUnsupported)
    CNN_THROW("{}: cuDNN {} algorithm cudnn:{} does not support {}", what, to_string(dir),
              find_algo(dir, algo) ? find_algo(dir, algo)->name : "?", sh.to_string());
  return bytes;
}

// One call's handle, descriptors, algorithm (algo < 0: the heuristic's) and cuDNN's workspace bytes.
struct Call {
  cudnnHandle_t h;
  ConvDescs& d;
  int algo;
  int64_t bytes;
};
Call prepare(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, DType dtype, ConvDir dir, int algo,
             const char* what) {
  cudnnHandle_t h = cudnn::handle(ctx, what);
  ConvDescs& d = descs(ctx, sh, math, dtype, what);
  if (algo < 0) algo = choose(ctx, h, d, dir, sh, what);
  return {h, d, algo, usable_workspace(h, d, dir, algo, sh, what)};
}

void run_f32(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, int algo, const ConvOperands& op,
             const char* what) {
  const ConvOperandsF32 f = f32_operands(op);
  const Call c = prepare(ctx, sh, op.math, DType::f32, dir, algo, what);
  // The bias gradient by our column sum (conv2d.h) where it fits, its partials after cuDNN's scratch.
  const bool own_db = f.db && conv2d_cuda_bias_gradient_can_implement(sh);
  const size_t db_bytes = own_db ? own_bias_gradient_bytes(sh) : 0;
  const size_t cudnn_at = db_bytes ? pad256(static_cast<size_t>(c.bytes)) : static_cast<size_t>(c.bytes);
  char* base = static_cast<char*>(scratch(ctx, int64_t(cudnn_at + db_bytes), what));
  void* ws = c.bytes > 0 ? base : nullptr;
  float* db_parts = db_bytes ? reinterpret_cast<float*>(base + cudnn_at) : nullptr;
  const size_t bytes = static_cast<size_t>(c.bytes);
  const float one = 1.0f, zero = 0.0f;
  switch (dir) {
    case ConvDir::forward:
      CUDNN_CHECK(cudnnConvolutionForward(c.h, &one, c.d.x, f.x, c.d.w, f.w, c.d.conv,
                                          cudnnConvolutionFwdAlgo_t(c.algo), ws, bytes, &zero, c.d.y, f.y));
      if (f.b) CUDNN_CHECK(cudnnAddTensor(c.h, &one, c.d.bias, f.b, &one, c.d.y, f.y));
      break;
    case ConvDir::backward_data:
      CUDNN_CHECK(cudnnConvolutionBackwardData(c.h, &one, c.d.w, f.w, c.d.y, f.dy, c.d.conv,
                                               cudnnConvolutionBwdDataAlgo_t(c.algo), ws, bytes, &zero, c.d.x, f.dx));
      break;
    case ConvDir::backward_filter:
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.h, &one, c.d.x, f.x, c.d.y, f.dy, c.d.conv,
                                                 cudnnConvolutionBwdFilterAlgo_t(c.algo), ws, bytes, &zero, c.d.w,
                                                 f.dw));
      if (own_db)
        conv2d_cuda_bias_gradient(ctx, sh, f.dy, f.db, db_parts);
      else if (f.db)
        CUDNN_CHECK(cudnnConvolutionBackwardBias(c.h, &one, c.d.y, f.dy, &zero, c.d.bias, f.db));
      break;
  }
}

// ---- f32cl rows (see the top): cuDNN's scratch, then the KRSC FP32 filter (or dw) ----

// After cuDNN's: the KRSC filter (or dw), then (backward_filter with a bias) the column sum's partials.
size_t f32cl_filter_bytes(const Conv2dShape& sh) { return pad256(size_t(sh.weight_numel()) * sizeof(float)); }
size_t f32cl_db_bytes(const Conv2dShape& sh, ConvDir dir) {
  return dir == ConvDir::backward_filter && sh.has_bias ? column_sum_bf16_scratch_bytes(sh.N * sh.P * sh.Q, sh.K) : 0;
}
size_t f32cl_own_bytes(const Conv2dShape& sh, ConvDir dir) {
  return f32cl_filter_bytes(sh) + f32cl_db_bytes(sh, dir);
}

// The (K, C/groups, R, S) filter from one layout into the other: KCRS is NCHW of (K, C/groups, R, S),
// KRSC its NHWC.
void permute_filter(const ExecContext& ctx, const Conv2dShape& sh, const float* from, Layout from_layout, float* to,
                    Layout to_layout) {
  const ActDims d{sh.K, sh.C / sh.groups, sh.R, sh.S};
  run_op(Backend::cuda, ConvertForward{&ctx, d, ConstView(from), from_layout, View(to), to_layout});
}

void run_f32cl(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, int algo, const ConvOperands& op,
               const char* what) {
  const ConvOperandsF32 f = f32_operands(op);
  const float one = 1.0f, zero = 0.0f;
  // db: our column sum over dy's N P Q rows (cudnnConvolutionBackwardBias on this layout ran at a
  // few percent of the memory bandwidth: 0.75 ms for mini_xception's 7-channel output at b256).
  const int64_t pixels = sh.N * sh.P * sh.Q;
  const size_t db_bytes = f32cl_db_bytes(sh, dir);
  if (dir == ConvDir::backward_filter && !f.dw) {  // db alone: no convolution
    float* partials = db_bytes ? static_cast<float*>(scratch(ctx, int64_t(db_bytes), what)) : nullptr;
    column_sum_cuda(ctx, pixels, sh.K, f.dy, f.db, partials);
    return;
  }
  const Call c = prepare(ctx, sh, op.math, DType::f32cl, dir, algo, what);
  const size_t bytes = static_cast<size_t>(c.bytes), own_at = pad256(bytes);
  char* base = static_cast<char*>(scratch(ctx, int64_t(own_at + f32cl_own_bytes(sh, dir)), what));
  void* ws = bytes > 0 ? base : nullptr;
  float* krsc = reinterpret_cast<float*>(base + own_at);
  float* partials = db_bytes ? reinterpret_cast<float*>(base + own_at + f32cl_filter_bytes(sh)) : nullptr;
  switch (dir) {
    case ConvDir::forward:
      permute_filter(ctx, sh, f.w, Layout::nchw, krsc, Layout::nhwc);
      CUDNN_CHECK(cudnnConvolutionForward(c.h, &one, c.d.x, f.x, c.d.w, krsc, c.d.conv,
                                          cudnnConvolutionFwdAlgo_t(c.algo), ws, bytes, &zero, c.d.y, f.y));
      if (f.b) CUDNN_CHECK(cudnnAddTensor(c.h, &one, c.d.bias, f.b, &one, c.d.y_rows, f.y));
      break;
    case ConvDir::backward_data:
      permute_filter(ctx, sh, f.w, Layout::nchw, krsc, Layout::nhwc);
      CUDNN_CHECK(cudnnConvolutionBackwardData(c.h, &one, c.d.w, krsc, c.d.y, f.dy, c.d.conv,
                                               cudnnConvolutionBwdDataAlgo_t(c.algo), ws, bytes, &zero, c.d.x, f.dx));
      break;
    case ConvDir::backward_filter:
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.h, &one, c.d.x, f.x, c.d.y, f.dy, c.d.conv,
                                                 cudnnConvolutionBwdFilterAlgo_t(c.algo), ws, bytes, &zero, c.d.w,
                                                 krsc));
      permute_filter(ctx, sh, krsc, Layout::nhwc, f.dw, Layout::nchw);
      if (f.db) column_sum_cuda(ctx, pixels, sh.K, f.dy, f.db, partials);
      break;
  }
}

// ---- bf16 and f16 rows (see the top): one ctx.workspace allocation, cuDNN's scratch first ----


// The 16-bit row's own scratch after cuDNN's: the packed KRSC weights (forward, backward_data), or
// the 16-bit KRSC dw and the column sum's partials for db (backward_filter). bf16 and f16 alike.
size_t bf16_own_bytes(const Conv2dShape& sh, ConvDir dir) {
  static_assert(sizeof(bf16) == sizeof(f16), "one size for both 16-bit types");
  const size_t w16 = pad256(size_t(sh.weight_numel()) * sizeof(bf16));
  return dir == ConvDir::backward_filter ? w16 + column_sum_bf16_scratch_bytes(sh.N * sh.P * sh.Q, sh.K) : w16;
}

// One 16-bit call's workspace: cuDNN's `bytes` at its front, then the row's own pieces.
template <typename T>
struct Scratch16 {
  void* cudnn;      // cuDNN's workspace, null when it takes none
  T* own;           // packed weights (K, R, S, C/groups), or dw in T (backward_filter)
  float* partials;  // the column sum's (backward_filter)
};
template <typename T>
Scratch16<T> scratch16(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, int64_t bytes, const char* what) {
  const size_t own_at = pad256(size_t(bytes)), partials_at = own_at + pad256(size_t(sh.weight_numel()) * sizeof(T));
  char* base = static_cast<char*>(scratch(ctx, int64_t(own_at + bf16_own_bytes(sh, dir)), what));
  return {bytes > 0 ? base : nullptr, reinterpret_cast<T*>(base + own_at),
          dir == ConvDir::backward_filter ? reinterpret_cast<float*>(base + partials_at) : nullptr};
}

// The KRSC T copy of the FP32 master w: the prepacked one given, else packed into `own`.
template <typename T>
const T* krsc_weights(const ExecContext& ctx, const Conv2dShape& sh, const float* w, const PackedWeights16& given,
                      T* own, const char* what) {
  if (const void* p = packed_weights_for(given, DTypeOf<T>::value, Bf16WeightLayout::krsc, what))
    return static_cast<const T*>(p);
  conv2d_pack_weights_cuda(ctx, sh, Bf16WeightLayout::krsc, w, own);
  return own;
}

// A bf16 (T = bf16) or f16 (T = f16) call.
template <typename T>
void run_16(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, int algo, const ConvOperands& op,
            const char* what) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t pixels = sh.N * sh.P * sh.Q;
  const ConvOperands16<T> o = operands16<T>(op);
  if (dir == ConvDir::backward_filter && !o.dw) {  // db alone: no convolution
    column_sum_cuda(ctx, pixels, sh.K, o.dy, o.db, scratch16<T>(ctx, sh, dir, 0, what).partials);
    return;
  }
  const Call c = prepare(ctx, sh, MathMode::fp32, DTypeOf<T>::value, dir, algo, what);
  const Scratch16<T> ws = scratch16<T>(ctx, sh, dir, c.bytes, what);
  const size_t bytes = static_cast<size_t>(c.bytes);
  switch (dir) {
    case ConvDir::forward: {
      const T* w = krsc_weights(ctx, sh, o.w, op.w16, ws.own, what);
      if (o.b) conv2d_cudnn_fill_bias_cuda(ctx, pixels, sh.K, o.b, o.y);
      const float beta = o.b ? 1.0f : 0.0f;  // y = conv + T(b), rounded once by cuDNN
      CUDNN_CHECK(cudnnConvolutionForward(c.h, &one, c.d.x, o.x, c.d.w, w, c.d.conv,
                                          cudnnConvolutionFwdAlgo_t(c.algo), ws.cudnn, bytes, &beta, c.d.y, o.y));
      break;
    }
    case ConvDir::backward_data:
      CUDNN_CHECK(cudnnConvolutionBackwardData(c.h, &one, c.d.w, krsc_weights(ctx, sh, o.w, op.w16, ws.own, what),
                                               c.d.y, o.dy, c.d.conv,
                                               cudnnConvolutionBwdDataAlgo_t(c.algo), ws.cudnn, bytes, &zero, c.d.x,
                                               o.dx));
      break;
    case ConvDir::backward_filter:
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.h, &one, c.d.x, o.x, c.d.y, o.dy, c.d.conv,
                                                 cudnnConvolutionBwdFilterAlgo_t(c.algo), ws.cudnn, bytes, &zero, c.d.w,
                                                 ws.own));
      conv2d_cudnn_unpack_dw_cuda(ctx, sh, ws.own, o.dw);
      if (o.db) column_sum_cuda(ctx, pixels, sh.K, o.dy, o.db, ws.partials);
      break;
  }
}

// Non-throwing: a context without cuDNN, a shape cuDNN cannot describe, or a failed query is "no".
bool can_implement(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, DType dtype, ConvDir dir, int algo) {
  try {
    if (ctx.device != Device::cuda || !ctx.cudnn_handle || !conv2d_cudnn_supports(sh)) return false;
    if (is_16bit(dtype) && !conv2d_weights_bf16_supports(sh, Bf16WeightLayout::krsc)) return false;
    if (dtype == DType::f32cl && sh.groups != 1) return false;  // see the f32cl note at the top
    if (!accurate_enough(dir, algo, sh, dtype)) return false;
    const char* what = "conv2d cudnn can_implement";
    cudnnHandle_t h = cudnn::handle(ctx, what);
    return workspace_of(h, descs(ctx, sh, math, dtype, what), dir, algo) != kUnsupported;
  } catch (const std::exception&) {
    return false;
  }
}

// The default rows: f32 answers from the shape (cuDNN runs every FP32 shape it can describe); f32cl,
// bf16 and f16 ask cuDNN, given a CUDA context, whether any listed algorithm takes the shape (its
// channels-last support is narrower), and answer from the shape for a shape question without one.
bool default_can_implement(const ExecContext& ctx, const Conv2dShape& sh, DType dtype, ConvDir dir, MathMode math) {
  if (!conv2d_cudnn_supports(sh)) return false;
  if (dtype == DType::f32) return true;
  if (is_16bit(dtype) && !conv2d_weights_bf16_supports(sh, Bf16WeightLayout::krsc)) return false;
  if (dtype == DType::f32cl && sh.groups != 1) return false;  // see the f32cl note at the top
  if (ctx.device != Device::cuda || !ctx.cudnn_handle) return true;
  for (int algo = 0; algo < kMaxAlgos; ++algo)
    if (find_algo(dir, algo) && can_implement(ctx, sh, math, dtype, dir, algo)) return true;
  return false;
}

// The row of algorithm `id` of `dir` for `dtype` (-1: the heuristic's choice per call, the default row).
ConvAlgo make_row(ConvDir dir, int id, std::string name, bool deterministic, DType dtype) {
  ConvAlgo a;
  a.name = std::move(name);
  a.backend = Backend::cudnn;
  a.dtype = dtype;
  a.dir = dir;
  a.deterministic = deterministic;
  a.follows_math = !is_16bit(dtype);  // bf16, f16: tensor cores on 16-bit data whatever the call allows
  a.can_implement_fn = [dir, id, dtype](const ExecContext& ctx, const Conv2dShape& sh, MathMode math) {
    // bf16 forward with a bias: cuDNN blends onto a bf16 y, rounding the sum twice (measured: one
    // bf16 ulp off on 1 in 7 outputs), which the bf16 contract forbids; our rows take those. f16:
    // the same blend onto an f16 y rounds twice as well (the reason holds whatever the width).
    if (is_16bit(dtype) && dir == ConvDir::forward && sh.has_bias) return false;
    return id < 0 ? default_can_implement(ctx, sh, dtype, dir, math) : can_implement(ctx, sh, math, dtype, dir, id);
  };
  a.workspace_fn = [dir, id, dtype](const ExecContext& ctx, const Conv2dShape& sh, MathMode math) {
    const Call c = prepare(ctx, sh, math, dtype, dir, id, "conv2d cudnn workspace_bytes");
    const size_t bytes = static_cast<size_t>(c.bytes);
    if (is_16bit(dtype)) return pad256(bytes) + bf16_own_bytes(sh, dir);
    if (dtype == DType::f32cl) return pad256(bytes) + f32cl_own_bytes(sh, dir);
    // FP32/TF32 filter gradient with a bias: our column sum's partials after cuDNN's scratch.
    const size_t db_bytes = dir == ConvDir::backward_filter && sh.has_bias ? own_bias_gradient_bytes(sh) : 0;
    return db_bytes ? pad256(bytes) + db_bytes : bytes;
  };
  if (is_16bit(dtype) && dir != ConvDir::backward_filter)
    a.packed_layout_fn = [](const Conv2dShape&) { return std::optional<Bf16WeightLayout>(Bf16WeightLayout::krsc); };
  a.run = [dir, id, dtype](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
    static const char* const kWhat[4][3] = {
        {"conv2d cudnn forward", "conv2d cudnn backward_data", "conv2d cudnn backward_filter"},
        {"conv2d cudnn forward bf16", "conv2d cudnn backward_data bf16", "conv2d cudnn backward_filter bf16"},
        {"conv2d cudnn forward f16", "conv2d cudnn backward_data f16", "conv2d cudnn backward_filter f16"},
        {"conv2d cudnn forward f32cl", "conv2d cudnn backward_data f32cl", "conv2d cudnn backward_filter f32cl"}};
    const bool nhwc = dtype != DType::f32;
    const char* what = kWhat[dtype == DType::f32cl ? 3 : dtype == DType::f16 ? 2 : nhwc ? 1 : 0][size_t(dir)];
    CNN_CHECK(dir != ConvDir::backward_data || !op.dx.null(), "{}: dx is null", what);
    // the channels-last rows also take db alone (a column sum); the f32 rows always compute dw
    CNN_CHECK(dir != ConvDir::backward_filter || !op.dw.null() || (nhwc && !op.db.null()), "{}: dw is null", what);
    (dtype == DType::f32cl ? run_f32cl : dtype == DType::f16 ? run_16<f16> : nhwc ? run_16<bf16> : run_f32)(
        ctx, sh, dir, id, op, what);
  };
  return a;
}

template <size_t N>
void add_algos(std::vector<ConvAlgo>& out, ConvDir dir, const std::array<AlgoInfo, N>& table, DType dtype) {
  for (const AlgoInfo& info : table)
    out.push_back(make_row(dir, info.id, std::string("cudnn:") + info.name, info.deterministic, dtype));
  // The heuristic's choice depends on the context (deterministic or not), so it is not called so.
  out.push_back(make_row(dir, -1, "cudnn", false, dtype));
}

}  // namespace

bool conv2d_cudnn_supports(const Conv2dShape& sh) {
  if (sh.N < 1 || sh.C < 1 || sh.K < 1 || sh.R < 1 || sh.S < 1 || sh.P < 1 || sh.Q < 1 || sh.groups < 1) return false;
  if (sh.C % sh.groups != 0 || sh.K % sh.groups != 0) return false;
  if (sh.stride_h < 1 || sh.stride_w < 1 || sh.dilation_h < 1 || sh.dilation_w < 1 || sh.pad_h < 0 || sh.pad_w < 0)
    return false;
  return cudnn::fits_nchw(sh.N, sh.C, sh.H, sh.W) && cudnn::fits_nchw(sh.N, sh.K, sh.P, sh.Q) &&
         cudnn::fits_nchw(sh.K, sh.C / sh.groups, sh.R, sh.S);
}

bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh, DType dtype) {
  auto find = [&name](const auto& table) -> const AlgoInfo* {
    for (const AlgoInfo& a : table)
      if (name == std::string("cudnn:") + a.name) return &a;
    return nullptr;
  };
  const AlgoInfo* a = dir == ConvDir::forward         ? find(kForward)
                      : dir == ConvDir::backward_data ? find(kBackwardData)
                                                      : find(kBackwardFilter);
  CNN_CHECK(a, "conv2d_cudnn_algo_accurate: no cuDNN {} algorithm named '{}'", to_string(dir), name);
  return accurate_enough(dir, a->id, sh, dtype);
}

// The f32 rows of every direction, then the bf16, f16 and f32cl ones (a lookup by name alone finds the
// f32 row).
std::vector<ConvAlgo> conv2d_cudnn_algos() {
  std::vector<ConvAlgo> algos;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f32cl}) {
    add_algos(algos, ConvDir::forward, kForward, dtype);
    add_algos(algos, ConvDir::backward_data, kBackwardData, dtype);
    add_algos(algos, ConvDir::backward_filter, kBackwardFilter, dtype);
  }
  return algos;
}

}  // namespace cnn
