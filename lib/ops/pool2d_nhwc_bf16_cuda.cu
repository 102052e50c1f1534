// Max and average pooling of channels-last activations on the GPU: bf16, f16 (BF16/FP16 training)
// and f32cl (float, tf32 training); T, the element type, is a template parameter of every kernel
// (half16.cuh). Threads run along channels: V = 8 channels a thread where C % 8 == 0 and the
// pointers are 16-byte aligned (one 16-byte access for bf16 and f16, two for float), V = 1
// otherwise; float arithmetic on the widened values, each output rounded once (float: stored as
// computed). Forward: one thread per (n, p, q, channel group); global pooling (R = H, S = W) instead one
// block per (n, channel tile) that reduces over H*W in a fixed tree (deterministic).
// Max backward, tiled (the default): one block per (n, tile of outputs, slice of channel groups).
// It first finds, for every window reaching the inputs the tile owns, each lane's argmax as a byte
// (its row-major position r*S+s in the window) and keeps it in shared memory with the window's dy;
// then each owned input sums, over the windows holding it in (p, q) order, the dy of those whose
// argmax it is: the CPU's additions in the CPU's order, every dx written once, no atomics. x is
// read about once (the windows' overlap from L1), y and dy once, dx written once: the bytes
// moved are close to the tensors' sizes. Average backward (and max where the tiled path does not
// fit: a window over 255 positions, or shared memory past kTiledSharedMax) gathers as
// pool2d_cuda.cu does: one thread per (n, h, w, group) over the windows holding it in (p, q)
// order; for max it re-scans each window's earlier positions to decide the argmax, in chains of
// dependent loads (mini_xception's four b256 pools took 0.20 ms a step on the H200 that way,
// where their bytes need about 25 us: the reason for the tiled kernel). Windows that do not overlap
// (stride == window, no padding) take a streaming kernel instead: one thread per window routes its
// dy and zeroes the rest (pool2d_backward_disjoint_nhwc_kernel). CNN_POOL_BACKWARD=tiled|gather in
// the environment (read once a process) forces the tiled or the gather kernel, so one benchmark run
// can time them.
// Trap: max backward routes dy to the window's first row-major position equal to y, lane by lane;
// y is the T max of T inputs, so it is exactly one of them and equality finds it.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

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

// The tiled max backward's geometry, chosen on the host (plan_tiles): tiles of TP x TQ outputs,
// the halo of earlier output rows and columns whose windows also reach a tile's inputs, slices of
// GS channel groups. A block's window slots: (TP + halo_p) x (TQ + halo_q) x GS.
struct PoolTiles {
  int TP, TQ;            // outputs a tile (the last tile of an axis may hold fewer)
  int tiles_p, tiles_q;  // tiles along P and Q
  int halo_p, halo_q;    // ceil(R / stride_h) - 1, ceil(S / stride_w) - 1
  int GS, slices;        // channel groups a block (the last slice may hold fewer); slices of G
  cuda::FastDiv32 stride_h, stride_w;
};

// A window's argmax byte when no position equals y (routes nothing, as the CPU); positions are
// r * S + s < R * S <= kNoArgmax.
static constexpr int kNoArgmax = 255;
static constexpr size_t kTiledSharedMax = 48 * 1024;  // the default dynamic shared memory limit

// The first input row (or column) that the tile starting at output P0 owns: 0 for the first tile,
// H past the last, else the first row of window P0 clamped into [0, H). The edges grow with P0, so
// the tiles partition the input: every dx element is written by exactly one tile.
__device__ __forceinline__ int tile_edge(int P0, int P, int stride, int pad, int H) {
  if (P0 <= 0) return 0;
  if (P0 >= P) return H;
  return min(max(P0 * stride - pad, 0), H);
}

// is_argmax without branches (bitwise on the comparisons), for selects.
__device__ __forceinline__ bool argmax_at(float v, float y) { return (v == y) | ((v != v) & (y != y)); }

// V argmax bytes packed in a word (V = 8: a uint2) and back.
template <int V>
using ArgmaxBytes = std::conditional_t<V == 8, uint2, uint8_t>;
template <int V>
__device__ __forceinline__ ArgmaxBytes<V> pack_argmax(const int (&at)[V]) {
  if constexpr (V == 8) {
    return make_uint2(at[0] | at[1] << 8 | at[2] << 16 | static_cast<uint32_t>(at[3]) << 24,
                      at[4] | at[5] << 8 | at[6] << 16 | static_cast<uint32_t>(at[7]) << 24);
  } else {
    return static_cast<uint8_t>(at[0]);
  }
}
template <int V>
__device__ __forceinline__ int argmax_lane(const ArgmaxBytes<V>& b, int l) {
  if constexpr (V == 8)
    return static_cast<int>(((l < 4 ? b.x : b.y) >> (8 * (l & 3))) & 0xffu);
  else
    return b;
}

// V elements' bits (dy kept in shared memory as stored: 16-bit T a uint4 or a uint16_t, float
// Raw8<float> or Raw1<float>), loaded from p and widened.
template <int V, typename T>
using RawChannels = std::conditional_t<std::is_same_v<T, float>, std::conditional_t<V == 8, Raw8<T>, Raw1<T>>,
                                       std::conditional_t<V == 8, uint4, uint16_t>>;
template <int V, typename T>
__device__ __forceinline__ RawChannels<V, T> load_raw_channels(const T* __restrict__ p) {
  if constexpr (!std::is_same_v<T, float>) {
    return *reinterpret_cast<const RawChannels<V, T>*>(p);
  } else {
    RawChannels<V, T> r;
    if constexpr (V == 8)
      load_raw8(p, r);
    else
      load_raw1(p, 0, r);
    return r;
  }
}
template <int V, typename T>
__device__ __forceinline__ void widen_channels(float (&v)[V], const RawChannels<V, T>& raw) {
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (V == 8)
      unpack_raw8<T>(raw, v);
    else
      v[0] = unpack_raw1<T>(raw);
  } else if constexpr (V == 8) {
    half16_unpack8<T>(raw, v);
  } else {
    v[0] = Half16<T>::to_float(raw);
  }
}

// 8 channels stored at p (16-byte aligned) with __stwb: one 16-byte store for bf16 and f16, two for
// float.
template <typename T>
__device__ __forceinline__ void stwb_channels8(T* __restrict__ p, const float (&v)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    const Raw8<float> r = pack_raw8<float>(v);
    __stwb(reinterpret_cast<uint4*>(p), r.a);
    __stwb(reinterpret_cast<uint4*>(p) + 1, r.b);
  } else {
    __stwb(reinterpret_cast<uint4*>(p), half16_pack8<T>(v));
  }
}

// Shared memory bytes of a tiled-backward window slot: its dy as stored, then its argmax bytes.
static constexpr size_t tiled_slot_bytes(int V, size_t element_bytes) { return V * element_bytes + V; }

// Max backward, tiled (see the top of the file). grid: (tiles_p * tiles_q * slices, slice fastest;
// samples, striding when N exceeds gridDim.y); dynamic shared memory: the
// window slots' dy (RawChannels, tiled_slot_bytes) then their argmax bytes. KR, KS: the window when known at
// compile time (its loops unroll, so a window's loads issue together), 0 for d.R, d.S.
template <int KR, int KS, int V, typename T>
static __global__ void __launch_bounds__(kThreads)
    pool2d_backward_tiled_nhwc_kernel(PoolDims d, PoolTiles t,
                                      const T* __restrict__ x,   // (N, H, W, C)
                                      const T* __restrict__ y,   // (N, P, Q, C)
                                      const T* __restrict__ dy,  // (N, P, Q, C)
                                      T* __restrict__ dx) {      // (N, H, W, C)
  extern __shared__ __align__(16) unsigned char tiled_shared[];
  const int R = KR ? KR : d.R, S = KS ? KS : d.S;
  const int64_t C = d.C, G = C / V;
  const int nq = t.TQ + t.halo_q;                   // slot columns
  const int slots = (t.TP + t.halo_p) * nq * t.GS;  // slot (i, j, gl): window (pa + i, qa + j), group g0 + gl
  static_assert(sizeof(RawChannels<V, T>) == V * sizeof(T), "plan_tiles sizes a slot's dy as V elements");
  RawChannels<V, T>* slot_dy = reinterpret_cast<RawChannels<V, T>*>(tiled_shared);
  ArgmaxBytes<V>* slot_at = reinterpret_cast<ArgmaxBytes<V>*>(tiled_shared + slots * sizeof(RawChannels<V, T>));
  const int slice = static_cast<int>(blockIdx.x % t.slices);
  const int tile = static_cast<int>(blockIdx.x / t.slices);
  const int P0 = tile / t.tiles_q * t.TP, Q0 = tile % t.tiles_q * t.TQ;
  const int pa = P0 - t.halo_p, qa = Q0 - t.halo_q;  // slot (0, 0)'s window; may be negative (slots unused)
  const int p_end = min(P0 + t.TP, d.P), q_end = min(Q0 + t.TQ, d.Q);
  const int64_t g0 = static_cast<int64_t>(slice) * t.GS;
  const int gs = static_cast<int>(min(static_cast<int64_t>(t.GS), G - g0));
  // The inputs this tile owns: rows [h0, h1), columns [w0, w1).
  const int h0 = tile_edge(P0, d.P, d.stride_h, d.pad_h, d.H);
  const int h1 = tile_edge(P0 + t.TP, d.P, d.stride_h, d.pad_h, d.H);
  const int w0 = tile_edge(Q0, d.Q, d.stride_w, d.pad_w, d.W);
  const int w1 = tile_edge(Q0 + t.TQ, d.Q, d.stride_w, d.pad_w, d.W);
  const int cols = w1 - w0, items = (h1 - h0) * cols * t.GS;  // plan_tiles: H * W * GS fits int32
  for (int64_t n = blockIdx.y; n < d.N; n += gridDim.y) {
    const T* xn = x + n * d.H * d.W * C + g0 * V;
    const T* yn = y + n * d.P * d.Q * C + g0 * V;
    const T* dyn = dy + n * d.P * d.Q * C + g0 * V;
    T* dxn = dx + n * d.H * d.W * C + g0 * V;

    // 1. Every window reaching the tile's inputs: its dy, and per lane the first row-major position
    //    (r, s) of the clipped window whose value equals y (is_argmax, as the CPU).
    for (int i = threadIdx.x; i < slots; i += blockDim.x) {
      const int gl = i % t.GS, ij = i / t.GS;
      const int p = pa + ij / nq, q = qa + ij % nq;
      if (gl >= gs || p < 0 || q < 0 || p >= p_end || q >= q_end) continue;
      const int64_t o = (static_cast<int64_t>(p) * d.Q + q) * C + gl * V;
      const RawChannels<V, T> grad = load_raw_channels<V>(dyn + o);
      float m[V];
      load_channels(m, yn + o);
      int at[V];
#pragma unroll
      for (int l = 0; l < V; ++l) at[l] = kNoArgmax;
      // Positions last to first, each match overwriting: the first one stays. A position off the
      // input reads a clamped one (in bounds, so every load is unconditional and the window's
      // loads issue together) and matches nothing.
      const int hs = p * d.stride_h - d.pad_h, ws = q * d.stride_w - d.pad_w;
      const T* xg = xn + gl * V;
#pragma unroll
      for (int r = R - 1; r >= 0; --r) {
        const int h = hs + r, hc = min(max(h, 0), d.H - 1);
#pragma unroll
        for (int s = S - 1; s >= 0; --s) {
          const int w = ws + s, wc = min(max(w, 0), d.W - 1);
          const bool inside = (h == hc) & (w == wc);
          float v[V];
          load_channels(v, xg + (static_cast<int64_t>(hc) * d.W + wc) * C);
#pragma unroll
          for (int l = 0; l < V; ++l) at[l] = inside & argmax_at(v[l], m[l]) ? r * S + s : at[l];
        }
      }
      slot_dy[i] = grad;
      slot_at[i] = pack_argmax<V>(at);
    }
    __syncthreads();

    // 2. Each input the tile owns: dy of the windows (p, q order) whose argmax it is, summed from 0.
    for (int i = threadIdx.x; i < items; i += blockDim.x) {
      const int gl = i % t.GS, hw = i / t.GS;
      if (gl >= gs) continue;
      const int h = h0 + hw / cols, w = w0 + hw % cols;
      int p_lo, p_hi, q_lo, q_hi;  // within [max(pa, 0), p_end) and [max(qa, 0), q_end): the halo's bound
      covering_outputs(h, d.pad_h, R, t.stride_h, d.P, p_lo, p_hi);
      covering_outputs(w, d.pad_w, S, t.stride_w, d.Q, q_lo, q_hi);
      float acc[V];
#pragma unroll
      for (int l = 0; l < V; ++l) acc[l] = 0.0f;
      for (int p = p_lo; p <= p_hi; ++p) {
        const int row = (h - (p * d.stride_h - d.pad_h)) * S;
        for (int q = q_lo; q <= q_hi; ++q) {
          const int pos = row + w - (q * d.stride_w - d.pad_w);
          const int slot = ((p - pa) * nq + (q - qa)) * t.GS + gl;
          const ArgmaxBytes<V> at = slot_at[slot];
          float grad[V];
          widen_channels<V, T>(grad, slot_dy[slot]);
#pragma unroll
          for (int l = 0; l < V; ++l) acc[l] = argmax_lane<V>(at, l) == pos ? acc[l] + grad[l] : acc[l];
        }
      }
      T* at_dx = dxn + (static_cast<int64_t>(h) * d.W + w) * C + gl * V;
      if constexpr (V == 8)
        stwb_channels8(at_dx, acc);  // store_channels came out as 4 x 32 bits here
      else
        store_channels(at_dx, acc);
    }
    __syncthreads();  // the next tile's step 1 reuses the slots
  }
}

// Max backward where windows do not overlap and start at the input's corner (stride == window, no
// padding: vgg_fer's 2x2 stride-2 pools): one thread per (n, p, q, channel group) owns its window's
// inputs and, in the last window row (column), the input rows (columns) past it that no window reads.
// Each lane's dy goes to the window's first row-major position equal to y (is_argmax, as the CPU),
// added to 0 as the CPU's sum does (-0 -> +0); every other owned input gets 0. Each dx written once,
// x read once, y and dy once, no shared memory: a streaming pass (the tiled kernel's staging took
// 4x the bytes' time on these windows). KR, KS: the window when 2 (0: d.R, d.S).
template <typename Div, int KR, int KS, int V, typename T>
static __global__ void __launch_bounds__(kThreads)
    pool2d_backward_disjoint_nhwc_kernel(PoolDims d, NhwcDivs<Div> dv,
                                         const T* __restrict__ x,   // (N, H, W, C)
                                         const T* __restrict__ y,   // (N, P, Q, C)
                                         const T* __restrict__ dy,  // (N, P, Q, C)
                                         T* __restrict__ dx) {      // (N, H, W, C)
  using I = typename Div::Index;
  const int R = KR ? KR : d.R, S = KS ? KS : d.S;
  const I C = static_cast<I>(d.C), G = C / V;
  const I total = static_cast<I>(d.N) * d.P * d.Q * G;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I o = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PixelGroup<I> at = split_index(o, dv.P, dv.Q, dv.G);
    const T* xn = x + at.n * d.H * d.W * C + at.g * V;
    T* dxn = dx + at.n * d.H * d.W * C + at.g * V;
    float m[V], g[V], zero[V];
    load_channels(m, y + o * V);
    load_channels(g, dy + o * V);
    bool found[V];
#pragma unroll
    for (int l = 0; l < V; ++l) found[l] = false, zero[l] = 0.0f;
    const int h0 = at.a * R, w0 = at.b * S;
    // Loads first (the window's positions issue together), then the routing in window order.
    float v[KR ? KR : 1][KS ? KS : 1][V];
    if constexpr (KR != 0 && KS != 0) {
#pragma unroll
      for (int r = 0; r < KR; ++r)
#pragma unroll
        for (int s = 0; s < KS; ++s) {
          const int h = min(h0 + r, d.H - 1), w = min(w0 + s, d.W - 1);
          load_channels(v[r][s], xn + (static_cast<I>(h) * d.W + w) * C);
        }
    }
#pragma unroll
    for (int r = 0; r < (KR ? KR : 64); ++r) {
      if (!KR && r >= R) break;
      const int h = h0 + r;
#pragma unroll
      for (int s = 0; s < (KS ? KS : 64); ++s) {
        if (!KS && s >= S) break;
        const int w = w0 + s;
        if (h >= d.H || w >= d.W) continue;
        float xv[V], out[V];
        if constexpr (KR != 0 && KS != 0) {
#pragma unroll
          for (int l = 0; l < V; ++l) xv[l] = v[KR ? r : 0][KS ? s : 0][l];
        } else {
          load_channels(xv, xn + (static_cast<I>(h) * d.W + w) * C);
        }
#pragma unroll
        for (int l = 0; l < V; ++l) {
          const bool take = !found[l] && is_argmax(xv[l], m[l]);
          out[l] = take ? 0.0f + g[l] : 0.0f;
          found[l] = found[l] || take;
        }
        store_channels(dxn + (static_cast<I>(h) * d.W + w) * C, out);
      }
    }
    // Inputs no window reads: below the last window row, right of the last window column.
    const int w_end = at.b == d.Q - 1 ? d.W : w0 + S;
    if (at.a == d.P - 1)
      for (int h = h0 + R; h < d.H; ++h)
        for (int w = w0; w < w_end; ++w) store_channels(dxn + (static_cast<I>(h) * d.W + w) * C, zero);
    if (at.b == d.Q - 1)
      for (int h = h0; h < min(h0 + R, d.H); ++h)
        for (int w = w0 + S; w < d.W; ++w) store_channels(dxn + (static_cast<I>(h) * d.W + w) * C, zero);
  }
}

// Windows that do not overlap and start at the corner: the disjoint kernel's shapes.
static bool disjoint_windows(const PoolDims& d) {
  return d.stride_h == d.R && d.stride_w == d.S && d.pad_h == 0 && d.pad_w == 0 && d.R * d.S <= 64;
}

template <int V, typename T>
static void launch_disjoint_backward(cudaStream_t stream, const PoolDims& d, const T* x, const T* y, const T* dy,
                                     T* dx) {
  const int64_t G = d.C / V;
  const unsigned blocks = cuda::grid_blocks(d.N * d.P * d.Q * G, kThreads);
  const bool two = d.R == 2 && d.S == 2;
  if (index_fits_int32(d, int64_t{blocks} * kThreads)) {
    const auto dv = nhwc_divs<cuda::FastDiv32>(d, G);
    if (two)
      pool2d_backward_disjoint_nhwc_kernel<cuda::FastDiv32, 2, 2, V><<<blocks, kThreads, 0, stream>>>(d, dv, x, y, dy, dx);
    else
      pool2d_backward_disjoint_nhwc_kernel<cuda::FastDiv32, 0, 0, V><<<blocks, kThreads, 0, stream>>>(d, dv, x, y, dy, dx);
  } else {
    const auto dv = nhwc_divs<cuda::PlainDiv64>(d, G);
    if (two)
      pool2d_backward_disjoint_nhwc_kernel<cuda::PlainDiv64, 2, 2, V><<<blocks, kThreads, 0, stream>>>(d, dv, x, y, dy, dx);
    else
      pool2d_backward_disjoint_nhwc_kernel<cuda::PlainDiv64, 0, 0, V><<<blocks, kThreads, 0, stream>>>(d, dv, x, y, dy, dx);
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

// Outputs a tile spans along an axis at most; 8 x 8 windows of a 3x3 stride-2 pool own 16 x 16 inputs.
static constexpr int kTileMost = 8;

// The tiled max backward's geometry for V-channel groups of element_bytes-byte elements and its
// shared memory bytes; false when that path does not fit (a window of more than 255 positions, or
// too many slots: a long window at a short stride makes a wide halo), and the gather kernel runs
// instead.
static bool plan_tiles(const PoolDims& d, int V, size_t element_bytes, PoolTiles& t, size_t& shared) {
  if (int64_t{d.R} * d.S > kNoArgmax) return false;
  const int64_t G = d.C / V;
  t.GS = static_cast<int>(std::min<int64_t>(G, V == 8 ? 4 : 32));  // 32 channels a pixel (64 bytes in 16 bits)
  if (!cuda::fits_int32(int64_t{d.H} * d.W * t.GS) || !cuda::fits_int32(int64_t{d.P} * d.stride_h + d.H) ||
      !cuda::fits_int32(int64_t{d.Q} * d.stride_w + d.W))
    return false;
  t.slices = static_cast<int>((G + t.GS - 1) / t.GS);
  // Tiles as even as kTileMost allows: P = 11 gives 6 + 5, not 8 + 3.
  auto split = [](int P, int& TP, int& tiles) {
    tiles = (P + kTileMost - 1) / kTileMost;
    TP = (P + tiles - 1) / tiles;
    tiles = (P + TP - 1) / TP;
  };
  split(d.P, t.TP, t.tiles_p);
  split(d.Q, t.TQ, t.tiles_q);
  t.halo_p = std::min((d.R + d.stride_h - 1) / d.stride_h - 1, d.P);
  t.halo_q = std::min((d.S + d.stride_w - 1) / d.stride_w - 1, d.Q);
  const int64_t slots = int64_t{t.TP + t.halo_p} * (t.TQ + t.halo_q) * t.GS;
  shared = static_cast<size_t>(slots) * tiled_slot_bytes(V, element_bytes);  // dy bits, argmax bytes
  if (shared > kTiledSharedMax) return false;
  if (int64_t{t.tiles_p} * t.tiles_q * t.slices > int64_t{0x7fffffff}) return false;  // gridDim.x
  t.stride_h = cuda::FastDiv32(d.stride_h);
  t.stride_w = cuda::FastDiv32(d.stride_w);
  return true;
}

// Max backward: the disjoint kernel where windows do not overlap, else the tiled kernel where
// plan_tiles fits, else the gather kernel.
template <int V, typename T>
static void launch_max_backward(cudaStream_t stream, const PoolDims& d, const T* x, const T* y, const T* dy, T* dx) {
  const MaxPoolBackwardKernel mode = max_backward_mode();
  if (mode == MaxPoolBackwardKernel::automatic && disjoint_windows(d)) {
    launch_disjoint_backward<V>(stream, d, x, y, dy, dx);
    return;
  }
  PoolTiles t;
  size_t shared = 0;
  if (mode == MaxPoolBackwardKernel::gather || !plan_tiles(d, V, sizeof(T), t, shared)) {
    launch_backward<true, V>(stream, d, x, y, dy, dx);
    return;
  }
  // Threads: about one a slot and one per two owned inputs (2D tiles of stride x stride inputs a
  // window), whole warps, 64 to kThreads.
  const int64_t owned =
      std::min<int64_t>(int64_t{t.TP} * d.stride_h, d.H) * std::min<int64_t>(int64_t{t.TQ} * d.stride_w, d.W) * t.GS;
  const int64_t slots = int64_t{t.TP + t.halo_p} * (t.TQ + t.halo_q) * t.GS;
  const int64_t want = (std::max(slots, owned / 2) + cuda::kWarpSize - 1) / cuda::kWarpSize * cuda::kWarpSize;
  const int threads = static_cast<int>(std::clamp<int64_t>(want, 64, kThreads));
  const dim3 blocks(static_cast<unsigned>(t.tiles_p * t.tiles_q * t.slices),
                    static_cast<unsigned>(std::min<int64_t>(d.N, 65535)));
  if (d.R == 3 && d.S == 3)
    pool2d_backward_tiled_nhwc_kernel<3, 3, V><<<blocks, threads, shared, stream>>>(d, t, x, y, dy, dx);
  else if (d.R == 2 && d.S == 2)
    pool2d_backward_tiled_nhwc_kernel<2, 2, V><<<blocks, threads, shared, stream>>>(d, t, x, y, dy, dx);
  else
    pool2d_backward_tiled_nhwc_kernel<0, 0, V><<<blocks, threads, shared, stream>>>(d, t, x, y, dy, dx);
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
    eight ? launch_max_backward<8>(stream, d, x, y, dy, dx) : launch_max_backward<1>(stream, d, x, y, dy, dx);
  else
    eight ? launch_backward<false, 8>(stream, d, x, y, dy, dx) : launch_backward<false, 1>(stream, d, x, y, dy, dx);
  CUDA_CHECK_LAUNCH(what);
}

void pool2d_forward_cuda_bf16(const Pool2dForward& a) { forward_nhwc<bf16>(a); }
void pool2d_forward_cuda_f16(const Pool2dForward& a) { forward_nhwc<f16>(a); }
void pool2d_backward_cuda_bf16(const Pool2dBackward& a) { backward_nhwc<bf16>(a); }
void pool2d_backward_cuda_f16(const Pool2dBackward& a) { backward_nhwc<f16>(a); }
void pool2d_forward_cuda_f32cl(const Pool2dForward& a) { forward_nhwc<float>(a); }
void pool2d_backward_cuda_f32cl(const Pool2dBackward& a) { backward_nhwc<float>(a); }

}  // namespace cnn
