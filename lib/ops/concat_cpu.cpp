// Channel concatenation on the CPU: per sample, input i is one contiguous block of channels[i] * HW
// values in y, so the fast path is one copy per (sample, input) pair, threaded over the pairs.
// The bf16 rows, which are the f16 rows too (the CPU emulation, ops/dispatch.h), widen the channels-last operands into f32 NCHW,
// run the f32 row and narrow back (copies: exact).
// Trap: the blocks interleave across samples (y is N-major), so an input is not one block of y.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/concat.h"
#include "ops/convert.h"

namespace cnn {

int64_t ConcatShape::total_channels() const { return std::accumulate(channels.begin(), channels.end(), int64_t{0}); }

static void check_shape(const char* what, const ConcatShape& sh) {
  if (sh.N <= 0 || sh.HW <= 0) CNN_THROW("concat {}: N and H*W must be positive, got N={} HW={}", what, sh.N, sh.HW);
  if (sh.channels.empty()) CNN_THROW("concat {}: needs at least one input", what);
  for (size_t i = 0; i < sh.channels.size(); ++i)
    if (sh.channels[i] <= 0) CNN_THROW("concat {}: input {} has {} channels, expected at least 1", what, i, sh.channels[i]);
}

template <typename T>
void concat_forward_reference(const ExecContext& ctx, const ConcatShape& sh,
                              const T* const* xs,  // inputs x (N, channels[i], HW)
                              T* y) {              // (N, total_channels, HW)
  check_shape("forward", sh);
  const int64_t total = sh.total_channels();
  for (int64_t n = 0; n < sh.N; ++n) {
    int64_t c0 = 0;  // first output channel of input i
    for (size_t i = 0; i < sh.channels.size(); ++i) {
      const int64_t ci = sh.channels[i];
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t j = 0; j < sh.HW; ++j) y[(n * total + c0 + c) * sh.HW + j] = xs[i][(n * ci + c) * sh.HW + j];
      c0 += ci;
    }
  }
}

template <typename T>
void concat_backward_reference(const ExecContext& ctx, const ConcatShape& sh,
                               const T* dy,      // (N, total_channels, HW)
                               T* const* dxs) {  // inputs x (N, channels[i], HW), entries may be null
  check_shape("backward", sh);
  const int64_t total = sh.total_channels();
  for (int64_t n = 0; n < sh.N; ++n) {
    int64_t c0 = 0;
    for (size_t i = 0; i < sh.channels.size(); ++i) {
      const int64_t ci = sh.channels[i];
      if (dxs[i])
        for (int64_t c = 0; c < ci; ++c)
          for (int64_t j = 0; j < sh.HW; ++j)
            dxs[i][(n * ci + c) * sh.HW + j] = dy[(n * total + c0 + c) * sh.HW + j];
      c0 += ci;
    }
  }
}

template void concat_forward_reference<float>(const ExecContext&, const ConcatShape&, const float* const*, float*);
template void concat_forward_reference<double>(const ExecContext&, const ConcatShape&, const double* const*,
                                               double*);
template void concat_backward_reference<float>(const ExecContext&, const ConcatShape&, const float*,
                                               float* const*);
template void concat_backward_reference<double>(const ExecContext&, const ConcatShape&, const double*,
                                                double* const*);

// Calls copy(sample, input, offset of input's block in y) for every pair, threaded over pairs.
template <typename F>
static void for_each_block(const ExecContext& ctx, const ConcatShape& sh, F copy) {
  const int64_t inputs = static_cast<int64_t>(sh.channels.size()), total = sh.total_channels();
  std::vector<int64_t> first(sh.channels.size());  // first output channel of each input
  std::exclusive_scan(sh.channels.begin(), sh.channels.end(), first.begin(), int64_t{0});
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (sh.N * total * sh.HW >= (int64_t{1} << 16)) schedule(static)
  for (int64_t pair = 0; pair < sh.N * inputs; ++pair) {
    const int64_t n = pair / inputs, i = pair % inputs;
    copy(n, static_cast<size_t>(i), (n * total + first[i]) * sh.HW);
  }
}

void concat_forward_cpu(const ConcatForward& a) {
  const ConcatShape& sh = a.sh;
  check_shape("forward", sh);
  const std::vector<const float*> xs = f32_pointers(a.xs, sh.channels.size());
  float* y = a.y.f32();
  for_each_block(*a.ctx, sh, [&](int64_t n, size_t i, int64_t at) {
    const int64_t len = sh.channels[i] * sh.HW;
    std::copy(xs[i] + n * len, xs[i] + (n + 1) * len, y + at);
  });
}

void concat_backward_cpu(const ConcatBackward& a) {
  const ConcatShape& sh = a.sh;
  check_shape("backward", sh);
  const float* dy = a.dy.f32();
  const std::vector<float*> dxs = f32_pointers(a.dxs, sh.channels.size());
  for_each_block(*a.ctx, sh, [&](int64_t n, size_t i, int64_t at) {
    if (!dxs[i]) return;
    const int64_t len = sh.channels[i] * sh.HW;
    std::copy(dy + at, dy + at + len, dxs[i] + n * len);
  });
}

// The logical dims (N, channels, H*W, 1) of an input or the output as an activation.
static ActDims dims_of(const ConcatShape& sh, int64_t channels) { return ActDims{sh.N, channels, sh.HW, 1}; }

void concat_forward_cpu_bf16(const ConcatForward& a) {
  const ConcatShape& sh = a.sh;
  check_shape("forward", sh);
  std::vector<std::vector<float>> xs;
  for (size_t i = 0; i < sh.channels.size(); ++i)
    xs.push_back(widen(a.xs[i], dims_of(sh, sh.channels[i])));
  std::vector<ConstView> views;
  for (const auto& x : xs) views.emplace_back(x.data());
  const ActDims out = dims_of(sh, sh.total_channels());
  std::vector<float> y(size_t(out.numel()));
  concat_forward_cpu(ConcatForward{a.ctx, sh, views.data(), y.data()});
  narrow(y.data(), out, a.y);
}

void concat_backward_cpu_bf16(const ConcatBackward& a) {
  const ConcatShape& sh = a.sh;
  check_shape("backward", sh);
  const std::vector<float> dy = widen(a.dy, dims_of(sh, sh.total_channels()));
  std::vector<std::vector<float>> dxs(sh.channels.size());
  std::vector<View> views;
  for (size_t i = 0; i < sh.channels.size(); ++i) {
    if (!a.dxs[i].null()) dxs[i].resize(size_t(dims_of(sh, sh.channels[i]).numel()));
    views.emplace_back(a.dxs[i].null() ? nullptr : dxs[i].data());
  }
  concat_backward_cpu(ConcatBackward{a.ctx, sh, dy.data(), views.data()});
  for (size_t i = 0; i < sh.channels.size(); ++i)
    if (!a.dxs[i].null()) narrow(dxs[i].data(), dims_of(sh, sh.channels[i]), a.dxs[i]);
}

}  // namespace cnn
