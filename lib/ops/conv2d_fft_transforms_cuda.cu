// Our own 2-D real FFTs for the FFT convolution: see conv2d_fft_transforms.h for the contract.
// A block takes G = 256 / L planes. Each of its 256 threads holds one L-point complex FFT in
// registers (radix 2, fully unrolled, so the bit reversal is register renaming and every twiddle
// index is a constant); the planes pass through shared memory between the row and the column
// transforms:
//   forward: global real -> shared (G, L, L + 1) -> row FFTs (thread per plane and row) ->
//            shared spectra (G, L, L / 2 + 1) -> column FFTs (thread per plane and column) -> global,
//            lanes over planes, so each frequency's G planes are one coalesced run
//   inverse: the same backwards; rows are completed by Hermitian symmetry, only the cropped
//            window's rows get a row transform, and only the window is written.
// Shared strides are padded so neither the row nor the column accesses conflict on banks (bar
// L = 8's rows, 2-way). Twiddles exp(-2 pi i j / 64) are computed per block in double (sincospi)
// and rounded once, so the transforms are as accurate as cuFFT's.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_fft_transforms.h"

namespace cnn {

namespace {

constexpr int kThreads = 256;
constexpr int kTwiddles = 64;  // the largest side
constexpr size_t kDefaultSharedBytes = 48 * 1024;  // more needs the kernel's opt-in

template <int L>
struct FftTile {
  static constexpr int G = kThreads / L;                 // planes per block
  static constexpr int Fw = L / 2 + 1;                   // columns of a half spectrum
  static constexpr int F = L * Fw;                       // complex numbers per spectrum
  static constexpr int Row = L + 1;                      // floats between real rows in shared memory
  // complex numbers between planes' spectra in shared memory: with G >= 16 a half-warp of column
  // threads spans 16 planes (odd stride); with fewer, G planes x 16 / G columns (stride = 16 / G mod 16)
  static constexpr int Plane = G >= 16 ? F + 1 - F % 2 : F + ((16 / G - F % 16) + 16) % 16;
  static constexpr int kRealFloats = G * L * Row;
  static constexpr int kSpecFloats = 2 * G * Plane;
  static constexpr int kAreaFloats = kRealFloats > kSpecFloats ? kRealFloats : kSpecFloats;
  static constexpr size_t kSharedBytes = size_t(kAreaFloats) * sizeof(float) + kTwiddles * sizeof(float2);
  static_assert(G * Fw <= kThreads, "one column transform per thread");
};

__host__ __device__ constexpr int bit_reverse(int i, int bits) {
  int r = 0;
  for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
  return r;
}

__host__ __device__ constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// f(std::integral_constant<int, I>) for I in [I0, I1): indices that are constant expressions, so
// register arrays indexed by them stay in registers (a plain unrolled loop left L = 8's and 64's
// bit reversal to local memory).
template <int I0, int I1, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I0 < I1) {
    f(std::integral_constant<int, I0>{});
    static_for<I0 + 1, I1>(f);
  }
}

// In-place L-point DFT of a (registers): a[k] = sum_n a[n] exp(-+2 pi i n k / L); tw[j] =
// exp(-2 pi i j / 64). Radix-2 decimation in time over bit-reversed input.
template <int L, bool kInverse>
__device__ __forceinline__ void fft_in_registers(float2 (&a)[L], const float2* __restrict__ tw) {
  constexpr int bits = log2_of(L);
  static_for<0, L>([&](auto I) {
    constexpr int i = decltype(I)::value, j = bit_reverse(i, bits);
    if constexpr (j > i) {
      const float2 t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
  });
  static_for<1, bits + 1>([&](auto S) {
    constexpr int m = 1 << decltype(S)::value, half = m / 2;
    static_for<0, half>([&](auto J) {
      constexpr int j = decltype(J)::value;
      float2 w = tw[j * (kTwiddles / m)];
      if (kInverse) w.y = -w.y;
      static_for<0, L / m>([&](auto B) {
        constexpr int k = decltype(B)::value * m + j;
        const float2 t = j == 0 ? a[k + half] : cmul(w, a[k + half]);
        const float2 u = a[k];
        a[k] = make_float2(u.x + t.x, u.y + t.y);
        a[k + half] = make_float2(u.x - t.x, u.y - t.y);
      });
    });
  });
}

__device__ __forceinline__ void load_twiddles(float2* tw) {
  if (threadIdx.x < kTwiddles) {
    double s, c;
    sincospi(2.0 * double(threadIdx.x) / kTwiddles, &s, &c);
    tw[threadIdx.x] = make_float2(float(c), float(-s));
  }
}

// This block's view of the dynamic shared memory (the real planes and the spectra share one
// area; the twiddles follow it), its first plane and how many of its G planes exist. Loads the
// twiddles: sync before using them.
template <int L>
struct FftBlock {
  float* real;
  float2* spec;
  float2* tw;
  int64_t plane0;
  int count;
  __device__ explicit FftBlock(int64_t planes) {
    extern __shared__ float4 shared_area[];
    real = reinterpret_cast<float*>(shared_area);
    spec = reinterpret_cast<float2*>(shared_area);
    tw = reinterpret_cast<float2*>(real + FftTile<L>::kAreaFloats);
    plane0 = int64_t(blockIdx.x) * FftTile<L>::G;
    count = planes - plane0 < FftTile<L>::G ? int(planes - plane0) : FftTile<L>::G;
    load_twiddles(tw);
  }
};

}  // namespace

template <int L>
static __global__ void __launch_bounds__(kThreads)
    conv2d_fft_forward_transform_kernel(const float* __restrict__ src, int64_t planes, int Hs, int Ws, int oh, int ow,
                                        float2* __restrict__ out, int64_t ld) {
  using T = FftTile<L>;
  const FftBlock<L> b(planes);
  const int tid = threadIdx.x;
  // The block's planes, consecutive in src, into zero L x L planes: consecutive threads read
  // consecutive floats of a source row.
  const float* block_src = src + b.plane0 * Hs * Ws;
  for (int i = tid; i < T::G * L * L; i += kThreads) {
    const int p = i / (L * L), r = (i / L) % L, c = i % L;
    const int h = r - oh, w = c - ow;
    float v = 0.0f;
    if (p < b.count && h >= 0 && h < Hs && w >= 0 && w < Ws) v = block_src[(int64_t(p) * Hs + h) * Ws + w];
    b.real[(p * L + r) * T::Row + c] = v;
  }
  __syncthreads();
  {  // row transforms: thread (plane, row)
    const int p = tid / L, r = tid % L;
    float2 a[L];
#pragma unroll
    for (int c = 0; c < L; ++c) a[c] = make_float2(b.real[(p * L + r) * T::Row + c], 0.0f);
    fft_in_registers<L, false>(a, b.tw);
    __syncthreads();  // the spectra overwrite the real planes
#pragma unroll
    for (int c = 0; c < T::Fw; ++c) b.spec[p * T::Plane + r * T::Fw + c] = a[c];
  }
  __syncthreads();
  if (tid < T::G * T::Fw) {  // column transforms: thread (plane, column), lanes over planes
    const int p = tid % T::G, c = tid / T::G;
    float2 a[L];
#pragma unroll
    for (int r = 0; r < L; ++r) a[r] = b.spec[p * T::Plane + r * T::Fw + c];
    fft_in_registers<L, false>(a, b.tw);
    if (p < b.count) {
      float2* o = out + b.plane0 + p;
#pragma unroll
      for (int k = 0; k < L; ++k) o[int64_t(k * T::Fw + c) * ld] = a[k];
    }
  }
}

template <int L>
static __global__ void __launch_bounds__(kThreads)
    conv2d_fft_inverse_transform_kernel(const float2* __restrict__ in, int64_t ld, int64_t planes, int Ho, int Wo,
                                        int oh, int ow, float scale, const float* __restrict__ bias, int K,
                                        float* __restrict__ dst) {
  using T = FftTile<L>;
  const FftBlock<L> b(planes);
  const int tid = threadIdx.x;
  __syncthreads();
  if (tid < T::G * T::Fw) {  // column transforms: thread (plane, column), lanes over planes
    const int p = tid % T::G, c = tid / T::G;
    float2 a[L];
    const float2* i = in + b.plane0 + p;
#pragma unroll
    for (int k = 0; k < L; ++k) a[k] = p < b.count ? i[int64_t(k * T::Fw + c) * ld] : make_float2(0.0f, 0.0f);
    fft_in_registers<L, true>(a, b.tw);
#pragma unroll
    for (int r = 0; r < L; ++r) b.spec[p * T::Plane + r * T::Fw + c] = a[r];
  }
  __syncthreads();
  {  // row transforms of the kept rows: the other half of each row by Hermitian symmetry
    const int p = tid / L, r = tid % L;
    const bool kept = r >= oh && r < oh + Ho;
    float2 a[L];
    if (kept) {
#pragma unroll
      for (int c = 0; c < T::Fw; ++c) a[c] = b.spec[p * T::Plane + r * T::Fw + c];
#pragma unroll
      for (int c = T::Fw; c < L; ++c) a[c] = make_float2(a[L - c].x, -a[L - c].y);
      fft_in_registers<L, true>(a, b.tw);
    }
    __syncthreads();  // the real planes overwrite the spectra
    if (kept) {
#pragma unroll
      for (int c = 0; c < L; ++c) b.real[(p * L + r) * T::Row + c] = a[c].x;
    }
  }
  __syncthreads();
  float* block_dst = dst + b.plane0 * Ho * Wo;
  const int HW = Ho * Wo;
  for (int i = tid; i < b.count * HW; i += kThreads) {
    const int p = i / HW, hw = i - p * HW, h = hw / Wo, w = hw - h * Wo;
    const float v = b.real[(p * L + h + oh) * T::Row + w + ow] * scale;
    block_dst[i] = bias ? v + bias[(b.plane0 + p) % K] : v;
  }
}

// The blocks of a side-L kernel over `planes` planes, after opting the kernel in to its shared
// memory where that is past the default.
template <int L, typename Kernel>
static unsigned prepare_launch(Kernel kernel, int64_t planes) {
  using T = FftTile<L>;
  if constexpr (T::kSharedBytes > kDefaultSharedBytes)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSharedBytes)));
  return unsigned((planes + T::G - 1) / T::G);
}

template <int L>
static void launch_forward(cudaStream_t stream, const float* src, int64_t planes, int Hs, int Ws, int oh, int ow,
                           float* out, int64_t ld) {
  const auto kernel = conv2d_fft_forward_transform_kernel<L>;
  kernel<<<prepare_launch<L>(kernel, planes), kThreads, FftTile<L>::kSharedBytes, stream>>>(
      src, planes, Hs, Ws, oh, ow, reinterpret_cast<float2*>(out), ld);
  CUDA_CHECK_LAUNCH("conv2d_fft_forward_transform_kernel");
}

template <int L>
static void launch_inverse(cudaStream_t stream, const float* in, int64_t ld, int64_t planes, int Ho, int Wo, int oh,
                           int ow, float scale, const float* bias, int K, float* dst) {
  const auto kernel = conv2d_fft_inverse_transform_kernel<L>;
  kernel<<<prepare_launch<L>(kernel, planes), kThreads, FftTile<L>::kSharedBytes, stream>>>(
      reinterpret_cast<const float2*>(in), ld, planes, Ho, Wo, oh, ow, scale, bias, K, dst);
  CUDA_CHECK_LAUNCH("conv2d_fft_inverse_transform_kernel");
}

bool conv2d_fft_own_size(int L) { return L == 8 || L == 16 || L == 32 || L == 64; }

void conv2d_fft_forward_transform(void* stream, const float* src, int64_t planes, int Hs, int Ws, int oh, int ow,
                                  int L, float* out, int64_t ld) {
  CNN_CHECK(conv2d_fft_own_size(L), "conv2d fft transform: side {} is not one of 8, 16, 32, 64", L);
  CNN_CHECK(planes >= 0 && ld >= planes && oh >= 0 && ow >= 0 && Hs >= 0 && Ws >= 0 && oh + Hs <= L &&
                ow + Ws <= L && (planes + kThreads - 1) / (kThreads / L) <= INT32_MAX,
            "conv2d fft transform: {} planes of {}x{} at ({}, {}) do not fit {}x{} transforms with ld {}", planes, Hs,
            Ws, oh, ow, L, L, ld);
  if (planes == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (L) {
    case 8: return launch_forward<8>(s, src, planes, Hs, Ws, oh, ow, out, ld);
    case 16: return launch_forward<16>(s, src, planes, Hs, Ws, oh, ow, out, ld);
    case 32: return launch_forward<32>(s, src, planes, Hs, Ws, oh, ow, out, ld);
    default: return launch_forward<64>(s, src, planes, Hs, Ws, oh, ow, out, ld);
  }
}

void conv2d_fft_inverse_transform(void* stream, const float* in, int64_t ld, int64_t planes, int L, int Ho, int Wo,
                                  int oh, int ow, float scale, const float* bias, int K, float* dst) {
  CNN_CHECK(conv2d_fft_own_size(L), "conv2d fft transform: side {} is not one of 8, 16, 32, 64", L);
  CNN_CHECK(planes >= 0 && ld >= planes && oh >= 0 && ow >= 0 && Ho >= 0 && Wo >= 0 && oh + Ho <= L &&
                ow + Wo <= L && (!bias || K > 0) && (planes + kThreads - 1) / (kThreads / L) <= INT32_MAX,
            "conv2d fft inverse transform: {} planes cropped to {}x{} at ({}, {}) do not fit {}x{} transforms "
            "with ld {}",
            planes, Ho, Wo, oh, ow, L, L, ld);
  if (planes == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (L) {
    case 8: return launch_inverse<8>(s, in, ld, planes, Ho, Wo, oh, ow, scale, bias, K, dst);
    case 16: return launch_inverse<16>(s, in, ld, planes, Ho, Wo, oh, ow, scale, bias, K, dst);
    case 32: return launch_inverse<32>(s, in, ld, planes, Ho, Wo, oh, ow, scale, bias, K, dst);
    default: return launch_inverse<64>(s, in, ld, planes, Ho, Wo, oh, ow, scale, bias, K, dst);
  }
}

}  // namespace cnn
