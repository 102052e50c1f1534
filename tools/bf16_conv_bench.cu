// cnn-bf16-conv-bench: our BF16 tensor-core convolutions (lib/ops/conv2d_igemm_bf16.h) on the conv
// layers of models/vgg_fer.yaml (batch 64, 640, 256) and models/mini_xception.yaml (32, 256), each
// direction: checked against our FP32 CUDA convolution run on the same bf16-rounded inputs
// (relative L2 error; outputs poisoned with NaN first), then timed (CUDA events, median, inputs
// rotated over copies when one set fits in L2) beside cuDNN in BF16 (NCHW and NHWC), FP32 and
// TF32, each with the fastest algorithm cudnnFind*Ex reports. Starts with the BF16 peak of a
// plain cuBLAS GEMM (8192^3). Stops starting layers after --seconds; prints every row, then a
// summary (model totals, NCHW against NHWC, rates of the largest layers against the peak, checks).
// Depthwise and C == 1 layers run our direct BF16 kernels (conv2d_direct_bf16.h).
// Trap: this tool includes cudnn.h and cublas_v2.h itself (a measurement tool, outside lib/'s
// walls); cuDNN's BF16 filter gradient is BF16 while ours is FP32 (what the master weights need).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "ops/cast_bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_direct_bf16.h"
#include "ops/conv2d_igemm_bf16.h"

namespace {

using namespace cnn;

#define CUDNN_OK(expr)                                                                            \
  do {                                                                                            \
    cudnnStatus_t s_ = (expr);                                                                    \
    if (s_ != CUDNN_STATUS_SUCCESS) CNN_THROW("{} failed: {}", #expr, cudnnGetErrorString(s_));   \
  } while (0)
#define CUBLAS_OK(expr)                                                                  \
  do {                                                                                   \
    cublasStatus_t s_ = (expr);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) CNN_THROW("{} failed: {}", #expr, int(s_));         \
  } while (0)

constexpr ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};
const char* short_name(ConvDir d) { return d == ConvDir::forward ? "fwd" : d == ConvDir::backward_data ? "dgrad" : "wgrad"; }

// ---- device helpers ----
__global__ void fill_uniform_kernel(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + uint64_t(i) * 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
}
// acc[0] += sum (a - ref)^2, acc[1] += sum ref^2, acc[2] += count of non-finite a
template <class T>
__global__ void error_kernel(const T* a, const float* ref, int64_t n, double* acc) {
  double num = 0, den = 0, bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v;
    if constexpr (sizeof(T) == 2) v = float_from_bf16_bits(a[i]);
    else v = a[i];
    if (!isfinite(v)) bad += 1;
    else num += double(v - ref[i]) * double(v - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    num += __shfl_down_sync(0xffffffffu, num, o);
    den += __shfl_down_sync(0xffffffffu, den, o);
    bad += __shfl_down_sync(0xffffffffu, bad, o);
  }
  if (threadIdx.x % 32 == 0) atomicAdd(acc, num), atomicAdd(acc + 1, den), atomicAdd(acc + 2, bad);
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  explicit Buf(size_t b) : bytes(b) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(b, 16))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() const { return static_cast<float*>(p); }
  bf16* h() const { return static_cast<bf16*>(p); }
};
using BufPtr = std::unique_ptr<Buf>;
BufPtr buf(size_t bytes) { return std::make_unique<Buf>(bytes); }

// Relative L2 error of a (bf16 or float) against ref; inf where a has a non-finite element.
double rel_error(cudaStream_t st, const void* a, bool a_bf16, const float* ref, int64_t n) {
  static Buf acc(3 * sizeof(double));
  CUDA_CHECK(cudaMemsetAsync(acc.p, 0, 3 * sizeof(double), st));
  if (a_bf16)
    error_kernel<<<1024, 256, 0, st>>>(static_cast<const uint16_t*>(a), ref, n, static_cast<double*>(acc.p));
  else
    error_kernel<<<1024, 256, 0, st>>>(static_cast<const float*>(a), ref, n, static_cast<double*>(acc.p));
  CUDA_CHECK_LAUNCH("error_kernel");
  double h[3];
  CUDA_CHECK(cudaMemcpyAsync(h, acc.p, sizeof h, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  return h[2] > 0 ? INFINITY : std::sqrt(h[0] / std::max(h[1], 1e-300));
}

// Median ms of run(i) (i selects the rotated operand copy) after a warm-up; the repeat count
// aims at `budget_ms` of timed work, within [3, max_reps].
double time_ms(cudaStream_t st, int copies, int max_reps, double budget_ms, const std::function<void(int)>& run) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  run(0);
  CUDA_CHECK(cudaEventRecord(e0, st));
  run(1 % copies);
  CUDA_CHECK(cudaEventRecord(e1, st));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float first = 0;
  CUDA_CHECK(cudaEventElapsedTime(&first, e0, e1));
  const int reps = std::clamp(int(budget_ms / std::max(first, 1e-3f)), 3, max_reps);
  std::vector<cudaEvent_t> ev(2 * size_t(reps));
  for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], st));
    run((i + 2) % copies);
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], st));
  }
  CUDA_CHECK(cudaEventSynchronize(ev.back()));
  std::vector<float> t(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[size_t(reps / 2)];
}

// ---- cuDNN ----
struct CudnnConv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  CudnnConv(const Conv2dShape& s, cudnnDataType_t t, cudnnTensorFormat_t f, cudnnMathType_t math) {
    CUDNN_OK(cudnnCreateTensorDescriptor(&x));
    CUDNN_OK(cudnnCreateTensorDescriptor(&y));
    CUDNN_OK(cudnnCreateFilterDescriptor(&w));
    CUDNN_OK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_OK(cudnnSetTensor4dDescriptor(x, f, t, int(s.N), int(s.C), int(s.H), int(s.W)));
    CUDNN_OK(cudnnSetTensor4dDescriptor(y, f, t, int(s.N), int(s.K), int(s.P), int(s.Q)));
    CUDNN_OK(cudnnSetFilter4dDescriptor(w, t, f, int(s.K), int(s.C / s.groups), int(s.R), int(s.S)));
    CUDNN_OK(cudnnSetConvolution2dDescriptor(conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dilation_h,
                                             s.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_OK(cudnnSetConvolutionGroupCount(conv, s.groups));
    CUDNN_OK(cudnnSetConvolutionMathType(conv, math));
  }
  ~CudnnConv() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

struct CudnnResult {
  double ms = NAN;
  int algo = -1;
};

// cudnnFind*Ex (find(perf, count, &n) on copy 0), then our timing of the fastest algorithm that ran
// within the workspace (run(algo, copy)); ms stays nan where none did.
template <class Perf, int kCount, class Find, class Run>
CudnnResult find_then_time(cudaStream_t st, int copies, size_t ws_bytes, int max_reps, double budget_ms, Find find,
                           Run run) {
  CudnnResult r;
  Perf perf[kCount];
  int n = 0;
  if (find(perf, kCount, &n) != CUDNN_STATUS_SUCCESS) return r;
  for (int i = 0; i < n && r.algo < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_bytes) r.algo = int(perf[i].algo);
  if (r.algo < 0) return r;
  r.ms = time_ms(st, copies, max_reps, budget_ms, [&](int i) { run(r.algo, i); });
  return r;
}

// One cuDNN configuration of one direction. Operands per copy: in1, in2, out in the order of the
// direction's API call (forward x, w -> y; data w, dy -> dx; filter x, dy -> dw).
CudnnResult cudnn_time(cudnnHandle_t h, cudaStream_t st, const CudnnConv& d, ConvDir dir, int copies,
                       const std::vector<const void*>& in1, const std::vector<const void*>& in2,
                       const std::vector<void*>& out, void* ws, size_t wsb, int max_reps, double budget_ms) {
  const float one = 1.0f, zero = 0.0f;
  if (dir == ConvDir::forward)
    return find_then_time<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        st, copies, wsb, max_reps, budget_ms,
        [&](auto* perf, int count, int* n) {
          return cudnnFindConvolutionForwardAlgorithmEx(h, d.x, in1[0], d.w, in2[0], d.conv, d.y, out[0], count, n,
                                                        perf, ws, wsb);
        },
        [&](int algo, int i) {
          CUDNN_OK(cudnnConvolutionForward(h, &one, d.x, in1[i], d.w, in2[i], d.conv, cudnnConvolutionFwdAlgo_t(algo),
                                           ws, wsb, &zero, d.y, out[i]));
        });
  if (dir == ConvDir::backward_data)
    return find_then_time<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        st, copies, wsb, max_reps, budget_ms,
        [&](auto* perf, int count, int* n) {
          return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, in1[0], d.y, in2[0], d.conv, d.x, out[0], count,
                                                             n, perf, ws, wsb);
        },
        [&](int algo, int i) {
          CUDNN_OK(cudnnConvolutionBackwardData(h, &one, d.w, in1[i], d.y, in2[i], d.conv,
                                                cudnnConvolutionBwdDataAlgo_t(algo), ws, wsb, &zero, d.x, out[i]));
        });
  return find_then_time<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      st, copies, wsb, max_reps, budget_ms,
      [&](auto* perf, int count, int* n) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, in1[0], d.y, in2[0], d.conv, d.w, out[0], count,
                                                             n, perf, ws, wsb);
      },
      [&](int algo, int i) {
        CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, d.x, in1[i], d.y, in2[i], d.conv,
                                                cudnnConvolutionBwdFilterAlgo_t(algo), ws, wsb, &zero, d.w, out[i]));
      });
}

// ---- the layers ----
struct Layer {
  std::string model, name;
  int batch;
  Conv2dShape sh;
};

std::vector<Layer> layers() {
  struct Def {
    const char* name;
    int C, H, K, R, stride, pad;
    bool bias;
    int groups = 1;
  };
  // vgg_fer trains on 40x40 crops; mini_xception on 48x48 (`cnn-train validate` lists both).
  const Def vgg[] = {{"conv1a", 1, 40, 64, 3, 1, 1, true},     {"conv1b", 64, 40, 64, 3, 1, 1, true},
                     {"conv2a", 64, 20, 128, 3, 1, 1, true},   {"conv2b", 128, 20, 128, 3, 1, 1, true},
                     {"conv3a", 128, 10, 256, 3, 1, 1, true},  {"conv3b", 256, 10, 256, 3, 1, 1, true},
                     {"conv4a", 256, 5, 512, 3, 1, 1, true},   {"conv4b", 512, 5, 512, 3, 1, 1, true}};
  const Def mini[] = {{"conv1", 1, 48, 8, 3, 1, 0, false},     {"conv2", 8, 46, 8, 3, 1, 0, false},
                      {"m1_res", 8, 44, 16, 1, 2, 0, false},   {"m1_dw1", 8, 44, 8, 3, 1, 1, false, 8},
                      {"m1_pw1", 8, 44, 16, 1, 1, 0, false},   {"m1_dw2", 16, 44, 16, 3, 1, 1, false, 16},
                      {"m1_pw2", 16, 44, 16, 1, 1, 0, false},  {"m2_res", 16, 22, 32, 1, 2, 0, false},
                      {"m2_dw1", 16, 22, 16, 3, 1, 1, false, 16}, {"m2_pw1", 16, 22, 32, 1, 1, 0, false},
                      {"m2_dw2", 32, 22, 32, 3, 1, 1, false, 32}, {"m2_pw2", 32, 22, 32, 1, 1, 0, false},
                      {"m3_res", 32, 11, 64, 1, 2, 0, false},  {"m3_dw1", 32, 11, 32, 3, 1, 1, false, 32},
                      {"m3_pw1", 32, 11, 64, 1, 1, 0, false},  {"m3_dw2", 64, 11, 64, 3, 1, 1, false, 64},
                      {"m3_pw2", 64, 11, 64, 1, 1, 0, false},  {"m4_res", 64, 6, 128, 1, 2, 0, false},
                      {"m4_dw1", 64, 6, 64, 3, 1, 1, false, 64}, {"m4_pw1", 64, 6, 128, 1, 1, 0, false},
                      {"m4_dw2", 128, 6, 128, 3, 1, 1, false, 128}, {"m4_pw2", 128, 6, 128, 1, 1, 0, false},
                      {"conv_out", 128, 3, 7, 3, 1, 1, true}};
  std::vector<Layer> out;
  auto add = [&](const char* model, const auto& defs, int batch) {
    for (const Def& d : defs)
      out.push_back({model, d.name, batch,
                     Conv2dShape::make(batch, d.C, d.H, d.H, d.K, d.R, d.R, d.stride, d.stride, d.pad, d.pad, 1, 1,
                                       d.groups, d.bias)});
  };
  // The issue's four targets first, then vgg_fer 256.
  add("vgg_fer", vgg, 64);
  add("mini_xception", mini, 32);
  add("mini_xception", mini, 256);
  add("vgg_fer", vgg, 640);
  add("vgg_fer", vgg, 256);
  return out;
}

struct Row {
  const Layer* layer;
  ConvDir dir;
  double gflop, ours = NAN, best = NAN, nchw = NAN, nhwc = NAN, fp32 = NAN, tf32 = NAN, err = NAN, limit = 0;
  std::string plan, best_plan;
  int algo_nchw = -1, algo_nhwc = -1;
  bool ok = false;
  double cudnn_bf16() const { return std::fmin(nchw, nhwc); }
};

double geomean(const std::vector<double>& v) {
  double s = 0;
  int n = 0;
  for (double x : v)
    if (std::isfinite(x) && x > 0) s += std::log(x), ++n;
  return n ? std::exp(s / n) : NAN;
}

// TFLOP/s of a BF16 GEMM n x n x n through cuBLAS (FP32 accumulation, BF16 out), random data.
double bf16_peak_tflops(cudaStream_t st, int n) {
  cublasHandle_t h = nullptr;
  CUBLAS_OK(cublasCreate(&h));
  CUBLAS_OK(cublasSetStream(h, st));
  const size_t count = size_t(n) * n;
  Buf tmp(count * 4), a(count * 2), b(count * 2), c(count * 2);
  const ExecContext ctx = [&] {
    ExecContext e;
    e.device = Device::cuda;
    e.cuda_stream = st;
    return e;
  }();
  for (Buf* m : {&a, &b}) {
    fill_uniform_kernel<<<1024, 256, 0, st>>>(tmp.f(), int64_t(count), m == &a ? 1 : 2);
    cast_float_to_bf16_cuda(ctx, int64_t(count), tmp.f(), m->h());
  }
  const float one = 1.0f, zero = 0.0f;
  const double ms = time_ms(st, 1, 10, 1000.0, [&](int) {
    CUBLAS_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &zero,
                           c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  cublasDestroy(h);
  return 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
}

struct Options {
  double seconds = 150, budget_ms = 20;
  int max_reps = 50, peak_n = 8192;
  bool sweep = true;
  std::string filter, csv;
};

// Every direction of one layer: appends 3 rows.
void run_layer(const Layer& L, const Options& o, const ExecContext& ctx, cudnnHandle_t dnn, const Buf& ws,
               int sms, size_t l2, double peak, std::vector<Row>& rows) {
  const cudaStream_t st = static_cast<cudaStream_t>(ctx.cuda_stream);
  const Conv2dShape& s = L.sh;
  const int64_t nx = s.N * s.C * s.H * s.W, nw = s.weight_numel(), ny = s.N * s.K * s.P * s.Q;
  const size_t footprint = 2 * size_t(2 * nx + 2 * ny + nw) + 4 * size_t(nw);
  const int copies = int(std::clamp<size_t>((3 * l2 + footprint - 1) / footprint, 1, 8));
  // FP32 operands hold the bf16-rounded values: the reference and cuDNN FP32 see what BF16 sees.
  BufPtr x32 = buf(nx * 4), w32 = buf(nw * 4), dy32 = buf(ny * 4), b32 = buf(s.K * 4);
  BufPtr yref = buf(ny * 4), dxref = buf(nx * 4), dwref = buf(nw * 4), dbref = buf(s.K * 4), db32 = buf(s.K * 4);
  std::vector<BufPtr> xb, wb, dyb, yb, dxb, dwb, dw32, x32c, w32c, dy32c, y32, dx32, dw32f;
  uint64_t seed = 1000 + rows.size();
  for (auto [p, n] : {std::pair{x32.get(), nx}, {w32.get(), nw}, {dy32.get(), ny}, {b32.get(), int64_t(s.K)}})
    fill_uniform_kernel<<<1024, 256, 0, st>>>(p->f(), n, seed += 7);
  for (int c = 0; c < copies; ++c) {
    xb.push_back(buf(nx * 2)), wb.push_back(buf(nw * 2)), dyb.push_back(buf(ny * 2));
    yb.push_back(buf(ny * 2)), dxb.push_back(buf(nx * 2)), dwb.push_back(buf(nw * 2)), dw32.push_back(buf(nw * 4));
    x32c.push_back(buf(nx * 4)), w32c.push_back(buf(nw * 4)), dy32c.push_back(buf(ny * 4));
    y32.push_back(buf(ny * 4)), dx32.push_back(buf(nx * 4)), dw32f.push_back(buf(nw * 4));
    cast_float_to_bf16_cuda(ctx, nx, x32->f(), xb[c]->h());
    cast_float_to_bf16_cuda(ctx, nw, w32->f(), wb[c]->h());
    cast_float_to_bf16_cuda(ctx, ny, dy32->f(), dyb[c]->h());
    cast_bf16_to_float_cuda(ctx, nx, xb[c]->h(), x32c[c]->f());
    cast_bf16_to_float_cuda(ctx, nw, wb[c]->h(), w32c[c]->f());
    cast_bf16_to_float_cuda(ctx, ny, dyb[c]->h(), dy32c[c]->f());
  }
  const float* bias = s.has_bias ? b32->f() : nullptr;
  conv2d_forward_cuda(ctx, s, x32c[0]->f(), w32c[0]->f(), bias, yref->f());
  conv2d_backward_cuda(ctx, s, x32c[0]->f(), w32c[0]->f(), dy32c[0]->f(), dxref->f(), dwref->f(), dbref->f());
  CUDA_CHECK(cudaStreamSynchronize(st));

  auto ptrs = [&](const std::vector<BufPtr>& v) {
    std::vector<void*> out;
    for (const BufPtr& b : v) out.push_back(b->p);
    return out;
  };
  auto cptrs = [&](const std::vector<BufPtr>& v) {
    std::vector<const void*> out;
    for (const BufPtr& b : v) out.push_back(b->p);
    return out;
  };
  for (ConvDir dir : kDirs) {
    Row r;
    r.layer = &L;
    r.dir = dir;
    r.gflop = s.flops_forward() / 1e9;
    try {
      // Filters that read one input channel (depthwise, C == 1) run the direct kernels (plan null);
      // C == 1 layers also sweep the implicit GEMM's tiles, depthwise ones have no GEMM.
      auto ours = [&](const IgemmBf16Plan* plan, int i) {
        float* db_out = s.has_bias ? db32->f() : nullptr;
        if (dir == ConvDir::forward)
          plan ? conv2d_forward_igemm_bf16_cuda(ctx, s, xb[i]->h(), wb[i]->h(), bias, yb[i]->h(), plan)
               : conv2d_forward_direct_bf16_cuda(ctx, s, xb[i]->h(), wb[i]->h(), bias, yb[i]->h());
        else if (dir == ConvDir::backward_data)
          plan ? conv2d_backward_data_igemm_bf16_cuda(ctx, s, wb[i]->h(), dyb[i]->h(), dxb[i]->h(), plan)
               : conv2d_backward_data_direct_bf16_cuda(ctx, s, wb[i]->h(), dyb[i]->h(), dxb[i]->h());
        else
          plan ? conv2d_backward_filter_igemm_bf16_cuda(ctx, s, xb[i]->h(), dyb[i]->h(), dw32[i]->f(), db_out,
                                                        plan)
               : conv2d_backward_filter_direct_bf16_cuda(ctx, s, xb[i]->h(), dyb[i]->h(), dw32[i]->f(), db_out);
      };
      const bool direct = conv2d_direct_bf16_can_implement(s), gemm = conv2d_igemm_bf16_can_implement(s);
      const IgemmBf16Plan chosen = conv2d_igemm_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes);
      const IgemmBf16Plan* plan = direct ? nullptr : &chosen;
      auto plan_name = [&](const IgemmBf16Plan* p) {
        return p ? conv2d_igemm_bf16_tile_name(p->tile) + "/" +
                       std::to_string(conv2d_igemm_bf16_effective_splits(s, dir, *p))
                 : std::string("direct");
      };
      r.plan = plan_name(plan);
      const Buf& out0 = dir == ConvDir::forward ? *yb[0] : dir == ConvDir::backward_data ? *dxb[0] : *dw32[0];
      CUDA_CHECK(cudaMemsetAsync(out0.p, 0xff, out0.bytes, st));
      CUDA_CHECK(cudaMemsetAsync(db32->p, 0xff, db32->bytes, st));
      ours(plan, 0);
      if (dir == ConvDir::forward) r.err = rel_error(st, out0.p, true, yref->f(), ny), r.limit = 1e-2;
      if (dir == ConvDir::backward_data) r.err = rel_error(st, out0.p, true, dxref->f(), nx), r.limit = 1e-2;
      if (dir == ConvDir::backward_filter) {
        r.err = rel_error(st, out0.p, false, dwref->f(), nw), r.limit = 1e-3;
        if (s.has_bias) r.err = std::fmax(r.err, rel_error(st, db32->p, false, dbref->f(), s.K));
      }
      r.ok = r.err <= r.limit;
      r.ours = time_ms(st, copies, o.max_reps, o.budget_ms, [&](int i) { ours(plan, i); });
      r.best = r.ours, r.best_plan = r.plan;
      for (int t = 0; o.sweep && gemm && t < kIgemmBf16Tiles; ++t)
        for (int one_split = 0; one_split < 2; ++one_split) {
          IgemmBf16Plan p = conv2d_igemm_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes, t);
          if (one_split) {
            if (p.splits == 1) continue;
            p.splits = 1;
          }
          if (plan && p.tile == plan->tile && p.splits == plan->splits) continue;
          const double ms = time_ms(st, copies, o.max_reps, o.budget_ms, [&](int i) { ours(&p, i); });
          if (ms < r.best) r.best = ms, r.best_plan = plan_name(&p);
        }
      // cuDNN: operands in the order of the direction's API call.
      const bool fwd = dir == ConvDir::forward, dgrad = dir == ConvDir::backward_data;
      const auto in1b = cptrs(fwd ? xb : dgrad ? wb : xb), in2b = cptrs(fwd ? wb : dyb);
      const auto outb = ptrs(fwd ? yb : dgrad ? dxb : dwb);
      const auto in1f = cptrs(fwd ? x32c : dgrad ? w32c : x32c), in2f = cptrs(fwd ? w32c : dy32c);
      const auto outf = ptrs(fwd ? y32 : dgrad ? dx32 : dw32f);
      // A configuration cuDNN refuses (or fails in) is reported as nan and the run goes on.
      auto run_cudnn = [&](cudnnDataType_t t, cudnnTensorFormat_t f, cudnnMathType_t m, int* algo) {
        try {
          const CudnnConv d(s, t, f, m);
          const bool b16 = t == CUDNN_DATA_BFLOAT16;
          const CudnnResult res = cudnn_time(dnn, st, d, dir, copies, b16 ? in1b : in1f, b16 ? in2b : in2f,
                                             b16 ? outb : outf, ws.p, ws.bytes, o.max_reps, o.budget_ms);
          if (algo) *algo = res.algo;
          return res.ms;
        } catch (const Error& e) {
          std::fprintf(stderr, "cudnn %s %s: %s\n", L.name.c_str(), short_name(dir), e.what());
          return double(NAN);
        }
      };
      r.nchw = run_cudnn(CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, CUDNN_TENSOR_OP_MATH, &r.algo_nchw);
      r.nhwc = run_cudnn(CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH, &r.algo_nhwc);
      r.fp32 = run_cudnn(CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH, nullptr);
      r.tf32 = run_cudnn(CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_DEFAULT_MATH, nullptr);
      CUDA_CHECK(cudaStreamSynchronize(st));
      const double tflops = r.gflop / r.ours;
      std::printf("%-13s b%-3d %-8s %-5s %6.2f GF | ours %7.4f %-9s best %7.4f %-9s | cudnn nchw %7.4f nhwc %7.4f "
                  "| fp32 %7.4f tf32 %7.4f | %5.0f TF/s %3.0f%% | cudnn/ours %5.2f | err %.1e %s\n",
                  L.model.c_str(), L.batch, L.name.c_str(), short_name(dir), r.gflop, r.ours, r.plan.c_str(), r.best,
                  r.best_plan.c_str(), r.nchw, r.nhwc, r.fp32, r.tf32, tflops, 100 * tflops / peak,
                  r.cudnn_bf16() / r.ours, r.err, r.ok ? "ok" : "FAIL");
      std::fflush(stdout);
    } catch (const Error& e) {  // a refused or failed call fails its row; the run goes on
      std::printf("%-13s b%-3d %-8s %-5s FAIL: %s\n", L.model.c_str(), L.batch, L.name.c_str(), short_name(dir),
                  e.what());
      r.ok = false;
    }
    rows.push_back(r);
  }
}

void write_csv(const std::string& path, const std::vector<Row>& rows, double peak) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) CNN_THROW("cannot write {}", path);
  std::fprintf(f, "model,batch,layer,N,C,H,W,K,R,S,stride,pad,dir,gflop,ours_ms,ours_plan,ours_best_ms,ours_best_plan,"
                  "cudnn_bf16_nchw_ms,cudnn_nchw_algo,cudnn_bf16_nhwc_ms,cudnn_nhwc_algo,cudnn_fp32_ms,cudnn_tf32_ms,"
                  "ours_tflops,bf16_peak_tflops,err,err_limit,ok\n");
  for (const Row& r : rows) {
    const Conv2dShape& s = r.layer->sh;
    std::fprintf(f, "%s,%d,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%d,%s,%.4f,%.5f,%s,%.5f,%s,%.5f,%d,%.5f,%d,%.5f,"
                    "%.5f,%.2f,%.1f,%.3e,%.0e,%d\n",
                 r.layer->model.c_str(), r.layer->batch, r.layer->name.c_str(), (long long)s.N, (long long)s.C,
                 (long long)s.H, (long long)s.W, (long long)s.K, (long long)s.R, (long long)s.S, s.stride_h, s.pad_h,
                 to_string(r.dir), r.gflop, r.ours, r.plan.c_str(), r.best, r.best_plan.c_str(), r.nchw, r.algo_nchw,
                 r.nhwc, r.algo_nhwc, r.fp32, r.tf32, r.gflop / r.ours, peak, r.err, r.limit, r.ok ? 1 : 0);
  }
  std::fclose(f);
}

void print_summary(const std::vector<Row>& rows, double peak, int skipped) {
  std::printf("\n== summary (BF16 peak %.0f TFLOP/s; times in ms, summed over a model's conv layers and directions,\n"
              "   the first layer's dgrad left out; cudnn best = the faster of NCHW and NHWC per row)\n", peak);
  std::printf("%-14s %5s | %8s %8s | %9s %9s %9s | %8s %8s | %s\n", "model", "batch", "ours", "ours*", "cudnn nchw",
              "nhwc", "best", "fp32", "tf32", "cudnn best / ours");
  std::map<std::pair<std::string, int>, std::array<double, 7>> sums;
  std::vector<std::pair<std::string, int>> order;
  for (const Row& r : rows) {
    if (r.dir == ConvDir::backward_data && r.layer->sh.C == 1) continue;
    const auto key = std::make_pair(r.layer->model, r.layer->batch);
    if (!sums.count(key)) order.push_back(key), sums[key] = {};
    auto& a = sums[key];
    const double v[7] = {r.ours, r.best, r.nchw, r.nhwc, r.cudnn_bf16(), r.fp32, r.tf32};
    for (int i = 0; i < 7; ++i) a[i] += v[i];
  }
  for (const auto& key : order) {
    const auto& a = sums[key];
    std::printf("%-14s %5d | %8.3f %8.3f | %9.3f %9.3f %9.3f | %8.3f %8.3f | %.2f\n", key.first.c_str(), key.second,
                a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[4] / a[0]);
  }
  std::printf("(ours* = the fastest plan of the sweep per row; ours = the cost model's plan)\n");
  std::printf("\n== cuDNN BF16 layout: geometric mean of NCHW time / NHWC time (> 1: NHWC faster)\n");
  for (ConvDir d : kDirs) {
    std::vector<double> q, big;
    for (const Row& r : rows)
      if (r.dir == d) {
        q.push_back(r.nchw / r.nhwc);
        if (r.gflop * (r.layer->sh.N > 0) > 10) big.push_back(r.nchw / r.nhwc);
      }
    std::printf("%-6s all %.2f (%zu rows), rows over 10 GFLOP %.2f (%zu)\n", short_name(d), geomean(q), q.size(),
                geomean(big), big.size());
  }
  std::printf("\n== largest vgg_fer layers: ours TFLOP/s (%% of peak) | cuDNN BF16 NHWC TFLOP/s\n");
  for (const Row& r : rows)
    if (r.layer->model == "vgg_fer" && (r.layer->batch == 640 || r.layer->batch == 64) &&
        r.layer->name.back() == 'b')
      std::printf("%-7s b%-3d %-5s ours %5.0f (%2.0f%%) best plan %5.0f | cudnn nhwc %5.0f nchw %5.0f\n",
                  r.layer->name.c_str(), r.layer->batch, short_name(r.dir), r.gflop / r.ours,
                  100 * r.gflop / r.ours / peak, r.gflop / r.best, r.gflop / r.nhwc, r.gflop / r.nchw);
  std::vector<double> heur;
  int far = 0, failed = 0, passed = 0;
  for (const Row& r : rows) {
    heur.push_back(r.ours / r.best);
    far += r.ours > 1.2 * r.best;
    (r.ok ? passed : failed)++;
  }
  std::printf("\n== plan choice: geometric mean ours / ours* %.3f, %d rows more than 1.2x off\n", geomean(heur), far);
  for (const Row& r : rows)
    if (!r.ok)
      std::printf("FAIL %s b%d %s %s: err %.3e > %.0e\n", r.layer->model.c_str(), r.layer->batch,
                  r.layer->name.c_str(), short_name(r.dir), r.err, r.limit);
  if (skipped) std::printf("%d layers skipped: over the time box\n", skipped);
  std::printf("checks: %d passed, %d failed\n", passed, failed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"BF16 tensor-core convolutions against cuDNN on the FER models' conv layers"};
  Options o;
  app.add_option("--seconds", o.seconds, "start no layer after this many seconds")->check(CLI::PositiveNumber);
  app.add_option("--csv", o.csv, "write every row to this CSV file");
  app.add_option("--filter", o.filter, "only layers whose 'model/batch/layer' contains this text");
  app.add_option("--max-repeats", o.max_reps, "timed runs per measurement at most")->check(CLI::PositiveNumber);
  app.add_option("--budget-ms", o.budget_ms, "timed work per measurement (sets the repeats)")->check(CLI::PositiveNumber);
  app.add_option("--peak-n", o.peak_n, "size of the cuBLAS BF16 GEMM for the peak")->check(CLI::PositiveNumber);
  app.add_flag("!--no-sweep", o.sweep, "time only the cost model's plan, not every tile");
  bool list = false;
  app.add_flag("--list", list, "print the layers (and the cost model's plans for 132 SMs) and exit");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    for (const Layer& L : layers()) {
      std::printf("%s/%d/%s: %s |", L.model.c_str(), L.batch, L.name.c_str(), L.sh.to_string().c_str());
      for (ConvDir d : kDirs) {
        const IgemmBf16Plan p = conv2d_igemm_bf16_choose_plan(L.sh, d, 132, size_t(1) << 30);
        std::printf(" %s %s/%d", short_name(d),
                    conv2d_direct_bf16_can_implement(L.sh) ? "direct" : conv2d_igemm_bf16_tile_name(p.tile).c_str(),
                    conv2d_direct_bf16_can_implement(L.sh) ? 0 : p.splits);
      }
      std::printf("\n");
    }
    return 0;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    CudaContext cuda;
    const ExecContext& ctx = cuda.ctx();
    const auto st = static_cast<cudaStream_t>(ctx.cuda_stream);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda.device()));
    int runtime = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf("device %s, %d SMs, L2 %d MB, CUDA runtime %d, cuDNN %zu\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, runtime, cudnnGetVersion());
    const double peak = bf16_peak_tflops(st, o.peak_n);
    std::printf("BF16 peak: cuBLAS GemmEx %d^3 (bf16 in/out, fp32 accumulate): %.1f TFLOP/s\n", o.peak_n, peak);
    cudnnHandle_t dnn = nullptr;
    CUDNN_OK(cudnnCreate(&dnn));
    CUDNN_OK(cudnnSetStream(dnn, st));
    const Buf ws(size_t(1) << 30);
    std::vector<Row> rows;
    const std::vector<Layer> all = layers();
    int skipped = 0, failed_layers = 0;
    for (const Layer& L : all) {
      const std::string id = fmt::format("{}/{}/{}", L.model, L.batch, L.name);
      if (!o.filter.empty() && id.find(o.filter) == std::string::npos) continue;
      if (elapsed() > o.seconds) {
        ++skipped;
        continue;
      }
      try {
        run_layer(L, o, ctx, dnn, ws, prop.multiProcessorCount, size_t(prop.l2CacheSize), peak, rows);
      } catch (const Error& e) {  // its operands or reference failed: count it, go on
        std::printf("%s FAIL: %s\n", id.c_str(), e.what());
        ++failed_layers;
      }
      if (!o.csv.empty()) write_csv(o.csv, rows, peak);  // after every layer: a crash keeps what was measured
    }
    print_summary(rows, peak, skipped);
    std::printf("wall %.1f s\n", elapsed());
    cudnnDestroy(dnn);
    if (failed_layers) std::printf("%d layers failed before their rows\n", failed_layers);
    for (const Row& r : rows)
      if (!r.ok) return 1;
    if (failed_layers) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn-bf16-conv-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
