// Host part of conv2d_weights_bf16.h compiled in every build: the layout names and which shapes
// have which layout.
#include "ops/conv2d_weights_bf16.h"

namespace cnn {

const char* to_string(Bf16WeightLayout layout) {
  switch (layout) {
    case Bf16WeightLayout::kcrs:
      return "kcrs";
    case Bf16WeightLayout::krsc:
      return "krsc";
    case Bf16WeightLayout::crsk:
      return "crsk";
    case Bf16WeightLayout::rsk:
      return "rsk";
  }
  return "?";
}

bool conv2d_weights_bf16_supports(const Conv2dShape& sh, Bf16WeightLayout layout) {
  if (sh.groups < 1 || sh.C % sh.groups != 0 || sh.weight_numel() > int64_t{0x7fffffff}) return false;
  if (layout == Bf16WeightLayout::crsk) return sh.groups == 1;
  if (layout == Bf16WeightLayout::rsk) return sh.C == sh.groups;
  return true;
}

}  // namespace cnn
