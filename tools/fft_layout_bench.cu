// cnn-fft-layout-bench: the measurements behind the FFT convolution's data layout
// (lib/ops/conv2d_fft_cuda.cu). For the spectra of the convnet-benchmarks layers it times, on one
// GPU (CUDA events, median of --repeats after --warmup):
//   - cuFFT 2-D R2C and C2R over contiguous planes and spectra (the default layout), and the same
//     transforms writing or reading frequency-major spectra (cuFFT's advanced layout, stride =
//     planes), which is what the per-frequency matrix products want;
//   - our complex transpose between the two layouts (conv2d_cuda_fft_transpose);
//   - cublasCgemmStridedBatched over the frequencies at the layer's product sizes (FP32, pedantic
//     math as in our context), with its TFLOP/s.
// Usage: cnn-fft-layout-bench [--warmup N] [--repeats N]. Prints one line per case.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "graph/timer.h"
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "ops/conv2d_strategies.h"

namespace {

using namespace cnn;

void check_cufft(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) CNN_THROW("{} failed with cufftResult {}", what, int(r));
}
void check_cublas(cublasStatus_t r, const char* what) {
  if (r != CUBLAS_STATUS_SUCCESS) CNN_THROW("{} failed: {}", what, cublasGetStatusString(r));
}

// One device buffer of `bytes`, zeroed, freed with the object.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    CUDA_CHECK(cudaMalloc(&p, bytes));
    CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(p); }
  void* p = nullptr;
};

struct Plan {
  // Real planes contiguous; spectra contiguous (interleaved = false) or frequency-major.
  Plan(int L, int planes, cufftType type, bool interleaved, cudaStream_t stream) {
    int n[2] = {L, L}, real_embed[2] = {L, L}, spec_embed[2] = {L, L / 2 + 1};
    check_cufft(cufftCreate(&h), "cufftCreate");
    size_t work = 0;
    if (!interleaved)
      check_cufft(cufftMakePlanMany(h, 2, n, nullptr, 1, 0, nullptr, 1, 0, type, planes, &work), "cufftMakePlanMany");
    else if (type == CUFFT_R2C)
      check_cufft(cufftMakePlanMany(h, 2, n, real_embed, 1, L * L, spec_embed, planes, 1, type, planes, &work),
                  "cufftMakePlanMany");
    else
      check_cufft(cufftMakePlanMany(h, 2, n, spec_embed, planes, 1, real_embed, 1, L * L, type, planes, &work),
                  "cufftMakePlanMany");
    check_cufft(cufftSetStream(h, stream), "cufftSetStream");
  }
  ~Plan() { cufftDestroy(h); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  cufftHandle h = 0;
};

// A layer's transform size L x L, the planes of one transform batch, and the per-frequency
// product C (m x n) = op(A) (m x k) B (k x n) of its forward pass.
struct Case {
  const char* name;
  int L, planes, m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"times cuFFT layouts, the FFT convolution's transpose and its per-frequency CGEMMs"};
  int warmup = 2, repeats = 5;
  app.add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed runs; the median is printed")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    CudaContext cuda;
    const ExecContext& ctx = cuda.ctx();
    const auto stream = static_cast<cudaStream_t>(ctx.cuda_stream);
    const auto blas = static_cast<cublasHandle_t>(ctx.cublas_handle);
    cudaStream_t bound = nullptr;  // rebinding would drop the workspace CudaContext gave the handle
    check_cublas(cublasGetStream(blas, &bound), "cublasGetStream");
    if (bound != stream) check_cublas(cublasSetStream(blas, stream), "cublasSetStream");
    // Chunks as conv2d_fft_cuda.cu cuts them at batch 128: L2 34 images, L3 116, L4 128; L1 5 of 3 channels.
    const Case cases[] = {{"L2 forward, x", 64, 34 * 64, 128, 34, 64},
                          {"L3 forward, x", 32, 116 * 128, 128, 116, 128},
                          {"L4 forward, x", 16, 128 * 128, 128, 128, 128},
                          {"L1 forward, x", 128, 5 * 3, 96, 5, 3}};
    auto time = [&](const std::function<void()>& f) { return median_ms(ctx, warmup, repeats, f); };
    for (const Case& c : cases) {
      const int F = c.L * (c.L / 2 + 1);
      const size_t planes = size_t(c.planes);
      DeviceBuffer real(planes * c.L * c.L * sizeof(float)), spec(planes * F * 8), spec2(planes * F * 8);
      const Plan r2c(c.L, c.planes, CUFFT_R2C, false, stream), r2c_fm(c.L, c.planes, CUFFT_R2C, true, stream);
      const Plan c2r(c.L, c.planes, CUFFT_C2R, false, stream), c2r_fm(c.L, c.planes, CUFFT_C2R, true, stream);
      auto r2c_run = [&](const Plan& p) {
        check_cufft(cufftExecR2C(p.h, real.f(), static_cast<cufftComplex*>(spec.p)), "cufftExecR2C");
      };
      auto c2r_run = [&](const Plan& p) {
        check_cufft(cufftExecC2R(p.h, static_cast<cufftComplex*>(spec.p), real.f()), "cufftExecC2R");
      };
      const double t_r2c = time([&] { r2c_run(r2c); }), t_r2c_fm = time([&] { r2c_run(r2c_fm); });
      const double t_c2r = time([&] { c2r_run(c2r); }), t_c2r_fm = time([&] { c2r_run(c2r_fm); });
      const double t_transpose = time([&] { conv2d_cuda_fft_transpose(ctx.cuda_stream, spec.f(), spec2.f(), c.planes, F); });
      DeviceBuffer A(size_t(F) * c.m * c.k * 8), B(size_t(F) * c.k * c.n * 8), C(size_t(F) * c.m * c.n * 8);
      const cuComplex one = make_cuComplex(1, 0), zero = make_cuComplex(0, 0);
      const double t_gemm = time([&] {
        check_cublas(cublasCgemmStridedBatched(blas, CUBLAS_OP_C, CUBLAS_OP_N, c.m, c.n, c.k, &one,
                                               static_cast<const cuComplex*>(A.p), c.k, int64_t(c.m) * c.k,
                                               static_cast<const cuComplex*>(B.p), c.k, int64_t(c.k) * c.n, &zero,
                                               static_cast<cuComplex*>(C.p), c.m, int64_t(c.m) * c.n, F),
                     "cublasCgemmStridedBatched");
      });
      const double gflop = 8.0 * F * c.m * c.n * c.k / 1e9;
      std::printf(
          "%s: %dx%d planes x %d, F %d | R2C contiguous %.3f ms, frequency-major %.3f | C2R contiguous %.3f, "
          "frequency-major %.3f | transpose %.3f | CGEMM %dx%dx%d x F %.3f ms (%.1f TFLOP/s)\n",
          c.name, c.L, c.L, c.planes, F, t_r2c, t_r2c_fm, t_c2r, t_c2r_fm, t_transpose, c.m, c.n, c.k, t_gemm,
          gflop / t_gemm);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn-fft-layout-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
