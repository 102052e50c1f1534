// NCHW <-> NHWC permutations of host vectors, for the tests of the channels-last kernels: the CPU
// references are NCHW, so inputs go through nchw_to_nhwc and references through it too.
#pragma once

#include <cstdint>
#include <vector>

namespace cnn::test {

// v permuted (N, C, H, W) -> (N, H, W, C) where to_nhwc, else back.
template <class T>
std::vector<T> permute_channels(const std::vector<T>& v, int64_t N, int64_t C, int64_t H, int64_t W, bool to_nhwc) {
  std::vector<T> out(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t hw = 0; hw < H * W; ++hw) {
        const size_t nchw = size_t((n * C + c) * H * W + hw), nhwc = size_t((n * H * W + hw) * C + c);
        if (to_nhwc)
          out[nhwc] = v[nchw];
        else
          out[nchw] = v[nhwc];
      }
  return out;
}

// v (N, C, H, W) -> (N, H, W, C)
template <class T>
std::vector<T> nchw_to_nhwc(const std::vector<T>& v, int64_t N, int64_t C, int64_t H, int64_t W) {
  return permute_channels(v, N, C, H, W, true);
}

// v (N, H, W, C) -> (N, C, H, W)
template <class T>
std::vector<T> nhwc_to_nchw(const std::vector<T>& v, int64_t N, int64_t C, int64_t H, int64_t W) {
  return permute_channels(v, N, C, H, W, false);
}

}  // namespace cnn::test
