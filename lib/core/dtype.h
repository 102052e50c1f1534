// Element types: of tensors and op operands, and of checkpoint files (lib/checkpoint reads and
// writes every one of them in safetensors). Ops compute in f32 today; bf16 and f16 are the dtypes
// mixed precision adds rows for, without changing any op signature (ops/dispatch.h).
// Trap: a dtype says how values are stored, not how an op accumulates: every op accumulates in
// FP32 (or double) whatever its operands' dtype.
#pragma once

#include <cstddef>

namespace cnn {

// f32cl: f32 values stored channels-last, the activations of a tf32 layer on a GPU (train.tf32_layout;
// ops/convert.h activation_layout). Never a file's dtype: the checkpoint code reads and writes f32.
enum class DType { f32, f64, f16, bf16, f8_e4m3, f8_e5m2, i64, i32, i16, i8, u64, u32, u16, u8, boolean, f32cl };

// Whether t is one of the 16-bit float activation dtypes (bf16, f16).
inline bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }

// "f32" | "bf16" | "f16" | ... | "bool" (dtype.cpp; the file format's own names are
// safetensors.h's dtype_name).
const char* to_string(DType t);
// Bytes of one element.
size_t dtype_size(DType t);

}  // namespace cnn
