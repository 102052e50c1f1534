// Measured FP32 peak and DRAM bandwidth (bench/peak.h). The FMA kernel keeps kChains independent
// dependency chains per thread (enough to hide the FMA latency of 4 cycles at 4 issue slots) and
// launches several blocks per SM; the copy kernel moves float4s through a buffer far larger than L2.
// Trap: a chain whose result is never stored is deleted by the compiler; the sum is written
// (conditionally on a value the host never passes), so the loop must run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "bench/peak.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace cnn {

constexpr int kThreads = 256;
constexpr int kChains = 16;
constexpr int kIters = 8192;
constexpr int kRuns = 5;

static __global__ void __launch_bounds__(kThreads)
    peak_fma_kernel(float a, float c, float sentinel, float* __restrict__ out) {  // out (1)
  float acc[kChains];
#pragma unroll
  for (int j = 0; j < kChains; ++j) acc[j] = float(threadIdx.x + j);
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int j = 0; j < kChains; ++j) acc[j] = fmaf(acc[j], a, c);
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kChains; ++j) sum += acc[j];
  if (sum == sentinel) out[0] = sum;
}

static __global__ void peak_copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Best (shortest) time in ms of kRuns launches after one warm-up, by CUDA events on `stream`.
template <typename Launch>
static double best_ms(cudaStream_t stream, Launch&& launch) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  double best = 1e300;
  try {
    launch();
    for (int r = 0; r < kRuns; ++r) {
      CUDA_CHECK(cudaEventRecord(a, stream));
      launch();
      CUDA_CHECK(cudaEventRecord(b, stream));
      CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, double(ms));
    }
  } catch (...) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    throw;
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return best;
}

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&m_p, bytes)); }
  ~DeviceBuffer() { cudaFree(m_p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return m_p; }

 private:
  void* m_p = nullptr;
};

static double measure_fp32_tflops(cudaStream_t stream, int sms) {
  DeviceBuffer out(sizeof(float));
  const unsigned blocks = unsigned(sms) * 8;
  const double ms = best_ms(stream, [&] {
    peak_fma_kernel<<<blocks, kThreads, 0, stream>>>(0.999999f, 1e-6f, -1.0f, static_cast<float*>(out.get()));
    CUDA_CHECK_LAUNCH("peak_fma_kernel");
  });
  const double flops = 2.0 * kChains * kIters * double(blocks) * kThreads;
  return flops / (ms * 1e-3) / 1e12;
}

static double measure_dram_gb_per_s(cudaStream_t stream, int sms) {
  // 512 MiB each way: far beyond any L2, small enough for any GPU we train on.
  const size_t bytes = size_t(512) << 20;
  DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.get(), 0, bytes, stream));
  const int64_t n = int64_t(bytes / sizeof(float4));
  const unsigned blocks = unsigned(sms) * 16;
  const double ms = best_ms(stream, [&] {
    peak_copy_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float4*>(src.get()),
                                                      static_cast<float4*>(dst.get()), n);
    CUDA_CHECK_LAUNCH("peak_copy_kernel");
  });
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

PeakFigures measure_peak(const ExecContext& ctx) {
  CNN_CHECK(ctx.device == Device::cuda, "measure_peak needs a CUDA context, got a {} one", to_string(ctx.device));
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  PeakFigures f;
  f.fp32_tflops = measure_fp32_tflops(stream, sms);
  f.dram_gb_per_s = measure_dram_gb_per_s(stream, sms);
  return f;
}

}  // namespace cnn
