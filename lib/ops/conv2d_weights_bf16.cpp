// Host part of conv2d_weights_bf16.h compiled in every build: the layout names, which shapes have
// which layout, the check of a prepacked copy (packed_weights.h) and the building of a batched
// pack's table.
#include "ops/conv2d_weights_bf16.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

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

const void* packed_weights_for(const PackedWeights16& p, DType t, Bf16WeightLayout layout, const char* what) {
  if (!p.data) return nullptr;
  CNN_CHECK(p.dtype == t && p.layout == layout,
            "{}: the prepacked weight copy is {} {}, but this row reads {} {} (a weight pack planned for another "
            "algorithm)",
            what, to_string(p.dtype), to_string(p.layout), to_string(t), to_string(layout));
  return p.data;
}

void add_weight_pack(std::vector<WeightPackEntry>& table, const float* w, void* out, const WeightsBf16Dims& d,
                     Bf16WeightLayout layout, DType dtype) {
  CNN_CHECK(w && out, "weight pack: null weights or copy");
  CNN_CHECK(dtype == DType::bf16 || dtype == DType::f16, "weight pack: a {} copy (expected bf16 or f16)",
            to_string(dtype));
  CNN_CHECK(reinterpret_cast<uintptr_t>(out) % (kWeightPackGroup * 2) == 0,
            "weight pack: the copy must be {}-byte aligned", kWeightPackGroup * 2);
  CNN_CHECK(d.K >= 1 && d.Cg >= 1 && d.R >= 1 && d.S >= 1, "weight pack: dims {}x{}x{}x{} must be positive", d.K, d.Cg,
            d.R, d.S);
  const int64_t n = int64_t(d.K) * d.Cg * d.R * d.S;
  CNN_CHECK(n <= int64_t{0x7fffffff}, "weight pack: {} elements exceed the int index of the pack", n);
  CNN_CHECK(layout != Bf16WeightLayout::rsk || d.Cg == 1, "weight pack: layout rsk needs C/groups == 1, got {}", d.Cg);
  WeightPackEntry e;
  e.w = w;
  e.out = out;
  e.d = d;
  e.n = int(n);
  e.layout = layout;
  e.f16 = dtype == DType::f16 ? 1 : 0;
  if (table.size() % kWeightPackEntriesPerLaunch != 0) {  // else the first of a new slice: first 0
    const WeightPackEntry& prev = table.back();
    e.first = prev.first + (int64_t(prev.n) + kWeightPackGroup - 1) / kWeightPackGroup * kWeightPackGroup;
  }
  table.push_back(e);
}

std::vector<int64_t> weight_pack_slice_groups(const std::vector<WeightPackEntry>& table) {
  std::vector<int64_t> groups;
  for (size_t s = 0; s < table.size(); s += kWeightPackEntriesPerLaunch) {
    const size_t last = std::min(table.size(), s + kWeightPackEntriesPerLaunch) - 1;
    groups.push_back((table[last].first + table[last].n + kWeightPackGroup - 1) / kWeightPackGroup);
  }
  return groups;
}

}  // namespace cnn
