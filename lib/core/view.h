// Typed, non-owning operand views: a pointer and the dtype of what it points to. Op argument
// structs (ops/*.h) take their tensor operands as views, so an entry point states its operands'
// dtypes once and keeps one signature for every dtype; the dispatcher picks the implementation
// row by the dtype (ops/dispatch.h).
// Trap: a view knows no shape and no device; the op's shape struct and context say those. A raw
// float pointer converts implicitly to an f32 view (a bf16 or f16 one to a view of that dtype, and
// nullptr to a null view), so host code and tests pass plain float buffers as they always did.
#pragma once

#include <cstddef>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/dtype.h"
#include "core/error.h"

namespace cnn {

// The dtype of an element type: DTypeOf<bf16>::value is DType::bf16 (code templated on the
// storage type, like the bf16 and f16 emulation rows, names its views' dtype with it).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::f16;
};

namespace detail {
[[noreturn]] inline void view_dtype_mismatch(DType got, DType expected) {
  CNN_THROW("an operand of dtype {} reached an implementation that reads {}", to_string(got), to_string(expected));
}
}  // namespace detail

// A read-only operand.
class ConstView {
public:
  constexpr ConstView() = default;
  constexpr ConstView(std::nullptr_t) {}
  constexpr ConstView(const float* p) : m_data(p), m_dtype(DType::f32) {}
  constexpr ConstView(const bf16* p) : m_data(p), m_dtype(DType::bf16) {}
  constexpr ConstView(const f16* p) : m_data(p), m_dtype(DType::f16) {}
  constexpr ConstView(const void* p, DType t) : m_data(p), m_dtype(t) {}

  constexpr const void* data() const { return m_data; }
  constexpr DType dtype() const { return m_dtype; }
  constexpr bool null() const { return m_data == nullptr; }
  // The pointer as f32 data (f32, or f32cl: the same values channels-last); throws cnn::Error when
  // the view holds another dtype. A null view gives null whatever its dtype (an operand not wanted
  // in this call).
  // Trap: f32cl reads as f32 so that a layout-free f32 row (an element-wise op, dense) can be the
  // f32cl row too; the dispatcher (rows keyed by dtype) is what keeps an NCHW row from f32cl data.
  const float* f32() const {
    if (m_data && m_dtype != DType::f32 && m_dtype != DType::f32cl) detail::view_dtype_mismatch(m_dtype, DType::f32);
    return static_cast<const float*>(m_data);
  }
  // The same for bf16 data (stored channels-last when it is an activation: core/tensor.h).
  const bf16* bf16_data() const {
    if (m_data && m_dtype != DType::bf16) detail::view_dtype_mismatch(m_dtype, DType::bf16);
    return static_cast<const bf16*>(m_data);
  }
  // The same for f16 data (stored like bf16).
  const f16* f16_data() const {
    if (m_data && m_dtype != DType::f16) detail::view_dtype_mismatch(m_dtype, DType::f16);
    return static_cast<const f16*>(m_data);
  }

private:
  const void* m_data = nullptr;
  DType m_dtype = DType::f32;
};

// A written (or read and written) operand.
class View {
public:
  constexpr View() = default;
  constexpr View(std::nullptr_t) {}
  constexpr View(float* p) : m_data(p), m_dtype(DType::f32) {}
  constexpr View(bf16* p) : m_data(p), m_dtype(DType::bf16) {}
  constexpr View(f16* p) : m_data(p), m_dtype(DType::f16) {}
  constexpr View(void* p, DType t) : m_data(p), m_dtype(t) {}

  constexpr void* data() const { return m_data; }
  constexpr DType dtype() const { return m_dtype; }
  constexpr bool null() const { return m_data == nullptr; }
  float* f32() const {
    if (m_data && m_dtype != DType::f32 && m_dtype != DType::f32cl) detail::view_dtype_mismatch(m_dtype, DType::f32);
    return static_cast<float*>(m_data);
  }
  bf16* bf16_data() const {
    if (m_data && m_dtype != DType::bf16) detail::view_dtype_mismatch(m_dtype, DType::bf16);
    return static_cast<bf16*>(m_data);
  }
  f16* f16_data() const {
    if (m_data && m_dtype != DType::f16) detail::view_dtype_mismatch(m_dtype, DType::f16);
    return static_cast<f16*>(m_data);
  }
  constexpr operator ConstView() const { return ConstView(m_data, m_dtype); }

private:
  void* m_data = nullptr;
  DType m_dtype = DType::f32;
};

}  // namespace cnn
