// Channel concatenation on the GPU. Per sample, input i is one block of channels[i]*HW values in y,
// so both directions are one strided copy: N rows of `len` floats per part, rows src_pitch /
// dst_pitch apart; one launch copies up to kMaxParts parts (blockIdx.z), float4 where a part allows.
// bf16, f16 and f32cl (float) operands are channels-last: there a row is a pixel (N*HW rows) and
// input i is channels[i] contiguous values of each row, copied 8 channels a thread (bf16, f16: one
// 16-byte access; float: two) where the channel counts and pointers allow, else 4, 2 or 1 (one
// access of 4x, 2x or 1x the element size).
// Trap: the blocks interleave across samples (y is N-major): an input is N blocks of y, not one.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cuda_check.h"
#include "ops/concat.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr int kMaxParts = 16;
static constexpr int kMaxGridY = 65535;

struct CopyParts {
  const float* src[kMaxParts];
  float* dst[kMaxParts];
  int64_t len[kMaxParts];  // floats per row
  int64_t src_pitch[kMaxParts];
  int64_t dst_pitch[kMaxParts];
  bool vec[kMaxParts];  // everything above divisible by 4 floats and both bases 16-byte aligned
};

// grid (column blocks, row blocks, parts): rows over y, columns over x, both grid-stride.
static __global__ void concat_copy_rows_kernel(int64_t rows, const __grid_constant__ CopyParts parts) {
  const int part = blockIdx.z;
  const bool vec = parts.vec[part];
  const int64_t len = vec ? parts.len[part] / 4 : parts.len[part];
  const int64_t sp = vec ? parts.src_pitch[part] / 4 : parts.src_pitch[part];
  const int64_t dp = vec ? parts.dst_pitch[part] / 4 : parts.dst_pitch[part];
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (vec) {
      const float4* s = reinterpret_cast<const float4*>(parts.src[part]) + r * sp;
      float4* d = reinterpret_cast<float4*>(parts.dst[part]) + r * dp;
      for (int64_t k = col0; k < len; k += col_stride) d[k] = s[k];
    } else {
      const float* s = parts.src[part] + r * sp;
      float* d = parts.dst[part] + r * dp;
      for (int64_t k = col0; k < len; k += col_stride) d[k] = s[k];
    }
  }
}

// The strided copies of one call: part i copies rows of len[i] values, rows src_pitch[i] / dst_pitch[i] apart.
template <typename T>
struct Copies {
  std::vector<const T*> src;
  std::vector<T*> dst;
  std::vector<int64_t> len, src_pitch, dst_pitch;
  void add(const T* s, T* d, int64_t n, int64_t sp, int64_t dp) {
    src.push_back(s);
    dst.push_back(d);
    len.push_back(n);
    src_pitch.push_back(sp);
    dst_pitch.push_back(dp);
  }
};

// Input i's part of y: rows of channels[i] * unit values at channel c0 (the sum of the channels
// before it) of rows total * unit long; unit = HW in NCHW (a row per sample), 1 in channels-last
// (a row per pixel).
template <typename T>
static Copies<T> forward_copies(const ConcatShape& sh, int64_t unit, const std::vector<const T*>& xs, T* y) {
  Copies<T> c;
  const int64_t row = sh.total_channels() * unit;
  int64_t c0 = 0;
  for (size_t i = 0; i < sh.channels.size(); ++i) {
    const int64_t block = sh.channels[i] * unit;
    c.add(xs[i], y + c0 * unit, block, block, row);
    c0 += sh.channels[i];
  }
  return c;
}
template <typename T>
static Copies<T> backward_copies(const ConcatShape& sh, int64_t unit, const T* dy, const std::vector<T*>& dxs) {
  Copies<T> c;
  const int64_t row = sh.total_channels() * unit;
  int64_t c0 = 0;
  for (size_t i = 0; i < sh.channels.size(); ++i) {
    const int64_t block = sh.channels[i] * unit;
    if (dxs[i]) c.add(dy + c0 * unit, dxs[i], block, row, block);
    c0 += sh.channels[i];
  }
  return c;
}

// Copies every part, kMaxParts per launch.
static void launch_copies(cudaStream_t stream, const char* what, int64_t rows, const Copies<float>& c) {
  const auto& [src, dst, len, src_pitch, dst_pitch] = c;
  for (size_t begin = 0; begin < src.size(); begin += kMaxParts) {
    const size_t end = std::min(src.size(), begin + kMaxParts);
    CopyParts parts{};
    int64_t widest = 0;
    for (size_t i = begin; i < end; ++i) {
      const size_t j = i - begin;
      parts.src[j] = src[i];
      parts.dst[j] = dst[i];
      parts.len[j] = len[i];
      parts.src_pitch[j] = src_pitch[i];
      parts.dst_pitch[j] = dst_pitch[i];
      parts.vec[j] = len[i] % 4 == 0 && src_pitch[i] % 4 == 0 && dst_pitch[i] % 4 == 0 && cuda::aligned16(src[i]) &&
                     cuda::aligned16(dst[i]);
      widest = std::max(widest, parts.vec[j] ? len[i] / 4 : len[i]);
    }
    const dim3 grid(cuda::grid_blocks(widest, kThreads, 1024),
                    static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)), static_cast<unsigned>(end - begin));
    concat_copy_rows_kernel<<<grid, kThreads, 0, stream>>>(rows, parts);
    CUDA_CHECK_LAUNCH(what);
  }
}

static void check_shape(const char* what, const ConcatShape& sh) {
  if (sh.N <= 0 || sh.HW <= 0) CNN_THROW("{}: N and H*W must be positive, got N={} HW={}", what, sh.N, sh.HW);
  if (sh.channels.empty()) CNN_THROW("{}: needs at least one input", what);
  for (size_t i = 0; i < sh.channels.size(); ++i)
    if (sh.channels[i] <= 0) CNN_THROW("{}: input {} has {} channels, expected at least 1", what, i, sh.channels[i]);
}

// The channels-last parts of one launch: part j copies rows of len[j] elements (their bits: Lane is
// uint16_t for bf16 and f16, float for f32cl), rows src_pitch[j] / dst_pitch[j] elements apart,
// width[j] elements (8, 4, 2 or 1) a thread.
template <typename Lane>
struct PixelParts {
  const Lane* src[kMaxParts];
  Lane* dst[kMaxParts];
  int64_t units[kMaxParts];      // rows * len / width
  int64_t row_units[kMaxParts];  // len / width
  int64_t src_pitch[kMaxParts];  // in units
  int64_t dst_pitch[kMaxParts];  // in units
  cuda::FastDiv32 per_row[kMaxParts];  // divides by row_units while units fits int32
  bool fast[kMaxParts];
  int width[kMaxParts];
};

template <typename Word, typename Lane>
__device__ __forceinline__ void copy_units(const PixelParts<Lane>& parts, int part) {
  const Word* s = reinterpret_cast<const Word*>(parts.src[part]);
  Word* d = reinterpret_cast<Word*>(parts.dst[part]);
  const int64_t units = parts.units[part], row_units = parts.row_units[part];
  const int64_t sp = parts.src_pitch[part], dp = parts.dst_pitch[part];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t r = parts.fast[part] ? parts.per_row[part].div(static_cast<int32_t>(u)) : u / row_units;
    const int64_t k = u - r * row_units;
    d[r * dp + k] = s[r * sp + k];
  }
}

// The word one access copies: Bytes bytes (32: 8 floats, a Raw8, two 16-byte words).
template <size_t Bytes>
struct CopyWord;
template <>
struct CopyWord<2> {
  using type = uint16_t;
};
template <>
struct CopyWord<4> {
  using type = uint32_t;
};
template <>
struct CopyWord<8> {
  using type = uint2;
};
template <>
struct CopyWord<16> {
  using type = uint4;
};
template <>
struct CopyWord<32> {
  using type = Raw8<float>;
};
template <typename Lane, int W>
using LaneWord = typename CopyWord<sizeof(Lane) * W>::type;

// grid (unit blocks, 1, parts): part blockIdx.z, its units grid-stride.
template <typename Lane>
static __global__ void concat_copy_pixels_kernel(const __grid_constant__ PixelParts<Lane> parts) {
  static_assert(std::is_same_v<Lane, uint16_t> || std::is_same_v<Lane, float>, "16-bit lanes (bf16, f16) or float");
  const int part = blockIdx.z;
  switch (parts.width[part]) {
    case 8: return copy_units<LaneWord<Lane, 8>>(parts, part);
    case 4: return copy_units<LaneWord<Lane, 4>>(parts, part);
    case 2: return copy_units<LaneWord<Lane, 2>>(parts, part);
    default: return copy_units<LaneWord<Lane, 1>>(parts, part);
  }
}

// The widest access (elements of lane_bytes bytes) that every length, pitch and base of a part
// allows; the bases' alignment is the access's size, at most 16 bytes (8 floats are two 16-byte words).
static int access_width(size_t lane_bytes, const void* src, const void* dst, int64_t len, int64_t src_pitch,
                        int64_t dst_pitch) {
  for (int w : {8, 4, 2}) {
    const uintptr_t bytes = std::min<uintptr_t>(lane_bytes * w, 16);
    if (len % w == 0 && src_pitch % w == 0 && dst_pitch % w == 0 && reinterpret_cast<uintptr_t>(src) % bytes == 0 &&
        reinterpret_cast<uintptr_t>(dst) % bytes == 0)
      return w;
  }
  return 1;
}

// Copies every part (rows of T values, T bf16, f16 or float: copied as bits), kMaxParts per launch.
template <typename T>
static void launch_pixel_copies(cudaStream_t stream, const char* what, int64_t rows, const Copies<T>& c) {
  using Lane = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;
  static_assert(sizeof(Lane) == sizeof(T), "a lane is one element");
  const auto& [src, dst, len, src_pitch, dst_pitch] = c;
  for (size_t begin = 0; begin < src.size(); begin += kMaxParts) {
    const size_t end = std::min(src.size(), begin + kMaxParts);
    PixelParts<Lane> parts{};
    int64_t most = 0;
    for (size_t i = begin; i < end; ++i) {
      const size_t j = i - begin;
      const int w = access_width(sizeof(Lane), src[i], dst[i], len[i], src_pitch[i], dst_pitch[i]);
      parts.src[j] = reinterpret_cast<const Lane*>(src[i]);
      parts.dst[j] = reinterpret_cast<Lane*>(dst[i]);
      parts.width[j] = w;
      parts.row_units[j] = len[i] / w;
      parts.units[j] = rows * parts.row_units[j];
      parts.src_pitch[j] = src_pitch[i] / w;
      parts.dst_pitch[j] = dst_pitch[i] / w;
      parts.fast[j] = cuda::fits_int32(parts.units[j]);  // every divided unit index is below it
      if (parts.fast[j]) parts.per_row[j] = cuda::FastDiv32(parts.row_units[j]);
      most = std::max(most, parts.units[j]);
    }
    const dim3 grid(cuda::grid_blocks(most, kThreads), 1, static_cast<unsigned>(end - begin));
    concat_copy_pixels_kernel<<<grid, kThreads, 0, stream>>>(parts);
    CUDA_CHECK_LAUNCH(what);
  }
}

void concat_forward_cuda(const ConcatForward& a) {
  const char* what = "concat forward";
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, a.sh);
  launch_copies(stream, what, a.sh.N,
                forward_copies(a.sh, a.sh.HW, f32_pointers(a.xs, a.sh.channels.size()), a.y.f32()));
}

void concat_backward_cuda(const ConcatBackward& a) {
  const char* what = "concat backward";
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, a.sh);
  launch_copies(stream, what, a.sh.N,
                backward_copies(a.sh, a.sh.HW, a.dy.f32(), f32_pointers(a.dxs, a.sh.channels.size())));
}

// Channels-last: row n*HW + hw of y holds every input's channels of that pixel.
template <typename T>
static void forward_nhwc(const ConcatForward& a) {
  const char* what = "concat forward";
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, a.sh);
  launch_pixel_copies(stream, what, a.sh.N * a.sh.HW,
                      forward_copies(a.sh, 1, half16_pointers<T>(a.xs, a.sh.channels.size()), half16_data<T>(a.y)));
}

template <typename T>
static void backward_nhwc(const ConcatBackward& a) {
  const char* what = "concat backward";
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, a.sh);
  launch_pixel_copies(stream, what, a.sh.N * a.sh.HW,
                      backward_copies(a.sh, 1, half16_data<T>(a.dy), half16_pointers<T>(a.dxs, a.sh.channels.size())));
}

void concat_forward_cuda_bf16(const ConcatForward& a) { forward_nhwc<bf16>(a); }
void concat_forward_cuda_f16(const ConcatForward& a) { forward_nhwc<f16>(a); }
void concat_backward_cuda_bf16(const ConcatBackward& a) { backward_nhwc<bf16>(a); }
void concat_backward_cuda_f16(const ConcatBackward& a) { backward_nhwc<f16>(a); }
void concat_forward_cuda_f32cl(const ConcatForward& a) { forward_nhwc<float>(a); }
void concat_backward_cuda_f32cl(const ConcatBackward& a) { backward_nhwc<float>(a); }

}  // namespace cnn
