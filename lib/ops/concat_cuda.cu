// Channel concatenation on the GPU. Per sample, input i is one block of channels[i]*HW values in y,
// so both directions are one strided copy: N rows of `len` floats per part, rows src_pitch /
// dst_pitch apart; one launch copies up to kMaxParts parts (blockIdx.z), float4 where a part allows.
// Trap: the blocks interleave across samples (y is N-major): an input is N blocks of y, not one.
#include <algorithm>
#include <vector>

#include "core/cuda_check.h"
#include "ops/concat.h"
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

// Copies every part, kMaxParts per launch.
static void launch_copies(cudaStream_t stream, const char* what, int64_t rows, const std::vector<const float*>& src,
                          const std::vector<float*>& dst, const std::vector<int64_t>& len,
                          const std::vector<int64_t>& src_pitch, const std::vector<int64_t>& dst_pitch) {
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

void concat_forward_cuda(const ConcatForward& a) {
  const char* what = "concat forward";
  const ConcatShape& sh = a.sh;
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, sh);
  const std::vector<const float*> xs = f32_pointers(a.xs, sh.channels.size());
  float* y = a.y.f32();
  const int64_t row = sh.total_channels() * sh.HW;
  std::vector<const float*> src;
  std::vector<float*> dst;
  std::vector<int64_t> len, src_pitch, dst_pitch;
  int64_t c0 = 0;
  for (size_t i = 0; i < sh.channels.size(); ++i) {
    const int64_t block = sh.channels[i] * sh.HW;
    src.push_back(xs[i]);
    dst.push_back(y + c0 * sh.HW);
    len.push_back(block);
    src_pitch.push_back(block);
    dst_pitch.push_back(row);
    c0 += sh.channels[i];
  }
  launch_copies(stream, what, sh.N, src, dst, len, src_pitch, dst_pitch);
}

void concat_backward_cuda(const ConcatBackward& a) {
  const char* what = "concat backward";
  const ConcatShape& sh = a.sh;
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  check_shape(what, sh);
  const float* dy = a.dy.f32();
  const std::vector<float*> dxs = f32_pointers(a.dxs, sh.channels.size());
  const int64_t row = sh.total_channels() * sh.HW;
  std::vector<const float*> src;
  std::vector<float*> dst;
  std::vector<int64_t> len, src_pitch, dst_pitch;
  int64_t c0 = 0;
  for (size_t i = 0; i < sh.channels.size(); ++i) {
    const int64_t block = sh.channels[i] * sh.HW;
    if (dxs[i]) {
      src.push_back(dy + c0 * sh.HW);
      dst.push_back(dxs[i]);
      len.push_back(block);
      src_pitch.push_back(row);
      dst_pitch.push_back(block);
    }
    c0 += sh.channels[i];
  }
  launch_copies(stream, what, sh.N, src, dst, len, src_pitch, dst_pitch);
}

}  // namespace cnn
