// BF16 working copies of a convolution's FP32 master weights (K, C/groups, R, S), cast (round to
// nearest even, core/bf16.h) and permuted in one pass into the layout a BF16 kernel reads:
//   kcrs  (K, C/groups, R, S)  the NCHW kernels (conv2d_igemm_bf16.h, conv2d_direct_bf16.h)
//   krsc  (K, R, S, C)         NHWC implicit GEMM forward (conv2d_igemm_nhwc_bf16.h)
//   crsk  (C, R, S, K)         NHWC implicit GEMM backward data (the same taps, transposed)
//   rsk   (R, S, K)            NHWC direct kernels, C/groups == 1 (conv2d_direct_nhwc_bf16.h)
// F16 copies (fp16 rows) use the same layouts: conv2d_pack_weights_cuda's f16 overload rounds to the
// nearest f16 (core/fp16.h); a master weight past 65504 in magnitude becomes inf there (FP32 master
// weights that large would be a diverged run anyway: the loss scaler sees the inf outputs).
// Trap: crsk needs groups == 1 and rsk needs C/groups == 1 (the pack throws otherwise); the index
// map is written once (conv2d_weights_bf16_index) for the CPU and CUDA versions, so both give the
// same bits.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"
#include "core/host_device.h"
#include "ops/conv2d.h"
#include "ops/packed_weights.h"

namespace cnn {

// Whether `layout` exists for sh (crsk: groups == 1; rsk: C/groups == 1). Non-throwing.
bool conv2d_weights_bf16_supports(const Conv2dShape& sh, Bf16WeightLayout layout);

// Element o of the packed copy (o < K*(C/groups)*R*S) comes from element return of the FP32
// master (K, Cg, R, S) (WeightsBf16Dims: ops/packed_weights.h).
CNN_HD int conv2d_weights_bf16_index(Bf16WeightLayout layout, const WeightsBf16Dims& d, int o) {
  const int RS = d.R * d.S;
  switch (layout) {
    case Bf16WeightLayout::krsc: {  // o = (k * RS + rs) * Cg + c
      const int c = o % d.Cg, krs = o / d.Cg, rs = krs % RS, k = krs / RS;
      return (k * d.Cg + c) * RS + rs;
    }
    case Bf16WeightLayout::crsk: {  // o = (c * RS + rs) * K + k
      const int k = o % d.K, crs = o / d.K, rs = crs % RS, c = crs / RS;
      return (k * d.Cg + c) * RS + rs;
    }
    case Bf16WeightLayout::rsk: {  // o = rs * K + k, Cg == 1
      const int k = o % d.K, rs = o / d.K;
      return k * RS + rs;
    }
    case Bf16WeightLayout::kcrs:
      break;
  }
  return o;
}

// w (K, C/groups, R, S) FP32 -> out (layout) BF16 or F16; K*(C/groups)*R*S elements either way.
void conv2d_pack_weights_bf16_cpu(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout,
                                  const float* w, bf16* out);
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              bf16* out);
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              f16* out);

// ---- Batched packing: many copies (every layer's of a training step) in one kernel launch ----
// A table of entries, each one copy, cut in slices of kWeightPackEntriesPerLaunch entries (a launch
// each; one launch for any model we have). In a slice the copies' elements are numbered one after
// another in one flat range, each copy's from `first`, a multiple of kWeightPackGroup (the elements
// between the end of a copy and the next `first` are padding, written by no one). Thread t packs
// the group of kWeightPackGroup elements at t * kWeightPackGroup: its entry is found by a binary
// search of the slice (in shared memory), and its values are the per-copy pack's (the same index
// map and rounding), so a batched copy has exactly the bits conv2d_pack_weights_cuda writes.
inline constexpr int kWeightPackGroup = 4;
inline constexpr int kWeightPackEntriesPerLaunch = 256;
struct WeightPackEntry {
  const float* w = nullptr;  // FP32 master (K, Cg, R, S)
  void* out = nullptr;       // (layout) 16-bit copy, 8-byte aligned
  int64_t first = 0;         // index of its first element in its slice's flat range
  WeightsBf16Dims d{};
  int n = 0;                 // K * Cg * R * S
  Bf16WeightLayout layout = Bf16WeightLayout::kcrs;
  int f16 = 0;               // 1: an f16 copy, 0: bf16
};
static_assert(std::is_trivially_copyable_v<WeightPackEntry>, "the table is copied to the device byte for byte");
// Appends a copy of w (dims d) of dtype bf16 or f16 in `layout` into out, after the entries already
// in `table`; throws when the dims, the dtype or out's alignment cannot be packed.
void add_weight_pack(std::vector<WeightPackEntry>& table, const float* w, void* out, const WeightsBf16Dims& d,
                     Bf16WeightLayout layout, DType dtype);
// The groups (threads) of each slice of `table`, in slice order.
std::vector<int64_t> weight_pack_slice_groups(const std::vector<WeightPackEntry>& table);
// The entry of a slice (sorted by first, the first one's 0) holding flat element o.
CNN_HD int weight_pack_find(const WeightPackEntry* slice, int count, int64_t o) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (slice[mid].first <= o) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
// Every copy of a table in host memory: the oracle of the CUDA version.
void conv2d_pack_weights_batch_cpu(const std::vector<WeightPackEntry>& table);
// The same for a table of `count` entries in device memory (what add_weight_pack built, copied
// there), slice_groups its weight_pack_slice_groups; one launch per slice on ctx's stream.
// Capturable: no allocation, no synchronisation.
void conv2d_pack_weights_batch_cuda(const ExecContext& ctx, const WeightPackEntry* table, int count,
                                    const std::vector<int64_t>& slice_groups);

}  // namespace cnn
