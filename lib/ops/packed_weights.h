// Prepacked 16-bit weight copies: the bf16 (f16) copy of a conv2d or dense layer's FP32 master
// weights in the layout its row reads, packed once per training step for every layer at once
// (graph/weight_packs.h) instead of inside each op call. A bf16/f16 conv2d or dense row given one
// (the op arguments' w16) reads it and packs nothing; given none it packs (casts) its own copy into
// ctx.workspace as before. The copy holds the same roundings either way (core/bf16.h, core/fp16.h).
// Trap: a copy must be of this step's master weights; the caller (the executor) packs at the start
// of each training forward and passes copies only to that forward and its backward.
#pragma once

#include "core/dtype.h"

namespace cnn {

// Layouts of a packed copy (ops/conv2d_weights_bf16.h says which kernels read which):
//   kcrs (K, C/groups, R, S) the master's own order (dense: (K, C))
//   krsc (K, R, S, C)  crsk (C, R, S, K)  rsk (R, S, K), C/groups == 1
enum class Bf16WeightLayout { kcrs, krsc, crsk, rsk };
const char* to_string(Bf16WeightLayout layout);  // "kcrs" ... (conv2d_weights_bf16.cpp)

// The FP32 master's dims (K, C/groups, R, S); dense weights (K, C) are (K, C, 1, 1). Plain ints so
// kernels take it by value.
struct WeightsBf16Dims {
  int K, Cg, R, S;
};

// A prepacked copy as an op argument: data null means none (the row packs its own).
struct PackedWeights16 {
  const void* data = nullptr;  // dtype elements in `layout`
  DType dtype = DType::bf16;   // bf16 or f16
  Bf16WeightLayout layout = Bf16WeightLayout::kcrs;
};

// The copy a row of activation dtype `t` that reads `layout` may take: p.data, or null when none
// was given. Throws cnn::Error (naming `what`) when the copy is of another dtype or layout: a
// planning bug that would otherwise compute with the wrong weights.
const void* packed_weights_for(const PackedWeights16& p, DType t, Bf16WeightLayout layout, const char* what);

}  // namespace cnn
