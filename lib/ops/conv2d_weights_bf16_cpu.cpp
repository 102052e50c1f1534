// CPU packing of BF16 weight copies (conv2d_weights_bf16.h): the oracle of the CUDA version.
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
