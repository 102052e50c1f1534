// Conv2d through cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter,
// bias by cudnnAddTensor and cudnnConvolutionBackwardBias) on FP32 data. The call's MathMode sets the
// descriptor's math type: fp32 -> CUDNN_FMA_MATH, so no algorithm may use tensor cores (bit for bit
// what this file did before precisions existed); tf32 -> CUDNN_DEFAULT_MATH, which lets cuDNN run
// FP32 convolutions on TF32 tensor cores (sm_80+; FP32 accumulation). Every algorithm of every
// direction is one ConvAlgo (follows_math: the same row serves both modes); the "cudnn" default rows take the one cuDNN's heuristic ranks first among those that
// fit the workspace limit and that we measured accurate (accurate_enough: no WINOGRAD_NONFUSED on
// any filter).
// Trap: an algorithm "can implement" a shape exactly when cuDNN's workspace query for it succeeds;
// descriptors, those answers and the heuristic's choice are memoised per shape and math mode in the
// context (the two math types may support, rank and size the algorithms differently).
#include <cudnn.h>

#include <array>
#include <string>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

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
// the heuristic's choice and a run by name).
bool accurate_enough(ConvDir dir, int id, const Conv2dShape&) { return !is_winograd_nonfused(dir, id); }

// Descriptors of one shape, cuDNN's workspace answers per direction and algorithm, and the
// heuristic's choice per direction for the (limit, deterministic) it was made under.
struct ConvDescs {
  cudnn::TensorDescriptor x, y, bias;  // x (N, C, H, W), y/dy (N, K, P, Q), bias/db (1, K, 1, 1)
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

cudnn::ShapeKey key_of(const Conv2dShape& sh, MathMode math) {
  return {{sh.N, sh.C, sh.H, sh.W, sh.K, sh.R, sh.S, sh.stride_h, sh.stride_w, sh.pad_h, sh.pad_w, sh.dilation_h,
           sh.dilation_w, sh.groups, sh.P, sh.Q, int64_t(math)}};
}

void make_descs(ConvDescs& d, const Conv2dShape& sh, MathMode math, const char* what) {
  CNN_CHECK(conv2d_cudnn_supports(sh), "{}: cuDNN cannot take this shape ({})", what, sh.to_string());
  cudnn::set_nchw(d.x, sh.N, sh.C, sh.H, sh.W, what);
  cudnn::set_nchw(d.y, sh.N, sh.K, sh.P, sh.Q, what);
  cudnn::set_nchw(d.bias, 1, sh.K, 1, 1, what);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(sh.K),
                                         static_cast<int>(sh.C / sh.groups), static_cast<int>(sh.R),
                                         static_cast<int>(sh.S)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, sh.pad_h, sh.pad_w, sh.stride_h, sh.stride_w, sh.dilation_h,
                                              sh.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, sh.groups));
  // fp32: FMA only. tf32: CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for FP32 data on sm_80+.
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, math == MathMode::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int n = 0, k = 0, p = 0, q = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &k, &p, &q));
  CNN_CHECK(n == sh.N && k == sh.K && p == sh.P && q == sh.Q, "{}: cuDNN computes output ({}, {}, {}, {}) for {}", what,
            n, k, p, q, sh.to_string());
  for (auto& per_dir : d.workspace) per_dir.fill(kUnasked);
}

ConvDescs& descs(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, const char* what) {
  cudnn::handle(ctx, what);  // validates the context before its State is used
  return cudnn::slot<ConvCache>(ctx, cudnn::Slot::conv2d).memo.get(key_of(sh, math), [&](ConvDescs& d) {
    make_descs(d, sh, math, what);
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
    if (!accurate_enough(dir, algo, sh)) continue;
    const int64_t bytes = workspace_of(h, d, dir, algo);
    if (bytes == kUnsupported || static_cast<size_t>(bytes) > ctx.workspace_limit_bytes) continue;
    c = {true, ctx.workspace_limit_bytes, ctx.deterministic, algo};
    return algo;
  }
  // The heuristic ranks only what it expects to be fast; any other algorithm of this direction
  // that cuDNN accepts (still cuDNN, in the same math) beats failing the layer.
  for (int algo = 0; algo < kMaxAlgos; ++algo) {
    if (!find_algo(dir, algo) || (ctx.deterministic && !algo_deterministic(dir, algo))) continue;
    if (!accurate_enough(dir, algo, sh)) continue;
    const int64_t bytes = workspace_of(h, d, dir, algo);
    if (bytes == kUnsupported || static_cast<size_t>(bytes) > ctx.workspace_limit_bytes) continue;
    c = {true, ctx.workspace_limit_bytes, ctx.deterministic, algo};
    return algo;
  }
  CNN_THROW("{}: cuDNN has no {}{} algorithm within the workspace limit of {} bytes for {}", what,
            ctx.deterministic ? "deterministic " : "", to_string(dir), ctx.workspace_limit_bytes, sh.to_string());
}

void* scratch(const ExecContext& ctx, int64_t bytes, const char* what) {
  if (bytes <= 0) return nullptr;
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "{}: the context has no device workspace", what);
  return ctx.workspace->get((static_cast<size_t>(bytes) + sizeof(float) - 1) / sizeof(float));
}

int64_t usable_workspace(cudnnHandle_t h, ConvDescs& d, ConvDir dir, int algo, const Conv2dShape& sh,
                         const char* what) {
  if (!accurate_enough(dir, algo, sh))
    CNN_THROW("{}: cuDNN {} algorithm cudnn:{} is refused for {} (measured too inaccurate above 3x3 filters)", what,
              to_string(dir), find_algo(dir, algo) ? find_algo(dir, algo)->name : "?", sh.to_string());
  const int64_t bytes = workspace_of(h, d, dir, algo);
  if (bytes == kUnsupported)
    CNN_THROW("{}: cuDNN {} algorithm cudnn:{} does not support {}", what, to_string(dir),
              find_algo(dir, algo) ? find_algo(dir, algo)->name : "?", sh.to_string());
  return bytes;
}

void run_forward(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, int algo, const float* x,
                 const float* w, const float* b, float* y, const char* what) {
  cudnnHandle_t h = cudnn::handle(ctx, what);
  ConvDescs& d = descs(ctx, sh, math, what);
  if (algo < 0) algo = choose(ctx, h, d, ConvDir::forward, sh, what);
  const int64_t bytes = usable_workspace(h, d, ConvDir::forward, algo, sh, what);
  void* ws = scratch(ctx, bytes, what);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv, cudnnConvolutionFwdAlgo_t(algo), ws,
                                      static_cast<size_t>(bytes), &zero, d.y, y));
  if (b) CUDNN_CHECK(cudnnAddTensor(h, &one, d.bias, b, &one, d.y, y));
}

void run_backward_data(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, int algo, const float* w,
                       const float* dy, float* dx, const char* what) {
  cudnnHandle_t h = cudnn::handle(ctx, what);
  ConvDescs& d = descs(ctx, sh, math, what);
  if (algo < 0) algo = choose(ctx, h, d, ConvDir::backward_data, sh, what);
  const int64_t bytes = usable_workspace(h, d, ConvDir::backward_data, algo, sh, what);
  void* ws = scratch(ctx, bytes, what);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w, w, d.y, dy, d.conv, cudnnConvolutionBwdDataAlgo_t(algo), ws,
                                           static_cast<size_t>(bytes), &zero, d.x, dx));
}

// dw through `algo` when dw is given (a negative algo: the heuristic's), db when given.
void run_backward_filter(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, int algo, const float* x,
                         const float* dy, float* dw, float* db, const char* what) {
  cudnnHandle_t h = cudnn::handle(ctx, what);
  ConvDescs& d = descs(ctx, sh, math, what);
  const float one = 1.0f, zero = 0.0f;
  if (dw) {
    if (algo < 0) algo = choose(ctx, h, d, ConvDir::backward_filter, sh, what);
    const int64_t bytes = usable_workspace(h, d, ConvDir::backward_filter, algo, sh, what);
    void* ws = scratch(ctx, bytes, what);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x, x, d.y, dy, d.conv, cudnnConvolutionBwdFilterAlgo_t(algo),
                                               ws, static_cast<size_t>(bytes), &zero, d.w, dw));
  }
  if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, d.y, dy, &zero, d.bias, db));
}

// Non-throwing: a context without cuDNN, a shape cuDNN cannot describe, or a failed query is "no".
bool can_implement(const ExecContext& ctx, const Conv2dShape& sh, MathMode math, ConvDir dir, int algo) {
  try {
    if (ctx.device != Device::cuda || !ctx.cudnn_handle || !conv2d_cudnn_supports(sh)) return false;
    if (!accurate_enough(dir, algo, sh)) return false;
    const char* what = "conv2d cudnn can_implement";
    cudnnHandle_t h = cudnn::handle(ctx, what);
    return workspace_of(h, descs(ctx, sh, math, what), dir, algo) != kUnsupported;
  } catch (const std::exception&) {
    return false;
  }
}

// The rows of algorithm `id` of `dir` (-1: the heuristic's choice per call, the default row).
ConvAlgo make_row(ConvDir dir, int id, std::string name, bool deterministic) {
  ConvAlgo a;
  a.name = std::move(name);
  a.backend = Backend::cudnn;
  a.dir = dir;
  a.deterministic = deterministic;
  a.follows_math = true;
  if (id < 0) {
    a.can_implement_fn = [](const ExecContext&, const Conv2dShape& sh, MathMode) { return conv2d_cudnn_supports(sh); };
  } else {
    a.can_implement_fn = [dir, id](const ExecContext& ctx, const Conv2dShape& sh, MathMode math) {
      return can_implement(ctx, sh, math, dir, id);
    };
  }
  a.workspace_fn = [dir, id](const ExecContext& ctx, const Conv2dShape& sh, MathMode math) {
    const char* what = "conv2d cudnn workspace_bytes";
    cudnnHandle_t h = cudnn::handle(ctx, what);
    ConvDescs& d = descs(ctx, sh, math, what);
    const int algo = id < 0 ? choose(ctx, h, d, dir, sh, what) : id;
    return static_cast<size_t>(usable_workspace(h, d, dir, algo, sh, what));
  };
  switch (dir) {
    case ConvDir::forward:
      a.run = [id](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
        const ConvOperandsF32 f = f32_operands(op);
        run_forward(ctx, sh, op.math, id, f.x, f.w, f.b, f.y, "conv2d cudnn forward");
      };
      break;
    case ConvDir::backward_data:
      a.run = [id](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
        const ConvOperandsF32 f = f32_operands(op);
        CNN_CHECK(f.dx, "conv2d cudnn backward_data: dx is null");
        run_backward_data(ctx, sh, op.math, id, f.w, f.dy, f.dx, "conv2d cudnn backward_data");
      };
      break;
    case ConvDir::backward_filter:
      a.run = [id](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
        const ConvOperandsF32 f = f32_operands(op);
        CNN_CHECK(f.dw, "conv2d cudnn backward_filter: dw is null");
        run_backward_filter(ctx, sh, op.math, id, f.x, f.dy, f.dw, f.db, "conv2d cudnn backward_filter");
      };
      break;
  }
  return a;
}

template <size_t N>
void add_algos(std::vector<ConvAlgo>& out, ConvDir dir, const std::array<AlgoInfo, N>& table) {
  for (const AlgoInfo& info : table) out.push_back(make_row(dir, info.id, std::string("cudnn:") + info.name, info.deterministic));
  // The heuristic's choice depends on the context (deterministic or not), so it is not called so.
  out.push_back(make_row(dir, -1, "cudnn", false));
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

bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh) {
  auto find = [&name](const auto& table) -> const AlgoInfo* {
    for (const AlgoInfo& a : table)
      if (name == std::string("cudnn:") + a.name) return &a;
    return nullptr;
  };
  const AlgoInfo* a = dir == ConvDir::forward         ? find(kForward)
                      : dir == ConvDir::backward_data ? find(kBackwardData)
                                                      : find(kBackwardFilter);
  CNN_CHECK(a, "conv2d_cudnn_algo_accurate: no cuDNN {} algorithm named '{}'", to_string(dir), name);
  return accurate_enough(dir, a->id, sh);
}

std::vector<ConvAlgo> conv2d_cudnn_algos() {
  std::vector<ConvAlgo> algos;
  add_algos(algos, ConvDir::forward, kForward);
  add_algos(algos, ConvDir::backward_data, kBackwardData);
  add_algos(algos, ConvDir::backward_filter, kBackwardFilter);
  return algos;
}

}  // namespace cnn
