// FFT convolution on CUDA (Mathieu, Henaff & LeCun, "Fast Training of Convolutional Networks
// through FFTs", 2014): zero-pad operands to Lh x Lw >= the padded input (sizes of 2, 3, 5, 7 only),
// real-to-complex 2-D cuFFT, a per-frequency complex product summed over the contracted channel,
// inverse FFT, crop and scale by 1 / (Lh Lw). Stride 1, dilation 1, groups 1, any padding.
// The products, two ways (FftPlanDims::gemm picks):
//  - channels >= kGemmMinChannels on both sides: spectra are transposed to frequency-major
//    (F, planes), so each frequency's operands are plain row-major matrices, and one
//    cublasCgemmStridedBatched over the F frequencies does them all (FP32 FMA; no Gauss 3M, which
//    loses digits); the result is transposed back for the inverse FFT. Measured on an H200
//    (L2: 64x64 planes, 2176 of them): cuFFT's own strided (frequency-major) layouts cost 3.5-4.8x
//    its contiguous one (R2C 0.194 against 0.056 ms, C2R 0.272 against 0.057), a tiled transpose
//    0.024 ms, so contiguous transforms plus transposes. Where a power-of-two square of side 8-64
//    serves (own_transform_side), our own transforms (conv2d_fft_transforms.h) replace the pad,
//    R2C and transpose, and the transpose, C2R and crop, with one pass each.
//  - fewer channels (a 3-channel first layer): our kernel over (planes, F) spectra, one frequency
//    per thread and 4 x 4 outputs each; a GEMM whose inner or outer size is 3 runs at 1 TFLOP/s.
//   forward          Y(n,k) = sum_c X(n,c) conj(W(k,c))   (cross-correlation)   crop at (0, 0)
//   backward_data    DX(n,c) = sum_k DY(n,k) W(k,c)       (full convolution)    crop at (pad_h, pad_w)
//   backward_filter  DW(k,c) = sum_n conj(DY(n,k)) X(n,c)                       crop at (0, 0), R x S
// Trap: Lh >= H + 2 pad_h is what keeps every kept output free of circular wrap-around, in all three
// directions (P + R - 1 == H + 2 pad_h).
// Plans live in the context's cache (core/context_cache.h), keyed by sizes, batch, type and stream,
// made on a shape's first call and reused after, so a call neither creates plans nor waits for the
// stream: timed calls time the transforms, and a warmed-up call can be captured into a CUDA graph.
// Their work areas come from ctx.workspace (counted by workspace_bytes). Trap: a plan's first call
// must not be under stream capture (cuFFT allocates and uploads while planning); that call throws.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/context_cache.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "core/error.h"
#include "ops/conv2d_fft_transforms.h"
#include "ops/conv2d_strategies.cuh"
#include "ops/conv2d_strategies.h"
#include "ops/reduce.cuh"

namespace cnn {

using namespace conv2d_strategy_detail;

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;
// Outputs per thread of the frequency product: kTA rows of A times kTB rows of B.
constexpr int kTA = 4, kTB = 4;
// Channel counts (C and K) from which the products go through cuBLAS (see the top of the file).
constexpr int64_t kGemmMinChannels = 16;
constexpr int kTransposeTile = 32, kTransposeRows = 8;

// out (cols, rows) = in (rows, cols), complex, through a shared tile so both sides are coalesced;
// rows of in are in_ld apart, rows of out out_ld apart (a column block of a wider matrix).
// Blocks walk the row tiles in steps of gridDim.y (grids stop at 65535 in y).
static __global__ void __launch_bounds__(kTransposeTile * kTransposeRows)
    conv2d_fft_transpose_kernel(const float2* __restrict__ in, float2* __restrict__ out, int rows, int cols,
                                int64_t in_ld, int64_t out_ld) {
  __shared__ float2 tile[kTransposeTile][kTransposeTile + 1];
  const int c0 = blockIdx.x * kTransposeTile;
  for (int r0 = blockIdx.y * kTransposeTile; r0 < rows; r0 += gridDim.y * kTransposeTile) {
    __syncthreads();  // the previous tile has been written out
    for (int j = threadIdx.y; j < kTransposeTile; j += kTransposeRows) {
      const int r = r0 + j, c = c0 + int(threadIdx.x);
      if (r < rows && c < cols) tile[j][threadIdx.x] = in[int64_t(r) * in_ld + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTransposeTile; j += kTransposeRows) {
      const int c = c0 + j, r = r0 + int(threadIdx.x);
      if (r < rows && c < cols) out[int64_t(c) * out_ld + r] = tile[threadIdx.x][j];
    }
  }
}

// dst (batch, Lh, Lw) = src (batch, Hs, Ws) placed at (oh, ow), zeros elsewhere.
static __global__ void conv2d_fft_pad_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t total,
                                             int Hs, int Ws, int Lh, int Lw, int oh, int ow) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (int64_t(Lh) * Lw);
    const int hw = int(i - plane * Lh * Lw), h = hw / Lw - oh, w = hw % Lw - ow;
    dst[i] = (h >= 0 && h < Hs && w >= 0 && w < Ws) ? src[(plane * Hs + h) * Ws + w] : 0.0f;
  }
}

// dst (batch, Ho, Wo) = src (batch, Lh, Lw) at (h + oh, w + ow) * scale (+ bias[plane % K]).
static __global__ void conv2d_fft_crop_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t total,
                                              int Ho, int Wo, int Lh, int Lw, int oh, int ow, float scale,
                                              const float* __restrict__ bias, int K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (int64_t(Ho) * Wo);
    const int hw = int(i - plane * Ho * Wo), h = hw / Wo, w = hw - h * Wo;
    const float v = src[(plane * Lh + h + oh) * Lw + w + ow] * scale;
    dst[i] = bias ? v + bias[plane % K] : v;
  }
}

struct ProductDims {
  int na, nb, nj, F;               // out (na, nb, F) = sum over j of A (., ., F) * B (., ., F)
  int64_t sa_a, sa_j, sb_b, sb_j;  // strides of A and B in units of F complex numbers
  bool accumulate;                 // out += instead of out =
};

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// One thread: one frequency, kTA x kTB outputs; lanes walk frequencies (coalesced 8-byte loads).
// The sum over j runs in order, so the result is deterministic.
template <bool kConjA, bool kConjB>
static __global__ void __launch_bounds__(kThreads)
    conv2d_fft_product_kernel(const ProductDims d, const float2* __restrict__ A, const float2* __restrict__ B,
                              float2* __restrict__ out) {  // (na, nb, F)
  const int f = blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= d.F) return;
  const int blocks_b = (d.nb + kTB - 1) / kTB, blocks = ((d.na + kTA - 1) / kTA) * blocks_b;
  for (int blk = blockIdx.y; blk < blocks; blk += gridDim.y) {
    const int a0 = (blk / blocks_b) * kTA, b0 = (blk % blocks_b) * kTB;
    float2 acc[kTA][kTB];
#pragma unroll
    for (int i = 0; i < kTA; ++i)
#pragma unroll
      for (int k = 0; k < kTB; ++k) acc[i][k] = make_float2(0.0f, 0.0f);
    for (int j = 0; j < d.nj; ++j) {
      float2 av[kTA], bv[kTB];
#pragma unroll
      for (int i = 0; i < kTA; ++i) {
        const int a = min(a0 + i, d.na - 1);  // clamped rows are computed and not stored
        av[i] = A[(a * d.sa_a + j * d.sa_j) * d.F + f];
        if (kConjA) av[i].y = -av[i].y;
      }
#pragma unroll
      for (int k = 0; k < kTB; ++k) {
        const int b = min(b0 + k, d.nb - 1);
        bv[k] = B[(b * d.sb_b + j * d.sb_j) * d.F + f];
        if (kConjB) bv[k].y = -bv[k].y;
      }
#pragma unroll
      for (int i = 0; i < kTA; ++i)
#pragma unroll
        for (int k = 0; k < kTB; ++k) {
          const float2 p = cmul(av[i], bv[k]);
          acc[i][k].x += p.x;
          acc[i][k].y += p.y;
        }
    }
#pragma unroll
    for (int i = 0; i < kTA; ++i)
#pragma unroll
      for (int k = 0; k < kTB; ++k) {
        if (a0 + i >= d.na || b0 + k >= d.nb) continue;
        float2* o = out + (int64_t(a0 + i) * d.nb + b0 + k) * d.F + f;
        if (d.accumulate) {
          const float2 prev = *o;
          *o = make_float2(prev.x + acc[i][k].x, prev.y + acc[i][k].y);
        } else {
          *o = acc[i][k];
        }
      }
  }
}

static void check_cufft(cufftResult status, const char* what) {
  if (status != CUFFT_SUCCESS) CNN_THROW("conv2d fft: {} failed with cufftResult {}", what, int(status));
}

static bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// A 2-D cuFFT plan over `batch` contiguous Lh x Lw planes, bound to one stream, planned without a
// work area (cufftSetAutoAllocation 0): each call lends it one from ctx.workspace. Should cuFFT want
// more than the call reserved (the reserve is one complex spectrum per transformed plane, which we
// expect to cover cuFFT's needs), the plan takes a buffer of its own once, on that first call.
class FftPlan {
 public:
  FftPlan(int Lh, int Lw, int batch, cufftType type, cudaStream_t stream) {
    check_cufft(cufftCreate(&m_plan), "cufftCreate");
    try {  // the destructor does not run when the constructor throws
      check_cufft(cufftSetAutoAllocation(m_plan, 0), "cufftSetAutoAllocation");
      int n[2] = {Lh, Lw};
      check_cufft(cufftMakePlanMany(m_plan, 2, n, nullptr, 1, 0, nullptr, 1, 0, type, batch, &m_work_bytes),
                  "cufftMakePlanMany");
      check_cufft(cufftSetStream(m_plan, stream), "cufftSetStream");
    } catch (...) {
      cufftDestroy(m_plan);
      throw;
    }
  }
  ~FftPlan() {
    cufftDestroy(m_plan);
    device_free(Device::cuda, m_own);
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  // The plan, with `area` (`area_bytes` of this call's workspace) as its work area.
  cufftHandle with_work_area(float* area, size_t area_bytes, cudaStream_t stream) {
    if (m_work_bytes == 0) return m_plan;
    void* use = area;
    if (m_work_bytes > area_bytes) {
      if (!m_own) {
        CNN_CHECK(!capturing(stream),
                  "conv2d fft: a cuFFT plan needs its own {}-byte work area, which cannot be "
                  "allocated during stream capture; run the convolution once before capturing it",
                  m_work_bytes);
        m_own = device_malloc(Device::cuda, m_work_bytes, "cuFFT work area");
      }
      use = m_own;
    }
    check_cufft(cufftSetWorkArea(m_plan, use), "cufftSetWorkArea");
    return m_plan;
  }
  size_t own_bytes() const { return m_own ? m_work_bytes : 0; }

 private:
  cufftHandle m_plan = 0;
  size_t m_work_bytes = 0;
  void* m_own = nullptr;  // only when the call's reserve is too small
};

// The plans of one context (ContextCache::Slot::conv2d_fft). Plans are keyed by stream too, as a
// plan is bound to the stream it was made for.
class FftPlanCache {
 public:
  FftPlan& get(int Lh, int Lw, int batch, cufftType type, cudaStream_t stream) {
    const Key key{Lh, Lw, batch, int(type), stream};
    auto it = m_plans.find(key);
    if (it != m_plans.end()) return *it->second;
    CNN_CHECK(!capturing(stream),
              "conv2d fft: no cuFFT plan yet for {} planes of {}x{} ({}); plans cannot be made during stream "
              "capture, so run the convolution once before capturing it",
              batch, Lh, Lw, type == CUFFT_R2C ? "forward" : "inverse");
    auto plan = std::make_unique<FftPlan>(Lh, Lw, batch, type, stream);
    return *m_plans.emplace(key, std::move(plan)).first->second;
  }
  size_t own_bytes() const {
    size_t bytes = 0;
    for (const auto& kv : m_plans) bytes += kv.second->own_bytes();
    return bytes;
  }

 private:
  using Key = std::tuple<int, int, int, int, cudaStream_t>;
  std::map<Key, std::unique_ptr<FftPlan>> m_plans;
};

static FftPlanCache& plan_cache(const ExecContext& ctx) {
  CNN_CHECK(ctx.cache, "conv2d fft: the context has no per-context cache for cuFFT plans (make it with CudaContext)");
  std::shared_ptr<void>& slot = ctx.cache->slot(ContextCache::Slot::conv2d_fft);
  if (!slot) slot = std::make_shared<FftPlanCache>();
  return *static_cast<FftPlanCache*>(slot.get());
}

// The smallest n >= m whose only prime factors are 2, 3, 5 and 7 (cuFFT's fast radices).
static int good_fft_size(int64_t m) {
  for (int64_t n = std::max<int64_t>(m, 1);; ++n) {
    int64_t r = n;
    for (int p : {2, 3, 5, 7})
      while (r % p == 0) r /= p;
    if (r == 1) return int(n);
  }
}

constexpr size_t kWorkSlackFloats = size_t(1) << 18;  // 1 MiB

struct FftPlanDims {
  int Lh, Lw, F;  // F = Lh * (Lw / 2 + 1) complex numbers per spectrum
  int own_side;   // our transforms, Lh = Lw = own_side (conv2d_fft_transforms.h); 0: cuFFT's
  int64_t nb;     // images per chunk
  int64_t fc;     // filter planes (of K*C) per chunk of the filter-side transforms
  bool gemm;      // products through cuBLAS on frequency-major spectra (then t is the transpose buffer)
  size_t real_floats, wf_floats, a_floats, b_floats, t_floats, work_floats;
  size_t total() const { return real_floats + wf_floats + a_floats + b_floats + t_floats + work_floats; }
};

// Our transforms' side for a shape whose products go through cuBLAS, or 0: the power-of-two
// square that covers the padded input, when it has at most kOwnExtraFrequencies times the
// frequencies of cuFFT's smallest 2-3-5-7 sizes (L5's 13x13 takes 16x16, 144 frequencies
// against 14x14's 112; a 24x24 input stays with cuFFT's 24x24 rather than 32x32).
constexpr double kOwnExtraFrequencies = 1.3;
static int own_transform_side(const Conv2dShape& sh, int Lh, int Lw) {
  int side = 8;
  while (side < sh.H + 2 * sh.pad_h || side < sh.W + 2 * sh.pad_w) side *= 2;
  if (!conv2d_fft_own_size(side)) return 0;
  const double fewest = double(Lh) * (Lw / 2 + 1), own = double(side) * (side / 2 + 1);
  return own <= kOwnExtraFrequencies * fewest ? side : 0;
}

// Workspace: the filter-side spectra (K*C) and, per chunk, the spectra of the C-channel and
// K-channel operands; then, for cuFFT's transforms only, one real staging buffer (pad before and
// crop after the FFTs), with cuBLAS products a transpose buffer as large as the largest
// transform's spectra, and the cuFFT work area: one spectrum per plane of the largest transform
// plus kWorkSlackFloats (our reserve; cuFFT only says how much it wants once a plan exists, and
// workspace_bytes runs without a GPU). cuFFT's filter side is transformed fc planes at a time, fc
// sized like an image chunk (kChunkBytes of staging, transpose and work area) but never below one,
// so only its spectra scale with K*C: 64x64 inputs at 128 -> 128 channels took 1.1 GiB with all
// K*C planes staged at once. Our transforms stage nothing, so they take all K*C planes at once.
static FftPlanDims plan_dims(const Conv2dShape& sh) {
  FftPlanDims d{};
  d.Lh = good_fft_size(sh.H + 2 * sh.pad_h);
  d.Lw = good_fft_size(sh.W + 2 * sh.pad_w);
  d.gemm = std::min(sh.C, sh.K) >= kGemmMinChannels;
  d.own_side = d.gemm ? own_transform_side(sh, d.Lh, d.Lw) : 0;
  if (d.own_side) d.Lh = d.Lw = d.own_side;
  d.F = d.Lh * (d.Lw / 2 + 1);
  const int64_t plane = int64_t(d.Lh) * d.Lw, spec = 2 * int64_t(d.F);
  d.wf_floats = round_floats(size_t(sh.K * sh.C * spec));
  if (d.own_side) {
    d.nb = chunk_images(sh.N, size_t((sh.C + sh.K) * spec));
    d.fc = sh.K * sh.C;
  } else {
    d.nb = chunk_images(sh.N,
                        size_t((sh.C + sh.K) * spec + std::max(sh.C, sh.K) * (plane + (d.gemm ? 2 : 1) * spec)));
    const int64_t image_planes = d.nb * std::max(sh.C, sh.K);
    const int64_t per_filter_plane = plane + (d.gemm ? 2 : 1) * spec;
    d.fc = std::min(sh.K * sh.C, std::max(image_planes, int64_t(kChunkBytes / sizeof(float)) / per_filter_plane));
    const int64_t staged = std::max(d.fc, image_planes);  // planes of the largest transform
    d.real_floats = round_floats(size_t(staged * plane));
    d.t_floats = d.gemm ? round_floats(size_t(staged * spec)) : 0;
    d.work_floats = round_floats(size_t(staged * spec) + kWorkSlackFloats);
  }
  d.a_floats = round_floats(size_t(d.nb * sh.C * spec));
  d.b_floats = round_floats(size_t(d.nb * sh.K * spec));
  return d;
}

static void pad(const float* src, float* dst, int64_t planes, int Hs, int Ws, const FftPlanDims& d, int oh, int ow,
                cudaStream_t stream) {
  const int64_t total = planes * d.Lh * d.Lw;
  conv2d_fft_pad_kernel<<<cuda::grid_blocks(total, kThreads), kThreads, 0, stream>>>(src, dst, total, Hs, Ws, d.Lh,
                                                                                     d.Lw, oh, ow);
  CUDA_CHECK_LAUNCH("conv2d_fft_pad_kernel");
}

static void crop(const float* src, float* dst, int64_t planes, int Ho, int Wo, const FftPlanDims& d, int oh, int ow,
                 const float* bias, int K, cudaStream_t stream) {
  const int64_t total = planes * Ho * Wo;
  const float scale = 1.0f / (float(d.Lh) * float(d.Lw));
  conv2d_fft_crop_kernel<<<cuda::grid_blocks(total, kThreads), kThreads, 0, stream>>>(src, dst, total, Ho, Wo, d.Lh,
                                                                                      d.Lw, oh, ow, scale, bias, K);
  CUDA_CHECK_LAUNCH("conv2d_fft_crop_kernel");
}

// The transforms of one call: cached plans, each lent this call's work area.
class FftPlans {
 public:
  FftPlans(FftPlanCache& cache, const FftPlanDims& d, cudaStream_t stream, float* work)
      : m_cache(cache), m_d(d), m_stream(stream), m_work(work) {}
  // real (batch, Lh, Lw) -> spectra (batch, F)
  void forward(const float* real, float* spec, int batch) {
    check_cufft(cufftExecR2C(get(batch, CUFFT_R2C), const_cast<float*>(real), reinterpret_cast<cufftComplex*>(spec)),
                "cufftExecR2C");
  }
  // spectra (batch, F) -> real (batch, Lh, Lw), unscaled; cuFFT may overwrite the spectra.
  void inverse(float* spec, float* real, int batch) {
    check_cufft(cufftExecC2R(get(batch, CUFFT_C2R), reinterpret_cast<cufftComplex*>(spec), real), "cufftExecC2R");
  }

 private:
  cufftHandle get(int batch, cufftType type) {
    return m_cache.get(m_d.Lh, m_d.Lw, batch, type, m_stream)
        .with_work_area(m_work, m_d.work_floats * sizeof(float), m_stream);
  }
  FftPlanCache& m_cache;
  FftPlanDims m_d;
  cudaStream_t m_stream;
  float* m_work;
};

template <bool kConjA, bool kConjB>
static void product(const ProductDims& p, const float* A, const float* B, float* out, cudaStream_t stream) {
  const int64_t blocks = int64_t((p.na + kTA - 1) / kTA) * ((p.nb + kTB - 1) / kTB);
  const dim3 grid(static_cast<unsigned>((p.F + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(blocks, kMaxGridY)));
  conv2d_fft_product_kernel<kConjA, kConjB><<<grid, kThreads, 0, stream>>>(
      p, reinterpret_cast<const float2*>(A), reinterpret_cast<const float2*>(B), reinterpret_cast<float2*>(out));
  CUDA_CHECK_LAUNCH("conv2d_fft_product_kernel");
}

// out (F, planes) = in (planes, F), or back with the sizes swapped; in_ld / out_ld (complex
// numbers between rows, 0: dense) address a column block of a wider matrix.
static void transpose(const float* in, float* out, int64_t rows, int64_t cols, cudaStream_t stream, int64_t in_ld = 0,
                      int64_t out_ld = 0) {
  const dim3 block(kTransposeTile, kTransposeRows);
  const dim3 grid(unsigned((cols + kTransposeTile - 1) / kTransposeTile),
                  unsigned(std::min<int64_t>((rows + kTransposeTile - 1) / kTransposeTile, kMaxGridY)));
  conv2d_fft_transpose_kernel<<<grid, block, 0, stream>>>(reinterpret_cast<const float2*>(in),
                                                          reinterpret_cast<float2*>(out), int(rows), int(cols),
                                                          in_ld ? in_ld : cols, out_ld ? out_ld : rows);
  CUDA_CHECK_LAUNCH("conv2d_fft_transpose_kernel");
}

// Calls f(p0, cnt) for the filter planes [p0, p0 + cnt) of K*C, d.fc at a time.
template <typename F>
static void filter_chunks(const Conv2dShape& sh, const FftPlanDims& d, F&& f) {
  for (int64_t p0 = 0; p0 < sh.K * sh.C; p0 += d.fc) f(p0, int(std::min<int64_t>(d.fc, sh.K * sh.C - p0)));
}

// For every frequency f of F: C_f = op(A_f) op(B_f) (+ C_f when accumulate), in cuBLAS's
// column-major terms, frequency f's matrices at f * (their size) in frequency-major buffers.
struct Gemm {
  cublasOperation_t op_a, op_b;
  int m, n, k, lda, ldb, ldc;
};
static void frequency_gemms(const ExecContext& ctx, const Gemm& g, int F, const float* A, const float* B, float* C,
                            bool accumulate) {
  const cuComplex one = make_cuComplex(1.0f, 0.0f), beta = make_cuComplex(accumulate ? 1.0f : 0.0f, 0.0f);
  const int64_t size_a = int64_t(g.op_a == CUBLAS_OP_N ? g.k : g.m) * g.lda;
  const int64_t size_b = int64_t(g.op_b == CUBLAS_OP_N ? g.n : g.k) * g.ldb;
  const int64_t size_c = int64_t(g.n) * g.ldc;
  check_cublas(cublasCgemmStridedBatched(blas_on_stream(ctx), g.op_a, g.op_b, g.m, g.n, g.k, &one,
                                         reinterpret_cast<const cuComplex*>(A), g.lda, size_a,
                                         reinterpret_cast<const cuComplex*>(B), g.ldb, size_b, &beta,
                                         reinterpret_cast<cuComplex*>(C), g.ldc, size_c, F),
               "cublasCgemmStridedBatched (fft products)");
}

// The cuBLAS path (d.gemm): as run_fft's kernel path, with every spectrum the products read or
// write frequency-major. At each frequency, row-major matrices W (K, C), X (cnt, C), Y (cnt, K);
// in cuBLAS's column-major terms their transposes, so forward is Y^T (K x cnt) = conj(W) X^T.
// The transforms, two ways:
//  - d.own_side: ours (conv2d_fft_transforms.h), which read the operands in place and write
//    frequency-major spectra, and back to the cropped output;
//  - else cuFFT's contiguous transforms through a padded copy (real) and transposes (t).
static void run_fft_gemm(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op,
                         const FftPlanDims& d, FftPlans& plans, float* real, float* wf, float* cspec, float* kspec,
                         float* t) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const int C = int(sh.C), K = int(sh.K), H = int(sh.H), W = int(sh.W), P = int(sh.P), Q = int(sh.Q), F = d.F;
  const float scale = 1.0f / (float(d.Lh) * float(d.Lw));
  // `planes` real Hs x Ws planes at src, each at (oh, ow) of a zero Lh x Lw plane -> spectra
  // to[f * ld + plane]
  auto to_spectra = [&](const float* src, int64_t planes, int Hs, int Ws, int oh, int ow, float* to, int64_t ld) {
    if (d.own_side) return conv2d_fft_forward_transform(ctx.cuda_stream, src, planes, Hs, Ws, oh, ow, d.own_side, to, ld);
    // No padded copy when src has the transform's size and cuFFT's alignment: an R2C input that is
    // only 4-byte aligned (a channel slice of a concat, an odd offset) is refused by cuFFT with
    // CUFFT_INVALID_VALUE, so such a src goes through the copy too.
    const bool fits = Hs == d.Lh && Ws == d.Lw && oh == 0 && ow == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
    if (!fits) pad(src, real, planes, Hs, Ws, d, oh, ow, stream);
    plans.forward(fits ? src : real, t, int(planes));
    transpose(t, to, planes, F, stream, 0, ld);
  };
  // spectra from[f * ld + plane] -> dst, the Ho x Wo windows at (oh, ow) of the real planes,
  // scaled (+ bias[plane % bias_k]); cuFFT's C2R may overwrite t
  auto from_spectra = [&](const float* from, int64_t ld, int64_t planes, int Ho, int Wo, int oh, int ow,
                          const float* bias, int bias_k, float* dst) {
    if (d.own_side)
      return conv2d_fft_inverse_transform(ctx.cuda_stream, from, ld, planes, d.own_side, Ho, Wo, oh, ow, scale, bias,
                                          bias_k, dst);
    transpose(from, t, F, planes, stream, ld, 0);
    plans.inverse(t, real, int(planes));
    crop(real, dst, planes, Ho, Wo, d, oh, ow, bias, bias_k, stream);
  };
  const int64_t KC = sh.K * sh.C, RS = sh.R * sh.S;
  if (dir != ConvDir::backward_filter)  // filter planes -> columns [p0, p0 + cnt) of wf (F, K*C)
    filter_chunks(sh, d, [&](int64_t p0, int cnt) {
      to_spectra(op.w + p0 * RS, cnt, int(sh.R), int(sh.S), 0, 0, wf + 2 * p0, KC);
    });
  for (int64_t n0 = 0; n0 < sh.N; n0 += d.nb) {
    const int cnt = int(std::min<int64_t>(d.nb, sh.N - n0));
    if (dir != ConvDir::backward_data)
      to_spectra(op.x + n0 * C * H * W, int64_t(cnt) * C, H, W, int(sh.pad_h), int(sh.pad_w), cspec, int64_t(cnt) * C);
    if (dir != ConvDir::forward) to_spectra(op.dy + n0 * K * P * Q, int64_t(cnt) * K, P, Q, 0, 0, kspec, int64_t(cnt) * K);
    if (dir == ConvDir::forward) {  // Y(n,k) = sum_c X(n,c) conj(W(k,c))
      frequency_gemms(ctx, {CUBLAS_OP_C, CUBLAS_OP_N, K, cnt, C, C, C, K}, F, wf, cspec, kspec, false);
      from_spectra(kspec, int64_t(cnt) * K, int64_t(cnt) * K, P, Q, 0, 0, sh.has_bias ? op.b : nullptr, K,
                   op.y + n0 * K * P * Q);
    } else if (dir == ConvDir::backward_data) {  // DX(n,c) = sum_k DY(n,k) W(k,c)
      frequency_gemms(ctx, {CUBLAS_OP_N, CUBLAS_OP_N, C, cnt, K, C, K, C}, F, wf, kspec, cspec, false);
      from_spectra(cspec, int64_t(cnt) * C, int64_t(cnt) * C, H, W, int(sh.pad_h), int(sh.pad_w), nullptr, 1,
                   op.dx + n0 * C * H * W);
    } else {  // DW(k,c) = sum_n conj(DY(n,k)) X(n,c), summed over the chunks
      frequency_gemms(ctx, {CUBLAS_OP_N, CUBLAS_OP_C, C, K, cnt, C, K, C}, F, cspec, kspec, wf, n0 > 0);
    }
  }
  if (dir == ConvDir::backward_filter) {
    filter_chunks(sh, d, [&](int64_t p0, int cnt) {
      from_spectra(wf + 2 * p0, KC, cnt, int(sh.R), int(sh.S), 0, 0, nullptr, 1, op.dw + p0 * RS);
    });
    if (op.db) bias_grad(op.dy, op.db, sh.N, sh.K, sh.P * sh.Q, stream);
  }
}

static void run_fft(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const FftPlanDims d = plan_dims(sh);
  float* real = workspace_floats(ctx, d.total(), "fft");
  float* wf = real + d.real_floats;   // (K, C, F) filter spectra, or dW's in backward_filter
  float* cspec = wf + d.wf_floats;    // (nb, C, F) spectra of x or dx
  float* kspec = cspec + d.a_floats;  // (nb, K, F) spectra of y or dy
  float* t = kspec + d.b_floats;      // transposes (cuBLAS path only)
  float* work = t + d.t_floats;       // cuFFT's work area
  FftPlans plans(plan_cache(ctx), d, stream, work);
  if (d.gemm) return run_fft_gemm(ctx, sh, dir, op, d, plans, real, wf, cspec, kspec, t);
  const int C = int(sh.C), K = int(sh.K), H = int(sh.H), W = int(sh.W), P = int(sh.P), Q = int(sh.Q);
  const int64_t RS = sh.R * sh.S, spec = 2 * int64_t(d.F);
  if (dir != ConvDir::backward_filter)
    filter_chunks(sh, d, [&](int64_t p0, int cnt) {
      pad(op.w + p0 * RS, real, cnt, int(sh.R), int(sh.S), d, 0, 0, stream);
      plans.forward(real, wf + p0 * spec, cnt);
    });
  for (int64_t n0 = 0; n0 < sh.N; n0 += d.nb) {
    const int cnt = int(std::min<int64_t>(d.nb, sh.N - n0));
    if (dir != ConvDir::backward_data) {
      pad(op.x + n0 * C * H * W, real, int64_t(cnt) * C, H, W, d, sh.pad_h, sh.pad_w, stream);
      plans.forward(real, cspec, cnt * C);
    }
    if (dir != ConvDir::forward) {
      pad(op.dy + n0 * K * P * Q, real, int64_t(cnt) * K, P, Q, d, 0, 0, stream);
      plans.forward(real, kspec, cnt * K);
    }
    if (dir == ConvDir::forward) {
      product<false, true>({cnt, K, C, d.F, C, 1, C, 1, false}, cspec, wf, kspec, stream);
      plans.inverse(kspec, real, cnt * K);
      crop(real, op.y + n0 * K * P * Q, int64_t(cnt) * K, P, Q, d, 0, 0, sh.has_bias ? op.b : nullptr, K, stream);
    } else if (dir == ConvDir::backward_data) {
      product<false, false>({cnt, C, K, d.F, K, 1, 1, C, false}, kspec, wf, cspec, stream);
      plans.inverse(cspec, real, cnt * C);
      crop(real, op.dx + n0 * C * H * W, int64_t(cnt) * C, H, W, d, sh.pad_h, sh.pad_w, nullptr, 1, stream);
    } else {
      product<true, false>({K, C, cnt, d.F, 1, K, 1, C, n0 > 0}, kspec, cspec, wf, stream);
    }
  }
  if (dir == ConvDir::backward_filter) {
    filter_chunks(sh, d, [&](int64_t p0, int cnt) {
      plans.inverse(wf + p0 * spec, real, cnt);
      crop(real, op.dw + p0 * RS, cnt, int(sh.R), int(sh.S), d, 0, 0, nullptr, 1, stream);
    });
    if (op.db) bias_grad(op.dy, op.db, sh.N, sh.K, sh.P * sh.Q, stream);
  }
}

void conv2d_cuda_fft_transpose(void* stream, const float* in, float* out, int64_t rows, int64_t cols) {
  CNN_CHECK(rows >= 0 && cols >= 0 && rows <= INT32_MAX && cols <= INT32_MAX,
            "conv2d fft transpose: {} x {} is out of range", rows, cols);
  transpose(in, out, rows, cols, static_cast<cudaStream_t>(stream));
}

size_t conv2d_cuda_fft_work_bytes_outside_workspace(const ExecContext& ctx) {
  if (!ctx.cache) return 0;
  const std::shared_ptr<void>& slot = ctx.cache->slot(ContextCache::Slot::conv2d_fft);
  return slot ? static_cast<const FftPlanCache*>(slot.get())->own_bytes() : 0;
}

bool conv2d_cuda_fft_can_implement(const Conv2dShape& sh, ConvDir dir) { return conv2d_fft_shape_supported(sh, dir); }

size_t conv2d_cuda_fft_workspace_bytes(const Conv2dShape& sh, ConvDir dir) {
  if (!conv2d_fft_shape_supported(sh, dir)) return 0;
  return plan_dims(sh).total() * sizeof(float);
}

void conv2d_cuda_fft_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op) {
  CNN_CHECK(conv2d_fft_shape_supported(sh, dir),
            "conv2d fft cannot implement {} for {} (needs stride 1, dilation 1, groups 1, H + 2 pad <= 1024)",
            to_string(dir), sh.to_string());
  if (dir == ConvDir::forward) CNN_CHECK(op.x && op.w && op.y, "conv2d fft forward: x, w and y must not be null");
  if (dir == ConvDir::backward_data)
    CNN_CHECK(op.w && op.dy && op.dx, "conv2d fft backward_data: w, dy and dx must not be null");
  if (dir == ConvDir::backward_filter)
    CNN_CHECK(op.x && op.dy && op.dw, "conv2d fft backward_filter: x, dy and dw must not be null");
  run_fft(ctx, sh, dir, op);
}

}  // namespace cnn
