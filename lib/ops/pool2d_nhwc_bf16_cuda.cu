// Max and average pooling of bf16 or f16 channels-last activations (BF16/FP16 training; T, the
// element type, is a template parameter of every kernel, half16.cuh) on the GPU. Threads run
// along channels: V = 8 channels a thread in 16-byte accesses where C % 8 == 0 and the pointers are
// 16-byte aligned, V = 1 otherwise; float arithmetic on the widened values, each output rounded
// once. Forward: one thread per (n, p, q, channel group); global pooling (R = H, S = W) instead one
// block per (n, channel tile) that reduces over H*W in a fixed tree (deterministic). Backward
// gathers as pool2d_cuda.cu does: one thread per (n, h, w, group) over the windows holding it in
// (p, q) order, the CPU's additions in the CPU's order, no atomics.
// Trap: max backward routes dy to the window's first row-major position equal to y, lane by lane;
// y is the T max of T inputs, so it is exactly one of them and equality finds it.
#include <cmath>
#include <initializer_list>

#include "core/cuda_check.h"
#include "ops/half16.cuh"
#include "ops/pool2d.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// V channels at p as floats (widened exactly), and V floats stored there rounded once.
template <int V, typename T>
__device__ __forceinline__ void load_channels(float (&v)[V], const T* __restrict__ p) {
  if constexpr (V == 8) {
    half16_load8(p, v);
  } else {
    static_assert(V == 1, "8 or 1 channels a thread");
    v[0] = half16_load(p, 0);
  }
}
template <int V, typename T>
__device__ __forceinline__ void store_channels(T* __restrict__ p, const float (&v)[V]) {
  if constexpr (V == 8)
    half16_store8(p, v);
  else
    half16_store(p, 0, v[0]);
}

// The divisors of the index arithmetic: FastDiv32 while every index fits in int32, else PlainDiv64.
template <typename Div>
struct NhwcDivs {
  Div G, P, Q, H, W, stride_h, stride_w;  // G: channel groups of V
};
template <typename Div>
static NhwcDivs<Div> nhwc_divs(const PoolDims& d, int64_t G) {
  return NhwcDivs<Div>{Div(G), Div(d.P), Div(d.Q), Div(d.H), Div(d.W), Div(d.stride_h), Div(d.stride_w)};
}

// Flat index i of a channels-last tensor of V-channel groups, (n, a, b, g) with g fastest: its sample,
// row, column and group (A, B, G: the row, column and group counts).
template <typename I>
struct PixelGroup {
  I n;
  int a, b;
  I g;
};
template <typename Div>
__device__ __forceinline__ PixelGroup<typename Div::Index> split_index(typename Div::Index i, const Div& A,
                                                                       const Div& B, const Div& G) {
  using I = typename Div::Index;
  const I t0 = G.div(i), t1 = B.div(t0), n = A.div(t1);
  return {n, static_cast<int>(t1 - n * static_cast<I>(A.divisor)),
          static_cast<int>(t0 - t1 * static_cast<I>(B.divisor)), i - t0 * static_cast<I>(G.divisor)};
}

template <typename Div, bool kMax, int V, typename T>
static __global__ void pool2d_forward_window_nhwc_kernel(PoolDims d, NhwcDivs<Div> dv,
                                                         const T* __restrict__ x,  // (N, H, W, C)
                                                         T* __restrict__ y) {      // (N, P, Q, C)
  using I = typename Div::Index;
  const I C = static_cast<I>(d.C), G = C / V;
  const I total = static_cast<I>(d.N) * d.P * d.Q * G;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I o = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PixelGroup<I> at = split_index(o, dv.P, dv.Q, dv.G);
    const T* xn = x + at.n * d.H * d.W * C + at.g * V;
    const Window win = clipped_window(d, at.a, at.b);
    float acc[V];
    if (kMax) {
      load_channels(acc, xn + (static_cast<I>(win.h0) * d.W + win.w0) * C);
    } else {
#pragma unroll
      for (int l = 0; l < V; ++l) acc[l] = 0.0f;
    }
    for (int h = win.h0; h < win.h1; ++h)
      for (int w = win.w0; w < win.w1; ++w) {
        float v[V];
        load_channels(v, xn + (static_cast<I>(h) * d.W + w) * C);
#pragma unroll
        for (int l = 0; l < V; ++l) {
          if (kMax) {
            if (max_takes(v[l], acc[l])) acc[l] = v[l];
          } else {
            acc[l] += v[l];
          }
        }
      }
    if (!kMax) {
      const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
#pragma unroll
      for (int l = 0; l < V; ++l) acc[l] = acc[l] / count;
    }
    store_channels(y + o * V, acc);  // o enumerates (n, p, q, g), g fastest: y's channels-last order
  }
}

// Global pooling. grid (channel tiles, samples); block (tile, kThreads / tile): threadIdx.x is a
// channel group, threadIdx.y a slice of the pixels (every blockDim.y-th); the slices' partials
// then meet in a fixed tree in shared memory. blockDim.x is a power of two.
template <bool kMax, int V, typename T>
static __global__ void pool2d_forward_global_nhwc_kernel(int64_t N, int HW, int64_t C,
                                                         const T* __restrict__ x,  // (N, HW, C)
                                                         T* __restrict__ y) {      // (N, C)
  __shared__ float partial[V * kThreads];  // [lane][slot]: consecutive slots in consecutive banks
  const int64_t G = C / V;
  const int tile = blockDim.x, slices = blockDim.y;
  const int slot = threadIdx.y * tile + threadIdx.x;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * tile + threadIdx.x;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    float acc[V];
#pragma unroll
    for (int l = 0; l < V; ++l) acc[l] = kMax ? -INFINITY : 0.0f;
    if (g < G) {
      const T* xn = x + n * HW * C + g * V;
      for (int hw = threadIdx.y; hw < HW; hw += slices) {
        float v[V];
        load_channels(v, xn + static_cast<int64_t>(hw) * C);
#pragma unroll
        for (int l = 0; l < V; ++l) {
          if (kMax) {
            if (max_takes(v[l], acc[l])) acc[l] = v[l];
          } else {
            acc[l] += v[l];
          }
        }
      }
    }
#pragma unroll
    for (int l = 0; l < V; ++l) partial[l * kThreads + slot] = acc[l];
    __syncthreads();
    for (int half = slices / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.y) < half) {
#pragma unroll
        for (int l = 0; l < V; ++l) {
          const float other = partial[l * kThreads + slot + half * tile];
          if (kMax) {
            if (max_takes(other, acc[l])) acc[l] = other;
          } else {
            acc[l] += other;
          }
          partial[l * kThreads + slot] = acc[l];
        }
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && g < G) {
      if (!kMax) {
#pragma unroll
        for (int l = 0; l < V; ++l) acc[l] = acc[l] / static_cast<float>(HW);
      }
      store_channels(y + n * C + g * V, acc);
    }
  }
}

template <typename Div, bool kMax, int V, typename T>
static __global__ void pool2d_backward_gather_nhwc_kernel(PoolDims d, NhwcDivs<Div> dv,
                                                          const T* __restrict__ x,   // (N, H, W, C)
                                                          const T* __restrict__ y,   // (N, P, Q, C)
                                                          const T* __restrict__ dy,  // (N, P, Q, C)
                                                          T* __restrict__ dx) {      // (N, H, W, C)
  using I = typename Div::Index;
  const I C = static_cast<I>(d.C), G = C / V;
  const I total = static_cast<I>(d.N) * d.H * d.W * G;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const PixelGroup<I> at = split_index(e, dv.H, dv.W, dv.G);
    const I n = at.n, g = at.g;
    const int h = at.a, w = at.b;
    const T* xn = kMax ? x + n * d.H * d.W * C + g * V : nullptr;  // avg never reads x
    float v[V];
    if (kMax) load_channels(v, x + e * V);  // e enumerates (n, h, w, g), g fastest
    int p_lo, p_hi, q_lo, q_hi;
    covering_outputs(h, d.pad_h, d.R, dv.stride_h, d.P, p_lo, p_hi);
    covering_outputs(w, d.pad_w, d.S, dv.stride_w, d.Q, q_lo, q_hi);
    float acc[V];
#pragma unroll
    for (int l = 0; l < V; ++l) acc[l] = 0.0f;
    for (int p = p_lo; p <= p_hi; ++p)
      for (int q = q_lo; q <= q_hi; ++q) {
        const Window win = clipped_window(d, p, q);
        const I o = ((n * d.P + p) * d.Q + q) * C + g * V;
        float grad[V];
        load_channels(grad, dy + o);
        if (!kMax) {
          const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
#pragma unroll
          for (int l = 0; l < V; ++l) acc[l] += grad[l] / count;
          continue;
        }
        float m[V];
        load_channels(m, y + o);
        bool takes[V];  // this position equals y in lane l, and no earlier position does
        bool any = false;
#pragma unroll
        for (int l = 0; l < V; ++l) {
          takes[l] = is_argmax(v[l], m[l]);
          any = any || takes[l];
        }
        for (int hh = win.h0; hh <= h && any; ++hh) {
          const int w_end = hh < h ? win.w1 : w;
          for (int ww = win.w0; ww < w_end && any; ++ww) {
            float earlier[V];
            load_channels(earlier, xn + (static_cast<I>(hh) * d.W + ww) * C);
            any = false;
#pragma unroll
            for (int l = 0; l < V; ++l) {
              takes[l] = takes[l] && !is_argmax(earlier[l], m[l]);
              any = any || takes[l];
            }
          }
        }
#pragma unroll
        for (int l = 0; l < V; ++l)
          if (takes[l]) acc[l] += grad[l];
      }
    store_channels(dx + e * V, acc);
  }
}

// Channel groups: 8 channels a thread when the channels and every pointer allow 16-byte accesses.
static bool by_eight(const PoolDims& d, std::initializer_list<const void*> pointers) {
  if (d.C % 8 != 0) return false;
  for (const void* p : pointers)
    if (p && !cuda::aligned16(p)) return false;
  return true;
}

template <bool kMax, int V, typename T>
static void launch_forward(cudaStream_t stream, const Pool2dShape& sh, const PoolDims& d, const T* x, T* y) {
  const int64_t G = d.C / V;
  if (is_global(sh)) {
    int tile = 1;  // channel groups a block: the power of two reaching G, at most a warp
    while (tile < G && tile < cuda::kWarpSize) tile *= 2;
    const dim3 block(tile, kThreads / tile);
    const dim3 grid(static_cast<unsigned>((G + tile - 1) / tile), static_cast<unsigned>(std::min<int64_t>(d.N, 65535)));
    pool2d_forward_global_nhwc_kernel<kMax, V><<<grid, block, 0, stream>>>(d.N, d.H * d.W, d.C, x, y);
    return;
  }
  const unsigned blocks = cuda::grid_blocks(d.N * d.P * d.Q * G, kThreads);
  if (index_fits_int32(d, int64_t{blocks} * kThreads))
    pool2d_forward_window_nhwc_kernel<cuda::FastDiv32, kMax, V>
        <<<blocks, kThreads, 0, stream>>>(d, nhwc_divs<cuda::FastDiv32>(d, G), x, y);
  else
    pool2d_forward_window_nhwc_kernel<cuda::PlainDiv64, kMax, V>
        <<<blocks, kThreads, 0, stream>>>(d, nhwc_divs<cuda::PlainDiv64>(d, G), x, y);
}

template <bool kMax, int V, typename T>
static void launch_backward(cudaStream_t stream, const PoolDims& d, const T* x, const T* y, const T* dy, T* dx) {
  const int64_t G = d.C / V;
  const unsigned blocks = cuda::grid_blocks(d.N * d.H * d.W * G, kThreads);
  if (index_fits_int32(d, int64_t{blocks} * kThreads))
    pool2d_backward_gather_nhwc_kernel<cuda::FastDiv32, kMax, V>
        <<<blocks, kThreads, 0, stream>>>(d, nhwc_divs<cuda::FastDiv32>(d, G), x, y, dy, dx);
  else
    pool2d_backward_gather_nhwc_kernel<cuda::PlainDiv64, kMax, V>
        <<<blocks, kThreads, 0, stream>>>(d, nhwc_divs<cuda::PlainDiv64>(d, G), x, y, dy, dx);
}

template <typename T>
static void forward_nhwc(const Pool2dForward& a) {
  const char* what = "pool2d forward";
  const T* x = half16_data<T>(a.x);
  T* y = half16_data<T>(a.y);
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  const PoolDims d = dims_of(a.sh, what);
  const bool eight = by_eight(d, {x, y});
  if (a.sh.kind == PoolKind::max)
    eight ? launch_forward<true, 8>(stream, a.sh, d, x, y) : launch_forward<true, 1>(stream, a.sh, d, x, y);
  else
    eight ? launch_forward<false, 8>(stream, a.sh, d, x, y) : launch_forward<false, 1>(stream, a.sh, d, x, y);
  CUDA_CHECK_LAUNCH(what);
}

// Average pooling reads neither x nor y (either may be null then).
template <typename T>
static void backward_nhwc(const Pool2dBackward& a) {
  const char* what = "pool2d backward";
  const bool is_max = a.sh.kind == PoolKind::max;
  const T* x = is_max ? half16_data<T>(a.x) : nullptr;
  const T* y = is_max ? half16_data<T>(a.y) : nullptr;
  const T* dy = half16_data<T>(a.dy);
  T* dx = half16_data<T>(a.dx);
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  const PoolDims d = dims_of(a.sh, what);
  const bool eight = by_eight(d, {x, y, dy, dx});
  if (is_max)
    eight ? launch_backward<true, 8>(stream, d, x, y, dy, dx) : launch_backward<true, 1>(stream, d, x, y, dy, dx);
  else
    eight ? launch_backward<false, 8>(stream, d, x, y, dy, dx) : launch_backward<false, 1>(stream, d, x, y, dy, dx);
  CUDA_CHECK_LAUNCH(what);
}

void pool2d_forward_cuda_bf16(const Pool2dForward& a) { forward_nhwc<bf16>(a); }
void pool2d_forward_cuda_f16(const Pool2dForward& a) { forward_nhwc<f16>(a); }
void pool2d_backward_cuda_bf16(const Pool2dBackward& a) { backward_nhwc<bf16>(a); }
void pool2d_backward_cuda_f16(const Pool2dBackward& a) { backward_nhwc<f16>(a); }

}  // namespace cnn
