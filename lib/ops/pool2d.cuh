// Device code shared by the pooling kernels (pool2d_cuda.cu: f32 NCHW; pool2d_nhwc_bf16_cuda.cu: bf16,
// f16 and f32cl channels-last): the int32 dims, the NaN-aware max and argmax tests, window clipping, the outputs
// covering an input, and the host checks. For .cu files only.
// Trap: every backend must route max's dy to the same element: the first position in row-major
// window order whose value equals y (max_takes / is_argmax, exactly as pool2d_cpu.cpp).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "ops/pool2d.h"
#include "ops/reduce.cuh"

namespace cnn {

// Pool2dShape in int32 (planes and N, C excepted), checked on the host.
struct PoolDims {
  int64_t planes;  // N * C
  int H, W, P, Q, R, S;
  int stride_h, stride_w, pad_h, pad_w;
  int64_t N, C;
};

// m <- v when v is larger, or when v is the first NaN (as pool2d_cpu.cpp).
__device__ __forceinline__ bool max_takes(float v, float m) { return v > m || (v != v && m == m); }
__device__ __forceinline__ bool is_argmax(float v, float y) { return v == y || (v != v && y != y); }

// Window of output (p, q) clipped to the input: rows [h0, h1), columns [w0, w1).
struct Window {
  int h0, h1, w0, w1;
};
__device__ __forceinline__ Window clipped_window(const PoolDims& d, int p, int q) {
  const int hs = p * d.stride_h - d.pad_h, ws = q * d.stride_w - d.pad_w;
  return Window{max(hs, 0), min(hs + d.R, d.H), max(ws, 0), min(ws + d.S, d.W)};
}

// Outputs whose window contains input row h: [lo, hi] along one axis (empty when lo > hi).
template <typename Div>
__device__ __forceinline__ void covering_outputs(int h, int pad, int window, const Div& stride, int out, int& lo,
                                                 int& hi) {
  const int top = h + pad;  // h in padded coordinates; output o covers [o*stride, o*stride + window)
  lo = top - window < 0 ? 0 : static_cast<int>(stride.div(top - window)) + 1;
  hi = min(static_cast<int>(stride.div(top)), out - 1);
}

inline PoolDims dims_of(const Pool2dShape& sh, const char* what) {
  if (sh.N <= 0 || sh.C <= 0 || sh.P <= 0 || sh.Q <= 0)
    CNN_THROW("{}: shape was not made by Pool2dShape::make ({})", what, sh.to_string());
  if (!cuda::fits_int32(sh.H * sh.W) || !cuda::fits_int32(sh.P * sh.Q) || !cuda::fits_int32(sh.R * sh.S))
    CNN_THROW("{}: a plane of {} is too large for the CUDA kernels (2^31 values at most)", what, sh.to_string());
  return PoolDims{sh.N * sh.C,
                  static_cast<int>(sh.H),
                  static_cast<int>(sh.W),
                  static_cast<int>(sh.P),
                  static_cast<int>(sh.Q),
                  static_cast<int>(sh.R),
                  static_cast<int>(sh.S),
                  sh.stride_h,
                  sh.stride_w,
                  sh.pad_h,
                  sh.pad_w,
                  sh.N,
                  sh.C};
}

// Whether every flat index of x and y, plus one grid stride (grid_threads) past the end, fits int32.
inline bool index_fits_int32(const PoolDims& d, int64_t grid_threads) {
  const int64_t largest = std::max(d.planes * d.H * d.W, d.planes * d.P * d.Q);
  return cuda::fits_int32(largest + grid_threads);
}

// One window covering the whole plane: global pooling.
inline bool is_global(const Pool2dShape& sh) {
  return sh.R == sh.H && sh.S == sh.W && sh.pad_h == 0 && sh.pad_w == 0 && sh.P == 1 && sh.Q == 1;
}

// CNN_POOL_BACKWARD in the environment, read once a process (pool2d.h, MaxPoolBackwardKernel):
// unset or `auto`, `tiled`, `gather`; another value is an error.
inline MaxPoolBackwardKernel max_backward_mode() {
  static const MaxPoolBackwardKernel mode = [] {
    const char* v = std::getenv("CNN_POOL_BACKWARD");
    if (!v || !*v || std::strcmp(v, "auto") == 0) return MaxPoolBackwardKernel::automatic;
    if (std::strcmp(v, "tiled") == 0) return MaxPoolBackwardKernel::tiled;
    if (std::strcmp(v, "gather") == 0) return MaxPoolBackwardKernel::gather;
    CNN_THROW("pool2d backward: CNN_POOL_BACKWARD must be auto, tiled or gather, got '{}'", v);
  }();
  return mode;
}

}  // namespace cnn
