// Tensor storage and copies across devices.
#include "core/tensor.h"

#include <cstring>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/checked.h"
#include "core/error.h"

namespace cnn {

Tensor Tensor::empty(const Shape& shape, Device device, const std::string& what, DType dtype) {
  CNN_CHECK(shape.numel() >= 0, "negative shape {}", shape.to_string());
  Tensor t;
  t.m_shape = shape;
  t.m_device = device;
  t.m_dtype = dtype;
  const size_t bytes = checked_bytes(shape.numel(), dtype_size(dtype), what.c_str());
  void* p = device_malloc(device, bytes, what);
  t.m_storage = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
  t.m_data = p;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device device, const std::string& what, DType dtype) {
  Tensor t = empty(shape, device, what, dtype);
  t.zero();
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  CNN_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "{} values for shape {}", values.size(),
            shape.to_string());
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::wrap(float* data, const Shape& shape, Device device) { return wrap(data, shape, device, DType::f32); }

Tensor Tensor::wrap(void* data, const Shape& shape, Device device, DType dtype) {
  Tensor t;
  t.m_data = data;
  t.m_shape = shape;
  t.m_device = device;
  t.m_dtype = dtype;
  return t;
}

float* Tensor::f32_data() const {
  if (m_dtype != DType::f32)
    CNN_THROW("a {} tensor of shape {} was read as f32 data", to_string(m_dtype), m_shape.to_string());
  return static_cast<float*>(m_data);
}

Tensor Tensor::reshape(const Shape& shape) const {
  CNN_CHECK(shape.numel() == numel(), "cannot reshape {} to {}", m_shape.to_string(), shape.to_string());
  Tensor t = *this;
  t.m_shape = shape;
  return t;
}

Tensor Tensor::clone() const { return to(m_device); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(m_shape, device, "tensor", m_dtype);
  device_memcpy(t.m_data, device, m_data, m_device, bytes());
  return t;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  if (m_dtype == DType::f32 || m_dtype == DType::f32cl) {  // storage order
    device_memcpy(v.data(), Device::cpu, m_data, m_device, bytes());
    return v;
  }
  CNN_CHECK(m_dtype == DType::bf16 || m_dtype == DType::f16, "to_vector of a {} tensor", to_string(m_dtype));
  std::vector<uint16_t> h(v.size());
  device_memcpy(h.data(), Device::cpu, m_data, m_device, bytes());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = m_dtype == DType::bf16 ? float_from_bf16_bits(h[i]) : float_from_f16_bits(h[i]);
  return v;
}

void Tensor::zero() { device_memset_zero(m_device, m_data, bytes()); }

void Tensor::copy_from(const Tensor& src) {
  CNN_CHECK(src.numel() == numel(), "copy of {} into {}", src.shape().to_string(), m_shape.to_string());
  CNN_CHECK(src.dtype() == m_dtype, "copy of a {} tensor into a {} one", to_string(src.dtype()), to_string(m_dtype));
  device_memcpy(m_data, m_device, src.m_data, src.m_device, bytes());
}

}  // namespace cnn
