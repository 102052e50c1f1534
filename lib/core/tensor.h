// An owning, reference-counted buffer with a shape, a device and an element type (f32 unless
// made otherwise). Copies share storage (like a view); use clone() for a deep copy. Views into a
// larger buffer (the executor's pools) are made with Tensor::wrap, which does not own its memory:
// the pool must outlive them.
// Layout: an f32 activation of shape (N, C, H, W) is stored NCHW; a bf16, f16 or f32cl (FP32
// channels-last) activation of the same logical shape is stored channels-last, (N, H, W, C) (the
// mixed-precision kernels read it so; see ops/dispatch.h). Shapes are always the logical NCHW
// ones; rank-2 (N, F) tensors are the same in both layouts. Parameters, gradients and buffers are always f32.
// Trap: data() and at() are the f32 accessors and throw on another dtype; raw() is untyped.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/view.h"

namespace cnn {

class Tensor {
public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, Device device = Device::cpu, const std::string& what = "tensor",
                      DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu, const std::string& what = "tensor",
                      DType dtype = DType::f32);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  // A non-owning view over memory someone else keeps alive.
  static Tensor wrap(float* data, const Shape& shape, Device device = Device::cpu);
  static Tensor wrap(void* data, const Shape& shape, Device device, DType dtype);

  // The f32 data; throws cnn::Error for a tensor of another dtype.
  float* data() { return f32_data(); }
  const float* data() const { return f32_data(); }
  void* raw() { return m_data; }
  const void* raw() const { return m_data; }
  const Shape& shape() const { return m_shape; }
  int64_t numel() const { return m_shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(m_dtype); }
  Device device() const { return m_device; }
  // Op operands are taken from a tensor through view(), so they carry the tensor's dtype to the
  // dispatcher.
  DType dtype() const { return m_dtype; }
  View view() { return View(m_data, m_dtype); }
  ConstView view() const { return ConstView(m_data, m_dtype); }
  bool defined() const { return m_data != nullptr || numel() == 0; }

  // Same storage, another shape of equal element count.
  Tensor reshape(const Shape& shape) const;
  Tensor clone() const;
  Tensor to(Device device) const;
  // Copies to the host as floats in storage order (bf16 and f16 widened exactly).
  std::vector<float> to_vector() const;
  void zero();
  void copy_from(const Tensor& src);  // equal numel and dtype

  // CPU only: element access for tests and small host-side code (f32 tensors).
  float& at(int64_t i) { return f32_data()[i]; }
  float at(int64_t i) const { return f32_data()[i]; }

private:
  float* f32_data() const;
  std::shared_ptr<void> m_storage;
  void* m_data = nullptr;
  Shape m_shape;
  Device m_device = Device::cpu;
  DType m_dtype = DType::f32;
};

}  // namespace cnn
