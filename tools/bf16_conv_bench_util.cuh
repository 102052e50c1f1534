// Measurement helpers of cnn-bf16-conv-bench (bf16_conv_bench.cu): random fills, the relative L2
// error with NaN poisoning, NCHW <-> NHWC permutes, device buffers, event timing (median), cuDNN's
// find-then-time for each direction and layout, and the cuBLAS BF16 peak.
// Trap: this header includes cudnn.h and cublas_v2.h (a measurement tool, outside lib/'s walls).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/exec_context.h"
#include "ops/cast_bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn::bench_bf16 {

#define CUDNN_OK(expr)                                                                          \
  do {                                                                                          \
    cudnnStatus_t s_ = (expr);                                                                  \
    if (s_ != CUDNN_STATUS_SUCCESS) CNN_THROW("{} failed: {}", #expr, cudnnGetErrorString(s_)); \
  } while (0)
#define CUBLAS_OK(expr)                                                          \
  do {                                                                           \
    cublasStatus_t s_ = (expr);                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) CNN_THROW("{} failed: {}", #expr, int(s_)); \
  } while (0)

constexpr ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};
inline const char* short_name(ConvDir d) {
  return d == ConvDir::forward ? "fwd" : d == ConvDir::backward_data ? "dgrad" : "wgrad";
}

// ---- device helpers ----
static __global__ void fill_uniform_kernel(float* p, int64_t n, uint64_t seed) {
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
    if constexpr (sizeof(T) == 2)
      v = float_from_bf16_bits(a[i]);
    else
      v = a[i];
    if (!isfinite(v))
      bad += 1;
    else
      num += double(v - ref[i]) * double(v - ref[i]);
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
inline BufPtr buf(size_t bytes) { return std::make_unique<Buf>(bytes); }

// Relative L2 error of a (bf16 or float) against ref; inf where a has a non-finite element.
inline double rel_error(cudaStream_t st, const void* a, bool a_bf16, const float* ref, int64_t n) {
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
inline double time_ms(cudaStream_t st, int copies, int max_reps, double budget_ms,
                      const std::function<void(int)>& run) {
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
    CUDNN_OK(cudnnSetConvolution2dDescriptor(conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
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
inline CudnnResult find_then_time(cudaStream_t st, int copies, size_t ws_bytes, int max_reps, double budget_ms,
                                  Find find, Run run) {
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
inline CudnnResult cudnn_time(cudnnHandle_t h, cudaStream_t st, const CudnnConv& d, ConvDir dir, int copies,
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
          return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, in1[0], d.y, in2[0], d.conv, d.x, out[0], count, n,
                                                             perf, ws, wsb);
        },
        [&](int algo, int i) {
          CUDNN_OK(cudnnConvolutionBackwardData(h, &one, d.w, in1[i], d.y, in2[i], d.conv,
                                                cudnnConvolutionBwdDataAlgo_t(algo), ws, wsb, &zero, d.x, out[i]));
        });
  return find_then_time<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      st, copies, wsb, max_reps, budget_ms,
      [&](auto* perf, int count, int* n) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, in1[0], d.y, in2[0], d.conv, d.w, out[0], count, n,
                                                             perf, ws, wsb);
      },
      [&](int algo, int i) {
        CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, d.x, in1[i], d.y, in2[i], d.conv,
                                                cudnnConvolutionBwdFilterAlgo_t(algo), ws, wsb, &zero, d.w, out[i]));
      });
}

// TFLOP/s of a BF16 GEMM n x n x n through cuBLAS (FP32 accumulation, BF16 out), random data.
inline double bf16_peak_tflops(cudaStream_t st, int n) {
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

// v (N, C, HW) -> (N, HW, C) on the device (element by element: the tool's setup, not timed).
template <class T>
__global__ void nchw_to_nhwc_kernel(const T* __restrict__ in, int64_t N, int64_t C, int64_t HW, T* __restrict__ out) {
  const int64_t total = N * C * HW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, nhw = i / C, hw = nhw % HW, n = nhw / HW;
    out[i] = in[(n * C + c) * HW + hw];
  }
}
template <class T>
void nchw_to_nhwc(cudaStream_t st, const T* in, int64_t N, int64_t C, int64_t HW, T* out) {
  nchw_to_nhwc_kernel<<<1024, 256, 0, st>>>(in, N, C, HW, out);
  CUDA_CHECK_LAUNCH("nchw_to_nhwc_kernel");
}

}  // namespace cnn::bench_bf16
