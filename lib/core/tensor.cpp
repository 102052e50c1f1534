// Tensor storage and copies across devices.
#include "core/tensor.h"

#include "core/checked.h"
#include "core/error.h"

namespace cnn {

Tensor Tensor::empty(const Shape& shape, Device device, const std::string& what) {
  CNN_CHECK(shape.numel() >= 0, "negative shape {}", shape.to_string());
  Tensor t;
  t.m_shape = shape;
  t.m_device = device;
  const size_t bytes = checked_bytes(shape.numel(), sizeof(float), what.c_str());
  void* p = device_malloc(device, bytes, what);
  t.m_storage = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
  t.m_data = static_cast<float*>(p);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device device, const std::string& what) {
  Tensor t = empty(shape, device, what);
  t.zero();
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  CNN_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "{} values for shape {}", values.size(),
            shape.to_string());
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.m_data);
  return t;
}

Tensor Tensor::wrap(float* data, const Shape& shape, Device device) {
  Tensor t;
  t.m_data = data;
  t.m_shape = shape;
  t.m_device = device;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  CNN_CHECK(shape.numel() == numel(), "cannot reshape {} to {}", m_shape.to_string(), shape.to_string());
  Tensor t = *this;
  t.m_shape = shape;
  return t;
}

Tensor Tensor::clone() const { return to(m_device); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(m_shape, device);
  device_memcpy(t.m_data, device, m_data, m_device, bytes());
  return t;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  device_memcpy(v.data(), Device::cpu, m_data, m_device, bytes());
  return v;
}

void Tensor::zero() { device_memset_zero(m_device, m_data, bytes()); }

void Tensor::copy_from(const Tensor& src) {
  CNN_CHECK(src.numel() == numel(), "copy of {} into {}", src.shape().to_string(), m_shape.to_string());
  device_memcpy(m_data, m_device, src.m_data, src.m_device, bytes());
}

}  // namespace cnn
