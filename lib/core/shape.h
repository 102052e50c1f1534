// Shape of a tensor: up to 8 dims of int64_t, row-major (the last dim is contiguous).
// Activations are NCHW; per-sample shapes (C, H, W) are used by shape inference, N is added later.
// numel() is overflow-checked (core/checked.h): a shape whose element count does not fit 64 bits
// throws instead of wrapping; the per-tensor cap is checked where model shapes are made.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace cnn {

class Shape {
public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : m_dims(dims) {}
  explicit Shape(std::vector<int64_t> dims) : m_dims(std::move(dims)) {}

  int rank() const { return static_cast<int>(m_dims.size()); }
  int64_t operator[](int i) const { return m_dims[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t& operator[](int i) { return m_dims[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const;  // throws cnn::Error when the product overflows int64_t
  const std::vector<int64_t>& dims() const { return m_dims; }
  // This shape with a leading batch dimension.
  Shape with_batch(int64_t n) const {
    std::vector<int64_t> d{n};
    d.insert(d.end(), m_dims.begin(), m_dims.end());
    return Shape(std::move(d));
  }
  // This shape without its leading dimension.
  Shape drop_batch() const { return Shape(std::vector<int64_t>(m_dims.begin() + (m_dims.empty() ? 0 : 1), m_dims.end())); }
  bool operator==(const Shape& o) const { return m_dims == o.m_dims; }
  bool operator!=(const Shape& o) const { return m_dims != o.m_dims; }
  std::string to_string() const;  // "[64, 1, 48, 48]"

private:
  std::vector<int64_t> m_dims;
};

}  // namespace cnn
