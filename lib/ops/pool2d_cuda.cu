// Max and average pooling on the GPU: one thread per output (one warp per plane for a global
// window); backward gathers, one thread per input over the windows containing it in (p, q) order:
// no atomics, deterministic, the CPU's additions in the CPU's order. Max pools whose windows do not
// overlap (stride = window, no padding) instead run one thread per window, which writes its inputs'
// dx (the same values; the gather took twice the bytes' time on vgg_fer's 2x2 pools). Max pools
// whose windows overlap (GoogLeNet's and mini_xception's 3x3 pools) run the tiled kernel: a block
// copies the x, y and dy its windows need to shared memory at once, finds each window's argmax
// once, and each input then adds the dy of the windows it is the argmax of, in the plain kernel's
// order. The plain gather finds the argmax again for every input equal to a window's max, in chains
// of dependent global loads. CNN_POOL_BACKWARD (pool2d.h) forces the tiled or the gather kernel, to
// time them.
// Trap: max routes dy to the window's first row-major position equal to y (NaN matches NaN), so a
// thread whose value equals y must scan the window's earlier positions before claiming dy.
#include <algorithm>
#include <cmath>

#include "core/cuda_check.h"
#include "ops/pool2d.cuh"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// The divisors of the index arithmetic: FastDiv32 while every index fits in int32, else PlainDiv64.
template <typename Div>
struct PoolDivs {
  Div H, W, P, Q, stride_h, stride_w;
};
template <typename Div>
static PoolDivs<Div> divs_of(const PoolDims& d) {
  return PoolDivs<Div>{Div(d.H), Div(d.W), Div(d.P), Div(d.Q), Div(d.stride_h), Div(d.stride_w)};
}

// A flat index of a (planes, rows, cols) tensor split into its plane (N * C index, type I) and its
// int32 row and column: (plane, p, q) of y or (plane, h, w) of x.
template <typename I>
struct PlaneIndex {
  I plane;
  int row, col;
};
// by_rows, by_cols divide by rows, cols; I is Div::Index (int32_t for FastDiv32, int64_t for PlainDiv64).
template <typename Div>
static __device__ __forceinline__ PlaneIndex<typename Div::Index> split_plane_index(typename Div::Index i,
                                                                                    const Div& by_rows, int rows,
                                                                                    const Div& by_cols, int cols) {
  using I = typename Div::Index;
  const I t = by_cols.div(i);
  const int col = static_cast<int>(i - t * cols);
  const I plane = by_rows.div(t);
  const int row = static_cast<int>(t - plane * rows);
  return PlaneIndex<I>{plane, row, col};
}

// One output a thread. k3x3 (max only; GoogLeNet's, AlexNet's and mini_xception's pools): the
// window unrolled, each tap two bounds predicates and a load, where the generic loop walks the
// clipped window. Both scan row-major from the window's first value inside the input, as
// pool2d_forward_reference, so the same element wins a tie (+0 against -0) and the first NaN wins:
// the reference's bits (the cpu row's separable scan may keep the other zero of a tie).
template <typename Div, bool kMax, bool k3x3 = false>
static __global__ void pool2d_forward_window_kernel(PoolDims d, PoolDivs<Div> dv,
                                                    const float* __restrict__ x,  // (N, C, H, W)
                                                    float* __restrict__ y) {      // (N, C, P, Q)
  static_assert(kMax || !k3x3, "the unrolled window is max pooling's");
  using I = typename Div::Index;
  const I total = static_cast<I>(d.planes) * d.P * d.Q;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I o = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const auto [plane, p, q] = split_plane_index(o, dv.P, d.P, dv.Q, d.Q);
    const float* xp = x + plane * d.H * d.W;
    if constexpr (k3x3) {
      const int hs = p * d.stride_h - d.pad_h, ws = q * d.stride_w - d.pad_w;
      float acc = __ldg(xp + max(hs, 0) * d.W + max(ws, 0));
#pragma unroll
      for (int kh = 0; kh < 3; ++kh) {
        const bool h_in = unsigned(hs + kh) < unsigned(d.H);
#pragma unroll
        for (int kw = 0; kw < 3; ++kw)
          if (h_in && unsigned(ws + kw) < unsigned(d.W)) {
            const float v = __ldg(xp + (hs + kh) * d.W + ws + kw);
            if (max_takes(v, acc)) acc = v;
          }
      }
      y[o] = acc;
      continue;
    }
    const Window win = clipped_window(d, p, q);
    float acc = kMax ? xp[win.h0 * d.W + win.w0] : 0.0f;
    for (int h = win.h0; h < win.h1; ++h)
      for (int w = win.w0; w < win.w1; ++w) {
        const float v = xp[h * d.W + w];
        if (kMax) {
          if (max_takes(v, acc)) acc = v;
        } else {
          acc += v;
        }
      }
    y[o] = kMax ? acc : acc / static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
  }
}

// One warp per plane of H*W values -> one output.
template <bool kMax>
static __global__ void pool2d_forward_global_kernel(int64_t planes, int HW,
                                                    const float* __restrict__ x,  // (N, C, H, W)
                                                    float* __restrict__ y) {      // (N, C, 1, 1)
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t warps_per_grid = static_cast<int64_t>(gridDim.x) * (blockDim.x / cuda::kWarpSize);
  for (int64_t plane =
           static_cast<int64_t>(blockIdx.x) * (blockDim.x / cuda::kWarpSize) + threadIdx.x / cuda::kWarpSize;
       plane < planes; plane += warps_per_grid) {
    const float* xp = x + plane * HW;
    float acc = kMax ? -INFINITY : 0.0f;
    for (int i = lane; i < HW; i += cuda::kWarpSize) {
      const float v = xp[i];
      if (kMax) {
        if (max_takes(v, acc)) acc = v;
      } else {
        acc += v;
      }
    }
    if (kMax) {
#pragma unroll
      for (int offset = cuda::kWarpSize / 2; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, acc, offset);
        if (max_takes(other, acc)) acc = other;
      }
    } else {
      acc = cuda::warp_sum(acc);
    }
    if (lane == 0) y[plane] = kMax ? acc : acc / static_cast<float>(HW);
  }
}

template <typename Div, bool kMax>
static __global__ void pool2d_backward_gather_kernel(PoolDims d, PoolDivs<Div> dv,
                                                     const float* __restrict__ x,   // (N, C, H, W)
                                                     const float* __restrict__ y,   // (N, C, P, Q)
                                                     const float* __restrict__ dy,  // (N, C, P, Q)
                                                     float* __restrict__ dx) {      // (N, C, H, W)
  using I = typename Div::Index;
  const I total = static_cast<I>(d.planes) * d.H * d.W;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const auto [plane, h, w] = split_plane_index(e, dv.H, d.H, dv.W, d.W);
    const float* xp = x + plane * d.H * d.W;
    const I out0 = plane * d.P * d.Q;
    const float v = kMax ? xp[h * d.W + w] : 0.0f;  // avg never reads x
    int p_lo, p_hi, q_lo, q_hi;
    covering_outputs(h, d.pad_h, d.R, dv.stride_h, d.P, p_lo, p_hi);
    covering_outputs(w, d.pad_w, d.S, dv.stride_w, d.Q, q_lo, q_hi);
    float acc = 0.0f;
    for (int p = p_lo; p <= p_hi; ++p)
      for (int q = q_lo; q <= q_hi; ++q) {
        const Window win = clipped_window(d, p, q);
        const I o = out0 + p * d.Q + q;
        if (!kMax) {
          acc += dy[o] / static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
          continue;
        }
        const float m = y[o];
        if (!is_argmax(v, m)) continue;
        bool earlier = false;  // an earlier position of this window also equals y: it takes dy
        for (int hh = win.h0; hh <= h && !earlier; ++hh) {
          const int w_end = hh < h ? win.w1 : w;
          for (int ww = win.w0; ww < w_end; ++ww)
            if (is_argmax(xp[hh * d.W + ww], m)) {
              earlier = true;
              break;
            }
        }
        if (!earlier) acc += dy[o];
      }
    dx[e] = acc;
  }
}

// ---- max backward, overlapping windows: tiles staged in shared memory ----
// A block owns a tile of th x tw inputs in each of `planes` planes (small planes are packed, so a
// 7x7 plane does not leave most of a block idle). Phase 0: the x values the windows touching the
// tile read, and those windows' y and dy, are copied to shared memory by cp.async, a value a lane,
// every copy independent of the others, so a block waits on memory once (a window scan that stops
// at the first match serialises its global loads: the plain gather, and a first tiled kernel that
// still loaded y after staging x, ran at 0.4-0.6 TB/s on latency alone). Phase 1: each window
// touching the tile finds its argmax, the first row-major position k = (h - hs) * S + (w - ws) whose
// x equals y, and when that input is the tile's sets bit k of the input's mask (atomicOr in shared
// memory: the order of the ORs does not matter). Phase 2: each input sums the dy of the windows of
// its mask's bits from the highest bit down. For one input, a later window in (p, q) order starts
// further down or right, so the input sits at a smaller k in it: highest k first is (p, q) order,
// the plain gather's sum in its order, so the same bits. An input that is no window's argmax (most
// of them) reads one word and writes its 0. On the H200 (GoogLeNet b64's pools) the kernel is bound
// by instruction issue (ncu: SM throughput about 90%, DRAM under 20%), at 0.8-1.2 TB/s.
constexpr int kTileValues = 2048;           // inputs of a block's tile, over its planes: 8 a thread
constexpr size_t kMaxTileSmem = 48 * 1024;  // the default limit; beyond it the plain gather runs
constexpr int kMaskBits = 32;               // windows of at most 32 values (a 32-bit mask an input)

struct MaxTilePlan {
  int th = 0, tw = 0, tw_shift = 0, planes = 0;  // tile rows, columns (a power of 2), planes per block
  int op_max = 0, oq_max = 0;                    // windows touching a tile, at most, per axis
  int xr_max = 0, xc_max = 0;                    // x rows and columns those windows read, at most
  int64_t groups = 0;                            // blocks along z before the grid-stride loop
  size_t smem = 0;
};

// Divisors of the flat loops over a block's planes: a staged x value's row (xc_max) and that row's
// plane (xr_max), a window's row (oq_max) and plane (op_max), a tile input's plane.
// The loops run flat, a value a lane, rather than a lane group a row: a stride-2 tile's rows are 35
// x values and 17 windows wide, which left about half of each warp's lanes idle in a kernel bound
// by instruction issue.
struct MaxTileDivs {
  cuda::FastDiv32 x_cols, x_rows, slot_cols, slot_rows, tile_plane;
};
// A stride known at compile time (GoogLeNet's and mini_xception's 1 and 2): divisions of the
// non-negative coordinates become shifts. Otherwise cuda::FastDiv32.
template <int K>
struct ConstStride {
  __device__ __forceinline__ int div(int n) const { return n / K; }
};

static MaxTilePlan max_tile_plan(const PoolDims& d) {
  MaxTilePlan t;
  t.tw = d.W > 16 ? 32 : d.W > 8 ? 16 : 8;
  t.tw_shift = t.tw == 32 ? 5 : t.tw == 16 ? 4 : 3;
  const int rows = kTileValues / t.tw, tiles_h = (d.H + rows - 1) / rows;
  t.th = (d.H + tiles_h - 1) / tiles_h;  // the rows split evenly between the tiles of a column
  t.planes = static_cast<int>(std::clamp<int64_t>(kTileValues / (int64_t{t.th} * t.tw), 1, d.planes));
  // Windows touching rows [h0, h0 + th): p from ceil((h0 + pad - R + 1) / s) to floor((h0 + th - 1 + pad) / s).
  t.op_max = std::min((t.th + d.R - 2) / d.stride_h + 1, d.P);
  t.oq_max = std::min((t.tw + d.S - 2) / d.stride_w + 1, d.Q);
  t.xr_max = (t.op_max - 1) * d.stride_h + d.R;
  t.xc_max = (t.oq_max - 1) * d.stride_w + d.S;
  t.groups = (d.planes + t.planes - 1) / t.planes;
  const size_t slots = static_cast<size_t>(t.op_max) * t.oq_max, xs = static_cast<size_t>(t.xr_max) * t.xc_max;
  t.smem = static_cast<size_t>(t.planes) * (xs + 2 * slots + static_cast<size_t>(t.th) * t.tw) * sizeof(float);
  return t;
}

// Whether the tiled kernel can run the shape: a window's positions fit the 32-bit mask, the staged
// tile fits the shared memory, the grid fits, offsets within a block's planes fit int32.
static bool max_tiles_fit(const PoolDims& d, const MaxTilePlan& t) {
  return int64_t{d.R} * d.S <= kMaskBits && t.smem <= kMaxTileSmem && (d.H + t.th - 1) / t.th <= 65535 &&
         (d.W + t.tw - 1) / t.tw <= 0x7fffffff && cuda::fits_int32(int64_t{t.planes} * d.H * d.W) &&
         cuda::fits_int32(int64_t{t.planes} * d.P * d.Q);
}

// 4 bytes global -> shared, through L1 (the windows' halos overlap between neighbouring tiles).
static __device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
static __device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// kR, kS: the window at compile time (3 x 3), or 0 for d.R x d.S.
template <typename Stride, int kR, int kS>
static __global__ void __launch_bounds__(kThreads)
    pool2d_backward_max_tiled_kernel(PoolDims d, MaxTilePlan t, MaxTileDivs dv, Stride stride_h, Stride stride_w,
                                     const float* __restrict__ x,   // (N, C, H, W)
                                     const float* __restrict__ y,   // (N, C, P, Q)
                                     const float* __restrict__ dy,  // (N, C, P, Q)
                                     float* __restrict__ dx) {      // (N, C, H, W)
  extern __shared__ __align__(16) unsigned char tile_smem[];
  const int R = kR ? kR : d.R, S = kS ? kS : d.S;
  const int slots = t.op_max * t.oq_max, xvals = t.xr_max * t.xc_max, tile = t.th * t.tw;  // per plane
  float* xs = reinterpret_cast<float*>(tile_smem);         // [planes][xr_max][xc_max]
  float* ys = xs + static_cast<size_t>(t.planes) * xvals;  // [planes][op_max][oq_max]
  float* gs = ys + static_cast<size_t>(t.planes) * slots;  // dy, as ys
  uint32_t* mask = reinterpret_cast<uint32_t*>(gs + static_cast<size_t>(t.planes) * slots);  // [planes][th][tw]
  const int h0 = static_cast<int>(blockIdx.y) * t.th, w0 = static_cast<int>(blockIdx.x) * t.tw;
  const int th = min(t.th, d.H - h0), tw = min(t.tw, d.W - w0);
  int p_lo, p_hi, q_lo, q_hi, unused;
  covering_outputs(h0, d.pad_h, R, stride_h, d.P, p_lo, unused);
  covering_outputs(h0 + th - 1, d.pad_h, R, stride_h, d.P, unused, p_hi);
  covering_outputs(w0, d.pad_w, S, stride_w, d.Q, q_lo, unused);
  covering_outputs(w0 + tw - 1, d.pad_w, S, stride_w, d.Q, unused, q_hi);
  const int xr0 = p_lo * d.stride_h - d.pad_h, xc0 = q_lo * d.stride_w - d.pad_w;  // staged x's corner
  const int HW = d.H * d.W, PQ = d.P * d.Q;  // a block's planes' offsets fit int32 (max_tiles_fit)
  for (int64_t first = int64_t{blockIdx.z} * t.planes; first < d.planes; first += int64_t{gridDim.z} * t.planes) {
    const int planes = static_cast<int>(min(int64_t{t.planes}, d.planes - first));
    const float *xb = x + first * HW, *yb = y + first * PQ, *dyb = dy + first * PQ;
    float* dxb = dx + first * HW;
    __syncthreads();  // the previous planes' staged values and masks are no longer read
    for (int i = static_cast<int>(threadIdx.x); i < planes * tile; i += kThreads) mask[i] = 0;
    // x, a value a lane; positions outside the input (padding) hold -inf, which no window's
    // argmax scan takes unless its y is -inf (phase 1 checks the bounds then).
    for (int i = static_cast<int>(threadIdx.x); i < planes * xvals; i += kThreads) {
      const int row = dv.x_cols.div(i), c = i - row * t.xc_max;
      const int pl = dv.x_rows.div(row), h = xr0 + (row - pl * t.xr_max);
      if (unsigned(h) < unsigned(d.H) && unsigned(xc0 + c) < unsigned(d.W))
        cp_async_4(xs + i, xb + (pl * HW + h * d.W + xc0 + c));
      else
        xs[i] = -INFINITY;
    }
    // y and dy of the windows touching the tile, a window a lane.
    const int q_count = q_hi - q_lo + 1;
    for (int i = static_cast<int>(threadIdx.x); i < planes * slots; i += kThreads) {
      const int row = dv.slot_cols.div(i), c = i - row * t.oq_max;
      const int pl = dv.slot_rows.div(row), p = p_lo + (row - pl * t.op_max);
      if (p > p_hi || c >= q_count) continue;
      const int o = pl * PQ + p * d.Q + q_lo + c;
      cp_async_4(ys + i, yb + o);
      cp_async_4(gs + i, dyb + o);
    }
    cp_async_wait_all();
    __syncthreads();
    // Each window's argmax, a window a lane.
    for (int i = static_cast<int>(threadIdx.x); i < planes * slots; i += kThreads) {
      const int row = dv.slot_cols.div(i), c = i - row * t.oq_max;
      const int pl = dv.slot_rows.div(row), rp = row - pl * t.op_max;
      if (p_lo + rp > p_hi || c >= q_count) continue;
      const int hs = (p_lo + rp) * d.stride_h - d.pad_h;  // the windows' first row
      const float m = ys[i];
      const int ws = (q_lo + c) * d.stride_w - d.pad_w;
      // xp[kh * xc_max + kw]: x(hs + kh, ws + kw)
      const float* xp = xs + pl * xvals + rp * d.stride_h * t.xc_max + c * d.stride_w;
      int k = -1;
      if (m == m && m != -INFINITY) {  // equality alone: padding's -inf never matches
        if constexpr (kR > 0) {
#pragma unroll
          for (int kk = kR * kS - 1; kk >= 0; --kk)  // the lowest match wins
            if (xp[(kk / kS) * t.xc_max + kk % kS] == m) k = kk;
        } else {
          for (int kk = 0; kk < R * S && k < 0; ++kk)
            if (xp[(kk / S) * t.xc_max + kk % S] == m) k = kk;
        }
      } else {  // y NaN or -inf: is_argmax, inside the input only
        for (int kk = 0; kk < R * S && k < 0; ++kk) {
          const int kh = kk / S, kw = kk - kh * S;
          if (unsigned(hs + kh) < unsigned(d.H) && unsigned(ws + kw) < unsigned(d.W) &&
              is_argmax(xp[kh * t.xc_max + kw], m))
            k = kk;
        }
      }
      if (k < 0) continue;
      const int kh = k / S, h = hs + kh - h0, w = ws + (k - kh * S) - w0;  // the argmax in tile coordinates
      if (unsigned(h) < unsigned(th) && unsigned(w) < unsigned(tw))
        atomicOr(mask + pl * tile + h * t.tw + w, 1u << k);
    }
    __syncthreads();
    // Each input: the dy of its mask's windows, highest bit first.
    for (int i = static_cast<int>(threadIdx.x); i < planes * tile; i += kThreads) {
      const int pl = dv.tile_plane.div(i), r = i - pl * tile;
      const int rh = r >> t.tw_shift, rw = r & (t.tw - 1);
      if (rh >= th || rw >= tw) continue;
      const int h = h0 + rh, w = w0 + rw;
      float acc = 0.0f;
      const uint32_t bits = mask[i];
      const float* g = gs + pl * slots - p_lo * t.oq_max - q_lo;  // g[p * oq_max + q]: dy of window (p, q)
      if constexpr (kR > 0) {
        if (bits != 0) {
#pragma unroll
          for (int k = kR * kS - 1; k >= 0; --k)  // every bit tested: no loop that runs as long as a warp's fullest mask
            if (bits & (1u << k))
              acc += g[stride_h.div(h + d.pad_h - k / kS) * t.oq_max + stride_w.div(w + d.pad_w - k % kS)];  // exact
        }
      } else {
        for (uint32_t rest = bits; rest != 0;) {
          const int k = 31 - __clz(rest);
          rest ^= 1u << k;
          const int kh = k / S;
          acc += g[stride_h.div(h + d.pad_h - kh) * t.oq_max + stride_w.div(w + d.pad_w - (k - kh * S))];  // exact
        }
      }
      dxb[pl * HW + h * d.W + w] = acc;
    }
  }
}

template <typename Stride>
static void launch_max_tiled(cudaStream_t stream, const PoolDims& d, const MaxTilePlan& t, const MaxTileDivs& dv,
                             Stride sh, Stride sw, const float* x, const float* y, const float* dy, float* dx) {
  const dim3 grid(static_cast<unsigned>((d.W + t.tw - 1) / t.tw), static_cast<unsigned>((d.H + t.th - 1) / t.th),
                  static_cast<unsigned>(std::min<int64_t>(t.groups, 65535)));
  if (d.R == 3 && d.S == 3)
    pool2d_backward_max_tiled_kernel<Stride, 3, 3><<<grid, kThreads, t.smem, stream>>>(d, t, dv, sh, sw, x, y, dy, dx);
  else
    pool2d_backward_max_tiled_kernel<Stride, 0, 0><<<grid, kThreads, t.smem, stream>>>(d, t, dv, sh, sw, x, y, dy, dx);
}

static void launch_max_tiled_backward(cudaStream_t stream, const PoolDims& d, const MaxTilePlan& t, const float* x,
                                      const float* y, const float* dy, float* dx) {
  const MaxTileDivs dv{cuda::FastDiv32(t.xc_max), cuda::FastDiv32(t.xr_max), cuda::FastDiv32(t.oq_max),
                       cuda::FastDiv32(t.op_max), cuda::FastDiv32(int64_t{t.th} * t.tw)};
  if (d.stride_h == 1 && d.stride_w == 1)
    launch_max_tiled(stream, d, t, dv, ConstStride<1>{}, ConstStride<1>{}, x, y, dy, dx);
  else if (d.stride_h == 2 && d.stride_w == 2)
    launch_max_tiled(stream, d, t, dv, ConstStride<2>{}, ConstStride<2>{}, x, y, dy, dx);
  else
    launch_max_tiled(stream, d, t, dv, cuda::FastDiv32(d.stride_h), cuda::FastDiv32(d.stride_w), x, y, dy, dx);
}

// Max backward where windows do not overlap and start at the corner (stride == window, no padding:
// vgg_fer's 2x2 stride-2 pools): one thread per output routes its dy to the window's first row-major
// position equal to y (0 + dy, as the gather's sum) and writes 0 to the window's other inputs and,
// in the last window row (column), to the inputs past it that no window reads. Every dx written once,
// the same values as the gather kernel; kPair: 2x2 windows on an even W, in 8-byte accesses.
template <typename Div, bool kPair>
static __global__ void pool2d_backward_disjoint_kernel(PoolDims d, PoolDivs<Div> dv,
                                                       const float* __restrict__ x,   // (N, C, H, W)
                                                       const float* __restrict__ y,   // (N, C, P, Q)
                                                       const float* __restrict__ dy,  // (N, C, P, Q)
                                                       float* __restrict__ dx) {      // (N, C, H, W)
  using I = typename Div::Index;
  const I total = static_cast<I>(d.planes) * d.P * d.Q;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I o = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const auto [plane, p, q] = split_plane_index(o, dv.P, d.P, dv.Q, d.Q);
    const float* xp = x + plane * d.H * d.W;
    float* dxp = dx + plane * d.H * d.W;
    const float m = __ldg(y + o), g = __ldg(dy + o);
    const int h0 = p * d.R, w0 = q * d.S;
    if constexpr (kPair) {
      const float2 a = *reinterpret_cast<const float2*>(xp + static_cast<I>(h0) * d.W + w0);
      const float2 b = *reinterpret_cast<const float2*>(xp + static_cast<I>(h0 + 1) * d.W + w0);
      const int at = is_argmax(a.x, m) ? 0 : is_argmax(a.y, m) ? 1 : is_argmax(b.x, m) ? 2 : is_argmax(b.y, m) ? 3 : 4;
      const float gg = 0.0f + g;
      *reinterpret_cast<float2*>(dxp + static_cast<I>(h0) * d.W + w0) = make_float2(at == 0 ? gg : 0.0f, at == 1 ? gg : 0.0f);
      *reinterpret_cast<float2*>(dxp + static_cast<I>(h0 + 1) * d.W + w0) =
          make_float2(at == 2 ? gg : 0.0f, at == 3 ? gg : 0.0f);
    } else {
      bool found = false;
      for (int h = h0; h < min(h0 + d.R, d.H); ++h)
        for (int w = w0; w < min(w0 + d.S, d.W); ++w) {
          const bool take = !found && is_argmax(xp[static_cast<I>(h) * d.W + w], m);
          dxp[static_cast<I>(h) * d.W + w] = take ? 0.0f + g : 0.0f;
          found = found || take;
        }
    }
    // Inputs no window reads: below the last window row, right of the last window column.
    const int w_end = q == d.Q - 1 ? d.W : w0 + d.S;
    if (p == d.P - 1)
      for (int h = h0 + d.R; h < d.H; ++h)
        for (int w = w0; w < w_end; ++w) dxp[static_cast<I>(h) * d.W + w] = 0.0f;
    if (q == d.Q - 1)
      for (int h = h0; h < min(h0 + d.R, d.H); ++h)
        for (int w = w0 + d.S; w < d.W; ++w) dxp[static_cast<I>(h) * d.W + w] = 0.0f;
  }
}

// Windows that do not overlap and start at the corner: the disjoint kernel's shapes.
static bool disjoint_windows(const PoolDims& d) {
  return d.stride_h == d.R && d.stride_w == d.S && d.pad_h == 0 && d.pad_w == 0;
}

static void launch_disjoint_backward(cudaStream_t stream, const PoolDims& d, const float* x, const float* y,
                                     const float* dy, float* dx) {
  const unsigned blocks = cuda::grid_blocks(d.planes * d.P * d.Q, kThreads);
  const bool pair = d.R == 2 && d.S == 2 && d.W % 2 == 0 && cuda::aligned16(x) && cuda::aligned16(dx);
  if (index_fits_int32(d, int64_t{blocks} * kThreads)) {
    if (pair)
      pool2d_backward_disjoint_kernel<cuda::FastDiv32, true>
          <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::FastDiv32>(d), x, y, dy, dx);
    else
      pool2d_backward_disjoint_kernel<cuda::FastDiv32, false>
          <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::FastDiv32>(d), x, y, dy, dx);
  } else {
    if (pair)
      pool2d_backward_disjoint_kernel<cuda::PlainDiv64, true>
          <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::PlainDiv64>(d), x, y, dy, dx);
    else
      pool2d_backward_disjoint_kernel<cuda::PlainDiv64, false>
          <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::PlainDiv64>(d), x, y, dy, dx);
  }
}

template <bool kMax>
static void launch_forward(cudaStream_t stream, const Pool2dShape& sh, const PoolDims& d, const float* x, float* y) {
  if (is_global(sh)) {
    const int64_t warps = kThreads / cuda::kWarpSize;
    pool2d_forward_global_kernel<kMax>
        <<<cuda::grid_blocks(d.planes, warps), kThreads, 0, stream>>>(d.planes, d.H * d.W, x, y);
    return;
  }
  const int64_t total = d.planes * d.P * d.Q;
  const unsigned blocks = cuda::grid_blocks(total, kThreads);
  auto launch = [&](auto div) {
    using Div = decltype(div);
    if constexpr (kMax)
      if (d.R == 3 && d.S == 3)
        return pool2d_forward_window_kernel<Div, true, true><<<blocks, kThreads, 0, stream>>>(d, divs_of<Div>(d), x, y);
    pool2d_forward_window_kernel<Div, kMax><<<blocks, kThreads, 0, stream>>>(d, divs_of<Div>(d), x, y);
  };
  if (index_fits_int32(d, int64_t{blocks} * kThreads))
    launch(cuda::FastDiv32{});
  else
    launch(cuda::PlainDiv64{});
}

template <bool kMax>
static void launch_backward(cudaStream_t stream, const PoolDims& d, const float* x, const float* y, const float* dy,
                            float* dx) {
  const int64_t total = d.planes * d.H * d.W;
  const unsigned blocks = cuda::grid_blocks(total, kThreads);
  if (index_fits_int32(d, int64_t{blocks} * kThreads))
    pool2d_backward_gather_kernel<cuda::FastDiv32, kMax>
        <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::FastDiv32>(d), x, y, dy, dx);
  else
    pool2d_backward_gather_kernel<cuda::PlainDiv64, kMax>
        <<<blocks, kThreads, 0, stream>>>(d, divs_of<cuda::PlainDiv64>(d), x, y, dy, dx);
}

void pool2d_forward_cuda(const Pool2dForward& a) {
  const Pool2dShape& sh = a.sh;
  const float* x = a.x.f32();
  float* y = a.y.f32();
  cudaStream_t stream = cuda::stream_of(*a.ctx, "pool2d forward");
  const PoolDims d = dims_of(sh, "pool2d forward");
  if (sh.kind == PoolKind::max)
    launch_forward<true>(stream, sh, d, x, y);
  else
    launch_forward<false>(stream, sh, d, x, y);
  CUDA_CHECK_LAUNCH("pool2d forward");
}

void pool2d_backward_cuda_f32_with(const Pool2dBackward& a, MaxPoolBackwardKernel kernel) {
  const Pool2dShape& sh = a.sh;
  const float *x = a.x.f32(), *y = a.y.f32(), *dy = a.dy.f32();
  float* dx = a.dx.f32();
  cudaStream_t stream = cuda::stream_of(*a.ctx, "pool2d backward");
  const PoolDims d = dims_of(sh, "pool2d backward");
  if (sh.kind == PoolKind::max) {
    const MaxTilePlan tiles = max_tile_plan(d);
    if (kernel == MaxPoolBackwardKernel::automatic && disjoint_windows(d))
      launch_disjoint_backward(stream, d, x, y, dy, dx);
    else if (kernel != MaxPoolBackwardKernel::gather && max_tiles_fit(d, tiles))
      launch_max_tiled_backward(stream, d, tiles, x, y, dy, dx);
    else
      launch_backward<true>(stream, d, x, y, dy, dx);
  } else {
    launch_backward<false>(stream, d, x, y, dy, dx);
  }
  CUDA_CHECK_LAUNCH("pool2d backward");
}

void pool2d_backward_cuda(const Pool2dBackward& a) { pool2d_backward_cuda_f32_with(a, max_backward_mode()); }

}  // namespace cnn
