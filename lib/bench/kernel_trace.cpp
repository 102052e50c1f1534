// What every build shares of kernel_trace.h: the union of kernel intervals and the categories.
#include "bench/kernel_trace.h"

#include <algorithm>
#include <cctype>

namespace cnn {

uint64_t busy_ns(const std::vector<KernelRecord>& records) {
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  iv.reserve(records.size());
  for (const auto& r : records)
    if (r.end_ns > r.start_ns) iv.emplace_back(r.start_ns, r.end_ns);
  std::sort(iv.begin(), iv.end());
  uint64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : iv) {
    if (!open || s > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

static bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string kernel_category(const std::string& name) {
  std::string s(name.size(), ' ');
  std::transform(name.begin(), name.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  // Casts and weight packing first: conv2d_pack_weights_* is packing, not convolution.
  if (has(s, "cast_") || has(s, "convert_kernel") || has(s, "convert<") || has(s, "pack_weights") ||
      has(s, "transpose_weights") || has(s, "narrow_") || has(s, "widen_"))
    return "cast/pack";
  if (has(s, "batchnorm") || has(s, "batch_norm") || has(s, "bn_fw") || has(s, "bn_bw"))
    return "batchnorm";
  if (has(s, "conv") || has(s, "igemm") || has(s, "wgmma") || has(s, "fprop") || has(s, "dgrad") ||
      has(s, "wgrad") || has(s, "winograd") || has(s, "fft") || has(s, "im2col") || has(s, "col2im") ||
      has(s, "implicit_convolve") || has(s, "xmma_conv"))
    return "conv";
  if (has(s, "gemm") || has(s, "gemv") || has(s, "cublas") || has(s, "cutlass") || has(s, "splitk") ||
      has(s, "nvjet"))
    return "gemm";
  if (has(s, "pool")) return "pool";
  if (has(s, "activation") || has(s, "relu")) return "activation";
  if (has(s, "add_") || has(s, "concat") || has(s, "dropout")) return "add/concat/dropout";
  if (has(s, "softmax") || has(s, "cross_entropy") || has(s, "loss")) return "loss";
  if (has(s, "optimizer") || has(s, "grad_norm") || has(s, "clip_grad") || has(s, "all_finite") ||
      has(s, "sgd") || has(s, "adam") || has(s, "bucket_"))
    return "optimizer";
  return "other";
}

}  // namespace cnn
