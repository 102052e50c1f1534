// An owning, reference-counted float32 buffer with a shape and a device. Copies share storage
// (like a view); use clone() for a deep copy. Views into a larger buffer (the executor's pools)
// are made with Tensor::wrap, which does not own its memory: the pool must outlive them.
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
  static Tensor empty(const Shape& shape, Device device = Device::cpu, const std::string& what = "tensor");
  static Tensor zeros(const Shape& shape, Device device = Device::cpu, const std::string& what = "tensor");
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  // A non-owning view over memory someone else keeps alive.
  static Tensor wrap(float* data, const Shape& shape, Device device = Device::cpu);

  float* data() { return m_data; }
  const float* data() const { return m_data; }
  const Shape& shape() const { return m_shape; }
  int64_t numel() const { return m_shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * sizeof(float); }
  Device device() const { return m_device; }
  // Every tensor stores f32 until mixed precision gives tensors other dtypes; op operands are taken
  // from a tensor through view(), so they carry the tensor's dtype to the dispatcher.
  DType dtype() const { return DType::f32; }
  View view() { return View(static_cast<void*>(m_data), dtype()); }
  ConstView view() const { return ConstView(static_cast<const void*>(m_data), dtype()); }
  bool defined() const { return m_data != nullptr || numel() == 0; }

  // Same storage, another shape of equal element count.
  Tensor reshape(const Shape& shape) const;
  Tensor clone() const;
  Tensor to(Device device) const;
  std::vector<float> to_vector() const;  // copies to the host
  void zero();
  void copy_from(const Tensor& src);  // shapes must have equal numel

  // CPU only: element access for tests and small host-side code.
  float& at(int64_t i) { return m_data[i]; }
  float at(int64_t i) const { return m_data[i]; }

private:
  std::shared_ptr<void> m_storage;
  float* m_data = nullptr;
  Shape m_shape;
  Device m_device = Device::cpu;
};

}  // namespace cnn
