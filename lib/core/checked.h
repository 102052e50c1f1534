// Overflow-checked integer arithmetic for shapes and sizes, and the per-tensor element cap.
// Every size computed from user input (model file, --set, --batch, checkpoint metadata) goes
// through Checked, narrow_to_int or check_tensor_cap, so a value that does not fit is an error
// that names it, never a wrapped or truncated number.
// Trap: the cap bounds one tensor (activations at the run's batch, parameters, the input); once a
// shape is within it, any product of some of its dimensions is too, so code past shape inference
// may multiply dimensions of one tensor freely. Sizes of different tensors (a kernel times a
// dilation, a batch times a sample) are not covered by that and must be checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

// The most elements one tensor of the model may have: 2^31 (8 GiB of FP32). Indices into such a
// tensor fit a 32-bit int, which our CUDA kernels, OpenBLAS's int sizes and cuDNN's int API rely on.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 31;

// An int64_t that remembers whether any step of its computation overflowed (or divided by 0).
// Checked(a) * b + c is exact or not ok(); value() throws cnn::Error naming what was computed.
class Checked {
public:
  constexpr Checked(int64_t v) : m_value(v) {}  // NOLINT: implicit, so int64_t operands mix in
  bool ok() const { return m_ok; }
  // The value; throws cnn::Error "<what> does not fit a 64-bit integer" when not ok().
  int64_t value(const std::string& what) const;

  friend Checked operator+(Checked a, Checked b) {
    int64_t r = 0;
    const bool over = __builtin_add_overflow(a.m_value, b.m_value, &r);
    return Checked(r, a.m_ok && b.m_ok && !over);
  }
  friend Checked operator-(Checked a, Checked b) {
    int64_t r = 0;
    const bool over = __builtin_sub_overflow(a.m_value, b.m_value, &r);
    return Checked(r, a.m_ok && b.m_ok && !over);
  }
  friend Checked operator*(Checked a, Checked b) {
    int64_t r = 0;
    const bool over = __builtin_mul_overflow(a.m_value, b.m_value, &r);
    return Checked(r, a.m_ok && b.m_ok && !over);
  }
  // Truncating division, as C++'s; division by 0 and INT64_MIN / -1 are not ok.
  friend Checked operator/(Checked a, Checked b) {
    if (b.m_value == 0 || (b.m_value == -1 && a.m_value == INT64_MIN)) return Checked(0, false);
    return Checked(a.m_value / b.m_value, a.m_ok && b.m_ok);
  }

private:
  constexpr Checked(int64_t v, bool ok) : m_value(v), m_ok(ok) {}
  int64_t m_value = 0;
  bool m_ok = true;
};

// The product of `dims` (1 for none); not ok() when it overflows.
Checked checked_product(const std::vector<int64_t>& dims);

// `v` as an int; throws cnn::Error "<what> <v> is out of range (at most 2147483647, ...)" when it
// does not fit (negative values pass through for the caller's own sign check).
int narrow_to_int(int64_t v, const char* what);

// Throws cnn::Error when `elements` (not ok: more than 64 bits hold) is over kMaxTensorElements,
// with tensor_cap_message's text.
void check_tensor_cap(Checked elements, const std::string& what);
// The one wording of the cap, also for callers that throw their own error (a ConfigError at a key):
// "<what> would have N elements, over the per-tensor cap of 2147483648 (2^31) elements", where an
// overflowed count reads "more elements than a 64-bit integer counts".
std::string tensor_cap_message(Checked elements, const std::string& what);
bool within_tensor_cap(Checked elements);

// elements * elem_size bytes; throws cnn::Error naming `what` when negative or over SIZE_MAX.
size_t checked_bytes(Checked elements, size_t elem_size, const char* what);

}  // namespace cnn
