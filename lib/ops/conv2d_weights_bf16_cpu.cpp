// CPU packing of BF16 weight copies (conv2d_weights_bf16.h): the oracle of the CUDA version.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "ops/conv2d_weights_bf16.h"

namespace cnn {

void conv2d_pack_weights_bf16_cpu(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout,
                                  const float* w, bf16* out) {
  CNN_CHECK(conv2d_weights_bf16_supports(sh, layout), "pack weights bf16: layout {} does not exist for {}",
            to_string(layout), sh.to_string());
  const WeightsBf16Dims d{int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)};
  const int n = int(sh.weight_numel());
#pragma omp parallel for num_threads(ctx.threads()) schedule(static) if (n > (1 << 16))
  for (int o = 0; o < n; ++o) out[o] = to_bf16(w[conv2d_weights_bf16_index(layout, d, o)]);
}

}  // namespace cnn

namespace cnn {

// The CUDA kernel's walk (conv2d_weights_bf16_cuda.cu) in host loops: slices, groups, the entry by
// binary search, the elements of the group that lie in the copy.
void conv2d_pack_weights_batch_cpu(const std::vector<WeightPackEntry>& table) {
  const std::vector<int64_t> groups = weight_pack_slice_groups(table);
  for (size_t s = 0; s < groups.size(); ++s) {
    const WeightPackEntry* slice = table.data() + s * kWeightPackEntriesPerLaunch;
    const int count = int(std::min<size_t>(kWeightPackEntriesPerLaunch, table.size() - s * kWeightPackEntriesPerLaunch));
    for (int64_t g = 0; g < groups[s]; ++g) {
      const int64_t o0 = g * kWeightPackGroup;
      const WeightPackEntry& e = slice[weight_pack_find(slice, count, o0)];
      auto* out = static_cast<uint16_t*>(e.out);
      for (int64_t o = o0 - e.first; o < o0 - e.first + kWeightPackGroup && o < e.n; ++o) {
        const float v = e.w[conv2d_weights_bf16_index(e.layout, e.d, int(o))];
        out[o] = e.f16 ? f16_bits_from_float(v) : bf16_bits_from_float(v);
      }
    }
  }
}

}  // namespace cnn
